"""The cost model's per-op structure: each group and overhead does what its docstring says.

Analytic checks against hand-computed values from the same parameters, one term at a time.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import yaml

from specsim.cost_models.calibration import uncalibrated_default
from specsim.cost_models.catalog import get_hardware, get_model, get_precision
from specsim.cost_models.roofline import ForwardCostModel
from specsim.simulator import run_scenario
from tests.conftest import make_trace

BF16 = get_precision({"weights": "bf16", "activations": "bf16", "kv_cache": "bf16"}, "q")
H100 = get_hardware("H100-SXM")
ZERO = replace(uncalibrated_default("H100-SXM"), per_layer_overhead_s=0.0, fixed_overhead_s=0.0,
               draft_pass_overhead_s=None, draft_layer_overhead_s=None)


def cm(model="Llama-3.1-8B", tp=1, role="target", **cal):
    return ForwardCostModel(get_model(model), H100, tp, BF16, replace(ZERO, **cal), role=role)


def test_small_matmuls_run_below_peak():
    """Compute-bound linear time per token falls with T towards the large-matmul rate."""
    base, slow = cm(), cm(matmul_half_tokens=256.0)
    for t in (2048.0, 8192.0):
        ratio = slow.time(t, 0, 0, 0) / base.time(t, 0, 0, 0)
        # only the linear compute term changes, by (1 + T_half / T)
        assert 1.0 < ratio <= 1.0 + 256.0 / t + 1e-9
    assert (slow.time(8192.0, 0, 0, 0) / 8192.0) < (slow.time(2048.0, 0, 0, 0) / 2048.0)
    # decode (memory bound) is unchanged at small T only where compute stays below memory
    assert slow.time(1.0, 1.0, 0.0) == pytest.approx(base.time(1.0, 1.0, 0.0), rel=1e-12)


def test_norms_are_not_sharded_by_tensor_parallelism():
    one, four = cm(tp=1), cm(tp=4)
    assert four._ew_bytes_per_token > one._ew_bytes_per_token / 4  # noqa: SLF001


def test_allreduce_latency_makes_decode_flat_across_tp():
    """With a realistic per-all-reduce latency, TP8 decode is not twice as fast as TP4."""
    lat = dict(allreduce_latency_s=25e-6)
    d4 = cm("Llama-3.1-70B", 4, **lat).time(8.0, 8 * 1025.0, 8 * 1024.0)
    d8 = cm("Llama-3.1-70B", 8, **lat).time(8.0, 8 * 1025.0, 8 * 1024.0)
    assert d8 > 0.6 * d4
    n = get_model("Llama-3.1-70B").n_layers
    no_lat = cm("Llama-3.1-70B", 8, allreduce_latency_s=0.0).time(8.0, 8 * 1025.0, 8 * 1024.0)
    assert d8 - no_lat == pytest.approx(2 * n * 25e-6, rel=1e-9)


def test_attention_has_its_own_efficiencies():
    # long context decode: KV reads dominate; halving eta_attn_decode doubles that part
    a, b = cm(eta_attn_decode=0.8), cm(eta_attn_decode=0.4)
    ctx = 64 * 32768.0
    kv_time = cm()._kv_bytes_per_ctx * (ctx + 64) / (H100.hbm_bw * 0.8)  # noqa: SLF001
    assert b.time(64.0, ctx + 64, ctx) - a.time(64.0, ctx + 64, ctx) == pytest.approx(kv_time,
                                                                                        rel=1e-6)


def test_iteration_and_speculation_overheads():
    c = cm(engine_fixed_s=1e-3, engine_per_seq_s=1e-5, engine_per_prefill_s=2e-4,
           spec_step_overhead_s=5e-4, spec_seq_overhead_s=2e-5, spec_token_overhead_s=1e-6)
    got = c.iteration_overhead(np.array([0.0, 10.0]), np.array([0.0, 2.0]))
    assert got.tolist() == pytest.approx([0.0, 1e-3 + 10 * 1e-5 + 2 * 2e-4])
    spec = c.speculation_overhead(np.array([0.0, 8.0]), np.array([0.0, 32.0]))
    assert spec.tolist() == pytest.approx([0.0, 5e-4 + 8 * 2e-5 + 32 * 1e-6])


def test_drafter_passes_pay_their_own_fixed_overhead():
    t = cm(fixed_overhead_s=1e-3, draft_pass_overhead_s=1e-4)
    d = cm(fixed_overhead_s=1e-3, draft_pass_overhead_s=1e-4, role="drafter")
    assert t.time(1.0, 1.0, 0.0) - d.time(1.0, 1.0, 0.0) == pytest.approx(9e-4, rel=1e-9)


def _profile(tmp_path, **fitted):
    path = tmp_path / f"p{len(list(tmp_path.iterdir()))}.yaml"
    base = {"eta_compute": 0.8, "eta_memory": 0.8, "per_layer_overhead_s": 0.0,
            "fixed_overhead_s": 0.0}
    path.write_text(yaml.safe_dump({"name": "p", "hardware": "H100-SXM", "source": "test",
                                    "fitted": {**base, **fitted}}))
    return str(path)


def test_engine_overhead_reaches_every_iteration(tmp_path):
    """One request alone: each decode iteration costs exactly engine_fixed + per_seq more."""
    trace = make_trace(1, rate=1.0, prompt=100, output=50)
    sc = {"model": "Llama-3.1-8B", "hardware": {"accelerator": "H100-SXM"},
          "speculation": {"method": "none"}, "workload": {}}
    a = run_scenario({**sc, "calibration": _profile(tmp_path)}, trace=trace).metrics
    b = run_scenario({**sc, "calibration": _profile(tmp_path, engine_fixed_s=1e-3,
                                                    engine_per_seq_s=1e-4)}, trace=trace).metrics
    assert b["tpot_s"]["mean"] - a["tpot_s"]["mean"] == pytest.approx(1.1e-3, rel=1e-6)
    assert b["calibration_values"]["engine_fixed_s"] == 1e-3


def test_speculation_overhead_only_with_a_drafter(tmp_path):
    trace = make_trace(1, rate=1.0, prompt=100, output=50)
    sc = {"model": "Llama-3.1-8B", "hardware": {"accelerator": "H100-SXM"}, "workload": {}}
    prof = _profile(tmp_path, spec_step_overhead_s=1e-3)
    off = {**sc, "speculation": {"method": "none"}}
    base = run_scenario({**off, "calibration": _profile(tmp_path)}, trace=trace).metrics
    assert run_scenario({**off, "calibration": prof}, trace=trace).metrics["tpot_s"] == \
        base["tpot_s"]
    on = {**sc, "speculation": {"method": "eagle3", "k": 2, "acceptance": {"alpha": 0.0}}}
    a = run_scenario({**on, "calibration": _profile(tmp_path)}, trace=trace).metrics
    b = run_scenario({**on, "calibration": prof}, trace=trace).metrics
    # alpha 0: one token per step, so TPOT grows by exactly the per-step overhead
    assert b["tpot_s"]["mean"] - a["tpot_s"]["mean"] == pytest.approx(1e-3, rel=1e-6)


@pytest.mark.parametrize("model,tp", [("Llama-3.1-8B", 1), ("Mixtral-8x7B", 2),
                                      ("Qwen3-30B-A3B", 1)])
def test_one_pass_rule_for_the_roofline_and_the_kernel(model, tp):
    """The roofline's vectorised prices, its per-group breakdown and the simulator kernel's
    per-step price are one rule (cost_models/pass_rule.py): the same bits from the compiled
    loop, the rule's Python source and the kernel's ``_evaluate``, MoE included, and the
    groups add up to the pass time."""
    from specsim.cost_models import pass_rule
    from specsim.simulator.execution import kernel_jit

    c = ForwardCostModel(get_model(model), H100, tp, BF16,
                         replace(ZERO, matmul_half_tokens=64.0, per_layer_overhead_s=3e-6,
                                 fixed_overhead_s=1e-4, allreduce_latency_s=9e-6))
    rng = np.random.default_rng(7)
    t = np.r_[0.0, 1.0, rng.integers(1, 9000, 40).astype(float)]
    ctx = rng.integers(0, 30000, t.size).astype(float)
    qc = t * ctx + t * (t + 1) / 2
    lg = np.minimum(t, 128.0)
    total, flops, nbytes = c.time_and_work(t, qc, ctx, lg)
    p = kernel_jit.cost_params(c)
    assert p is not None  # MoE is priced by the kernel too
    py = pass_rule.pass_price.py_func
    for i in range(t.size):
        want = (total[i], flops[i], nbytes[i])
        assert kernel_jit._evaluate(p, t[i], qc[i], ctx[i], lg[i]) == want  # noqa: SLF001
        assert py(p, t[i], qc[i], ctx[i], lg[i]) == want
    g = c.group_times(t, qc, ctx, lg)
    np.testing.assert_array_equal(sum(g[k] for k in pass_rule.GROUPS), total)
    assert total[0] == 0.0 and g["overhead"][0] == 0.0  # no tokens: no pass launched
    if c.model.moe is not None:  # the routed experts touched: between top_k and all of them
        assert c.experts_touched(1.0) == pytest.approx(c.model.moe.top_k)
        assert c.time(1.0, 1.0, 0.0) < c.time(4096.0, 4096.0 * 4097 / 2, 0.0)
