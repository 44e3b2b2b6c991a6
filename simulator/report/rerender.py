"""``specsim report DIR``: write report.md, report.html and the plots again from a run's
outputs (metrics.json, scenario.json, requests.csv, iterations.csv), e.g. after a run with
``--no-report`` or with a newer specsim. Only specsim's own report files are replaced, each
atomically; the folder must be a specsim output."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pandas as pd

from specsim.errors import ScenarioError
from specsim.simulator.cluster.engine import Result
from specsim.simulator.report.output import MARKER
from specsim.simulator.report.report import PLOTS, write_report

REPORT_FILES = ("report.md", "report.html", *(name for name, *_ in PLOTS))


def _read(folder: Path) -> Result:
    try:
        metrics = json.loads((folder / "metrics.json").read_text())
        scenario = (json.loads((folder / "scenario.json").read_text())
                    if (folder / "scenario.json").is_file() else {})
        req = pd.read_csv(folder / "requests.csv")
        it = (pd.read_csv(folder / "iterations.csv") if (folder / "iterations.csv").is_file()
              else pd.DataFrame())
    except (OSError, ValueError) as exc:
        raise ScenarioError(f"{folder}: not a readable specsim run output ({exc})") from None
    if not isinstance(metrics, dict):
        raise ScenarioError(f"{folder}/metrics.json: expected a JSON object")
    return Result(metrics, req, it, scenario)


def rerender(folder: str | Path) -> list[str]:
    """Regenerate the report files of a run folder; returns the files written."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ScenarioError(f"{folder}: not a folder")
    if not (folder / MARKER).is_file() or not (folder / "metrics.json").is_file():
        raise ScenarioError(f"{folder}: not a specsim run output (no {MARKER} and "
                            "metrics.json); give the --out folder of `specsim run`")
    result = _read(folder)
    tmp = Path(tempfile.mkdtemp(prefix=".report-", dir=folder))
    try:
        write_report(result, tmp)
        written = sorted(p.name for p in tmp.iterdir())
        for name in REPORT_FILES:  # plots no longer drawn go too (they are ours)
            if name not in written:
                (folder / name).unlink(missing_ok=True)
        for name in written:
            os.replace(tmp / name, folder / name)
        marker = folder / MARKER
        try:
            info = json.loads(marker.read_text())
            info["files"] = sorted(set(info.get("files", [])) - set(REPORT_FILES)
                                   | set(written))
            marker.write_text(json.dumps(info, indent=1) + "\n")
        except (OSError, ValueError):
            pass
        return written
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
