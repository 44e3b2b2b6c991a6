"""The simulator at batch 1 reproduces the closed-form speculative speedup (Leviathan et al.)."""

from __future__ import annotations

import pytest

from specsim.simulator.cluster.engine import run_scenario
from specsim.simulator.speculation.acceptance import alpha_from_tau, expected_tokens_per_step
from tests.conftest import make_trace

BASE = {
    "model": "Llama-3.1-8B",
    "hardware": {"accelerator": "H100-SXM", "count": 1},
    "workload": {},
    "simulation": {"progress": False},
}


def _scenario(method="none", k=0, alpha=None, ratio=None):
    sc = {**BASE, "speculation": {"method": method, "k": k}}
    if method != "none":
        sc["speculation"]["acceptance"] = {"alpha": alpha}
        sc["speculation"]["draft_cost"] = {"ratio": ratio}
    return sc


# one request at a time (arrivals far apart), long outputs so end effects are small
TRACE = make_trace(12, gap=1e4, prompt=32, output=8000)


@pytest.fixture(scope="module")
def baseline_tpot() -> float:
    r = run_scenario(_scenario(), trace=TRACE)
    return r.metrics["tpot_s"]["mean"]


@pytest.mark.parametrize("alpha", [0.5, 0.7, 0.9])
@pytest.mark.parametrize("k", [1, 2, 4, 8])
@pytest.mark.parametrize("c", [0.0, 0.1, 0.2])
def test_batch1_speedup_matches_closed_form(baseline_tpot, alpha, k, c):
    r = run_scenario(_scenario("draft_model", k, alpha, c), trace=TRACE)
    simulated = baseline_tpot / r.metrics["tpot_s"]["mean"]
    # a step = the target pass (GPU) + the engine's CPU work once + k draft passes of c x the
    # target's GPU time + speculation's own work (one sequence, k drafted tokens)
    cal = r.metrics["calibration_values"]
    engine = cal["engine_fixed_s"] + cal["engine_per_seq_s"]
    spec = (cal["spec_step_overhead_s"] + cal["spec_seq_overhead_s"]
            + k * cal["spec_token_overhead_s"])
    step = baseline_tpot + k * c * (baseline_tpot - engine) + spec
    closed = (1 - alpha ** (k + 1)) / (1 - alpha) * baseline_tpot / step
    assert simulated == pytest.approx(closed, rel=0.02)


@pytest.mark.parametrize("alpha", [0.5, 0.8, 0.9])
@pytest.mark.parametrize("k", [1, 3, 8])
def test_mean_tokens_per_step_matches_closed_form(alpha, k):
    r = run_scenario(_scenario("draft_model", k, alpha, 0.0), trace=TRACE)
    assert r.metrics["mean_acceptance_length"] == pytest.approx(
        expected_tokens_per_step(alpha, k), rel=0.01)


def test_alpha_from_tau_inverts_closed_form():
    for a in (0.1, 0.5, 0.77, 0.95):
        for k in (1, 4, 15):
            assert alpha_from_tau(expected_tokens_per_step(a, k), k) == pytest.approx(a, abs=1e-9)


def test_acceptance_variance_reaches_itl_percentiles():
    """Random accepted lengths spread TPOT across requests; without speculation it is flat."""
    tr = make_trace(200, gap=30.0, prompt=32, output=200)
    on = run_scenario(_scenario("draft_model", 4, 0.7, 0.05), trace=tr).metrics
    off = run_scenario(_scenario(), trace=tr).metrics
    spread_on = on["tpot_s"]["p99"] / on["tpot_s"]["p50"]
    spread_off = off["tpot_s"]["p99"] / off["tpot_s"]["p50"]
    assert spread_on > 1.1 and spread_off < 1.02
