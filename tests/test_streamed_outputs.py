"""The iteration log streamed to --out in chunks: equal to the in-memory log, bounded in
memory, and never partial in --out when the run is killed."""

from __future__ import annotations

import json
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


def _rows(rows) -> int:
    """Rows in a chunk: a frame, or its columns by name (``Metrics.iterations_columns``)."""
    return len(next(iter(rows.values()))) if isinstance(rows, dict) else len(rows)


@pytest.fixture
def chunks(monkeypatch):
    """Chunks of 500 rows, and the size of every chunk written."""
    monkeypatch.setattr(iteration_log, "CHUNK_ROWS", 500)
    sizes: list[int] = []
    for cls in (iteration_log.ParquetLog, iteration_log.CsvLog):
        write = cls.write
        monkeypatch.setattr(cls, "write", lambda self, f, w=write: (sizes.append(_rows(f)),
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
    for name in ("iterations.parquet", "requests.csv", "metrics.json"):
        a, b = (tmp_path / n / name for n in ("a", "b"))
        if name == "metrics.json":  # all but the wall time
            a, b = ({k: v for k, v in json.loads(p.read_text()).items() if k != "wall_time_s"}
                    for p in (a, b))
            assert a == b
        else:
            assert a.read_bytes() == b.read_bytes(), name
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
         "--set", "workload.synthetic.requests=300000",
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


def test_rows_held_in_memory_never_exceed_a_chunk(tmp_path, monkeypatch):
    """The collector's own buffer: rows held and its capacity stay within one chunk plus
    one committed stretch (a segment is at most 256 iterations), however long the run."""
    from specsim.simulator.metrics.collector import Metrics

    monkeypatch.setattr(iteration_log, "CHUNK_ROWS", 300)
    held: list[tuple[int, int]] = []
    reserve = Metrics.reserve_rows  # (the SimPy loop's every commit; the solo loop's when
    # its rows would pass a chunk)

    def spy(self, m):
        out = reserve(self, m)
        held.append((self._n + m, len(self._buf)))
        return out

    monkeypatch.setattr(Metrics, "reserve_rows", spy)
    assert main(["run", str(CHAT), "--quiet", "--set", "workload.synthetic.requests=500",
                 "--out", str(tmp_path / "o"), "--no-report"]) == 0
    rows = len(iteration_log.read_log(tmp_path / "o"))
    start = len(Metrics()._buf)  # the buffer's initial capacity (4096 rows)
    assert rows > 2 * start and len(held) > 10
    assert max(n for n, _ in held) <= 300 + 256
    assert max(cap for _, cap in held) == start  # it never grew, though the log did


def test_csv_writer_is_pandas_byte_for_byte():
    """requests.csv and the CSV log's chunks: the bytes of to_csv(float_format="%.9g")."""
    import io

    import numpy as np

    frame = pd.DataFrame({
        "i": np.arange(6, dtype=np.int64),
        "x": [0.1 + 2e-17, np.nan, np.inf, -0.0, 1e-20, 123456789012.5],
        "s": ['a,b "c"', "", None, "x\ny", " lead", "plain"],
        "b": [True, False, True, False, True, False],
        "t": pd.array(["u", "v", None, "w", "x", "y"], dtype="string"),
    })
    for part in (frame, frame.iloc[:0], frame.iloc[:1], frame[["x"]]):
        columns = {c: part[c].to_numpy() for c in part.columns}  # a run's blocks: no frame
        for header in (True, False):
            want = part.to_csv(index=False, header=header, float_format="%.9g")
            for given in (part, columns):
                mine = io.StringIO()
                iteration_log.write_csv(given, mine, header=header, block=2)
                assert mine.getvalue() == want


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_the_report_reads_a_long_log_sampled_per_worker(tmp_path, monkeypatch, fmt):
    assert main(["run", str(CHAT), *SMALL, "--set", f"simulation.iteration_log={fmt}",
                 "--set", "hardware.count=2", "--out", str(tmp_path / "o"),
                 "--no-report"]) == 0
    full = iteration_log.read_log(tmp_path / "o")
    monkeypatch.setattr(iteration_log, "CHUNK_ROWS", 333)  # workers' counts cross chunks
    sampled = iteration_log.read_for_report(tmp_path / "o", max_rows=len(full) // 5)
    assert sampled.attrs == {"sample_every": 6, "rows": len(full)}
    assert set(sampled.columns) == set(iteration_log.REPORT_COLUMNS)
    expected = pd.concat([g.iloc[::6] for _, g in full.groupby("worker")]).sort_index()
    pd.testing.assert_frame_equal(sampled, expected[sampled.columns].reset_index(drop=True))
    monkeypatch.setattr(iteration_log, "REPORT_ROWS", len(full) // 5)
    assert main(["report", str(tmp_path / "o")]) == 0
    text = (tmp_path / "o" / "report.md").read_text()
    assert "from every 6th iteration of each worker" in text
    assert (tmp_path / "o" / "timeline.png").stat().st_size > 0
