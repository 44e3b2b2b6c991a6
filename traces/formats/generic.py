"""specsim's own trace format: the schema's column names, as CSV or JSON lines.

Required: ``arrival_s``, ``prompt_tokens``, ``output_tokens``. Optional: ``session_id``,
``turn``, ``workload_class``, ``slo_tier``, ``temperature`` (empty / null = scenario
default) and ``prefix_block_ids`` (CSV: ids separated by spaces, e.g. ``"0 1 2"``;
JSON: a list). Any ``request_id`` column is ignored: ids are renumbered in arrival order.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from specsim.traces.errors import at_line, show
from specsim.traces.formats.common import assemble, concat
from specsim.traces.reading import (
    Chunk,
    column_floats,
    column_ints,
    is_block_id,
    is_int_list,
    iter_csv_chunks,
    iter_json_lines,
    json_field,
    json_number,
)
from specsim.traces.schema import DEFAULT_CLASS, DEFAULT_SLO_TIER, Trace, blocks_column

NAME = "generic"
REQUIRED = ("arrival_s", "prompt_tokens", "output_tokens")
OPTIONAL = ("session_id", "turn", "workload_class", "slo_tier", "temperature", "prefix_block_ids")
_SPLIT = re.compile(r"[\s,;]+")


def matches(header: Sequence[str] | dict[str, Any]) -> bool:
    """Generic files are recognised by an ``arrival_s`` column or key."""
    return "arrival_s" in header


def load(
    path: Path,
    origin: str,
    *,
    keep_failed: bool = False,
    sort: bool = False,
    keep_columns: Sequence[str] = (),
    jsonl: bool = False,
) -> Trace:
    """Read a generic CSV, or JSON lines when ``jsonl``."""
    reader = _load_jsonl if jsonl else _load_csv
    return reader(path, origin, keep_failed=keep_failed, sort=sort, keep_columns=keep_columns)


def _parse_blocks(text: str, line: int, origin: str) -> tuple[int, ...]:
    body = text.strip().strip("[]()").strip()
    if not body:
        return ()
    try:
        ids = tuple(int(part) for part in _SPLIT.split(body) if part)
    except ValueError:
        ids = None
    if ids is None or not all(is_block_id(i) for i in ids):
        raise at_line(
            origin, line, f"prefix_block_ids: expected 64-bit integers separated by spaces, "
            f"got {show(text)}"
        )
    return ids


def _optional_ints(
    chunk: Chunk, lines: np.ndarray, column: str, origin: str, empty: int
) -> np.ndarray:
    filled = {column: np.where(chunk[column] == "", str(empty), chunk[column])}
    return column_ints(filled, lines, column, origin, minimum=empty)


def _load_csv(
    path: Path, origin: str, *, keep_failed: bool, sort: bool, keep_columns: Sequence[str]
) -> Trace:
    parts: dict[str, list[np.ndarray]] = {}

    def add(name: str, values: np.ndarray) -> None:
        parts.setdefault(name, []).append(values)

    for lines, chunk in iter_csv_chunks(
        path, origin, REQUIRED, OPTIONAL, fmt=NAME, keep=keep_columns
    ):
        add("lines", lines)
        add("arrival_s", column_floats(chunk, lines, "arrival_s", origin))
        add("prompt_tokens", column_ints(chunk, lines, "prompt_tokens", origin))
        add("output_tokens", column_ints(chunk, lines, "output_tokens", origin))
        if "session_id" in chunk:
            add("session_id", _optional_ints(chunk, lines, "session_id", origin, -1))
        if "turn" in chunk:
            add("turn", _optional_ints(chunk, lines, "turn", origin, 0))
        if "temperature" in chunk:
            import pandas as pd  # an optional column's own rule (blank: the scenario's)

            temp = pd.Series(chunk["temperature"], dtype=object).replace("", "nan").astype(str)
            values = pd.to_numeric(temp, errors="coerce").to_numpy(
                dtype=np.float64, na_value=np.nan
            )
            bad = (np.isnan(values) & (temp.str.lower() != "nan").to_numpy()) | (values < 0)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise at_line(
                    origin,
                    int(lines[i]),
                    "temperature: expected a number >= 0 or an empty field, "
                    f"got {show(chunk['temperature'][i])}",
                )
            add("temperature", values)
        for column, default in (("workload_class", DEFAULT_CLASS), ("slo_tier", DEFAULT_SLO_TIER)):
            if column in chunk:
                add(column, np.where(chunk[column] == "", default, chunk[column]).astype(object))
        if "prefix_block_ids" in chunk:
            texts = chunk["prefix_block_ids"]
            add(
                "prefix_block_ids",
                blocks_column(
                    (_parse_blocks(t, int(ln), origin) for t, ln in zip(texts, lines, strict=True)),
                    len(texts),
                ),
            )
        for c in keep_columns:
            add("extra:" + c, chunk[c])
    joined = {k: concat(v, object) for k, v in parts.items()}
    return _finish(origin, joined, keep_failed, sort, keep_columns)


def _finish(
    origin: str,
    joined: dict[str, np.ndarray],
    keep_failed: bool,
    sort: bool,
    keep_columns: Sequence[str],
) -> Trace:
    columns = {k: v for k, v in joined.items() if k in OPTIONAL}
    extras = {c: joined["extra:" + c] for c in keep_columns}
    return assemble(
        origin,
        joined["lines"].astype(np.int64),
        joined["arrival_s"].astype(np.float64),
        joined["prompt_tokens"].astype(np.int64),
        joined["output_tokens"].astype(np.int64),
        keep_failed=keep_failed,
        sort=sort,
        time_column="arrival_s",
        columns=columns,
        extras=extras,
    )


def _load_jsonl(
    path: Path, origin: str, *, keep_failed: bool, sort: bool, keep_columns: Sequence[str]
) -> Trace:
    rows: dict[str, list[Any]] = {k: [] for k in ("lines", *REQUIRED, *OPTIONAL)}
    rows.update({"extra:" + c: [] for c in keep_columns})
    seen: set[str] = set()
    for number, obj in iter_json_lines(path, origin):
        rows["lines"].append(number)
        rows["arrival_s"].append(
            json_number(obj, "arrival_s", number, origin)
        )
        for key in ("prompt_tokens", "output_tokens"):
            rows[key].append(
                json_number(obj, key, number, origin, integer=True, lo=0)
            )
        for key, default, check, expected in (
            ("session_id", -1, {"integer": True, "lo": -1}, ""),
            ("turn", 0, {"integer": True, "lo": 0}, ""),
            ("temperature", float("nan"), {"lo": 0}, ""),
            ("workload_class", DEFAULT_CLASS, lambda v: isinstance(v, str) and v != "", "a name"),
            ("slo_tier", DEFAULT_SLO_TIER, lambda v: isinstance(v, str) and v != "", "a name"),
            ("prefix_block_ids", [], is_int_list, "a list of integers"),
        ):
            if obj.get(key) is None:
                rows[key].append(default)
            else:
                seen.add(key)
                rows[key].append(
                    json_number(obj, key, number, origin, **check) if isinstance(check, dict)
                    else json_field(obj, key, number, origin, check, expected))
        for c in keep_columns:
            rows["extra:" + c].append(
                str(json_field(obj, c, number, origin, lambda v: v is not None, "a value"))
            )
    n = len(rows["lines"])
    joined: dict[str, np.ndarray] = {}
    for key, values in rows.items():
        if key == "prefix_block_ids":
            joined[key] = blocks_column((tuple(v) for v in values), n)
        elif key in OPTIONAL and key not in seen:
            continue
        else:
            joined[key] = np.asarray(values, dtype=object) if values else np.empty(0, dtype=object)
    if "prefix_block_ids" not in seen:
        joined.pop("prefix_block_ids")
    for key in ("session_id", "turn"):
        if key in joined:
            joined[key] = joined[key].astype(np.int64)
    if "temperature" in joined:
        joined["temperature"] = joined["temperature"].astype(np.float64)
    return _finish(origin, joined, keep_failed, sort, keep_columns)
