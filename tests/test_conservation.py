"""Invariants: every arrival is accounted for, KV blocks never leak, tokens add up."""

from __future__ import annotations

import numpy as np
import pytest

from specsim.simulator.cluster.engine import run_scenario
from specsim.simulator.registry import ROUTERS
from tests.conftest import make_trace


def scenario(**spec):
    return {
        "model": "Llama-3.1-8B",
        "hardware": {"accelerator": "H100-SXM", "count": 2, "memory_fraction": 0.235},
        "speculation": {"method": "draft_model", "k": 5, "drafter": "Llama-3.2-1B",
                        "acceptance": {"alpha": 0.75, "per_request": {"concentration": 8}},
                        **spec},
        "scheduler": {"max_batch": 64, "token_budget": 2048, "max_queue": 40},
        "router": {"policy": "least_loaded"},
        "workload": {},
        "simulation": {"progress": False},
    }


TRACE = make_trace(600, rate=40.0, prompt=(50, 3000), output=(1, 900), seed=3)


def _check(res, expect_all_done: bool):
    m, req = res.metrics, res.requests
    assert m["requests_arrived"] == (m["requests_completed"] + m["requests_rejected"]
                                     + m["requests_in_flight"])
    counts = req["status"].value_counts().to_dict()
    assert counts.get("completed", 0) == m["requests_completed"]
    assert counts.get("rejected", 0) == m["requests_rejected"]
    # tokens emitted = accepted drafts + bonus (target-sampled) tokens, per request
    assert (req["output_tokens"] == req["accepted_tokens"] + req["bonus_tokens"]).all()
    assert m["output_tokens"] == m["accepted_tokens"] + m["bonus_tokens"]
    done = req[req.status == "completed"]
    assert (done["output_tokens"] == done["output_tokens_requested"]).all()
    assert (req["accepted_tokens"] <= req["drafted_tokens"]).all()
    if expect_all_done:
        assert m["requests_in_flight"] == 0
        assert m["kv_blocks_used_at_end"] == 0


def test_conservation_under_kv_pressure_with_preemption_and_rejection():
    res = run_scenario(scenario(), trace=TRACE)
    m = res.metrics
    assert m["preemptions"] > 0, "the scenario is meant to exercise preemption"
    assert m["requests_rejected"] > 0, "and the queue limit"
    assert m["kv_peak_utilization"] > 0.9
    _check(res, expect_all_done=True)


def test_conservation_at_a_horizon_counts_requests_in_flight():
    sc = scenario()
    sc["simulation"]["horizon_s"] = 8.0
    res = run_scenario(sc, trace=TRACE)
    assert res.metrics["requests_in_flight"] > 0
    assert res.metrics["simulated_time_s"] == pytest.approx(8.0)
    _check(res, expect_all_done=False)


def test_requests_too_long_for_the_model_are_rejected_and_counted():
    tr = make_trace(20, rate=5.0, prompt=100, output=50)
    tr.loc[[3, 7], "prompt_tokens"] = 200_000
    res = run_scenario(scenario(), trace=tr)
    assert res.metrics["rejected_by_reason"] == {"exceeds model context": 2}
    _check(res, expect_all_done=True)


@pytest.mark.parametrize("method,extra", [
    ("ngram", {"ngram": {"match_rate": 0.5}, "drafter": None}),
    ("eagle3", {"drafter": None}),
    ("pard", {}),
    ("none", {"drafter": None}),
])
def test_conservation_for_each_drafter(method, extra):
    res = run_scenario(scenario(method=method, **extra), trace=TRACE)
    _check(res, expect_all_done=True)
    if method == "none":
        assert res.metrics["mean_acceptance_length"] == 1.0
        assert res.metrics["drafted_tokens"] == 0


@pytest.mark.parametrize("router", ROUTERS.names())
def test_fast_path_gives_the_step_by_step_result(router):
    tr = make_trace(300, rate=3.0, prompt=(50, 600), output=(20, 600), seed=5)
    tr.loc[[10, 20], "prompt_tokens"] = 500_000  # rejected up front: round robin skips them
    sc = scenario()
    sc["hardware"]["memory_fraction"] = 0.9
    sc["router"]["policy"] = router
    fast = run_scenario(sc, trace=tr, overrides={"simulation.fast_path": True})
    slow = run_scenario(sc, trace=tr, overrides={"simulation.fast_path": False})
    a, b = fast.requests, slow.requests
    for col in ("output_tokens", "accepted_tokens", "drafted_tokens", "steps", "worker"):
        assert (a[col] == b[col]).all(), col
    np.testing.assert_allclose(a["finish_s"], b["finish_s"], rtol=1e-9)
    assert fast.metrics["iterations"] == slow.metrics["iterations"]


@pytest.mark.parametrize("max_batch,memory_fraction", [(4, 0.9), (32, 0.3)])
def test_segments_through_a_blocked_queue_give_the_step_by_step_result(
        max_batch, memory_fraction, monkeypatch):
    """A full batch with a queue: the segment runs through arrivals up to its first finish
    (or the step before a preemption), and the result is the step-by-step one, preemptions
    and rejections at the queue limit included."""
    from specsim.simulator.scheduling.batching import FcfsScheduler

    through = []
    blocked = FcfsScheduler.blocked
    monkeypatch.setattr(FcfsScheduler, "blocked",
                        lambda self, w: through.append(blocked(self, w)) or through[-1])
    tr = make_trace(300, rate=40.0, prompt=(50, 2000), output=(20, 600), seed=9)
    sc = scenario()
    sc["hardware"]["memory_fraction"] = memory_fraction
    sc["scheduler"]["max_batch"] = max_batch
    fast = run_scenario(sc, trace=tr, overrides={"simulation.fast_path": True})
    assert any(through), "the blocked-queue path never ran"
    slow = run_scenario(sc, trace=tr, overrides={"simulation.fast_path": False})
    a, b = fast.requests, slow.requests
    for col in ("output_tokens", "accepted_tokens", "drafted_tokens", "steps", "worker"):
        assert (a[col] == b[col]).all(), col
    np.testing.assert_allclose(a["finish_s"], b["finish_s"], rtol=1e-9)
    np.testing.assert_allclose(a["first_token_s"], b["first_token_s"], rtol=1e-9)
    assert fast.metrics["iterations"] == slow.metrics["iterations"]
    assert fast.metrics["preemptions"] == slow.metrics["preemptions"]
    assert fast.metrics["requests_rejected"] == slow.metrics["requests_rejected"]
    _check(fast, expect_all_done=True)


def test_request_table_keeps_every_trace_column():
    from specsim.simulator.cluster.requests import RequestTable

    tr = make_trace(4, gap=1.0)
    tr["session_id"] = [7, 7, -1, 9]
    tr["turn"] = [0, 1, 0, 0]
    tr["slo_tier"] = ["premium", "premium", "batch", "standard"]
    tr["prefix_block_ids"] = [(1, 2), (1, 2, 3), (), (4,)]
    tr["temperature"] = [0.0, 0.7, 1.0, 0.2]
    t = RequestTable(tr)
    assert t.prefix_ptr.tolist() == [0, 2, 5, 5, 6]
    assert t.prefix_blocks(1).tolist() == [1, 2, 3] and t.prefix_blocks(2).size == 0
    assert t.session_id.tolist() == [7, 7, -1, 9] and t.turn.tolist() == [0, 1, 0, 0]
    assert t.slo_tier.tolist() == ["premium", "premium", "batch", "standard"]
    assert t.temperature.tolist() == [0.0, 0.7, 1.0, 0.2]
    frame = t.columns()
    assert frame["slo_tier"].tolist()[0] == "premium" and frame["session_id"].tolist()[3] == 9
