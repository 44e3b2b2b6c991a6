"""Vidur's replay CSV: ``arrived_at`` (s), ``num_prefill_tokens``, ``num_decode_tokens``.

Times are kept as written, so specsim and Vidur replay exactly the same requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from traces.formats.common import assemble, concat
from traces.reading import column_floats, column_ints, iter_csv_chunks

NAME = "vidur"
REQUIRED = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")


def matches(header: Sequence[str]) -> bool:
    """Vidur files are recognised by ``arrived_at`` and ``num_prefill_tokens``."""
    return "arrived_at" in header and "num_prefill_tokens" in header


def load(
    path: Path,
    origin: str,
    *,
    keep_failed: bool = False,
    sort: bool = False,
    keep_columns: Sequence[str] = (),
) -> pd.DataFrame:
    """Read a Vidur request trace."""
    lines, times, prompt, output = [], [], [], []
    extras: dict[str, list[np.ndarray]] = {c: [] for c in keep_columns}
    for line_no, chunk in iter_csv_chunks(path, origin, REQUIRED, fmt=NAME, keep=keep_columns):
        lines.append(line_no)
        times.append(column_floats(chunk, line_no, "arrived_at", origin, "a time in seconds"))
        prompt.append(column_ints(chunk, line_no, "num_prefill_tokens", origin))
        output.append(column_ints(chunk, line_no, "num_decode_tokens", origin))
        for c in keep_columns:
            extras[c].append(chunk[c].to_numpy(dtype=object))
    return assemble(
        origin,
        concat(lines, np.int64),
        concat(times, np.float64),
        concat(prompt, np.int64),
        concat(output, np.int64),
        keep_failed=keep_failed,
        sort=sort,
        time_column="arrived_at",
        extras={c: concat(v, object) for c, v in extras.items()},
    )
