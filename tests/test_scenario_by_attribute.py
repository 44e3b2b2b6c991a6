"""The validated scenario is read by attribute only (#22 part 3): a Section has no
``[key]`` and no ``.get`` (a read by key is a TypeError or AttributeError), and a run of each
drafter, a PD fleet with KV tiers, per-class drafters, switching, engine flags and a tree,
and ``specsim validate`` go through. (The raw mapping before validation, e.g. ``--set``
overrides applied to the YAML, stays a dict.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from specsim.simulator.cli import main
from specsim.simulator.cluster.engine import load_scenario, run_scenario
from specsim.simulator.scenario import fields
from tests.conftest import make_trace

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
ALPHA = {"alpha": 0.7}


def test_a_section_cannot_be_read_by_key():
    sc, _, _ = load_scenario(SCENARIOS / "pd_disaggregated.yaml")
    assert not hasattr(fields.Section, "__getitem__") and not hasattr(fields.Section, "get")
    with pytest.raises(TypeError):
        sc.hardware["count"]  # noqa: B018
    with pytest.raises(AttributeError):
        sc.disaggregation.get("prefill")
    key = "count"  # a key held in a variable: getattr
    assert getattr(sc.disaggregation.prefill, key) == 2


@pytest.mark.parametrize("speculation", [
    {"method": "ngram", "k": 3, "ngram": {"match_rate": 0.5}, "acceptance": ALPHA},
    {"method": "suffix", "k": 3, "acceptance": ALPHA},
    {"method": "draft_model", "k": 3, "drafter": "Llama-3.2-1B", "acceptance": ALPHA,
     "drafter_quantization": {"weights": "fp8"}},
    {"method": "dflash", "k": 3, "drafter": "Llama-3.2-1B", "draft_cost": {"ratio": 0.1},
     "acceptance": ALPHA},
    {"method": "medusa", "k": 3, "acceptance": ALPHA},
    {"method": "eagle3", "tree": {"widths": [2, 2]}, "acceptance": ALPHA},
    {"method": "eagle3", "vllm_speculative_config": {"method": "eagle3",
                                                     "num_speculative_tokens": 3},
     "acceptance": ALPHA},
])
def test_each_drafter_reads_the_scenario_by_attribute(speculation):
    sc = {"model": "Llama-3.1-8B", "hardware": {"accelerator": "H100-SXM"},
          "engine": {"max_num_seqs": 64}, "speculation": speculation,
          "workload": {}, "simulation": {"progress": False}}
    res = run_scenario(sc, trace=make_trace(8, rate=4.0, output=16))
    assert res.metrics["requests_completed"] == 8


@pytest.mark.parametrize("name,requests", [
    ("pd_disaggregated", "workload.synthetic.requests=12"),
    ("drafter_per_class", "workload.synthetic.requests=12"),
    ("drafter_switching", "workload.max_requests=12"),
])
def test_bundled_shapes_read_the_scenario_by_attribute(name, requests):
    res = run_scenario(SCENARIOS / f"{name}.yaml",
                       overrides=[requests, "simulation.progress=false",
                                  "kv_cache.prefix_cache=true", "kv_cache.preemption=swap",
                                  "kv_cache.tiers=[{name: host_dram, capacity_gb: 8, "
                                  "bandwidth_gb_s: 25, latency_s: 1.0e-5}]"])
    assert res.metrics["requests_completed"] == 12


def test_validate_reads_the_scenario_by_attribute(capsys):
    assert main(["validate", str(SCENARIOS / "pd_disaggregated.yaml")]) == 0
    assert ": ok (" in capsys.readouterr().out
