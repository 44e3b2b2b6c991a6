"""BurstGPT (Wang et al., 2024): CSV of ChatGPT/GPT-4 requests from Azure OpenAI.

Columns ``Timestamp`` (s from start), ``Session ID`` and ``Elapsed time`` (newer releases
only), ``Model``, ``Request tokens``, ``Response tokens``, ``Total tokens``, ``Log Type``.
A failed request has 0 response tokens or a Log Type mentioning failure.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from traces.formats.common import assemble, concat
from traces.reading import column_floats, column_ints, iter_csv_chunks

NAME = "burstgpt"
REQUIRED = ("Timestamp", "Request tokens", "Response tokens")
OPTIONAL = ("Session ID", "Log Type")


def matches(header: Sequence[str]) -> bool:
    """BurstGPT files are recognised by ``Request tokens`` and ``Response tokens``."""
    return "Request tokens" in header and "Response tokens" in header


def _turns(session_codes: np.ndarray) -> np.ndarray:
    """0, 1, 2, ... within each session, in arrival order; -1 sessions get turn 0."""
    turns = pd.Series(session_codes).groupby(session_codes).cumcount().to_numpy(np.int64, copy=True)
    turns[session_codes < 0] = 0
    return turns


def load(
    path: Path,
    origin: str,
    *,
    keep_failed: bool = False,
    sort: bool = False,
    keep_columns: Sequence[str] = (),
) -> pd.DataFrame:
    """Read a BurstGPT CSV; failed requests are dropped unless ``keep_failed``."""
    lines, times, prompt, output, failed, sessions = [], [], [], [], [], []
    extras: dict[str, list[np.ndarray]] = {c: [] for c in keep_columns}
    for line_no, chunk in iter_csv_chunks(
        path, origin, REQUIRED, OPTIONAL, fmt=NAME, keep=keep_columns
    ):
        lines.append(line_no)
        times.append(column_floats(chunk, line_no, "Timestamp", origin, "a time in seconds"))
        prompt.append(column_ints(chunk, line_no, "Request tokens", origin))
        output.append(column_ints(chunk, line_no, "Response tokens", origin))
        if "Log Type" in chunk.columns:
            kind = chunk["Log Type"].str.lower()
            failed.append(kind.str.contains("fail").to_numpy(dtype=bool))
        if "Session ID" in chunk.columns:
            sessions.append(chunk["Session ID"].to_numpy(dtype=object))
        for c in keep_columns:
            extras[c].append(chunk[c].to_numpy(dtype=object))
    out = concat(output, np.int64)
    columns: dict[str, np.ndarray] = {}
    if sessions:
        ids = concat(sessions, object)
        ids = np.where(ids == "", None, ids)
        codes, _ = pd.factorize(ids, use_na_sentinel=True)
        columns["session_id"] = codes.astype(np.int64)
    df = assemble(
        origin,
        concat(lines, np.int64),
        concat(times, np.float64),
        concat(prompt, np.int64),
        out,
        failed=concat(failed, bool) if failed else None,
        keep_failed=keep_failed,
        sort=sort,
        time_column="Timestamp",
        columns=columns,
        extras={c: concat(v, object) for c, v in extras.items()},
    )
    if sessions:
        df["turn"] = _turns(df["session_id"].to_numpy())
    return df
