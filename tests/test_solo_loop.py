"""The compiled solo loop (``cluster/solo.py``, ``execution/solo_jit.py``) is the SimPy run
of a one-worker fleet, bit for bit: the same metrics.json, requests and iteration log
through ties, a horizon, the overload watch's stop, preemption, a full queue, chunked
prefill, rejections, and both the compiled and the pure-Python kernel."""

from __future__ import annotations

import copy
import hashlib
import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specsim.simulator.cluster import solo
from specsim.simulator.cluster.engine import run_scenario
from specsim.simulator.cluster.simulation import Simulation

BASE = {"model": "Llama-3.1-8B", "hardware": {"accelerator": "H100-SXM", "count": 1},
        "speculation": {"method": "eagle3", "k": 4,
                        "acceptance": {"profile": "qwen3-8b-eagle3"}},
        "workload": {}, "slo": {"ttft_s": 1.0, "tpot_s": 0.05},
        "simulation": {"progress": False, "record_iterations": True}}


def _trace(n: int, qps: float, seed: int = 0, grid: float | None = None, big: int = 0,
           plen=(100, 2000), olen=(20, 400)) -> pd.DataFrame:
    r = np.random.default_rng(seed)
    arr = np.cumsum(r.exponential(1 / qps, n))
    if grid:
        arr = np.floor(arr / grid) * grid
    p = r.integers(*plen, n)
    if big:
        p[r.choice(n, big, replace=False)] = 200_000
    return pd.DataFrame({
        "arrival_s": arr, "request_id": np.arange(n), "session_id": -1, "turn": 0,
        "prompt_tokens": p, "output_tokens": r.integers(*olen, n), "workload_class": "chat",
        "prefix_block_ids": [()] * n, "temperature": 0.0, "slo_tier": "standard"})


def _scenario(**keys) -> dict:
    s = copy.deepcopy(BASE)
    for path, v in keys.items():
        d = s
        *head, last = path.split("__")
        for k in head:
            d = d.setdefault(k, {})
        d[last] = v
    return s


def _fingerprint(r) -> tuple[str, str, str]:
    m = dict(r.metrics)
    m.pop("wall_time_s", None)

    def h(x: str) -> str:
        return hashlib.sha256(x.encode()).hexdigest()

    return (h(json.dumps(m, sort_keys=True, default=str)), h(r.requests.to_csv()),
            h(r.iterations.to_csv()))


def _both(monkeypatch, scenario: dict, trace: pd.DataFrame):
    """The scenario run by the solo loop, then by SimPy; the first must have been the solo
    loop's (else the comparison would be SimPy against itself)."""
    runs, went = [], []
    go = solo.SoloRun.go
    monkeypatch.setattr(solo.SoloRun, "go", lambda self: (went.append(1), go(self))[1])
    for on in (True, False):
        monkeypatch.setattr(solo, "ENABLED", on)
        runs.append(run_scenario(copy.deepcopy(scenario), trace=trace.copy()))
        assert len(went) == 1, "the solo loop ran the first run only"
    return runs


CASES = {
    "plain": (_scenario(), _trace(300, 8)),
    "no speculation": (_scenario(speculation={"method": "none"}), _trace(300, 8)),
    "arrivals on a 0.5 s grid (ties)": (_scenario(), _trace(300, 8, grid=0.5)),
    "all at once": (_scenario(), _trace(150, 1e9, grid=1.0)),
    "horizon": (_scenario(simulation__horizon_s=15.0), _trace(300, 8)),
    # everything done long before it: SimPy's clock still ends at the horizon (found by
    # a random search: the solo loop ended its clock at the last event)
    "horizon after the last finish": (_scenario(simulation__horizon_s=500.0), _trace(60, 20)),
    "overload stop": (_scenario(simulation__overload={"window_s": 1, "windows": 2,
                                                       "max_wait_s": 0.5},
                                scheduler={"max_batch": 2}), _trace(2000, 50)),
    "preemption": (_scenario(scheduler={"max_batch": 256, "token_budget": 8192},
                             hardware={"accelerator": "H100-SXM", "count": 1,
                                       "memory_fraction": 0.3}),
                   _trace(300, 30, plen=(1000, 6000), olen=(200, 2000))),
    "a full batch blocks the queue": (_scenario(scheduler={"max_batch": 4}), _trace(200, 20)),
    "queue full": (_scenario(scheduler={"max_batch": 8, "max_queue": 5}), _trace(200, 40)),
    "chunked prefill, small budget": (_scenario(scheduler={"token_budget": 256,
                                                           "chunked_prefill": True}),
                                      _trace(200, 10)),
    "too long for the context": (_scenario(), _trace(200, 8, big=20)),
    "n-gram lookup": (_scenario(speculation={"method": "ngram", "k": 3,
                                             "acceptance": {"alpha": 0.6}}), _trace(200, 8)),
    "one step at a time": (_scenario(simulation__fast_path=False), _trace(120, 8)),
    "pure Python kernel": (_scenario(simulation__compiled=False), _trace(80, 8)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_same_bits_as_the_simpy_run(monkeypatch, name):
    scenario, trace = CASES[name]
    a, b = _both(monkeypatch, scenario, trace)
    assert _fingerprint(a) == _fingerprint(b)
    assert a.metrics["iterations"] > 0


def test_the_stress_cases_exercise_what_they_name(monkeypatch):
    """Each case reaches the branch it is there for (else the comparison proves little)."""
    monkeypatch.setattr(solo, "ENABLED", True)
    r = run_scenario(copy.deepcopy(CASES["overload stop"][0]),
                     trace=CASES["overload stop"][1].copy())
    assert r.metrics["overload"] is not None
    r = run_scenario(copy.deepcopy(CASES["preemption"][0]), trace=CASES["preemption"][1].copy())
    assert r.metrics["preemptions"] > 0
    r = run_scenario(copy.deepcopy(CASES["queue full"][0]), trace=CASES["queue full"][1].copy())
    assert r.metrics["requests_rejected"] > 0


def _sim(scenario: dict, trace: pd.DataFrame) -> Simulation:
    from pathlib import Path

    from specsim.simulator.api import load_scenario

    sc, base, _ = load_scenario(scenario, [], None)
    return Simulation(sc, trace, Path(base) if base else Path("."))


@pytest.mark.parametrize("keys,solo_runs", [
    ({}, True),
    ({"hardware": {"accelerator": "H100-SXM", "count": 2}}, False),  # two workers: a router
    ({"speculation": {"method": "eagle3", "policy": "feedback",
                      "acceptance": {"profile": "qwen3-8b-eagle3"}}}, False),
    ({"kv_cache": {"prefix_cache": True}}, False),
])
def test_where_it_runs(keys, solo_runs):
    s = copy.deepcopy(BASE)
    s.update(keys)
    sim = _sim(s, _trace(20, 5))
    assert (sim.solo is not None) is solo_runs


def test_room_progress_and_streaming_give_the_same_bits(monkeypatch, tmp_path):
    """The loop's returns to Python (a small ITL buffer drained many times, the iteration
    log streamed in small chunks, progress every 256 arrivals) change nothing."""
    from specsim.simulator.metrics import iteration_log

    scenario, trace = _scenario(), _trace(600, 12)
    monkeypatch.setattr(solo, "ITL_BUFFER", 4096)
    seen: list[tuple[float, int]] = []
    runs = []
    for on in (True, False):
        monkeypatch.setattr(solo, "ENABLED", on)
        monkeypatch.setattr(iteration_log, "CHUNK_ROWS", 300)
        folder = tmp_path / f"log{on}"
        folder.mkdir()
        r = run_scenario(copy.deepcopy(scenario), trace=trace.copy(), stream_to=folder,
                         progress=(lambda t, n: seen.append((t, n))) if on else None)
        runs.append((r, iteration_log.read_log(folder)))
    (a, la), (b, lb) = runs
    m_a, m_b = dict(a.metrics), dict(b.metrics)
    m_a.pop("wall_time_s"), m_b.pop("wall_time_s")
    assert m_a == m_b
    assert a.requests.equals(b.requests)
    assert la.equals(lb) and len(la) > 3 * 300
    assert len(seen) >= 2 and seen[-1][1] <= 600
    assert all(t1 <= t2 for (t1, _), (t2, _) in zip(seen, seen[1:], strict=False))


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(max_batch=st.sampled_from([2, 8, 256]), budget=st.sampled_from([128, 512, 8192]),
       chunked=st.booleans(),
       spec=st.sampled_from([{"method": "none"},
                             {"method": "eagle3", "k": 1,
                              "acceptance": {"profile": "qwen3-8b-eagle3"}},
                             {"method": "eagle3", "k": 5,
                              "acceptance": {"profile": "qwen3-8b-eagle3"}},
                             {"method": "ngram", "k": 3, "acceptance": {"alpha": 0.6}}]),
       memory=st.sampled_from([0.9, 0.3]), rate=st.sampled_from([3.0, 30.0, 300.0]),
       grid=st.sampled_from([None, 0.25]), horizon=st.sampled_from([None, 4.0, 60.0]),
       max_queue=st.sampled_from([None, 4]), fast=st.booleans(), seed=st.integers(0, 3))
def test_random_single_worker_scenarios_give_the_simpy_bits(
        monkeypatch, max_batch, budget, chunked, spec, memory, rate, grid, horizon, max_queue,
        fast, seed):
    """A random search over the axes the solo loop handles differently (batch and budget
    limits, chunking, KV pressure, speculation, arrival ties, a horizon, a full queue, the
    overload watch, one step at a time): the solo loop and SimPy agree bit for bit."""
    sc = _scenario(
        speculation=spec,
        hardware={"accelerator": "H100-SXM", "count": 1, "memory_fraction": memory},
        scheduler={"max_batch": max_batch, "token_budget": budget, "chunked_prefill": chunked,
                   "max_queue": max_queue},
        simulation={"progress": False, "record_iterations": True, "fast_path": fast,
                    "horizon_s": horizon,
                    "overload": {"window_s": 0.5, "windows": 2, "max_wait_s": 0.5}})
    trace = _trace(120, rate, seed=seed, grid=grid, plen=(50, 4000), olen=(1, 600))
    a, b = _both(monkeypatch, sc, trace)
    assert _fingerprint(a) == _fingerprint(b)
