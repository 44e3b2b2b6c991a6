"""Speculation's own costs as the simulator charges them (issue 23 part 1): an idle speculator
costs what its source measured, and a drafter pass never costs less than its kernel floor."""

from __future__ import annotations

import numpy as np
import pytest

from specsim import run_scenario
from specsim.cost_models.calibrate.spec_costs import load_sources
from specsim.cost_models.calibration import load_profile, uncalibrated_default
from specsim.cost_models.catalog import get_hardware, get_model, get_precision
from specsim.cost_models.roofline import ForwardCostModel

IDLE_SOURCE = "vllm_49548_mrv2_skip_k0"


def _idle_measured_s() -> float:
    row = load_sources()[IDLE_SOURCE].rows[0]
    return row["idle_step_s"] - row["nospec_step_s"]


def _scenario(method: str) -> dict:
    """Eight identical requests arriving together: both runs take the same steps."""
    spec = {"method": "none"} if method == "none" else {
        "method": method, "k": 4, "policy": "off", "acceptance": {"profile": "qwen3-8b-eagle3"}}
    return {
        "name": f"idle-{method}", "seed": 3,
        "hardware": {"accelerator": "H100-SXM", "count": 1, "tensor_parallel": 1},
        "model": "Qwen3-8B", "speculation": spec,
        "scheduler": {"max_batch": 16, "token_budget": 8192},
        "workload": {"synthetic": {"arrival": {"process": "poisson", "rate": 1e6},
                                   "requests": 8, "prompt_tokens": 64, "output_tokens": 40},
                     "class": "chat"},
        "simulation": {"record_iterations": True, "progress": False},
    }


def test_the_bundled_profile_charges_the_measured_idle_cost() -> None:
    cal = load_profile("H100-SXM")
    assert cal.spec_step_overhead_s == pytest.approx(_idle_measured_s(), rel=1e-6)
    assert cal.spec_seq_overhead_s == 0.0 and cal.spec_token_overhead_s == 0.0
    src = cal.details["parameter_sources"]
    assert "issues/49548" in src["spec_step_overhead_s"]
    assert "spec_step_costs.yaml" in src["draft_pass_overhead_s"]
    # an uncalibrated chip borrows the same engine figures, and says so
    assert uncalibrated_default("B200").spec_step_overhead_s == cal.spec_step_overhead_s
    assert uncalibrated_default("B200").draft_layer_overhead_s == cal.draft_layer_overhead_s


def test_a_configured_but_idle_speculator_costs_its_source_per_decode_step() -> None:
    off = run_scenario(_scenario("none")).iterations
    idle = run_scenario(_scenario("eagle3")).iterations
    assert len(off) == len(idle) and (idle["drafted_tokens"] == 0).all()
    d_off, d_idle = np.diff(off["time_s"].to_numpy()), np.diff(idle["time_s"].to_numpy())
    decode = (off["prefill_seqs"].to_numpy()[:-1] == 0)
    assert decode.sum() > 10
    # nothing drafted: no drafter pass, only the speculative path's own work
    np.testing.assert_allclose(idle["draft_time_s"].to_numpy()[:-1][decode], _idle_measured_s(),
                               rtol=1e-6)
    np.testing.assert_allclose(d_idle[decode] - d_off[decode], _idle_measured_s(), rtol=1e-6)


@pytest.mark.parametrize("drafter_model", ["Llama-3.2-1B", "Qwen3-0.6B"])
def test_a_drafter_pass_never_costs_less_than_its_kernel_floor(drafter_model: str) -> None:
    cal = load_profile("H100-SXM")
    model = get_model(drafter_model)
    hw = get_hardware("H100-SXM")
    prec = get_precision({"weights": "bf16", "activations": "bf16", "kv_cache": "bf16"}, "test")
    as_drafter = ForwardCostModel(model, hw, 1, prec, cal, role="drafter")
    as_target = ForwardCostModel(model, hw, 1, prec, cal)
    floor = cal.draft_pass_overhead_s + model.n_layers * cal.draft_layer_overhead_s
    for tokens in (1.0, 4.0, 64.0):
        t = as_drafter.time(tokens, tokens * 600, 600 * tokens)
        assert t >= floor
        # more than pure weight streaming: a small model's pass is launch-bound in an engine
        assert t > as_drafter.weight_bytes_per_device / hw.hbm_bw
    # the target role keeps the engine stack's own (CUDA-graph) floors
    assert as_target.time(1.0, 600.0, 600.0) < as_drafter.time(1.0, 600.0, 600.0)
