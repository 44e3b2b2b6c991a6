"""Expert parallelism (issue 26 part 3, docs/architecture.md "Expert parallelism"): balanced
EP prices exactly as the uniform expert model, all-to-all bytes match their closed form,
routing skew prices the busiest device, DP attention splits MLA's latent by sequence, and
the keys' one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

from specsim.errors import ScenarioError
from specsim.simulator.cluster.engine import Deployment, load_scenario

FP8 = {"weights": "fp8", "kv_cache": "bf16"}


def _deploy(model="DeepSeek-V3", tp=8, quant=FP8, hw="H200-SXM", **keys):
    """A deployment; balanced routing (skew 1) unless ``keys`` say (the scenario's default
    under expert parallelism is the sampled skew: test_the_default_skew_is_sampled)."""
    if keys.get("expert_parallel") and "routing_skew" not in keys:
        keys["routing_skew"] = 1.0
    sc = {"model": model, "quantization": quant,
          "hardware": {"accelerator": hw, "count": tp, "tensor_parallel": tp, **keys},
          "speculation": {"method": "none"}, "workload": {}, "simulation": {"progress": False}}
    scenario, base, _ = load_scenario(sc)
    return Deployment(scenario, base)


T = np.array([1.0, 8.0, 64.0, 512.0, 4096.0])
QC = T * 2000
CTX = T * 2000


@pytest.mark.parametrize("model,tp,quant,hw", [
    ("DeepSeek-V3", 8, FP8, "H200-SXM"),
    ("Qwen3-30B-A3B", 4, {"weights": "bf16"}, "H100-SXM"),
    ("Qwen3.6-35B-A3B", 2, {"weights": "bf16"}, "H100-SXM"),
])
def test_balanced_ep_equals_the_uniform_expert_time(model, tp, quant, hw):
    uniform = _deploy(model, tp, quant, hw)
    ep = _deploy(model, tp, quant, hw, expert_parallel=True)
    assert np.array_equal(uniform.target.pass_params(), ep.target.pass_params())
    for a, b in zip(uniform.target.time_and_work(T, QC, CTX),
                    ep.target.time_and_work(T, QC, CTX), strict=True):
        assert np.array_equal(a, b)
    assert uniform.kv_blocks == ep.kv_blocks
    assert ep.target.weight_bytes_per_device == uniform.target.weight_bytes_per_device


def test_all_to_all_bytes_match_the_closed_form():
    d = _deploy(expert_parallel=True, dp_attention=True)
    ep, layers, top_k, h = 8, 58, 8, 7168  # DeepSeek-V3: 61 layers, 3 dense
    for t in (1.0, 64.0, 1000.0):
        want = layers * 2 * (t / ep) * top_k * h * 2 * (ep - 1) / ep  # bf16 activations
        assert d.target.all_to_all_bytes(t) == pytest.approx(want)
    # no all-reduce under DP attention: the comm term is the all-to-all's
    link = d.hw.link_bw * d.calibration.allreduce_bw_eff
    assert d.target._comm_per_token == pytest.approx(d.target.all_to_all_bytes(1.0) / link)
    assert _deploy(expert_parallel=True).target.all_to_all_bytes(64.0) == 0.0


def test_dp_attention_splits_the_latent_by_sequence():
    tp_kv = _deploy(expert_parallel=True)
    dp = _deploy(expert_parallel=True, dp_attention=True)
    latent = 61 * (512 + 64) * 2
    assert tp_kv.target.kv_sizes.full_per_token == latent  # every device keeps all of it
    assert dp.target.kv_sizes.full_per_token == pytest.approx(latent / 8)
    assert dp.kv_blocks > 4 * tp_kv.kv_blocks  # the reason DP attention is used for MLA
    # the attention, dense-MLP and shared-expert weights are copied on every device
    assert dp.target.weight_bytes_per_device > tp_kv.target.weight_bytes_per_device
    one = (np.array([1.0]), np.array([2000.0]), np.array([2000.0]))
    assert dp.target.time_and_work(*one)[0][0] > tp_kv.target.time_and_work(*one)[0][0]


def test_routing_skew_prices_the_busiest_device():
    flat = _deploy(expert_parallel=True)
    hot = _deploy(expert_parallel=True, routing_skew=1.5)
    tf = flat.target.time_and_work(T, QC, CTX)
    th = hot.target.time_and_work(T, QC, CTX)
    assert (th[0] >= tf[0]).all() and th[0][0] > tf[0][0]
    assert (th[1] > tf[1]).all()  # 1.5x the routed experts' FLOPs on the busiest device
    # its experts touched: E (1 - (1 - skew top_k / E)^T), never more than all of them
    e, k = 256, 8
    for t in (1.0, 16.0, 10_000.0):
        want = e * (1 - (1 - 1.5 * k / e) ** t)
        assert hot.target.experts_touched(t) == pytest.approx(want)
        assert hot.target.experts_touched(t) <= e


def test_expert_parallel_keys_are_checked():
    with pytest.raises(ScenarioError, match="hardware.expert_parallel: Llama-3.1-8B has no "):
        _deploy("Llama-3.1-8B", 1, {"weights": "bf16"}, "H100-SXM", expert_parallel=True)
    with pytest.raises(ScenarioError, match="hardware.dp_attention: needs hardware.expert_par"):
        _deploy(dp_attention=True)
    with pytest.raises(ScenarioError, match="hardware.routing_skew: needs"):
        _deploy(routing_skew=1.3)
    with pytest.raises(ScenarioError, match="hardware.tensor_parallel: moe-3's 256 experts"):
        _three_way_moe()


def _three_way_moe():
    """An inline MoE whose heads split 3 ways but whose 256 experts do not."""
    sc = {"model": {"name": "moe-3", "n_layers": 2, "hidden_size": 384, "n_heads": 3,
                    "n_kv_heads": 3, "head_dim": 128, "intermediate_size": 0,
                    "vocab_size": 1000, "source": "test",
                    "moe": {"n_experts": 256, "top_k": 8, "expert_intermediate_size": 64}},
          "hardware": {"accelerator": "H100-SXM", "count": 3, "tensor_parallel": 3,
                       "expert_parallel": True},
          "speculation": {"method": "none"}, "workload": {}, "simulation": {"progress": False}}
    scenario, base, _ = load_scenario(sc)
    Deployment(scenario, base)


def test_ep_wider_than_a_node_sends_the_other_nodes_share_over_the_nic():
    """Wide EP (16 H200s, two 8-GPU nodes): of each device's 15 remote destinations, 7 are
    on its node (NVLink) and 8 on the other (its 50 GB/s NIC, DGX H200), sent in parallel:
    the all-to-all takes the slower side's time. Within one node nothing changes."""
    wide = _deploy(tp=16, expert_parallel=True, dp_attention=True)
    hw, eff = wide.hw, wide.calibration.allreduce_bw_eff
    assert (hw.devices_per_node, hw.scale_out_bw) == (8, 50e9)
    a2a = wide.target.all_to_all_bytes(1.0)
    want = a2a * max((7 / 15) / (hw.link_bw * eff), (8 / 15) / (hw.scale_out_bw * eff))
    assert wide.target._comm_per_token == pytest.approx(want, rel=1e-12)
    assert want > a2a / (hw.link_bw * eff) * 4  # the NIC, 9x slower than NVLink, decides
    one_node = _deploy(expert_parallel=True, dp_attention=True)  # 8 GPUs: NVLink only
    assert one_node.target._comm_per_token == pytest.approx(
        one_node.target.all_to_all_bytes(1.0) / (hw.link_bw * eff), rel=1e-12)


def test_wide_ep_uses_the_profiles_nic_terms():
    """On a profile with NIC terms (H100-SXM: allreduce_nic_bw_eff, allreduce_nic_latency_s,
    docs/fidelity.md) the all-to-all's NIC side runs at that share of the NIC and each
    exchange waits for the NIC's latency; within a node, NVLink's."""
    wide = _deploy("Qwen3-30B-A3B", 16, {"weights": "bf16"}, "H100-SXM", expert_parallel=True,
                   dp_attention=True)
    c, hw = wide.calibration, wide.hw
    assert c.allreduce_nic_bw_eff is not None and c.allreduce_nic_latency_s is not None
    a2a = wide.target.all_to_all_bytes(1.0)
    want = a2a * max((7 / 15) / (hw.link_bw * c.allreduce_bw_eff),
                     (8 / 15) / (hw.scale_out_bw * c.allreduce_nic_bw_eff))
    assert wide.target._comm_per_token == pytest.approx(want, rel=1e-12)
    layers = wide.model.n_moe_layers
    assert wide.target._comm_fixed == pytest.approx(2 * layers * c.allreduce_nic_latency_s)
    one = _deploy("Qwen3-30B-A3B", 8, {"weights": "bf16"}, "H100-SXM", expert_parallel=True,
                  dp_attention=True)
    lat = (c.allreduce_latency_s if c.allreduce_latency_s is not None
           else hw.link_latency_s)
    assert one.target._comm_fixed == pytest.approx(2 * layers * lat)


def test_ep_over_nodes_it_does_not_fill_splits_as_the_all_reduce_does():
    """12 H200s on 8-GPU nodes sit 6 and 6 (``roofline.devices_per_spanned_node``, the
    tensor-parallel all-reduce's split too): of 11 remote destinations, 5 share the node
    (NVLink) and 6 are on the other (its NIC)."""
    from specsim.cost_models.catalog import model_catalog

    base = model_catalog()["Qwen3-30B-A3B"]
    model = {**base, "name": "Qwen3-30B-A3B, 48 heads, 96 experts (a test model)",
             "n_heads": 48, "moe": {**base["moe"], "n_experts": 96}}
    wide = _deploy(model, 12, {"weights": "bf16"}, expert_parallel=True, dp_attention=True)
    hw, eff = wide.hw, wide.calibration.allreduce_bw_eff
    a2a = wide.target.all_to_all_bytes(1.0)
    want = a2a * max((5 / 11) / (hw.link_bw * eff), (6 / 11) / (hw.scale_out_bw * eff))
    assert wide.target._comm_per_token == pytest.approx(want, rel=1e-12)
