"""Suffix decoding: a CPU lookup whose chance of finding a draft grows with repetition within
the request and its session (issue 10, part 1)."""

from __future__ import annotations

import numpy as np
import pytest

from specsim.errors import ScenarioError
from specsim.simulator.cluster.engine import load_scenario, run_scenario
from tests.test_spec_policies import _trace


def _sc(**suffix) -> dict:
    return {"model": "Llama-3.1-8B", "hardware": {"accelerator": "H100-SXM", "count": 1},
            "speculation": {"method": "suffix", "k": 4, "acceptance": {"alpha": 0.8},
                            "suffix": {"match_rate_start": 0.05, "match_rate_max": 0.9,
                                       "growth_tokens": 100, **suffix}},
            "workload": {}, "simulation": {"progress": False}}


def test_match_chance_follows_the_stated_curve():
    res = run_scenario(_sc(), trace=_trace([("chat", 30, 0.0, 1.0, 200, 400)]))
    m = res.metrics
    assert m["output_tokens"] == m["accepted_tokens"] + m["bonus_tokens"]
    # drafting steps / all decode steps: the mean of p(seen) over each request's steps
    r = res.requests
    drafted_share = (r.drafted_tokens.sum() / 4) / r.steps.sum()
    from specsim.simulator.speculation.drafters import SuffixDrafter

    d = SuffixDrafter(2e-5, 0.05, 0.9, 100.0, True)

    class T:  # a request table of one row at each progress point
        turn = np.zeros(400, np.int64)
        prompt = np.full(400, 200, np.int64)
        generated = np.arange(400)

    p = d.match_probability(np.arange(400), T)
    assert p[0] == pytest.approx(0.05) and p[-1] == pytest.approx(0.9, abs=0.02)
    assert np.all(np.diff(p) > 0)
    # every step drafts with chance p(tokens generated so far), which rises from 0.05 to
    # ~0.9 within the first few hundred tokens: most steps draft, but not all
    assert p[50] < drafted_share < p[-1]


def test_repetition_within_the_request_raises_tokens_per_step():
    tr = _trace([("chat", 40, 0.0, 1.0, 200, 600)])
    it = run_scenario(_sc(), trace=tr).iterations
    dec = it[it.decode_seqs > 0]
    early, late = dec[dec.time_s < dec.time_s.min() + 0.3], dec.iloc[len(dec) // 2:]
    per_row = lambda d: (d.drafted_tokens / d.decode_seqs).mean()  # noqa: E731
    assert per_row(late) > 2 * per_row(early)


def test_a_session_turn_starts_with_its_history_seen():
    def run(turn: int):
        tr = _trace([("chat", 20, 0.0, 1.0, 1000, 60)])
        tr["session_id"] = np.arange(len(tr))
        tr["turn"] = turn
        return run_scenario(_sc(), trace=tr).metrics["mean_acceptance_length"]

    assert run(3) > run(0) + 0.5
    no_carry = _sc(session_carry=False)
    tr = _trace([("chat", 20, 0.0, 1.0, 1000, 60)])
    tr["turn"] = 3
    first = run_scenario(no_carry, trace=tr).metrics["mean_acceptance_length"]
    assert first < run(3)


def test_bad_suffix_settings_are_one_line_errors():
    with pytest.raises(ScenarioError, match=r"speculation\.suffix\.match_rate_start: expected "
                                            r"at most match_rate_max"):
        load_scenario(_sc(match_rate_start=0.9, match_rate_max=0.5))
    with pytest.raises(ScenarioError, match="suffix decoding takes no drafter"):
        sc = _sc()
        sc["speculation"]["drafter"] = "Llama-3.2-1B"
        run_scenario(sc, trace=_trace([("chat", 2, 0.0, 1.0, 10, 10)]))
