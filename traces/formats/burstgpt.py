"""BurstGPT (Wang et al., 2024): CSV of ChatGPT/GPT-4 requests from Azure OpenAI.

Columns ``Timestamp`` (s from start), ``Session ID`` and ``Elapsed time`` (newer releases
only), ``Model``, ``Request tokens``, ``Response tokens``, ``Total tokens``, ``Log Type``.
A failed request has 0 response tokens or a Log Type mentioning failure.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from specsim.traces.formats.common import assemble, read_csv_columns
from specsim.traces.reading import Chunk, column_floats, column_ints
from specsim.traces.schema import Trace

NAME = "burstgpt"
REQUIRED = ("Timestamp", "Request tokens", "Response tokens")
OPTIONAL = ("Session ID", "Log Type")


def matches(header: Sequence[str]) -> bool:
    """BurstGPT files are recognised by ``Request tokens`` and ``Response tokens``."""
    return "Request tokens" in header and "Response tokens" in header


def _turns(session_codes: np.ndarray) -> np.ndarray:
    """0, 1, 2, ... within each session, in arrival order; -1 sessions get turn 0."""
    import pandas as pd  # BurstGPT's sessions only

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
) -> Trace:
    """Read a BurstGPT CSV; failed requests are dropped unless ``keep_failed``."""
    def failed(chunk: Chunk, _lines: np.ndarray) -> np.ndarray | None:
        if "Log Type" not in chunk:
            return None
        return np.fromiter(("fail" in v.lower() for v in chunk["Log Type"]), bool,
                           len(chunk["Log Type"]))

    def sessions(chunk: Chunk, _lines: np.ndarray) -> np.ndarray | None:
        return chunk["Session ID"] if "Session ID" in chunk else None

    lines, cols, extras = read_csv_columns(path, origin, NAME, REQUIRED, {
        "arrival": (lambda c, ln: column_floats(c, ln, "Timestamp", origin),
                    np.float64),
        "prompt": (lambda c, ln: column_ints(c, ln, "Request tokens", origin), np.int64),
        "output": (lambda c, ln: column_ints(c, ln, "Response tokens", origin), np.int64),
        "failed": (failed, bool),
        "sessions": (sessions, object),
    }, optional=OPTIONAL, keep_columns=keep_columns)
    columns: dict[str, np.ndarray] = {}
    ids = cols["sessions"]
    if ids is not None:
        ids = np.where(ids == "", None, ids)
        import pandas as pd

        codes, _ = pd.factorize(ids, use_na_sentinel=True)
        columns["session_id"] = codes.astype(np.int64)
    df = assemble(origin, lines, cols["arrival"], cols["prompt"], cols["output"],
                  failed=cols["failed"], keep_failed=keep_failed, sort=sort,
                  time_column="Timestamp", columns=columns, extras=extras)
    if ids is not None:
        df["turn"] = _turns(df["session_id"])
    return df
