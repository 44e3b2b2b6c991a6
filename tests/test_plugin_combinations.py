"""Plug-ins combined: every path gives the same run.

Each case crosses several policy axes of a bundled scenario (batch limits, chunking, KV
pressure and preemption order, routers over two workers, the radix cache with a host tier
and swap, PD pools, adaptive speculation, closed-loop clients with and without think time)
and runs it three ways: the numpy kernel multi-step, the compiled kernel, and step by step.
Compiled and numpy must agree bit for bit; step by step must give the same tokens, steps
and states, and times within 1e-9 s (its clock adds step by step). run_scenario checks the
invariants (KV blocks in every tier, tokens, request states) after each run. The cases
come from a random search over these axes; the first failed before the worker judged "the
step that began just now" by its resume time (a closed-loop request sent at a finish
joined that step when SimPy's clock and the kernel's start time were an ulp apart).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from specsim.simulator.cluster.engine import run_scenario
from tests.conftest import REPO

pytest.importorskip("numba")

COMMON = {"simulation.progress": False, "workload.synthetic.requests": 100}

CASES = {
    "closed-loop-no-think-moe": ("moe_mtp_eagle3_dflash", {"scheduler.token_budget": 1024}),
    "closed-loop-no-think-two-workers": ("chat", {
        "workload.closed_loop": {"clients": 32}, "hardware.count": 2,
        "router.policy": "least_loaded", "scheduler.max_batch": 4}),
    "closed-loop-think-prefix-swap": ("chat", {  # ~190 swap preemptions
        "workload.closed_loop": {"clients": 16, "think_time_s": 0.01},
        "kv_cache.prefix_cache": True, "kv_cache.tiers": [{"name": "host_dram"}],
        "kv_cache.preemption": "swap", "scheduler.kv_blocks": 400}),
    "kv-pressure-least-progress-cache-aware": ("chat", {
        "scheduler.kv_blocks": 400, "scheduler.preemption": "least_progress",
        "hardware.count": 2, "router.policy": "cache_aware",
        "workload.synthetic.arrival.rate": 50.0}),
    "whole-prompts-small-budget-goodput": ("code_completion", {
        "scheduler.chunked_prefill": False, "scheduler.token_budget": 8192,
        "scheduler.max_batch": 32, "speculation.policy": "goodput"}),
    "pd-prefix-cache-small-budget": ("pd_disaggregated", {
        "kv_cache.prefix_cache": True, "scheduler.token_budget": 256,
        "scheduler.max_batch": 32}),
    "pd-mixed-session-affinity-kv-pressure": ("pd_mixed_same_devices", {
        "router.policy": "session_affinity", "scheduler.kv_blocks": 1500,
        "scheduler.preemption": "least_progress"}),
    "per-class-drafters-round-robin": ("drafter_per_class", {
        "hardware.count": 2, "router.policy": "round_robin", "scheduler.token_budget": 256}),
    "load-aware-high-rate": ("chat", {
        "speculation.policy": "load_aware", "workload.synthetic.arrival.rate": 500.0,
        "scheduler.max_batch": 32}),
}


def _run(base: str, overrides: dict, **extra):
    res = run_scenario(REPO / "scenarios" / f"{base}.yaml",
                       overrides={**COMMON, **overrides, **extra})
    m = dict(res.metrics)
    m.pop("wall_time_s", None)
    return m, res.requests


@pytest.mark.parametrize("name", list(CASES))
def test_numpy_compiled_and_step_by_step_give_the_same_run(name):
    base, overrides = CASES[name]
    m_np, r_np = _run(base, overrides, **{"simulation.compiled": False})
    m_jit, r_jit = _run(base, overrides, **{"simulation.compiled": True})
    m_step, r_step = _run(base, overrides, **{"simulation.compiled": False,
                                               "simulation.fast_path": False})
    assert m_jit == m_np
    pd.testing.assert_frame_equal(r_jit, r_np)
    assert m_step["iterations"] == m_np["iterations"]
    for col in r_np.columns:
        a, b = r_np[col], r_step[col]
        if pd.api.types.is_float_dtype(a):
            np.testing.assert_allclose(b, a, rtol=0, atol=1e-9, equal_nan=True, err_msg=col)
        else:
            assert a.equals(b), col
    assert m_np["requests_completed"] + m_np["requests_rejected"] <= m_np["requests_arrived"]
