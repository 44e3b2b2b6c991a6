"""How every specsim error message quotes values and names keys (one place for all three
packages): values short and on one line, unknown keys with a "did you mean", and the
pydantic errors the typed schemas raise with a message of their own.
"""

from __future__ import annotations

import difflib
from typing import Any

from pydantic_core import PydanticCustomError


def show(value: Any, limit: int = 80) -> str:
    """A value as a message quotes it, on one line and short.

    Numbers print plainly (``-5``, ``-5.0``, ``nan``), never as a numpy repr such as
    ``np.float64(-5.0)``; text is quoted with its control characters escaped; anything
    longer than ``limit`` characters is cut.
    """
    if type(value).__module__ == "numpy" and hasattr(value, "item"):  # a numpy scalar
        value = value.item()
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        # (a very long int cannot even be printed: Python limits int -> str conversion)
        text = f"~{'-' if value < 0 else ''}1e{int(abs(value).bit_length() * 0.30103)}"
    else:
        try:
            text = repr(value)
        except ValueError:  # a list holding such an int
            text = f"a {type(value).__name__}"
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def show_path(path: Any, limit: int = 120) -> str:
    """A file path as a message quotes it: cut at the front, not the end, so the file's
    own name always shows however deep the folder (a temporary or CI folder can be long)."""
    text = repr(str(path))
    if len(text) > limit:
        text = text[0] + "..." + text[len(text) - limit + 4:]
    return text


def unknown_key(name: Any, keys: list[str], qualifier: str = "") -> str:
    """``NAME: unknown key (did you mean 'x'? expected one of: a, b)`` without the path."""
    hint = difflib.get_close_matches(name, keys, n=1) if isinstance(name, str) else []
    tip = f"did you mean {hint[0]!r}? " if hint else ""
    return f"unknown key{qualifier} ({tip}expected one of: {', '.join(keys)})"


def fail(message: str) -> PydanticCustomError:
    """A schema check's own one-line message (the converters print it after the key)."""
    return PydanticCustomError("specsim", "{message}", {"message": message})


def fail_key(key: str, message: str) -> PydanticCustomError:
    """As ``fail``, about the sub-key ``key`` of the value being checked."""
    return PydanticCustomError("specsim_key", "{message}", {"key": key, "message": message})


def own_message(err: dict[str, Any], path: str) -> str | None:
    """``path: message`` for an error raised by ``fail``/``fail_key``; None for pydantic's."""
    if err["type"] == "specsim_key":
        return f"{path}.{err['ctx']['key']}: {err['ctx']['message']}"
    if err["type"] == "specsim":
        return f"{path}: {err['ctx']['message']}"
    return None
