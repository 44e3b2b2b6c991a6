"""Closed-loop load: N clients, each with one request outstanding, thinking between them."""

from __future__ import annotations

import numpy as np
import pytest

from specsim.simulator.cluster.engine import run_scenario
from specsim.traces.closed_loop import ClosedLoopSpec
from specsim.traces.distributions import Distribution
from tests.conftest import make_trace


def scenario(router="round_robin", method="draft_model"):
    return {
        "model": "Llama-3.1-8B",
        "hardware": {"accelerator": "H100-SXM", "count": 2},
        "speculation": {"method": method, "k": 4, "drafter": "Llama-3.2-1B",
                        "acceptance": {"alpha": 0.7, "per_request": {"concentration": 8}}},
        "scheduler": {"max_batch": 16, "token_budget": 1024},
        "router": {"policy": router},
        "workload": {},
        "simulation": {"progress": False},
    }


def closed_trace(n, clients, think=None, seed=4):
    tr = make_trace(n, gap=0.0, prompt=(20, 400), output=(5, 200), seed=seed)
    tr.attrs["closed_loop"] = ClosedLoopSpec(clients, think)
    return tr


def concurrency(req):
    a, f = req["arrival_s"].to_numpy(), req["finish_s"].to_numpy()
    events = np.concatenate([np.stack([a, np.ones_like(a)], 1), np.stack([f, -np.ones_like(f)], 1)])
    events = events[np.lexsort((events[:, 1], events[:, 0]))]  # finishes before arrivals at ties
    return int(np.cumsum(events[:, 1]).max())


@pytest.mark.parametrize("clients", [1, 8])
def test_at_most_n_requests_are_outstanding_and_all_complete(clients):
    res = run_scenario(scenario(), trace=closed_trace(120, clients))
    req = res.requests
    assert (req["status"] == "completed").all()
    assert concurrency(req) == clients
    # with no think time a client's next request leaves the moment its previous one ends
    starts = np.sort(req["arrival_s"].to_numpy())
    finishes = set(req["finish_s"].to_numpy().tolist())
    assert (starts[:clients] == 0.0).all()
    assert all(s in finishes for s in starts[clients:])


def test_think_time_separates_a_clients_requests():
    think = Distribution("fixed", {"value": 0.25}, integer=False)
    res = run_scenario(scenario(), trace=closed_trace(60, 1, think))
    req = res.requests.sort_values("arrival_s")
    gaps = req["arrival_s"].to_numpy()[1:] - req["finish_s"].to_numpy()[:-1]
    np.testing.assert_allclose(gaps, 0.25, rtol=1e-9)


@pytest.mark.parametrize("router,think", [
    ("round_robin", 0.05), ("least_loaded", 0.05),
    # no think time: each next request is sent at the instant of a finish, which is where a
    # step begins; it must wait for the step after, as step by step (it once joined that step
    # when the kernel's start time and SimPy's clock differed by an ulp)
    ("round_robin", None), ("least_loaded", None)])
def test_closed_loop_multi_step_equals_step_by_step(router, think):
    think = Distribution("exponential", {"mean": think}, integer=False) if think else None
    tr = closed_trace(150, 12, think)
    fast = run_scenario(scenario(router), trace=tr, overrides={"simulation.fast_path": True})
    slow = run_scenario(scenario(router), trace=tr.copy(),
                        overrides={"simulation.fast_path": False})
    a, b = fast.requests, slow.requests
    for col in ("output_tokens", "accepted_tokens", "drafted_tokens", "steps", "worker"):
        assert (a[col] == b[col]).all(), col
    np.testing.assert_allclose(a["arrival_s"], b["arrival_s"], rtol=1e-9)
    np.testing.assert_allclose(a["finish_s"], b["finish_s"], rtol=1e-9)
    assert fast.metrics["iterations"] == slow.metrics["iterations"]


def test_closed_loop_from_a_scenario_section():
    sc = scenario()
    sc["workload"] = {"synthetic": {"requests": 80, "arrival": {"process": "poisson", "rate": 1.0},
                                    "prompt_tokens": 200, "output_tokens": 60},
                      "closed_loop": {"clients": 6,
                                      "think_time_s": {"distribution": "exponential",
                                                       "mean": 0.2}}}
    res = run_scenario(sc)
    req = res.requests
    assert (req["status"] == "completed").all() and len(req) == 80
    assert concurrency(req) == 6
    again = run_scenario(sc)  # same scenario, same seed: the same run
    assert again.requests["arrival_s"].tolist() == req["arrival_s"].tolist()


@pytest.mark.parametrize("bad, message", [
    ({"clients": 0}, "workload.closed_loop.clients: expected an integer"),
    ({}, "workload.closed_loop.clients: missing"),
    ({"clients": 2, "think": 1}, "workload.closed_loop.think"),
    ({"clients": 2, "think_time_s": -1}, "workload.closed_loop.think_time_s"),
])
def test_closed_loop_errors_name_the_key(bad, message):
    from specsim.traces.errors import TraceError

    sc = scenario()
    sc["workload"] = {"synthetic": {"requests": 5, "arrival": {"process": "poisson", "rate": 1.0},
                                    "prompt_tokens": 20, "output_tokens": 5},
                      "closed_loop": bad}
    with pytest.raises(TraceError, match=message):
        run_scenario(sc)
