"""``engine:`` with vLLM's flag names: the same batching as the scheduler keys, conflicts as
one-line errors, an explicit KV block count honoured and checked against memory."""

from __future__ import annotations

import json

import pytest
import yaml

from specsim.cost_models.errors import CatalogError
from specsim.simulator.cli import main
from specsim.simulator.cluster.engine import run_scenario
from specsim.simulator.scenario import config as cfg
from specsim.simulator.scenario.schema import ENGINE_KEYS, ENGINE_OWN
from tests.conftest import REPO

CHAT = REPO / "scenarios" / "chat_nospec.yaml"
SMALL = {"workload.synthetic.requests": 60, "simulation.progress": False}

NATIVE = {"scheduler.max_batch": 6, "scheduler.token_budget": 256,
          "scheduler.chunked_prefill": False, "scheduler.block_size": 32,
          "hardware.memory_fraction": 0.5, "kv_cache.prefix_cache": True}
FLAGS = {"engine.max_num_seqs": 6, "engine.max_num_batched_tokens": 256,
         "engine.enable_chunked_prefill": False, "engine.block_size": 32,
         "engine.gpu_memory_utilization": 0.5, "engine.enable_prefix_caching": True}


def _one_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("specsim: error: "), err
    return lines[0]


def _base() -> dict:
    """chat_nospec.yaml without its scheduler section (the file sets max_batch and more)."""
    data = yaml.safe_load(CHAT.read_text())
    data.pop("scheduler")
    return data


def _run(overrides: dict):
    res = run_scenario(_base(), overrides={**SMALL, **overrides})
    m = dict(res.metrics)
    m.pop("wall_time_s")
    return m, res.requests


def test_engine_flags_batch_like_the_scheduler_keys():
    m_native, req_native = _run(NATIVE)
    m_flags, req_flags = _run(FLAGS)
    assert m_flags == m_native
    assert req_flags.equals(req_native)
    m_default, _ = _run({})
    assert m_default["ttft_s"] != m_native["ttft_s"]  # the settings did change the batching


def test_engine_flags_resolve_onto_the_scenario_keys():
    sc = cfg.validate(cfg.apply_overrides({"workload": {}}, FLAGS))
    assert sc.scheduler.max_batch == 6 and sc.scheduler.token_budget == 256
    assert sc.scheduler.chunked_prefill is False and sc.scheduler.block_size == 32
    assert sc.hardware.memory_fraction == 0.5
    assert sc.kv_cache.prefix_cache is True
    assert sc.engine.kind == "vllm"
    # the dump validates again (both ways given, with equal values)
    assert cfg.validate(sc.dump()).scheduler == sc.scheduler
    assert set(ENGINE_KEYS) == set(type(sc.engine).model_fields) - set(ENGINE_OWN)


@pytest.mark.parametrize("flag,key,a,b", [
    ("max_num_seqs", "scheduler.max_batch", 8, 16),
    ("max_num_batched_tokens", "scheduler.token_budget", 512, 1024),
    ("enable_chunked_prefill", "scheduler.chunked_prefill", "false", "true"),
    ("gpu_memory_utilization", "hardware.memory_fraction", 0.8, 0.9),
    ("block_size", "scheduler.block_size", 16, 32),
    ("num_gpu_blocks_override", "scheduler.kv_blocks", 1000, 2000),
    ("enable_prefix_caching", "kv_cache.prefix_cache", "true", "false"),
])
def test_a_setting_given_both_ways_must_agree(flag, key, a, b, capsys):
    assert main(["validate", str(CHAT), "--set", f"engine.{flag}={a}",
                 "--set", f"{key}={b}"]) == 2
    line = _one_error(capsys)
    assert f"engine.{flag}: " in line and f"conflicts with {key}: " in line, line
    assert main(["validate", str(CHAT), "--set", f"engine.{flag}={a}",
                 "--set", f"{key}={a}"]) == 0  # equal values are fine


@pytest.mark.parametrize("override,expected", [
    ("engine.kind=sglang", "engine.kind: expected one of vllm, got 'sglang'"),
    ("engine.max_num_seqs=0", "engine.max_num_seqs: expected an integer at least 1, got 0"),
    ("engine.gpu_memory_utilization=0", "engine.gpu_memory_utilization: expected a number "
                                        "greater than 0, got 0"),
    ("engine.enable_chunked_prefill=maybe", "engine.enable_chunked_prefill: expected true or "
                                            "false, got 'maybe'"),
    ("engine.num_gpu_blocks_override=1", "engine.num_gpu_blocks_override: expected an integer "
                                         "at least 2, got 1"),
    ("engine.max_num_seq=8", "engine.max_num_seq: unknown key (did you mean 'max_num_seqs'?"),
])
def test_bad_engine_values_are_one_line(override, expected, capsys):
    assert main(["validate", str(CHAT), "--set", override]) == 2
    assert expected in _one_error(capsys)


@pytest.mark.parametrize("key", ["engine.num_gpu_blocks_override", "scheduler.kv_blocks"])
def test_explicit_block_count_is_honoured(key, tmp_path):
    out = tmp_path / "out"
    assert main(["run", str(CHAT), "--out", str(out), "--no-report", "--quiet",
                 "--set", "workload.synthetic.requests=40", "--set", f"{key}=777"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["kv_blocks_per_worker"] == 777
    assert m["requests_completed"] == 40 and m["kv_blocks_used_at_end"] == 0
    # without it the count comes from memory (far more blocks on an 80 GB H100)
    m2, _ = _run({})
    assert m2["kv_blocks_per_worker"] > 10_000


def test_a_small_block_count_rejects_what_cannot_fit():
    m, _ = _run({"engine.num_gpu_blocks_override": 20})  # 20 x 16 = 320 tokens of KV
    assert m["kv_blocks_per_worker"] == 20
    assert m["rejected_by_reason"].get("exceeds KV capacity", 0) > 0


@pytest.mark.parametrize("key", ["engine.num_gpu_blocks_override", "scheduler.kv_blocks"])
def test_a_block_count_beyond_memory_names_the_key(key, capsys):
    assert main(["validate", str(CHAT), "--set", f"{key}=10000000"]) == 2
    line = _one_error(capsys)
    assert f"{key}: 10,000,000 blocks of 16 tokens need" in line
    assert "H100-SXM has 80 GB" in line and "at most" in line


def test_block_count_ignores_memory_fraction():
    # like vLLM's override: the count replaces the memory_fraction sizing (checked against
    # the whole memory after the weights)
    m, _ = _run({"engine.num_gpu_blocks_override": 20000, "hardware.memory_fraction": 0.3})
    assert m["kv_blocks_per_worker"] == 20000
    with pytest.raises(CatalogError, match="memory_fraction"):
        _run({"hardware.memory_fraction": 0.05})  # the computed sizing still checks it


def test_schema_lists_the_engine_keys(capsys):
    assert main(["schema"]) == 0
    doc = json.loads(capsys.readouterr().out)
    defs = doc["$defs"]
    engine = defs["Engine"]["properties"]
    assert set(engine) == {*ENGINE_OWN, *ENGINE_KEYS}
    assert engine["kind"]["enum"] == ["vllm"]
    assert "kv_blocks" in defs["Scheduler"]["properties"]
    assert "engine" in doc["properties"]
