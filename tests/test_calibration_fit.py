"""Fitting the roofline's calibration numbers: synthetic recovery, user CSVs, profiles.

These need numpy/scipy only (no torch): the fit is pure; the torch parts live in
test_calibrate_bench.py and test_specdec.py.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from specsim.cost_models.calibrate.fit import (
    ATTENTION,
    PARAMS,
    calibration_of,
    fit_from_measurements,
    fit_grid,
    precision_for,
    read_measurements,
    write_profile,
)
from specsim.cost_models.calibration import load_profile
from specsim.cost_models.catalog import get_hardware, get_model, get_precision, hardware_from_dict
from specsim.cost_models.errors import CatalogError
from specsim.cost_models.roofline import ForwardCostModel, attention_area

TRUE = (0.62, 0.74, 25e-6, 400e-6)  # eta_c, eta_m, per layer, per pass


def _grid_shapes() -> pd.DataFrame:
    rows = []
    for layers in (16, 6):
        for b in (1, 4, 16, 64, 256):
            for q in (1, 2, 5, 9, 17):
                for c in (128, 2048, 8192):
                    rows.append({"n_layers": layers, "batch": b, "q": q, "ctx": c,
                                 "tokens": b * q, "qc": b * attention_area(q, c),
                                 "ctx_sum": b * c, "logits": b * q})
    return pd.DataFrame(rows)


def test_fit_recovers_known_parameters_from_noisy_roofline_timings():
    model, hw = get_model("Llama-3.2-1B"), get_hardware("H100-SXM")
    prec = get_precision({}, "q")
    df = _grid_shapes()
    truth = calibration_of(TRUE)
    t = np.empty(len(df))
    for layers, rows in df.groupby("n_layers"):
        cm = ForwardCostModel(replace(model, n_layers=int(layers)), hw, 1, prec, truth)
        t[rows.index] = cm.time(rows.tokens.to_numpy(float), rows.qc.to_numpy(float),
                                rows.ctx_sum.to_numpy(float), rows.logits.to_numpy(float))
    rng = np.random.default_rng(0)
    df["median_s"] = t * rng.lognormal(0.0, 0.02, len(df))  # 2% timing noise
    res = fit_grid(df, model, hw, prec, holdout=0.25, seed=1)
    got = res.values
    assert got["eta_compute"] == pytest.approx(TRUE[0], rel=0.05)
    assert got["eta_memory"] == pytest.approx(TRUE[1], rel=0.05)
    # The two overheads are each a few percent of a pass, so 2% noise blurs their split more;
    # their total at the model's depth is pinned tighter.
    assert got["per_layer_overhead_s"] == pytest.approx(TRUE[2], rel=0.20)
    assert got["fixed_overhead_s"] == pytest.approx(TRUE[3], rel=0.20)
    total = got["per_layer_overhead_s"] * 16 + got["fixed_overhead_s"]
    assert total == pytest.approx(TRUE[2] * 16 + TRUE[3], rel=0.05)
    assert res.holdout["points"] > 0 and res.holdout["median_ape_pct"] < 3.0
    assert res.train["median_ape_pct"] < 3.0
    assert set(res.table["split"]) == {"train", "holdout"}
    # Verification passes on a GPU read more KV than attention computes: its compute
    # efficiency is not identified, so it is not fitted (and the profile has four numbers).
    attn = res.optimizer["attention"]
    assert not attn["fitted"] and attn["attention_heavy_points"] == 0
    assert set(res.values) == set(PARAMS)


CPU_TRUE = (0.55, 1.2, 1.2e-3, 5e-3)  # an overhead-bound CPU, like the committed profile


def _cpu_grid(truth, layers=(30, 12), ctx=(32, 256, 1024), noise=0.02, seed=0):
    """The full CPU grid's shapes (SmolLM2-135M on the committed profile's measured CPU),
    timed by the roofline at ``truth`` with lognormal noise."""
    from specsim.cost_models.calibrate.config import SMOLLM2_135M
    from specsim.cost_models.calibrate.fit import hardware_from_profile
    from tests.conftest import REPO

    prof = yaml.safe_load((REPO / "cost_models" / "calibrations" / "cpu-example.yaml").read_text())
    hw, model, prec = hardware_from_profile(prof), SMOLLM2_135M.to_model_spec(), precision_for("bf16")
    rows = [{"n_layers": n, "batch": b, "q": q, "ctx": c, "tokens": b * q,
             "qc": b * attention_area(q, c), "ctx_sum": b * c, "logits": b * q}
            for n in layers for b in (1, 2, 4, 8) for q in (1, 2, 3, 5, 9, 17) for c in ctx]
    df = pd.DataFrame(rows)
    t = np.empty(len(df))
    for n, r in df.groupby("n_layers"):
        cm = ForwardCostModel(replace(model, n_layers=int(n)), hw, 1, prec, truth)
        t[r.index] = cm.time(r.tokens.to_numpy(float), r.qc.to_numpy(float),
                             r.ctx_sum.to_numpy(float), r.logits.to_numpy(float))
    df["median_s"] = t * np.random.default_rng(seed).lognormal(0.0, noise, len(df))
    return df, model, hw, prec


def test_fit_recovers_attention_efficiency_on_an_attention_heavy_cpu_grid(tmp_path):
    truth = calibration_of(CPU_TRUE + (0.14,), params=PARAMS + (ATTENTION,))
    df, model, hw, prec = _cpu_grid(truth)
    res = fit_grid(df, model, hw, prec, holdout=0.25, seed=1)
    got = res.values
    assert res.params == PARAMS + (ATTENTION,)
    assert got[ATTENTION] == pytest.approx(0.14, rel=0.05)
    assert got["eta_compute"] == pytest.approx(CPU_TRUE[0], rel=0.05)
    assert got["per_layer_overhead_s"] * 30 + got["fixed_overhead_s"] == pytest.approx(
        CPU_TRUE[2] * 30 + CPU_TRUE[3], rel=0.05)
    assert res.holdout["median_ape_pct"] < 3.0
    attn = res.optimizer["attention"]
    assert attn["fitted"] and attn["akaike_gain"] > 2
    four = attn["four_parameter_fit"]  # what the 4-number roofline gets on the same data
    assert four["holdout"]["max_ape_pct"] > res.holdout["max_ape_pct"]
    # The profile carries it in fitted: and the simulator's loader reads it back.
    from specsim.cost_models.calibrate.fit import profile_dict

    path = write_profile(profile_dict("cpu", "cpu", res, "test"), tmp_path / "cpu.yaml")
    assert set(yaml.safe_load(path.read_text())["fitted"]) == set(PARAMS) | {ATTENTION}
    cal = load_profile(str(path))
    assert cal.eta_attn_prefill == pytest.approx(got[ATTENTION], rel=1e-5)
    assert cal.eta_attn_decode is None  # attention's KV reads keep eta_memory


def test_attention_is_not_fitted_without_attention_heavy_points():
    truth = calibration_of(CPU_TRUE + (0.14,), params=PARAMS + (ATTENTION,))
    df, model, hw, prec = _cpu_grid(truth, ctx=(8,))  # no context: attention negligible
    res = fit_grid(df, model, hw, prec, holdout=0.25, seed=1)
    attn = res.optimizer["attention"]
    assert not attn["fitted"] and "not identified" in attn["reason"]
    assert res.params == PARAMS and res.calibration.eta_attn_prefill is None
    assert res.values["eta_compute"] == pytest.approx(CPU_TRUE[0], rel=0.05)


def test_no_separate_attention_in_the_data_keeps_it_near_eta_compute():
    df, model, hw, prec = _cpu_grid(calibration_of(CPU_TRUE))
    res = fit_grid(df, model, hw, prec, holdout=0.25, seed=1)
    got = res.values
    assert got["eta_compute"] == pytest.approx(CPU_TRUE[0], rel=0.05)
    if res.optimizer["attention"]["fitted"]:  # Akaike admits noise about 1 time in 6
        assert got[ATTENTION] == pytest.approx(got["eta_compute"], rel=0.15)
    assert fit_grid(df, model, hw, prec, attention=False).params == PARAMS


def _write_csv(path: Path, truth=TRUE, noise=0.01, seed=0) -> Path:
    """Engine-style measurements generated by the roofline itself (two TP sizes)."""
    hw = get_hardware("H100-SXM")
    model = get_model("Llama-3.1-8B")
    cal = calibration_of(truth)
    prec = get_precision({}, "q")
    rng = np.random.default_rng(seed)
    rows = []
    for tp in (1, 2):
        cm = ForwardCostModel(model, hw, tp, prec, cal)
        for b in (1, 8, 32, 128):
            for plen in (128, 1024, 4096):
                pre = cm.time(b * plen, b * attention_area(plen, 0), 0.0, b)
                dec = cm.time(b, b * (plen + 1), b * plen, b)
                rows.append({"model": "Llama-3.1-8B", "hardware": "H100-SXM",
                             "tensor_parallel": tp, "batch_size": b, "prompt_len": plen,
                             "prefill_ms": pre * 1e3 * rng.lognormal(0, noise),
                             "decode_ms_per_token": dec * 1e3 * rng.lognormal(0, noise)})
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_fit_from_measurements_small_csv(tmp_path):
    csv = _write_csv(tmp_path / "engine.csv")
    res, profile = fit_from_measurements(csv)
    assert res.train["points"] == 48 and res.train["median_ape_pct"] < 2.0
    assert res.values["eta_compute"] == pytest.approx(TRUE[0], rel=0.1)
    out = write_profile(profile, tmp_path / "p.yaml")
    cal = load_profile(str(out))
    assert cal.calibrated and cal.hardware == "H100-SXM"
    assert cal.details["fit_quality"]["train"]["points"] == 48


def test_calibrate_cli_from_measurements(tmp_path, capsys):
    from specsim.simulator.cli import main

    csv = _write_csv(tmp_path / "engine.csv")
    out = tmp_path / "fitted.yaml"
    assert main(["calibrate", "--from-measurements", str(csv), "--out", str(out)]) == 0
    assert "fit error: median" in capsys.readouterr().out
    assert load_profile(str(out)).calibrated
    bad = tmp_path / "bad.csv"
    bad.write_text("model,hardware\nLlama-3.1-8B,H100-SXM\n")
    assert main(["calibrate", "--from-measurements", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "missing column 'tensor_parallel'" in err


HEADER = "model,hardware,tensor_parallel,batch_size,prompt_len,prefill_ms,decode_ms_per_token\n"


@pytest.mark.parametrize("body,needle", [
    ("", "no measurement rows"),
    ("Llama-3.1-8B,H100-SXM,1,8,abc,10,2\n", "line 2: prompt_len: expected an integer, got 'abc'"),
    ("Llama-3.1-8B,H100-SXM,1,8,128,-3,2\n", "line 2: prefill_ms: expected a number greater than 0, got -3"),
    ("Llama-3.1-8B,H100-SXM,1,8,128,,\n", "line 2: expected prefill_ms or decode_ms_per_token"),
    ("NoSuchModel,H100-SXM,1,8,128,10,2\n" * 3, "unknown model 'NoSuchModel'"),
    ("Llama-3.1-8B,H100-SXM,1,8,128,10,2\nLlama-3.1-8B,A100-SXM-80GB,1,8,128,10,2\n",
     "one accelerator per file"),
    ("Llama-3.1-8B,H100-SXM,1,8,128,10,\n", "need at least 4 measured times"),
])
def test_bad_measurement_csv_is_a_one_line_catalog_error(tmp_path, body, needle):
    p = tmp_path / "m.csv"
    p.write_text(HEADER + body)
    with pytest.raises(CatalogError) as exc:
        fit_from_measurements(p)
    msg = str(exc.value)
    assert needle in msg and "\n" not in msg


def test_unknown_column_and_missing_file(tmp_path):
    p = tmp_path / "m.csv"
    p.write_text(HEADER.strip() + ",colour\nLlama-3.1-8B,H100-SXM,1,8,128,10,2,red\n")
    with pytest.raises(CatalogError, match="unknown column 'colour'"):
        read_measurements(p)
    with pytest.raises(CatalogError, match="no such measurement file"):
        read_measurements(tmp_path / "absent.csv")


def test_float32_precision_is_32_bit():
    prec = precision_for("float32")
    assert prec.weights.bytes_per_element == 4 and prec.compute_dtype == "bf16"
    assert precision_for("bf16").weights.bytes_per_element == 2


def test_committed_cpu_profile_loads_and_prices_its_cpu():
    cal = load_profile("cpu-example")
    d = cal.details
    assert cal.calibrated and d["device_type"] == "cpu" and d["dtype"] == "bf16"
    assert {"train", "holdout"} <= set(d["fit_quality"])
    entry = dict(d["hardware_spec"])
    hw = hardware_from_dict(entry.pop("name"), entry, "cpu-example hardware_spec")
    cm = ForwardCostModel(get_model("Llama-3.2-1B"), hw, 1, precision_for(d["dtype"]), cal)
    assert 1e-3 < cm.time(1, 1025, 1024) < 10.0
    rows = d["measurements"]["rows"]
    assert len(rows) >= 50 and {r[-1] for r in rows} == {"train", "holdout"}


def test_profile_yaml_round_trip_keeps_the_four_numbers(tmp_path):
    from specsim.cost_models.calibrate.fit import FitResult, error_summary, profile_dict

    res = FitResult(calibration_of(TRUE), pd.DataFrame(), error_summary(np.array([1.0, 2.0])),
                    error_summary(np.array([3.0])))
    path = write_profile(profile_dict("x", "H100-SXM", res, "test"), tmp_path / "x.yaml")
    data = yaml.safe_load(path.read_text())
    assert set(data["fitted"]) == {"eta_compute", "eta_memory", "per_layer_overhead_s",
                                   "fixed_overhead_s"}
    cal = load_profile(str(path))
    assert cal.per_layer_overhead_s == pytest.approx(TRUE[2])


def test_validation_script_reads_the_committed_profile_and_plots(tmp_path, capsys):
    import importlib.util

    from tests.conftest import REPO

    spec = importlib.util.spec_from_file_location(
        "calibration_validation", REPO / "benchmarks" / "calibration_validation.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "plot.png"
    assert mod.main(["--plot", str(out)]) == 0
    assert out.stat().st_size > 10_000
    text = capsys.readouterr().out
    assert "holdout" in text and "end to end" in text


def test_measured_runs_become_valid_simulator_scenarios():
    """Each committed end-to-end run maps to a one-request scenario the simulator accepts."""
    pytest.importorskip("simpy")
    from specsim.simulator.calibration_replay import simulate_runs
    from tests.conftest import REPO

    path = REPO / "cost_models" / "calibrations" / "cpu-example.yaml"
    prof = yaml.safe_load(path.read_text())
    runs = prof["end_to_end"]["runs"]
    pick = [next(r for r in runs if r["drafter"] == d)
            for d in ("none", "prompt-lookup", "self-spec-26L")]
    sim = simulate_runs(pick, path, prof["hardware_spec"], prof["dtype"], seeds=4)
    assert len(sim) == 3 and (sim["sim_tpot_s"] > 0).all()
    base = sim.loc[sim.drafter == "none", "sim_tpot_s"].iloc[0]
    assert base == pytest.approx(pick[0]["pred_tpot_closed_s"], rel=0.05)
