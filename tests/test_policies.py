"""Policies are plug-ins: registered by name from anywhere, picked by name from a scenario."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specsim.errors import ScenarioError
from specsim.simulator.cli import main
from specsim.simulator.cluster.engine import run_scenario
from specsim.simulator.kv.eviction import LeastProgress, Newest
from specsim.simulator.registry import EVICTION, ROUTERS, SPECULATION_POLICIES
from specsim.simulator.routing.routers import Decision, Router
from specsim.simulator.scenario import schema
from specsim.simulator.speculation.policies import SpeculationPolicy
from tests.conftest import make_trace


@ROUTERS.register("test_last_worker")
class LastWorker(Router):
    """A toy router: always the last worker, saying why."""

    reads_load = True
    seen: list = []

    def route(self, request, snapshots):
        LastWorker.seen.append((request.rid, len(snapshots)))
        return Decision(snapshots[-1].wid, "the toy router's choice")


@SPECULATION_POLICIES.register("test_alternate")
class Alternate(SpeculationPolicy):
    """A toy policy: k for rows with an even target-step count, 0 for odd ones."""

    def choose(self, rows, table):
        return np.where(table.steps[rows] % 2 == 0, self.k, 0).astype(np.int64)


def scenario(**over):
    sc = {"model": "Llama-3.1-8B", "hardware": {"accelerator": "H100-SXM", "count": 3},
          "speculation": {"method": "draft_model", "k": 3, "drafter": "Llama-3.2-1B",
                          "acceptance": {"alpha": 0.8}},
          "workload": {}, "simulation": {"progress": False}}
    for key, value in over.items():
        section, name = key.split("__")
        sc.setdefault(section, {})[name] = value
    return sc


def test_a_router_registered_in_a_test_is_picked_by_name():
    LastWorker.seen.clear()
    res = run_scenario(scenario(router__policy="test_last_worker"),
                       trace=make_trace(30, rate=5.0, output=20))
    assert set(res.requests["worker"]) == {2}
    assert LastWorker.seen and all(n == 3 for _, n in LastWorker.seen)  # one snapshot a worker
    assert (res.requests["status"] == "completed").all()


def test_a_speculation_policy_registered_in_a_test_is_picked_by_name():
    tr = make_trace(20, rate=2.0, output=40)
    toy = run_scenario(scenario(speculation__policy="test_alternate"), trace=tr)
    static = run_scenario(scenario(), trace=tr)
    # every other target step drafts nothing: fewer drafts, more steps than static k
    assert toy.metrics["drafted_tokens"] < static.metrics["drafted_tokens"]
    assert toy.requests["steps"].sum() > static.requests["steps"].sum()
    assert (toy.requests["output_tokens"] == toy.requests["accepted_tokens"]
            + toy.requests["bonus_tokens"]).all()
    assert toy.metrics["speculation"]["policy"] == "test_alternate"


def test_unknown_policy_names_list_the_registered_ones():
    with pytest.raises(ScenarioError, match="router.policy: expected one of .*test_last_worker"):
        schema.validate({"router": {"policy": "nope"}})


def test_eviction_orders():
    from specsim.simulator.cluster.requests import RequestTable

    tr = make_trace(4, gap=1.0, prompt=100)
    tr["prompt_tokens"] = [100, 300, 300, 50]
    t = RequestTable(tr)
    t.generated[:] = [5, 2, 2, 9]
    rows = np.arange(4)
    assert Newest().order(rows, t).tolist() == [3, 2, 1, 0]
    # fewest generated first; ties: longer prompt, then newest
    assert LeastProgress().order(rows, t).tolist() == [2, 1, 0, 3]
    assert EVICTION.names() == ["least_progress", "newest"]


def test_preemption_policies_conserve_and_differ():
    runs = {}
    for preemption in ("newest", "least_progress"):
        sc = scenario(scheduler__preemption=preemption, scheduler__max_batch=64)
        sc["hardware"]["memory_fraction"] = 0.235  # a small KV pool: preemption happens
        res = run_scenario(sc, trace=make_trace(300, rate=40.0, prompt=(50, 3000),
                                                output=(1, 900), seed=3))
        m = res.metrics
        assert m["preemptions"] > 0 and m["requests_completed"] > 0
        assert m["requests_completed"] + m["requests_rejected"] == 300
        assert m["kv_blocks_used_at_end"] == 0
        runs[preemption] = res.requests["preemptions"].to_numpy()
    assert (runs["newest"] != runs["least_progress"]).any()  # the policy is the one used


def test_schema_command_prints_json_schema(capsys):
    assert main(["schema"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["title"] == "specsim scenario" and "speculation" in doc["properties"]


KEYS = schema.leaf_keys()
VALUES = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20),
                   st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                   st.lists(st.integers(), max_size=3),
                   st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))


def _typo(key: str, data) -> str:
    parts = key.split(".")
    i = data.draw(st.integers(0, len(parts) - 1))
    j = data.draw(st.integers(0, len(parts[i])))
    parts[i] = parts[i][:j] + data.draw(st.sampled_from("xq_")) + parts[i][j:]
    return ".".join(parts)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_schema_never_raises_anything_but_a_one_line_scenario_error(data):
    """Random key typos and wrong types: a typed scenario or one line naming a dotted key."""
    raw: dict = {}
    for _ in range(data.draw(st.integers(1, 4))):
        key = data.draw(st.sampled_from(KEYS))
        if data.draw(st.booleans()):
            key = _typo(key, data)
        node = raw
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {}) if isinstance(node.get(p, {}), dict) else node
        node[parts[-1]] = data.draw(VALUES)
    try:
        sc = schema.validate(raw)
    except ScenarioError as exc:
        msg = str(exc)
        assert "\n" not in msg and ": " in msg
        head = msg.split(": ", 1)[0]
        assert head == "scenario" or head.split(".")[0] in schema.Scenario.model_fields or \
            head.startswith(("'", "1", "-", "0")) or head.split(".")[0] in raw, msg
    else:
        assert isinstance(sc, schema.Scenario)
