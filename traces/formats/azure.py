"""Azure LLM inference traces (2023 Splitwise release and the 2024 one-week release).

CSV with ``TIMESTAMP, ContextTokens, GeneratedTokens``. Timestamps are absolute date-times
(2024's carry a time zone); arrivals are seconds after the first request.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from traces.formats.common import assemble, concat
from traces.reading import column_ints, column_times_ns, iter_csv_chunks

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
) -> pd.DataFrame:
    """Read an Azure trace; arrival 0 is the first request's timestamp."""
    lines, times, prompt, output = [], [], [], []
    extras: dict[str, list[np.ndarray]] = {c: [] for c in keep_columns}
    for line_no, chunk in iter_csv_chunks(path, origin, REQUIRED, fmt=NAME, keep=keep_columns):
        lines.append(line_no)
        times.append(column_times_ns(chunk, line_no, "TIMESTAMP", origin))
        prompt.append(column_ints(chunk, line_no, "ContextTokens", origin))
        output.append(column_ints(chunk, line_no, "GeneratedTokens", origin))
        for c in keep_columns:
            extras[c].append(chunk[c].to_numpy(dtype=object))
    stamps = concat(times, np.int64)
    base = stamps.min() if sort else stamps[0]
    arrival = (stamps - base).astype(np.float64) / 1e9
    return assemble(
        origin,
        concat(lines, np.int64),
        arrival,
        concat(prompt, np.int64),
        concat(output, np.int64),
        keep_failed=keep_failed,
        sort=sort,
        time_column="TIMESTAMP",
        extras={c: concat(v, object) for c, v in extras.items()},
    )
