"""Layer kinds (issue 26, docs/architecture.md "Layer kinds"): MLA, sliding-window and
linear-attention (Gated DeltaNet) layers' KV / state sizes against their closed forms, the
catalog entries' parameter counts against the published totals, the pass rule's window and
state terms, and the deployment's KV blocks, reservations and PD transfer bytes."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from specsim import limits
from specsim.cost_models import pass_rule
from specsim.cost_models.calibration import uncalibrated_default
from specsim.cost_models.catalog import get_hardware, get_model, get_precision
from specsim.cost_models.roofline import ForwardCostModel
from specsim.errors import ScenarioError
from specsim.simulator.cluster.engine import Deployment, load_scenario
from specsim.simulator.speculation.drafters import mtp_module

ROOT = Path(__file__).resolve().parents[1]
BF16 = 2.0


def _cost(model, tp=1, hw="H100-SXM"):
    return ForwardCostModel(model, get_hardware(hw), tp, get_precision({"weights": "bf16"}, "q"),
                            uncalibrated_default(hw))


# ------------------------------------------------------------------ closed forms per kind
@pytest.mark.parametrize("tp", [1, 2, 8])
def test_mla_keeps_one_latent_per_layer_replicated_over_tp(tp):
    m = get_model("DeepSeek-V3")
    s = m.kv_sizes(BF16, tp)
    latent = 61 * (512 + 64) * BF16  # kv_lora_rank + qk_rope_head_dim, every layer
    assert s.full_per_token == latent  # each device keeps all of it
    assert s.window_per_token == 0 and s.state_per_seq == 0
    assert m.kv_elements_per_token() == 61 * 576
    assert s.sequence_bytes(1000) == pytest.approx(1000 * latent)
    # 70x smaller than the same layers as 128-head MHA of head dim 192 + 128
    assert 61 * 128 * (192 + 128) * BF16 / latent > 70
    # the cost model reads the latent per context token on each device
    assert _cost(m, 8, "H200-SXM")._kv_bytes_per_ctx == latent


def test_sliding_window_kv_is_capped_at_the_window():
    m = get_model("gpt-oss-120b")
    assert m.layers_of("sliding_window") == 18 and m.layers_of("gqa") == 18
    s = m.kv_sizes(BF16, 1)
    per_layer = 2 * 8 * 64 * BF16  # K and V of 8 KV heads of 64
    assert s.full_per_token == 18 * per_layer
    assert s.window_per_token == 18 * per_layer and s.window == 128
    for c in (1, 64, 128):
        assert s.sequence_bytes(c) == c * 36 * per_layer
    for c in (129, 1000, 100_000):
        assert s.sequence_bytes(c) == c * 18 * per_layer + 128 * 18 * per_layer
    # a step's window read: sum_i min(c_i, W) capped, the new tokens added
    cost = _cost(m)
    p = cost.pass_params()
    ctx = np.array([50.0, 4000.0, 9000.0])
    ctxw = float(np.minimum(ctx, 128).sum())
    full = pass_rule.pass_parts_kinds(p, 3.0, 3.0 + ctx.sum(), ctx.sum(), 3.0, ctxw, 3.0)
    none = pass_rule.pass_parts_kinds(p, 3.0, 3.0 + ctx.sum(), ctx.sum(), 3.0, 0.0, 3.0)
    win_bytes = full[8] - none[8]
    assert win_bytes == pytest.approx(cost._win_kv_bytes_per_ctx * ctxw)
    assert ctxw == 50 + 128 + 128


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_linear_state_is_constant_per_sequence(tp):
    m = get_model("Qwen3.6-35B-A3B")
    assert (m.layers_of("linear"), m.layers_of("gqa")) == (30, 10)
    s = m.kv_sizes(BF16, tp)
    conv_dim = 2 * 16 * 128 + 32 * 128
    state = 30 * (32 * 128 * 128 * 4 + 3 * conv_dim * BF16)  # fp32 recurrent, bf16 conv
    assert s.state_per_seq == pytest.approx(state / tp)
    kv_heads = max(2 / tp, 1)  # 2 KV heads: copied once tp > 2
    assert s.full_per_token == 10 * 2 * kv_heads * 256 * BF16
    assert s.sequence_bytes(10) - s.sequence_bytes(0) == pytest.approx(10 * s.full_per_token)


def test_a_linear_attention_models_kv_does_not_grow_with_context():
    base = get_model("Qwen3.6-35B-A3B")
    pure = replace(base, name="linear-only", attention=replace(base.attention,
                                                               pattern=("linear",)))
    s = pure.kv_sizes(BF16, 1)
    assert s.full_per_token == 0 and s.window_per_token == 0
    sizes = {s.sequence_bytes(c) for c in (0, 1, 1000, 262_144)}
    assert sizes == {s.state_per_seq}
    # its passes read the same bytes at any context
    p = _cost(pure).pass_params()
    b = [pass_rule.pass_parts_kinds(p, 1.0, 1.0 + c, float(c), 1.0, float(c), 1.0)[8]
         for c in (10, 10_000, 200_000)]
    assert b[0] == b[1] == b[2]


def test_a_verify_of_k_plus_1_tokens_on_linear_layers_prices_k_plus_1_states():
    cost = _cost(get_model("Qwen3.6-35B-A3B"))
    p = cost.pass_params()
    st = cost._state_bytes_per_seq
    assert st == cost.kv_sizes.state_per_seq > 0
    for k in (1, 3, 15):
        q = k + 1.0  # one sequence verifies k drafts and the bonus token
        verify = pass_rule.pass_parts_kinds(p, q, q * 500 + q * (q + 1) / 2, 500.0, q, 500.0,
                                            1.0)
        one_state = pass_rule.pass_parts_kinds(p, q, q * 500 + q * (q + 1) / 2, 500.0, 1.0,
                                               500.0, 1.0)
        # the logits' head bytes are the same weights; the difference is k more states
        assert verify[8] - one_state[8] == pytest.approx(k * st)
    # decode of B sequences: each reads and writes its state once
    b = 8.0
    dec = pass_rule.pass_parts_kinds(p, b, b * 501, b * 500, b, b * 500, b)
    base = replace(cost.model, name="x")  # same shape, state term off
    off = p.copy()
    off[pass_rule.PARAMS.index("_state_bytes_per_seq")] = 0.0
    nodec = pass_rule.pass_parts_kinds(off, b, b * 501, b * 500, b, b * 500, b)
    assert dec[8] - nodec[8] == pytest.approx(2 * b * st)
    assert base.layers_of("linear") == 30


def test_a_model_without_layer_kinds_prices_as_before():
    m = get_model("Qwen3-30B-A3B")
    assert m.attention is None
    c = _cost(m, 2)
    assert c.kv_bytes_per_token == m.kv_elements_per_token() * BF16
    assert c._kv_bytes_per_ctx == c.kv_bytes_per_token / 2
    assert c._window == 0 and c._state_bytes_per_seq == 0
    assert c._attn_flops_per_qc == 4.0 * m.n_heads * m.head_dim * m.n_layers / 2


# ------------------------------------------------------------------ catalog entries
@pytest.mark.parametrize("name,published,active", [
    ("DeepSeek-V3", 671.0, 37.0),  # arXiv 2412.19437: 671B total, 37B activated
    ("Qwen3-Next-80B-A3B", 80.0, 3.0),  # model card: 80B total, 3B activated
    ("Qwen3.6-35B-A3B", 35.0, 3.0),  # model card: 35B total, 3B activated
    ("gpt-oss-120b", 116.83, 5.13),  # arXiv 2508.10925
    ("gpt-oss-20b", 20.91, 3.61),
])
def test_parameter_counts_match_published_totals(name, published, active):
    m = get_model(name)
    assert m.total_params / 1e9 == pytest.approx(published, rel=0.02)
    # active counts differ in what they include (embeddings, LM head): within 25%
    assert m.active_params_per_token / 1e9 == pytest.approx(active, rel=0.25)
    assert m.attention is not None and m.attention.source


def test_mtp_module_of_a_hybrid_target_attends_in_full():
    for name, kind in (("Qwen3.6-35B-A3B", "gqa"), ("Qwen3-Next-80B-A3B", "gqa"),
                       ("DeepSeek-V3", "mla")):
        mod = mtp_module(get_model(name))
        assert mod.layers_of(kind) == 1 and mod.layers_of("linear") == 0
        assert mod.kv_sizes(BF16, 1).state_per_seq == 0


def test_tensor_parallel_rules_accept_the_new_entries():
    for name, tps in (("DeepSeek-V3", (1, 2, 4, 8, 16)), ("Qwen3.6-35B-A3B", (1, 2, 4, 8, 16)),
                      ("Qwen3-Next-80B-A3B", (1, 2, 4, 8)), ("gpt-oss-120b", (1, 2, 4, 8))):
        m = get_model(name)
        for tp in tps:
            limits.check_tensor_parallel(tp, m.n_heads, m.n_kv_heads, m.name)


# ------------------------------------------------------------------ deployment
def _deploy(model, tp, count=None, spec=None, **sections):
    sc = {"model": model,
          "hardware": {"accelerator": "H100-SXM", "count": count or tp, "tensor_parallel": tp},
          "speculation": spec or {"method": "none"}, "workload": {},
          "simulation": {"progress": False}, **sections}
    scenario, base, _ = load_scenario(sc)
    return Deployment(scenario, base)


def test_kv_blocks_hold_the_full_layers_kv_and_each_sequence_takes_its_state():
    """Without a prefix cache each running sequence takes its linear layers' state from the
    block pool (vLLM v1's hybrid allocator): ceil(state / block bytes) blocks at admission,
    returned at its end; with one, the states stay set aside for max_batch sequences."""
    d = _deploy("Qwen3.6-35B-A3B", 2, scheduler={"max_batch": 64})
    s = d.target.kv_sizes
    usable = d.hw.hbm_bytes * d.sc.hardware.memory_fraction
    block = s.full_per_token * d.block_size
    assert d.kv_blocks == int((usable - d.target.weight_bytes_per_device) // block)
    assert d.state_blocks == math.ceil(s.state_per_seq / block) > 0
    assert d.kv_bytes_per_token_device == s.full_per_token
    assert any("hybrid KV cache manager" in n for n in d.notes)
    cached = _deploy("Qwen3.6-35B-A3B", 2, scheduler={"max_batch": 64},
                     kv_cache={"prefix_cache": True})
    assert cached.state_blocks == 0
    assert cached.kv_blocks == int((usable - d.target.weight_bytes_per_device
                                    - 64 * s.state_per_seq) // block)
    # the sizes a PD transfer moves: each byte once (2 KV heads sharded over 2 devices)
    w = d.kv_worker
    assert w.full_per_token == pytest.approx(2 * s.full_per_token)
    assert w.state_per_seq == pytest.approx(2 * s.state_per_seq)


def test_speculation_takes_k_plus_1_states_per_sequence():
    base = _deploy("Qwen3.6-35B-A3B", 2, scheduler={"max_batch": 32})
    d = _deploy("Qwen3.6-35B-A3B", 2, scheduler={"max_batch": 32},
                spec={"method": "mtp", "k": 3, "acceptance": {"alpha": 0.8}})
    s = d.target.kv_sizes
    per_token = d.kv_bytes_per_token_device  # target's full layers + the MTP module's layer
    assert per_token > s.full_per_token
    usable = d.hw.hbm_bytes * d.sc.hardware.memory_fraction
    assert d.kv_blocks == int((usable - d.weight_bytes_device) // (per_token * d.block_size))
    # 1 + k states per sequence
    assert d.state_blocks == math.ceil(4 * s.state_per_seq / (per_token * d.block_size))
    assert d.state_blocks > base.state_blocks and base.kv_blocks > d.kv_blocks


def test_window_layers_take_window_plus_one_block_per_sequence():
    d = _deploy("gpt-oss-20b", 1, scheduler={"max_batch": 100},
                quantization={"weights": "mxfp4"})
    s = d.target.kv_sizes
    usable = d.hw.hbm_bytes * d.sc.hardware.memory_fraction
    block = s.full_per_token * d.block_size
    assert d.kv_blocks == int((usable - d.target.weight_bytes_per_device) // block)
    assert d.state_blocks == math.ceil(s.window_per_token * (128 + d.block_size) / block)
    assert d.kv_worker.sequence_bytes(1000) == pytest.approx(
        1000 * s.full_per_token + 128 * s.window_per_token)


def test_each_running_sequence_holds_its_state_blocks_and_returns_them():
    """In a run the pool's used blocks are the rows' KV blocks plus their state blocks, the
    requests' own counts agree (the invariant), everything is returned at the end, and the
    compiled solo loop gives the SimPy run's bits."""
    from specsim.simulator.cluster import solo
    from specsim.simulator.cluster.engine import run_scenario
    from specsim.simulator.cluster.simulation import Simulation

    sc = {"model": "Qwen3.6-35B-A3B",
          "hardware": {"accelerator": "H100-SXM", "count": 2, "tensor_parallel": 2},
          "speculation": {"method": "mtp", "k": 2, "acceptance": {"alpha": 0.7}},
          "workload": {"synthetic": {
              "requests": 60, "arrival": {"process": "poisson", "rate": 4.0},
              "prompt_tokens": {"distribution": "lognormal", "mean": 500, "sigma": 1.0,
                                "max": 8000},
              "output_tokens": {"distribution": "lognormal", "mean": 300, "sigma": 0.8,
                                "max": 2000}}},
          "scheduler": {"max_batch": 16},
          "simulation": {"progress": False, "record_iterations": True}}
    scenario, base, _ = load_scenario(sc)
    from specsim.simulator.api import build_trace

    trace = build_trace(scenario, base, 262144)
    sim = Simulation(scenario, trace, base)
    w = sim.workers[0]
    blocks = w.kv.state_blocks
    assert blocks > 0
    sim.run()
    sim.check_invariants()
    assert w.kv.used == 0 and w.kv.peak > blocks
    t = sim.table
    assert (t.blocks == 0).all()
    runs = []
    for on in (True, False):
        solo.ENABLED = on
        try:
            runs.append(run_scenario(sc))
        finally:
            solo.ENABLED = True
    a, b = runs
    assert a.requests.equals(b.requests) and a.iterations.equals(b.iterations)
    assert a.metrics["kv_peak_utilization"] == b.metrics["kv_peak_utilization"]


def test_linear_heads_must_split_over_tensor_parallel():
    with pytest.raises(ScenarioError, match="hardware.tensor_parallel"):
        _deploy("Qwen3.6-35B-A3B", 32)


def test_pd_transfer_moves_each_sequences_bytes_once():
    """A disaggregated run of a hybrid model: every transfer carries the prompt's full-layer
    KV plus the linear layers' state once (sequence_bytes of the unsharded sizes)."""
    from specsim import run_scenario

    res = run_scenario(ROOT / "scenarios" / "pd_disaggregated.yaml", overrides={
        "model": "Qwen3.6-35B-A3B", "hardware.count": 8, "hardware.tensor_parallel": 2,
        "disaggregation.prefill.count": 4, "disaggregation.decode.count": 4,
        "speculation.method": "none", "scheduler.max_batch": 32,
        "workload.synthetic.requests": 40, "workload.synthetic.arrival.rate": 5.0,
        "simulation.progress": False})
    df = res.requests
    sent = df[df["pd_kv_bytes"] > 0]
    assert len(sent) > 0
    m = get_model("Qwen3.6-35B-A3B")
    s = m.kv_sizes(BF16, 1)  # each byte once
    want = sent["prompt_tokens"] * s.full_per_token + s.state_per_seq
    assert np.allclose(sent["pd_kv_bytes"], want)
    # the state is the larger part of a 2k-token prompt's transfer on this model
    assert s.state_per_seq > 1000 * s.full_per_token
