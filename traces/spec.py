"""Reading a YAML-parsed scenario section with one-line errors that name the key path.

Each ``Section`` remembers which keys the code asked for, so ``finish()`` can reject the
rest as unknown (with a "did you mean" hint): a typo in a scenario never passes silently.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specsim import values
from specsim.messages import show_path
from specsim.traces.errors import TraceError, show

#: The largest integer a key takes (2^53: exact as a float, far inside int64).


def _show(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return show(value)


def is_real(value: Any) -> bool:
    """A YAML number (int or float), not a boolean."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_finite(value: int | float) -> bool:
    """A finite number that fits a float (an int past 1e308 does not)."""
    try:
        number = float(value)
    except OverflowError:
        return False
    return number == number and abs(number) != float("inf")


class Section:
    """A mapping at key path ``path`` (e.g. ``workload.synthetic``)."""

    def __init__(self, data: Any, path: str) -> None:
        if not isinstance(data, Mapping):
            raise TraceError(f"{path}: expected a mapping of keys, got {_show(data)}")
        bad = [k for k in data if not isinstance(k, str)]
        if bad:
            raise TraceError(f"{path}: keys must be names, got {show(bad[0])}")
        self.data: Mapping[str, Any] = data
        self.path = path
        self.asked: set[str] = set()

    def key(self, name: str) -> str:
        """The full path of ``name`` inside this section."""
        return f"{self.path}.{name}"

    def error(self, name: str, expected: str, value: Any) -> TraceError:
        """A TraceError for a bad value at ``name``."""
        return TraceError(f"{self.key(name)}: expected {expected}, got {_show(value)}")

    def has(self, name: str) -> bool:
        """Whether ``name`` is present (and counts as a known key)."""
        self.asked.add(name)
        return name in self.data and self.data[name] is not None

    def raw(self, name: str, default: Any = None) -> Any:
        """The value as parsed, unchecked."""
        self.asked.add(name)
        value = self.data.get(name)
        return default if value is None else value

    def require(self, name: str, what: str) -> Any:
        """The value of a mandatory key."""
        if not self.has(name):
            raise TraceError(f"{self.key(name)}: missing; expected {what}")
        return self.data[name]

    def number(
        self,
        name: str,
        default: float | None = None,
        *,
        required: bool = False,
        positive: bool = False,
        minimum: float | None = None,
        maximum: float | None = None,
        integer: bool = False,
    ) -> float | None:
        """A number with range checks; ints stay ints when ``integer``."""
        kind = "an integer" if integer else "a number"
        if positive:
            kind = f"a positive {'integer' if integer else 'number'}"
        if minimum is not None and maximum is not None:
            kind += f" from {minimum:g} to {maximum:g}"
        elif minimum is not None:
            kind += f" >= {minimum:g}"
        elif maximum is not None:
            kind += f" <= {maximum:g}"
        if not self.has(name):
            if required:
                raise TraceError(f"{self.key(name)}: missing; expected {kind}")
            return default
        value = self.data[name]
        if isinstance(value, Mapping | list | tuple):
            raise self.error(name, "an integer" if integer else "a number", value)
        lo, exclusive = minimum, False
        if positive and (minimum is None or minimum <= 0):
            lo, exclusive = 0, True
        try:  # the shared rule: integers stop at 2^53, where a float no longer holds them
            return values.number(value, integer=integer, lo=lo, hi=maximum,
                                 exclusive_lo=exclusive)
        except values.ValueRuleError as exc:
            raise TraceError(f"{self.key(name)}: {exc}") from None

    def integer(self, name: str, default: int | None = None, **kw: Any) -> int | None:
        """An integer (see ``number``)."""
        value = self.number(name, default, integer=True, **kw)
        return None if value is None else int(value)

    def string(
        self, name: str, default: str | None = None, choices: tuple[str, ...] = ()
    ) -> str | None:
        """A non-empty string, optionally one of ``choices``."""
        if not self.has(name):
            return default
        value = self.data[name]
        if choices and value not in choices:
            raise self.error(name, "one of " + ", ".join(choices), value)
        if not isinstance(value, str) or not value:
            raise self.error(name, "a name", value)
        return value

    def boolean(self, name: str, default: bool = False) -> bool:
        """true / false."""
        if not self.has(name):
            return default
        value = self.data[name]
        if not isinstance(value, bool):
            raise self.error(name, "true or false", value)
        return value

    def section(self, name: str) -> Section:
        """A nested mapping."""
        return Section(self.raw(name, {}), self.key(name))

    def file(self, name: str, base_dir: Path) -> Path:
        """A path relative to the scenario's folder, which must exist."""
        value = self.require(name, "a file path")
        if not isinstance(value, str) or not value:
            raise self.error(name, "a file path", value)
        path = Path(value).expanduser()
        if not path.is_absolute():
            path = base_dir / path
        if not path.is_file():
            raise TraceError(f"{self.key(name)}: no such file {show_path(path)}")
        return path

    def finish(self) -> None:
        """Reject keys nobody asked for."""
        for name in self.data:
            if name not in self.asked:
                hint = difflib.get_close_matches(name, sorted(self.asked), n=1)
                allowed = ", ".join(sorted(self.asked)) or "none"
                tip = f"did you mean {show(hint[0])}? " if hint else ""
                raise TraceError(f"{self.key(name)}: unknown key ({tip}expected one of: {allowed})")
