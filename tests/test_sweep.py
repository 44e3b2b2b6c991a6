"""specsim sweep: grids, the tidy table, resume after a kill, one-line errors, CIs, plots."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

from specsim.errors import ScenarioError
from specsim.simulator.cli import main
from specsim.simulator.planning.sweep import (
    JOURNAL,
    check_out,
    flatten,
    grid_points,
    parse_set,
    run_sweep,
)
from tests.conftest import REPO

CHAT = str(REPO / "scenarios" / "chat.yaml")
SMALL = "workload.synthetic.requests"


def test_crossed_and_zipped_grids():
    grid = parse_set(["speculation.k=0,2,4", "workload.synthetic.arrival.rate=2,4.5,8",
                      "speculation.acceptance={tau: 2.5, at_k: 4},x"])
    assert grid["speculation.k"] == [0, 2, 4]
    assert grid["workload.synthetic.arrival.rate"] == [2, 4.5, 8]
    assert grid["speculation.acceptance"] == [{"tau": 2.5, "at_k": 4}, "x"]
    crossed = grid_points({k: grid[k] for k in list(grid)[:2]})
    assert len(crossed) == 9 and crossed[1] == {"speculation.k": 0,
                                                "workload.synthetic.arrival.rate": 4.5}
    zipped = grid_points({k: grid[k] for k in list(grid)[:2]}, zipped=True)
    assert zipped == [{"speculation.k": 0, "workload.synthetic.arrival.rate": 2},
                      {"speculation.k": 2, "workload.synthetic.arrival.rate": 4.5},
                      {"speculation.k": 4, "workload.synthetic.arrival.rate": 8}]
    with pytest.raises(ScenarioError, match="--zip: every --set needs as many values"):
        grid_points(grid, zipped=True)
    with pytest.raises(ScenarioError, match="given twice"):
        parse_set(["speculation.k=1", "speculation.k=2"])
    with pytest.raises(ScenarioError, match="--seeds"):
        grid_points({"seed": [1, 2]})


def test_table_has_a_row_per_point_and_seed_equal_to_single_runs():
    from specsim import run_scenario

    grid = {"speculation.k": [0, 3], SMALL: [20]}
    table = run_sweep(CHAT, grid, seeds=2, jobs=2)
    assert len(table) == 4
    assert list(table.columns[:4]) == ["point", "speculation.k", SMALL, "seed"]
    assert list(zip(table.point, table.seed, strict=True)) == [(0, 7), (0, 8), (1, 7), (1, 8)]
    assert "tpot_s.p99" in table and "speculation.wasted_time_fraction" in table
    assert "wall_time_s" not in table and "notes" not in table
    for row in table.to_dict("records"):
        ref = flatten(run_scenario(CHAT, seed=row["seed"], overrides={
            "speculation.k": row["speculation.k"], SMALL: 20}).metrics)
        for key, value in ref.items():
            if key in ("seed", "speculation.k"):
                continue
            got = row[key]
            if isinstance(value, float) or value is None:
                assert (value is None and (got is None or got != got)) or got == pytest.approx(
                    value, rel=1e-12, nan_ok=True), key
            else:
                assert got == value, key
    # the CI: NaN with one seed per point, finite with two
    assert table.attrs["summary"]["tpot_s.p50.ci95_half_width"].notna().all()
    one = run_sweep(CHAT, {SMALL: [20]}, seeds=1)
    assert math.isnan(one.attrs["summary"]["tpot_s.p99.ci95_half_width"].iloc[0])


def test_interval_shrinks_with_more_seeds():
    grid = {SMALL: [20]}
    few = run_sweep(CHAT, grid, seeds=3, jobs=2).attrs["summary"].iloc[0]
    many = run_sweep(CHAT, grid, seeds=8, jobs=2).attrs["summary"].iloc[0]
    for m in ("tpot_s.p50", "throughput_output_tokens_per_s"):
        assert 0 < many[f"{m}.ci95_half_width"] < few[f"{m}.ci95_half_width"]
        assert many[f"{m}.ci95_low"] < many[f"{m}.mean"] < many[f"{m}.ci95_high"]


def _sweep_cmd(out, *extra):
    return [sys.executable, "-m", "specsim.simulator.cli", "sweep", CHAT,
            "--set", "speculation.k=0,1,2,3,4", "--set", "workload.synthetic.arrival.rate=2,6",
            "--set", f"{SMALL}=20", "--seeds", "2", "--jobs", "1", "--quiet", "--no-plots",
            "--out", str(out), *extra]


def test_killed_sweep_resumes_to_the_uninterrupted_table(tmp_path):
    total = 5 * 2 * 2
    out = tmp_path / "killed"
    proc = subprocess.Popen(_sweep_cmd(out), cwd=REPO, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    journal = out / JOURNAL
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if journal.exists() and journal.read_bytes().count(b"\n") >= 3:
                break
            if proc.poll() is not None:
                pytest.fail(f"the sweep ended before it was killed: {proc.stderr.read()}")
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the sweep and its workers, as a kill -9 would
        proc.wait()
    lines_at_kill = journal.read_bytes().count(b"\n")
    assert 3 <= lines_at_kill < total
    assert not (out / "sweep.csv").exists()
    # without --resume the folder is refused, and nothing there changes
    r = subprocess.run(_sweep_cmd(out), cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 2 and "--resume" in r.stderr
    assert journal.read_bytes().count(b"\n") == lines_at_kill
    r = subprocess.run(_sweep_cmd(out, "--resume"), cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in journal.read_text().splitlines()]
    assert len(lines) == total == len({(x["point"], x["seed"]) for x in lines})  # none twice
    ref = tmp_path / "whole"
    grid = parse_set(["speculation.k=0,1,2,3,4", "workload.synthetic.arrival.rate=2,6",
                      f"{SMALL}=20"])
    run_sweep(CHAT, grid, seeds=2, jobs=2, out=ref, plots=False)
    assert (out / "sweep.csv").read_bytes() == (ref / "sweep.csv").read_bytes()
    assert (out / "summary.csv").read_bytes() == (ref / "summary.csv").read_bytes()
    import pandas as pd

    assert len(pd.read_parquet(out / "sweep.parquet")) == total
    spec = json.loads((out / "sweep.json").read_text())
    assert spec["mode"] == "cross" and len(spec["points"]) == 10
    assert spec["seeds_per_point"] == 2 and spec["specsim_version"]


@pytest.mark.parametrize("sets, expect", [
    (["speculation.k=2,-1"], "speculation.k=-1"),
    (["hardware.accelerator=H100-SXM,H999"], "hardware.accelerator='H999'"),
    (["speculation.k=1,2", "workload.synthetic.arrival.rate=1,2,3", "--zip"], "--zip"),
    (["speculation.k"], "--set speculation.k"),
])
def test_bad_values_are_one_line_errors_and_nothing_is_written(tmp_path, capsys, sets, expect):
    args = [a for s in sets for a in (("--set", s) if not s.startswith("--") else (s,))]
    out = tmp_path / "o"
    rc = main(["sweep", CHAT, *args, "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("specsim: error: ") and err.count("\n") == 1 and expect in err, err
    assert not out.exists()


def test_out_folder_rules(tmp_path):
    assert check_out(tmp_path / "new", False, False) == "new"
    assert check_out(tmp_path, False, False) == "empty"
    (tmp_path / "mine.txt").write_text("x")
    with pytest.raises(ScenarioError, match="did not write"):
        check_out(tmp_path, True, True)
    out = tmp_path / "sw"
    run_sweep(CHAT, {SMALL: [20]}, out=out, plots=False)
    with pytest.raises(ScenarioError, match="--resume"):
        check_out(out, False, False)
    assert check_out(out, True, False) == "resume"
    assert check_out(out, False, True) == "replace"
    (out / "notes.md").write_text("mine")
    with pytest.raises(ScenarioError, match="notes.md"):
        check_out(out, False, True)


def test_plots_are_pngs_when_the_grid_supports_them(tmp_path):
    out = tmp_path / "p"
    table = run_sweep(CHAT, {"speculation.k": [0, 3], "workload.synthetic.arrival.rate": [2, 6],
                             SMALL: [20]}, out=out, jobs=2)
    pngs = {"tpot_vs_qps.png", "speedup_heatmap.png", "throughput_vs_tpot.png",
            "cost_vs_qps.png"}
    assert pngs <= set(table.attrs["written"]) and not table.attrs["skipped"]
    for name in pngs:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # no rate key: only the throughput/TPOT plot, the others say why
    out2 = tmp_path / "q"
    table = run_sweep(CHAT, {"speculation.k": [2, 3], SMALL: [20]}, out=out2)
    assert "throughput_vs_tpot.png" in table.attrs["written"]
    assert len(table.attrs["skipped"]) == 3
    assert all("arrival rate" in s for s in table.attrs["skipped"])
    assert not (out2 / "tpot_vs_qps.png").exists()
