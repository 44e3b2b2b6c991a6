"""Write a run's outputs atomically: a temp folder renamed into place, or nothing at all."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from .engine import Result, finite_or_none


def metrics_json(result: Result, include_wall_time: bool = True) -> str:
    m = dict(result.metrics)
    if not include_wall_time:
        m.pop("wall_time_s", None)
    return json.dumps(finite_or_none(m), indent=2, sort_keys=False) + "\n"


def write_outputs(result: Result, out_dir: Path, report: bool = True) -> None:
    """metrics.json, requests.csv, iterations.csv, report.md (+ PNGs) into ``out_dir``.

    Everything is written into a sibling temp folder first; only a complete set replaces
    ``out_dir``, so an error midway leaves nothing half-written behind.
    """
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        (tmp / "metrics.json").write_text(metrics_json(result))
        result.requests.to_csv(tmp / "requests.csv", index=False, float_format="%.9g")
        result.iterations.to_csv(tmp / "iterations.csv", index=False, float_format="%.9g")
        if report:
            from .report import write_report

            write_report(result, tmp)
        if out_dir.exists():
            backup = out_dir.with_name(f".{out_dir.name}.old")
            if backup.exists():
                shutil.rmtree(backup)
            os.replace(out_dir, backup)
            os.replace(tmp, out_dir)
            shutil.rmtree(backup)
        else:
            os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
