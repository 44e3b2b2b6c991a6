"""What every format does after parsing: failed requests, ordering, schema checks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from traces.errors import at_line
from traces.reading import check_sorted
from traces.schema import make_trace


def concat(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
    """Join per-chunk arrays (empty input gives an empty array of ``dtype``)."""
    return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)


def assemble(
    origin: str,
    lines: np.ndarray,
    arrival_s: np.ndarray,
    prompt: np.ndarray,
    output: np.ndarray,
    *,
    failed: np.ndarray | None = None,
    keep_failed: bool = False,
    sort: bool = False,
    time_column: str = "timestamp",
    columns: dict[str, Any] | None = None,
    extras: dict[str, np.ndarray] | None = None,
) -> pd.DataFrame:
    """Build the schema DataFrame from parsed arrays.

    A request with zero output tokens (or flagged ``failed`` by its format) produced
    nothing: it is dropped, or with ``keep_failed`` replayed as prefill + 1 token. A
    zero-token prompt becomes 1 token (every request carries at least one). Unless
    ``sort`` is set, times must already be non-decreasing. ``extras`` are raw source
    columns kept after the schema columns (for ``class_column``).
    """
    columns = dict(columns or {})
    extras = dict(extras or {})
    negative = np.flatnonzero(arrival_s < 0)
    if negative.size:
        i = int(negative[0])
        raise at_line(
            origin, int(lines[i]), f"{time_column}: expected a time >= 0, got {arrival_s[i]!r}"
        )
    failed_mask = output == 0 if failed is None else (failed | (output == 0))
    n_failed = int(failed_mask.sum())
    if n_failed and not keep_failed:
        keep = ~failed_mask
        lines, arrival_s, prompt, output = lines[keep], arrival_s[keep], prompt[keep], output[keep]
        columns = {k: v[keep] for k, v in columns.items()}
        extras = {k: v[keep] for k, v in extras.items()}
    output = np.maximum(output, 1)
    prompt = np.maximum(prompt, 1)
    if sort:
        order = np.argsort(arrival_s, kind="stable")
        arrival_s, prompt, output = arrival_s[order], prompt[order], output[order]
        columns = {k: v[order] for k, v in columns.items()}
        extras = {k: v[order] for k, v in extras.items()}
    else:
        check_sorted(arrival_s, lines, time_column, origin)
    df = make_trace(arrival_s, prompt, output, origin, **columns)
    for name, values in extras.items():
        df[name] = values
    df.attrs["source"] = origin
    df.attrs["failed_requests"] = n_failed
    df.attrs["failed_kept"] = bool(keep_failed and n_failed)
    return df
