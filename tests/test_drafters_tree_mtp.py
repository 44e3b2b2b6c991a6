"""Tree drafts, MTP modules and Medusa heads (issue 10, part 1): a tree's verify width is its
node count, a tree of one node per depth is the chain bit for bit, SGLang's three flags give
the tree they say; an MTP pass costs one decoder layer of the target, Medusa one pass."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from specsim.errors import ScenarioError
from specsim.simulator.cluster.engine import Deployment, load_scenario, run_scenario
from specsim.simulator.speculation.drafters import tree_from_sglang, tree_from_widths
from tests.test_drafter_costs import _cost
from tests.test_spec_policies import _trace


def _sc(model: str = "Llama-3.1-8B", **spec) -> dict:
    return {"model": model, "hardware": {"accelerator": "H100-SXM", "count": 1},
            "speculation": {"acceptance": {"alpha": 0.6}, **spec},
            "workload": {}, "simulation": {"progress": False}}


def _deployment(model: str = "Llama-3.1-8B", **spec) -> Deployment:
    scenario, base, _ = load_scenario(_sc(model, **spec))
    return Deployment(scenario, base)


def test_tree_verify_width_is_its_node_count():
    d = _deployment(method="eagle3", tree={"widths": [4, 2, 2, 1]}).drafter
    assert d.tree.size == 1 + 4 + 2 + 2 + 1
    assert int(d.verify_width(4)) == 10
    assert list(d.verify_width(np.array([0, 1, 2, 3, 4]))) == [1, 5, 7, 9, 10]
    assert d.k_for_width(10) == 4 and d.k_for_width(9) == 3 and d.k_for_width(4) == 0


def test_tree_sets_k_to_its_depth_and_rejects_another():
    scenario, _, _ = load_scenario(_sc(method="eagle3", tree={"widths": [3, 2]}))
    assert scenario.speculation.k == 2
    with pytest.raises(ScenarioError, match=r"speculation\.k: expected the tree's depth 2"):
        load_scenario(_sc(method="eagle3", k=4, tree={"widths": [3, 2]}))
    with pytest.raises(ScenarioError, match="drafts a chain, not a tree"):
        load_scenario(_sc(method="draft_model", drafter="Llama-3.2-1B",
                          tree={"widths": [2, 2]}))


def test_sglang_flags_give_the_tree_they_say():
    chain = tree_from_sglang(topk=1, num_steps=3, num_draft_tokens=None)
    assert chain.nodes == (1, 1, 1) and chain.size == 4
    t = tree_from_sglang(topk=4, num_steps=3, num_draft_tokens=8)
    assert t.size == 8  # num_draft_tokens counts the root
    assert t.nodes == (4, 2, 1)  # the greedy path to depth 3, the rest shallow first
    assert t.candidates == (4, 2, 1) and t.pass_rows == (1, 4, 4)
    with pytest.raises(ScenarioError, match="num_draft_tokens: expected at most"):
        load_scenario(_sc(method="eagle3", tree={"topk": 2, "num_steps": 2,
                                                 "num_draft_tokens": 40}))


def test_tree_acceptance_is_the_chain_where_one_candidate_competes():
    table = np.full((2, 8), 0.6)
    t = tree_from_widths([4, 1, 2])
    out = t.transform(table)
    assert out[0, 0] == pytest.approx(1 - 0.4 ** 4)
    assert out[0, 1] == 0.6  # one candidate: the chain's own rate, exactly
    assert out[0, 2] == pytest.approx(1 - 0.4 ** 2)
    assert (out[:, 3:] == 0.6).all()


def _run_eagle(**spec):
    tr = _trace([("chat", 80, 0.0, 6.0, 400, 100)])
    res = run_scenario(_sc(method="eagle3", **spec), trace=tr)
    return res


def test_tree_of_width_one_is_the_chain_result():
    chain = _run_eagle(k=3)
    tree = _run_eagle(tree={"widths": [1, 1, 1]})
    pd.testing.assert_frame_equal(chain.requests, tree.requests)
    for key in ("output_tokens", "accepted_tokens", "bonus_tokens"):
        assert chain.metrics[key] == tree.metrics[key]


def test_a_wider_tree_accepts_more_per_step_and_verifies_more():
    chain = _run_eagle(k=3)
    tree = _run_eagle(tree={"widths": [4, 3, 2]})

    def per_step(res):
        it = res.iterations[res.iterations.decode_seqs > 0]
        pure = it[it.prefill_seqs == 0]  # decode-only iterations: tokens = verified tokens
        return (res.metrics["accepted_tokens"] / it.decode_seqs.sum(),
                (pure.tokens / pure.decode_seqs).median())

    acc_chain, width_chain = per_step(chain)
    acc_tree, width_tree = per_step(tree)
    assert acc_tree > 1.15 * acc_chain
    assert width_tree > width_chain + 4  # 10 verified tokens per sequence instead of 4
    for res in (chain, tree):
        m = res.metrics
        assert m["output_tokens"] == m["accepted_tokens"] + m["bonus_tokens"]


def test_mtp_pass_costs_one_decoder_layer_of_the_target():
    dep = _deployment("MiMo-7B", method="mtp", k=3)
    d, target = dep.drafter, dep.target
    one = _cost(d, 1, rows=8)
    steps = np.diff([_cost(d, k, rows=8) for k in range(1, 6)])
    assert steps.max() / steps.min() < 1.1  # k sequential passes (the module reused)
    full = float(target.time_and_work(np.array([8.0]), np.array([8000.0]),
                                      np.array([8.0 * 1001]))[0][0])
    assert one < 0.25 * full  # one layer + the LM head, not 36 layers
    m = dep.model
    resident = d.model.resident_params  # one module: a decoder layer + the 2h -> h projection
    layer = (m.total_params - 2 * m.vocab_size * m.hidden_size) / m.n_layers  # untied
    assert resident == pytest.approx(layer + 2 * 4096 ** 2, rel=0.05)


def test_mtp_on_a_model_without_mtp_modules_is_refused():
    with pytest.raises(ScenarioError, match="has no MTP modules"):
        _deployment("Llama-3.1-8B", method="mtp", k=2)


def test_medusa_is_one_pass_whatever_the_depth():
    d = _deployment(method="medusa", k=4).drafter
    assert _cost(d, 1) == pytest.approx(_cost(d, 4))
    # memory-bound (4 heads' own d x V LM heads) at small batch, compute-bound at large
    assert _cost(d, 4, rows=32) == pytest.approx(_cost(d, 4, rows=8), rel=0.05)
    assert _cost(d, 4, rows=8192) > 1.5 * _cost(d, 4, rows=8)
