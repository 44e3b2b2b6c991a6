"""Session-affinity and cache-aware routing (simulator/routing/routers.py): decisions on
hand-made snapshots, the load guard, the read-only prefix query, and cache-aware routing
beating round robin on hit rate for multi-turn traffic."""

from __future__ import annotations

import pytest

from specsim.simulator.cluster.engine import run_scenario
from specsim.simulator.cluster.worker import WorkerSnapshot
from specsim.simulator.registry import ROUTERS
from specsim.simulator.routing.routers import RequestFeatures, make_router


def snap(wid, load=0, hit=None, held=0, total=1000):
    return WorkerSnapshot(wid, load, 0, held, total - held, total, held,
                          (lambda rid, h=hit: h) if hit is not None else None)


def req(rid=0, prompt=1000, session=-1):
    return RequestFeatures(rid, prompt, 100, "chat", session, "standard")


def test_routers_are_registered():
    assert {"round_robin", "least_loaded", "session_affinity", "cache_aware"} <= set(
        ROUTERS.names())


def test_session_affinity_keeps_a_session_on_its_worker():
    r = make_router("session_affinity", 3)
    snaps = [snap(0, load=5), snap(1, load=1), snap(2, load=3)]
    first = r.route(req(session=7), snaps)
    assert first.worker == 1 and "starts" in first.reason
    busy = [snap(0, load=0), snap(1, load=50), snap(2, load=0)]
    again = r.route(req(session=7), busy)
    assert again.worker == 1 and "stays" in again.reason  # its KV is there
    other = r.route(req(session=8), busy)
    assert other.worker == 0  # a new session: least loaded (lowest index on ties)
    alone = r.route(req(session=-1), busy)
    assert alone.worker == 0 and "no session" in alone.reason


def test_cache_aware_follows_the_prefix_and_records_the_score():
    r = make_router("cache_aware", 3)
    snaps = [snap(0, load=2, hit=(0,)), snap(1, load=3, hit=(800,)), snap(2, load=2,
                                                                          hit=(0,))]
    d = r.route(req(prompt=1000), snaps)
    assert d.worker == 1
    assert "hit 0.800" in d.reason and "queue (3)" in d.reason and "kv" in d.reason
    # a lower-tier hit counts for less than the same hit in HBM
    snaps = [snap(0, load=2, hit=(0, 800)), snap(1, load=2, hit=(500, 0))]
    assert make_router("cache_aware", 2).route(req(prompt=1000), snaps).worker == 1
    snaps = [snap(0, load=2, hit=(0, 900)), snap(1, load=2, hit=(300, 0))]
    assert make_router("cache_aware", 2).route(req(prompt=1000), snaps).worker == 0


def test_cache_aware_load_guard_does_not_bury_a_hot_worker():
    r = make_router("cache_aware", 2)
    hot = [snap(0, load=40, hit=(1000,)), snap(1, load=2, hit=(0,))]
    d = r.route(req(prompt=1000), hot)
    assert d.worker == 1 and "1 of 2 within the load guard" in d.reason
    warm = [snap(0, load=5, hit=(1000,)), snap(1, load=2, hit=(0,))]
    assert r.route(req(prompt=1000), warm).worker == 0  # within the guard: the hit wins


def test_cache_aware_without_a_prefix_cache_balances_load_and_kv():
    r = make_router("cache_aware", 3)
    snaps = [snap(0, load=4, held=100), snap(1, load=1, held=900), snap(2, load=1, held=10)]
    assert r.route(req(), snaps).worker == 2


def _multi_turn(router: str, prefix=True, requests=240):
    return {
        "model": "Llama-3.1-8B",
        "hardware": {"accelerator": "H100-SXM", "count": 4, "memory_fraction": 0.5},
        "speculation": {"method": "eagle3", "k": 3, "acceptance": {"alpha": 0.7}},
        "scheduler": {"max_batch": 64, "token_budget": 4096},
        "router": {"policy": router},
        "kv_cache": {"prefix_cache": prefix},
        "workload": {"synthetic": {
            "arrival": {"process": "poisson", "rate": 3}, "requests": requests,
            "prompt_tokens": {"distribution": "lognormal", "mean": 2000, "sigma": 0.4,
                              "max": 8000},
            "output_tokens": {"distribution": "lognormal", "mean": 200, "sigma": 0.5,
                              "max": 800},
            "sessions": {"turns": {"distribution": "uniform", "low": 3, "high": 8},
                         "think_time_s": {"distribution": "exponential", "mean": 15},
                         "followup_tokens": {"distribution": "lognormal", "mean": 150,
                                             "sigma": 0.5}}}},
        "simulation": {"progress": False},
    }


def test_cache_aware_beats_round_robin_on_hit_rate_for_multi_turn_chat():
    rates, ttft = {}, {}
    for router in ("round_robin", "least_loaded", "cache_aware", "session_affinity"):
        m = run_scenario(_multi_turn(router)).metrics
        rates[router] = m["kv_cache"]["hit_rate"]["total"]
        ttft[router] = m["ttft_s"]["mean"]
    assert rates["cache_aware"] > rates["round_robin"] + 0.2, rates
    assert rates["session_affinity"] > rates["round_robin"] + 0.2, rates
    assert rates["cache_aware"] > rates["least_loaded"], rates
    assert ttft["cache_aware"] < ttft["round_robin"], ttft


def test_the_prefix_query_is_read_only():
    """Routers see a worker's cache through ``prefix_hit``; asking changes nothing (its
    tree, its eviction order, its counters)."""
    from specsim.simulator.cluster.engine import Simulation, build_trace, load_scenario

    sc, base, _ = load_scenario(_multi_turn("cache_aware", requests=60))
    sim = Simulation(sc, build_trace(sc, base, 131072), base)
    sim.run()
    w = sim.workers[0]
    c = w.kv.tree
    before = (c.snapshot(), c._clock, repr(c.stats), repr(w.kv.cache.stats), repr(w.kv.stats),
              [(e[0], e[2]) for e in c._heaps[0]])
    s = w.snapshot()
    assert s.prefix_hit is not None
    hits = [s.prefix_hit(rid) for rid in range(sim.table.n)]
    assert any(h[0] > 0 for h in hits)
    after = (c.snapshot(), c._clock, repr(c.stats), repr(w.kv.cache.stats), repr(w.kv.stats),
             [(e[0], e[2]) for e in c._heaps[0]])
    assert before == after


@pytest.mark.parametrize("router", ["session_affinity", "cache_aware"])
def test_new_routers_run_without_a_prefix_cache(router):
    m = run_scenario(_multi_turn(router, prefix=False, requests=60)).metrics
    assert m["requests_completed"] == 60
    assert "kv_cache" not in m  # kv_cache: {prefix_cache: false} is the cache off


# ---------------------------------------------------------------- what a router sees, says


def test_a_router_sees_max_tokens_not_the_output_length():
    """Nobody knows a request's output before it is generated: a router is given the most
    it may generate (the model's context less its prompt, vLLM's default max_tokens), and
    RequestFeatures has no output length to read."""
    import dataclasses

    from specsim.simulator.cluster.engine import Simulation, build_trace, load_scenario

    assert "output_tokens" not in {f.name for f in dataclasses.fields(RequestFeatures)}
    sc, base, _ = load_scenario(_multi_turn("least_loaded", prefix=False, requests=20))
    sim = Simulation(sc, build_trace(sc, base, 131072), base)
    t, context = sim.table, sim.fleet.model.max_context
    for rid in range(t.n):
        f = sim.features(rid)
        assert f.prompt_tokens == t.prompt[rid]
        assert f.max_tokens == context - t.prompt[rid]
    assert (t.output < context - t.prompt).all()  # so max_tokens is not the output


@pytest.mark.parametrize("router,says", [("round_robin", "next in turn"),
                                         ("least_loaded", "least loaded ("),
                                         ("cache_aware", "within the load guard"),
                                         ("session_affinity", "session ")])
def test_each_requests_route_reason_is_in_requests_csv(router, says):
    res = run_scenario(_multi_turn(router, prefix=False, requests=30))
    req = res.requests
    assert "route_reason" in req.columns and list(req.columns)[-1] == "route_reason"
    assert req["route_reason"].str.contains(says, regex=False).all(), req["route_reason"]


def test_a_single_worker_needs_no_router_and_says_so():
    sc = _multi_turn("least_loaded", prefix=False, requests=5)
    sc["hardware"]["count"] = 1
    req = run_scenario(sc).requests
    assert (req["route_reason"] == "the mixed pool's only worker").all()
