"""Speculative KV (issue 11 part 3): a decode step takes blocks for its draft + bonus tokens,
keeps those of accepted tokens and returns those of rejected drafts; metrics.json counts
both, by hand on one request, and compiled and pure kernels agree."""

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


def test_every_draft_rejected_by_hand():
    """alpha 0: each step verifies min(k, left - 1) drafts + the last token, keeps one token."""
    taken = freed = 0
    kv, left = PROMPT, OUT - 1  # the prefill samples the first token
    held = _blocks(PROMPT) + 1  # admission reserves one spare block
    while left > 1:  # the finishing step frees everything: not counted
        q = min(K, left - 1) + 1
        during = max(held, _blocks(kv + q))
        after = min(during, _blocks(kv + 1))
        taken += during - held
        freed += max(during - max(after, held), 0)
        kv, left, held = kv + 1, left - 1, _blocks(kv + 1)
    for compiled in (False, True):
        m = run_scenario(_scenario(0.0), trace=make_trace(1, rate=1.0, prompt=PROMPT,
                                                          output=OUT),
                         overrides={"simulation.compiled": compiled}).metrics
        assert m["speculative_kv_blocks"] == {"allocated": taken, "freed_rejected": freed}
    assert freed > 0


def test_nothing_is_freed_when_every_draft_is_accepted():
    m = run_scenario(_scenario(1.0), trace=make_trace(1, rate=1.0, prompt=PROMPT,
                                                      output=OUT)).metrics
    assert m["speculative_kv_blocks"]["freed_rejected"] == 0
    assert m["speculative_kv_blocks"]["allocated"] > 0


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
