"""The one exception type the traces package raises for user-facing problems."""

from __future__ import annotations

from typing import Any

#: Longest quoted value in a message; longer ones are cut with an ellipsis.
_SHOW_CHARS = 80


class TraceError(ValueError):
    """A bad trace file or workload section, described in one line.

    The message names where the problem is (``FILE line N`` for a row, or a scenario
    key path such as ``workload.synthetic.arrival.rate``) and what was expected, so
    the CLI can print it as is: ``specsim: error: <message>``.
    """


def at_line(origin: str, line: int | None, message: str) -> TraceError:
    """Build a TraceError for ``origin`` (a file name), at ``line`` when one is known."""
    where = f"{origin} line {line}" if line is not None else origin
    return TraceError(f"{where}: {message}")


def show(value: Any) -> str:
    """A value as a message quotes it, on one line and short.

    Numbers print plainly (``-5``, ``-5.0``, ``nan``), never as a numpy repr such as
    ``np.float64(-5.0)``; text is quoted with its control characters escaped; anything
    longer than 80 characters is cut.
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
    if len(text) > _SHOW_CHARS:
        text = text[: _SHOW_CHARS - 3] + "..."
    return text


def names(items: Any) -> str:
    """Names read from a file (a header, JSON keys) joined for a message, on one line."""
    text = ", ".join(str(item) for item in items)
    if not text.isprintable() or len(text) > 2 * _SHOW_CHARS:
        return show(text)
    return text
