"""The iteration log streamed to disk in chunks, so memory stays flat at any trace length.

``Metrics`` (collector.py) hands a writer each full chunk of rows as a DataFrame (the same
frame ``iterations_frame`` builds) and the rest at the end; the file then equals the
in-memory log (a test compares them). Parquet (pyarrow, one row group per chunk) is the
default; CSV appends each chunk with the formatting ``specsim run`` always used, so a
chunked CSV is byte for byte the one-shot one.

Rules:
1. A writer writes into the run's staging folder (report/output.py), never into ``--out``
   itself: a run killed mid-way leaves only a temporary folder that the next run removes.
2. An empty log still has its columns (a Parquet schema, a CSV header).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

#: simulation.iteration_log -> file name
FILES = {"parquet": "iterations.parquet", "csv": "iterations.csv"}
#: rows held in memory before a chunk is written (about 14 columns x 8 bytes each)
CHUNK_ROWS = 65_536


class IterationWriter:
    """Interface: ``write(frame)`` appends rows; ``close()`` finishes the file."""

    path: Path

    def write(self, frame: pd.DataFrame) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class ParquetLog(IterationWriter):
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._writer = None
        self._schema = None

    def write(self, frame: pd.DataFrame) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pandas(frame, preserve_index=False, schema=self._schema)
        if self._writer is None:
            self._schema = table.schema
            self._writer = pq.ParquetWriter(self.path, self._schema)
        self._writer.write_table(table)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


class CsvLog(IterationWriter):
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._f = open(self.path, "w", newline="")  # noqa: SIM115  (closed by close())
        self._header = True

    def write(self, frame: pd.DataFrame) -> None:
        frame.to_csv(self._f, index=False, header=self._header, float_format="%.9g")
        self._header = False

    def close(self) -> None:
        self._f.close()


def open_log(fmt: str, folder: Path) -> IterationWriter:
    """The writer for ``simulation.iteration_log`` in ``folder``."""
    path = Path(folder) / FILES[fmt]
    return ParquetLog(path) if fmt == "parquet" else CsvLog(path)


def read_log(folder: Path) -> pd.DataFrame | None:
    """A run folder's iteration log, whichever format it has (None: neither file)."""
    folder = Path(folder)
    if (folder / FILES["parquet"]).is_file():
        return pd.read_parquet(folder / FILES["parquet"])
    if (folder / FILES["csv"]).is_file():
        return pd.read_csv(folder / FILES["csv"])
    return None
