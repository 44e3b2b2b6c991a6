"""A router with settings is a plug-in too: its params model registers with it, the scenario
gives ``router.params``, the schema checks them and the router gets them, validated."""

from __future__ import annotations

import pytest
from pydantic import Field

from specsim.errors import ScenarioError
from specsim.simulator.cluster.engine import run_scenario
from specsim.simulator.registry import ROUTERS
from specsim.simulator.routing.routers import Decision, Router
from specsim.simulator.scenario import schema
from specsim.simulator.scenario.fields import Int, Section
from tests.conftest import make_trace


class PinParams(Section):
    worker: Int(0, 1000) = Field(0, description="the worker every request goes to")


@ROUTERS.register("test_pin", params=PinParams)
class Pin(Router):
    """A toy router: every request to one configured worker."""

    reads_load = False

    def __init__(self, n_workers: int, params: PinParams) -> None:
        super().__init__(n_workers)
        self.worker = min(params.worker, n_workers - 1)

    def route(self, request, snapshots):
        return Decision(self.worker, f"pinned to worker {self.worker}")


def scenario(**router):
    return {"model": "Llama-3.1-8B", "hardware": {"accelerator": "H100-SXM", "count": 3},
            "router": {"policy": "test_pin", **router},
            "workload": {}, "simulation": {"progress": False}}


def test_a_router_with_params_registered_in_a_test_gets_them():
    tr = make_trace(12, rate=4.0, output=10)
    assert set(run_scenario(scenario(params={"worker": 1}), trace=tr).requests["worker"]) == {1}
    assert set(run_scenario(scenario(), trace=tr).requests["worker"]) == {0}  # the default


def test_router_params_are_checked_by_the_routers_model():
    assert schema.validate(scenario(params={"worker": 2})).router.params == {"worker": 2}
    with pytest.raises(ScenarioError, match=r"^router\.params\.worker: expected an integer at "
                                            r"least 0, got -1$"):
        schema.validate(scenario(params={"worker": -1}))
    with pytest.raises(ScenarioError, match=r"^router\.params\.wrker: unknown key \(did you "
                                            r"mean 'worker'\?"):
        schema.validate(scenario(params={"wrker": 1}))
    with pytest.raises(ScenarioError, match=r"^router\.params: router round_robin takes no "
                                            r"parameters"):
        schema.validate(scenario(policy="round_robin", params={"worker": 1}))
