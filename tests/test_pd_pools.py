"""Several decode pools behind one prefill pool (issue 22 part 2): ``disaggregation.decode_pools``.

Every decode pool serves, no pool leaks a KV block, the hand-off sends a request only to a
pool that can hold its KV, identical pools split the load evenly, one pool given as a list
is the ``decode:`` run bit for bit, and the planner's replica counts every pool's devices.
"""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest

from specsim.errors import ScenarioError
from specsim.simulator.cluster import requests as rq
from specsim.simulator.cluster.build import unit_devices
from specsim.simulator.cluster.engine import (
    USER_ERRORS,
    Simulation,
    load_scenario,
    run_scenario,
)
from tests.conftest import REPO, make_trace

BUNDLED = REPO / "scenarios" / "pd_two_decode_pools.yaml"


def scenario(pools: list[dict], router: str = "least_loaded") -> dict:
    return {
        "model": "Llama-3.1-8B",
        "hardware": {"accelerator": "H100-SXM", "tensor_parallel": 1},
        "speculation": {"method": "draft_model", "k": 4, "drafter": "Llama-3.2-1B",
                        "acceptance": {"alpha": 0.75}},
        "scheduler": {"max_batch": 64, "token_budget": 4096},
        "router": {"policy": "least_loaded"},
        "workload": {},
        "simulation": {"progress": False},
        "disaggregation": {"prefill": {"count": 2}, "decode_pools": pools,
                           "decode_router": router,
                           "link": {"bandwidth_gb_s": 50, "latency_s": 1e-5}},
    }


def run(sc: dict, trace: pd.DataFrame):
    """A run, checked (every invariant, PD's included), and its Simulation's fleet."""
    sc_v, base, _ = load_scenario(sc)
    sim = Simulation(sc_v, trace, base)
    sim.run()
    sim.check_invariants()
    return sim


def pool_of(sim, wid: np.ndarray) -> np.ndarray:
    """The name of the pool each worker id belongs to."""
    names = np.array([p.name for p in sim.fleet.pools for _ in p.workers], dtype=object)
    return names[wid]


def test_both_decode_pools_serve_and_no_pool_leaks_kv():
    """The bundled scenario (first 300 requests): each decode pool decodes requests, every
    pool is reported on its own, and at the end no worker of any pool holds a KV block."""
    res = run_scenario(BUNDLED, overrides=["workload.synthetic.requests=300",
                                           "simulation.progress=false"])
    m = res.metrics
    assert m["requests_completed"] == 300 and m["requests_rejected"] == 0
    pools = m["disaggregation"]["pools"]
    assert list(pools) == ["prefill", "a100", "h100"]
    assert [pools[n]["accelerator"] for n in pools] == ["H100-SXM", "A100-SXM-80GB", "H100-SXM"]
    assert m["fleet"]["devices"] == 6 == sum(p["devices"] for p in pools.values())
    req = res.requests
    for name in ("a100", "h100"):
        ids = pools[name]["worker_ids"]
        served = req[req["worker"].isin(ids)]
        assert len(served) > 30, name
        # the reason names the pool the router chose
        assert served["pd_decode_route_reason"].str.startswith(f"{name}: ").all()
        assert pools[name]["busy_fraction"] > 0
    assert m["kv_blocks_used_at_end"] == 0


def test_every_pool_returns_its_kv_blocks():
    """KV conservation per worker of every pool (invariant 6), under load on both."""
    sc = scenario([{"name": "one", "count": 2}, {"name": "two", "count": 2}])
    sim = run(sc, make_trace(60, rate=40.0, prompt=(200, 3000), output=(20, 300), seed=3))
    for pool in sim.fleet.pools:
        for w in pool.workers:
            assert w.kv.held == 0 and w.kv.used == 0, (pool.name, w.wid)
            assert w.kv.peak > 0, (pool.name, w.wid)  # every worker took some KV


def test_handoff_respects_each_pools_kv_capacity():
    """A decode pool with little KV (memory_fraction) gets only requests it can hold; the
    longer ones go to the other pool; a request neither can hold is rejected at arrival,
    though the prefill pool could hold it."""
    sc = scenario([{"name": "small", "count": 2, "memory_fraction": 0.26},
                   {"name": "big", "count": 2, "memory_fraction": 0.35}])
    sc_v, base, _ = load_scenario(sc)
    fleet = Simulation(sc_v, make_trace(1), base).fleet
    cap = {p.name: (p.deployment.kv_blocks - 1) * p.deployment.block_size for p in fleet.pools}
    # the premise: small holds ~14k tokens, big ~58k, the prefill pool and the context more
    assert cap["small"] + 8_000 < cap["big"] < min(cap["prefill"], fleet.model.max_context) - 500
    r = np.random.default_rng(5)
    n = 60
    tr = make_trace(n, rate=20.0, output=(20, 200), seed=5)
    tr["prompt_tokens"] = r.integers(500, cap["small"] + 8_000, n)
    tr.loc[n - 1, "prompt_tokens"] = cap["big"] + 100  # fits no decode pool
    sim = run(sc, tr)
    t = sim.table
    decoded_on = pool_of(sim, t.worker)
    fits_small = t.prompt + t.output <= cap["small"]
    done = t.status == rq.DONE
    assert done[:-1].all()
    assert (decoded_on[done & ~fits_small] == "big").all()
    assert (~fits_small[:-1]).sum() >= 5 and (decoded_on[done] == "small").sum() >= 5
    assert t.status[-1] == rq.REJECTED and sim.rejected_reasons == {"exceeds KV capacity": 1}


def test_identical_decode_pools_split_the_load_evenly():
    """Two pools of the same devices behind least_loaded: each decodes about half the
    requests (within 10 %), and the busy time splits the same way."""
    sc = scenario([{"name": "east", "count": 2}, {"name": "west", "count": 2}])
    n = 400
    sim = run(sc, make_trace(n, rate=60.0, prompt=(200, 2000), output=(50, 400), seed=7))
    on = pool_of(sim, sim.table.worker)
    east, west = int((on == "east").sum()), int((on == "west").sum())
    assert east + west == n
    assert abs(east - west) <= 0.1 * n / 2, (east, west)
    busy = {p.name: sum(w.ledger.busy_s for w in p.workers) for p in sim.fleet.pools}
    assert busy["east"] == pytest.approx(busy["west"], rel=0.15)


def test_one_pool_as_a_list_is_the_decode_run_bit_for_bit():
    """``decode_pools: [{name: decode, ...}]`` is ``decode: {...}``: the same metrics,
    requests and iterations (so the list form changes nothing for one decode pool)."""
    base = scenario([{"name": "decode", "count": 2}])
    single = copy.deepcopy(base)
    single["disaggregation"].pop("decode_pools")
    single["disaggregation"]["decode"] = {"count": 2}
    tr = make_trace(40, rate=30.0, prompt=(200, 2000), output=(20, 200), seed=11)
    a, b = run_scenario(base, trace=tr), run_scenario(single, trace=tr)
    wall = ("wall_time_s",)
    assert {k: v for k, v in a.metrics.items() if k not in wall} == \
        {k: v for k, v in b.metrics.items() if k not in wall}
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.iterations, b.iterations)


def test_the_fast_path_equals_steps_one_by_one_across_pools():
    """Invariant 3 over two decode pools: segments of many iterations give the tokens,
    steps and acceptances of iterations run one at a time, and the same times."""
    sc = scenario([{"name": "one", "count": 1}, {"name": "two", "count": 2}])
    tr = make_trace(50, rate=30.0, prompt=(200, 2000), output=(20, 200), seed=2)
    slow = copy.deepcopy(sc)
    slow["simulation"]["fast_path"] = False
    a, b = run(sc, tr).table, run(slow, tr).table
    for col in ("generated", "accepted", "bonus", "steps", "worker"):
        np.testing.assert_array_equal(getattr(a, col), getattr(b, col), err_msg=col)
    np.testing.assert_allclose(a.finish, b.finish, rtol=0, atol=1e-9)


def test_planner_replica_counts_every_pool():
    """The planner's replica (``build.unit_devices``) is every pool's devices added."""
    sc, _, _ = load_scenario(BUNDLED)
    assert unit_devices(sc) == 6
    sc, _, _ = load_scenario(scenario([{"count": 1}, {"count": 2}, {"count": 3}]))
    assert unit_devices(sc) == 2 + 1 + 2 + 3


@pytest.mark.parametrize("change,message", [
    ({"decode_router": "round_robin"},
     "disaggregation.decode_router: round_robin does not read the workers' load"),
    ({"decode_pools": [{"name": "x", "count": 1}, {"name": "x", "count": 1}]},
     "disaggregation.decode_pools.1.name: expected a unique name"),
    ({"decode_pools": [{"count": 1, "accelerator": "H900"}]},
     "disaggregation.decode_pools.0.accelerator"),
    ({"decode": {"count": 1}}, "disaggregation.decode_pools: give decode"),
])
def test_bad_decode_pools_are_one_line_errors(change, message):
    sc = scenario([{"name": "a", "count": 1}, {"name": "b", "count": 1}])
    sc["disaggregation"].update(change)
    with pytest.raises(USER_ERRORS) as err:
        run_scenario(sc, trace=make_trace(2))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_hardware_count_must_be_every_pools_devices():
    sc = scenario([{"name": "a", "count": 1}, {"name": "b", "count": 2}])
    sc["hardware"]["count"] = 4
    with pytest.raises(ScenarioError, match=r"hardware.count: 4 devices, but the "
                                            r"disaggregation pools have 2 \+ 1 \+ 2 = 5"):
        run_scenario(sc, trace=make_trace(2))
