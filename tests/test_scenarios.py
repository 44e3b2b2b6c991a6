"""Every bundled scenario validates and runs; code accepts longer drafts than chat."""

from __future__ import annotations

import pytest

from specsim.simulator import run_scenario
from tests.conftest import REPO, skip_without_shared_trace

SCENARIOS = sorted((REPO / "scenarios").glob("*.yaml"))
# Scenarios whose speculation decides step by step in Python (per-class drafters, switching,
# a rules policy) take 2-8 s for their 1,000 requests, the others under 0.5 s: these run
# their first 500 (the switching scenario switches within them). docs/scenarios.md's table
# (benchmarks/bundled_table.py) runs every scenario whole.
FIRST = {"drafter_per_class": 500, "drafter_switching": 500, "adaptive_code_vs_chat": 500}


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_bundled_scenario_runs_and_conserves(path):
    skip_without_shared_trace(path)
    first = FIRST.get(path.stem)
    m = run_scenario(path, overrides={"workload.max_requests": first} if first else None).metrics
    if first:
        assert m["requests_arrived"] == first
    if path.stem == "drafter_switching":
        assert m["speculation"]["drafter_switch_count"] >= 1
    assert m["requests_completed"] + m["requests_rejected"] == m["requests_arrived"] > 0
    assert m["output_tokens"] == m["accepted_tokens"] + m["bonus_tokens"]
    assert m["hardware_calibrated"], m["calibration"]  # every bundled scenario has a fitted profile
    if path.stem.endswith("nospec"):
        assert m["mean_acceptance_length"] == 1.0
    else:
        twin = path.with_name(path.stem + "_nospec.yaml")
        if twin.exists():
            off = run_scenario(twin).metrics
            assert m["tpot_s"]["mean"] < off["tpot_s"]["mean"]


def test_code_accepts_more_per_step_than_chat_on_the_same_hardware():
    code = run_scenario(REPO / "scenarios" / "code_completion.yaml").metrics
    chat = run_scenario(REPO / "scenarios" / "chat.yaml").metrics
    assert code["fleet"]["accelerator"] == chat["fleet"]["accelerator"]
    assert code["mean_acceptance_length"] > chat["mean_acceptance_length"] + 0.2
