"""Overload detection (simulator/cluster/overload.py): a queue that only grows is stopped
and reported; a sustainable load, or the watch turned off, is untouched."""

from __future__ import annotations

from pathlib import Path

import pytest

from specsim.simulator.cli import main
from specsim.simulator.cluster.engine import run_scenario

CHAT = Path(__file__).resolve().parents[1] / "scenarios" / "chat.yaml"
# chat.yaml's one H100 completes about 28 requests/s at full batch: 280/s is 10x that
OVER = {"workload.synthetic.requests": 60_000, "workload.synthetic.arrival.rate": 280.0,
        "simulation.progress": False}


@pytest.fixture(scope="module")
def overloaded():
    return run_scenario(CHAT, overrides=OVER)


def test_ten_times_capacity_is_stopped_early_and_reported(overloaded):
    m = overloaded.metrics
    o = m["overload"]
    assert o["detected"] and o["queued_requests"] > 10_000
    assert o["arrival_rate_per_s"] > 5 * o["completion_rate_per_s"]
    assert o["oldest_wait_s"] > 120
    # 6 looks 30 s apart after the first: stopped within about 3.5 simulated minutes, not
    # after the ~35 simulated minutes the backlog of 60,000 requests would take
    assert 180 <= m["simulated_time_s"] <= 240
    assert m["simulated_time_s"] == o["at_s"]
    assert m["iterations"] < 10_000
    assert any(n.startswith("overloaded: stopped at") for n in m["notes"])


def test_conservation_holds_at_the_stop(overloaded):
    m, req = overloaded.metrics, overloaded.requests
    assert m["requests_arrived"] == (m["requests_completed"] + m["requests_rejected"]
                                     + m["requests_in_flight"])
    counts = req["status"].value_counts().to_dict()
    assert counts.get("completed", 0) == m["requests_completed"]
    assert counts.get("queued", 0) + counts.get("running", 0) == m["requests_in_flight"]
    assert counts.get("pending", 0) == len(req) - m["requests_arrived"]
    assert (req["output_tokens"] == req["accepted_tokens"] + req["bonus_tokens"]).all()
    assert (req.loc[req.status == "pending", "arrival_s"] >= m["simulated_time_s"]).all()


def test_a_sustainable_load_or_detect_false_runs_to_the_end_unchanged():
    base = {"workload.synthetic.requests": 3000, "simulation.progress": False}
    on = run_scenario(CHAT, overrides=base).metrics
    off = run_scenario(CHAT, overrides={**base, "simulation.overload.detect": False}).metrics
    assert "overload" not in on and on["requests_completed"] == 3000
    on.pop("wall_time_s"), off.pop("wall_time_s")
    assert on == off
    # an overload whose arrivals stop before the watch is sure: the backlog is simulated
    short = run_scenario(CHAT, overrides={**OVER, "workload.synthetic.requests": 3000})
    assert "overload" not in short.metrics
    assert short.metrics["requests_completed"] == 3000


def test_same_seed_same_stop_and_detect_false_simulates_the_backlog():
    again = run_scenario(CHAT, overrides=OVER).metrics
    first = run_scenario(CHAT, overrides=OVER).metrics
    again.pop("wall_time_s"), first.pop("wall_time_s")
    assert again == first
    small = {**OVER, "workload.synthetic.requests": 12_000}
    off = run_scenario(CHAT, overrides={**small, "simulation.overload.detect": False}).metrics
    assert "overload" not in off and off["requests_completed"] == 12_000


def test_the_report_and_the_cli_say_it(tmp_path, capsys):
    args = ["run", str(CHAT), "--quiet", "--out", str(tmp_path / "o")]
    for k, v in OVER.items():
        args += ["--set", f"{k}={v}"]
    assert main(args) == 0
    assert "overloaded: stopped at" in capsys.readouterr().err
    assert "**Overloaded: the run was stopped at" in (tmp_path / "o" / "report.md").read_text()


@pytest.mark.parametrize("key,value", [("window_s", "0"), ("windows", "0"),
                                       ("max_wait_s", "-1"), ("detect", "maybe")])
def test_bad_settings_are_one_line(key, value, capsys):
    assert main(["validate", str(CHAT), "--set", f"simulation.overload.{key}={value}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"simulation.overload.{key}" in err[0]


def test_a_pd_fleet_is_watched_over_both_pools():
    """pd_disaggregated.yaml's 2 prefill + 2 decode workers complete about 38 requests/s;
    at 380/s the watch stops the run at about 210 s simulated instead of simulating the
    ~3,100 s backlog (13 s of wall time here, against about 2); the invariants (run by
    run_scenario: arrivals, link, KV on both pools) hold at the stop."""
    pd_sc = CHAT.with_name("pd_disaggregated.yaml")
    r = run_scenario(pd_sc, overrides={"workload.synthetic.arrival.rate": 380.0,
                                       "workload.synthetic.requests": 90_000,
                                       "simulation.progress": False})
    m, req = r.metrics, r.requests
    o = m["overload"]
    assert o["detected"] and o["queued_requests"] > 10_000
    assert o["arrival_rate_per_s"] > 5 * o["completion_rate_per_s"]
    assert 180 <= m["simulated_time_s"] == o["at_s"] <= 240
    assert m["requests_arrived"] == (m["requests_completed"] + m["requests_rejected"]
                                     + m["requests_in_flight"]) < 90_000
    assert (req.loc[req.status == "pending", "arrival_s"] >= m["simulated_time_s"]).all()
    assert (req["output_tokens"] == req["accepted_tokens"] + req["bonus_tokens"]).all()
