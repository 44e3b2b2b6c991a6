"""What a sweep folder holds: its file names, how a file in it is written, the summary.

The sweep runner (sweep.py) writes these files, the report (sweep_report.py) reads them
back and the Dask backend (sweep_dask.py) checks the workers' specsim version against
this one; all three import this module and none of them imports another one's module for
it, so the planning modules import one way (tests/test_architecture.py).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specsim.outputs import version as _version  # the one lookup (sweep.py reads it here)

JOURNAL = ".sweep-journal.jsonl"
MARKER = ".specsim-sweep"
DEFINITION = "sweep.json"
TABLE_CSV = "sweep.csv"
TABLE_PARQUET = "sweep.parquet"
SUMMARY_CSV = "summary.csv"
_OUR_PNGS = {"tpot_vs_qps.png", "speedup_heatmap.png", "throughput_vs_tpot.png",
             "cost_vs_qps.png"}
#: metrics summarised with a 95% t-interval across seeds (summary.csv)
SUMMARY_METRICS = ("tpot_s.p50", "tpot_s.p99", "ttft_s.p99", "throughput_output_tokens_per_s",
                   "cost_usd_per_million_output_tokens")


def _atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """A file of the sweep folder, by ``specsim.outputs.atomic_write`` (a temporary file
    beside it, synced, renamed into place: never half-written)."""
    from specsim.outputs import atomic_write

    atomic_write(path, write)


def summarize(table, keys: list[str]):
    """summary.csv: per point, mean and 95% t-interval (scipy.stats.t) across seeds of
    TPOT p50/p99, TTFT p99, throughput and $ per million output tokens; NaN bounds with
    one seed."""
    import numpy as np
    import pandas as pd
    from scipy import stats

    out = []
    for point, g in table.groupby("point", sort=True):
        row: dict[str, Any] = {"point": point, **{k: g[k].iloc[0] for k in keys},
                               "seeds": len(g)}
        for m in SUMMARY_METRICS:
            vals = (pd.to_numeric(g[m], errors="coerce").to_numpy(dtype=float)
                    if m in g else np.array([]))
            vals = vals[np.isfinite(vals)]
            n = len(vals)
            mean = float(vals.mean()) if n else math.nan
            if n >= 2:
                half = float(stats.t.ppf(0.975, n - 1) * vals.std(ddof=1) / math.sqrt(n))
            else:
                half = math.nan
            row[f"{m}.mean"] = mean
            row[f"{m}.ci95_low"] = mean - half
            row[f"{m}.ci95_high"] = mean + half
            row[f"{m}.ci95_half_width"] = half
        out.append(row)
    return pd.DataFrame(out)


def listed_files(folder: Path) -> set[str] | None:
    """The files the folder's marker lists as written by specsim (None: a marker without a
    list, from a specsim before the list, or none readable: such a folder is judged by file
    names alone). The list is what tells a user's report.md from the sweep's own."""
    from specsim import safe_read

    try:
        info = safe_read.load_json(Path(folder) / MARKER, "a sweep's marker")
    except ValueError:  # InputError too: a foreign or broken marker lists nothing
        return None
    files = info.get("files") if isinstance(info, dict) else None
    return {str(f) for f in files} if isinstance(files, list) else None


def marker_text(files: set[str]) -> str:
    """The marker's content: who wrote the folder, with which version, and which files."""
    import json

    return json.dumps({"written_by": "specsim sweep", "version": _version(),
                       "files": sorted(files | {MARKER})}) + "\n"


def note_files(folder: Path, names: list[str]) -> None:
    """Add ``names`` to the marker's list, before they are written (a sweep killed in
    between lists a file it did not write yet, never the other way round)."""
    listed = listed_files(folder) or set()
    if set(names) <= listed:
        return
    _atomic_write(Path(folder) / MARKER,
                  lambda p: p.write_text(marker_text(listed | set(names))))


def foreign_report_file(folder: Path, names: set[str]) -> str | None:
    """The first of ``names`` present in ``folder`` that its marker does not list (None when
    all listed, or the marker has no list: an older sweep, judged by names)."""
    listed = listed_files(folder)
    if listed is None:
        return None
    return next((n for n in sorted(names)
                 if os.path.lexists(Path(folder) / n) and n not in listed), None)


def prune_files(folder: Path) -> None:
    """Drop from the marker's list the names no longer in the folder (noted before a write
    that did not happen: a plot the grid does not support)."""
    listed = listed_files(folder)
    if listed is None:
        return
    kept = {n for n in listed if os.path.lexists(Path(folder) / n)}
    if kept != listed:
        _atomic_write(Path(folder) / MARKER, lambda p: p.write_text(marker_text(kept)))
