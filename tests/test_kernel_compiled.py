"""The one iteration kernel (kernel_jit.py), compiled with numba or run as its pure-Python
source (issue 22 part 1).

Every run plans, prices and commits through the same functions: compiled
(``simulation.compiled: auto | true``) or their pure-Python versions (``false``, no numba,
a plug-in acceptance model). What is tested here is behaviour: a segment of many steps
equals the same iterations run step by step on every bundled scenario and on the drafters
and features the bundled ones leave out; the bundled drafters and dense models are priced
inside the kernel (no silent fallback); the compiled fcfs step 0 is used and hands a short
KV step back; the pieces that reproduce numpy's floating-point order do. That the pure
versions give the compiled bits is checked on a few variants here and on every bundled
scenario by ``benchmarks/fingerprints.py``. Timings are not tested here
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
    pytest.importorskip("numba", reason="numba is not installed: the kernel runs its "
                        "pure-Python versions (simulation.compiled: auto)")


def _metrics_text(res) -> str:
    m = {k: v for k, v in res.metrics.items() if k != "wall_time_s"}
    return json.dumps(m, sort_keys=True, default=str)


def _same(pure, compiled) -> None:
    assert _metrics_text(pure) == _metrics_text(compiled)
    pd.testing.assert_frame_equal(pure.requests, compiled.requests, check_exact=True)
    pd.testing.assert_frame_equal(pure.iterations, compiled.iterations, check_exact=True)


def _both(scenario, **kw):
    """The pure-Python and the compiled kernel, same run."""
    over = kw.pop("overrides", {})
    return [run_scenario(scenario, overrides={**over, "simulation.compiled": mode,
                                              "simulation.progress": False}, **kw)
            for mode in (False, True)]


def _step_by_step(scenario, **kw):
    """(segments, step by step) of the same run, compiled."""
    over = kw.pop("overrides", {})
    return [run_scenario(scenario, overrides={**over, "simulation.fast_path": fast,
                                              "simulation.progress": False}, **kw)
            for fast in (True, False)]


def _same_steps(fast, slow) -> None:
    """A segment equals its iterations run one at a time: tokens, steps and states exactly,
    times to 1e-9 s (the step-by-step clock adds step by step); invariant 3."""
    assert fast.metrics["iterations"] == slow.metrics["iterations"]
    a, b = fast.requests, slow.requests
    for col in a.columns:
        if pd.api.types.is_float_dtype(a[col]):
            np.testing.assert_allclose(b[col], a[col], rtol=0, atol=1e-9, equal_nan=True,
                                       err_msg=col)
        else:
            assert a[col].equals(b[col]), col


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_segments_equal_step_by_step_on_every_bundled_scenario(path):
    skip_without_shared_trace(path)
    fast, slow = _step_by_step(path, overrides={"workload.max_requests": CAP})
    assert fast.metrics["iterations"] > 0
    _same_steps(fast, slow)


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


def _variant(name):
    sc = VARIANTS[name]
    return {**sc, "speculation": {k: v for k, v in sc["speculation"].items() if v is not None}}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_segments_equal_step_by_step_on_drafters_and_features(name):
    trace = make_trace(160, rate=30.0, prompt=(20, 2500), output=(1, 400), seed=5)
    fast, slow = _step_by_step(_variant(name), trace=trace)
    assert fast.metrics["requests_completed"] > 0
    _same_steps(fast, slow)


@pytest.mark.parametrize("name", ["eagle3_tree", "ngram", "overlap_tp2", "shrink_to_budget"])
def test_the_pure_python_kernel_gives_the_compiled_bits(name):
    """The same functions run as Python source (numba's py_func): the same bits."""
    _numba()
    trace = make_trace(60, rate=30.0, prompt=(20, 2500), output=(1, 200), seed=5)
    pure, compiled = _both(_variant(name), trace=trace)
    assert pure.metrics["requests_completed"] > 0
    _same(pure, compiled)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_bundled_drafters_and_dense_models_are_priced_compiled(name):
    """Each drafter specsim ships is data (a kind and its parameters) priced inside the
    kernel: no silent fallback to the Python pricing hook (only MoE models, whose expert
    count needs a fractional power, and drafters per class are priced in Python)."""
    from specsim.simulator.cluster.engine import Deployment, load_scenario
    from specsim.simulator.execution import kernel_jit

    d = Deployment(*load_scenario(_variant(name))[:2])
    assert kernel_jit.cost_params(d.target) is not None
    assert kernel_jit.drafter_data(d.drafter) is not None


def test_segments_equal_step_by_step_under_kv_pressure():
    """A KV pool small enough to preempt (the segments' KV checks end them early), a queue
    limit, two workers behind a load-reading router."""
    trace = make_trace(200, rate=60.0, prompt=(50, 3000), output=(1, 900), seed=3)
    sc = {**_sc(), "hardware": {"accelerator": "H100-SXM", "count": 2,
                                "memory_fraction": 0.235},
          "scheduler": {"max_batch": 64, "token_budget": 2048, "max_queue": 40},
          "router": {"policy": "least_loaded"}}
    fast, slow = _step_by_step(sc, trace=trace)
    assert fast.metrics["preemptions"] > 0, "meant to exercise preemption"
    _same_steps(fast, slow)


def test_the_fused_shape_and_plan_is_used_and_falls_back_when_kv_is_short(monkeypatch):
    """The kernel's fcfs step 0 + plan in one call (``Kernel.fused``) plans the segments of
    a static-k fcfs worker, and hands a step whose KV growth does not fit to the Python
    scheduler (which preempts); segments against step by step are tested above."""
    _numba()
    from specsim.simulator.cluster import solo
    from specsim.simulator.execution import kernel_jit

    # the SimPy worker's calls (the solo loop makes the same ones inside compiled code:
    # tests/test_solo_loop.py, "preemption")
    monkeypatch.setattr(solo, "ENABLED", False)
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


def test_auto_compiles_every_run_however_short(monkeypatch):
    """``auto`` compiles a run of any length (numba's cache loads in a fraction of a second,
    the pure-Python kernel is several times slower); ``false`` runs the pure-Python
    versions of the same functions."""
    _numba()
    from specsim.simulator.execution import kernel as kernel_mod

    made = []
    real = kernel_mod.Kernel.__init__

    def spy(self, *a, **kw):
        real(self, *a, **kw)
        made.append(self.compiled)

    monkeypatch.setattr(kernel_mod.Kernel, "__init__", spy)
    trace = make_trace(10, rate=20.0, prompt=(20, 400), output=(1, 60), seed=2)
    run_scenario(_sc(), trace=trace, overrides={"simulation.progress": False})
    assert made == [True]
    run_scenario(_sc(), trace=trace, overrides={"simulation.progress": False,
                                                "simulation.compiled": False})
    assert made == [True, False]


def test_numba_that_does_not_load_runs_the_python_source_with_a_note(monkeypatch):
    """numba installed but failing to load (its LLVM library under a small address-space
    limit raises OSError at import): ``auto`` runs the same functions as Python source and
    says so; ``true`` is a one-line error."""
    from specsim.simulator.execution import numpy_order

    monkeypatch.setattr(numpy_order, "numba", None)
    monkeypatch.setattr(numpy_order, "WHY_NOT", "OSError: cannot load libllvmlite.so")
    trace = make_trace(20, rate=20.0, seed=1)
    with pytest.raises(ScenarioError, match="needs numba, which did not load"):
        run_scenario(_sc(), trace=trace, overrides={"simulation.compiled": True})
    auto = run_scenario(_sc(), trace=trace, overrides={"simulation.progress": False})
    said = [n for n in auto.notes if "numba did not load" in n]
    assert len(said) == 1 and "libllvmlite" in said[0]
    assert auto.metrics["requests_completed"] == 20
