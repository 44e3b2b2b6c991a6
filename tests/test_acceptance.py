"""Acceptance forms, per-request variation, temperature, and the cost/energy accounting."""

from __future__ import annotations

import numpy as np
import pytest

from specsim.errors import ScenarioError
from specsim.simulator import run_scenario
from specsim.simulator.speculation.acceptance import (
    AcceptanceModel,
    alpha_from_tau,
    build_acceptance,
    class_acceptance,
    drafter_multiplier,
    drafter_quantization_table,
    parse_profile,
    profile_catalog,
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


# ---------------------------------------------------------------- acceptance as data (issue 10)


def test_a_profile_used_at_another_k_says_derived_in_the_notes():
    res = _run({"profile": "qwen3-8b-eagle3"}, k=4, trace=make_trace(2, gap=1e4, output=200,
                                                                     cls="code"))
    notes = res.metrics["notes"]
    code = [n for n in notes if n.startswith("acceptance qwen3-8b-eagle3.code:")]
    assert code and "tau 3.36 measured at k=7, applied at k=4: derived" in code[0]
    assert any("measured with eagle3; applied here to method draft_model" in n for n in notes)
    # at the measured k (and the profile's own method) nothing is derived
    same = _run({"profile": "qwen3-8b-eagle3"}, k=7, trace=make_trace(2, gap=1e4, output=200,
                                                                      cls="code"),
                ).metrics["notes"]
    assert not [n for n in same if "qwen3-8b-eagle3.code" in n]


def test_two_temperature_profile_interpolates_between_its_figures():
    # Leviathan et al.: EnDe alpha .75 at T=0, .62 at T=1; at k=1 the acceptance rate is alpha
    rates = []
    for temp in (0.0, 0.5, 1.0):
        tr = make_trace(10, gap=1e4, prompt=32, output=6000, cls="translation")
        tr["temperature"] = temp
        rates.append(_run({"profile": "t5-xxl-t5-small-leviathan"}, k=1,
                          trace=tr).metrics["acceptance_rate"])
    assert rates == pytest.approx([0.75, 0.685, 0.62], abs=0.01)
    # a class whose two figures differ far more than the assumed 17%: its own figures rule
    tr = make_trace(10, gap=1e4, prompt=32, output=6000)
    tr["temperature"] = 0.5
    rate = _run({"by_class": {"chat": {"alpha": 0.8, "temperature_1": {"alpha": 0.4}}}}, k=1,
                trace=tr).metrics["acceptance_rate"]
    assert rate == pytest.approx(0.6, abs=0.01)  # 0.8 x (1 - 0.5 x 0.5); not 0.8 x 0.915
    # the assumed sensitivity would give .75 x (1 - 0.17) = .62 too; a class without
    # temperature-1 figures follows temperature_sensitivity instead
    tr = make_trace(10, gap=1e4, prompt=32, output=6000)
    tr["temperature"] = 1.0
    rate = _run({"alpha": 0.75, "temperature_sensitivity": 0.4}, k=1,
                trace=tr).metrics["acceptance_rate"]
    assert rate == pytest.approx(0.75 * 0.6, abs=0.01)
    dflash = build_acceptance({"profile": "qwen3-8b-dflash"}, 0).for_class("math")
    assert dflash.t1_ratio == pytest.approx(alpha_from_tau(6.04, 15) / alpha_from_tau(6.55, 15))


def test_profile_measured_at_temperature_one_scales_from_there():
    model = build_acceptance({"profile": "glm-5.2-mtp-inferencex"}, 0)
    ids = np.arange(3)
    _, scale = model.request_scale(ids, np.array(["code"] * 3, dtype=object),
                                   np.array([np.nan, 1.0, 0.0]))
    # no temperature given, or the measured one: as measured; temperature 0: 1 / (1 - 0.17)
    assert scale.tolist() == pytest.approx([1.0, 1.0, 1 / 0.83])


def test_drafter_quantization_lowers_alpha_by_its_table_and_says_so():
    tr = make_trace(10, gap=1e4, prompt=32, output=6000)
    base = _run({"alpha": 0.8}, k=1, trace=tr)
    sc = {"model": "Llama-3.1-8B", "hardware": {"accelerator": "H100-SXM"},
          "speculation": {"method": "draft_model", "k": 1, "acceptance": {"alpha": 0.8},
                          "draft_cost": {"ratio": 0.05},
                          "drafter_quantization": {"weights": "int4"}},
          "workload": {}}
    res = run_scenario(sc, trace=tr)
    table = drafter_quantization_table()
    mult = table["int4"]["alpha_multiplier"]
    assert mult < 1 and "assumed" in table["int4"]["source"]
    assert res.metrics["acceptance_rate"] == pytest.approx(0.8 * mult, abs=0.006)
    assert base.metrics["acceptance_rate"] == pytest.approx(0.8, abs=0.006)
    assert any(n.startswith(f"drafter weights int4: alpha x {mult:g}") for n in
               res.metrics["notes"])
    assert not any("drafter weights" in n for n in base.metrics["notes"])
    # fp4 is an alias of nvfp4; an explicit multiplier wins over the table
    assert drafter_multiplier("fp4", "t")[0] == table["nvfp4"]["alpha_multiplier"]
    sc["speculation"]["acceptance"] = {"alpha": 0.8, "drafter_alpha_multiplier": 0.5}
    assert run_scenario(sc, trace=tr).metrics["acceptance_rate"] == pytest.approx(0.4, abs=0.006)


def test_tau_by_k_reproduces_every_measured_tau():
    curve = {1: 1.84, 2: 2.50, 3: 2.99, 4: 3.33, 5: 3.61, 6: 3.78, 7: 3.91, 8: 4.06}  # GLM-5.2
    acc = class_acceptance({"tau_by_k": curve}, "x")
    for k, tau in list(curve.items())[:7]:
        assert acc.tau_at(k) == pytest.approx(tau, abs=1e-9)
    # 3.91 -> 4.06 needs S_8 = 0.15 > S_7 = 0.13: a chain cannot; capped, and said so
    assert acc.tau_at(8) == pytest.approx(3.91 + 0.13) and "tau at k=8 grew more" in acc.notes[0]
    m = _run({"tau_by_k": curve}, k=3).metrics
    assert m["mean_acceptance_length"] == pytest.approx(2.99, rel=0.02)
    # gaps: one conditional alpha per gap still hits both ends
    gap = class_acceptance({"tau_by_k": {7: 3.44, 11: 3.878, 15: 4.198}}, "x")
    assert [gap.tau_at(k) for k in (7, 11, 15)] == pytest.approx([3.44, 3.878, 4.198])
    # a tau that falls as k grows (noise) is left out, and said so
    noisy = class_acceptance({"tau_by_k": {1: 1.9, 2: 2.6, 3: 2.5, 4: 2.7}}, "x")
    assert noisy.tau_at(4) == pytest.approx(2.7) and 2.6 < noisy.tau_at(3) < 2.7
    assert "tau at k=3 is no higher than at a shorter draft" in noisy.notes[0]
    with pytest.raises(ScenarioError, match=r"x.tau_by_k.2: expected a number at most 3, got 3.5"):
        class_acceptance({"tau_by_k": {1: 1.5, 2: 3.5}}, "x")


def test_rate_by_position_is_unconditional():
    acc = class_acceptance({"rate_by_position": [0.57, 0.34, 0.21], "at_k": 3}, "x")
    assert acc.survival(3) == pytest.approx([0.57, 0.34, 0.21])
    assert acc.derivation(5) == (acc.derivation(5)[0], True)
    assert "position 4..5 holds the last measured alpha" in acc.derivation(5)[0]
    with pytest.raises(ScenarioError, match=r"x.rate_by_position\[1\]: expected rates that do "
                                            "not increase"):
        class_acceptance({"rate_by_position": [0.3, 0.5]}, "x")


def test_every_bundled_profile_parses_and_cites_a_source():
    cat = profile_catalog()
    assert len(cat) >= 25
    for name, entry in cat.items():
        assert entry.get("source") and entry.get("method"), name
        classes, default = parse_profile(name, entry, name)
        assert classes or default is not None
    # spot checks against shared/REFERENCES.md
    v13 = parse_profile("v", cat["vicuna-13b-eagle3"], "v")[0]
    assert v13["code"].tau_at(8) == pytest.approx(7.54)
    ng = parse_profile("n", cat["llama4-scout-ngram5-trtllm"], "n")[0]
    assert ng["translation"].tau_at(7) == pytest.approx(3.62)
    assert ng["translation"].tau_at(11) == pytest.approx(4.092)
    mc = parse_profile("m", cat["minicpm3-4b-eagle3"], "m")[1]
    assert mc.survival(5) == pytest.approx([0.57, 0.34, 0.21, 0.14, 0.10])
    for prec, entry in drafter_quantization_table().items():
        assert "alias" in entry or entry.get("source"), prec
