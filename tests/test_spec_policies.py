"""Speculation policies as runtime decisions: feedback, guardrail, goodput-optimal k, rules."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from specsim.errors import ScenarioError
from specsim.simulator.cluster.engine import run_scenario


def _trace(parts, seed: int = 0) -> pd.DataFrame:
    """``parts``: (class, n, start_s, rate, prompt, output) blocks of Poisson arrivals."""
    r = np.random.default_rng(seed)
    frames = []
    for cls, n, start, rate, prompt, output in parts:
        frames.append(pd.DataFrame({
            "arrival_s": start + np.cumsum(r.exponential(1 / rate, n)),
            "prompt_tokens": np.full(n, prompt), "output_tokens": np.full(n, output),
            "workload_class": cls}))
    d = pd.concat(frames, ignore_index=True).sort_values("arrival_s", kind="stable")
    n = len(d)
    return d.assign(request_id=np.arange(n), session_id=-1, turn=0,
                    prefix_block_ids=[()] * n, temperature=0.0,
                    slo_tier="standard").reset_index(drop=True)


def _sc(policy: str = "static", params: dict | None = None, k: int = 4, **spec) -> dict:
    return {"model": "Llama-3.1-8B", "hardware": {"accelerator": "H100-SXM", "count": 1},
            "speculation": {"method": "draft_model", "drafter": "Llama-3.2-1B", "k": k,
                            "policy": policy, "policy_params": params,
                            "acceptance": {"by_class": {"code": {"alpha": 0.9},
                                                        "chat": {"alpha": 0.1}}}, **spec},
            "workload": {}, "simulation": {"progress": False}}


def test_feedback_cuts_k_within_bounded_iterations_when_acceptance_collapses():
    """Code (alpha 0.9) then, after a pause, chat (alpha 0.1); the policy's prior is 0.8 for
    everything (it does not know the classes): its estimate must fall and k with it."""
    tr = _trace([("code", 40, 0.0, 4.0, 200, 120), ("chat", 40, 40.0, 4.0, 200, 120)])
    res = run_scenario(_sc("feedback", {"scope": "worker", "prior": 0.8, "decay": 0.9,
                                        "prior_weight": 5.0}), trace=tr)
    it = res.iterations
    before = it[(it.time_s > 2.0) & (it.time_s < 30.0) & (it.decode_seqs > 0)]
    assert (before.drafted_tokens / before.decode_seqs).median() >= 3  # drafts long on code
    switch = it.index[it.time_s >= 40.0][0]
    after = it.loc[switch:]
    after = after[after.decode_seqs > 0]
    cut = np.flatnonzero(after.policy_reason.str.endswith("k 0-0").to_numpy())
    assert len(cut), "the policy never stopped drafting"
    assert cut[0] <= 25, f"k cut only after {cut[0]} iterations"
    # once cut, it stays off but for the probes (one draft token every probe_every steps)
    tail = after.iloc[cut[0] + 1:]
    assert (tail.drafted_tokens / tail.decode_seqs).mean() < 0.2
    assert res.metrics["output_tokens"] == res.metrics["accepted_tokens"] + \
        res.metrics["bonus_tokens"]


def test_guardrail_turns_off_speculation_that_hurts():
    """A rule that always drafts 4 tokens at alpha 0.1 is slower than no speculation; with
    the guardrail on, measured time per token is checked against the priced time without
    drafting and speculation is switched off."""
    tr = _trace([("chat", 150, 0.0, 6.0, 300, 200)])
    rules = {"rules": [{"name": "always", "k": 4}]}
    always = run_scenario(_sc("rules", rules), trace=tr).metrics
    guarded_res = run_scenario(_sc("rules", {**rules, "guardrail": True}), trace=tr)
    guarded = guarded_res.metrics
    off = run_scenario(_sc(k=0), trace=tr).metrics
    assert always["tpot_s"]["mean"] > off["tpot_s"]["mean"]  # speculation hurts here
    reasons = guarded_res.iterations.policy_reason
    assert reasons.str.startswith("guardrail").mean() > 0.5
    assert guarded["tpot_s"]["mean"] < 0.9 * always["tpot_s"]["mean"]


@pytest.mark.parametrize("rate", [4.0, 40.0])
def test_goodput_policy_is_never_worse_than_off_and_the_best_static_k(rate):
    """Under light and heavy load (code, alpha 0.9): the goodput-optimal policy's TPOT is
    within noise of the better of off and the best static k, over two seeds."""
    for seed in (0, 1):
        tr = _trace([("code", 200, 0.0, rate, 300, 150)], seed=seed)
        best = min(run_scenario(_sc(k=k), trace=tr).metrics["tpot_s"]["mean"]
                   for k in (0, 1, 2, 4))
        good = run_scenario(_sc("goodput"), trace=tr).metrics["tpot_s"]["mean"]
        assert good <= best * 1.05, (rate, seed, good, best)


def test_rules_choose_per_class_and_log_the_reason():
    tr = _trace([("code", 30, 0.0, 3.0, 200, 80), ("chat", 30, 0.0, 3.0, 200, 80)])
    rules = {"rules": [{"name": "code", "when": {"class": "code"}, "k": 4},
                       {"name": "rest", "k": 1}]}
    res = run_scenario(_sc("rules", rules), trace=tr)
    req = res.requests
    steps = req.groupby("workload_class")[["drafted_tokens", "steps"]].sum()
    per_step = steps.drafted_tokens / steps.steps
    assert per_step["code"] > 3.0 and per_step["chat"] <= 1.0
    assert res.iterations.policy_reason.str.contains("code (k 4)", regex=False).any()


@pytest.mark.parametrize("params, needle", [
    ({"rules": [{"when": {"clas": "code"}, "k": 2}]}, "rules[0].when.clas: unknown condition"),
    ({"rules": [{"k": 9}]}, "rules[0].k: expected an integer in [0, speculation.k = 4]"),
    ({"rules": []}, "rules: expected a non-empty list"),
    ({"rulez": []}, "policy_params.rulez: not a setting of policy 'rules'"),
])
def test_bad_rules_are_one_line_errors(params, needle):
    with pytest.raises(ScenarioError, match=None) as exc:
        run_scenario(_sc("rules", params), trace=_trace([("code", 2, 0.0, 1.0, 10, 5)]))
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_static_policy_logs_its_reason_and_keeps_the_fast_path():
    res = run_scenario(_sc(), trace=_trace([("code", 20, 0.0, 2.0, 100, 50)]))
    assert set(res.iterations.policy_reason) == {"static k=4"}


def test_static_speculation_speedup_falls_with_load_at_short_context():
    speedups = []
    for rate in (2.0, 40.0, 120.0):
        tr = _trace([("code", 300, 0.0, rate, 300, 150)], seed=3)
        off = run_scenario(_sc(k=0), trace=tr).metrics["tpot_s"]["mean"]
        on = run_scenario(_sc(k=4), trace=tr).metrics["tpot_s"]["mean"]
        speedups.append(off / on)
    assert speedups[0] > speedups[1] > speedups[2], speedups
