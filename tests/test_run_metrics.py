"""RunMetrics: the typed metrics the report reads declare every key a run writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specsim.errors import ScenarioError
from specsim.simulator.cluster.engine import run_scenario
from specsim.simulator.metrics.run_metrics import RunMetrics
from tests.conftest import make_trace


def _declared(model, where: str = "") -> list[str]:
    """Keys ``model`` keeps only as extras (undeclared), recursively: its typed blocks and
    the typed blocks inside its mappings (pools, tiers, per-class rows)."""
    out = [f"{where}{k}" for k in (model.model_extra or {})]
    for name in model.model_fields_set:
        sub = getattr(model, name)
        if hasattr(sub, "model_extra"):
            out += _declared(sub, f"{where}{name}.")
        elif isinstance(sub, dict):
            out += [x for key, v in sub.items() if hasattr(v, "model_extra")
                    for x in _declared(v, f"{where}{name}.{key}.")]
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
    assert _declared(m) == []  # a new metric: summary.py and a field here
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


def test_an_undeclared_key_in_a_block_is_found():
    m = RunMetrics.from_summary({"kv_cache": {"tiers": {"hbm": {"spare": 1}}},
                                 "disaggregation": {"link": {"colour": "red"}},
                                 "baseline": {"per_class": {"all": {"speculative": {"x": 1}}}}})
    assert sorted(_declared(m)) == ["baseline.per_class.all.speculative.x",
                                    "disaggregation.link.colour", "kv_cache.tiers.hbm.spare"]


def test_the_pd_kv_tier_and_baseline_blocks_declare_every_key_and_read_by_attribute():
    from specsim.simulator.metrics.baseline import compare

    sc = {"model": "Llama-3.1-8B", "hardware": {"accelerator": "H100-SXM", "count": 2},
          "speculation": {"method": "draft_model", "k": 3, "drafter": "Llama-3.2-1B",
                          "acceptance": {"alpha": 0.8}},
          "kv_cache": {"prefix_cache": True, "preemption": "swap", "tiers": [
              {"name": "host_dram", "capacity_gb": 64, "bandwidth_gb_s": 25,
               "latency_s": 1e-5}]},
          "disaggregation": {"prefill": {"count": 1}, "decode": {"count": 1}},
          "workload": {}, "simulation": {"progress": False}}
    trace = make_trace(12, rate=4.0, output=20)
    res = run_scenario(sc, trace=trace)
    off = run_scenario(sc, trace=trace, overrides=["speculation.method=none"])
    metrics = {**res.metrics, "baseline": compare(res.metrics, res.requests, off.metrics,
                                                  off.requests)}
    m = RunMetrics.from_summary(json.loads(json.dumps(metrics, default=str)))
    assert _declared(m) == []
    pd_ = m.disaggregation
    assert set(pd_.pools) == {"prefill", "decode"} and pd_.pools["decode"].devices == 1
    assert pd_.transfers == res.metrics["disaggregation"]["transfers"] == 12
    assert pd_.link.bandwidth_gb_s == res.metrics["disaggregation"]["link"]["bandwidth_gb_s"]
    kv = m.kv_cache
    assert list(kv.tiers) == ["hbm", "host_dram"] and kv.tiers["host_dram"].latency_s == 1e-5
    assert kv.preemption == "swap" and kv.hit_rate["total"] >= 0.0
    b = m.baseline
    assert b.per_class["all"].baseline.requests == 12
    assert b.run.output_tokens.speculative == res.metrics["output_tokens"]
    with pytest.raises(ScenarioError, match=r"^m\.json: kv_cache\.tiers\.hbm\.used_blocks_at_end: "):
        RunMetrics.from_summary({"kv_cache": {"tiers": {"hbm": {"used_blocks_at_end": "x"}}}},
                                "m.json")


def test_an_overloaded_runs_block_is_declared_and_read_by_attribute():
    chat = Path(__file__).resolve().parents[1] / "scenarios" / "chat.yaml"
    res = run_scenario(chat, overrides={
        "workload.synthetic.requests": 4000, "workload.synthetic.arrival.rate": 280.0,
        "simulation.progress": False, "simulation.overload.window_s": 2.0,
        "simulation.overload.windows": 2, "simulation.overload.max_wait_s": 1.0})
    m = RunMetrics.from_summary(res.metrics)
    assert _declared(m) == []
    assert m.overload.detected and m.overload.at_s == m.simulated_time_s
    assert m.overload.queued_requests == res.metrics["overload"]["queued_requests"] > 0
