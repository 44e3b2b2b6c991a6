"""``specsim run --out`` writes its outputs without pandas (issue 22: a 1k-request replay
must not pay pandas' import): from the end of the simulation (its invariants checked) to the
command's return -- metrics.json, requests.csv, the iteration log, report.md and the
summary table -- no pandas function runs in the main process. The plots' forked process
may use pandas; ``Result.requests`` builds its frame only when an API user reads it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: runs the console script's path (cli.main) with a profiler switched on where the
#: simulation ends: every pandas function called from then on is recorded
WATCH = r"""
import os, sys
import pandas
from specsim.simulator import cli
from specsim.simulator.cluster.simulation import Simulation

ROOT = os.path.dirname(pandas.__file__) + os.sep
calls = []

def caller(frame):
    while frame is not None and frame.f_code.co_filename.startswith(ROOT):
        frame = frame.f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame else "?"

def watch(frame, event, arg):
    if event == "call" and frame.f_code.co_filename.startswith(ROOT):
        calls.append((frame.f_code.co_name, caller(frame.f_back)))
    elif event == "c_call" and str(getattr(arg, "__module__", "")).startswith("pandas"):
        calls.append((arg.__name__, caller(frame)))

check = Simulation.check_invariants

def ended(self):  # the first thing run_scenario does once the simulation has ended
    print("WATCHING", flush=True)
    sys.setprofile(watch)
    return check(self)

Simulation.check_invariants = ended
cli._plots_later = True  # as the console script (cli.entry): the PNGs by a forked process
rc = cli.main(sys.argv[1:])
sys.setprofile(None)
print("RC", rc)
print("PANDAS CALLS", len(calls))
for name, where in sorted(set(calls))[:25]:
    print(" ", name, "from", where)
"""


@pytest.mark.parametrize("scenario, extra", [
    ("chat.yaml", ["--set", "simulation.iteration_log=csv"]),  # CSV log
    ("pd_disaggregated.yaml", []),  # Parquet log, a PD run's link columns
])
def test_run_writes_its_outputs_without_calling_pandas(tmp_path, scenario, extra):
    out = tmp_path / "o"
    proc = subprocess.run(
        [sys.executable, "-c", WATCH, "run", str(REPO / "scenarios" / scenario), "--quiet",
         "--set", "workload.synthetic.requests=60", *extra, "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    assert "WATCHING" in text and "RC 0" in text, text  # the watch was on, the run ended
    assert "drawn by a second process" in text, text
    assert "PANDAS CALLS 0" in text, text
    for name in ("metrics.json", "requests.csv", "report.md", "scenario.json"):
        assert (out / name).stat().st_size > 0, name
    assert (out / ("iterations.csv" if extra else "iterations.parquet")).is_file()


def test_an_api_run_imports_pandas_only_when_a_frame_is_read():
    """``run_scenario`` hands back the request table and the iteration log as columns;
    ``Result.requests`` / ``Result.iterations`` build their frames (and import pandas) when
    first read, equal to the columns."""
    code = ("import sys\nimport numpy as np\n"
            "from specsim.simulator.api import run_scenario\n"
            "r = run_scenario(sys.argv[1], overrides={'workload.synthetic.requests': 40})\n"
            "before = 'pandas' in sys.modules\n"
            "cols = r.iterations_columns()\n"
            "it = r.iterations\n"
            "same = list(it.columns) == list(cols) and all(\n"
            "    np.array_equal(it[c].to_numpy(), v) for c, v in cols.items()\n"
            "    if v.dtype.kind != 'O')\n"
            "print(before, 'pandas' in sys.modules, same, len(r.requests))")
    out = subprocess.run([sys.executable, "-c", code, str(REPO / "scenarios" / "chat.yaml")],
                         capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True", "True", "40"]
