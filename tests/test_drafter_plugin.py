"""A drafter is a plug-in: registered from this test file with its own keys, engine names and
declared weights, then named by a scenario; nothing in the library is touched."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import Field

from specsim.errors import ScenarioError
from specsim.simulator.cluster.engine import run_scenario
from specsim.simulator.registry import DRAFTERS
from specsim.simulator.scenario import schema
from specsim.simulator.scenario.fields import Float, Section, section
from specsim.simulator.speculation.drafters import Drafter
from tests.conftest import make_trace


class Toy(Section):
    """``speculation.test_toy``: the toy drafter's one setting."""

    seconds_per_token: Float(0.0, 1.0) = Field(1e-3, description="per drafted position")


class ToyKeys(Section):
    test_toy: section(Toy)


class ToyDrafter(Drafter):
    """Each drafted position costs a fixed time (the longest draft of the step)."""

    def __init__(self, seconds: float) -> None:
        self.s = seconds

    def cost_steps(self, k, ctx, pf_tokens, pf_qc):
        z = np.zeros(k.shape[0])
        return self.s * k.max(axis=1).astype(np.float64), z, z

    def describe(self) -> str:
        return f"toy: {self.s * 1e3:g} ms per drafted token"


@DRAFTERS.register("test_toy", params=ToyKeys, has_weights=True, vllm=("test_toy_vllm",),
                   sglang=("TEST_TOY",))
def _toy(ctx):
    return ToyDrafter(ctx.spec.test_toy.seconds_per_token), None


def scenario(**spec):
    return {"model": "Llama-3.1-8B", "hardware": {"accelerator": "H100-SXM", "count": 1},
            "speculation": {"method": "test_toy", "k": 3, "acceptance": {"alpha": 0.8},
                            **spec},
            "workload": {}, "simulation": {"progress": False}}


def test_a_drafter_registered_in_a_test_runs_a_scenario_naming_it():
    tr = make_trace(20, rate=2.0, output=40)
    cheap = run_scenario(scenario(test_toy={"seconds_per_token": 1e-4}), trace=tr)
    dear = run_scenario(scenario(test_toy={"seconds_per_token": 5e-3}), trace=tr)
    assert cheap.metrics["speculation"]["method"] == "test_toy"
    assert cheap.metrics["drafted_tokens"] > 0
    assert (cheap.requests["status"] == "completed").all()
    # its own key reaches its factory: a dearer draft makes every request slower
    assert dear.requests["e2e_s"].sum() > cheap.requests["e2e_s"].sum()


def test_the_schema_takes_the_drafters_keys_from_its_registration():
    sc = schema.validate(scenario(test_toy={"seconds_per_token": 2e-3}))
    assert sc.speculation.test_toy.seconds_per_token == 2e-3
    assert sc.dump()["speculation"]["test_toy"] == {"seconds_per_token": 2e-3}
    assert "test_toy" in schema.key_info("speculation.method").choices
    assert "speculation.test_toy.seconds_per_token" in schema.number_keys("float")
    with pytest.raises(ScenarioError, match=r"^speculation\.test_toy\.seconds_per_token: expected "
                                            r"a number at most 1, got 5$"):
        schema.validate(scenario(test_toy={"seconds_per_token": 5}))
    with pytest.raises(ScenarioError, match=r"^speculation\.ngram: unknown key for "
                                            r"speculation\.method test_toy .*toy\)$"):
        schema.validate(scenario(ngram={"match_rate": 0.5}))
    with pytest.raises(ScenarioError, match=r"^speculation\.tree: method test_toy drafts a "
                                            r"chain"):
        schema.validate(scenario(tree={"widths": [2, 1]}))
    # switched off, its keys may stay in the file (as every method's)
    off = schema.validate(scenario(method="none", test_toy={"seconds_per_token": 2e-3}))
    assert off.speculation.method == "none"


def test_engine_names_and_weights_come_from_the_registration():
    sc = schema.validate(scenario(method=None, k=None,
                                  vllm_speculative_config={"method": "test_toy_vllm",
                                                           "num_speculative_tokens": 2}))
    assert (sc.speculation.method, sc.speculation.k) == ("test_toy", 2)
    sg = schema.validate(scenario(method=None, k=None, sglang={
        "speculative_algorithm": "TEST_TOY", "speculative_num_draft_tokens": 3}))
    assert (sg.speculation.method, sg.speculation.k) == ("test_toy", 2)
    # has_weights: a drafter precision other than bf16 scales acceptance, and says so
    res = run_scenario(scenario(drafter_quantization={"weights": "fp8"}),
                       trace=make_trace(5, rate=2.0, output=10))
    assert any("drafter weights fp8" in n for n in res.notes)
