"""Sensitivity and break-even (simulator/planning/sensitivity.py, issue 25 part 3)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from specsim.simulator.cli import main
from specsim.simulator.planning import sensitivity as sens

DATA = Path(__file__).parent / "data"
PAYS = DATA / "advise_pays.yaml"  # batch 1, tau 4 at k 4: speculation pays
CHAT = Path(__file__).parents[1] / "scenarios" / "chat.yaml"


def test_inputs_have_bands_and_sources():
    with sens.Model(PAYS, requests=20) as m:
        names = [i.name for i in m.inputs]
        for want in ("eta_compute", "engine_fixed_s", "spec_step_overhead_s",
                     "draft_pass_overhead_s", "tau.code", "price_usd_per_hour", "power_max_w"):
            assert want in names
        for i in m.inputs:
            assert i.low <= i.nominal <= i.high and i.low < i.high, i
            assert i.lo_bound <= i.low and i.high <= i.hi_bound, i
            assert i.source
        tau = m.input("tau.code")  # a point value: the assumed band, labelled
        assert tau.assumed and "assumed" in tau.source
        assert tau.nominal == pytest.approx(4.0)
        # the H100 catalog's price range, with its date (not assumed)
        price = m.input("price_usd_per_hour")
        assert (price.low, price.high) == (2.5, 4.0) and not price.assumed


def test_break_even_of_tau_makes_the_two_choices_equal():
    """The issue's test: at its break-even value, speculating and not give equal TPOT
    (re-simulated in a fresh model, same seed)."""
    with sens.Model(PAYS, output="tpot_mean", requests=40) as m:
        be = sens.break_even(m, m.input("tau.code"))
    assert be.value is not None and 1.0 < be.value < 4.0, be
    with sens.Model(PAYS, output="tpot_mean", requests=40) as fresh:
        at = fresh.evaluate({"tau.code": be.value})
        below = fresh.evaluate({"tau.code": be.value * 0.9})
        above = fresh.evaluate({"tau.code": min(be.value * 1.1, 5.0)})
    assert at == pytest.approx(be.gain, abs=1e-12)  # the same runs: bit for bit
    assert abs(at - 1.0) < 0.02
    assert below < 1.0 < above  # it is a flip, not a plateau at 1


def test_break_even_of_a_cost_parameter_is_continuous():
    """A time parameter moves the step times continuously: the gain at its break-even is 1
    to the bisection's tolerance (chat at 40 req/s: batches large enough for a drafter
    pass's floor to cancel the gain inside the search range)."""
    busy = {"workload.synthetic.arrival.rate": 40.0}
    with sens.Model(CHAT, output="tpot_mean", requests=100, overrides=busy) as m:
        inp = m.input("draft_pass_overhead_s")
        be = sens.break_even(m, inp)
    assert be.value is not None and inp.lo_bound < be.value < inp.hi_bound
    assert not be.within_band  # chat's band (+-50%) does not reach it
    with sens.Model(CHAT, output="tpot_mean", requests=100, overrides=busy) as fresh:
        assert abs(fresh.evaluate({inp.name: be.value}) - 1.0) < 2e-3


def test_no_break_even_says_why():
    with sens.Model(PAYS, output="tpot_mean", requests=20) as m:
        price = sens.break_even(m, m.input("price_usd_per_hour"))
        assert price.value is None and "does not move" in price.reason
        eta = sens.break_even(m, m.input("eta_memory"))
        assert eta.value is None and "stays above 1" in eta.reason


def test_tornado_ranks_the_dominant_input_first():
    """$/M tokens at a light load: the fleet is paid for the simulated time whatever the
    cost model says, so the price decides it, exactly in proportion."""
    with sens.Model(PAYS, output="usd_per_mtok", versus=None, requests=40) as m:
        an = sens.analyse(m)
        price = m.input("price_usd_per_hour")
    top = an.bars[0]
    assert top.input.name == "price_usd_per_hour"
    assert top.at_high / top.at_low == pytest.approx(price.high / price.low, rel=1e-9)
    assert top.swing > 2 * an.bars[1].swing
    assert all(b.break_even is None for b in an.bars)  # an absolute output: no break-even


def test_morris_ranks_what_moves_tpot(tmp_path):
    out = tmp_path / "sens"
    rc = main(["sensitivity", str(PAYS), "--output", "tpot_mean", "--method", "morris",
               "--samples", "2", "--requests", "30", "--out", str(out)])
    assert rc == 0
    df = pd.read_csv(out / "sensitivity.csv")
    assert {"input", "nominal", "low", "high", "band_source", "output_at_low",
            "output_at_high", "break_even", "mu_star", "sigma"} <= set(df.columns)
    row = df.set_index("input")
    assert row.loc["price_usd_per_hour", "mu_star"] == 0.0  # price cannot move TPOT
    assert row.loc["tau.code", "mu_star"] > 0.1
    assert df["rank"].tolist() == list(range(1, len(df) + 1))
    assert (out / "tornado.png").stat().st_size > 10_000


@pytest.mark.parametrize("args, needle", [
    (["--output", "tpot_p42"], "--output tpot_p42: expected one of"),
    (["--method", "anova"], "--method anova: expected one of"),
    (["--versus", "speculation.k=lots"], "speculation.k"),
    (["--absolute", "--versus", "speculation.k=2"], "--versus: not with --absolute"),
    (["--method", "sobol", "--samples", "3"], "--samples 3: Sobol needs a power of two"),
])
def test_bad_input_is_one_line_exit_2(args, needle, tmp_path, capsys):
    out = tmp_path / "never"
    rc = main(["sensitivity", str(PAYS), "--requests", "20", *args, "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith("specsim: error:") and needle in err
    assert not out.exists()


def test_missing_scenario_is_one_line(tmp_path, capsys):
    rc = main(["sensitivity", str(tmp_path / "nope.yaml")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "nope.yaml" in err


def test_gain_is_oriented_so_above_one_is_better():
    """TPOT gain = without / with; goodput gain = with / without (rule 1)."""
    with sens.Model(PAYS, output="tpot_mean", requests=30) as m:
        g = m.evaluate({})
        a = m.metric(m.run({})[0])
        b = m.metric(m.run({"speculation.method": "none"})[0])
        assert g == pytest.approx(b / a) and g > 1.5
    with sens.Model(PAYS, output="throughput", requests=30) as m:
        a = m.metric(m.run({})[0])
        b = m.metric(m.run({"speculation.method": "none"})[0])
        assert m.evaluate({}) == pytest.approx(a / b)
        assert math.isfinite(a) and a > 0


def test_capacity_is_the_planners_and_its_tau_break_even_flips_it(monkeypatch):
    """Rule 7: a plan's answer. The capacity per replica is the planner's own bisection
    (the same rate ``Planner.plan_one`` finds for the same scenario, tolerance and range);
    speculation raises it within a TPOT SLO on chat; tau's break-even (re-simulated) puts
    the two capacities level to the capacity's resolution, and below it no speculation
    serves more."""
    from specsim.simulator.planning.plan import Planner

    monkeypatch.setattr(sens, "CAPACITY_DURATION_S", 15.0)
    slos = {"tpot_p99": 0.02, "ttft_p99": 0.5}  # a TTFT SLO: a queue that grows misses it
    with sens.Model(CHAT, output="capacity", slos=slos, requests=60) as m:
        spec = m.capacity(m.settings_overrides({}))
        planner = Planner(str(CHAT), slos, qps=16 * 5.5, requests=60, rel_tol=sens.CAPACITY_TOL,
                          first_rate=0.25 * 5.5, duration_s=15.0)  # chat.yaml: 5.5 req/s
        row = planner.plan_one({"simulation.record_iterations": False})
        assert spec == pytest.approx(row.replica_rate, rel=1e-12)
        gain = m.evaluate({})
        assert gain > 1.02
        tau = m.input("tau.chat")
        be = sens.break_even(m, tau)
        assert be.value is not None and 1.0 < be.value < tau.nominal
        assert abs(be.gain - 1.0) <= 2 * sens.CAPACITY_TOL + 0.01
        assert m.evaluate({"tau.chat": 1.05}) < 1.0  # barely accepting: speculation loses


def test_capacity_needs_slos_and_a_synthetic_workload(tmp_path, capsys):
    with pytest.raises(sens.ScenarioError, match="--slo"):
        sens.Model(CHAT, output="capacity")
    with pytest.raises(sens.ScenarioError, match="--slo"):
        sens.Model(CHAT, output="tpot_p99", slos={"tpot_p99": 0.02})
    rc = main(["sensitivity", str(CHAT), "--output", "capacity", "--slo", "tpot_p99=abc"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "tpot_p99=abc" in err
