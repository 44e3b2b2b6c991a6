"""specsim plan --day: a day curve (from a file, a trace or the scenario), the fleet per
window at the least cost with switches priced, and a replay of the day that checks it."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from specsim.errors import ScenarioError
from specsim.simulator.cli import main
from specsim.simulator.planning.day import (
    DayPlanner,
    Shape,
    SwitchParams,
    totals,
    window_mixes,
    windows_frame,
)
from specsim.simulator.planning.plan import Planner
from specsim.traces.arrivals import parse_arrivals
from specsim.traces.diurnal import ALL, curve_from_trace, parse_curve, read_day
from specsim.traces.errors import TraceError
from tests.conftest import REPO

CHAT = str(REPO / "scenarios" / "chat.yaml")
SLOS = {"tpot_p99": 0.02, "ttft_p99": 1.0}
SMALL = {"requests": 80, "rel_tol": 0.2, "duration_s": 10.0}  # a few hundred requests a run
SPACE = [{"speculation.method": "none"}, {"speculation.method": "eagle3"}]


def _day(rates: list[float], hours: float = 1.0, **kw):
    curve = parse_curve({"rates": rates, "period_s": len(rates) * hours * 3600}, "day.yaml")
    planner = DayPlanner(CHAT, SLOS, curve, hours * 3600, **SMALL, **kw)
    return planner


# ------------------------------------------------------------------- the curve
def test_a_curve_file_as_a_list_as_hour_pairs_and_per_class():
    listed = parse_curve({"rates": [2.0, 4.0, 6.0, 8.0], "period_s": 4 * 3600}, "c.yaml")
    edges, rates = listed.windows(7200.0)  # two slices per window: their mean
    assert list(edges) == [0.0, 7200.0, 14400.0] and np.allclose(rates[ALL], [3.0, 7.0])
    held = parse_curve({"rates": {0: 1.0, 6: 5.0, 18: 2.0}}, "c.yaml")  # held to the next hour
    _, r = held.windows(3600.0)
    assert len(r[ALL]) == 24 and np.allclose(r[ALL], [1.0] * 6 + [5.0] * 12 + [2.0] * 6)
    per = parse_curve({"classes": {"chat": [3.0, 1.0], "code": [1.0, 3.0]},
                       "period_s": 7200}, "c.yaml")
    _, r = per.windows(3600.0)
    assert np.allclose(r["chat"] + r["code"], [4.0, 4.0])
    assert window_mixes(r) == [{"chat": 0.75, "code": 0.25}, {"chat": 0.25, "code": 0.75}]


def test_the_scenarios_own_diurnal_process_averages_per_window():
    sine = parse_arrivals({"process": "diurnal", "rate": 10.0, "amplitude": 0.5,
                           "period_s": 86400}, "arrival")
    rates = sine.window_rates(np.arange(25) * 3600.0)
    assert len(rates) == 24 and rates.mean() == pytest.approx(10.0, rel=1e-9)
    peak = 10.0 * (1 + 0.5 * math.sin(math.pi / 12) / (math.pi / 12))  # an hour from the peak
    assert rates.max() == pytest.approx(peak, rel=1e-6)


def test_a_trace_is_counted_per_window_and_class(tmp_path):
    t = np.concatenate([np.linspace(0, 99, 50), np.linspace(100, 199.9, 150)])
    df = pd.DataFrame({"arrival_s": t, "prompt_tokens": 100, "output_tokens": 50,
                       "workload_class": ["chat"] * 100 + ["code"] * 100})
    path = tmp_path / "t.csv"
    df.to_csv(path, index=False)
    curve = read_day(path, 100.0)
    _, r = curve.windows(100.0)
    span = t[-1]  # windows end at the last arrival: two of span/2
    assert set(r) == {"chat", "code"}
    assert np.allclose(r["chat"], [50 / (span / 2), 50 / (span / 2)], rtol=0.02)
    assert np.allclose(r["code"], [0.0, 100 / (span / 2)], rtol=0.02)
    one = curve_from_trace(df.assign(workload_class="default"), 100.0, "t")
    assert list(one.classes) == [ALL]  # no classes: the scenario keeps its own


# ------------------------------------------------------------------- the plan and its replay
def test_the_day_plan_never_violates_the_slo_in_its_own_replay():
    planner = _day([6.0, 30.0, 60.0, 20.0])
    plan = planner.plan(SPACE)
    planner.replay(plan)
    for w in plan.windows:
        row = plan.capacity[(w.config, None)]
        # capacity once per configuration: a window needs ceil(rate / R) replicas, each
        # then carries at most R, and the replay at that load meets the SLOs
        assert w.replicas == max(math.ceil(w.rate / row.replica_rate - 1e-9), 1) + w.added
        assert w.replay.ok, (w.index, w.replay.why)
        assert w.first.ok and w.added == 0  # as planned, not only after the replay's fixes
        assert w.replay.per_replica_rate <= row.replica_rate
        assert w.replay.requests >= SMALL["requests"]
    tot = totals(plan)
    assert tot["plan"]["slo_minutes"] == 0.0 == tot["plan"]["slo_minutes_as_planned_per_day"]
    assert all(w.replay.ok for w in plan.static)


def test_a_window_whose_replay_misses_gets_a_replica_and_is_replayed():
    """Rule 5: the plan in the loop. A window given too few replicas (one for 90 req/s,
    about twice a replica's capacity) misses in its replay, grows until it meets the SLOs,
    and says so; its neighbours' switches are priced again."""
    planner = _day([10.0, 90.0])
    plan = planner.plan(SPACE)
    planned = plan.windows[1].replicas
    plan.windows[1].replicas = 1
    planner.replay(plan)
    w = plan.windows[1]
    assert not w.first.ok and w.replay.ok
    assert w.added >= 1 and w.replicas == 1 + w.added <= planned + 1
    assert plan.windows[0].switch_s == 0.0 and plan.windows[1].switch_s > 0  # up at 1, down free
    tot = totals(plan)
    assert tot["plan"]["slo_minutes_as_planned_per_day"] > 0 == tot["plan"]["slo_minutes"]


def test_the_cheapest_path_switches_hardware_when_the_switch_pays():
    """Rule 3 on its own (no simulation): an A100 replica ($2/h, 20 req/s) is cheaper at
    the trough, H100s ($3.25/h, 43 req/s) at the peak; the plan switches when the switches
    cost less than they save, and stays on one configuration when they do not."""
    a100 = Shape(1, 2.0, 80.0, 16e9, 0.0, 32e9, ("A100", "m", 1, "bf16"))
    h100 = Shape(1, 3.25, 100.0, 16e9, 0.0, 64e9, ("H100", "m", 1, "bf16"))
    shapes = {0: a100, 1: h100}
    need = {(0, 0): 1, (0, 1): 6, (0, 2): 1, (1, 0): 1, (1, 1): 3, (1, 2): 1}
    hours = np.array([8.0, 8.0, 8.0])
    cheap = _day([10.0, 120.0, 10.0], params=SwitchParams(scale_up_delay_s=60.0))
    assert cheap._cheapest_path([0, 1], need, shapes, hours) == [0, 1, 0]
    dear = _day([10.0, 120.0, 10.0], params=SwitchParams(scale_up_delay_s=8 * 3600.0))
    path = dear._cheapest_path([0, 1], need, shapes, hours)
    assert len(set(path)) == 1  # switching costs more than the 5.25 $ a window it saves


def test_a_replica_meets_the_slo_below_its_capacity():
    """Rule 1's premise, checked: below the capacity found, a lower rate passes too."""
    planner = Planner(CHAT, SLOS, 60.0, requests=80, rel_tol=0.2, duration_s=10.0)
    row = planner.plan_one({"speculation.method": "none"})
    for share in (0.9, 0.5, 0.2, 0.05):
        assert planner.probe({"speculation.method": "none"}, share * row.replica_rate).ok


def test_a_flat_day_is_the_static_plan_and_specsim_plans_fleet():
    planner = _day([40.0, 40.0, 40.0])
    plan = planner.plan(SPACE)
    first = plan.windows[0]
    assert all((w.config, w.replicas) == (first.config, first.replicas) for w in plan.windows)
    assert all(w.switch_s == 0.0 for w in plan.windows)
    assert [(w.config, w.replicas) for w in plan.static] == [(first.config, first.replicas)] * 3
    ranked = Planner(CHAT, SLOS, 40.0, requests=80, rel_tol=0.2, duration_s=10.0).run(SPACE)
    assert plan.configs[first.config] == ranked[0].config
    assert first.replicas == ranked[0].replicas
    tot = totals(plan)
    assert tot["plan"]["usd"] == pytest.approx(tot["static"]["usd"], rel=1e-12)


def test_a_peaked_day_uses_more_replicas_at_the_peak_and_costs_less_than_the_static_fleet():
    planner = _day([5.0, 90.0, 10.0])
    plan = planner.plan(SPACE)
    planner.replay(plan)
    reps = [w.replicas for w in plan.windows]
    assert reps[1] > reps[0] and reps[1] > reps[2]
    assert [w.replicas for w in plan.static] == [reps[1]] * 3
    tot = totals(plan)
    assert tot["plan"]["usd"] < tot["static"]["usd"]
    assert tot["plan"]["kwh"] < tot["static"]["kwh"]
    assert tot["plan"]["switches"] == 1 and tot["plan"]["switch_usd"] > 0


def test_switch_costs_are_the_closed_form():
    p = SwitchParams(scale_up_delay_s=100.0, warmup_s=30.0, host_gb_s=None)
    planner = _day([5.0], params=p)
    a = Shape(1, 3.25, 100.0, 20e9, 0.0, 50e9, ("H100", "m", 1, "bf16"))
    b = Shape(1, 3.25, 100.0, 21e9, 1e9, 50e9, ("H100", "m", 1, "bf16"))
    other = Shape(1, 2.0, 80.0, 20e9, 0.0, 25e9, ("A100", "m", 1, "bf16"))
    start_b = 100.0 + 21e9 / 50e9 + 30.0
    assert planner.switch_s(a, 0, 2, a, 0, 5)[0] == pytest.approx(3 * (100.0 + 0.4 + 30.0))
    assert planner.switch_s(a, 0, 5, a, 0, 2)[0] == 0.0  # scaling down is free
    # a speculation change on the same hardware: the kept replicas reload the drafter only
    assert planner.switch_s(a, 0, 2, b, 1, 3)[0] == pytest.approx(2 * (1e9 / 50e9 + 30.0)
                                                                  + start_b)
    assert planner.switch_s(a, 0, 2, other, 2, 3)[0] == pytest.approx(
        3 * (100.0 + 20e9 / 25e9 + 30.0))  # other hardware: a new fleet


def test_a_curve_per_class_plans_each_mix_with_a_speculation_choice_per_class():
    curve = parse_curve({"classes": {"chat": [10.0, 10.0], "code": [0.0, 10.0]},
                         "period_s": 7200}, "c.yaml")
    planner = DayPlanner(CHAT, SLOS, curve, 3600.0, **SMALL)
    no_code_drafts = {"speculation.per_class": {"code": {"method": "none"}}}
    plan = planner.plan([{}, no_code_drafts])
    chat, half = (("chat", 1.0),), (("chat", 0.5), ("code", 0.5))
    assert sorted(plan.capacity) == sorted([(0, chat), (0, half), (1, chat), (1, half)])
    # without code traffic, code's own choice changes nothing
    assert plan.capacity[(0, chat)].replica_rate == plan.capacity[(1, chat)].replica_rate
    planner.replay(plan)
    assert all(w.replay.ok for w in plan.windows)
    assert plan.windows[1].mix == {"chat": 0.5, "code": 0.5}


def test_a_window_without_traffic_keeps_one_idle_replica():
    planner = _day([0.0, 20.0])
    plan = planner.plan(SPACE[:1])
    planner.replay(plan)
    w = plan.windows[0]
    assert w.replicas == 1 and w.replay.ok and w.replay.requests == 0
    df = windows_frame(plan)
    idle_kwh = plan.shapes[w.config].idle_w_per_device * 1.0 / 1000  # one device, one hour
    assert df["kwh"][0] == pytest.approx(idle_kwh, rel=1e-12)


def test_a_pd_split_is_refused_per_window():
    with pytest.raises(ScenarioError, match="PD splits"):
        _day([5.0, 10.0]).plan([{"disaggregation": {"prefill": {"count": 1},
                                                    "decode": {"count": 1}}}])


# ------------------------------------------------------------------- the command
def test_cli_plan_day_writes_the_table_totals_and_plot(tmp_path):
    curve = tmp_path / "day.yaml"
    curve.write_text("period_s: 10800\nrates: [5, 60, 10]\n")
    out = tmp_path / "day"
    assert main(["plan", CHAT, "--slo", "tpot_p99=0.02", "--slo", "ttft_p99=1", "--day",
                 str(curve), "--requests", "80", "--duration", "10", "--tolerance", "0.2",
                 "--quiet", "--out", str(out)]) == 0
    df = pd.read_csv(out / "day.csv")
    assert len(df) == 3 and df["slo_ok"].all()
    assert df["replicas"].tolist()[1] > df["replicas"].tolist()[0]
    info = json.loads((out / "day.json").read_text())
    assert info["totals"]["plan"]["usd_per_day"] < info["totals"]["static"]["usd_per_day"]
    assert "assumed" in info["switch_params"]["scale_up_delay_s"]
    report = (out / "report.md").read_text()
    assert "## Totals" in report and "| 2 | 2:00-3:00 | 10 | the scenario |" in report
    assert (out / "day.png").stat().st_size > 10_000


def test_cli_day_from_the_scenarios_diurnal_arrival(tmp_path):
    sc = tmp_path / "sc.yaml"
    sc.write_text((REPO / "scenarios" / "chat.yaml").read_text().replace(
        "arrival: {process: poisson, rate: 5.5}",
        "arrival: {process: diurnal, curve: [4, 20], period_s: 7200}"))
    out = tmp_path / "o"
    assert main(["plan", str(sc), "--slo", "tpot_p99=0.02", "--day", "--requests", "80",
                 "--duration", "10", "--tolerance", "0.2", "--quiet", "--out", str(out)]) == 0
    df = pd.read_csv(out / "day.csv")
    assert df["rate_req_s"].tolist() == [4.0, 20.0] and df["slo_ok"].all()
    assert main(["plan", str(sc), "--slo", "tpot_p99=0.02", "--day", "--qps", "24",
                 "--requests", "80", "--duration", "10", "--tolerance", "0.2", "--quiet",
                 "--out", str(out), "--force"]) == 0  # the same shape at twice the volume
    assert pd.read_csv(out / "day.csv")["rate_req_s"].tolist() == [8.0, 40.0]


@pytest.mark.parametrize("text, needle", [
    ("rates: []\n", "rates: expected a non-empty list"),
    ("rates: [1, -2]\n", "rates: expected a non-empty list"),
    ("rates: {3: 1.0}\n", "expected hour 0"),
    ("rates: {0: 1.0, 30: 2.0}\n", "expected an hour from 0 to 23"),
    ("rates: {0: fast}\n", "rates.0: expected a rate"),
    ("rates: [0, 0]\n", "every rate is 0"),
    ("rates: [1]\nclasses: {chat: [1]}\n", "exactly one of rates"),
    ("rate: [1, 2]\n", "expected exactly one of rates"),
    ("rates: [1, 2]\nperiod: 3600\n", "period"),
    ("- 1\n- 2\n", "expected a mapping"),
    ("rates: [1, 2\n", "line"),
])
def test_bad_curve_input_is_one_line_exit_2(tmp_path, capsys, text, needle):
    curve = tmp_path / "bad.yaml"
    curve.write_text(text)
    out = tmp_path / "o"
    assert main(["plan", CHAT, "--slo", "tpot_p99=0.02", "--day", str(curve), "--quiet",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and "bad.yaml" in err[0], err
    assert not out.exists()


@pytest.mark.parametrize("args, needle", [
    (["--day", "missing.yaml"], "no such curve file"),
    (["--day", "missing.csv"], "no such trace file"),
    ([], "--qps: required"),
])
def test_bad_day_flags_are_one_line_exit_2(tmp_path, capsys, args, needle):
    assert main(["plan", CHAT, "--slo", "tpot_p99=0.02", "--quiet", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


@pytest.mark.parametrize("window", ["0", "soon", "0h", "inf", "1d"])
def test_a_bad_window_is_one_line_exit_2(capsys, window):
    with pytest.raises(SystemExit) as exc:
        main(["plan", CHAT, "--slo", "tpot_p99=0.02", "--day", "--window", window])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and "expected a window length" in err[0]


def test_a_poisson_scenario_without_a_curve_is_refused():
    with pytest.raises(TraceError, match="needs a diurnal arrival process"):
        from specsim.traces.diurnal import curve_from_arrivals

        curve_from_arrivals(parse_arrivals({"process": "poisson", "rate": 1.0}, "a"), "sc")
