"""specsim plan: bisection finds the largest sustainable load per replica, fleets are sized
and ranked by cost, and rejected configurations say why."""

from __future__ import annotations

import pytest

from specsim.errors import ScenarioError
from specsim.simulator.cli import main
from specsim.simulator.planning.plan import Planner, parse_slos, rank, space_points
from tests.conftest import REPO

CHAT = str(REPO / "scenarios" / "chat.yaml")
SLOS = {"tpot_p99": 0.02, "ttft_p99": 1.0}


def test_bisection_brackets_the_largest_sustainable_rate():
    planner = Planner(CHAT, SLOS, qps=200.0, requests=80, rel_tol=0.2, duration_s=20.0)
    row = planner.plan_one({"speculation.method": "none"})
    assert row.feasible and row.replicas > 1
    assert planner.probe({"speculation.method": "none"}, row.replica_rate).ok
    assert not planner.probe({"speculation.method": "none"}, row.replica_rate * 1.45).ok
    assert row.replicas == -(-200.0 // row.replica_rate)
    assert row.devices == row.replicas and row.usd_per_hour > 0
    assert all(m >= 1.0 for m in row.margins.values())  # the sized fleet meets the SLOs


def test_rejected_configurations_say_why():
    planner = Planner(CHAT, SLOS, qps=10.0, requests=60)
    too_big = planner.plan_one({"model": "Llama-3.1-70B", "hardware.accelerator": "A100-SXM-80GB"})
    assert not too_big.feasible and "weights" in too_big.why
    strict = Planner(CHAT, {"tpot_p99": 1e-4}, qps=10.0, requests=60)
    row = strict.plan_one({})
    assert not row.feasible and row.why.startswith("tpot_p99") and "even at" in row.why


def test_rank_puts_the_cheapest_feasible_fleet_first():
    planner = Planner(CHAT, SLOS, qps=20.0, requests=60, rel_tol=0.3)
    rows = planner.run(space_points({"hardware.accelerator": ["H100-SXM", "A100-SXM-80GB"]}))
    feasible = [r for r in rows if r.feasible]
    assert feasible and rows[: len(feasible)] == feasible
    costs = [r.usd_per_hour for r in feasible]
    assert costs == sorted(costs)
    assert rank(list(reversed(rows)))[0].usd_per_hour == costs[0]


@pytest.mark.parametrize("bad, needle", [
    (["tpot=0.1"], "expected NAME=SECONDS"), (["tpot_p99=fast"], "expected a number"),
    (["tpot_p99=-1"], "positive"), ([], "give at least one")])
def test_bad_slos_are_one_line_errors(bad, needle):
    with pytest.raises(ScenarioError, match=needle):
        parse_slos(bad)


def test_space_must_be_lists():
    with pytest.raises(ScenarioError, match="non-empty list"):
        space_points({"speculation.k": 4})
    assert len(space_points({"a": [1, 2], "b": [3, 4, 5]})) == 6


def test_cli_plan_writes_a_ranked_table(tmp_path, capsys):
    space = tmp_path / "space.yaml"
    space.write_text("speculation.k: [0, 4]\n")
    out = tmp_path / "plan"
    assert main(["plan", CHAT, "--slo", "tpot_p99=0.02", "--qps", "20", "--space", str(space),
                 "--requests", "60", "--quiet", "--out", str(out)]) == 0
    import pandas as pd

    df = pd.read_csv(out / "plan.csv")
    assert list(df["speculation.k"].sort_values()) == [0, 4]
    assert df["feasible"].all() and df["rank"].tolist() == [1, 2]
    assert main(["plan", CHAT, "--slo", "tpot=1", "--qps", "20"]) == 2
    assert "expected NAME=SECONDS" in capsys.readouterr().err


def test_the_planned_fleet_meets_the_slos_as_a_plain_scenario_and_one_replica_less_does_not():
    from specsim.simulator.cluster.engine import run_scenario
    from specsim.simulator.planning.plan import RATE_KEY, REQUESTS_KEY, _check

    probe = Planner(CHAT, SLOS, qps=1000.0, requests=80, rel_tol=0.1, duration_s=20.0)
    first = probe.plan_one({"speculation.method": "none"})
    qps = 1.8 * first.replica_rate  # two replicas needed, one is well past the failing rate
    assert qps >= first.fail_rate
    row = Planner(CHAT, SLOS, qps=qps, requests=80, rel_tol=0.1,
                  duration_s=20.0).plan_one({"speculation.method": "none"})
    assert row.feasible and row.replicas == 2

    def fleet(replicas: int) -> dict:
        n = int(qps * 20.0)
        return run_scenario(CHAT, overrides={
            "speculation.method": "none", "hardware.count": replicas, RATE_KEY: qps,
            REQUESTS_KEY: n, "simulation.horizon_s": 1.5 * n / qps + 30.0,
            "simulation.record_iterations": False, "simulation.progress": False}).metrics

    assert _check(fleet(2), SLOS)[0]
    assert not _check(fleet(1), SLOS)[0]
