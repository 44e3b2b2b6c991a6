"""The one exception type the traces package raises for user-facing problems."""

from __future__ import annotations

from typing import Any

from specsim.messages import show  # noqa: F401  (traces quote values this way)


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


def names(items: Any) -> str:
    """Names read from a file (a header, JSON keys) joined for a message, on one line."""
    text = ", ".join(str(item) for item in items)
    if not text.isprintable() or len(text) > 160:  # twice what `show` keeps
        return show(text)
    return text
