"""Segments through multi-chunk prefills (issue 13, part 2): a prompt longer than the token
budget leaves room step by step; the kernel plans those steps in one segment, up to the
step where the first still-prefilling row completes, and the result is the step-by-step
one (requests, first tokens, ITLs, iterations, KV, the iteration log)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from specsim.simulator.cluster.engine import run_scenario
from specsim.simulator.execution import kernel as kernel_mod
from tests.conftest import make_trace
from tests.test_kernel_compiled import _same as same_bits


def scenario(**spec):
    return {
        "model": "Llama-3.1-8B",
        "hardware": {"accelerator": "H100-SXM", "count": 1, "memory_fraction": 0.9},
        "speculation": {"method": "draft_model", "k": 4, "drafter": "Llama-3.2-1B",
                        "acceptance": {"alpha": 0.7, "per_request": {"concentration": 8}},
                        **spec},
        "scheduler": {"max_batch": 64, "token_budget": 256, "chunked_prefill": True},
        "router": {"policy": "round_robin"},
        "workload": {},
        "simulation": {"progress": False},
    }


def _chunked_plans(monkeypatch) -> list[int]:
    """Counts segments planned through chunks (more than one step, a prefill going on), in
    the SimPy worker loop (the compiled solo loop plans the same segments without
    ``_segment``; tests/test_solo_loop.py checks it gives the same bits)."""
    from specsim.simulator.cluster import solo

    monkeypatch.setattr(solo, "ENABLED", False)
    seen: list[int] = []
    make = kernel_mod._segment  # every plan's Segment (Kernel.plan and Kernel.fused)

    def spy(*args):
        seg = make(*args)
        if seg.pre_steps is not None and seg.m > 1:
            seen.append(seg.m)
        return seg

    monkeypatch.setattr(kernel_mod, "_segment", spy)
    return seen


def _same(fast, slow):
    a, b = fast.requests, slow.requests
    for col in ("output_tokens", "accepted_tokens", "bonus_tokens", "drafted_tokens",
                "steps", "worker", "status", "preemptions"):
        assert (a[col] == b[col]).all(), col
    for col in ("first_token_s", "finish_s"):
        np.testing.assert_allclose(a[col], b[col], rtol=1e-9)
    for key in ("iterations", "preemptions", "output_tokens", "drafted_tokens",
                "accepted_tokens", "requests_completed", "kv_blocks_used_at_end"):
        assert fast.metrics[key] == slow.metrics[key], key
    for key in ("itl_s", "ttft_s", "tpot_s"):
        for stat in ("mean", "p50", "p99"):
            assert fast.metrics[key][stat] == pytest.approx(slow.metrics[key][stat],
                                                            rel=1e-9), (key, stat)
    fi, si = fast.iterations, slow.iterations
    assert len(fi) == len(si)
    for col in fi.columns:
        if pd.api.types.is_numeric_dtype(fi[col]):
            np.testing.assert_allclose(fi[col].to_numpy(np.float64),
                                       si[col].to_numpy(np.float64), rtol=1e-9, atol=1e-12,
                                       err_msg=col)


@pytest.mark.parametrize("spec", [
    {},  # a draft model: it prefills the prompt chunks too
    {"method": "ngram", "drafter": None, "ngram": {"match_rate": 0.5}},
    {"method": "none", "drafter": None},
], ids=["draft_model", "ngram", "off"])
def test_segments_through_chunks_give_the_step_by_step_result(spec, monkeypatch):
    seen = _chunked_plans(monkeypatch)
    tr = make_trace(120, rate=4.0, prompt=(50, 1500), output=(1, 300), seed=11)
    sc = scenario(**spec)
    fast = run_scenario(sc, trace=tr, overrides={"simulation.fast_path": True})
    assert len(seen) > 20 and max(seen) > 2, "the chunked-prefill path never ran"
    slow = run_scenario(sc, trace=tr, overrides={"simulation.fast_path": False})
    _same(fast, slow)


def test_chunks_under_kv_pressure_with_recomputed_prefills(monkeypatch):
    """Preempted rows recompute their prompt + output in chunks; the completing chunk then
    delivers a token whose ITL runs from the row's last delivery before preemption."""
    seen = _chunked_plans(monkeypatch)
    tr = make_trace(200, rate=30.0, prompt=(200, 2500), output=(50, 700), seed=4)
    sc = scenario()
    sc["hardware"]["memory_fraction"] = 0.235
    sc["scheduler"]["max_batch"] = 32
    fast = run_scenario(sc, trace=tr, overrides={"simulation.fast_path": True})
    assert fast.metrics["preemptions"] > 0, "meant to exercise preemption"
    assert seen
    slow = run_scenario(sc, trace=tr, overrides={"simulation.fast_path": False})
    _same(fast, slow)


def test_chunked_segments_cut_the_plans(monkeypatch):
    """The point of it: far fewer plans than iterations when prompts span many chunks."""
    plans = []
    make = kernel_mod._segment  # every plan's Segment (Kernel.plan and Kernel.fused)
    monkeypatch.setattr(kernel_mod, "_segment", lambda *a: plans.append(1) or make(*a))
    tr = make_trace(40, gap=2.0, prompt=3000, output=20, seed=1)
    res = run_scenario(scenario(), trace=tr)
    # one prompt at a time: 12 chunks of 256 tokens each, then 20 tokens of decode
    assert res.metrics["iterations"] >= 40 * 12
    assert len(plans) <= 40 * 3


@pytest.mark.parametrize("case", ["draft_model", "ngram", "off", "kv_pressure"])
def test_compiled_runs_plan_and_commit_chunked_segments_and_agree_with_pure(case,
                                                                           monkeypatch):
    """The compiled kernel plans and commits segments through chunks (first tokens in
    later steps, recomputed prompts' gaps from their last delivery, partial commits when an
    arrival cuts a segment): the same bits as the pure-Python versions of its functions."""
    pytest.importorskip("numba")
    from specsim.simulator.execution import kernel_jit

    spec = {"ngram": {"method": "ngram", "drafter": None, "ngram": {"match_rate": 0.5}},
            "off": {"method": "none", "drafter": None}}.get(case, {})
    sc = scenario(**spec)
    # two workers and a router that reads load: each arrival syncs both, so segments are
    # committed in parts
    sc["hardware"]["count"] = 2
    sc["router"] = {"policy": "least_loaded"}
    tr = make_trace(150, rate=6.0, prompt=(50, 1500), output=(1, 300), seed=2)
    if case == "kv_pressure":
        sc["hardware"]["memory_fraction"] = 0.235
        sc["scheduler"]["max_batch"] = 32
        tr = make_trace(200, rate=30.0, prompt=(200, 2500), output=(50, 700), seed=4)
    chunked_commits = []
    real = kernel_jit._commit

    def spy(*args):
        if args[-4]:  # chunked
            chunked_commits.append(args[0])  # the first step committed
        return real(*args)

    pure = run_scenario(sc, trace=tr, overrides={"simulation.compiled": False})
    monkeypatch.setattr(kernel_jit, "_commit", spy)
    compiled = run_scenario(sc, trace=tr, overrides={"simulation.compiled": True})
    assert pure.metrics["iterations"] > 150
    assert len(chunked_commits) >= 5 and max(chunked_commits) > 0, "no compiled chunked commit"
    if case == "kv_pressure":
        assert pure.metrics["preemptions"] > 0
    same_bits(pure, compiled)


@pytest.mark.parametrize("budget,max_batch,seed", [(64, 4, 1), (128, 64, 2), (512, 8, 3),
                                                   (200, 16, 4)])
def test_chunked_segments_across_budgets_and_batch_limits(budget, max_batch, seed):
    """Tiny budgets (a draft-5 step nearly fills 64 tokens), full batches with a queue
    (segments through arrivals) and long prompts at once."""
    tr = make_trace(80, rate=8.0, prompt=(20, 2000), output=(1, 200), seed=seed)
    sc = scenario(k=3)
    sc["scheduler"].update(token_budget=budget, max_batch=max_batch)
    fast = run_scenario(sc, trace=tr, overrides={"simulation.fast_path": True})
    slow = run_scenario(sc, trace=tr, overrides={"simulation.fast_path": False})
    _same(fast, slow)
