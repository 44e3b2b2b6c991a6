"""What a sweep folder holds: its file names, how a file in it is written, the summary.

The sweep runner (sweep.py) writes these files, the report (sweep_report.py) reads them
back and the Dask backend (sweep_dask.py) checks the workers' specsim version against
this one; all three import this module and none of them imports another one's module for
it, so the planning modules import one way (tests/test_architecture.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("specsim")
    except PackageNotFoundError:
        return "unknown"


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
