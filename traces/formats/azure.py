"""Azure LLM inference traces (2023 Splitwise release and the 2024 one-week release).

CSV with ``TIMESTAMP, ContextTokens, GeneratedTokens``. Timestamps are absolute date-times
(2024's carry a time zone); arrivals are seconds after the first request.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from specsim.traces.formats.common import assemble, read_csv_columns
from specsim.traces.reading import column_ints, column_times_ns
from specsim.traces.schema import Trace

NAME = "azure"
REQUIRED = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def matches(header: Sequence[str]) -> bool:
    """Azure files are recognised by their distinctive column names."""
    return "TIMESTAMP" in header and "ContextTokens" in header


def load(
    path: Path,
    origin: str,
    *,
    keep_failed: bool = False,
    sort: bool = False,
    keep_columns: Sequence[str] = (),
) -> Trace:
    """Read an Azure trace; arrival 0 is the first request's timestamp."""
    lines, cols, extras = read_csv_columns(path, origin, NAME, REQUIRED, {
        "arrival": (lambda c, ln: column_times_ns(c, ln, "TIMESTAMP", origin), np.int64),
        "prompt": (lambda c, ln: column_ints(c, ln, "ContextTokens", origin), np.int64),
        "output": (lambda c, ln: column_ints(c, ln, "GeneratedTokens", origin), np.int64),
    }, keep_columns=keep_columns)
    stamps = cols["arrival"]
    base = stamps.min() if sort else stamps[0]
    # (a span past int64 nanoseconds, ~292 years, would wrap around: measured as floats)
    span = stamps.astype(np.float64) - float(base)
    arrival = np.where(np.abs(span) < 2.0**62, stamps - base, 0).astype(np.float64) / 1e9
    arrival = np.where(np.abs(span) < 2.0**62, arrival, span / 1e9)
    return assemble(origin, lines, arrival, cols["prompt"], cols["output"],
                    keep_failed=keep_failed, sort=sort, time_column="TIMESTAMP", extras=extras)
