"""The iteration log streamed to --out in chunks: equal to the in-memory log, bounded in
memory, and never partial in --out when the run is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from specsim.simulator.cli import main
from specsim.simulator.cluster.engine import run_scenario
from specsim.simulator.metrics import iteration_log

REPO = Path(__file__).resolve().parents[1]
CHAT = REPO / "scenarios" / "chat.yaml"
SMALL = ["--set", "workload.synthetic.requests=150", "--quiet"]


@pytest.fixture
def chunks(monkeypatch):
    """Chunks of 500 rows, and the size of every chunk written."""
    monkeypatch.setattr(iteration_log, "CHUNK_ROWS", 500)
    sizes: list[int] = []
    for cls in (iteration_log.ParquetLog, iteration_log.CsvLog):
        write = cls.write
        monkeypatch.setattr(cls, "write", lambda self, f, w=write: (sizes.append(len(f)),
                                                                     w(self, f))[1])
    return sizes


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_streamed_log_equals_the_in_memory_one_in_bounded_chunks(tmp_path, chunks, fmt):
    memory = run_scenario(CHAT, overrides={"workload.synthetic.requests": 150}).iterations
    assert main(["run", str(CHAT), *SMALL, "--set", f"simulation.iteration_log={fmt}",
                 "--out", str(tmp_path / "o"), "--no-report"]) == 0
    assert len(chunks) > 3 and max(chunks) <= 500 + 256  # at most a chunk + one segment
    assert sum(chunks) == len(memory)
    streamed = iteration_log.read_log(tmp_path / "o")
    assert not (tmp_path / "o" / iteration_log.FILES[
        "csv" if fmt == "parquet" else "parquet"]).exists()
    if fmt == "parquet":
        pd.testing.assert_frame_equal(streamed, memory, check_exact=True)
    else:  # byte for byte the one-shot CSV specsim always wrote
        one_shot = memory.to_csv(index=False, float_format="%.9g")
        assert (tmp_path / "o" / "iterations.csv").read_text() == one_shot


def test_same_seed_gives_identical_bytes_and_an_unrecorded_log_keeps_its_columns(tmp_path):
    for name in ("a", "b"):
        assert main(["run", str(CHAT), *SMALL, "--out", str(tmp_path / name),
                     "--no-report"]) == 0
    a, b = (tmp_path / n / "iterations.parquet" for n in ("a", "b"))
    assert a.read_bytes() == b.read_bytes()
    assert main(["run", str(CHAT), *SMALL, "--set", "simulation.record_iterations=false",
                 "--out", str(tmp_path / "c"), "--no-report"]) == 0
    empty = iteration_log.read_log(tmp_path / "c")
    assert len(empty) == 0 and "time_s" in empty.columns and "policy_reason" in empty.columns


def test_report_reads_the_streamed_log_back(tmp_path):
    assert main(["run", str(CHAT), *SMALL, "--out", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "timeline.png").stat().st_size > 0
    assert main(["report", str(tmp_path / "o")]) == 0


def test_a_run_killed_mid_way_leaves_nothing_in_out(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "specsim.simulator.cli", "run", str(CHAT), "--quiet",
         "--set", "workload.synthetic.requests=300000", "--set", "simulation.compiled=false",
         "--out", str(out)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        partial = None
        while time.monotonic() < deadline and partial is None:
            for d in tmp_path.glob(".out.specsim-tmp-*"):
                log = d / "iterations.parquet"
                if log.is_file() and log.stat().st_size > 0:
                    partial = d
            time.sleep(0.2)
        assert proc.poll() is None, "the run ended before it could be killed"
        assert partial is not None, "no chunk was streamed within 120 s"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not out.exists()  # nothing partial where the user looks
    assert partial.exists()  # the staging folder of the killed run ...
    assert main(["run", str(CHAT), *SMALL, "--out", str(out), "--no-report"]) == 0
    assert not partial.exists()  # ... is removed by the next run into the same parent
    assert (out / "iterations.parquet").is_file()
