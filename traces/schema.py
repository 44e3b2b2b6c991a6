"""The request-trace schema every loader and generator produces, and its checks.

A trace is a pandas DataFrame with one row per request, sorted by arrival. Keeping one
schema means the simulator, the stats and the fitter never care where a trace came from.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from specsim import values
from specsim.limits import MAX_ARRIVAL_S
from specsim.traces.errors import TraceError, show

#: Tokens per prefix block, as in Mooncake's ``hash_ids`` (one id per 512-token block).
BLOCK_TOKENS = 512

DEFAULT_CLASS = "default"
DEFAULT_SLO_TIER = "standard"
#: NaN temperature means "not given by the trace": the scenario's temperature applies.
DEFAULT_TEMPERATURE = float("nan")

#: Column name -> dtype, in the order every trace DataFrame has them.
COLUMNS: dict[str, str] = {
    "arrival_s": "float64",
    "request_id": "int64",
    "session_id": "int64",
    "turn": "int64",
    "prompt_tokens": "int64",
    "output_tokens": "int64",
    "workload_class": "object",
    "prefix_block_ids": "object",
    "temperature": "float64",
    "slo_tier": "object",
}
REQUIRED = ("arrival_s", "prompt_tokens", "output_tokens")

_DEFAULTS: dict[str, Any] = {
    "session_id": -1,
    "turn": 0,
    "workload_class": DEFAULT_CLASS,
    "temperature": DEFAULT_TEMPERATURE,
    "slo_tier": DEFAULT_SLO_TIER,
}


def empty_trace() -> pd.DataFrame:
    """A trace with no requests but every column and dtype, for code paths that need one."""
    return pd.DataFrame({name: pd.Series(dtype=dtype) for name, dtype in COLUMNS.items()})


def make_trace(
    arrival_s: Sequence[float] | np.ndarray,
    prompt_tokens: Sequence[int] | np.ndarray,
    output_tokens: Sequence[int] | np.ndarray,
    origin: str,
    **optional: Any,
) -> pd.DataFrame:
    """Assemble a trace from column arrays (others default), sort it and validate it.

    Sorting is stable, so requests with equal arrival keep their given order.
    """
    data: dict[str, Any] = {
        "arrival_s": np.asarray(arrival_s, dtype=np.float64),
        "prompt_tokens": np.asarray(prompt_tokens),
        "output_tokens": np.asarray(output_tokens),
    }
    unknown = set(optional) - set(COLUMNS)
    if unknown:
        raise TypeError(f"make_trace: unknown columns {sorted(unknown)}")
    data.update({k: v for k, v in optional.items() if v is not None})
    df = pd.DataFrame(data)
    order = np.argsort(df["arrival_s"].to_numpy(), kind="stable")
    if not np.array_equal(order, np.arange(len(order))):
        df = df.iloc[order].reset_index(drop=True)
    return validate_trace(df, origin)


def _first_bad(mask: np.ndarray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


def _row_error(origin: str, row: int, column: str, expected: str, value: Any) -> TraceError:
    return TraceError(f"{origin} row {row}: {column}: expected {expected}, got {show(value)}")


def _checked(df: pd.DataFrame, column: str, origin: str, **rule: Any) -> np.ndarray:
    """``df[column]`` by the shared number rule (``specsim.values.column``)."""
    try:
        return values.column(df[column], **rule)
    except values.ValueRuleError as exc:
        raise TraceError(f"{origin} row {exc.row}: {column}: {exc}") from None


def _as_int_column(df: pd.DataFrame, column: str, origin: str, minimum: int | None) -> np.ndarray:
    raw = df[column]
    if pd.api.types.is_integer_dtype(raw.dtype) and not pd.api.types.is_bool_dtype(raw.dtype):
        ints = raw.to_numpy(dtype=np.int64)
        if minimum is None or not (ints < minimum).any():
            return ints
    return _checked(df, column, origin, integer=True, lo=minimum).astype(np.int64)


def _as_str_column(df: pd.DataFrame, column: str, origin: str) -> np.ndarray:
    col = df[column]
    if col.isna().any():
        col = col.fillna(_DEFAULTS[column])
    values = col.astype(str).to_numpy(dtype=object)
    row = _first_bad(values == "")
    if row is not None:
        raise _row_error(origin, row, column, "a non-empty name", "")
    return values


def _as_block_tuple(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, tuple):
        return value
    if isinstance(value, list | np.ndarray):
        return tuple(int(v) for v in value)
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return ()
    return None


def _as_blocks_column(df: pd.DataFrame, origin: str) -> np.ndarray:
    values = df["prefix_block_ids"].to_numpy(dtype=object)
    out = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        blocks = _as_block_tuple(value)
        if blocks is None:
            raise _row_error(origin, i, "prefix_block_ids", "a tuple of integers", value)
        out[i] = blocks
    return out


def validate_trace(df: pd.DataFrame, origin: str) -> pd.DataFrame:
    """Check ``df`` against the schema and return it with canonical columns and dtypes.

    Missing optional columns get their defaults, ``request_id`` is renumbered 0..N-1
    in arrival order, and columns outside the schema are dropped. Problems raise
    TraceError naming ``origin`` and the 0-based row.
    """
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise TraceError(
            f"{origin}: missing column {missing[0]!r} (required: {', '.join(REQUIRED)})"
        )
    n = len(df)
    if n == 0:
        return empty_trace()

    arrival = _checked(df, "arrival_s", origin, lo=0, hi=MAX_ARRIVAL_S)
    row = _first_bad(np.diff(arrival) < 0)
    if row is not None:
        raise TraceError(
            f"{origin} row {row + 1}: arrival_s: expected non-decreasing times, "
            f"got {show(arrival[row + 1])} after {show(arrival[row])}"
        )

    out: dict[str, Any] = {"arrival_s": arrival, "request_id": np.arange(n, dtype=np.int64)}
    for column in ("session_id", "turn"):
        if column in df.columns:
            out[column] = _as_int_column(df, column, origin, -1 if column == "session_id" else 0)
        else:
            out[column] = np.full(n, _DEFAULTS[column], dtype=np.int64)
    out["prompt_tokens"] = _as_int_column(df, "prompt_tokens", origin, 1)
    out["output_tokens"] = _as_int_column(df, "output_tokens", origin, 1)
    for column in ("workload_class", "slo_tier"):
        if column in df.columns:
            out[column] = _as_str_column(df, column, origin)
        else:
            out[column] = np.full(n, _DEFAULTS[column], dtype=object)
    if "prefix_block_ids" in df.columns:
        out["prefix_block_ids"] = _as_blocks_column(df, origin)
    else:
        out["prefix_block_ids"] = _empty_tuples(n)
    if "temperature" in df.columns:
        temp = _checked(df, "temperature", origin, lo=0, blank_ok=True)
        out["temperature"] = temp
    else:
        out["temperature"] = np.full(n, DEFAULT_TEMPERATURE)

    result = pd.DataFrame(out, columns=list(COLUMNS))
    result.attrs.update(df.attrs)
    return result


def _empty_tuples(n: int) -> np.ndarray:
    out = np.empty(n, dtype=object)
    out.fill(())
    return out


def blocks_column(rows: Iterable[tuple[int, ...]], n: int) -> np.ndarray:
    """Pack ``n`` block-id tuples into an object array (pandas would otherwise split them)."""
    out = np.empty(n, dtype=object)
    for i, blocks in enumerate(rows):
        out[i] = blocks
    return out
