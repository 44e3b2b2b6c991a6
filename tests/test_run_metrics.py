"""RunMetrics: the typed metrics the report reads declare every key a run writes."""

from __future__ import annotations

import json

import pytest

from specsim.errors import ScenarioError
from specsim.simulator.cluster.engine import run_scenario
from specsim.simulator.metrics.run_metrics import RunMetrics
from tests.conftest import make_trace


def _declared(model, data: dict, where: str = "") -> list[str]:
    """Keys of ``data`` that ``model`` keeps only as extras (undeclared), recursively."""
    out = [f"{where}{k}" for k in (model.model_extra or {})]
    for name in model.model_fields_set:
        sub = getattr(model, name)
        if hasattr(sub, "model_extra"):
            out += _declared(sub, data[name], f"{where}{name}.")
    return out


@pytest.mark.parametrize("spec", [
    {"method": "draft_model", "k": 3, "drafter": "Llama-3.2-1B", "acceptance": {"alpha": 0.8}},
    {"method": "none"},
])
def test_every_metric_a_run_writes_is_declared(spec):
    sc = {"model": "Llama-3.1-8B", "hardware": {"accelerator": "H100-SXM", "count": 2},
          "speculation": spec, "kv_cache": {"prefix_cache": True},
          "workload": {}, "simulation": {"progress": False}}
    res = run_scenario(sc, trace=make_trace(20, rate=4.0, output=30))
    m = RunMetrics.from_summary(res.metrics)
    assert _declared(m, res.metrics) == []  # a new metric: summary.py and a field here
    assert m.requests_completed == res.metrics["requests_completed"] == 20
    assert m.fleet.devices == 2 and m.speculation.method == spec["method"]
    assert m.ttft_s.p99 == res.metrics["ttft_s"]["p99"]
    assert m.kv_cache is not None
    # what the report reads back from metrics.json is the same object
    again = RunMetrics.from_summary(json.loads(json.dumps(res.metrics, default=str)))
    assert again.output_tokens == m.output_tokens and again.notes == m.notes


def test_an_older_metrics_json_reads_with_absent_keys_and_a_bad_one_says_which_key():
    m = RunMetrics.from_summary({"scenario": "old", "requests_completed": 3})
    assert (m.scenario, m.output_tokens, m.fleet.devices, m.notes) == ("old", None, None, [])
    with pytest.raises(ScenarioError, match=r"^run/metrics\.json: fleet\.devices: "):
        RunMetrics.from_summary({"fleet": {"devices": "many"}}, "run/metrics.json")
