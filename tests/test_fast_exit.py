"""The console script ends a finished `specsim run` with ``os._exit`` (no interpreter
teardown, issue 22): what it printed and wrote must all be there, as after a normal exit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHAT = REPO / "scenarios" / "chat.yaml"


def test_a_run_ended_fast_keeps_its_piped_output_and_every_file(tmp_path):
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "specsim.simulator.cli", "run", str(CHAT),
                        "--quiet", "--no-plots", "--set", "workload.synthetic.requests=50",
                        "--out", str(out)], cwd=REPO, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    # piped stdout is block-buffered: whatever sat in a buffer at os._exit would be lost
    assert "TTFT" in p.stdout and "wrote" in p.stderr
    marker = json.loads((out / ".specsim-output").read_text())
    assert {"metrics.json", "requests.csv", "report.md"} <= set(marker["files"])
    assert all((out / name).is_file() for name in marker["files"])
    assert json.loads((out / "metrics.json").read_text())["requests_arrived"] == 50


def test_main_called_in_process_returns_normally(tmp_path):
    from specsim.simulator.cli import main

    code = main(["run", str(CHAT), "--quiet", "--no-report",
                 "--set", "workload.synthetic.requests=20", "--out", str(tmp_path / "o")])
    assert code == 0  # still here: only the console script's entry() ends the process
