"""Low-level, streaming readers for trace files, with line numbers in every error.

CSV is read in chunks as strings and each chunk is turned into numpy arrays at once, so
a large file never sits in memory as more than one chunk of text plus the final arrays.
JSON lines are parsed one at a time. Both know the file line of every row. Every byte
comes through ``specsim.safe_read``: a size cap (inflated too), an inflation ratio for
``.gz``, a line-length cap, and a header of at most ``SPECSIM_MAX_COLUMNS`` distinct names.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from specsim import gc_policy, safe_read, values
from specsim.safe_read import is_gzip  # noqa: F401  (the traces' name for it)
from specsim.traces.errors import TraceError, at_line, names, show

CHUNK_ROWS = 250_000
#: A chunk of CSV rows: column name -> its text cells (an object array)
Chunk = dict[str, np.ndarray]
#: The largest integer (token count, id) a trace may hold: 2^53, exact in float64.
#: What reading a damaged, truncated or non-UTF-8 (gzip) file raises.
READ_ERRORS = (OSError, UnicodeDecodeError, EOFError, zlib.error)
#: Prefix block ids are hashes: any int64.
_ID_RANGE = (-(2**63), 2**63 - 1)


def open_text(path: Path, origin: str | None = None) -> IO[str]:
    """Open ``path`` for reading text, decompressing gzip transparently, under the caps of
    ``safe_read`` (size, inflation ratio, line length)."""
    return safe_read.open_text(path, origin or str(path))


def first_line(path: Path, origin: str) -> str:
    """The first non-blank line of ``path`` (for format detection); TraceError if none."""
    return _first_line(path, origin)[1]


def _first_line(path: Path, origin: str) -> tuple[int, str]:
    """``(line number, text)`` of the first non-blank line of ``path``."""
    try:
        with open_text(path, origin) as fh:
            for number, line in enumerate(fh, start=1):
                if line.strip():
                    return number, line.strip().lstrip("\ufeff")
    except READ_ERRORS as exc:
        raise TraceError(f"{origin}: cannot read the file ({exc})") from exc
    raise at_line(origin, 1, "empty file: expected a header line or a JSON object")


def split_header(line: str, origin: str, number: int = 1) -> list[str]:
    """A CSV header line's column names: at most ``SPECSIM_MAX_COLUMNS``, each once."""
    return safe_read.check_columns((name.strip().strip('"') for name in line.split(",")),
                                   f"{origin} line {number}")


def _csv_header(path: Path, origin: str) -> tuple[int, list[str]]:
    number, line = _first_line(path, origin)
    return number, split_header(line, origin, number)


def iter_csv_chunks(
    path: Path,
    origin: str,
    required: Sequence[str],
    optional: Sequence[str] = (),
    fmt: str = "",
    chunk_rows: int = CHUNK_ROWS,
    keep: Sequence[str] = (),
) -> Iterator[tuple[np.ndarray, Chunk]]:
    """Yield ``(file_line_numbers, chunk)`` with the wanted columns as strings.

    Blank rows are skipped (but counted, so line numbers stay right). A header without
    a required column, a row with too many fields, or a header-only file raises
    TraceError with the line. ``keep`` columns must exist too (named by the scenario).
    """
    header_line, header = _csv_header(path, origin)
    missing = [c for c in required if c not in header]
    if missing:
        what = f"the {fmt} format needs" if fmt else "needs"
        raise at_line(
            origin,
            header_line,
            f"missing column {missing[0]!r} ({what} {', '.join(required)}; "
            f"the header has {names(header)})",
        )
    absent = [c for c in keep if c not in header]
    if absent:
        raise at_line(
            origin,
            header_line,
            f"no column {show(absent[0])} to take workload classes from "
            f"(the header has {names(header)})",
        )
    wanted = list(dict.fromkeys([*required, *keep, *(c for c in optional if c in header)]))
    try:
        stream = safe_read.open_binary(path, origin)
    except READ_ERRORS as exc:
        raise TraceError(f"{origin}: cannot read the file ({exc})") from exc
    any_rows = False
    try:
        text = io.TextIOWrapper(stream, encoding="utf-8-sig", newline="")
        # a field may be as long as a line may (safe_read's cap), not csv's 128 KiB default
        csv.field_size_limit(max(csv.field_size_limit(), safe_read.limit(safe_read.LINE_BYTES)))
        rows = csv.reader(text, skipinitialspace=True)
        for lines, chunk in _chunks(rows, origin, header_line, header, wanted, chunk_rows):
            any_rows = True
            yield lines, chunk
    except csv.Error as exc:
        raise TraceError(f"{origin}: cannot be parsed as CSV ({exc})") from exc
    except READ_ERRORS as exc:
        raise TraceError(f"{origin}: cannot read the file ({exc})") from exc
    finally:
        stream.close()
    if not any_rows:
        raise at_line(origin, header_line + 1, "no requests after the header line")


def _chunks(rows: Iterator[list[str]], origin: str, header_line: int, header: list[str],
            wanted: list[str], chunk_rows: int
            ) -> Iterator[tuple[np.ndarray, Chunk]]:
    """``(file line numbers, {column: text cells})`` of up to ``chunk_rows`` rows at a time.

    A row's line is counted in rows, as CSV readers do (a quoted field over two lines is one
    row). A short row's missing fields are empty; a row whose wanted fields are all empty (a
    blank line) is skipped but counted; a row with more fields than the header is a
    TraceError."""
    parsed: list[str] | None = None
    number = 0
    for row in rows:  # the header line (blank lines above it)
        number += 1
        if number == header_line:
            parsed = row
            break
    if parsed is None:
        return
    absent = [c for c in wanted if c not in parsed]
    if absent:  # a header a CSV reader reads otherwise (quotes, commas inside them)
        raise at_line(
            origin, header_line, f"cannot read column {show(absent[0])} from the header "
            f"({names(header)}); write plain, distinct column names"
        )
    fields = len(header)
    at = [parsed.index(c) for c in wanted]
    while True:
        with gc_policy.paused():  # rows are lists without cycles: nothing to collect
            batch = list(itertools.islice(rows, chunk_rows))
        if not batch:
            return
        lens = np.fromiter(map(len, batch), np.int64, len(batch))
        long = np.flatnonzero(lens > fields)
        if long.size:
            i = int(long[0])
            raise at_line(origin, number + i + 1, f"expected {fields} fields, saw {lens[i]}")
        for i in np.flatnonzero(lens < fields):  # short rows: their missing fields are empty
            batch[i] = batch[i] + [""] * (fields - int(lens[i]))
        with gc_policy.paused():
            columns = list(zip(*batch, strict=True))
        lines = np.arange(number + 1, number + 1 + len(batch), dtype=np.int64)
        number += len(batch)
        chunk = {}
        for name, i in zip(wanted, at, strict=True):
            col = np.empty(len(batch), dtype=object)
            col[:] = columns[i]
            chunk[name] = col
        blank = np.logical_and.reduce([col == "" for col in chunk.values()])
        if blank.any():
            lines = lines[~blank]
            chunk = {k: v[~blank] for k, v in chunk.items()}
        if len(lines):
            yield lines, chunk


def _describe(value: Any) -> str:
    return "an empty field" if value == "" else show(value)


def _column(chunk: Chunk, lines: np.ndarray, column: str, origin: str,
            **rule: Any) -> np.ndarray:
    """A CSV column by the shared number rule (``specsim.values.column``); TraceError names
    the first bad line."""
    try:
        return values.column(chunk[column], text_ok=True, **rule)
    except values.ValueRuleError as exc:
        row = exc.row
        raise at_line(origin, int(lines[row]), f"{column}: {exc}") from None


def column_ints(
    chunk: Chunk, lines: np.ndarray, column: str, origin: str, minimum: int = 0
) -> np.ndarray:
    """Parse a CSV column of integers from ``minimum`` to 2^53."""
    return _column(chunk, lines, column, origin, integer=True, lo=minimum).astype(np.int64)


def column_floats(chunk: Chunk, lines: np.ndarray, column: str, origin: str) -> np.ndarray:
    """Parse a CSV column of finite numbers."""
    return _column(chunk, lines, column, origin)


def column_times_ns(chunk: Chunk, lines: np.ndarray, column: str, origin: str) -> np.ndarray:
    """Parse date-time strings (with or without a time zone) to UTC nanoseconds."""
    import pandas as pd  # the Azure format's date-times only

    raw = pd.Series(chunk[column], dtype=object)
    try:
        stamps = pd.to_datetime(raw, format="ISO8601", utc=True, errors="coerce")
        bad = stamps.isna().to_numpy()
        if not bad.any():
            return stamps.dt.as_unit("ns").astype("int64").to_numpy()
    except (ValueError, OverflowError):  # out of the ns range (before 1677, after 2262)
        bad = np.array([not _is_stamp(v) for v in raw], dtype=bool)
    i = int(np.flatnonzero(bad)[0]) if bad.any() else 0
    raise at_line(
        origin,
        int(lines[i]),
        f"{column}: expected a date-time like 2023-11-16 18:15:46.68 (optionally with "
        f"a time zone, between 1677 and 2262), got {_describe(raw.iloc[i])}",
    )


def _is_stamp(value: str) -> bool:
    """A date-time within the nanosecond range (1677-2262)."""
    import pandas as pd

    try:
        stamp = pd.to_datetime(value, format="ISO8601", utc=True)
        return not pd.isna(stamp) and stamp.as_unit("ns") is not None
    except (ValueError, OverflowError):
        return False


def check_sorted(times: np.ndarray, lines: np.ndarray, column: str, origin: str) -> None:
    """Raise TraceError at the first line whose time is before the line above it."""
    back = np.flatnonzero(np.diff(times) < 0)
    if back.size:
        i = int(back[0]) + 1
        raise at_line(
            origin,
            int(lines[i]),
            f"{column}: timestamps go backwards (earlier than line {int(lines[i - 1])}); "
            "sort the file or set `sort: true` under workload.trace",
        )


def iter_json_lines(path: Path, origin: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line; TraceError on bad JSON."""
    seen = False
    try:
        with open_text(path, origin) as fh:
            for number, line in enumerate(fh, start=1):
                text = line.strip()
                if not text:
                    continue
                try:
                    obj = safe_read.json_loads(text)
                except json.JSONDecodeError as exc:
                    raise at_line(origin, number, f"invalid JSON ({exc.msg})") from exc
                except safe_read.DuplicateKeyError as exc:
                    raise at_line(origin, number, f"field {show(exc.args[0])} appears twice "
                                  "in one object; give each field once") from None
                if not isinstance(obj, dict):
                    raise at_line(
                        origin, number, f"expected a JSON object, got {type(obj).__name__}"
                    )
                seen = True
                yield number, obj
    except READ_ERRORS as exc:
        raise TraceError(f"{origin}: cannot read the file ({exc})") from exc
    if not seen:
        raise at_line(origin, 1, "empty file: expected one JSON object per line")


def json_field(
    obj: dict[str, Any],
    key: str,
    number: int,
    origin: str,
    check: Callable[[Any], bool],
    expected: str,
) -> Any:
    """Fetch ``obj[key]`` and check it; TraceError with the line when absent or wrong."""
    if key not in obj:
        raise at_line(origin, number, f"missing field {show(key)}")
    value = obj[key]
    if not check(value):
        raise at_line(origin, number, f"{key}: expected {expected}, got {show(value)}")
    return value


def json_number(obj: dict[str, Any], key: str, number: int, origin: str, **rule: Any) -> Any:
    """``obj[key]`` by the shared number rule (``specsim.values.number``); TraceError with the
    line when absent or wrong."""
    if key not in obj:
        raise at_line(origin, number, f"missing field {show(key)}")
    try:
        return values.number(obj[key], **rule)
    except values.ValueRuleError as exc:
        raise at_line(origin, number, f"{key}: {exc}") from None


def is_int_list(value: Any) -> bool:
    """A JSON list of 64-bit integers (block hash ids)."""
    low, high = _ID_RANGE
    return isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and low <= v <= high for v in value
    )


def is_block_id(value: int) -> bool:
    """A block id fits in 64 bits."""
    return _ID_RANGE[0] <= value <= _ID_RANGE[1]
