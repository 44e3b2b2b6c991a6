"""Drafter switching per class (speculation/per_class.py): each class drafts with its own
drafter, priced on its rows, accepting as its profile says; all drafters take memory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsim.simulator.cli import main
from specsim.simulator.cluster.engine import Deployment, load_scenario, run_scenario
from specsim.simulator.speculation.per_class import PerClassDrafter
from tests.test_spec_policies import _trace

SCN = Path(__file__).resolve().parents[1] / "scenarios" / "drafter_per_class.yaml"
SMALL = {"workload.synthetic.requests": 100, "simulation.progress": False}  # ~30 per class
NGRAM = {"method": "ngram", "k": 7, "ngram": {"match_rate": 1.0, "cpu_s_per_step": 2e-5},
         "acceptance": {"tau": 3.44, "at_k": 7}}


def test_a_class_on_its_own_drafter_runs_exactly_as_that_drafter_alone():
    """Only summarization traffic: the composite's n-gram member is the whole story, so the
    requests are those of a plain n-gram run with the same rules (the EAGLE-3 head's weights
    only shrink the KV pool, which this load does not fill)."""
    only = {**SMALL, "workload.class_mix": {"summarization": 1.0}}
    mixed = run_scenario(SCN, overrides=only)
    plain = run_scenario(SCN, overrides={**only, "speculation.per_class": None,
                                         "speculation.method": "ngram", **{
                                             f"speculation.{k}": v for k, v in NGRAM.items()}})
    for col in ("output_tokens", "accepted_tokens", "drafted_tokens", "steps", "tpot_s",
                "finish_s"):
        np.testing.assert_array_equal(mixed.requests[col], plain.requests[col], err_msg=col)
    assert mixed.metrics["kv_blocks_per_worker"] < plain.metrics["kv_blocks_per_worker"]


def test_each_row_accepts_as_its_class_drafter_says_and_k_is_capped_per_drafter():
    res = run_scenario(SCN, overrides={**SMALL, "speculation.per_class.summarization.k": 3})
    req = res.requests[res.requests.status == "completed"]
    per_step = req.drafted_tokens / req.steps
    summ = req.workload_class == "summarization"
    assert per_step[summ].max() <= 3.0 + 1e-9  # the n-gram member drafts at most its k
    assert per_step[req.workload_class == "code"].max() > 3.0  # EAGLE-3 code rule: k 5
    assert (req.output_tokens == req.accepted_tokens + req.bonus_tokens).all()
    m = res.metrics
    assert m["output_tokens"] == m["accepted_tokens"] + m["bonus_tokens"]


def test_a_mixed_batch_pays_each_drafters_passes_over_its_own_rows():
    sc, base, _ = load_scenario(SCN, SMALL)
    d = Deployment(sc, base)
    comp = d.drafter
    assert isinstance(comp, PerClassDrafter) and len(comp.members) == 2
    comp.attach(np.array(["code", "summarization", "chat", "summarization"], dtype=object))
    rows = np.arange(4)
    k = np.array([[5, 7, 2, 7], [5, 7, 2, 0]])
    ctx = np.array([[300.0, 900.0, 120.0, 50.0], [306.0, 908.0, 123.0, 0.0]])
    pf_tokens = np.array([40.0, 0.0])
    pf_qc = np.array([800.0, 0.0])
    prefill_rows = np.array([40, 0, 0, 0])  # row 0 (code, EAGLE-3) prefills 40 tokens
    comp.bind(rows, prefill_rows)
    got = comp.cost_steps(k, ctx, pf_tokens, pf_qc)
    eagle, ngram = (m.drafter for m in comp.members)
    is_e = np.array([True, False, True, False])[None, :]
    want_e = eagle.cost_steps(np.where(is_e, k, 0), np.where(is_e, ctx, 0.0), pf_tokens, pf_qc)
    want_n = ngram.cost_steps(np.where(~is_e, k, 0), np.where(~is_e, ctx, 0.0), pf_tokens * 0,
                              pf_qc * 0)
    for g, e, n in zip(got, want_e, want_n, strict=True):
        np.testing.assert_allclose(g, e + n, rtol=1e-12)
    assert got[0][0] > want_e[0][0] > 0  # the lookup's CPU time adds to the head's passes


def test_every_drafter_takes_memory():
    """The KV pool is sized before the first request (ten requests show it as 100 do)."""
    draft = {"method": "draft_model", "k": 4, "drafter": "Qwen3-0.6B",
             "acceptance": {"alpha": 0.6}}
    tiny = {**SMALL, "workload.synthetic.requests": 10}
    a = run_scenario(SCN, overrides={**tiny, "speculation.per_class.chat": draft}).metrics
    b = run_scenario(SCN, overrides=tiny).metrics
    assert a["kv_blocks_per_worker"] < b["kv_blocks_per_worker"]
    assert any("Qwen3-0.6B" in n for n in a["notes"])


def test_same_seed_same_result_and_method_none_turns_it_all_off():
    a = run_scenario(SCN, overrides=SMALL).metrics
    b = run_scenario(SCN, overrides=SMALL).metrics
    a.pop("wall_time_s"), b.pop("wall_time_s")
    assert a == b
    off = run_scenario(SCN, overrides={**SMALL, "speculation.method": "none"}).metrics
    assert off["drafted_tokens"] == 0


@pytest.mark.parametrize("key,value,needle", [
    ("speculation.per_class.chat.k", "9", "speculation.per_class.chat.k: expected at most"),
    ("speculation.per_class.summarization.kk", "3",
     "speculation.per_class.summarization.kk: unknown key"),
    ("speculation.per_class.chat", "{method: ngram, k: 2}",
     "speculation.per_class.chat.acceptance: required"),
    ("speculation.per_class.chat", "{method: eagle3, k: 2, tree: {widths: [2, 2]}}",
     "speculation.per_class.chat.tree: not allowed"),
    ("speculation.per_class.chat", "{method: draft_model, k: 2, drafter: Nope-1B, "
     "acceptance: {alpha: 0.5}}", "speculation.per_class.chat.drafter"),
])
def test_bad_entries_are_one_line_errors(key, value, needle, capsys):
    assert main(["validate", str(SCN), "--set", f"{key}={value}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


# ---------------------------------------------------------------- switching at run time
# (speculation.switching; per_class.py rules 4-6)

def _shift_trace() -> pd.DataFrame:
    """Code throughout; chat greedy, then (25-51 s) sampled at temperature 1, then greedy
    again: the workload-switch fixture of the feedback-policy test, with temperatures."""
    tr = _trace([("code", 150, 0.0, 2.0, 200, 120), ("chat", 50, 0.0, 2.0, 200, 120),
                 ("chat", 50, 25.0, 2.0, 200, 120), ("chat", 60, 52.0, 2.0, 200, 120)])
    hot = (tr.workload_class == "chat") & (tr.arrival_s >= 25.0) & (tr.arrival_s < 51.0)
    tr.loc[hot, "temperature"] = 1.0
    return tr


FALLBACK = {"method": "ngram", "k": 4, "ngram": {"match_rate": 1.0},
            "acceptance": {"alpha": 0.5, "temperature_sensitivity": 0.0}}


def _switch_sc(policy: str = "static", **switching) -> dict:
    """A draft model whose chat acceptance collapses at temperature 1 (alpha 0.8 -> 0.08:
    sensitivity 0.9, a test value), an n-gram fallback that does not."""
    return {"model": "Llama-3.1-8B", "hardware": {"accelerator": "H100-SXM", "count": 1},
            "speculation": {
                "method": "draft_model", "drafter": "Llama-3.2-1B", "k": 4, "policy": policy,
                "acceptance": {"by_class": {"code": {"alpha": 0.9}, "chat": {"alpha": 0.8}},
                               "temperature_sensitivity": 0.9},
                "switching": {"fallback": FALLBACK, "classes": ["chat"], "below": 0.4,
                              "above": 0.6, "min_steps": 16, "probe_every": 4, **switching}},
            "workload": {}, "simulation": {"progress": False}}


def test_a_class_switches_to_the_fallback_soon_after_its_acceptance_collapses_and_back():
    tr = _shift_trace()
    res = run_scenario(_switch_sc(decay=0.9), trace=tr)
    sw = res.metrics["speculation"]["drafter_switches"]
    assert [(e["class"], e["from"], e["to"]) for e in sw] == [
        ("chat", "draft_model", "ngram"), ("chat", "ngram", "draft_model")]
    assert sw[0]["acceptance"] < 0.4 <= 0.6 <= sw[1]["acceptance"]
    # the collapse: every decoding chat row is a sampled one (the greedy ones before it have
    # finished, a sampled one has its first token). From there the decayed estimate falls
    # below 0.4 within a number of steps set by the decay: with 0.9, what a greedy row left
    # (~3 trials a step / 0.1 at 0.8) is outweighed by ~1 trial a step at 0.08 in ~15 steps
    req = res.requests
    chat = req.workload_class == "chat"
    hot = chat & (req.arrival_s >= 25.0) & (req.arrival_s < 51.0)
    collapse = max(float(req.loc[hot, "ttft_s"].add(req.loc[hot, "arrival_s"]).min()),
                   float(req.loc[chat & (req.arrival_s < 25.0), "finish_s"].max()))
    it = res.iterations
    said = it.index[it.policy_reason.str.contains("switch chat to ngram", regex=False)]
    assert len(said) == 1
    after = int(((it.time_s >= collapse) & (it.index < said[0])).sum())
    assert after <= 25, f"switched {after} iterations after the collapse"
    assert it.loc[said[0] + 1:, "policy_reason"].str.contains("chat on fallback ngram").any()
    m = res.metrics
    assert m["output_tokens"] == m["accepted_tokens"] + m["bonus_tokens"]
    assert (req.output_tokens == req.accepted_tokens + req.bonus_tokens).all()


def test_switched_requests_draft_and_accept_as_the_fallback_with_probes_on_their_own():
    """After the switch, new chat requests are pinned to the n-gram lookup (k <= its 4;
    it accepts as its alpha 0.5), except every 4th (a probe on the draft model)."""
    tr = _shift_trace()
    sc, base, _ = load_scenario(_switch_sc())
    from specsim.simulator.cluster.engine import Simulation

    sim = Simulation(sc, tr, base)
    sim.run()
    sim.check_invariants()
    comp = sim.drafter
    t = sim.table
    chat = t.workload_class == "chat"
    on_fb = comp.member_rows(np.arange(t.n)) == comp.fallback
    assert not on_fb[~chat].any()  # code never switches (not in switching.classes)
    hot = chat & (t.arrival >= 27.0) & (t.arrival < 51.0)  # admitted after the switch
    share = on_fb[hot].mean()
    assert 0.65 <= share <= 0.85, share  # 3 in 4 on the fallback, every 4th a probe
    # accepted per drafted token at k 4: the fallback's rows i.i.d. 0.5 (no temperature
    # effect): (.5 + .25 + .125 + .0625) / 4 = 0.234; the draft model's sampled rows, alpha
    # 0.08: 0.022
    fb_rows, own_rows = hot & on_fb, hot & ~on_fb
    rate = lambda sel: t.accepted[sel].sum() / max(t.drafted[sel].sum(), 1)  # noqa: E731
    assert 0.2 < rate(fb_rows) < 0.27 and rate(own_rows) < 0.05
    assert (t.drafted[fb_rows] <= 4 * t.steps[fb_rows]).all()


def test_a_switch_that_never_fires_changes_nothing_but_memory():
    """below 0: the fallback is loaded but never used: the requests run exactly as without
    switching; a draft-model fallback's weights shrink the KV pool."""
    tr = _shift_trace()
    plain = _switch_sc()
    plain["speculation"].pop("switching")
    plain["speculation"]["policy"] = "rules"
    plain["speculation"]["policy_params"] = {"rules": [{"when": {"class": "code"}, "k": 4},
                                                       {"k": 2}]}
    idle = {**plain, "speculation": {**plain["speculation"], "switching": {
        "fallback": FALLBACK, "below": 0.0, "above": 0.5}}}
    a = run_scenario(plain, trace=tr)
    b = run_scenario(idle, trace=tr)
    for col in ("output_tokens", "accepted_tokens", "drafted_tokens", "steps", "tpot_s",
                "finish_s"):
        np.testing.assert_array_equal(a.requests[col], b.requests[col], err_msg=col)
    assert b.metrics["speculation"]["drafter_switch_count"] == 0
    assert a.metrics["kv_blocks_per_worker"] == b.metrics["kv_blocks_per_worker"]  # no weights
    heavy = {**idle, "speculation": {**idle["speculation"], "switching": {
        "fallback": {"method": "draft_model", "drafter": "Llama-3.2-1B", "k": 2,
                     "acceptance": {"alpha": 0.5}}, "below": 0.0, "above": 0.5}}}
    c = run_scenario(heavy, trace=tr.head(10)).metrics  # the pool is sized before any request
    assert c["kv_blocks_per_worker"] < b.metrics["kv_blocks_per_worker"]


def test_switching_is_deterministic():
    """Same seed, same result, with a rules policy under the switch."""
    rules = {"speculation.policy_params": {"rules": [{"when": {"class": "code"}, "k": 4},
                                                     {"k": 3}]}}
    a, b = (run_scenario(_switch_sc("rules", min_steps=8), trace=_shift_trace(),
                         overrides=rules).metrics for _ in range(2))
    a.pop("wall_time_s"), b.pop("wall_time_s")
    assert a == b and a["speculation"]["drafter_switch_count"] >= 1


SWITCH_SCN = Path(__file__).resolve().parents[1] / "scenarios" / "drafter_switching.yaml"


@pytest.mark.parametrize("key,value,needle", [
    ("speculation.switching.fallback.kk", "3", "speculation.switching.fallback.kk: unknown key"),
    ("speculation.switching.fallback.k", "9", "speculation.switching.fallback.k: expected at "
     "most speculation.k"),
    ("speculation.switching.above", "0.3", "speculation.switching.above: expected more than "
     "below"),
    ("speculation.switching.fallback", "{method: draft_model, k: 2, drafter: Nope-1B, "
     "acceptance: {alpha: 0.5}}", "speculation.switching.fallback.drafter"),
])
def test_bad_switching_entries_are_one_line_errors(key, value, needle, capsys):
    assert main(["validate", str(SWITCH_SCN), "--set", f"{key}={value}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


def test_switching_an_unknown_class_is_a_one_line_error(tmp_path, capsys):
    code = main(["run", str(SWITCH_SCN), "--set", "speculation.switching.classes=[chta]",
                 "--set", "workload.max_requests=20", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "speculation.switching.classes: 'chta' is not a workload class" in err[0]


def test_compiled_kernel_gives_the_same_bits_with_drafters_per_class():
    """The compiled plan does not know the composite (it plans in Python, rows' acceptance
    per drafter); its commit is compiled: same results either way."""
    pytest.importorskip("numba")
    tr = _shift_trace()
    a = run_scenario(_switch_sc(), trace=tr, overrides={"simulation.compiled": True})
    b = run_scenario(_switch_sc(), trace=tr, overrides={"simulation.compiled": False})
    for col in ("output_tokens", "accepted_tokens", "drafted_tokens", "steps", "finish_s"):
        np.testing.assert_array_equal(a.requests[col], b.requests[col], err_msg=col)
    assert a.metrics["speculation"]["drafter_switches"] == \
        b.metrics["speculation"]["drafter_switches"]
