"""Speculative KV (issue 11 parts 3 and 8): a drafting step takes blocks for its draft +
bonus tokens, keeps those of accepted tokens and returns those of rejected drafts;
metrics.json (in total and per worker), the iteration log and the report count them, by
hand on one request; compiled and pure kernels agree; a draft model's own KV is in the KV
capacity."""

from __future__ import annotations

import pytest

from specsim.simulator.cluster.engine import run_scenario
from tests.conftest import make_trace

BS, K, PROMPT, OUT = 16, 4, 100, 200


def _scenario(alpha: float) -> dict:
    return {"model": "Llama-3.1-8B", "hardware": {"accelerator": "H100-SXM", "count": 1},
            "speculation": {"method": "draft_model", "k": K, "drafter": "Llama-3.2-1B",
                            "acceptance": {"alpha": alpha}},
            "scheduler": {"block_size": BS}, "workload": {}, "simulation": {"progress": False}}


def _blocks(tokens: int) -> int:
    return -(-tokens // BS)


def _by_hand(accepted) -> tuple[int, int]:
    """Blocks taken / freed for one request when step j accepts ``accepted(q - 1)`` drafts."""
    taken = freed = 0
    kv, left = PROMPT, OUT - 1  # the prefill samples the first token
    held = _blocks(PROMPT) + 1  # admission reserves one spare block
    while left > 1:
        q = min(K, left - 1) + 1  # k drafts + the last token verified
        emit = accepted(q - 1) + 1
        if emit >= left:  # the finishing step frees everything: not counted
            break
        during = max(held, _blocks(kv + q))
        after = min(during, _blocks(kv + emit))
        taken += during - held
        freed += max(during - max(after, held), 0)
        kv, left, held = kv + emit, left - emit, after
    return taken, freed


def _run(alpha: float, compiled: bool = False):
    return run_scenario(_scenario(alpha), trace=make_trace(1, rate=1.0, prompt=PROMPT,
                                                           output=OUT),
                        overrides={"simulation.compiled": compiled})


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_one_request_by_hand(alpha):
    """alpha 0: each step verifies min(k, left - 1) drafts + the last token and keeps one;
    alpha 1: it keeps all of them. allocated - freed = committed, per worker and in all, in
    both kernels, and the iteration log's columns sum to the totals."""
    taken, freed = _by_hand(lambda k: int(alpha) * k)
    for compiled in (False, True):
        res = _run(alpha, compiled)
        spec = res.metrics["speculative_kv_blocks"]
        assert (spec["allocated"], spec["freed_rejected"]) == (taken, freed)
        assert spec["committed"] == taken - freed
        assert spec["per_worker"] == {"allocated": [taken], "freed_rejected": [freed],
                                      "committed": [taken - freed]}
        it = res.iterations
        assert int(it["spec_taken_blocks"].sum()) == taken
        assert int(it["spec_freed_blocks"].sum()) == freed
    assert (freed > 0) == (alpha == 0.0)  # nothing is freed when every draft is accepted
    assert taken > 0


def test_each_iteration_keeps_what_it_took_less_what_it_freed():
    """A random acceptance sequence, read back from the log: per iteration, taken - freed =
    the blocks the request holds above what it held before (its kv_blocks_used), except
    at the prefill and the finishing step, which are not speculative."""
    it = _run(0.6).iterations
    used = it["kv_blocks_used"].to_numpy()
    net = (it["spec_taken_blocks"] - it["spec_freed_blocks"]).to_numpy()
    held = used[:-1]  # blocks held before iteration i, i >= 1
    assert (net[0], net[-1]) == (0, 0)  # the prefill, and the finish
    assert (net[1:-1] == used[1:-1] - held[:-1] + (held[:-1] > used[1:-1]) * (
        held[:-1] - used[1:-1])).all()
    assert (it["spec_freed_blocks"] > 0).any() and (it["spec_taken_blocks"] > 0).any()


def test_iteration_columns_only_when_drafting():
    sc = _scenario(0.5)
    sc["speculation"] = {"method": "none"}
    it = run_scenario(sc, trace=make_trace(3, rate=1.0, prompt=PROMPT, output=20)).iterations
    assert "spec_taken_blocks" not in it.columns
    assert run_scenario(sc, trace=make_trace(3, rate=1.0, prompt=PROMPT, output=20)
                        ).metrics["speculative_kv_blocks"]["allocated"] == 0


def test_the_drafters_kv_is_counted_in_kv_capacity():
    """KV blocks per worker = (HBM x memory_fraction - target and drafter weights) / ((the
    target's + the draft model's KV bytes per token) x block size), by hand from the
    catalog's shapes (bf16 KV: 2 bytes x K and V x layers x KV heads x head dim)."""
    from specsim.cost_models.catalog import get_hardware, get_model
    from specsim.simulator.cluster.engine import Deployment, load_scenario

    def kv_per_token(name: str) -> int:
        m = get_model(name)
        return 2 * 2 * m.n_layers * m.n_kv_heads * m.head_dim

    def deployment(sc: dict) -> Deployment:
        return Deployment(*load_scenario(sc)[:2])

    plain_sc = _scenario(0.5)
    plain_sc["speculation"] = {"method": "none"}
    spec, plain = deployment(_scenario(0.5)), deployment(plain_sc)
    target, drafter = kv_per_token("Llama-3.1-8B"), kv_per_token("Llama-3.2-1B")
    assert (target, drafter) == (131072, 32768)
    assert plain.kv_bytes_per_token_device == target
    assert spec.kv_bytes_per_token_device == target + drafter
    usable = get_hardware("H100-SXM").hbm_bytes * 0.90
    assert spec.kv_blocks == int((usable - spec.weight_bytes_device) // ((target + drafter) * BS))
    assert plain.kv_blocks == int((usable - plain.weight_bytes_device) // (target * BS))
    assert spec.weight_bytes_device > plain.weight_bytes_device


@pytest.mark.parametrize("fast", [True, False])
def test_fast_path_and_kernels_agree_under_load(fast):
    tr = make_trace(200, rate=20.0, prompt=(50, 1500), output=(20, 400), seed=4)
    sc = _scenario(0.7)
    runs = [run_scenario(sc, trace=tr, overrides={"simulation.compiled": c,
                                                  "simulation.fast_path": fast}).metrics
            for c in (False, True)]
    assert runs[0]["speculative_kv_blocks"] == runs[1]["speculative_kv_blocks"]
    slow = run_scenario(sc, trace=tr, overrides={"simulation.fast_path": False}).metrics
    assert runs[0]["speculative_kv_blocks"] == slow["speculative_kv_blocks"]
    assert runs[0]["kv_blocks_used_at_end"] == 0


def test_report_states_taken_returned_kept(tmp_path):
    from specsim.simulator.report.report import write_report

    res = _run(0.0)
    write_report(res, tmp_path)
    spec = res.metrics["speculative_kv_blocks"]
    line = next(x for x in (tmp_path / "report.md").read_text().splitlines()
                if x.startswith("| speculative KV blocks taken / returned / kept"))
    assert f"{spec['allocated']} / {spec['freed_rejected']} / {spec['committed']}" in line
