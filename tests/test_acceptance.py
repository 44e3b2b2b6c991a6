"""Acceptance forms, per-request variation, temperature, and the cost/energy accounting."""

from __future__ import annotations

import numpy as np
import pytest

from specsim.errors import ScenarioError
from specsim.simulator import run_scenario
from specsim.simulator.speculation.acceptance import (
    AcceptanceModel,
    build_acceptance,
    class_acceptance,
)
from tests.conftest import make_trace

TRACE = make_trace(10, gap=1e4, prompt=32, output=6000)


def _run(acceptance, k=4, trace=TRACE, **extra):
    sc = {"model": "Llama-3.1-8B", "hardware": {"accelerator": "H100-SXM"},
          "speculation": {"method": "draft_model", "k": k, "acceptance": acceptance,
                          "draft_cost": {"ratio": 0.05}},
          "workload": {}, **extra}
    return run_scenario(sc, trace=trace)


def test_position_dependent_alpha_gives_the_survival_sum():
    alphas = [0.95, 0.85, 0.7, 0.5]
    tau = 1 + np.cumprod(alphas).sum()
    m = _run({"alpha_by_position": alphas}).metrics
    assert m["mean_acceptance_length"] == pytest.approx(tau, rel=0.01)


def test_histogram_reproduces_its_distribution():
    hist = [10, 20, 30, 15, 25]  # accepted 0..4 at k=4
    res = _run({"histogram": hist, "at_k": 4})
    p = np.array(hist) / sum(hist)
    assert res.metrics["mean_acceptance_length"] == pytest.approx(1 + (p * np.arange(5)).sum(),
                                                                 rel=0.01)
    # at k=2 the same profile truncates: accepted = min(drawn, 2)
    res2 = _run({"histogram": hist, "at_k": 4}, k=2)
    expect = 1 + p[1] * 1 + p[2:].sum() * 2
    assert res2.metrics["mean_acceptance_length"] == pytest.approx(expect, rel=0.01)


def test_tau_at_k_profile_reproduces_tau_at_that_k():
    m = _run({"tau": 3.36, "at_k": 7}, k=7).metrics
    assert m["mean_acceptance_length"] == pytest.approx(3.36, rel=0.01)


def test_per_request_variation_spreads_acceptance_across_requests():
    tr = make_trace(300, gap=50.0, prompt=32, output=400)
    flat = _run({"alpha": 0.7}, trace=tr).requests
    varied = _run({"alpha": 0.7, "per_request": {"concentration": 5}}, trace=tr).requests
    rate = lambda r: r.accepted_tokens / r.drafted_tokens  # noqa: E731
    assert rate(varied).std() > 3 * rate(flat).std()
    # E[accepted]/k = mean over j of E[alpha^j]; Beta moments: prod (a + r) / (a + b + r)
    a, b = 0.7 * 5, 0.3 * 5
    moments = np.cumprod([(a + r) / (a + b + r) for r in range(4)])
    assert rate(varied).mean() == pytest.approx(moments.mean(), abs=0.02)
    assert rate(flat).mean() == pytest.approx(np.mean(0.7 ** np.arange(1, 5)), abs=0.02)


def test_temperature_lowers_acceptance():
    hot = make_trace(10, gap=1e4, prompt=32, output=3000)
    hot["temperature"] = 1.0
    cold = _run({"alpha": 0.8}).metrics["acceptance_rate"]
    warm = _run({"alpha": 0.8}, trace=hot).metrics["acceptance_rate"]
    assert warm < cold * 0.95


def test_profiles_by_class_and_missing_class_error():
    model = build_acceptance({"profile": "qwen3-8b-dflash"}, seed=0)
    assert model.for_class("code").mean_alpha > model.for_class("chat").mean_alpha
    with pytest.raises(ScenarioError, match="no acceptance given for workload class 'poetry'"):
        model.for_class("poetry")
    with pytest.raises(ScenarioError, match="unknown acceptance profile"):
        build_acceptance({"profile": "nope"}, seed=0)
    with pytest.raises(ScenarioError, match="exactly one of"):
        class_acceptance({"alpha": 0.5, "tau": 2.0, "at_k": 3}, "x")
    with pytest.raises(ScenarioError, match=r"x.tau: expected a value in \[1, k\+1\]"):
        class_acceptance({"tau": 9.0, "at_k": 3}, "x")


def test_accepted_counts_leading_successes():
    u = np.array([0.05, 0.5, 0.95, 0.5])
    cond = np.array([[0.9, 0.9, 0.9]] * 4)
    k = np.array([3, 3, 3, 1])
    # survival 0.9, 0.81, 0.729
    assert AcceptanceModel.accepted(u, cond, k).tolist() == [3, 3, 0, 1]


def test_cost_and_energy_follow_their_definitions():
    sc_extra = {"cost": {"price_usd_per_hour": 4.0, "power_idle_w": 100.0, "power_max_w": 700.0}}
    tr = make_trace(200, rate=2.0, prompt=(50, 500), output=(50, 300))
    m = _run({"alpha": 0.7}, trace=tr, **sc_extra).metrics
    hours = m["simulated_time_s"] / 3600
    assert m["cost_usd_per_million_output_tokens"] == pytest.approx(
        4.0 * hours / m["output_tokens"] * 1e6)
    avg_power = m["fleet"]["average_power_w"]
    assert 100.0 < avg_power < 700.0
    assert m["energy_j_per_output_token"] == pytest.approx(
        avg_power * m["simulated_time_s"] / m["output_tokens"])
    # an idle fleet burns idle power: a sparser trace costs more energy per token
    sparse = make_trace(200, rate=0.2, prompt=(50, 500), output=(50, 300))
    m2 = _run({"alpha": 0.7}, trace=sparse, **sc_extra).metrics
    assert m2["energy_j_per_output_token"] > m["energy_j_per_output_token"]
    assert m2["fleet"]["average_power_w"] < avg_power
