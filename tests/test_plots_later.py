"""The report's plots drawn by a second process (``report/plots_later.py``): the run's other
outputs are in place first, the PNGs and the final report follow, each file whole, and a
folder replaced meanwhile is never touched."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specsim.outputs import MARKER, is_temp, marker_identity
from specsim.simulator.report import plots_later
from specsim.simulator.report.output import write_outputs
from specsim.simulator.report.report import PLOTS, PLOTS_PENDING
from tests.test_report import PNG_MAGIC, _run

NAMES = {n for n, *_ in PLOTS}


@pytest.fixture(scope="module")
def result():
    return _run(n=60)


def _wait_for(path: Path, timeout: float = 60.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.is_file():
            return True
        time.sleep(0.05)
    return False


def _linked(text: str) -> set[str]:
    return set(re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", text))


def test_outputs_first_then_plots(result, tmp_path):
    out = tmp_path / "run"
    assert write_outputs(result, out, plots="later") == "new"
    # what the command returns with: every other output, the marker naming the PNGs to come
    for name in ("metrics.json", "requests.csv", "report.md", "report.html", MARKER):
        assert (out / name).is_file()
    assert NAMES <= set(json.loads((out / MARKER).read_text())["files"])
    # the second process moves the PNGs in, then the report that links them
    assert _wait_for(out / "iteration_time.png")
    end = time.monotonic() + 60
    while PLOTS_PENDING in (out / "report.md").read_text() and time.monotonic() < end:
        time.sleep(0.05)
    text = (out / "report.md").read_text()
    assert PLOTS_PENDING not in text
    assert _linked(text) == NAMES == {p.name for p in out.glob("*.png")}
    for name in NAMES:
        assert (out / name).read_bytes()[:8] == PNG_MAGIC
    assert "data:image/png;base64" in (out / "report.html").read_text()
    assert not [p for p in tmp_path.iterdir() if is_temp(p.name)]  # its scratch folder went
    # the folder is still specsim's own output: a --force run may replace it
    assert write_outputs(result, out, force=True, plots=False) == "replace"
    assert not list(out.glob("*.png"))


def test_the_run_returns_before_the_plots_exist(result, tmp_path, monkeypatch):
    """What the command returns with, the second process held back (``start`` stubbed): no
    PNG, report.md saying they are being drawn; the second process's work (``finish``)
    then puts them and the final report in place."""
    handed = []
    monkeypatch.setattr(plots_later, "start",
                        lambda res, out, mode: handed.append((out, mode)) or True)
    out = tmp_path / "run"
    mode = write_outputs(result, out, plots="later")
    assert handed == [(out, mode)]
    assert not list(out.glob("*.png"))
    assert PLOTS_PENDING in (out / "report.md").read_text()
    assert plots_later.finish(result, out, mode, marker_identity(out))
    assert {p.name for p in out.glob("*.png")} == NAMES
    assert PLOTS_PENDING not in (out / "report.md").read_text()


def test_a_replaced_folder_is_left_alone(result, tmp_path):
    out = tmp_path / "run"
    write_outputs(result, out, plots=False)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    stale = marker_identity(out)
    os.utime(out / MARKER, ns=(1, 1))  # a later run committed its own marker meanwhile
    assert plots_later.finish(result, out, "new", stale) is False
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert not [p for p in tmp_path.iterdir() if is_temp(p.name)]
    assert plots_later.finish(result, out, "new", None) is False  # no marker at commit


def test_without_fork_the_plots_are_drawn_before_the_commit(result, tmp_path, monkeypatch):
    """Where there is no fork (``can_fork``) the run draws them itself, known before the
    commit: report.md never says they are being drawn, nothing is handed on."""
    monkeypatch.setattr(plots_later, "can_fork", lambda: False)
    monkeypatch.setattr(plots_later, "start", lambda *a: pytest.fail("nothing to hand on"))
    out = tmp_path / "run"
    write_outputs(result, out, plots="later")
    assert _linked((out / "report.md").read_text()) == NAMES
    assert {p.name for p in out.glob("*.png")} == NAMES
    assert PLOTS_PENDING not in (out / "report.md").read_text()


def test_only_files_the_marker_names_move_in(result, tmp_path):
    """A committed output is amended only with the files its marker listed at the commit
    (``outputs.amend_committed``): an output committed without plots gets none."""
    out = tmp_path / "run"
    write_outputs(result, out, plots=False)
    assert plots_later.finish(result, out, "new", marker_identity(out)) is True
    assert not list(out.glob("*.png"))
    assert not [p for p in tmp_path.iterdir() if is_temp(p.name)]


def test_console_script_returns_before_the_plots(tmp_path):
    """`specsim run` (the console script) returns with every other output in place; the
    report says its plots are coming; `--wait-plots` draws them before returning."""
    scen = Path(__file__).resolve().parents[1] / "scenarios" / "chat.yaml"
    cmd = [sys.executable, "-m", "specsim.simulator.cli", "run", str(scen), "--quiet",
           "--set", "workload.synthetic.requests=40"]
    p = subprocess.run([*cmd, "--out", str(tmp_path / "a")], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert "drawn by a second process" in p.stderr
    assert _wait_for(tmp_path / "a" / "timeline.png")
    p = subprocess.run([*cmd, "--out", str(tmp_path / "b"), "--wait-plots"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "second process" not in p.stderr
    assert (tmp_path / "b" / "timeline.png").is_file()  # there when the command returned
    assert PLOTS_PENDING not in (tmp_path / "b" / "report.md").read_text()
