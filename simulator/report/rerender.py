"""``specsim report DIR``: write report.md, report.html and the plots again from a folder's
own files, e.g. after a run with ``--no-report`` or with a newer specsim. The kind of folder
is told by its marker files:

- a run (``.specsim-output`` and metrics.json): from metrics.json, scenario.json,
  requests.csv and the iteration log (iterations.parquet or iterations.csv);
- a baseline pair (a run made with ``specsim run --baseline``: metrics.json holds the
  ``baseline`` section, the speculation-off twin's figures): the same, with the comparison
  and the two product tables (daily cost and energy, native vs speculative);
- a sweep (``.specsim-sweep``, sweep.json and sweep.csv): the sweep's plots, and a report
  with the grid, the assumptions and the per-point summary (planning/sweep_report.py).

Anything else is a one-line error. Only specsim's own report files are replaced, each
atomically."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd

from specsim import safe_read
from specsim.errors import ScenarioError
from specsim.outputs import atomic_write, clean_stale, temp_name, unescape_frame
from specsim.simulator.cluster.engine import Result
from specsim.simulator.metrics.iteration_log import read_for_report
from specsim.simulator.report.output import MARKER
from specsim.simulator.report.report import PLOTS, write_report

REPORT_FILES = ("report.md", "report.html", *(name for name, *_ in PLOTS))


def _read(folder: Path) -> Result:
    try:  # any folder may be handed over: every file read under safe_read's caps
        metrics = safe_read.load_json(folder / "metrics.json", "a run's metrics")
        scenario = (safe_read.load_json(folder / "scenario.json", "a run's scenario")
                    if (folder / "scenario.json").is_file() else {})
        req = unescape_frame(safe_read.read_csv(folder / "requests.csv",
                                                "a run's requests table"))  # names as run
        it = read_for_report(folder)  # the plotted columns; sampled when huge
        it = it if it is not None else pd.DataFrame()
    except safe_read.InputError:
        raise
    except (OSError, ValueError) as exc:
        raise ScenarioError(f"{folder}: not a readable specsim run output ({exc})") from None
    if not isinstance(metrics, dict):
        raise ScenarioError(f"{folder}/metrics.json: expected a JSON object")
    # an emptied or foreign metrics.json would draw a report of defaults ("uncalibrated
    # default") over a good one: refused, the report left as it is
    bad = next((k for k, kind in _NEEDED.items() if not isinstance(metrics.get(k), kind)), None)
    if bad is not None:
        raise ScenarioError(f"{folder}/metrics.json: not a specsim run's metrics ({bad!r} "
                            f"missing or not {_NEEDED[bad][0].__name__}); the report was "
                            "left as it was")
    return Result(metrics, req, it, scenario)


#: what every run's metrics.json holds, and what the report reads first
_NEEDED = {"scenario": (str,), "calibration": (str,), "requests_completed": (int,),
           "ttft_s": (dict,), "tpot_s": (dict,), "e2e_s": (dict,)}


#: the folder kinds ``specsim report`` knows
RUN, BASELINE, SWEEP = "run", "baseline pair", "sweep"
SWEEP_MARKER = ".specsim-sweep"  # planning/sweep.py's MARKER (not imported: it is light here)


def _marker(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def detect(folder: str | Path) -> str:
    """RUN, BASELINE or SWEEP from the folder's marker files; a one-line error otherwise."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ScenarioError(f"{folder}: not a folder")
    run = _marker(folder / MARKER) and (folder / "metrics.json").is_file()
    sweep = _marker(folder / SWEEP_MARKER) and (folder / "sweep.json").is_file()
    if run and sweep:
        raise ScenarioError(f"{folder}: holds both a run's ({MARKER}) and a sweep's "
                            f"({SWEEP_MARKER}) marker; not touching it")
    if sweep:
        return SWEEP
    if not run:
        raise ScenarioError(f"{folder}: not a specsim run output or sweep (no {MARKER} with "
                            f"metrics.json, nor {SWEEP_MARKER} with sweep.json); give the "
                            "--out folder of `specsim run` or `specsim sweep`")
    metrics = safe_read.load_json(folder / "metrics.json", "a run's metrics")
    return BASELINE if isinstance(metrics, dict) and metrics.get("baseline") else RUN


def _refuse_foreign(folder: Path) -> None:
    """A report file the marker does not list was not written by specsim: not replaced."""
    try:
        listed = set(safe_read.load_json(folder / MARKER, "a run's marker").get("files", []))
    except (ValueError, AttributeError, TypeError):  # InputError is a ValueError
        listed = set()
    for name in REPORT_FILES:
        if os.path.lexists(folder / name) and name not in listed:
            raise ScenarioError(f"{folder}: {name} was not written by specsim (its "
                                f"{MARKER} does not list it); not replacing it")


def rerender(folder: str | Path) -> list[str]:
    """Regenerate the report files of a run, baseline-pair or sweep folder; returns the
    files written."""
    folder = Path(folder)
    if detect(folder) == SWEEP:
        from specsim.simulator.planning.sweep_report import render

        try:
            return render(folder, plots=True)[0]
        except OSError as exc:
            raise ScenarioError(f"{folder}: could not write the report "
                                f"({exc.strerror or exc})") from None
    result = _read(folder)
    _refuse_foreign(folder)
    # drawn in full into a staging folder first (specsim.outputs' naming: a killed run's is
    # removed next time), then each file renamed over ours: a full disk leaves the old report
    clean_stale(folder)
    tmp = temp_name(folder, "report")
    try:
        os.mkdir(tmp, 0o777)
        write_report(result, tmp)
        written = sorted(p.name for p in tmp.iterdir())
        for name in REPORT_FILES:  # plots no longer drawn go too (they are ours)
            if name not in written:
                (folder / name).unlink(missing_ok=True)
        for name in written:
            os.replace(tmp / name, folder / name)
        marker = folder / MARKER
        try:
            info = safe_read.load_json(marker, "a run's marker")
            info["files"] = sorted(set(info.get("files", [])) - set(REPORT_FILES)
                                   | set(written))
        except (OSError, ValueError, TypeError):
            info = None
        if isinstance(info, dict):
            atomic_write(marker, json.dumps(info, indent=1) + "\n")
        return written
    except OSError as exc:
        raise ScenarioError(f"{folder}: could not write the report "
                            f"({exc.strerror or exc})") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
