"""Speculation as the engine writes it (vLLM ``--speculative-config``, SGLang
``--speculative-*``): each field lands on its specsim key, the JSON string equals the
mapping, fields without a mapping are one-line errors naming them, conflicts name both keys,
and a run equals the same scenario written natively."""

from __future__ import annotations

import json

import pytest
import yaml

from specsim.simulator.cli import main
from specsim.simulator.cluster.engine import run_scenario
from specsim.simulator.registry import DRAFTERS
from specsim.simulator.scenario import config as cfg
from specsim.simulator.speculation import engine_config as ec
from tests.conftest import REPO

CHAT = REPO / "scenarios" / "chat.yaml"
EXAMPLE = REPO / "scenarios" / "vllm_speculative_config.yaml"
SMALL = {"workload.synthetic.requests": 60, "simulation.progress": False}


def _spec(speculation: dict, **top) -> object:
    return cfg.validate({"workload": {}, **top, "speculation": speculation}).speculation


def _one_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("specsim: error: "), err
    return lines[0]


def _error(speculation: dict, **top) -> str:
    with pytest.raises(Exception) as exc:
        _spec(speculation, **top)
    text = str(exc.value)
    assert "\n" not in text
    return text


# ------------------------------------------------------------------ vLLM fields -> keys


@pytest.mark.parametrize("method,ours", [
    ("eagle3", "eagle3"), ("eagle", "eagle3"), ("mtp", "mtp"), ("deepseek_mtp", "mtp"),
    ("qwen3_next_mtp", "mtp"), ("ngram", "ngram"), ("[ngram]", "ngram")])
def test_vllm_method_and_k(method, ours):
    s = _spec({"vllm_speculative_config": {"method": method, "num_speculative_tokens": 3}})
    assert (s.method, s.k, s.drafter, s.policy) == (ours, 3, None, "static")


def test_vllm_draft_model_resolves_hf_ids_to_catalog_names():
    for hf_id, name in [("meta-llama/Llama-3.2-1B", "Llama-3.2-1B"),
                        ("meta-llama/Llama-3.2-1B-Instruct", "Llama-3.2-1B"),
                        ("Qwen/Qwen3-0.6B", "Qwen3-0.6B"), ("Qwen3-1.7B", "Qwen3-1.7B"),
                        ("meta-llama/Llama-2-7b-hf", "Llama-2-7B")]:
        s = _spec({"vllm_speculative_config": {"method": "draft_model", "model": hf_id,
                                               "num_speculative_tokens": 5}})
        assert (s.method, s.k, s.drafter) == ("draft_model", 5, name), hf_id
    # vLLM's default method is draft_model (method omitted, model given)
    s = _spec({"vllm_speculative_config": {"model": "Qwen/Qwen3-0.6B",
                                           "num_speculative_tokens": 2}})
    assert (s.method, s.drafter) == ("draft_model", "Qwen3-0.6B")
    # ... detected from an EAGLE head's name, whose id is recorded (the head is derived)
    s = _spec({"vllm_speculative_config": {"model": "AngelSlim/Qwen3-8B_eagle3",
                                           "num_speculative_tokens": 2}})
    assert (s.method, s.drafter) == ("eagle3", None)
    # parallel drafting with a draft model is PARD
    s = _spec({"vllm_speculative_config": {"method": "draft_model", "model": "Qwen3-0.6B",
                                           "num_speculative_tokens": 4,
                                           "parallel_drafting": True}})
    assert (s.method, s.drafter) == ("pard", "Qwen3-0.6B")


def test_vllm_unknown_draft_model_asks_for_a_drafter():
    vc = {"method": "draft_model", "model": "someone/tiny-draft", "num_speculative_tokens": 4}
    msg = _error({"vllm_speculative_config": vc})
    assert msg.startswith("speculation.vllm_speculative_config.model: 'someone/tiny-draft' "
                          "matches no model in specsim's catalog"), msg
    assert "speculation.drafter" in msg
    s = _spec({"vllm_speculative_config": vc, "drafter": "Qwen3-0.6B"})  # given next to it
    assert (s.method, s.drafter) == ("draft_model", "Qwen3-0.6B")


def test_vllm_ngram_settings():
    s = _spec({"vllm_speculative_config": {"method": "ngram", "num_speculative_tokens": 4,
                                           "prompt_lookup_min": 2, "prompt_lookup_max": 4},
               "ngram": {"match_rate": 0.5}})
    assert (s.method, s.k, s.ngram.match_rate) == ("ngram", 4, 0.5)
    note = ec.note(s)
    assert "prompt_lookup_min 2, prompt_lookup_max 4 recorded" in note
    assert "prompt_lookup_min 5, prompt_lookup_max 5" in ec.note(_spec(
        {"vllm_speculative_config": {"method": "ngram",
                                     "num_speculative_tokens": 4}}))  # vLLM's default window
    assert _error({"vllm_speculative_config": {"method": "ngram", "num_speculative_tokens": 4,
                                               "prompt_lookup_min": 5, "prompt_lookup_max": 3}}
                  ).startswith("speculation.vllm_speculative_config.prompt_lookup_min: 5 must "
                               "be at most prompt_lookup_max 3")
    assert _error({"vllm_speculative_config": {"method": "eagle3", "num_speculative_tokens": 4,
                                               "prompt_lookup_max": 3}}
                  ) == "speculation.vllm_speculative_config.prompt_lookup_max: only for method ngram"


def test_vllm_disable_by_batch_size_becomes_a_rule():
    s = _spec({"vllm_speculative_config": {"method": "eagle3", "num_speculative_tokens": 4,
                                           "disable_by_batch_size": 32}})
    assert s.policy == "rules"
    rules = s.policy_params["rules"]
    assert rules[0]["when"] == {"batch_at_least": 33} and rules[0]["k"] == 0  # "larger than"
    assert rules[1]["k"] == 4 and "when" not in rules[1]
    assert "vllm_speculative_config.disable_by_batch_size: expected an integer at least 2, " \
           "got 1" in _error({"vllm_speculative_config": {"method": "eagle3",
                                                          "num_speculative_tokens": 4,
                                                          "disable_by_batch_size": 1}})


def test_vllm_json_string_equals_the_mapping():
    vc = {"method": "draft_model", "model": "Qwen/Qwen3-0.6B", "num_speculative_tokens": 5,
          "disable_by_batch_size": 8, "draft_tensor_parallel_size": 1}
    a = cfg.validate({"workload": {}, "speculation": {"vllm_speculative_config": vc}})
    b = cfg.validate({"workload": {}, "speculation": {"vllm_speculative_config":
                                                      json.dumps(vc)}})
    assert a == b and a.dump() == b.dump()
    assert a.speculation.vllm_speculative_config == vc  # kept as the record
    # the dump (both forms present, equal values) validates to the same scenario
    assert cfg.validate(a.dump()) == a


# ------------------------------------------------------------------ SGLang


@pytest.mark.parametrize("algo,ours,extra,k", [
    ("EAGLE3", "eagle3", {"speculative_num_steps": 3, "speculative_eagle_topk": 1,
                          "speculative_num_draft_tokens": 4}, 3),
    ("EAGLE", "eagle3", {"speculative_num_steps": 5, "speculative_eagle_topk": 1}, 5),
    ("NEXTN", "mtp", {"speculative_num_steps": 2, "speculative_eagle_topk": 1}, 2),
    ("NGRAM", "ngram", {"speculative_num_draft_tokens": 8,
                        "speculative_ngram_max_bfs_breadth": 10}, 7),
])
def test_sglang_fields_to_keys(algo, ours, extra, k):
    s = _spec({"sglang": {"speculative_algorithm": algo, **extra}})
    assert (s.method, s.k, s.drafter) == (ours, k, None)


def test_sglang_standalone_and_dflash_draft_models():
    s = _spec({"sglang": {"speculative_algorithm": "STANDALONE", "speculative_num_steps": 4,
                          "speculative_eagle_topk": 1,
                          "speculative_draft_model_path": "Qwen/Qwen3-0.6B"}})
    assert (s.method, s.k, s.drafter) == ("draft_model", 4, "Qwen3-0.6B")
    s = _spec({"sglang": {"speculative_algorithm": "DFLASH", "speculative_dflash_block_size": 16,
                          "speculative_draft_model_path": "z-lab/Qwen3-8B-DFlash-b16"},
               "drafter": "Qwen3-0.6B"})
    assert (s.method, s.k, s.drafter) == ("dflash", 15, "Qwen3-0.6B")


def test_sglang_tree_maps_onto_speculation_tree():
    s = _spec({"sglang": {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 5,
                          "speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8}})
    assert (s.method, s.k) == ("eagle3", 5)
    assert (s.tree.topk, s.tree.num_steps, s.tree.num_draft_tokens) == (4, 5, 8)
    msg = _error({"sglang": {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
                             "speculative_eagle_topk": 4}})
    assert msg.startswith("speculation.sglang.speculative_num_draft_tokens: required"), msg
    msg = _error({"sglang": {"speculative_algorithm": "STANDALONE", "speculative_num_steps": 3,
                             "speculative_eagle_topk": 2, "speculative_num_draft_tokens": 5,
                             "speculative_draft_model_path": "Qwen/Qwen3-0.6B"}})
    assert msg.startswith("speculation.sglang.speculative_eagle_topk: 2 drafts a tree"), msg


def test_sglang_missing_steps_are_errors():
    msg = _error({"sglang": {"speculative_algorithm": "EAGLE3"}})
    assert msg.startswith("speculation.sglang.speculative_num_steps: required"), msg
    msg = _error({"sglang": {"speculative_algorithm": "DSPARK"}})
    assert msg.startswith("speculation.sglang.speculative_algorithm: expected one of DFLASH, "
                          "EAGLE, EAGLE3, NEXTN, NGRAM, STANDALONE"), msg


# ------------------------------------------------------------------ errors and conflicts


@pytest.mark.parametrize("speculation,expected", [
    ({"vllm_speculative_config": {"method": "eagle3", "num_speculative_token": 4}},
     "speculation.vllm_speculative_config.num_speculative_token: not a vLLM SpeculativeConfig "
     "field (did you mean 'num_speculative_tokens'?"),
    ({"vllm_speculative_config": {"method": "eagle3", "num_speculative_tokens": 4,
                                  "revision": "main"}},
     "speculation.vllm_speculative_config.revision: vLLM SpeculativeConfig field not mapped "
     "onto specsim (has no meaning in specsim)"),
    ({"vllm_speculative_config": {"method": "eagle3", "num_speculative_tokens": 4,
                                  "speculative_token_tree": "[(0,)]"}},
     "speculation.vllm_speculative_config.speculative_token_tree: vLLM SpeculativeConfig field "
     "not mapped onto specsim (give the tree as speculation.tree (widths per depth))"),
    ({"vllm_speculative_config": {"method": "eagle3", "num_speculative_tokens": 4,
                                  "tensor_parallel_size": 1}},
     "speculation.vllm_speculative_config.tensor_parallel_size: vLLM SpeculativeConfig field "
     "not mapped onto specsim (vLLM itself rejects it"),
    ({"vllm_speculative_config": {"method": "mlp_speculator", "num_speculative_tokens": 4}},
     "speculation.vllm_speculative_config.method: vLLM method 'mlp_speculator' has no specsim "
     "drafter"),
    ({"vllm_speculative_config": {"method": "eagle3", "num_speculative_tokens": 4,
                                  "suffix_decoding_max_tree_depth": 24}},
     "speculation.vllm_speculative_config.suffix_decoding_max_tree_depth: only for method "
     "suffix"),
    ({"vllm_speculative_config": {"method": "eagle4", "num_speculative_tokens": 4}},
     "speculation.vllm_speculative_config.method: expected a vLLM method"),
    ({"vllm_speculative_config": {"method": "eagle3"}},
     "speculation.vllm_speculative_config.num_speculative_tokens: required"),
    ({"vllm_speculative_config": {"method": "eagle3", "num_speculative_tokens": 65}},
     "speculation.vllm_speculative_config.num_speculative_tokens: expected an integer at "
     "most 64, got 65"),
    ({"vllm_speculative_config": {"method": "eagle3", "num_speculative_tokens": True}},
     "speculation.vllm_speculative_config.num_speculative_tokens: expected an integer, got "
     "True"),
    ({"vllm_speculative_config": "{'method': 'eagle3'}"},
     "speculation.vllm_speculative_config: expected vLLM's --speculative-config JSON, got "
     "invalid JSON"),
    ({"vllm_speculative_config": "[1, 2]"},
     "speculation.vllm_speculative_config: expected a JSON object, got [1, 2]"),
    ({"vllm_speculative_config": 4},
     "speculation.vllm_speculative_config: expected a mapping or a JSON string, got 4"),
    ({"sglang": {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
                 "speculative_eagle_topk": 1, "speculative_accept_threshold_single": 0.5}},
     "speculation.sglang.speculative_accept_threshold_single: SGLang server argument field not "
     "mapped onto specsim (acceptance comes from speculation.acceptance)"),
    ({"sglang": {"speculative_algorithm": "EAGLE3", "tp_size": 2}},
     "speculation.sglang.tp_size: not a SGLang server argument field"),
    ({"vllm_speculative_config": {"method": "eagle3", "num_speculative_tokens": 4},
      "sglang": {"speculative_algorithm": "EAGLE3"}},
     "speculation.sglang: give one engine's config, not both"),
])
def test_unmapped_fields_are_one_line_errors_naming_them(speculation, expected):
    msg = _error(speculation)
    assert msg.startswith(expected), msg


@pytest.mark.parametrize("native,engine_field,key", [
    ({"k": 3}, "num_speculative_tokens", "k"),
    ({"method": "draft_model", "drafter": "Qwen3-0.6B"}, "method", "method"),
    ({"drafter": "Llama-3.2-1B"}, "model", "drafter"),
    ({"policy": "goodput"}, "disable_by_batch_size", "policy"),
])
def test_a_setting_given_both_ways_must_agree(native, engine_field, key):
    vc = {"method": "draft_model" if key == "drafter" else "eagle3",
          "num_speculative_tokens": 4, "disable_by_batch_size": 16}
    if key == "drafter":
        vc["model"] = "Qwen/Qwen3-0.6B"
    msg = _error({"vllm_speculative_config": vc, **native})
    assert msg.startswith(f"speculation.vllm_speculative_config.{engine_field}: "), msg
    assert f"conflicts with speculation.{key}: " in msg, msg
    # equal values are fine
    s = _spec({"vllm_speculative_config": {"method": "eagle3", "num_speculative_tokens": 4},
               "k": 4, "method": "eagle3"})
    assert (s.method, s.k) == ("eagle3", 4)


def test_method_none_switches_an_engine_config_off():
    s = _spec({"vllm_speculative_config": {"method": "eagle3", "num_speculative_tokens": 4},
               "method": "none"})
    assert s.method == "none" and s.vllm_speculative_config["method"] == "eagle3"
    assert "switched off" in ec.note(s)


def test_draft_tensor_parallel_size_must_be_the_targets():
    vc = {"method": "eagle3", "num_speculative_tokens": 4, "draft_tensor_parallel_size": 1}
    hw = {"count": 2, "tensor_parallel": 2}
    msg = _error({"vllm_speculative_config": vc}, hardware=hw)
    assert msg.startswith("speculation.vllm_speculative_config.draft_tensor_parallel_size: 1 "
                          "differs from hardware.tensor_parallel 2"), msg
    s = _spec({"vllm_speculative_config": {**vc, "draft_tensor_parallel_size": 2}}, hardware=hw)
    assert s.method == "eagle3"
    assert "draft_tensor_parallel_size 2 recorded" in ec.note(s)


def test_the_mapping_is_pure():
    cfg_in = {"method": "deepseek_mtp", "num_speculative_tokens": 2}
    before = json.dumps(cfg_in)
    m = ec.map_engine_config("vllm_speculative_config", cfg_in)
    assert json.dumps(cfg_in) == before
    assert m.keys == {"method": "mtp", "k": 2}
    assert m.origin == {"method": "method", "k": "num_speculative_tokens"}


def test_suffix_maps_onto_suffix_decoding():
    s = _spec({"vllm_speculative_config": {"method": "suffix", "num_speculative_tokens": 8,
                                           "suffix_decoding_max_tree_depth": 24}})
    assert (s.method, s.k) == ("suffix", 8)
    assert "suffix_decoding_max_tree_depth recorded" in ec.note(s)


def test_medusa_maps_onto_the_medusa_drafter():
    assert "medusa" in DRAFTERS
    m = ec.map_engine_config("vllm_speculative_config",
                             {"method": "medusa", "num_speculative_tokens": 3})
    assert m.keys == {"method": "medusa", "k": 3}


# ------------------------------------------------------------------ CLI and runs


def test_cli_validate_names_the_field(tmp_path, capsys):
    data = yaml.safe_load(CHAT.read_text())
    data["speculation"] = {"vllm_speculative_config": {"method": "eagle3",
                                                       "num_speculative_tokens": 4,
                                                       "enforce_eager": True},
                           "acceptance": {"profile": "qwen3-8b-eagle3"}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["validate", str(path)]) == 2
    line = _one_error(capsys)
    assert "speculation.vllm_speculative_config.enforce_eager: vLLM SpeculativeConfig field " \
           "not mapped" in line, line
    assert main(["validate", str(EXAMPLE)]) == 0


def test_cli_set_override_conflicts(capsys):
    assert main(["validate", str(EXAMPLE), "--set", "speculation.k=2"]) == 2
    line = _one_error(capsys)
    assert "speculation.vllm_speculative_config.num_speculative_tokens: 4 conflicts with " \
           "speculation.k: 2" in line, line


def _run(speculation: dict) -> tuple[dict, object]:
    data = yaml.safe_load(CHAT.read_text())
    data["speculation"] = speculation
    res = run_scenario(data, overrides=SMALL)
    m = dict(res.metrics)
    m.pop("wall_time_s")
    return m, res.requests


@pytest.mark.parametrize("engine,native", [
    ({"vllm_speculative_config": {"method": "eagle3", "num_speculative_tokens": 3,
                                  "model": "AngelSlim/Qwen3-8B_eagle3"}},
     {"method": "eagle3", "k": 3}),
    ({"vllm_speculative_config": json.dumps({"method": "draft_model",
                                             "model": "Qwen/Qwen3-0.6B",
                                             "num_speculative_tokens": 4,
                                             "disable_by_batch_size": 4})},
     {"method": "draft_model", "k": 4, "drafter": "Qwen3-0.6B", "policy": "rules",
      "policy_params": {"rules": [{"name": "vLLM disable_by_batch_size 4",
                                   "when": {"batch_at_least": 5}, "k": 0},
                                  {"name": "vLLM: below disable_by_batch_size", "k": 4}],
                        "probe_every": 10**9}}),
    ({"sglang": {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 5,
                 "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 6}},
     {"method": "eagle3", "k": 5}),
])
def test_a_run_equals_the_native_scenario(engine, native):
    acc = {"acceptance": {"profile": "qwen3-8b-eagle3"}}
    m_engine, req_engine = _run({**engine, **acc})
    m_native, req_native = _run({**native, **acc})
    note = m_engine["notes"].pop(0)  # the engine-config run says where its keys came from
    assert note.startswith("speculation from "), note
    assert m_engine == m_native
    assert req_engine.equals(req_native)
    assert m_engine["speculation"]["method"] == native["method"]
    assert m_engine["speculation"]["k"] == native["k"]


def test_the_example_scenario_uses_its_rule():
    m = run_scenario(EXAMPLE, overrides={"simulation.progress": False}).metrics
    assert m["speculation"]["policy"] == "rules"
    assert any("disable_by_batch_size 20" in r for r in m["speculation"]["policy_decisions"])
    assert m["requests_completed"] == m["requests_arrived"] == 400
