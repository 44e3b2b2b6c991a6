"""What every format does after parsing: failed requests, ordering, schema checks."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from specsim.traces.errors import at_line, show
from specsim.traces.reading import Chunk, check_sorted, iter_csv_chunks
from specsim.traces.schema import Trace, trace_from


def concat(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
    """Join per-chunk arrays (empty input gives an empty array of ``dtype``)."""
    return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)


ColumnParser = Callable[[Chunk, np.ndarray], "np.ndarray | None"]


def read_csv_columns(
    path: Path,
    origin: str,
    fmt: str,
    required: Sequence[str],
    parsers: dict[str, tuple[ColumnParser, Any]],
    *,
    optional: Sequence[str] = (),
    keep_columns: Sequence[str] = (),
) -> tuple[np.ndarray, dict[str, np.ndarray | None], dict[str, np.ndarray]]:
    """The chunked read every CSV format shares: file line numbers, parsed columns, extras.

    ``parsers`` maps a name to ``(parse(chunk, line_numbers), dtype)``; a parser returns
    None for a chunk without its (optional) column, and a column no chunk had is None.
    """
    lines: list[np.ndarray] = []
    parts: dict[str, list[np.ndarray]] = {name: [] for name in parsers}
    extras: dict[str, list[np.ndarray]] = {c: [] for c in keep_columns}
    for line_no, chunk in iter_csv_chunks(path, origin, required, optional, fmt=fmt,
                                          keep=keep_columns):
        lines.append(line_no)
        for name, (parse, _dtype) in parsers.items():
            value = parse(chunk, line_no)
            if value is not None:
                parts[name].append(value)
        for c in keep_columns:
            extras[c].append(chunk[c])
    # iter_csv_chunks rejects empty and header-only files, so required columns have data
    columns = {name: concat(parts[name], dtype) if parts[name] else None
               for name, (_parse, dtype) in parsers.items()}
    return (concat(lines, np.int64), columns,
            {c: concat(v, object) for c, v in extras.items()})


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
) -> Trace:
    """Build the schema's trace from parsed arrays.

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
        if not sort and i > 0:  # (Azure's times are after the first row's: it went back)
            check_sorted(arrival_s[: i + 1], lines[: i + 1], time_column, origin)
        raise at_line(
            origin, int(lines[i]), f"{time_column}: expected a time >= 0, got {show(arrival_s[i])}"
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
    df = trace_from(arrival_s, prompt, output, origin, **columns)
    for name, values in extras.items():
        if name not in df.columns:  # a schema column (generic's own) is already parsed
            df[name] = values
    df.attrs["source"] = origin
    df.attrs["failed_requests"] = n_failed
    df.attrs["failed_kept"] = bool(keep_failed and n_failed)
    return df
