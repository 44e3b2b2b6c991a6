"""Compiled and pure-Python kernels give identical results (issue 13, part 1).

``simulation.compiled: true`` runs ``Kernel.plan`` / ``commit`` compiled with numba
(simulator/execution/kernel_jit.py), ``false`` the numpy reference (kernel.py). Every bundled
scenario, and a set of small scenarios for the drafters, trees, overheads and KV features the
bundled ones do not use, must give the same metrics.json (wall time aside), the same
requests frame and the same iteration log, bit for bit. Timings are not tested here
(benchmarks/sim_speed.py measures them).
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pandas as pd
import pytest

from specsim.errors import ScenarioError
from specsim.simulator.cluster.engine import run_scenario
from tests.conftest import REPO, make_trace, skip_without_shared_trace

SCENARIOS = sorted((REPO / "scenarios").glob("*.yaml"))
CAP = 150  # requests per bundled scenario: the whole file stays well under a minute


def _numba():
    pytest.importorskip("numba", reason="numba is not installed: the compiled kernel is off "
                        "(simulation.compiled: auto runs the pure-Python kernel)")


def _metrics_text(res) -> str:
    m = {k: v for k, v in res.metrics.items() if k != "wall_time_s"}
    return json.dumps(m, sort_keys=True, default=str)


def _same(pure, compiled) -> None:
    assert _metrics_text(pure) == _metrics_text(compiled)
    pd.testing.assert_frame_equal(pure.requests, compiled.requests, check_exact=True)
    pd.testing.assert_frame_equal(pure.iterations, compiled.iterations, check_exact=True)


def _both(scenario, **kw):
    over = kw.pop("overrides", {})
    runs = [run_scenario(scenario, overrides={**over, "simulation.compiled": mode,
                                              "simulation.progress": False}, **kw)
            for mode in (False, True)]
    return runs


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_compiled_and_pure_kernels_agree_on_every_bundled_scenario(path):
    _numba()
    skip_without_shared_trace(path)
    pure, compiled = _both(path, overrides={"workload.max_requests": CAP})
    assert pure.metrics["iterations"] > 0
    _same(pure, compiled)


def _sc(**spec):
    return {
        "model": "Llama-3.1-8B",
        "hardware": {"accelerator": "H100-SXM", "count": 1, "memory_fraction": 0.3},
        "speculation": {"method": "draft_model", "k": 4, "drafter": "Llama-3.2-1B",
                        "acceptance": {"alpha": 0.7, "per_request": {"concentration": 8}},
                        **spec},
        "scheduler": {"max_batch": 48, "token_budget": 2048},
        "workload": {},
    }


#: drafters and features the bundled scenarios leave out: long drafts (numpy's pairwise sums
#: over 8+ draft passes), trees, lookups that propose only on a match, what-if draft costs,
#: Medusa, parallel drafters, an overlapped draft phase, tensor parallel, no fast path
VARIANTS = {
    "draft_model_k10": _sc(k=10),
    "eagle3_tree": _sc(method="eagle3", drafter=None, k=4, tree={"widths": [4, 2, 2, 1]}),
    "eagle3_sglang_tree": _sc(method="eagle3", drafter=None, k=3,
                              tree={"topk": 4, "num_steps": 3, "num_draft_tokens": 10}),
    "ngram": _sc(method="ngram", drafter=None, ngram={"cpu_s_per_step": 2e-5,
                                                      "match_rate": 0.6}),
    "medusa": _sc(method="medusa", drafter=None, k=3),
    "pard": _sc(method="pard"),
    "dflash_k12": _sc(method="dflash", k=12),
    "ratio_what_if": _sc(drafter=None, draft_cost={"ratio": 0.1}),
    "fixed_what_if": _sc(drafter=None, draft_cost={"seconds_per_token": 3e-4}),
    "overlap_tp2": {**_sc(overlap_draft=True),
                    "hardware": {"accelerator": "H100-SXM", "count": 2, "tensor_parallel": 2,
                                 "memory_fraction": 0.3}},
    "suffix": _sc(method="suffix", drafter=None),
    "no_speculation": _sc(method="none", drafter=None, acceptance=None),
    "adaptive": _sc(policy="feedback"),
    # step 0 shaped by the compiled scheduler (Compiled.fused): whole prompts only, and a
    # budget the drafts must shrink to fit (chain and tree)
    "no_chunked_prefill": {**_sc(), "scheduler": {"max_batch": 48, "token_budget": 2048,
                                                  "chunked_prefill": False}},
    "shrink_to_budget": {**_sc(k=10), "scheduler": {"max_batch": 48, "token_budget": 96}},
    "tree_shrink_to_budget": {**_sc(method="eagle3", drafter=None, k=4,
                                    tree={"widths": [4, 2, 2, 1]}),
                              "scheduler": {"max_batch": 48, "token_budget": 64}},
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_compiled_and_pure_kernels_agree_on_drafters_and_features(name):
    _numba()
    sc = VARIANTS[name]
    sc = {**sc, "speculation": {k: v for k, v in sc["speculation"].items() if v is not None}}
    trace = make_trace(160, rate=30.0, prompt=(20, 2500), output=(1, 400), seed=5)
    pure, compiled = _both(sc, trace=trace)
    assert pure.metrics["requests_completed"] > 0
    _same(pure, compiled)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_bundled_drafters_and_dense_models_are_priced_compiled(name):
    """No silent fallback to the Python executor for the drafters specsim ships (only MoE
    models, whose expert count needs a fractional power, are priced in Python)."""
    _numba()
    from specsim.simulator.cluster.engine import Deployment, load_scenario
    from specsim.simulator.execution import kernel_jit

    sc = VARIANTS[name]
    sc = {**sc, "speculation": {k: v for k, v in sc["speculation"].items() if v is not None}}
    d = Deployment(*load_scenario(sc)[:2])
    assert kernel_jit._cost_params(d.target) is not None
    assert kernel_jit._drafter_kind(d.drafter) is not None


def test_compiled_and_pure_kernels_agree_step_by_step_and_under_kv_pressure():
    """No fast path (every iteration a segment of one step), and a KV pool small enough to
    preempt (the segments' KV checks end them early)."""
    _numba()
    trace = make_trace(200, rate=60.0, prompt=(50, 3000), output=(1, 900), seed=3)
    sc = {**_sc(), "hardware": {"accelerator": "H100-SXM", "count": 2,
                                "memory_fraction": 0.235},
          "scheduler": {"max_batch": 64, "token_budget": 2048, "max_queue": 40},
          "router": {"policy": "least_loaded"}}
    for fast in (False, True):
        pure, compiled = _both(sc, trace=trace, overrides={"simulation.fast_path": fast})
        if fast:
            assert pure.metrics["preemptions"] > 0, "meant to exercise preemption"
        _same(pure, compiled)


def test_the_fused_shape_and_plan_is_used_and_falls_back_when_kv_is_short(monkeypatch):
    """The compiled scheduler + kernel call (``Compiled.fused``) plans the segments of a
    static-k fcfs worker, and hands a step whose KV growth does not fit to the Python
    scheduler (which preempts); agreement with the pure kernel is tested above."""
    _numba()
    from specsim.simulator.execution import kernel_jit

    calls = {"fused": 0, "short": 0}
    real = kernel_jit._shape_plan_priced

    def counting(*args):
        out = real(*args)
        calls["fused" if out[0] else "short"] += 1
        return out

    monkeypatch.setattr(kernel_jit, "_shape_plan_priced", counting)
    trace = make_trace(200, rate=60.0, prompt=(50, 3000), output=(1, 900), seed=3)
    sc = {**_sc(), "hardware": {"accelerator": "H100-SXM", "count": 1,
                                "memory_fraction": 0.235},
          "scheduler": {"max_batch": 64, "token_budget": 2048}}
    res = run_scenario(sc, trace=trace, overrides={"simulation.compiled": True,
                                                   "simulation.progress": False})
    assert res.metrics["preemptions"] > 0
    assert calls["short"] > 0 and calls["fused"] > 10 * calls["short"]
    calls.update(fused=0, short=0)  # an adaptive policy is not static: the Python path
    run_scenario(_sc(policy="feedback"), trace=trace,
                 overrides={"simulation.compiled": True, "simulation.progress": False})
    assert calls == {"fused": 0, "short": 0}


def test_compiled_true_without_numba_is_a_one_line_error_and_auto_falls_back(monkeypatch):
    monkeypatch.setitem(sys.modules, "numba", None)  # find_spec("numba") -> None
    trace = make_trace(40, rate=20.0, seed=1)
    with pytest.raises(ScenarioError, match="simulation.compiled: true needs numba"):
        run_scenario(_sc(), trace=trace, overrides={"simulation.compiled": True})
    auto = run_scenario(_sc(), trace=trace, overrides={"simulation.compiled": "auto"})
    pure = run_scenario(_sc(), trace=trace, overrides={"simulation.compiled": False})
    _same(pure, auto)


def test_compiled_takes_auto_true_or_false_only():
    with pytest.raises(ScenarioError, match="simulation.compiled: expected auto, true or false"):
        run_scenario(_sc(), trace=make_trace(5), overrides={"simulation.compiled": "yes"})


def test_numpy_reductions_and_draws_are_reproduced_bit_for_bit():
    """The pieces the compiled kernel must match exactly: numpy's pairwise float sum (8
    accumulators, blocks of 128) and the keyed SplitMix64 uniforms."""
    _numba()
    from specsim.simulator import rng
    from specsim.simulator.execution import kernel_jit

    r = np.random.default_rng(0)
    for n in [*range(0, 300), 511, 1000, 4097]:
        a = r.standard_normal(n) * 10.0 ** r.uniform(-6, 6, n)
        assert kernel_jit._sum(a, 0, n) == a.sum(), n
        if n > 5:
            assert kernel_jit._sum(a, 5, n - 5) == a[5:].sum(), n
    keys = rng.request_keys(7, rng.STREAM_ACCEPT, np.arange(50))
    steps = r.integers(0, 10**6, 50)
    u = rng.uniform(keys, steps.astype(np.uint64))
    assert all(kernel_jit._uniform(keys[i], int(steps[i])) == u[i] for i in range(50))


def test_the_scipy_free_root_finder_is_scipys_brentq():
    """acceptance.brentq (scipy's brentq.c step for step, so a run need not import scipy)
    gives scipy's roots bit for bit on the problems specsim solves and on others."""
    from scipy.optimize import brentq as scipy_brentq

    from specsim.simulator.speculation import acceptance as acc

    r = np.random.default_rng(1)
    for k in range(1, 16):
        for tau in r.uniform(1.0, k + 1, 40):
            def f(a, k=k, tau=tau):
                return acc.expected_tokens_per_step(a, k) - tau
            assert (acc.brentq(f, 0.0, 1.0 - 1e-15, xtol=1e-14)
                    == scipy_brentq(f, 0.0, 1.0 - 1e-15, xtol=1e-14))
    for m in range(1, 10):
        powers = np.arange(1, m + 1)
        for s_prev, share in r.uniform(0.01, 1.0, (30, 2)):
            def g(a, s_prev=s_prev, gain=share * s_prev * m, powers=powers):
                return s_prev * np.sum(a ** powers) - gain
            assert acc.brentq(g, 0.0, 1.0, xtol=1e-14) == scipy_brentq(g, 0.0, 1.0, xtol=1e-14)
    for c in r.uniform(-3, 3, (200, 4)):
        def h(x, c=c):
            return c[0] + c[1] * x + c[2] * x ** 3 + np.sin(c[3] * x)
        try:
            want = scipy_brentq(h, -5.0, 5.0)
        except ValueError:
            with pytest.raises(ValueError):
                acc.brentq(h, -5.0, 5.0)
            continue
        assert acc.brentq(h, -5.0, 5.0) == want


def test_many_runs_lets_auto_compile_short_runs_for_sweeps_and_the_planner(monkeypatch):
    """A sweep's process running two runs or more, and the planner's probes, compile under
    ``auto`` whatever a run's length (numba's fixed cost is paid once); alone, a short run
    stays in numpy; the flag does not outlive its caller; the rows are the same bits."""
    _numba()
    from specsim.simulator.execution import kernel as kernel_mod
    from specsim.simulator.execution import kernel_jit
    from specsim.simulator.planning.sweep import run_sweep

    compiled_runs = []
    real = kernel_jit.Compiled.__init__

    def spy(self, kernel):
        compiled_runs.append(kernel.t.n)
        real(self, kernel)

    monkeypatch.setattr(kernel_jit.Compiled, "__init__", spy)
    sc = {**_sc(), "seed": 3}
    trace = make_trace(60, rate=20.0, prompt=(20, 400), output=(1, 60), seed=2)
    alone = run_scenario(sc, trace=trace, overrides={"simulation.progress": False})
    assert compiled_runs == []  # 60 requests: below kernel.AUTO_MIN_REQUESTS
    with kernel_mod.many_runs():
        many = run_scenario(sc, trace=trace, overrides={"simulation.progress": False})
    assert compiled_runs == [60] and not kernel_mod._many_runs
    _same(alone, many)
    compiled_runs.clear()
    small = {"workload.synthetic.requests": [40, 50]}
    table = run_sweep(REPO / "scenarios" / "chat.yaml", small, seeds=1, jobs=1)
    assert compiled_runs == [40, 50] and not kernel_mod._many_runs
    compiled_runs.clear()
    one = run_sweep(REPO / "scenarios" / "chat.yaml", {"workload.synthetic.requests": [40]})
    assert compiled_runs == []  # a single run: not worth numba's fixed cost
    assert one.iloc[0].drop("wall_time_s", errors="ignore").equals(
        table.iloc[0].drop("wall_time_s", errors="ignore"))
