"""The iteration log streamed to disk in chunks, so memory stays flat at any trace length.

``Metrics`` (collector.py) hands a writer each full chunk of rows as its columns by name
(the columns ``iterations_frame`` builds its frame from) and the rest at the end; the file
then equals the in-memory log (a test compares them). Parquet (pyarrow, one row group per
chunk) is the default; CSV appends each chunk with the formatting ``specsim run`` always
used, so a chunked CSV is byte for byte the one-shot one. Writing needs no pandas (a
``specsim run`` never imports it to write its outputs); reading back does.

Rules:
1. A writer writes into the run's staging folder (report/output.py), never into ``--out``
   itself: a run killed mid-way leaves only a temporary folder that the next run removes.
2. An empty log still has its columns (a Parquet schema, a CSV header).
3. CSV text (the log's chunks, requests.csv) is written by ``write_csv``: the bytes of
   ``frame.to_csv(index=False, float_format="%.9g")``, three times faster, from a frame or
   from its columns by name (numpy arrays: no frame built).
4. The report reads the log back with ``read_for_report``: only the columns it plots, and
   beyond ``REPORT_ROWS`` rows every g-th iteration of each worker, so its memory stays
   bounded however long the run.
5. Parquet is written from the columns (``pa.Table.from_arrays``, text as ``large_string``
   as pandas' own conversion gave it) without pandas' schema metadata: ``pd.read_parquet``
   reads back the same frame (dtypes, values, a RangeIndex).
"""

from __future__ import annotations

import csv
import io
import math
import sys
from collections.abc import Mapping
from enum import IntEnum
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover  (writing needs no pandas; reading back imports it)
    import pandas as pd

#: the iteration log's columns, in order (then ``Metrics.extra``): the one table, written
#: by name (``ITER.<name>``) by the kernel's commit (kernel_jit._commit)
ITER_COLUMNS = ("time_s", "worker", "batch_size", "decode_seqs", "prefill_seqs", "tokens",
                "drafted_tokens", "draft_time_s", "verify_time_s", "compute_util",
                "memory_util", "kv_blocks_used", "policy_reason")
ITER = IntEnum("ITER", {name: i for i, name in enumerate(ITER_COLUMNS)})
#: simulation.iteration_log -> file name
FILES = {"parquet": "iterations.parquet", "csv": "iterations.csv"}
#: rows held in memory before a chunk is written (about 14 columns x 8 bytes each)
CHUNK_ROWS = 65_536
#: the columns the report's plots use (report/report.py)
REPORT_COLUMNS = ("time_s", "worker", "batch_size", "prefill_seqs", "tokens", "draft_time_s",
                  "verify_time_s", "kv_blocks_used")
#: the most rows the report reads (8 columns x 8 bytes: 32 MB); beyond, a sample
REPORT_ROWS = 500_000


#: a block of rows as its columns: name -> numpy array (each of the block's length), in
#: order; what the writers take without a frame built (requests.csv, the iteration log)
Columns = Mapping[str, np.ndarray]


def columns_of(rows: Any) -> Columns:
    """A block's columns by name (a frame's as numpy arrays): the writers and the report
    read either, and a run's own blocks need no pandas."""
    if isinstance(rows, Mapping):
        return rows
    return {name: rows[name].to_numpy() for name in rows.columns}


def block_rows(cols: Columns) -> int:
    """The rows of a block given as its columns (0 when it has none)."""
    return len(next(iter(cols.values()), ()))


class IterationWriter:
    """Interface: ``write(rows)`` appends rows (their columns by name in the log's order:
    ``Metrics.iterations_columns``, or a frame); ``close()`` finishes the file."""

    path: Path

    def write(self, rows: Columns | pd.DataFrame) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class ParquetLog(IterationWriter):
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._writer = None
        self._schema = None

    def write(self, rows: Columns | pd.DataFrame) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        cols = columns_of(rows)
        if self._schema is None:  # the first chunk's columns and types: the file's schema
            self._schema = pa.schema([(name, _arrow_type(a)) for name, a in cols.items()])
            # dictionary pages where values repeat (counts, the policy's decision text): on
            # the float columns they cost half the write time for a few percent of size
            self._writer = pq.ParquetWriter(self.path, self._schema, use_dictionary=[
                f.name for f in self._schema if not pa.types.is_floating(f.type)])
        table = pa.Table.from_arrays([_arrow_array(cols[f.name], f.type)
                                      for f in self._schema], schema=self._schema)
        self._writer.write_table(table)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def _arrow_array(a: np.ndarray, typ: Any) -> Any:
    """One column as an Arrow array of ``typ`` from its buffers: numbers as they lie in
    memory, booleans packed to bits, text through Arrow's string builder (a missing value,
    None or NaN, is null, as pandas' conversion made it). Not ``pa.array``: pyarrow imports
    pandas on its first conversion of anything (0.16 s of a short run)."""
    import pyarrow as pa

    if pa.types.is_large_string(typ):
        builder = pa.lib.StringBuilder()
        builder.append_values([None if v is None or v != v else v for v in a])
        return builder.finish().cast(typ)
    if pa.types.is_boolean(typ):
        bits = np.packbits(np.asarray(a, dtype=bool), bitorder="little")
        return pa.Array.from_buffers(typ, len(a), [None, pa.py_buffer(bits)])
    data = np.ascontiguousarray(a, dtype=typ.to_pandas_dtype())
    return pa.Array.from_buffers(typ, len(data), [None, pa.py_buffer(data)])


def _arrow_type(a: np.ndarray) -> Any:
    """A column's Arrow type: numpy's own, text (object) as ``large_string``, the type
    ``pa.Table.from_pandas`` gave pandas' string columns (read back as the same dtype)."""
    import pyarrow as pa

    return pa.large_string() if a.dtype.kind == "O" else pa.from_numpy_dtype(a.dtype)


class CsvLog(IterationWriter):
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._f = open(self.path, "w", newline="")  # noqa: SIM115  (closed by close())
        self._header = True

    def write(self, rows: Columns | pd.DataFrame) -> None:
        write_csv(rows, self._f, header=self._header)
        self._header = False

    def close(self) -> None:
        self._f.close()


def open_log(fmt: str, folder: Path) -> IterationWriter:
    """The writer for ``simulation.iteration_log`` in ``folder``."""
    path = Path(folder) / FILES[fmt]
    return ParquetLog(path) if fmt == "parquet" else CsvLog(path)


def read_log(folder: Path, columns: tuple[str, ...] | None = None) -> pd.DataFrame | None:
    """A run folder's iteration log, whichever format it has (None: neither file);
    ``columns``: only those of them the log has."""
    import pandas as pd

    folder = Path(folder)
    if (folder / FILES["parquet"]).is_file():
        path = folder / FILES["parquet"]
        if columns is not None:
            import pyarrow.parquet as pq

            names = pq.read_schema(path).names
            columns = [c for c in names if c in columns]
        return pd.read_parquet(path, columns=columns)
    if (folder / FILES["csv"]).is_file():
        use = None if columns is None else (lambda c: c in columns)
        return pd.read_csv(folder / FILES["csv"], usecols=use)
    return None


def read_for_report(folder: Path, columns: tuple[str, ...] = REPORT_COLUMNS,
                    max_rows: int | None = None) -> pd.DataFrame | None:
    """The log's ``columns``, read a chunk at a time; beyond ``max_rows`` (default
    ``REPORT_ROWS``) rows, every g-th iteration of each worker (g = ceil(rows / max_rows)),
    so the report's memory stays bounded at any run length. ``attrs``: ``sample_every``
    (g) and ``rows`` (the log's length); a plot draws a sampled iteration as standing for
    the g iterations of its worker that it starts. None: no log in the folder."""
    import pandas as pd

    folder = Path(folder)
    max_rows = REPORT_ROWS if max_rows is None else max(int(max_rows), 1)
    pq_path, csv_path = folder / FILES["parquet"], folder / FILES["csv"]
    if pq_path.is_file():
        import pyarrow.parquet as pq

        from specsim import safe_read  # a folder handed to `specsim report` may be anyone's

        safe_read.check_file(pq_path, "an iteration log", safe_read.DATA_BYTES)
        pf = pq.ParquetFile(pq_path, pre_buffer=False)
        inflated = sum(pf.metadata.row_group(i).total_byte_size
                       for i in range(pf.metadata.num_row_groups))
        if inflated > safe_read.limit(safe_read.DATA_BYTES):
            raise safe_read.too_much(str(pq_path), f"row groups of {inflated:,} bytes once "
                                     "decompressed", safe_read.DATA_BYTES)
        rows = pf.metadata.num_rows
        use = [c for c in pf.schema_arrow.names if c in columns]
        if rows <= max_rows:
            return _attrs(pf.read(columns=use).to_pandas(), 1, rows)
        # a row group at a time, one thread: iter_batches reads ahead (2-3x the memory)
        chunks = (pf.read_row_group(i, columns=use, use_threads=False).to_pandas()
                  for i in range(pf.metadata.num_row_groups))
    elif csv_path.is_file():
        from specsim import safe_read  # the pass stops at a line or size past the caps

        with safe_read.open_binary(csv_path, str(csv_path)) as f:  # one counting pass
            rows = max(sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 20), b""))
                       - 1, 0)
        if rows <= max_rows:
            return _attrs(read_log(folder, columns), 1, rows)
        chunks = pd.read_csv(csv_path, usecols=lambda c: c in columns, chunksize=CHUNK_ROWS)
    else:
        return None
    every = math.ceil(rows / max_rows)
    seen: dict[int, int] = {}  # iterations of each worker in the chunks before
    parts = []
    for chunk in chunks:
        worker = (chunk["worker"].to_numpy(np.int64) if "worker" in chunk
                  else np.zeros(len(chunk), np.int64))
        ids, inv = np.unique(worker, return_inverse=True)
        before = np.array([seen.get(int(w), 0) for w in ids], np.int64)
        counts = np.bincount(inv, minlength=ids.size)
        rank = before[inv] + pd.Series(inv).groupby(inv).cumcount().to_numpy()
        parts.append(chunk[rank % every == 0])
        for w, c in zip(ids.tolist(), (before + counts).tolist(), strict=True):
            seen[w] = c
    return _attrs(pd.concat(parts, ignore_index=True), every, rows)


def _attrs(frame: pd.DataFrame, every: int, rows: int) -> pd.DataFrame:
    frame.attrs.update(sample_every=int(every), rows=int(rows))
    return frame


# pandas writes CSV through the csv module with these settings (to_csv's defaults)
_DIALECT = dict(lineterminator="\n", quoting=csv.QUOTE_MINIMAL, quotechar='"', doublequote=True)


def _field(text: str) -> str:
    """``text`` as the csv module writes it inside a row (quoted only where needed)."""
    buf = io.StringIO()
    csv.writer(buf, **_DIALECT).writerow([text, ""])
    return buf.getvalue()[:-2]  # less the empty second field's "," and the line end


def write_csv(frame: Columns | pd.DataFrame, f: IO[str], header: bool = True,
              block: int = CHUNK_ROWS) -> None:
    """``frame.to_csv(f, index=False, header=header, float_format="%.9g")``, byte for byte,
    about 3x faster: one ``%`` format per row instead of one call per value (pandas),
    ``block`` rows at a time so the text and Python values held stay bounded. ``frame``: a
    frame, or its columns by name (numpy arrays: a run's blocks, written without pandas).
    Rows with a NaN are written value by value (NaN as an empty field). A column of another
    type than numpy int, float or bool or strings, or a one-column frame, goes to pandas."""
    cols = frame
    names = list(cols.keys()) if isinstance(cols, Mapping) else list(cols.columns)
    fmts, kinds, arrays = [], [], []
    for name in names:
        s = cols[name]
        dt = s.dtype
        if isinstance(dt, np.dtype) and dt.kind in "iufb":
            fmts.append({"f": "%.9g", "b": "%s"}.get(dt.kind, "%d"))
            kinds.append(dt.kind)
            arrays.append(np.asarray(s))
            continue
        text = _strings(s) if _is_text(dt) else None
        if text is None:
            break
        fmts.append("%s")
        kinds.append("s")
        arrays.append(text)
    if len(arrays) < len(names) or len(names) < 2:
        if isinstance(cols, Mapping):
            import pandas as pd

            cols = pd.DataFrame(dict(cols))
        cols.to_csv(f, index=False, header=header, float_format="%.9g")
        return
    if header:
        f.write(",".join(_field(str(c)) for c in names) + "\n")
    floats = [a for a, k in zip(arrays, kinds, strict=True) if k == "f"]
    fmt = ",".join(fmts)
    n = len(arrays[0])

    def one(row: tuple) -> str:  # a row with a NaN: NaN is an empty field, as in pandas
        return ",".join("" if v != v else fm % v for v, fm in zip(row, fmts, strict=True))

    for lo in range(0, n, block):
        hi = lo + block
        nan = np.zeros(min(hi, n) - lo, bool)
        for a in floats:
            nan |= np.isnan(a[lo:hi])
        rows = zip(*(a[lo:hi].tolist() if isinstance(a, np.ndarray) else a[lo:hi]
                     for a in arrays), strict=True)
        f.write("".join((one(r) if bad else fmt % r) + "\n"
                        for r, bad in zip(rows, nan.tolist(), strict=True)))


def _is_text(dtype: Any) -> bool:
    """A text column's dtype: numpy object, or pandas' string dtype (pandas then in use)."""
    if isinstance(dtype, np.dtype):
        return dtype.kind == "O"
    import pandas as pd

    return isinstance(dtype, pd.StringDtype)


def _strings(s: Any) -> list[str] | None:
    """A text column (an object array or a Series) as the fields pandas writes (missing
    values empty); None when it holds anything but strings and missing values."""
    values = s.tolist()
    na = getattr(sys.modules.get("pandas"), "NA", None)  # pd.NA only exists once imported
    text: dict = {}
    for v in set(values):
        if isinstance(v, str):
            text[v] = _field(v)
        elif v is None or (na is not None and v is na) or (isinstance(v, float) and v != v):
            text[v] = ""
        else:
            return None
    return [text[v] for v in values]
