"""Tensor parallelism and long context (issue 23 part 3, issue 26's TP across nodes): a
tensor-parallel group wider than a node prices its all-reduce over the NICs
(``roofline.cross_node_allreduce``, closed form), the cross-node all-reduce fit recovers
known parameters from tables the cost model generates, and the paged-KV decode check
(``profiles.decode_context_terms``) recovers a per-block cost where there is one and finds
none where there is none; on Vidur's real tables where they are present."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsim.cost_models.calibrate.profiles import (
    calibration_from,
    decode_context_terms,
    fit_group,
    load_allreduce_table,
    load_attention_table,
    load_cross_node_allreduce,
    predict,
)
from specsim.cost_models.calibration import load_profile
from specsim.cost_models.catalog import get_hardware, get_model, get_precision
from specsim.cost_models.roofline import ForwardCostModel, attention_area

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "gpu_profiles" / "vidur"
PREC = get_precision(None, "test")


def _cm(model, tp, hw="H100-SXM", **cal):
    base = load_profile("H100-SXM")
    return ForwardCostModel(get_model(model), get_hardware(hw), tp, PREC,
                            dataclasses.replace(base, **cal))


# ---------------------------------------------------------------- closed forms


@pytest.mark.parametrize("tp,per_node", [(16, 8), (12, 6), (24, 8)])
def test_tp_wider_than_a_node_prices_the_all_reduce_over_the_nics(tp, per_node):
    """Ring bytes 2 (tp - 1) / tp x T x hidden x 2 per all-reduce, two per layer; the slower
    of NVLink (link x eff) and the node's ``per_node`` NICs (n x NIC x eff_nic) sets the time;
    the latency is the NIC one."""
    lat, eff = 70e-6, 0.5
    cm = _cm("Llama-3.1-70B", tp, allreduce_nic_latency_s=lat, allreduce_nic_bw_eff=eff)
    hw, cal, m = cm.hw, cm.cal, cm.model
    assert hw.devices_per_node == 8
    ring = 2.0 * (tp - 1) / tp
    per_byte = max(1.0 / (hw.link_bw * cal.allreduce_bw_eff),
                   1.0 / (per_node * hw.scale_out_bw * eff))
    want_pt = 2 * m.n_layers * ring * m.hidden_size * 2 * per_byte
    assert cm._comm_per_token == pytest.approx(want_pt, rel=1e-12)
    assert cm._comm_fixed == pytest.approx(2 * m.n_layers * lat, rel=1e-12)
    t = 256.0
    parts = cm.group_times(t, t * 1001.0, t * 1000.0)
    assert float(parts["allreduce"]) == pytest.approx(want_pt * t + 2 * m.n_layers * lat)


def test_a_tp_group_within_a_node_is_priced_as_before():
    """TP <= devices_per_node: NVLink only; the NIC parameters play no part."""
    a = _cm("Llama-3.1-70B", 8)
    b = _cm("Llama-3.1-70B", 8, allreduce_nic_latency_s=1e-3, allreduce_nic_bw_eff=0.01)
    assert np.array_equal(a.pass_params(), b.pass_params())
    m, hw, cal = a.model, a.hw, a.cal
    want = 2 * m.n_layers * (2 * 7 / 8) * m.hidden_size * 2 / (hw.link_bw * cal.allreduce_bw_eff)
    assert a._comm_per_token == pytest.approx(want, rel=1e-12)
    assert a._comm_fixed == pytest.approx(2 * m.n_layers * cal.allreduce_latency_s)


def test_without_nic_parameters_the_nvlink_ones_apply_to_the_nic():
    cm = _cm("Llama-3.1-70B", 16, allreduce_nic_latency_s=None, allreduce_nic_bw_eff=None)
    m, hw, cal = cm.model, cm.hw, cm.cal
    per_byte = max(1 / (hw.link_bw * cal.allreduce_bw_eff),
                   1 / (8 * hw.scale_out_bw * cal.allreduce_bw_eff))
    assert cm._comm_per_token == pytest.approx(
        2 * m.n_layers * (2 * 15 / 16) * m.hidden_size * 2 * per_byte, rel=1e-12)
    assert cm._comm_fixed == pytest.approx(2 * m.n_layers * cal.allreduce_latency_s)


def test_bundled_profiles_price_tp16_slower_than_tp8_per_all_reduce():
    """The shipped NIC terms: 16 GPUs over two nodes pay more per all-reduce than 8 in one."""
    for hw in ("H100-SXM", "A100-SXM-80GB"):
        cal = load_profile(hw)
        assert cal.allreduce_nic_bw_eff is not None and cal.allreduce_nic_latency_s is not None
        spec, h = get_model("Llama-3.1-70B"), get_hardware(hw)
        t8 = ForwardCostModel(spec, h, 8, PREC, cal).group_times(64.0, 64e3, 64e3)["allreduce"]
        t16 = ForwardCostModel(spec, h, 16, PREC, cal).group_times(64.0, 64e3, 64e3)["allreduce"]
        assert float(t16) > float(t8)


# ---------------------------------------------------------------- fits recover parameters

CONFIGS = [(2, 1), (4, 2), (8, 4), (16, 8)]
SIZES = [2.0 ** k for k in range(11, 27)]


def _cross_table(vals, hw, noise=0.01, seed=0):
    rng = np.random.default_rng(seed)
    rows = pd.DataFrame([{"workers": float(w), "per_node": float(n), "size": s}
                         for w, n in CONFIGS for s in SIZES])
    t = predict("allreduce_nic", rows.assign(time_s=1.0), hw, vals)
    return rows.assign(time_s=t * (1 + noise * rng.standard_normal(len(t))))


def test_cross_node_fit_recovers_synthetic_parameters():
    hw = get_hardware("A100-SXM-80GB")
    nvlink = {"allreduce_latency_s": 30e-6, "allreduce_bw_eff": 0.6}
    true = {"allreduce_nic_latency_s": 55e-6, "allreduce_nic_bw_eff": 0.3}
    table = _cross_table({**nvlink, **true}, hw)
    got = fit_group("allreduce_nic", table, hw, fixed=nvlink).values
    assert got["allreduce_nic_latency_s"] == pytest.approx(55e-6, rel=0.05)
    assert got["allreduce_nic_bw_eff"] == pytest.approx(0.3, rel=0.03)


def test_cross_node_closed_form_of_one_row():
    """One row by hand: 16 workers, 8 per node, S bytes: lat + 2 (15/16) S x max(...)."""
    hw = get_hardware("A100-SXM-80GB")
    vals = {"allreduce_latency_s": 30e-6, "allreduce_bw_eff": 0.6,
            "allreduce_nic_latency_s": 55e-6, "allreduce_nic_bw_eff": 0.3}
    row = pd.DataFrame({"workers": [16.0], "per_node": [8.0], "size": [2.0 ** 24],
                        "time_s": [1.0]})
    got = predict("allreduce_nic", row, hw, vals)[0]
    per_byte = max(1 / (hw.link_bw * 0.6), 1 / (8 * hw.scale_out_bw * 0.3))
    assert got == pytest.approx(55e-6 + 2 * 15 / 16 * 2.0 ** 24 * per_byte, rel=1e-9)


def test_cross_node_rows_are_read_apart_from_single_node_ones(tmp_path):
    rows = []
    for w, n in [(2, 2), (2, 1), (8, 8), (16, 8)]:
        for s in (2048, 4096):
            rows.append({"time_stats.all_reduce.median": 0.05, "num_workers": w, "size": s,
                         "collective": "all_reduce", "devices_per_node": n})
    p = tmp_path / "all_reduce.csv"
    pd.DataFrame(rows).to_csv(p)
    cross = load_cross_node_allreduce(p)
    assert sorted(set(zip(cross["workers"], cross["per_node"], strict=True))) == [(2, 1), (16, 8)]
    single = load_allreduce_table(p)
    assert sorted(single["workers"].unique()) == [2, 8]
    pd.DataFrame(rows).drop(columns="devices_per_node").to_csv(p)
    assert load_cross_node_allreduce(p) is None


def _decode_table(per_block_s, hw, vals, noise=0.01, seed=0):
    """Decode rows shaped as Vidur's A100 table (64 / 8 heads, n_embd 8192, TP 2)."""
    rng = np.random.default_rng(seed)
    rows = []
    for b in (1, 2, 4, 8, 16, 32, 64, 128):
        for kv in (32, 64, 128, 256, 512, 1024, 1536, 2048, 3072, 4032):
            rows.append({"kind": "decode", "tp": 2.0, "batch": float(b), "q": 1.0,
                         "kv": float(kv), "tokens": float(b), "qc": b * attention_area(1, kv),
                         "ctx": float(b * kv), "time_s": 1.0, "n_embd": 8192.0,
                         "n_q_head": 64.0, "n_kv_head": 8.0})
    df = pd.DataFrame(rows)
    t = predict("attention", df, hw, vals)
    t = t + per_block_s * df["batch"] * np.ceil((df["kv"] + 1) / 16)
    return df.assign(time_s=t * (1 + noise * rng.standard_normal(len(t))))


@pytest.mark.parametrize("per_block_ns", [0.0, 40.0])
def test_decode_per_block_term_is_recovered_or_found_absent(per_block_ns):
    hw = get_hardware("A100-SXM-80GB")
    vals = {"eta_attn_prefill": 0.3, "eta_attn_decode": 0.75, "floor_attention_s": 15e-6}
    df = _decode_table(per_block_ns * 1e-9, hw, vals)
    out = decode_context_terms(df, hw, values=vals)
    got = out["with_per_block_term"]
    assert got["per_block_ns"] == pytest.approx(per_block_ns, abs=3.0)
    assert got["eta_attn_decode"] == pytest.approx(0.75, rel=0.03)
    assert got["mean_ape_pct_all"] < 2.0
    if per_block_ns == 0.0:  # the cost model's own form fits as well
        assert out["cost_model"]["mean_ape_pct_all"] < 2.0
    else:  # and misses a real per-block cost, worst at long context
        assert out["cost_model"]["mean_ape_pct_all"] > 2 * got["mean_ape_pct_all"]


# ---------------------------------------------------------------- real tables


def _table(rel):
    p = DATA / rel
    if not p.is_file():
        pytest.skip(f"{p} is absent (Vidur's profiling tables, see shared/data/README.md)")
    return p


def test_vidur_a100_decode_shows_no_per_block_cost():
    """Vidur's A100 decode table (block 16, context 32-4,032): no per-block term, and the
    cost model's form fitted at <= 2,048 tokens holds out longer contexts within 15%."""
    a = load_attention_table(_table("attention_a100_acb95f6/attention.csv"))
    out = decode_context_terms(a, get_hardware("A100-SXM-80GB"))
    assert out["with_per_block_term"]["per_block_ns"] < 0.5
    held = out["cost_model"]["fit_short_held_out_long"]
    assert held["mean_ape_pct_long_held_out"] < 15.0


def test_vidur_a100_cross_node_rows_match_the_bundled_profile():
    p = _table("network/a100_dgx/all_reduce.csv")
    hw = get_hardware("A100-SXM-80GB")
    cal = load_profile("A100-SXM-80GB")
    ops = cal.details["operator_tables_fitted"]
    nvlink = {k: ops[k] for k in ("allreduce_latency_s", "allreduce_bw_eff")}
    got = fit_group("allreduce_nic", load_cross_node_allreduce(p), hw, fixed=nvlink).values
    assert got["allreduce_nic_bw_eff"] == pytest.approx(cal.allreduce_nic_bw_eff, rel=1e-3)
    assert got["allreduce_nic_latency_s"] == pytest.approx(cal.allreduce_nic_latency_s, rel=1e-3)
    assert calibration_from({**nvlink, **got}).allreduce_nic_bw_eff == got["allreduce_nic_bw_eff"]
