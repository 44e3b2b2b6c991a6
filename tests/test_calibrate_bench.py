"""The torch microbenchmark and the calibrate pipeline, on shapes small enough for CI."""

from __future__ import annotations

import sys

import pytest

from specsim.cost_models.errors import CatalogError


def test_missing_torch_is_a_one_line_install_hint(monkeypatch, capsys):
    from specsim.cost_models.calibrate import INSTALL_HINT, require_torch
    from specsim.simulator.cli import main

    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` fail
    with pytest.raises(CatalogError, match=r"pip install -e '\.\[calibrate\]'"):
        require_torch()
    assert main(["calibrate", "--quick"]) == 2
    assert capsys.readouterr().err.strip() == f"specsim: error: {INSTALL_HINT}"


torch = pytest.importorskip("torch", reason="needs the calibrate extra: pip install -e '.[calibrate]'")

from specsim.cost_models.calibrate import bench  # noqa: E402
from specsim.cost_models.calibrate.model import ModelConfig  # noqa: E402

SMALL = ModelConfig(n_layers=4, hidden_size=128, n_heads=4, n_kv_heads=2, head_dim=32,
                    intermediate_size=256, vocab_size=512, max_context=1024, name="small")
TINY_GRID = bench.Grid(batch=(1, 2), q=(1, 5), ctx=(16, 128), layers=(4, 2), warmup=1,
                       repeats=3)


def test_grid_times_every_point_with_the_simulator_aggregates():
    torch.set_num_threads(min(2, torch.get_num_threads()))
    df = bench.run_grid(SMALL, TINY_GRID, "float32")
    assert len(df) == len(TINY_GRID.points()) == 16
    assert (df["median_s"] > 0).all() and (df["samples"] >= 1).all()
    row = df[(df.batch == 2) & (df.q == 5) & (df.ctx == 128)].iloc[0]
    assert row.tokens == 10 and row.qc == 2 * (5 * 128 + 15) and row.ctx_sum == 256
    assert (df["min_s"] <= df["median_s"]).all()


def test_ceilings_and_hardware_entry_are_catalog_valid():
    from specsim.cost_models.catalog import hardware_from_dict

    peak = bench.measure_peak_flops("float32", n=256, repeats=1)
    bw = bench.measure_bandwidth(mbytes=16, repeats=1)
    assert peak > 1e8 and bw > 1e8
    entry = bench.hardware_entry("test-cpu", peak, bw, "float32", "cpu", memory_bytes=8e9)
    hw = hardware_from_dict(entry.pop("name"), entry, "entry")
    assert hw.kind == "cpu" and hw.peak("bf16")[0] == pytest.approx(peak, rel=1e-3)


def test_contention_meter_reads_zero_or_more():
    c = bench.Contention()
    a = c.snapshot()
    sum(range(100000))
    assert c.other_share(a, c.snapshot(), 0.01) >= 0.0
    assert 0.0 <= c.others_cores(0.05) <= c.ncpu + 0.5


def test_thread_choice_leaves_busy_cores_alone(monkeypatch):
    assert bench.choose_threads(3) == (3, {"threads": 3, "cores": bench.os.cpu_count() or 1,
                                           "why": "--threads"})
    n, why = bench.choose_threads(None, sample_s=0.05)
    assert 1 <= n <= min(2, bench.os.cpu_count() or 1) and why["threads"] == n
    monkeypatch.setattr(bench.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(bench.Contention, "others_cores", lambda self, s=1.0: 1.0)
    n, why = bench.choose_threads(None)
    assert n == 1 and "using 1.0 of 2 cores" in why["why"] and "--threads 2" in why["why"]
    monkeypatch.setattr(bench.Contention, "others_cores", lambda self, s=1.0: 0.2)
    assert bench.choose_threads(None)[0] == 2
    monkeypatch.setattr(bench.Contention, "others_cores", lambda self, s=1.0: 5.0)
    assert bench.choose_threads(None)[0] == 1  # never fewer than one


def test_settle_stops_points_early_and_the_budget_stops_rounds():
    torch.set_num_threads(1)
    settled = bench.run_grid(SMALL, bench.Grid(batch=(1,), q=(1, 5), ctx=(16,), layers=(2,),
                                               warmup=1, repeats=5, settle=10.0), "float32")
    assert (settled["samples"] - settled["contended_samples"] <= 2).all()
    t = settled.attrs["timing"]
    assert t["rounds"] <= 15 and t["budget_s"] is None
    cut = bench.run_grid(SMALL, bench.Grid(batch=(1,), q=(1, 5), ctx=(16,), layers=(2,),
                                           warmup=0, repeats=5), "float32", budget_s=0.0)
    t = cut.attrs["timing"]
    assert t["rounds"] == 2 and t["stopped"] == "time budget (0 s) spent"
    # two rounds of two points: four samples, clean or contended (on a loaded machine a
    # point's median may rest on its one clean sample)
    assert t["points_short_of_clean_samples"] == 2 and t["samples"] == 4
    assert cut["samples"].between(1, 2).all()


def test_quick_grid_spans_the_regimes():
    g = bench.QUICK_GRID
    pts = g.points()
    assert len(pts) == 24 and set(g.layers) == {30, 12}  # the full grid's depths
    assert {(n, b, q, c) for n, b, q, c in pts} <= set(bench.FULL_GRID.points())
    tokens = {b * q for _, b, q, _ in pts}
    assert min(tokens) == 1 and max(tokens) >= 64 and max(g.ctx) == 1024 and min(g.ctx) <= 32


def test_calibrate_pipeline_writes_a_loadable_profile(tmp_path, monkeypatch):
    from specsim.cost_models.calibrate.run import calibrate
    from specsim.cost_models.calibration import load_profile

    monkeypatch.setattr(bench, "QUICK_GRID", bench.Grid(batch=(1, 2), q=(1, 3, 9), ctx=(16, 64),
                                                        layers=(2, 1), warmup=1, repeats=2))
    out = tmp_path / "cpu.yaml"
    profile, fit = calibrate(quick=True, out=out, e2e=False, name="t", progress=None)
    cal = load_profile(str(out))
    assert cal.calibrated and cal.name == "t" and profile["dtype"] == "bf16"
    assert fit.train["points"] + fit.holdout["points"] == 24
    assert profile["hardware_spec"]["kind"] == "cpu"
    assert profile["torch_version"] == str(torch.__version__)
    assert set(profile["phases_s"]) == {"ceilings", "grid", "ceilings_after_grid", "fit"}
    assert profile["time_budget_s"] == {"grid": 20.0, "end_to_end": 20.0}  # --quick's
    assert isinstance(profile["skipped"], list) and profile["grid"]["timing"]["rounds"] >= 2
    assert profile["thread_choice"]["threads"] == profile["threads"]
    assert "attention" in profile["fit_quality"]


def test_bad_device_is_a_catalog_error():
    from specsim.cost_models.calibrate.run import calibrate

    with pytest.raises(CatalogError, match="--device"):
        calibrate(device="tpu", e2e=False, progress=None)
