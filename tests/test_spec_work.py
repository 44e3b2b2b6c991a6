"""Where speculative work goes: accepted, bonus, wasted and prompt time and energy add up to
the busy time and energy; the draft phase is powered at its own utilisation; accepted-length
histograms per class agree with the token counts."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from specsim.simulator.cluster.engine import Simulation, load_scenario
from specsim.simulator.cluster.worker import WORK_KINDS, Ledger, split_work
from tests.test_spec_policies import _sc, _trace


def _run(alpha: float | None = None, **over):
    sc = _sc(**over)
    if alpha is not None:
        sc["speculation"]["acceptance"] = {"alpha": alpha}
    tr = _trace([("code", 60, 0.0, 5.0, 300, 120), ("chat", 60, 0.0, 5.0, 300, 120)])
    scenario, base, _ = load_scenario(sc)
    sim = Simulation(scenario, tr, base)
    sim.run()
    sim.check_invariants()
    return sim, SimpleNamespace(metrics=sim.summary(0.0), requests=pd.DataFrame(sim.table.columns()))


@pytest.mark.parametrize("over", [{}, {"k": 0}, {"policy": "goodput"},
                                  {"overlap_draft": True}])
def test_work_adds_up_to_busy_time_and_energy(over):
    sim, res = _run(**over)
    sp = res.metrics["speculation"]
    busy = sum(w.ledger.busy_s for w in sim.workers)
    busy_j = sum(w.ledger.energy_j for w in sim.workers)
    assert sum(sp["work_s"].values()) == pytest.approx(busy, rel=1e-9)
    assert sum(sp["work_j"].values()) == pytest.approx(busy_j, rel=1e-9)
    if over.get("k") == 0:
        assert sp["work_s"]["wasted"] == 0 and sp["work_s"]["accepted"] == 0


def test_wasted_work_follows_acceptance():
    _, hi = _run(alpha=1.0)
    _, lo = _run(alpha=0.2)
    assert hi.metrics["speculation"]["wasted_time_fraction"] < 0.02
    assert lo.metrics["speculation"]["wasted_time_fraction"] > 0.3
    assert lo.metrics["speculation"]["wasted_energy_fraction"] > 0.3


def test_split_work_is_exact_per_step():
    r = np.random.default_rng(0)
    n = 200
    drafted = r.integers(0, 40, n).astype(float)
    accepted = np.minimum(r.integers(0, 40, n), drafted).astype(float)
    rows = r.integers(1, 10, n).astype(float)
    prompt = r.integers(0, 500, n).astype(float)
    tokens = drafted + rows + prompt
    draft, rest = r.random(n), r.random(n)
    parts = split_work(draft, rest, drafted, accepted, rows, prompt, tokens)
    assert set(parts) == set(WORK_KINDS)
    np.testing.assert_allclose(sum(parts.values()), draft + rest, rtol=1e-12)
    assert all((v >= 0).all() for v in parts.values())


def test_draft_phase_is_powered_at_its_own_utilisation():
    """A memory-bound draft phase at full bandwidth next to a target pass with no work: the
    draft phase draws its curve's power at u_memory 1, the pass the curve's floor (the
    average of the two utilisations would give both the same power)."""
    from specsim.cost_models.catalog import PowerCurve

    curve = PowerCurve("test", host=0.1, compute=2.0, memory=0.5, source="test")
    led = Ledger(devices=1, peak_flops=1e15, hbm_bw=1e12, power_idle=100.0, power_max=700.0,
                 curve=curve)
    one = np.array([1.0])
    led.add(dt=np.array([2.0]), draft=one, verify=one, flops=np.array([0.0]),
            nbytes=np.array([1e12]), draft_phase=one, dflops=np.array([0.0]),
            dbytes=np.array([1e12]), drafted=np.array([4.0]), accepted=np.array([2.0]),
            decode_rows=one, prefill_tokens=np.array([0.0]), tokens=np.array([5.0]))
    assert led.energy_j == pytest.approx((100.0 + 600.0 * (0.1 + 0.5)) + (100.0 + 600.0 * 0.1))


def test_accepted_length_histogram_matches_token_counts():
    sim, res = _run()
    hist = res.metrics["speculation"]["accepted_per_step_histogram"]
    assert set(hist) == {"code", "chat"}
    req = res.requests
    for cls, counts in hist.items():
        c = np.asarray(counts)
        accepted = int(req.loc[req.workload_class == cls, "accepted_tokens"].sum())
        assert int((c * np.arange(len(c))).sum()) == accepted
    # alpha 0.9 (code) accepts more per step than alpha 0.1 (chat)
    mean = {k: np.average(np.arange(len(v)), weights=v) for k, v in hist.items()}
    assert mean["code"] > 2.0 > 0.5 > mean["chat"]
