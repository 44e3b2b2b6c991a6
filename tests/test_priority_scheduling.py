"""SLO-tier scheduling (simulator/scheduling/priority.py): strict priority keeps the premium
tier within its TTFT target under overload while the batch tier absorbs the queue (and FCFS
does not), EDF admits by deadline, admission per tier, the tier_yield speculation policy,
per-tier metrics, and the invariants on priority runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsim.errors import ScenarioError
from specsim.simulator.cluster.engine import run_scenario
from specsim.simulator.kv.eviction import Newest
from specsim.simulator.scenario import schema
from specsim.simulator.scheduling.priority import PriorityScheduler, TierParams
from tests.conftest import make_trace
from tests.test_conservation import _check

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "slo_priority.yaml"
FCFS = {"scheduler.policy": "fcfs", "scheduler.params": None}


def _check_invariants(res, all_done: bool) -> None:
    """Invariants 5-7 (test_conservation's check): every arrival completed, rejected or in
    flight; KV blocks free at the end; tokens = accepted + bonus."""
    _check(res, expect_all_done=all_done)


def _tier_ttft(res, tier: str) -> np.ndarray:
    req = res.requests
    done = req[(req.slo_tier == tier) & (req.status == "completed")]
    return done["ttft_s"].to_numpy()


# ------------------------------------------------------------ the bundled scenario


@pytest.fixture(scope="module")
def bundled():
    # the scheduler's queueing is the subject: the engine's output rhythm (vLLM's default
    # lag, the same for both tiers) is left out
    quiet = {"simulation.progress": False, "engine.output_lag_steps": 0.0}
    prio = run_scenario(SCENARIO, overrides=quiet)
    fcfs = run_scenario(SCENARIO, overrides={**quiet, **FCFS})
    return prio, fcfs


def test_priority_keeps_the_premium_ttft_within_its_slo_while_batch_absorbs_the_queue(bundled):
    prio, fcfs = bundled
    target = prio.metrics["slo_by_tier"]["premium"]["ttft_target_s"]
    assert target == 1.0
    # overload: the run ends well after the last arrival (a queue built up)
    last = float(prio.requests["arrival_s"].max())
    assert prio.metrics["simulated_time_s"] > last + 5
    premium, batch = _tier_ttft(prio, "premium"), _tier_ttft(prio, "batch")
    assert len(premium) == prio.metrics["slo_by_tier"]["premium"]["requests"]  # all served
    assert premium.max() <= target  # every premium request within its TTFT target
    assert prio.metrics["slo_by_tier"]["premium"]["ttft_met"] == len(premium)
    # the batch tier absorbs the queue: it waits seconds where premium waits milliseconds
    assert np.median(batch) > 10 * target > 100 * np.median(premium)
    # the same scenario first come first served: one queue, premium misses its target
    f_premium = _tier_ttft(fcfs, "premium")
    assert np.median(f_premium) > target
    assert fcfs.metrics["slo_by_tier"]["premium"]["attainment"] < 0.5
    # the work is the same: priority only reorders it
    assert prio.metrics["requests_completed"] == fcfs.metrics["requests_completed"]
    _check_invariants(prio, all_done=True)


def test_per_tier_metrics_agree_with_requests_csv(bundled):
    prio, _ = bundled
    req = prio.requests
    tiers = prio.metrics["slo_by_tier"]
    assert list(tiers) == ["premium", "batch"]  # slo.tiers' order
    for name, block in tiers.items():
        g = req[req.slo_tier == name]
        done = g[g.status == "completed"]
        ok = ((done.ttft_s <= block["ttft_target_s"])
              & ~(done.tpot_s > block["tpot_target_s"]))
        assert block["requests"] == len(g) and block["completed"] == len(done)
        assert block["slo_met"] == int(ok.sum())
        assert block["attainment"] == pytest.approx(ok.sum() / len(g))
        assert block["ttft_s"]["p50"] == pytest.approx(float(np.percentile(done.ttft_s, 50)))
    from specsim.simulator.metrics.run_metrics import RunMetrics
    from tests.test_run_metrics import _declared

    typed = RunMetrics.from_summary(prio.metrics)
    assert _declared(typed) == []  # every key of slo_by_tier and slo.tiers declared
    assert typed.slo_by_tier["premium"].ttft_target_s == 1.0
    assert typed.slo.tiers["batch"]["ttft_s"] == 30.0


def test_report_has_a_per_tier_table(bundled, tmp_path):
    from specsim.simulator.report.report import write_report

    prio, _ = bundled
    write_report(prio, tmp_path, plots=False)
    text = (tmp_path / "report.md").read_text()
    assert "## Per SLO tier" in text
    assert "| premium | 1,000 ms / 50.00 ms | 590 |" in text.replace("  ", " ")


def test_a_run_with_one_tier_and_no_tier_slos_has_no_per_tier_block():
    res = run_scenario(_scenario(slo={"ttft_s": 1.0}), trace=make_trace(30, rate=10.0,
                                                                        output=20))
    assert "slo_by_tier" not in res.metrics and "tiers" not in res.metrics["slo"]


# ------------------------------------------------------------ small, closed-form cases


def _scenario(policy: str = "fcfs", params: dict | None = None, **extra) -> dict:
    sc = {"model": "Llama-3.1-8B", "hardware": {"accelerator": "H100-SXM", "count": 1},
          "speculation": {"method": "none"},
          "scheduler": {"policy": policy, "max_batch": 1, "token_budget": 4096,
                        **({"params": params} if params is not None else {})},
          "workload": {}, "simulation": {"progress": False},
          "slo": {"tiers": {"premium": {"ttft_s": 1.0}, "standard": {"ttft_s": 5.0},
                            "batch": {"ttft_s": 2.0}}}}
    sc.update(extra)
    return sc


def _deadline_trace() -> pd.DataFrame:
    """One long request A holds the only batch slot; B (batch tier, arrives 0.001, deadline
    2.001), D (standard, 0.002, deadline 5.002) and C (premium, 1.5, deadline 2.5) wait."""
    tr = make_trace(4, gap=1.0, prompt=64, output=8)
    tr["arrival_s"] = [0.0, 0.001, 0.002, 1.5]
    tr["output_tokens"] = [1000, 8, 8, 8]
    tr["slo_tier"] = ["batch", "batch", "standard", "premium"]
    return tr


def _service_order(res) -> list[int]:
    req = res.requests
    return req.sort_values("first_token_s")["request_id"].tolist()


def test_edf_admits_by_deadline_priority_by_tier_fcfs_by_arrival():
    tr = _deadline_trace()
    arrival = tr["arrival_s"].to_numpy()
    target = np.array([2.0, 2.0, 5.0, 1.0])  # each request's tier's TTFT target
    order = {p: _service_order(run_scenario(_scenario(p, {} if p != "fcfs" else None),
                                            trace=tr))
             for p in ("edf", "priority", "fcfs")}
    # A first (alone), then the closed forms: the deadlines' order, the tiers', arrival's
    assert order["edf"] == [0, *(1 + np.argsort((arrival + target)[1:], kind="stable"))]
    assert order["edf"] == [0, 1, 3, 2]
    assert order["priority"] == [0, 3, 2, 1]  # premium, standard, batch
    assert order["fcfs"] == [0, 1, 2, 3]


def test_priority_with_one_tier_is_fcfs_bit_for_bit_under_kv_pressure():
    """Every request in one tier: the priority order is the queue's order and preemption
    the eviction policy's, so the run is FCFS's (which may take the kernel's compiled step
    0), preemptions included."""
    tr = make_trace(300, rate=40.0, prompt=(50, 2000), output=(20, 600), seed=9)
    sc = _scenario(speculation={"method": "draft_model", "k": 4, "drafter": "Llama-3.2-1B",
                                "acceptance": {"alpha": 0.7}})
    sc["scheduler"].update(max_batch=32, token_budget=2048)
    sc["hardware"]["memory_fraction"] = 0.3
    fcfs = run_scenario(sc, trace=tr)
    sc["scheduler"]["policy"] = "priority"
    prio = run_scenario(sc, trace=tr)
    assert fcfs.metrics["preemptions"] > 0, "meant to exercise preemption"
    cols = ["first_token_s", "finish_s", "output_tokens", "accepted_tokens", "steps"]
    pd.testing.assert_frame_equal(prio.requests[cols], fcfs.requests[cols])
    assert prio.metrics["preemptions"] == fcfs.metrics["preemptions"]
    _check_invariants(prio, all_done=True)


@pytest.mark.parametrize("policy", ["priority", "edf"])
def test_compiled_step_0_equals_the_python_scheduler(policy):
    """Invariant 4: priority and edf take fcfs's compiled step 0 (Kernel.fused); run as
    Python source (the scheduler's shape) the bits are the same."""
    from specsim.simulator.execution.kernel import compiled_backend

    if not compiled_backend("auto"):
        pytest.skip("numba is not installed or not loading: no compiled kernel to compare")
    ov = {"simulation.progress": False, "workload.synthetic.requests": 600,
          "scheduler.policy": policy, "scheduler.token_budget": 2048}
    fast = run_scenario(SCENARIO, overrides={**ov, "simulation.compiled": True})
    pure = run_scenario(SCENARIO, overrides={**ov, "simulation.compiled": False})
    pd.testing.assert_frame_equal(fast.requests, pure.requests)
    pd.testing.assert_frame_equal(fast.iterations, pure.iterations)


def test_preemption_takes_the_lowest_tier_first():
    tr = make_trace(5, gap=1.0)
    tr["slo_tier"] = ["batch", "premium", "batch", "premium", "standard"]
    from specsim.simulator.cluster.requests import RequestTable

    t = RequestTable(tr)
    sched = PriorityScheduler(8, 2048, True, None, params=TierParams(),
                              slo=schema.Slo())
    rows = np.array([0, 1, 2, 3, 4])
    # newest first within a tier (the eviction policy's order), batch before standard
    # before premium
    assert sched.preempt_order(rows, t, Newest()).tolist() == [2, 0, 4, 3, 1]


def test_invariants_on_priority_runs_with_kv_pressure_aging_and_a_horizon():
    tr = make_trace(400, rate=60.0, prompt=(50, 2000), output=(20, 600), seed=4)
    tr["slo_tier"] = np.where(np.arange(400) % 3 == 0, "premium", "batch")
    sc = _scenario("priority", {"aging_s": 2.0, "tiers": ["premium", "batch"]},
                   speculation={"method": "draft_model", "k": 4, "drafter": "Llama-3.2-1B",
                                "acceptance": {"alpha": 0.7}})
    sc["scheduler"].update(max_batch=32, token_budget=2048)
    sc["hardware"]["memory_fraction"] = 0.3
    res = run_scenario(sc, trace=tr)
    assert res.metrics["preemptions"] > 0
    _check_invariants(res, all_done=True)
    sc["simulation"]["horizon_s"] = 4.0
    cut = run_scenario(sc, trace=tr)
    assert cut.metrics["requests_in_flight"] > 0
    _check_invariants(cut, all_done=False)


def _two_tiers(n: int, rate: float, seed: int, premium=lambda i: i % 3 == 0) -> pd.DataFrame:
    """Poisson arrivals, 128-token prompts, 100-300 output tokens; request i is premium
    where ``premium(i)``, else batch."""
    tr = make_trace(n, rate=rate, prompt=128, output=(100, 300), seed=seed)
    tr["slo_tier"] = np.where(premium(np.arange(n)), "premium", "batch")
    return tr


def _overtaken(res, aging_s: float) -> int:
    """(batch b, premium p) pairs where p arrived more than ``aging_s`` after b and still
    got its first token before b."""
    req = res.requests
    b = req[req.slo_tier == "batch"]
    p = req[req.slo_tier == "premium"]
    later = p["arrival_s"].to_numpy()[None, :] > b["arrival_s"].to_numpy()[:, None] + aging_s
    first = (p["first_token_s"].to_numpy()[None, :]
             < b["first_token_s"].to_numpy()[:, None])
    return int((later & first).sum())


@pytest.mark.parametrize("policy", ["priority", "edf"])
def test_invariants_with_a_prefix_cache_and_swap_preemption(policy):
    """Admission through the prefix cache and swap preemption in
    the tiers' order: every arrival accounted for, no block held at the end, and premium
    still first."""
    ov = {"simulation.progress": False, "workload.synthetic.requests": 600,
          "hardware.memory_fraction": 0.3, "scheduler.policy": policy,
          "kv_cache": {"prefix_cache": True, "tiers": [{"name": "host_dram"}],
                       "preemption": "swap"}}
    res = run_scenario(SCENARIO, overrides=ov)
    assert res.metrics["preemptions"] > 0
    _check_invariants(res, all_done=True)
    tiers = res.metrics["slo_by_tier"]
    assert tiers["premium"]["ttft_s"]["p99"] < 0.2 * tiers["batch"]["ttft_s"]["p99"]


def test_aging_bounds_how_long_the_low_tier_starves():
    """Premium alone is more than the worker completes: under strict priority premium
    requests that arrive long after a batch request are served before it (it starves until
    premium's arrivals stop); with aging_s a batch request that has waited aging_s ranks
    with premium by its arrival, so no premium request arriving more than aging_s after it
    goes first (the closed form of the rule)."""
    tr = _two_tiers(600, 60.0, seed=5, premium=lambda i: i % 5 != 0)
    sc = _scenario("priority", {"tiers": ["premium", "batch"]})
    sc["scheduler"].update(max_batch=16)
    strict = run_scenario(sc, trace=tr)
    sc["scheduler"]["params"]["aging_s"] = 2.0
    aged = run_scenario(sc, trace=tr)
    last = float(tr["arrival_s"].max())
    # strict: batch requests wait for the end of the premium arrivals
    assert (strict.requests.loc[strict.requests.slo_tier == "batch", "first_token_s"]
            > last).sum() > 10
    assert _overtaken(strict, 2.0) > 1000
    assert _overtaken(aged, 2.0) == 0
    _check_invariants(aged, all_done=True)


# ------------------------------------------------------------ admission per tier


def test_a_tier_queue_limit_rejects_only_that_tier():
    tr = _two_tiers(400, 80.0, seed=6)
    sc = _scenario("priority", {"tiers": ["premium", "batch"], "queue_limit": {"batch": 5}})
    sc["scheduler"].update(max_batch=8)
    res = run_scenario(sc, trace=tr)
    req = res.requests
    rejected = req[req.status == "rejected"]
    assert len(rejected) > 0 and set(rejected.slo_tier) == {"batch"}
    assert res.metrics["rejected_by_reason"] == {"tier queue full (batch)": len(rejected)}
    assert res.metrics["slo_by_tier"]["batch"]["rejected"] == len(rejected)
    _check_invariants(res, all_done=True)


def test_shedding_rejects_the_low_tiers_while_the_first_is_at_risk():
    """EDF under long overload serves old batch requests before new premium ones once
    their (loose) deadlines come first; refusing batch arrivals while premium's oldest
    request has waited half its target keeps premium's TTFT lower."""
    tr = _two_tiers(800, 80.0, seed=7)
    sc = _scenario("edf", {"tiers": ["premium", "batch"]})
    sc["scheduler"].update(max_batch=8)
    plain = run_scenario(sc, trace=tr)
    sc["scheduler"]["params"]["shed_at_risk"] = 0.5
    shed = run_scenario(sc, trace=tr)
    rejected = shed.requests[shed.requests.status == "rejected"]
    assert len(rejected) > 0 and set(rejected.slo_tier) == {"batch"}
    assert list(shed.metrics["rejected_by_reason"]) == ["shed (premium at risk)"]
    assert (np.percentile(_tier_ttft(shed, "premium"), 90)
            < np.percentile(_tier_ttft(plain, "premium"), 90))
    _check_invariants(shed, all_done=True)


# ------------------------------------------------------------ speculation yields


def test_tier_yield_lowers_the_kept_tiers_tpot_and_raises_the_others():
    ov = {"simulation.progress": False, "workload.synthetic.requests": 600}
    static = run_scenario(SCENARIO, overrides=ov)
    yielded = run_scenario(SCENARIO, overrides={**ov, "speculation.policy": "tier_yield"})

    def tpot(res, tier):
        return res.metrics["slo_by_tier"][tier]["tpot_s"]["p50"]

    assert tpot(yielded, "premium") < 0.8 * tpot(static, "premium")
    assert tpot(yielded, "batch") > tpot(static, "batch")
    req = yielded.requests
    batch_drafted = req.loc[req.slo_tier == "batch", "drafted_tokens"].sum()
    assert batch_drafted < 0.5 * static.requests.loc[
        static.requests.slo_tier == "batch", "drafted_tokens"].sum()
    _check_invariants(yielded, all_done=True)


def test_tier_yield_chooses_k_per_row_by_tier_and_batch_size():
    from specsim.simulator.cluster.requests import RequestTable
    from specsim.simulator.speculation.policies import PolicyContext, TierYield

    tr = make_trace(4, gap=1.0)
    tr["slo_tier"] = ["premium", "batch", "standard", "premium"]
    t = RequestTable(tr)
    pol = TierYield(PolicyContext(4, {"batch_at_least": 3, "yield_k": 1}))
    assert pol.choose(np.array([0, 1]), t).tolist() == [4, 4]  # small batch: all draft k
    assert pol.choose(np.array([0, 1, 2, 3]), t).tolist() == [4, 1, 1, 4]
    with pytest.raises(ScenarioError, match=r"^speculation\.policy_params\.yield_k: "):
        TierYield(PolicyContext(4, {"yield_k": 5}))


# ------------------------------------------------------------ bad input


@pytest.mark.parametrize("bad,message", [
    ({"scheduler": {"policy": "fcfs", "params": {"aging_s": 1}}},
     r"^scheduler\.params: batch scheduler fcfs takes no parameters"),
    ({"scheduler": {"policy": "priority", "params": {"aging": 1}}},
     r"^scheduler\.params\.aging: unknown key \(did you mean 'aging_s'"),
    ({"scheduler": {"policy": "edf", "params": {"queue_limit": {"batch": -1}}}},
     r"^scheduler\.params\.queue_limit\.batch: expected an integer at least 0, got -1$"),
    ({"scheduler": {"policy": "priority", "params": {"tiers": ["a", "a"]}}},
     r"^scheduler\.params\.tiers: expected a list of distinct SLO tier names"),
    ({"slo": {"tiers": {"premium": {"ttft": 1}}}},
     r"^slo\.tiers\.premium\.ttft: unknown key"),
])
def test_bad_scheduler_params_and_tier_slos_are_one_line(bad, message):
    with pytest.raises(ScenarioError, match=message):
        schema.validate(bad)


def test_shedding_without_a_ttft_target_is_one_line():
    sc = _scenario("priority", {"shed_at_risk": 0.5})
    sc["slo"] = {}
    with pytest.raises(ScenarioError, match=r"scheduler\.params\.shed_at_risk: needs a TTFT "
                                            r"target for tier 'premium'"):
        run_scenario(sc, trace=make_trace(3, gap=1.0, output=4))


def test_a_class_to_tier_mapping_must_name_every_class():
    sc = _scenario(workload={"synthetic": {"arrival": {"process": "poisson", "rate": 1},
                                           "requests": 5,
                                           "prompt_tokens": {"distribution": "fixed",
                                                             "value": 10},
                                           "output_tokens": {"distribution": "fixed",
                                                             "value": 4}},
                             "class_mix": {"chat": 1, "code": 1},
                             "slo_tier": {"chat": "premium"}})
    from specsim.traces.errors import TraceError

    with pytest.raises(TraceError, match=r"^workload\.slo_tier: no tier for workload class "
                                            r"'code'"):
        run_scenario(sc)
