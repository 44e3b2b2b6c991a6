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


# ----------------------------------------------------------------- PD split (rule 4)
PD = str(REPO / "scenarios" / "pd_disaggregated.yaml")
PD_SLOS = {"ttft_p99": 0.5, "tpot_p99": 0.01}
LINK = {"bandwidth_gb_s": 50, "latency_s": 1.0e-5, "shared": True}


def _split(p: int, d: int, **decode) -> dict:
    return {"prefill": {"count": p}, "decode": {"count": d, **decode}, "link": LINK}


def test_a_pd_replica_is_its_pools_devices_and_prices():
    from specsim.cost_models.catalog import get_hardware

    planner = Planner(PD, PD_SLOS, qps=20.0, requests=60, rel_tol=0.3, duration_s=10.0)
    row = planner.plan_one({"disaggregation": _split(1, 3, accelerator="A100-SXM-80GB")})
    assert row.feasible, row.why
    h100 = get_hardware("H100-SXM", "h").price_usd_per_hour
    a100 = get_hardware("A100-SXM-80GB", "a").price_usd_per_hour
    assert row.devices == 4 * row.replicas
    assert row.usd_per_hour == pytest.approx(row.replicas * (1 * h100 + 3 * a100))
    mixed = planner.plan_one({"disaggregation": None})
    assert mixed.devices == mixed.replicas  # a mixed replica: one worker, TP 1


def test_a_replicas_devices_are_read_as_the_fleet_is_built():
    """A PD pool's count is its devices (at any tensor_parallel), and a mixed replica is
    one worker of the scenario's own tensor_parallel (build.unit_devices)."""
    import yaml

    pd_planner = Planner(PD, PD_SLOS, qps=20.0)
    assert pd_planner.replica_devices({"disaggregation": _split(2, 4, tensor_parallel=2)}) == 6
    with open(CHAT) as f:
        chat = yaml.safe_load(f)
    chat["hardware"].update(tensor_parallel=2, count=2)
    chat["workload"]["synthetic"]["requests"] = 10
    assert Planner(chat, SLOS, qps=1.0).replica_devices({}) == 2
    assert Planner(chat, SLOS, qps=1.0).replica_devices({"hardware.tensor_parallel": 1}) == 1


def test_the_planned_pd_fleet_meets_the_slos_as_a_plain_scenario_and_one_unit_less_does_not():
    from specsim.simulator.cluster.engine import run_scenario
    from specsim.simulator.planning.plan import RATE_KEY, REQUESTS_KEY, _check

    config = {"disaggregation": _split(1, 1)}
    first = Planner(PD, PD_SLOS, qps=200.0, requests=60, rel_tol=0.1,
                    duration_s=10.0).plan_one(config)
    qps = 1.8 * first.replica_rate
    assert qps >= first.fail_rate
    row = Planner(PD, PD_SLOS, qps=qps, requests=60, rel_tol=0.1,
                  duration_s=10.0).plan_one(config)
    assert row.feasible and row.replicas == 2 and row.devices == 4

    def fleet(units: int) -> dict:
        n = max(60, int(qps * 10.0))
        return run_scenario(PD, overrides={
            "disaggregation": _split(units, units), "hardware.count": 2 * units,
            RATE_KEY: qps, REQUESTS_KEY: n, "simulation.horizon_s": 1.5 * n / qps + 30.0,
            "simulation.record_iterations": False, "simulation.progress": False}).metrics

    assert _check(fleet(2), PD_SLOS)[0]
    assert not _check(fleet(1), PD_SLOS)[0]


def test_pd_split_in_the_space_file_and_bad_splits(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text("disaggregation:\n  - null\n  - {prefill: {count: 1}, decode: {count: 1}}\n")
    out = tmp_path / "plan"
    assert main(["plan", PD, "--slo", "ttft_p99=0.5", "--qps", "10", "--space", str(space),
                 "--requests", "40", "--duration", "5", "--quiet", "--out", str(out)]) == 0
    import pandas as pd

    df = pd.read_csv(out / "plan.csv")
    assert sorted(df["disaggregation"]) == ["PD 1:1", "mixed"]
    space.write_text("disaggregation:\n  - {prefill: {count: 1, accelerator: NOPE}, "
                     "decode: {count: 1}}\n")
    assert main(["plan", PD, "--slo", "ttft_p99=0.5", "--qps", "10", "--space", str(space),
                 "--quiet", "--out", str(tmp_path / "bad")]) == 0  # rule 2: rejected, with why
    bad = pd.read_csv(tmp_path / "bad" / "plan.csv")
    assert not bad["feasible"].any()
    assert "disaggregation.prefill.accelerator: " in bad["why_rejected"][0]


def test_a_space_value_the_schema_refuses_is_one_line_before_planning(tmp_path, capsys):
    space = tmp_path / "space.yaml"  # a split the schema refuses: refused like a sweep's value
    space.write_text("disaggregation:\n  - {prefill: {count: 0}, decode: {count: 1}}\n")
    assert main(["plan", PD, "--slo", "ttft_p99=0.5", "--qps", "10", "--space", str(space),
                 "--quiet", "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "disaggregation.prefill.count: expected an integer at least 1" \
        in err[0]
    assert not (tmp_path / "bad").exists()
