"""Drafter switching per class (speculation/per_class.py): each class drafts with its own
drafter, priced on its rows, accepting as its profile says; all drafters take memory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specsim.simulator.cli import main
from specsim.simulator.cluster.engine import Deployment, load_scenario, run_scenario
from specsim.simulator.speculation.per_class import PerClassDrafter

SCN = Path(__file__).resolve().parents[1] / "scenarios" / "drafter_per_class.yaml"
SMALL = {"workload.synthetic.requests": 200, "simulation.progress": False}
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
    draft = {"method": "draft_model", "k": 4, "drafter": "Qwen3-0.6B",
             "acceptance": {"alpha": 0.6}}
    a = run_scenario(SCN, overrides={**SMALL, "speculation.per_class.chat": draft}).metrics
    b = run_scenario(SCN, overrides=SMALL).metrics
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
