"""The roofline cost model: memory-bound verification, linear growth past the ridge, TP, MoE."""

from __future__ import annotations

import numpy as np
import pytest

from specsim.cost_models.calibration import uncalibrated_default
from specsim.cost_models.catalog import get_hardware, get_model, get_precision, model_catalog
from specsim.cost_models.errors import CatalogError
from specsim.cost_models.roofline import BatchShape, ForwardCostModel, attention_area


def cost_model(model="Llama-3.1-70B", hw="H100-SXM", tp=4, weights="bf16", acts="bf16"):
    h = get_hardware(hw)
    return ForwardCostModel(get_model(model), h, tp,
                            get_precision({"weights": weights, "activations": acts}, "q"),
                            uncalibrated_default(h.name))


def step(cm, batch, q, ctx=1024):
    """A pass over ``batch`` sequences with q new tokens each after ``ctx`` tokens of KV."""
    qa = np.full(batch, q, float)
    ca = np.full(batch, ctx, float)
    return cm.time(qa.sum(), attention_area(qa, ca).sum(), ca.sum())


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_verify_k_plus_1_at_batch_1_costs_about_one_decode_step(k):
    cm = cost_model()
    assert step(cm, 1, k + 1) / step(cm, 1, 1) < 1.10


def test_verification_grows_linearly_past_the_ridge():
    cm = cost_model()
    ridge = cm.ridge_tokens()
    assert 100 < ridge < 2000  # H100 BF16: ~989e12/3.35e12 FLOP per byte, ~2 bytes per weight
    k = 4
    batches = np.array([4, 8, 16, 32]) * int(np.ceil(ridge / (k + 1)))
    times = np.array([step(cm, b, k + 1, ctx=256) for b in batches])
    per_token = times / (batches * (k + 1))
    # past the ridge the cost per token is constant (linear in tokens) within 10%
    assert per_token.max() / per_token.min() < 1.10
    # and doubling tokens nearly doubles time
    assert times[-1] / times[-2] == pytest.approx(2.0, rel=0.1)
    # below the ridge it is flat: 8x the tokens costs far less than 8x the time
    small = [step(cm, b, k + 1) for b in (1, 8)]
    assert small[1] / small[0] < 2.0


def test_fp8_compute_is_faster_than_bf16_when_compute_bound():
    bf = cost_model("Llama-3.1-8B", tp=1)
    f8 = cost_model("Llama-3.1-8B", tp=1, weights="fp8", acts="fp8")
    assert f8.linear_dtype == "fp8"
    assert step(f8, 512, 8) < 0.7 * step(bf, 512, 8)
    # memory-bound decode: half the weight bytes, about half the time
    assert step(f8, 1, 1) < 0.65 * step(bf, 1, 1)


def test_a100_has_no_fp8_and_falls_back_to_bf16():
    cm = cost_model("Llama-3.1-8B", hw="A100-SXM-80GB", tp=1, weights="fp8", acts="fp8")
    assert cm.linear_dtype == "bf16"


def test_int4_weight_only_halves_bytes_but_computes_in_bf16():
    cm = cost_model("Llama-3.1-8B", tp=1, weights="int4")
    assert cm.linear_dtype == "bf16"
    assert cm.weight_bytes_per_device < 0.3 * cost_model("Llama-3.1-8B", tp=1).weight_bytes_per_device


def test_tensor_parallel_adds_allreduce_and_splits_weights():
    t1 = cost_model("Llama-3.1-70B", hw="H200-SXM", tp=2)
    t8 = cost_model("Llama-3.1-70B", hw="H200-SXM", tp=8)
    assert t8.weight_bytes_per_device == pytest.approx(t1.weight_bytes_per_device / 4)
    p = t8.price(BatchShape(1, 1024, 1024, 1))
    assert p.comm_s > 0
    assert step(t8, 1, 1) < step(t1, 1, 1)


def test_moe_loads_only_touched_experts():
    cm = cost_model("Qwen3-30B-A3B", tp=1)
    one = cm.experts_touched(1)
    assert one == pytest.approx(cm.model.moe.top_k)
    assert cm.experts_touched(10_000) == pytest.approx(cm.model.moe.n_experts, rel=1e-3)
    # a decode step at batch 1 reads ~ active weights, far less than all weights
    assert step(cm, 1, 1) < 0.4 * step(cm, 256, 1)


def test_catalog_parameter_counts_match_published_totals():
    for name, entry in model_catalog().items():
        m = get_model(name)
        if entry.get("params_b"):
            assert m.total_params / 1e9 == pytest.approx(entry["params_b"], rel=0.05), name


def test_every_catalog_entry_has_a_source():
    from specsim.cost_models.catalog import hardware_catalog, quant_catalog
    for cat in (hardware_catalog(), model_catalog(), quant_catalog()):
        for name, entry in cat.items():
            if "alias" not in entry:
                assert entry.get("source"), name


def test_required_catalog_entries_exist():
    for hw in ("A100-SXM-80GB", "H100-SXM", "H200-SXM", "B200", "MI300X", "TPU-v5e", "TPU-v5p",
               "TPU-v6e", "PPU-ZW810E"):
        get_hardware(hw)
    for m in ("Llama-3.1-8B", "Llama-3.1-70B", "Llama-3.2-1B", "Llama-2-70B", "CodeLlama-34B",
              "Qwen3-8B", "Qwen3-32B", "Qwen3-0.6B", "Qwen3-30B-A3B", "gpt-oss-120b"):
        get_model(m)
    for q in ("bf16", "fp8", "fp4", "nvfp4", "mxfp4", "int8", "int4"):
        get_precision({"weights": q}, "q")


def test_inline_model_and_accelerator_use_catalog_fields():
    hw = get_hardware({"name": "my-chip", "kind": "gpu", "peak_tflops": {"bf16": 500},
                       "hbm_gb": 64, "hbm_bw_gb_s": 2000,
                       "interconnect": {"bw_gb_s": 100, "latency_us": 5},
                       "power_w": {"idle": 50, "max": 500}, "price_usd_per_hour": 1.0,
                       "source": "test"})
    assert hw.hbm_bw == 2000e9
    with pytest.raises(CatalogError, match="hardware.accelerator.hbm_gbs: unknown key"):
        get_hardware({"kind": "gpu", "hbm_gbs": 1})
