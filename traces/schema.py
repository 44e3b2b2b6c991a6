"""The request-trace schema every loader and generator produces, and its checks.

A trace is one row per request, sorted by arrival, in the schema's columns. Keeping one
schema means the simulator, the stats and the fitter never care where a trace came from.
Loaders and generators build a ``Trace`` (typed numpy columns: a run reads its trace without
pandas, whose import is a fifth of a short run's time); the public functions
(``make_trace``, ``validate_trace``, ``loaders.load_trace``, ``workload.build_workload``) hand
back its pandas DataFrame (``Trace.frame``), which a run also takes (``as_trace``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from specsim import values
from specsim.limits import MAX_ARRIVAL_S
from specsim.traces.errors import TraceError, show

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

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


class Trace:
    """A request trace as typed numpy columns (the schema's, in ``COLUMNS``' order, then any
    raw source column kept for classes) and what it came from (``attrs``: source, format,
    failed requests, the workload's log). Indexed like a DataFrame by column name (a numpy
    array), ``len`` is its requests; ``frame()`` is the pandas DataFrame."""

    __slots__ = ("_cols", "attrs")

    def __init__(self, columns: dict[str, np.ndarray], attrs: dict[str, Any] | None = None
                 ) -> None:
        self._cols = dict(columns)
        self.attrs: dict[str, Any] = dict(attrs or {})

    def __len__(self) -> int:
        return len(next(iter(self._cols.values()))) if self._cols else 0

    def __getitem__(self, name: str) -> np.ndarray:
        return self._cols[name]

    def __setitem__(self, name: str, values: Any) -> None:
        """A column replaced or added: an array of the trace's length, or one value for all."""
        if isinstance(values, str):
            fill = np.empty(len(self), dtype=object)
            fill.fill(values)
            values = fill
        elif np.ndim(values) == 0 and not isinstance(values, tuple):
            values = np.full(len(self), values)
        self._cols[name] = values if isinstance(values, np.ndarray) else _as_cells(values)

    def __contains__(self, name: object) -> bool:
        return name in self._cols

    @property
    def columns(self) -> list[str]:
        return list(self._cols)

    def copy(self) -> Trace:
        """A trace whose columns and attrs may be replaced without touching this one (the
        arrays are shared until replaced)."""
        return Trace(self._cols, self.attrs)

    def rows(self, which: np.ndarray | slice) -> Trace:
        """The requests ``which`` selects (a mask, indices or a slice), in order."""
        return Trace({k: v[which] for k, v in self._cols.items()}, self.attrs)

    def frame(self) -> pd.DataFrame:
        """The trace as a pandas DataFrame (one row per request, ``attrs`` carried)."""
        import pandas as pd

        if not len(self):
            df = empty_trace()
        else:
            df = pd.DataFrame(self._cols, columns=list(self._cols))
        df.attrs.update(self.attrs)
        return df


def as_trace(data: Any) -> Trace:
    """A trace a run reads: a ``Trace`` as it is, a DataFrame by its columns and attrs (not
    checked again: ``validate_trace`` checks)."""
    if isinstance(data, Trace):
        return data
    return Trace({c: data[c].to_numpy() for c in data.columns}, dict(data.attrs))


def empty_trace() -> pd.DataFrame:
    """A trace with no requests but every column and dtype, for code paths that need one."""
    import pandas as pd

    return pd.DataFrame({name: pd.Series(dtype=dtype) for name, dtype in COLUMNS.items()})


def _empty_columns() -> Trace:
    return Trace({name: np.empty(0, dtype=dtype) for name, dtype in COLUMNS.items()})


def make_trace(
    arrival_s: Sequence[float] | np.ndarray,
    prompt_tokens: Sequence[int] | np.ndarray,
    output_tokens: Sequence[int] | np.ndarray,
    origin: str,
    **optional: Any,
) -> pd.DataFrame:
    """Assemble a trace from column arrays (others default), sort it and validate it: the
    DataFrame of ``trace_from``."""
    return trace_from(arrival_s, prompt_tokens, output_tokens, origin, **optional).frame()


def trace_from(
    arrival_s: Sequence[float] | np.ndarray,
    prompt_tokens: Sequence[int] | np.ndarray,
    output_tokens: Sequence[int] | np.ndarray,
    origin: str,
    **optional: Any,
) -> Trace:
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
    for k, v in optional.items():
        if v is not None:
            data[k] = v if isinstance(v, np.ndarray) else _as_cells(v)
    t = Trace(data)
    order = np.argsort(t["arrival_s"], kind="stable")
    if not np.array_equal(order, np.arange(len(order))):
        t = t.rows(order)
    return checked(t, origin)


def _as_cells(values: Any) -> np.ndarray:
    """A sequence as a column: numbers as numpy makes them, anything else as objects."""
    values = list(values)
    try:
        arr = np.asarray(values)
    except ValueError:  # ragged (tuples of block ids)
        arr = None
    if arr is not None and arr.dtype.kind in "iufb" and arr.ndim == 1:
        return arr
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


def _first_bad(mask: np.ndarray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


def _row_error(origin: str, row: int, column: str, expected: str, value: Any) -> TraceError:
    return TraceError(f"{origin} row {row}: {column}: expected {expected}, got {show(value)}")


def _checked(df: Trace, column: str, origin: str, **rule: Any) -> np.ndarray:
    """``df[column]`` by the shared number rule (``specsim.values.column``)."""
    try:
        return values.column(df[column], **rule)
    except values.ValueRuleError as exc:
        raise TraceError(f"{origin} row {exc.row}: {column}: {exc}") from None


def _as_int_column(df: Trace, column: str, origin: str, minimum: int | None) -> np.ndarray:
    raw = df[column]
    if raw.dtype.kind in "iu":
        ints = raw.astype(np.int64)
        if minimum is None or not (ints < minimum).any():
            return ints
    return _checked(df, column, origin, integer=True, lo=minimum).astype(np.int64)


def _as_str_column(df: Trace, column: str, origin: str) -> np.ndarray:
    col = df[column]
    default = _DEFAULTS[column]
    values = np.empty(len(col), dtype=object)
    values[:] = [default if _missing(v) else v if type(v) is str else str(v) for v in col]
    row = _first_bad(values == "")
    if row is not None:
        raise _row_error(origin, row, column, "a non-empty name", "")
    return values


def _missing(v: Any) -> bool:
    """A cell pandas' ``isna`` calls missing: None, NaN, NA, NaT."""
    return v is None or (isinstance(v, float) and v != v) or type(v).__name__ in (
        "NAType", "NaTType")


def _as_block_tuple(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, tuple):
        return value
    if isinstance(value, list | np.ndarray):
        return tuple(int(v) for v in value)
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return ()
    return None


def _as_blocks_column(df: Trace, origin: str) -> np.ndarray:
    values = df["prefix_block_ids"]
    out = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        blocks = _as_block_tuple(value)
        if blocks is None:
            raise _row_error(origin, i, "prefix_block_ids", "a tuple of integers", value)
        out[i] = blocks
    return out


def validate_trace(df: pd.DataFrame | Trace, origin: str) -> pd.DataFrame:
    """``checked``'s trace as a DataFrame."""
    return checked(df, origin).frame()


def checked(df: pd.DataFrame | Trace, origin: str) -> Trace:
    """Check a trace (a ``Trace`` or a DataFrame) against the schema and return it with
    canonical columns and dtypes.

    Missing optional columns get their defaults, ``request_id`` is renumbered 0..N-1
    in arrival order, and columns outside the schema are dropped. Problems raise
    TraceError naming ``origin`` and the 0-based row.
    """
    df = as_trace(df)
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise TraceError(
            f"{origin}: missing column {missing[0]!r} (required: {', '.join(REQUIRED)})"
        )
    n = len(df)
    if n == 0:
        return _empty_columns()

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

    return Trace({c: out[c] for c in COLUMNS}, df.attrs)


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
