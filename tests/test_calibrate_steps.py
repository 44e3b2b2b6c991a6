"""``specsim calibrate --from-steps``: fitting the roofline to timed whole forward passes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from specsim.cost_models.calibrate import steps
from specsim.cost_models.calibrate.profiles import calibration_from
from specsim.cost_models.calibration import load_profile
from specsim.cost_models.catalog import get_hardware, get_model, get_precision
from specsim.cost_models.roofline import ForwardCostModel, attention_area
from specsim.simulator.cli import main

TRUE = {"eta_compute": 0.7, "matmul_half_tokens": 64.0, "eta_memory": 0.8,
        "eta_elementwise": 0.5, "eta_attn_prefill": 0.4, "eta_attn_decode": 0.75,
        "per_layer_overhead_s": 20e-6, "fixed_overhead_s": 300e-6}
REAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "gpu_steps" / "h200_torch_steps.jsonl"


def synthetic(path: Path, values: dict[str, float] = TRUE) -> Path:
    """A table priced by the cost model itself with ``values`` (decode, verify, prefill)."""
    hw = get_hardware("H200-SXM")
    cal = calibration_from(values)
    lines = [json.dumps({"kind": "info", "device": "NVIDIA H200"})]
    for model in ("Llama-3.1-8B", "Llama-3.2-1B"):
        fcm = ForwardCostModel(get_model(model), hw, 1, get_precision(None, "t"), cal)
        for b in (1, 8, 64, 512):
            for q in (1, 4, 16):
                for c in (256, 4096):
                    t = fcm.time(b * q, b * attention_area(q, c), b * c, b * q)
                    lines.append(json.dumps({"kind": "decode", "model": model.lower(), "batch": b,
                                             "q": q, "context": c, "tokens": b * q, "seconds": t}))
        for b, n in ((1, 256), (1, 4096), (1, 16384), (4, 8192)):
            t = fcm.time(n, b * attention_area(n / b, 0), 0, b)
            lines.append(json.dumps({"kind": "prefill", "model": model.lower(), "batch": b,
                                     "q": None, "context": None, "tokens": n, "seconds": t}))
    lines.append(json.dumps({"kind": "decode", "model": "llama-3.2-1b", "batch": 4096, "q": 8,
                             "context": 8192, "error": "CUDA out of memory"}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_fit_recovers_known_parameters(tmp_path: Path) -> None:
    path = synthetic(tmp_path / "steps.jsonl")
    got, info, skipped = steps.read_steps(path)
    assert skipped == 1 and info["device"] == "NVIDIA H200"
    data = steps.StepsData(got, steps.hardware_of(info, None), path, info)
    assert data.hardware == "H200-SXM"
    vals = steps.fit(data, np.ones(len(got), bool))
    for k, v in TRUE.items():
        assert vals[k] == pytest.approx(v, rel=0.02), k
    assert np.allclose(data.predict(vals), data.measured, rtol=1e-3)


def test_cli_writes_a_loadable_profile_with_held_out_errors(tmp_path: Path, capsys) -> None:
    path = synthetic(tmp_path / "steps.jsonl")
    out = tmp_path / "h200.yaml"
    assert main(["calibrate", "--from-steps", str(path), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "held out model llama-3.1-8b" in text and "held out model llama-3.2-1b" in text
    doc = yaml.safe_load(out.read_text())
    assert doc["hardware"] == "H200-SXM"
    held = {h["held_out"]: h for h in doc["fit_quality"]["holdouts"]}
    assert {"model llama-3.1-8b", "model llama-3.2-1b"} <= set(held)
    # one model cannot tell a per-layer floor from a per-pass one, rows of both can
    assert held["5-fold rows (every 5th row in turn)"]["test"]["decode"]["median_ape_pct"] < 1.0
    cal = load_profile(str(out))
    assert cal.eta_compute == pytest.approx(TRUE["eta_compute"], rel=0.02)
    before = out.read_bytes()
    assert main(["calibrate", "--from-steps", str(path), "--out", str(out)]) == 2  # no --force
    assert out.read_bytes() == before
    assert main(["calibrate", "--from-steps", str(path), "--out", str(out), "--force"]) == 0


@pytest.mark.parametrize("line, expected", [
    ("not json", "line 1: not a JSON object"),
    ("[1, 2]", "line 1: expected a JSON object"),
    ('{"kind": "train", "model": "llama-3.1-8b"}', "line 1: kind: expected"),
    ('{"kind": "decode", "model": "llama-3.1-8b", "batch": 1, "q": 1, "context": 8, '
     '"seconds": -1}', "line 1: seconds: expected a positive number"),
    ('{"kind": "decode", "model": "llama-3.1-8b", "batch": 0, "q": 1, "context": 8, '
     '"seconds": 1}', "line 1: batch: expected an integer from 1"),
    ('{"kind": "prefill", "model": "llama-3.1-8b", "batch": 3, "tokens": 8, "seconds": 1}',
     "line 1: tokens: expected a multiple of batch 3"),
    ('{"kind": "decode", "model": "gpt-9", "batch": 1, "q": 1, "context": 8, "seconds": 1}',
     "line 1: model: 'gpt-9' is not a catalog model"),
    ('{"kind": "info", "device": "NVIDIA H200"}', "no decode or prefill passes"),
])
def test_bad_tables_are_one_line_exit_2(tmp_path: Path, capsys, line: str, expected: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    out = tmp_path / "p.yaml"
    assert main(["calibrate", "--from-steps", str(path), "--out", str(out),
                 "--hardware", "H200-SXM"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and expected in err, err
    assert not out.exists()


def test_no_device_needs_hardware(tmp_path: Path, capsys) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text('{"kind": "decode", "model": "llama-3.2-1b", "batch": 1, "q": 1, '
                    '"context": 8, "seconds": 0.002}\n')
    assert main(["calibrate", "--from-steps", str(path), "--out", str(tmp_path / "p.yaml")]) == 2
    assert "give --hardware" in capsys.readouterr().err


@pytest.mark.skipif(not REAL.is_file(), reason="shared/data/gpu_steps (the H200 torch reference) "
                    "is not on this machine")
def test_real_h200_table_in_sample_errors() -> None:
    """The issue's targets (#23): decode/verify median <= 10%, prefill <= 15%, fitted on the
    table (held-out errors are reported, not asserted: see the profile)."""
    f = steps.fit_steps(REAL)
    assert f.hardware == "H200-SXM"
    assert f.train["decode"]["median_ape_pct"] <= 10.0
    assert f.train["prefill"]["median_ape_pct"] <= 15.0
    caps = steps.ceilings(json.loads(REAL.read_text().splitlines()[0]), get_hardware("H200-SXM"))
    for k, cap in caps.items():
        assert f.values[k] <= cap + 1e-9, k


def test_bundled_h200_profile_is_labelled_and_opt_in() -> None:
    """The H200 profile fitted to the torch reference says so and prints its held-out
    errors; it is not H200-SXM's default (a torch reference is not an engine)."""
    from specsim.cost_models.calibration import default_profile

    cal = load_profile("H200-SXM-torch-reference")
    assert cal.hardware == "H200-SXM" and default_profile("H200-SXM") is None
    assert "NOT AN ENGINE" in cal.source
    doc = yaml.safe_load((Path(steps.__file__).parents[1] / "calibrations"
                          / "H200-SXM-torch-reference.yaml").read_text())
    held = {h["held_out"] for h in doc["fit_quality"]["holdouts"]}
    assert {"model llama-3.1-8b", "model llama-3.2-1b"} <= held


def test_a_measured_ceiling_below_the_fits_bounds_is_one_line(tmp_path, capsys):
    """An info line whose matmul ceiling is 1 TFLOP/s (0.1% of an H200) made scipy's bounded
    fit raise ValueError (found by the front-door fuzz): refused, naming the file."""
    from specsim.simulator.cli import main

    path = tmp_path / "steps.jsonl"
    path.write_text('{"kind": "info", "device": "NVIDIA H200", "matmul_tflops": 1, '
                    '"copy_gb_s": 4258.9}\n{"kind": "decode", "model": "llama-3.1-8b", '
                    '"batch": 1, "q": 1, "context": 512, "tokens": 1, "seconds": 0.005}\n')
    assert main(["calibrate", "--from-steps", str(path), "--out", str(tmp_path / "c.yaml")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "below the fit's lower bound" in err, err
    assert not (tmp_path / "c.yaml").exists()
