"""Prefill/decode disaggregation (issue 11, part 7): pools, the KV link, invariants, inputs."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
import yaml

from specsim.errors import ScenarioError
from specsim.simulator.cli import main
from specsim.simulator.cluster.engine import Simulation, load_scenario, run_scenario
from specsim.simulator.registry import ROUTERS
from tests.conftest import REPO, make_trace

BW_GB_S = 25.0
LATENCY_S = 2e-4


def scenario(pd: bool = True, **dis) -> dict:
    sc = {
        "model": "Llama-3.1-8B",
        "hardware": {"accelerator": "H100-SXM", "tensor_parallel": 1},
        "speculation": {"method": "draft_model", "k": 5, "drafter": "Llama-3.2-1B",
                        "acceptance": {"alpha": 0.75, "per_request": {"concentration": 8}}},
        "scheduler": {"max_batch": 64, "token_budget": 2048},
        "router": {"policy": "least_loaded"},
        "workload": {},
        "simulation": {"progress": False},
        # the pools' own timing is the subject: the engine's output rhythm is left out
        "engine": {"output_lag_steps": 0.0},
    }
    if pd:
        sc["disaggregation"] = {"prefill": {"count": 1}, "decode": {"count": 1},
                                "link": {"bandwidth_gb_s": BW_GB_S, "latency_s": LATENCY_S}}
        sc["disaggregation"].update(dis)
    else:
        sc["hardware"]["count"] = 1
    return sc


def one_request(prompt: int = 1500, output: int = 60, at: float = 0.25) -> pd.DataFrame:
    tr = make_trace(1, gap=1.0, prompt=prompt, output=output)
    tr["arrival_s"] = at
    return tr


def kv_bytes_per_token(sc: dict) -> float:
    sc_v, base, _ = load_scenario(sc)
    sim = Simulation(sc_v, one_request(), base)
    return sim.fleet.links[0].bytes_per_token


# ---------------------------------------------------------------- one request, idle system


def test_idle_request_ttft_is_prefill_plus_transfer_exactly():
    """The first token is sampled on the prefill pool; it reaches the user when the prompt's
    KV has crossed the link (bytes / bandwidth + latency, nothing else); decoding starts on
    the decode pool at that instant and runs the steps a mixed worker would have run."""
    prompt, output = 1500, 60
    tr = one_request(prompt, output)
    pd_res = run_scenario(scenario(), trace=tr)
    mixed = run_scenario(scenario(pd=False), trace=tr)
    r, mx = pd_res.requests.iloc[0], mixed.requests.iloc[0]
    per_token = pd_res.metrics["disaggregation"]["kv_bytes_per_token"]
    # Llama-3.1-8B (32 layers x 8 KV heads x 128 x K,V x bf16) + Llama-3.2-1B drafter
    # (16 layers x 8 x 64 x 2 x 2): what the two KV caches hold per token
    assert per_token == 32 * 8 * 128 * 2 * 2 + 16 * 8 * 64 * 2 * 2
    wire = prompt * per_token / (BW_GB_S * 1e9) + LATENCY_S
    assert r["pd_kv_bytes"] == prompt * per_token
    assert r["pd_transfer_s"] == pytest.approx(wire, rel=1e-12, abs=0)
    assert r["pd_link_wait_s"] == 0.0
    # the prefill pool computes the first token exactly when a mixed worker would
    assert r["pd_prefill_worker"] == 0 and r["worker"] == 1
    assert r["pd_prefill_token_s"] == pytest.approx(mx["first_token_s"], rel=1e-12)
    assert r["first_token_s"] == pytest.approx(r["pd_prefill_token_s"] + wire, rel=1e-12)
    assert r["ttft_s"] == pytest.approx(mx["ttft_s"] + wire, rel=1e-12)
    # the decode pool starts when the KV lands, and then runs the mixed worker's steps
    it = pd_res.iterations
    pre, dec = it[it.worker == 0], it[it.worker == 1]
    assert len(pre) == 1 and pre.prefill_seqs.iloc[0] == 1 and pre.decode_seqs.iloc[0] == 0
    assert (dec.prefill_seqs == 0).all()
    assert dec.time_s.min() == pytest.approx(r["first_token_s"], rel=1e-12)
    for col in ("output_tokens", "accepted_tokens", "drafted_tokens", "steps"):
        assert r[col] == mx[col], col
    assert r["finish_s"] == pytest.approx(mx["finish_s"] + wire, rel=1e-9)
    assert r["tpot_s"] == pytest.approx(mx["tpot_s"], rel=1e-9)
    d = pd_res.metrics["disaggregation"]
    assert d["transfers"] == 1 and d["bytes_moved"] == prompt * per_token
    assert d["transfer_s"]["mean"] == pytest.approx(wire, rel=1e-12)
    assert d["transfer_share_of_ttft"] == pytest.approx(wire / r["ttft_s"], rel=1e-9)


def test_a_one_token_request_completes_on_the_prefill_pool():
    res = run_scenario(scenario(), trace=one_request(output=1))
    r = res.requests.iloc[0]
    assert r["status"] == "completed" and r["worker"] == 0 and r["output_tokens"] == 1
    assert np.isnan(r["pd_transfer_end_s"])
    assert res.metrics["disaggregation"]["transfers"] == 0
    assert res.metrics["disaggregation"]["completed_on_prefill_pool"] == 1


# ---------------------------------------------------------------- link contention


def two_at_once() -> pd.DataFrame:
    tr = make_trace(2, gap=1.0, prompt=3000, output=40)
    tr["arrival_s"] = 0.1
    return tr


@pytest.mark.parametrize("shared", [True, False])
def test_two_simultaneous_transfers_on_a_shared_link_take_longer(shared):
    """Two prompts prefilled at once on two prefill workers: on a shared link the second
    transfer waits for the first one's bytes (FIFO); with a link per prefill worker neither
    waits."""
    sc = scenario(link={"bandwidth_gb_s": BW_GB_S, "latency_s": LATENCY_S, "shared": shared})
    sc["disaggregation"]["prefill"]["count"] = 2
    sc["router"]["policy"] = "round_robin"
    res = run_scenario(sc, trace=two_at_once())
    r = res.requests.sort_values("pd_transfer_start_s")
    per_token = res.metrics["disaggregation"]["kv_bytes_per_token"]
    busy = 3000 * per_token / (BW_GB_S * 1e9)
    assert r.pd_prefill_worker.tolist() == [0, 1]
    assert r.pd_prefill_token_s.iloc[0] == r.pd_prefill_token_s.iloc[1]  # prefilled together
    one = busy + LATENCY_S
    if shared:
        assert r.pd_transfer_s.tolist() == pytest.approx([one, busy + one], rel=1e-12)
        assert r.pd_link_wait_s.tolist() == pytest.approx([0.0, busy], rel=1e-12)
        assert r.ttft_s.iloc[1] > r.ttft_s.iloc[0]
    else:
        assert r.pd_transfer_s.tolist() == pytest.approx([one, one], rel=1e-12)
        assert (r.pd_link_wait_s == 0).all()


# ---------------------------------------------------------------- invariants


def _check(res, all_done: bool = True) -> None:
    m, req = res.metrics, res.requests
    assert m["requests_arrived"] == (m["requests_completed"] + m["requests_rejected"]
                                     + m["requests_in_flight"])
    assert (req["output_tokens"] == req["accepted_tokens"] + req["bonus_tokens"]).all()
    done = req[req.status == "completed"]
    assert (done["output_tokens"] == done["output_tokens_requested"]).all()
    sent = req[np.isfinite(req.pd_transfer_end_s)]
    assert (sent.pd_kv_bytes == sent.prompt_tokens
            * m["disaggregation"]["kv_bytes_per_token"]).all()  # tokens across the link
    if all_done:
        assert m["requests_in_flight"] == 0 and m["kv_blocks_used_at_end"] == 0
        sent_rows = (done.output_tokens_requested > 1) & ~done.pd_prefilled_on_decode
        assert m["disaggregation"]["transfers"] == sent_rows.sum()


LOADED = make_trace(500, rate=30.0, prompt=(50, 3000), output=(1, 600), seed=3)


def loaded(**extra) -> dict:
    sc = scenario()
    sc["disaggregation"]["prefill"]["count"] = 2
    sc["disaggregation"]["decode"]["count"] = 2
    sc["hardware"]["memory_fraction"] = 0.235  # little KV: preemption on both pools
    sc["scheduler"]["max_queue"] = 60
    sc.update(extra)
    return sc


def test_conservation_and_no_leaks_under_kv_pressure():
    res = run_scenario(loaded(), trace=LOADED)  # run_scenario runs check_invariants
    m = res.metrics
    pools = m["disaggregation"]["pools"]
    assert pools["decode"]["preemptions"] > 0, "meant to preempt on the decode pool"
    assert m["requests_rejected"] > 0
    _check(res)


def test_conservation_at_a_horizon_counts_transfers_in_flight():
    sc = loaded()
    sc["simulation"]["horizon_s"] = 6.0
    res = run_scenario(sc, trace=LOADED)
    assert res.metrics["requests_in_flight"] > 0
    _check(res, all_done=False)


def test_fleet_cost_and_energy_sum_both_pools():
    sc = scenario()
    sc["disaggregation"] = {
        "prefill": {"accelerator": "H100-SXM", "count": 2, "price_usd_per_hour": 2.0},
        "decode": {"accelerator": "H200-SXM", "count": 4, "tensor_parallel": 2,
                   "price_usd_per_hour": 5.0, "power_idle_w": 150},
        "link": {"bandwidth_gb_s": BW_GB_S, "latency_s": LATENCY_S}}
    res = run_scenario(sc, trace=make_trace(60, rate=10.0, prompt=(100, 2000), output=(2, 300)))
    m = res.metrics
    T = m["simulated_time_s"]
    pools = m["disaggregation"]["pools"]
    assert pools["prefill"]["accelerator"] == "H100-SXM" and pools["prefill"]["workers"] == 2
    assert pools["decode"]["accelerator"] == "H200-SXM" and pools["decode"]["workers"] == 2
    assert pools["decode"]["power_idle_w"] == 150
    assert pools["prefill"]["cost_usd"] == pytest.approx(2 * 2.0 * T / 3600)
    assert pools["decode"]["cost_usd"] == pytest.approx(4 * 5.0 * T / 3600)
    fleet = m["fleet"]
    assert fleet["devices"] == 6 and fleet["workers"] == 4
    assert fleet["cost_usd"] == pytest.approx((2 * 2.0 + 4 * 5.0) * T / 3600)
    assert fleet["energy_j"] == pytest.approx(pools["prefill"]["energy_j"]
                                              + pools["decode"]["energy_j"])
    # price x devices is the fleet's (the report prints it so)
    assert fleet["price_usd_per_device_hour"] * 6 == pytest.approx(2 * 2.0 + 4 * 5.0)
    assert m["cost_usd_per_million_output_tokens"] == pytest.approx(
        fleet["cost_usd"] / m["output_tokens"] * 1e6)
    # each pool idles at its own power: energy >= devices x idle power x time
    assert pools["decode"]["energy_j"] >= 4 * 150 * T
    _check(res)


# ---------------------------------------------------------------- exactness, determinism


@pytest.mark.parametrize("decode_router", ROUTERS.names())
@pytest.mark.parametrize("shared", [True, False])
def test_fast_path_gives_the_step_by_step_result_with_pd(decode_router, shared):
    tr = make_trace(250, rate=12.0, prompt=(50, 2500), output=(1, 500), seed=5)
    tr.loc[[10, 20], "prompt_tokens"] = 500_000  # rejected up front
    sc = scenario(decode_router=decode_router,
                  link={"bandwidth_gb_s": 5.0, "latency_s": LATENCY_S, "shared": shared})
    sc["disaggregation"]["prefill"]["count"] = 2
    sc["disaggregation"]["decode"]["count"] = 3
    fast = run_scenario(sc, trace=tr, overrides={"simulation.fast_path": True})
    slow = run_scenario(sc, trace=tr, overrides={"simulation.fast_path": False})
    a, b = fast.requests, slow.requests
    for col in ("output_tokens", "accepted_tokens", "drafted_tokens", "steps", "worker",
                "pd_prefill_worker", "status"):
        assert (a[col] == b[col]).all(), col
    for col in ("finish_s", "first_token_s", "pd_transfer_end_s"):
        np.testing.assert_allclose(a[col], b[col], rtol=1e-9)
    assert fast.metrics["iterations"] == slow.metrics["iterations"]
    assert fast.metrics["disaggregation"]["transfers"] > 200


def test_same_seed_same_results():
    tr = make_trace(200, rate=20.0, prompt=(50, 2000), output=(1, 400), seed=9)
    a = run_scenario(loaded(), trace=tr)
    b = run_scenario(loaded(), trace=tr)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.iterations, b.iterations)
    ma, mb = (dict(r.metrics, wall_time_s=0) for r in (a, b))
    assert ma == mb or repr(ma) == repr(mb)  # NaNs compare unequal; their repr does not


def test_without_the_section_nothing_changes():
    """``disaggregation: null`` is the mixed fleet, bit for bit."""
    tr = make_trace(80, rate=10.0, prompt=(50, 1000), output=(1, 200), seed=2)
    plain = scenario(pd=False)
    plain["hardware"]["count"] = 2
    off = copy.deepcopy(plain)
    off["disaggregation"] = None
    a, b = run_scenario(plain, trace=tr), run_scenario(off, trace=tr)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    assert "disaggregation" not in a.metrics and "pd_kv_bytes" not in a.requests


def test_bundled_pair_uses_the_same_devices():
    on = yaml.safe_load((REPO / "scenarios" / "pd_disaggregated.yaml").read_text())
    off = yaml.safe_load((REPO / "scenarios" / "pd_mixed_same_devices.yaml").read_text())
    dis = on.pop("disaggregation")
    assert dis["prefill"]["count"] + dis["decode"]["count"] == off["hardware"]["count"]
    for key in ("name", "description"):
        on.pop(key), off.pop(key)
    assert on == off  # the twin differs only in the split
    assert on["speculation"]["method"] != "none"


# ---------------------------------------------------------------- bad input


def _one_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("specsim: error: "), err
    return lines[0]


@pytest.mark.parametrize("sets,expect", [
    (["disaggregation.prefill.count=1"], "disaggregation.decode: required"),
    (["disaggregation.decode.count=1"], "disaggregation.prefill: required"),
    (["disaggregation.prefill.count=1", "disaggregation.decode.tensor_parallel=2"],
     "disaggregation.decode.count: required"),
    (["disaggregation.prefill.count=1", "disaggregation.decode.count=1",
      "disaggregation.link.bandwidth_gb_s=0"],
     "disaggregation.link.bandwidth_gb_s: expected a number greater than 0, got 0"),
    (["disaggregation.prefill.count=3", "disaggregation.prefill.tensor_parallel=2",
      "disaggregation.decode.count=1"],
     "disaggregation.prefill.count: expected a multiple of tensor_parallel (2), got 3"),
    (["hardware.tensor_parallel=2", "hardware.count=4", "disaggregation.prefill.count=1",
      "disaggregation.decode.count=3"],
     "disaggregation.prefill.count: expected a multiple of tensor_parallel (2, from "
     "hardware.tensor_parallel), got 1"),
    (["disaggregation.prefill.count=1", "disaggregation.decode.count=1"],
     "hardware.count: 1 devices, but the disaggregation pools have 1 + 1 = 2"),
    (["hardware.count=2", "disaggregation.prefill.count=1", "disaggregation.decode.count=1",
      "disaggregation.decode.accelerator=H900"],
     "disaggregation.decode.accelerator: unknown accelerator 'H900'"),
    (["hardware.count=2", "disaggregation.prefill.count=1", "disaggregation.decode.count=1",
      "disaggregation.decode_router=fastest"], "disaggregation.decode_router: expected one of"),
    (["hardware.count=2", "disaggregation.prefill.count=1", "disaggregation.decode.count=1",
      "disaggregation.link.latency=1"], "disaggregation.link.latency: unknown key (did you "
                                        "mean 'latency_s'?"),
    (["disaggregation=3"], "disaggregation: expected a mapping, got 3"),
])
def test_bad_pd_input_is_one_line_naming_the_key(sets, expect, capsys):
    argv = ["validate", str(REPO / "scenarios" / "chat.yaml")]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 2
    line = _one_error(capsys)
    assert expect in line, line


def test_weights_that_do_not_fit_a_pool_name_the_pool():
    sc = scenario(decode={"count": 1, "accelerator": "TPU-v5e"})
    sc["model"] = "Llama-3.1-70B"
    sc["speculation"] = {"method": "none"}
    sc["disaggregation"]["prefill"]["tensor_parallel"] = 1
    with pytest.raises(Exception) as exc:
        run_scenario(sc, trace=one_request())
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith("disaggregation.prefill: model:"), msg
    with pytest.raises(ScenarioError):
        load_scenario({**scenario(), "disaggregation": {"prefill": {"count": 0}}})


# ---------------------------------------------------------------- report


def test_report_has_a_pd_section(tmp_path):
    from specsim.simulator.report.report import write_report

    res = run_scenario(scenario(), trace=make_trace(20, rate=5.0, prompt=(100, 1000),
                                                    output=(2, 100)))
    write_report(res, tmp_path)
    text = (tmp_path / "report.md").read_text()
    assert "## Prefill/decode disaggregation" in text and "bytes moved" in text


# ---------------------------------------------------------------- conditional disaggregation


def sessions(n_sess: int = 20, turns: int = 4, seed: int = 1) -> pd.DataFrame:
    """Multi-turn chat: each turn's prompt is the previous prompt + answer + a new message."""
    r = np.random.default_rng(seed)
    rows = []
    for s in range(n_sess):
        t0, prompt = r.uniform(0, 5), int(r.integers(300, 1500))
        for k in range(turns):
            out = int(r.integers(20, 200))
            rows.append({"arrival_s": t0 + 6.0 * k, "session_id": s, "turn": k,
                         "prompt_tokens": prompt, "output_tokens": out})
            prompt += out + int(r.integers(30, 200))
    df = pd.DataFrame(rows).sort_values("arrival_s", kind="stable").reset_index(drop=True)
    df["request_id"] = np.arange(len(df))
    df["workload_class"] = "chat"
    df["prefix_block_ids"] = [()] * len(df)
    df["temperature"] = 0.0
    df["slo_tier"] = "standard"
    return df


def with_cache(local: int | None, link_gb_s: float | None = None) -> dict:
    sc = scenario(local_prefill_max_tokens=local)
    sc["disaggregation"]["decode"]["count"] = 2
    sc["kv_cache"] = {"prefix_cache": True}
    if link_gb_s is not None:
        sc["disaggregation"]["link"]["bandwidth_gb_s"] = link_gb_s
    return sc


def test_transferred_kv_is_not_prefilled_again_on_a_caching_decode_pool():
    res = run_scenario(with_cache(None), trace=sessions())
    it, req = res.iterations, res.requests
    assert (it[it.worker >= 1].prefill_seqs == 0).all()  # decode workers: no prompt work
    assert res.metrics["disaggregation"]["transfers"] == len(req)
    assert res.metrics["disaggregation"]["prefilled_on_decode_pool"] == 0
    assert (req.prefix_hit_tokens[req.turn > 0] > 0).all()  # the prefill pool's own cache
    _check(res)


def test_a_new_turn_prefills_its_new_tokens_on_the_decode_worker_holding_its_session():
    """``local_prefill_max_tokens``: a later turn whose session the decode worker has cached
    (all but at most that many prompt tokens) skips the prefill pool and the link: the decode
    worker prefills only the new tokens, and the first token comes sooner where the hand-off
    is dear (a 5 GB/s link: 30-50 ms for a later turn's KV; the decode worker's own steps,
    5 Llama-3.2-1B draft passes at their kernel floor plus the verify, are ~15 ms)."""
    tr = sessions()
    pure = run_scenario(with_cache(None, link_gb_s=5.0), trace=tr)
    fast = run_scenario(with_cache(400, link_gb_s=5.0), trace=tr)
    slow = run_scenario(with_cache(400, link_gb_s=5.0), trace=tr,
                        overrides={"simulation.fast_path": False})
    req = fast.requests
    local = req[req.pd_prefilled_on_decode]
    assert len(local) == fast.metrics["disaggregation"]["prefilled_on_decode_pool"] > 0
    assert (local.turn > 0).all() and (local.worker >= 1).all()
    assert np.isnan(local.pd_transfer_end_s).all() and (local.pd_prefill_worker == -1).all()
    assert ((local.prompt_tokens - local.prefix_hit_tokens) <= 400).all()
    assert (local.prefix_hit_tokens > 0).all()
    later = req.turn > 0
    assert req.ttft_s[later].mean() < pure.requests.ttft_s[later].mean()
    _check(fast)
    a, b = fast.requests, slow.requests
    for col in ("output_tokens", "accepted_tokens", "steps", "worker", "pd_prefilled_on_decode"):
        assert (a[col] == b[col]).all(), col
    np.testing.assert_allclose(a.finish_s, b.finish_s, rtol=1e-9)


# ---------------------------------------------------------------- mixed hardware


def test_mixed_hardware_pools_run_at_their_own_speed():
    """An H100 prefill pool with an A100 decode pool (one fleet, two deployments): the first
    token is sampled when an H100 would sample it, the decode steps take the A100's time,
    each pool is priced and calibrated as its own hardware."""
    prompt, output = 1500, 60
    tr = one_request(prompt, output)
    sc = scenario(prefill={"count": 1, "accelerator": "H100-SXM"},
                  decode={"count": 1, "accelerator": "A100-SXM-80GB"})
    res = run_scenario(sc, trace=tr)
    h100 = run_scenario(scenario(pd=False), trace=tr)
    a100_sc = scenario(pd=False)
    a100_sc["hardware"]["accelerator"] = "A100-SXM-80GB"
    a100 = run_scenario(a100_sc, trace=tr)
    r, h, a = res.requests.iloc[0], h100.requests.iloc[0], a100.requests.iloc[0]
    assert r["pd_prefill_token_s"] == pytest.approx(h["first_token_s"], rel=1e-12)
    assert r["pd_prefill_token_s"] != pytest.approx(a["first_token_s"], rel=1e-3)
    assert r["tpot_s"] == pytest.approx(a["tpot_s"], rel=1e-9)
    assert r["tpot_s"] != pytest.approx(h["tpot_s"], rel=1e-3)
    for col in ("output_tokens", "accepted_tokens", "drafted_tokens", "steps"):
        assert r[col] == a[col], col
    pools = res.metrics["disaggregation"]["pools"]
    assert pools["prefill"]["accelerator"] == "H100-SXM"
    assert pools["decode"]["accelerator"] == "A100-SXM-80GB"
    assert pools["prefill"]["calibration"] == h100.metrics["calibration"]
    assert pools["decode"]["calibration"] == a100.metrics["calibration"]
    assert pools["prefill"]["calibration"] != pools["decode"]["calibration"]
    assert res.metrics["fleet"]["accelerator"] == "H100-SXM + A100-SXM-80GB"
    assert res.metrics["calibration"] == " + ".join(
        [pools["prefill"]["calibration"], pools["decode"]["calibration"]])
    assert res.metrics["hardware_calibrated"]
    assert res.metrics["fleet"]["devices"] == 2
    _check(res)


def test_both_routing_decisions_are_in_requests_csv():
    sc = scenario(prefill={"count": 2}, decode={"count": 2})
    req = run_scenario(sc, trace=make_trace(12, rate=20.0, prompt=(100, 800),
                                            output=(2, 40))).requests
    assert req["route_reason"].str.startswith("least loaded (").all()
    assert req["pd_decode_route_reason"].str.startswith("least loaded (").all()
    one = run_scenario(scenario(), trace=one_request()).requests.iloc[0]
    assert one["route_reason"] == "the prefill pool's only worker"
    assert one["pd_decode_route_reason"] == "the decode pool's only worker"


def test_each_pool_may_name_its_own_calibration():
    """A profile pinned for the scenario applies to both pools (with a note where it was
    fitted to other hardware); a pool's own ``calibration`` replaces it for that pool, and a
    bad one is named as the pool's key."""
    tr = one_request()
    sc = scenario(prefill={"count": 1, "accelerator": "H100-SXM"},
                  decode={"count": 1, "accelerator": "A100-SXM-80GB"})
    sc["calibration"] = "H100-SXM"
    pinned = run_scenario(sc, trace=tr).metrics
    pools = pinned["disaggregation"]["pools"]
    assert pools["prefill"]["calibration"] == pools["decode"]["calibration"] == "H100-SXM"
    assert any("fitted on H100-SXM" in n and "A100-SXM-80GB" in n for n in pinned["notes"])
    sc["disaggregation"]["decode"]["calibration"] = "A100-SXM-80GB"
    own = run_scenario(sc, trace=tr).metrics
    pools = own["disaggregation"]["pools"]
    assert pools["prefill"]["calibration"] == "H100-SXM"
    assert pools["decode"]["calibration"] == "A100-SXM-80GB"
    assert not any("fitted on" in n for n in own["notes"])
    sc["disaggregation"]["decode"]["calibration"] = "no-such-profile"
    with pytest.raises(Exception) as exc:
        run_scenario(sc, trace=tr)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith("disaggregation.decode.calibration"), msg
