"""The one exception type the traces package raises for user-facing problems."""

from __future__ import annotations


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
