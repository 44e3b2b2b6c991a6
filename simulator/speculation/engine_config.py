"""Speculation as the serving engine writes it, mapped onto specsim's own ``speculation`` keys.

A scenario may give ``speculation: {vllm_speculative_config: {...}}`` (vLLM's
``--speculative-config`` JSON, as a mapping or as the JSON string) or ``speculation:
{sglang: {...}}`` (SGLang's ``--speculative-*`` server arguments, by their ``ServerArgs``
field names). ``map_engine_config`` is a pure function from that dict to specsim's keys
(``method``, ``k``, ``drafter``, ``policy``, ``policy_params``); the schema applies it before
validation, so the rest of specsim only sees its own keys, and keeps the engine's dict as a
record (``scenario.json`` shows it; ``note`` describes the mapping in one line). A field with
no mapping is a one-line error naming it; a field given both ways with different values is
an error naming both keys, as for ``engine:``.

Sources (read for this module, 2026-12-03):

- vLLM ``vllm/config/speculative.py`` (class ``SpeculativeConfig``), vllm-project/vllm at
  commit f19b16d95e4395790661f4835e4436bc3dd5d9c7: the fields, ``SpeculativeMethod`` and
  ``MTPModelTypes``, ``disable_by_batch_size`` ("Disable speculative decoding for new
  incoming requests when the number of enqueued requests is larger than this value",
  ``ge=2``), ``prompt_lookup_min/max`` (both default to 5 when neither is given), the
  MTP model types folded into ``mtp``. The same file at commit
  002e77c1f0ef9b19cff8b9e21cfbd6feb3d6b443 (newer): ``disable_by_batch_size`` removed,
  ``num_speculative_tokens_per_batch_size`` added, the method detected from the draft model's
  name when ``method`` is omitted ("eagle-" -> eagle, "eagle3" -> eagle3, "dflash" -> dflash,
  else draft_model), ``parallel_drafting`` with ``draft_model`` = PARD
  (``max_num_new_slots_for_drafting``'s table), and ``_verify_and_get_draft_tp``: the draft
  tensor parallel size is 1 or the target's.
- SGLang ``python/sglang/srt/server_args.py`` (class ``ServerArgs``, "Speculative decoding"
  fields), sgl-project/sglang at commit 001067fffe33427bee0ed2f007fb7551a1d76b44:
  ``speculative_algorithm`` (builtins EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, DFLASH,
  DSPARK), ``speculative_num_steps``, ``speculative_eagle_topk``,
  ``speculative_num_draft_tokens``, ``speculative_draft_model_path`` (alias
  ``speculative_draft_model``), ``speculative_dflash_block_size`` ("Block size (verify
  window length). Alias of --speculative-num-draft-tokens for DFLASH"), the n-gram lookup
  settings. ``speculative_eagle_topk`` > 1 drafts a tree: it maps onto ``speculation.tree``
  in SGLang's form. With ``speculative_eagle_topk == 1`` SGLang sets ``speculative_num_draft_tokens``
  to ``speculative_num_steps + 1`` (its EAGLE handling, same repository), so a chain drafts
  ``speculative_num_steps`` tokens.

Choices made here (each also stated in the note a mapped scenario carries):

- vLLM ``eagle`` (EAGLE-1/2 heads) and SGLang ``EAGLE`` are priced as specsim's ``eagle3``
  head (one decoder layer of the target plus an LM head); the acceptance, which is what
  differs most, comes from ``speculation.acceptance`` as always (assumed comparable cost).
- SGLang ``NGRAM`` and ``DFLASH`` verify ``speculative_num_draft_tokens`` tokens per step,
  which specsim prices as a chain of k = that - 1 drafts (verify width k + 1). For NGRAM
  SGLang's lookup may propose a tree of that many tokens; the verify width, hence the
  verify cost, is the same, and what the tree gains is in the acceptance you give (assumed).
- ``disable_by_batch_size: N`` becomes the ``rules`` policy: no drafting when at least N + 1
  rows decode (vLLM: "larger than N"), k otherwise. vLLM counts the requests in its
  persistent batch (prefilling ones too) and decides per step; the rule counts decoding rows.
- n-gram window settings (vLLM ``prompt_lookup_min/max``, SGLang ``speculative_ngram_*``)
  shape which tokens the lookup proposes, which reaches specsim through
  ``speculation.ngram.match_rate`` and the acceptance; they are recorded, not keys.
- A draft model given as a Hugging Face id resolves to a catalog model when the id is the one
  a catalog entry's ``source`` names, or its last part equals a catalog name (ignoring case,
  and a trailing ``-Instruct``/``-hf``/``-chat-hf``/``-Base``: those variants share the base
  model's shape). EAGLE/MTP heads are derived from the target, so their id is recorded only.
- specsim prices a drafter at the target's tensor parallelism: a ``draft_tensor_parallel_size``
  other than ``hardware.tensor_parallel`` is an error (``check_draft_tp``), not a note.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from specsim import values
from specsim.messages import show
from specsim.simulator.registry import DRAFTERS

VLLM_KEY = "vllm_speculative_config"
SGLANG_KEY = "sglang"
ENGINE_SECTIONS = (VLLM_KEY, SGLANG_KEY)

#: vLLM's MTP model types, all folded into ``mtp`` by SpeculativeConfig.__post_init__
#: (f19b16d's list plus the names 002e77c adds)
VLLM_MTP_METHODS = frozenset({
    "mtp", "deepseek_mtp", "mimo_mtp", "glm4_moe_mtp", "glm4_moe_lite_mtp", "glm_ocr_mtp",
    "ernie_mtp", "exaone_moe_mtp", "qwen3_next_mtp", "qwen3_5_mtp", "longcat_flash_mtp",
    "pangu_ultra_moe_mtp", "step3p5_mtp", "dots3_note_mtp", "mimo_v2_mtp", "nemotron_h_mtp",
    "exaone4_5_mtp", "qwen4_exp_mtp", "bailing_hybrid_v3_mtp", "minimax_m3_mtp",
    "bailing_hybrid_mtp", "kimi_k3_mtp", "hy_v3_mtp", "hy_v4_mtp", "gemma4_mtp",
    "inkling_mtp", "glm5_next_mtp"})
#: vLLM methods specsim has no drafter for (the mapped ones: each drafter's ``vllm`` names)
VLLM_UNMAPPED_METHODS = ("mlp_speculator", "custom_class", "extract_hidden_states",
                         "dspark")
#: suffix decoding's lookup settings (recorded with method suffix)
VLLM_SUFFIX = ("suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests",
               "suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob")
#: SpeculativeConfig fields mapped here
VLLM_MAPPED = ("method", "model", "num_speculative_tokens", "draft_tensor_parallel_size",
               "prompt_lookup_min", "prompt_lookup_max", "disable_by_batch_size",
               "parallel_drafting", *VLLM_SUFFIX)
#: the other SpeculativeConfig fields (f19b16d and 002e77c): real, but without a mapping
VLLM_OTHER_FIELDS = (
    "enforce_eager", "tensor_parallel_size", "quantization", "moe_backend",
    "attention_backend", "kv_cache_dtype", "max_model_len", "revision", "code_revision",
    "index_share_for_mtp_iteration", "disable_padded_drafter_batch", "disable_eagle_block_drop",
    "use_local_argmax_reduction", "use_heterogeneous_vocab", "speculative_token_tree",
    "num_speculative_tokens_per_batch_size", "draft_load_config", "rejection_sample_method",
    "synthetic_acceptance_rates", "synthetic_acceptance_length", "enable_adaptive_verification",
    "draft_sample_method", "dspark_draft_topk", "target_model_config",
    "target_parallel_config", "draft_model_config", "draft_parallel_config")
#: why some of them have no mapping (the rest: "has no meaning in specsim")
VLLM_WHY = {
    "tensor_parallel_size": "vLLM itself rejects it inside the speculative config; use "
                            "draft_tensor_parallel_size",
    "quantization": "give the drafter's precision as speculation.drafter_quantization",
    "kv_cache_dtype": "give the drafter's precision as speculation.drafter_quantization",
    "speculative_token_tree": "give the tree as speculation.tree (widths per depth)",
    "num_speculative_tokens_per_batch_size": "no mapping yet; write the schedule as "
                                             "speculation.policy rules with batch_at_least",
    "rejection_sample_method": "acceptance comes from speculation.acceptance",
    "synthetic_acceptance_rates": "give them as speculation.acceptance.rate_by_position",
    "synthetic_acceptance_length": "give it as speculation.acceptance.tau with at_k",
}

SGLANG_UNMAPPED_ALGORITHMS = ("DSPARK", "LOOKAHEAD")
SGLANG_CHAIN = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")  # num_steps / topk / draft tokens
SGLANG_LOOKUP = ("speculative_ngram_min_bfs_breadth", "speculative_ngram_max_bfs_breadth",
                 "speculative_ngram_match_type", "speculative_ngram_max_trie_depth",
                 "speculative_ngram_capacity")
SGLANG_MAPPED = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                 "speculative_num_draft_tokens", "speculative_draft_model_path",
                 "speculative_draft_model", "speculative_dflash_block_size", *SGLANG_LOOKUP)
SGLANG_OTHER_FIELDS = (
    "speculative_draft_model_revision", "speculative_draft_load_format",
    "speculative_dspark_block_size", "speculative_dspark_sps_table_path",
    "speculative_dspark_confidence_sts_path",
    "speculative_dspark_align_verify_tokens_to_graph_tier",
    "speculative_accept_threshold_single", "speculative_accept_threshold_acc",
    "speculative_use_rejection_sampling", "speculative_token_map", "speculative_attention_mode",
    "speculative_draft_attention_backend", "speculative_dsa_topk_backend",
    "speculative_draft_kv_cache_dtype", "speculative_draft_window_size",
    "speculative_moe_runner_backend", "speculative_moe_a2a_backend",
    "speculative_draft_model_quantization", "speculative_skip_dp_mlp_sync",
    "enable_multi_layer_eagle", "speculative_adaptive", "speculative_adaptive_config",
    "speculative_ngram_external_corpus_path", "speculative_ngram_external_sam_budget",
    "speculative_ngram_external_corpus_max_tokens")
SGLANG_WHY = {
    "speculative_draft_model_quantization": "give the drafter's precision as "
                                            "speculation.drafter_quantization",
    "speculative_draft_kv_cache_dtype": "give the drafter's precision as "
                                        "speculation.drafter_quantization",
    "speculative_accept_threshold_single": "acceptance comes from speculation.acceptance",
    "speculative_accept_threshold_acc": "acceptance comes from speculation.acceptance",
    "speculative_adaptive": "write an adaptive speculation.policy instead",
}

MAX_K = 64  # speculation.k's upper bound in the schema
#: the rules policy's probe period for a disable_by_batch_size rule: vLLM does not probe, and
#: no run here reaches 1e9 decode steps on one worker (so only step 0 probes; assumed harmless)
NO_PROBE = 10**9
_HF_ID = re.compile(r"([A-Za-z0-9][\w.-]*/[\w.-]+)")
_VARIANT_SUFFIXES = ("-instruct", "-chat-hf", "-hf", "-base")


def engine_names(engine: str) -> dict[str, str]:
    """vLLM method (``engine="vllm"``) or SGLang algorithm (``"sglang"``) -> specsim method,
    from what each registered drafter declares (``DrafterInfo.vllm`` / ``.sglang``)."""
    return {alias: name for name in DRAFTERS.names()
            for alias in getattr(DRAFTERS.info(name), engine)}


def _specsim_methods() -> str:
    return ", ".join(m for m in DRAFTERS.names() if m != "none")


class EngineConfigError(ValueError):
    """A problem with one field: ``key`` is relative to ``speculation`` (e.g.
    ``vllm_speculative_config.method``), ``message`` says what was expected."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key, self.message = key, message


@dataclass
class Mapped:
    """What an engine's config says, in specsim's terms."""

    section: str  # vllm_speculative_config | sglang
    config: dict[str, Any]  # as given (a JSON string parsed)
    keys: dict[str, Any] = field(default_factory=dict)  # specsim speculation keys it sets
    origin: dict[str, str] = field(default_factory=dict)  # specsim key -> engine field
    notes: list[str] = field(default_factory=list)
    draft_tp: int | None = None
    model_id: str | None = None  # a draft model id that resolved to no catalog model

    @property
    def engine(self) -> str:
        return "vLLM --speculative-config" if self.section == VLLM_KEY else "SGLang"


# ------------------------------------------------------------------ small checks


def _name(key: Any) -> str:
    return key if isinstance(key, str) and key.isprintable() and len(key) <= 60 else show(key)


def _int(section: str, cfg: dict[str, Any], key: str, lo: int, hi: int | None = None,
         required: str | None = None) -> int | None:
    value = cfg.get(key)
    if value is None:
        if required:
            raise EngineConfigError(f"{section}.{key}", f"required {required}")
        return None
    try:  # the shared number rule (specsim.values)
        return values.number(value, integer=True, lo=lo, hi=hi)
    except values.ValueRuleError as exc:
        raise EngineConfigError(f"{section}.{key}", str(exc)) from None


def _str(section: str, cfg: dict[str, Any], key: str) -> str | None:
    value = cfg.get(key)
    if value is not None and not isinstance(value, str):
        raise EngineConfigError(f"{section}.{key}", f"expected a string, got {show(value)}")
    return value


def _check_fields(section: str, cfg: dict[str, Any], mapped: tuple[str, ...],
                  other: tuple[str, ...], why: dict[str, str], engine: str) -> None:
    """Every field is one this module maps; a real engine field without a mapping and an
    unknown name are one-line errors naming it."""
    for key in cfg:
        if key in mapped:
            continue
        where = f"{section}.{_name(key)}"
        if key in other:
            reason = why.get(key, "has no meaning in specsim")
            raise EngineConfigError(where, f"{engine} field not mapped onto specsim ({reason}); "
                                           f"mapped fields: {', '.join(mapped)}")
        hint = difflib.get_close_matches(key, [*mapped, *other], n=1) \
            if isinstance(key, str) else []
        tip = f"did you mean {hint[0]!r}? " if hint else ""
        raise EngineConfigError(where, f"not a {engine} field ({tip}mapped fields: "
                                       f"{', '.join(mapped)})")


def parse(section: str, value: Any) -> dict[str, Any]:
    """The engine's config as a dict: a mapping, or (vLLM) the JSON string of one."""
    if isinstance(value, str) and section == VLLM_KEY:
        from specsim.safe_read import DuplicateKeyError, json_loads

        try:
            value = json_loads(value)
        except DuplicateKeyError as exc:
            raise EngineConfigError(section, f"key {show(exc.args[0])} appears twice in the "
                                             "JSON; give each key once") from None
        except json.JSONDecodeError as exc:
            raise EngineConfigError(section, f"expected vLLM's --speculative-config JSON, got "
                                             f"invalid JSON ({exc.msg} at column {exc.colno})"
                                    ) from None
        if not isinstance(value, dict):
            raise EngineConfigError(section, f"expected a JSON object, got {show(value)}")
        return value
    if not isinstance(value, dict):
        kind = "a mapping or a JSON string" if section == VLLM_KEY else "a mapping"
        raise EngineConfigError(section, f"expected {kind}, got {show(value)}")
    return dict(value)


def catalog_model(ref: str) -> str | None:
    """The catalog model a name or Hugging Face id means, or None (see the module notes)."""
    from specsim.cost_models.catalog import model_catalog

    cat = model_catalog()
    if ref in cat:
        return ref
    by_id: dict[str, str] = {}
    for name, entry in cat.items():
        by_id.setdefault(name.lower(), name)
        src = entry.get("source") if isinstance(entry, dict) else None
        for hf_id in _HF_ID.findall(str(src or "")):
            by_id.setdefault(hf_id.lower(), name)
    low = ref.strip().lower()
    if low in by_id:
        return by_id[low]
    last = low.rsplit("/", 1)[-1]
    for cand in (last, *(last.removesuffix(s) for s in _VARIANT_SUFFIXES if last.endswith(s))):
        if cand in by_id:
            return by_id[cand]
    return None


def _drafter(m: Mapped, key: str, ref: str | None, method: str, needs_model: bool) -> None:
    """``model`` / ``speculative_draft_model_path`` -> ``drafter`` for a separate draft model;
    a head's id (EAGLE, MTP, Medusa) is recorded only: specsim derives the head."""
    if ref is None:
        return
    if not needs_model:
        m.notes.append(f"{key} {show(ref)} recorded: specsim derives the {method} head from "
                       "the target model")
        return
    name = catalog_model(ref)
    if name is None:
        m.model_id = ref  # resolve() asks for speculation.drafter next to it
        return
    m.keys["drafter"] = name
    m.origin["drafter"] = key


# ------------------------------------------------------------------ vLLM


def _vllm_method(cfg: dict[str, Any]) -> tuple[str, str]:
    """(vLLM's method as it resolves, specsim's method)."""
    section = VLLM_KEY
    method = _str(section, cfg, "method")
    model = _str(section, cfg, "model")
    if method is None:  # vLLM's detection from the model name (002e77c __post_init__)
        low = (model or "").lower()
        method = ("ngram" if model in ("ngram", "[ngram]") else "eagle" if "eagle-" in low
                  else "eagle3" if "eagle3" in low else "dflash" if "dflash" in low
                  else "draft_model")
        if model is None:
            raise EngineConfigError(f"{section}.method", "required when model is not given "
                                                         "(vLLM needs one of them)")
    if method in VLLM_UNMAPPED_METHODS:
        raise EngineConfigError(f"{section}.method", f"vLLM method {method!r} has no specsim "
                                                     f"drafter (specsim has: "
                                                     f"{_specsim_methods()})")
    names = engine_names("vllm")
    ours = names.get(method)
    if ours is None:
        raise EngineConfigError(f"{section}.method", f"expected a vLLM method ("
                                                     f"{', '.join(sorted(names))}), got "
                                                     f"{show(method)}")
    if cfg.get("parallel_drafting") is not None and not isinstance(cfg["parallel_drafting"],
                                                                    bool):
        raise EngineConfigError(f"{section}.parallel_drafting",
                                f"expected true or false, got {show(cfg['parallel_drafting'])}")
    if cfg.get("parallel_drafting"):
        if ours == "draft_model":
            ours = "pard"  # vLLM: PARD = draft_model with parallel drafting
        elif ours != "dflash":  # DFlash drafts in parallel anyway
            raise EngineConfigError(f"{section}.parallel_drafting", f"no specsim drafter for "
                                                                    f"parallel drafting with "
                                                                    f"method {method!r}")
    return method, ours


def map_vllm(value: Any) -> Mapped:
    """vLLM's SpeculativeConfig fields -> specsim keys."""
    section = VLLM_KEY
    cfg = parse(section, value)
    _check_fields(section, cfg, VLLM_MAPPED, VLLM_OTHER_FIELDS, VLLM_WHY, "vLLM SpeculativeConfig")
    m = Mapped(section, cfg)
    method, ours = _vllm_method(cfg)
    m.keys["method"], m.origin["method"] = ours, "method" if "method" in cfg else "model"
    if method != ours:
        why = {"eagle": "EAGLE-1/2 head priced as the eagle3 head (one decoder layer + LM head)",
               "ngram_gpu": "the GPU lookup priced as the CPU lookup "
                            "(speculation.ngram.cpu_s_per_step)"}.get(method, "")
        m.notes.append(f"method {method!r} -> {ours}" + (f": {why}" if why else ""))
    k = _int(section, cfg, "num_speculative_tokens", 1, MAX_K, required=(
        "(vLLM reads a default from the draft checkpoint's n_predict, which specsim does "
        "not have)"))
    m.keys["k"], m.origin["k"] = k, "num_speculative_tokens"
    model = _str(section, cfg, "model")
    suffix_given = [key for key in VLLM_SUFFIX if cfg.get(key) is not None]
    if suffix_given and ours != "suffix":
        raise EngineConfigError(f"{section}.{suffix_given[0]}", "only for method suffix")
    if ours == "suffix":
        if model is not None:
            raise EngineConfigError(f"{section}.model", f"suffix decoding takes no draft model, "
                                                        f"got {show(model)}")
        if suffix_given:
            m.notes.append(", ".join(suffix_given) + " recorded: they shape what the suffix "
                           "tree proposes, which specsim takes from speculation.suffix "
                           "(match chance vs tokens seen) and the acceptance")
    elif ours == "ngram":
        if model not in (None, "ngram", "[ngram]"):
            raise EngineConfigError(f"{section}.model", f"n-gram lookup takes no draft model, "
                                                        f"got {show(model)}")
        lo = _int(section, cfg, "prompt_lookup_min", 1)
        hi = _int(section, cfg, "prompt_lookup_max", 1)
        if lo is None and hi is None:
            lo = hi = 5  # vLLM's default when neither is given (f19b16d)
        lo, hi = (hi if lo is None else lo), (lo if hi is None else hi)
        if lo > hi:
            raise EngineConfigError(f"{section}.prompt_lookup_min", f"{lo} must be at most "
                                                                    f"prompt_lookup_max {hi}")
        m.notes.append(f"prompt_lookup_min {lo}, prompt_lookup_max {hi} recorded: the window "
                       "shapes what the lookup proposes, which specsim takes from "
                       "speculation.ngram.match_rate and the acceptance")
    else:
        for key in ("prompt_lookup_min", "prompt_lookup_max"):
            if cfg.get(key) is not None:
                raise EngineConfigError(f"{section}.{key}", "only for method ngram")
        _drafter(m, "model", model, ours, DRAFTERS.info(ours).draft_model)
    m.draft_tp = _int(section, cfg, "draft_tensor_parallel_size", 1)
    n = _int(section, cfg, "disable_by_batch_size", 2)  # ge=2 in vLLM
    if n is not None:
        m.keys["policy"], m.origin["policy"] = "rules", "disable_by_batch_size"
        m.keys["policy_params"] = {"rules": [
            {"name": f"vLLM disable_by_batch_size {n}", "when": {"batch_at_least": n + 1},
             "k": 0},
            {"name": "vLLM: below disable_by_batch_size", "k": k}], "probe_every": NO_PROBE}
        m.origin["policy_params"] = "disable_by_batch_size"
        m.notes.append(f"disable_by_batch_size {n} -> policy rules: no drafting from {n + 1} "
                       "decoding rows (vLLM counts every request in its batch)")
    return m


# ------------------------------------------------------------------ SGLang


def map_sglang(value: Any) -> Mapped:
    """SGLang's ServerArgs speculative fields -> specsim keys."""
    section = SGLANG_KEY
    cfg = parse(section, value)
    _check_fields(section, cfg, SGLANG_MAPPED, SGLANG_OTHER_FIELDS, SGLANG_WHY,
                  "SGLang server argument")
    m = Mapped(section, cfg)
    algo = _str(section, cfg, "speculative_algorithm")
    names = engine_names("sglang")
    if algo is None:
        raise EngineConfigError(f"{section}.speculative_algorithm",
                                f"required (one of {', '.join(sorted(names))})")
    algo = algo.upper()
    if algo in SGLANG_UNMAPPED_ALGORITHMS or algo not in names:
        raise EngineConfigError(f"{section}.speculative_algorithm",
                                f"expected one of {', '.join(sorted(names))} (the ones "
                                f"specsim has a drafter for), got {show(cfg['speculative_algorithm'])}")
    ours = names[algo]
    m.keys["method"], m.origin["method"] = ours, "speculative_algorithm"
    if algo == "EAGLE":
        m.notes.append("EAGLE -> eagle3: the EAGLE-2 head priced as the eagle3 head "
                       "(one decoder layer + LM head)")
    steps = _int(section, cfg, "speculative_num_steps", 1, MAX_K)
    topk = _int(section, cfg, "speculative_eagle_topk", 1)
    draft = _int(section, cfg, "speculative_num_draft_tokens", 1)
    block = _int(section, cfg, "speculative_dflash_block_size", 2)
    if algo in SGLANG_CHAIN:
        if steps is None:
            raise EngineConfigError(f"{section}.speculative_num_steps", (
                "required (SGLang picks num_steps, eagle_topk and num_draft_tokens from the "
                "model architecture when all three are omitted; specsim cannot)"))
        if topk is None:
            raise EngineConfigError(f"{section}.speculative_eagle_topk",
                                    "required with speculative_num_steps (1 for a chain)")
        m.keys["k"], m.origin["k"] = steps, "speculative_num_steps"
        if topk > 1:
            if algo == "STANDALONE":
                raise EngineConfigError(f"{section}.speculative_eagle_topk",
                                        f"{topk} drafts a tree; specsim drafts trees with EAGLE "
                                        "and MTP heads only (topk 1 drafts a chain)")
            if draft is None:
                raise EngineConfigError(f"{section}.speculative_num_draft_tokens",
                                        f"required with speculative_eagle_topk {topk} (the "
                                        "tree's tokens verified per sequence)")
            m.keys["tree"] = {"topk": topk, "num_steps": steps, "num_draft_tokens": draft}
            m.origin["tree"] = "speculative_eagle_topk"
            m.notes.append(f"eagle_topk {topk}, num_steps {steps}, num_draft_tokens {draft} -> "
                           "speculation.tree (SGLang's form; how the nodes spread over depths "
                           "is assumed: the greedy path first, then shallow-first)")
        elif draft is not None and draft != steps + 1:
            m.notes.append(f"speculative_num_draft_tokens {draft} -> {steps + 1}: SGLang sets it "
                           "to num_steps + 1 when eagle_topk is 1")
        for key in (*SGLANG_LOOKUP, "speculative_dflash_block_size"):
            if cfg.get(key) is not None:
                raise EngineConfigError(f"{section}.{key}", f"not used by {algo}")
    else:  # NGRAM, DFLASH: the verify window
        for key in ("speculative_num_steps", "speculative_eagle_topk"):
            if cfg.get(key) is not None:
                raise EngineConfigError(f"{section}.{key}", f"not used by {algo} (its draft "
                                                            "length is speculative_num_draft_tokens)")
        if algo == "DFLASH" and block is not None:
            if draft is not None and draft != block:
                raise EngineConfigError(f"{section}.speculative_dflash_block_size",
                                        f"{block} conflicts with speculative_num_draft_tokens "
                                        f"{draft} (an alias of it for DFLASH)")
            draft, key = block, "speculative_dflash_block_size"
        else:
            key = "speculative_num_draft_tokens"
            if block is not None:
                raise EngineConfigError(f"{section}.speculative_dflash_block_size",
                                        "only for DFLASH")
        if draft is None:
            raise EngineConfigError(f"{section}.{key}", f"required for {algo} (the tokens "
                                                        "verified per step)")
        if not 2 <= draft <= MAX_K + 1:
            raise EngineConfigError(f"{section}.{key}", f"expected an integer in [2, "
                                                        f"{MAX_K + 1}], got {draft}")
        m.keys["k"], m.origin["k"] = draft - 1, key
        m.notes.append(f"{key} {draft} -> k {draft - 1} (verify width {draft})"
                       + (": SGLang's lookup may verify a tree of that many tokens, priced "
                          "here as a chain of the same width" if algo == "NGRAM" else ""))
        if algo != "NGRAM":
            for k2 in SGLANG_LOOKUP:
                if cfg.get(k2) is not None:
                    raise EngineConfigError(f"{section}.{k2}", "only for NGRAM")
        elif any(cfg.get(k2) is not None for k2 in SGLANG_LOOKUP):
            m.notes.append("speculative_ngram_* recorded: they shape what the lookup proposes, "
                           "which specsim takes from speculation.ngram.match_rate and the "
                           "acceptance")
    path_key = "speculative_draft_model_path"
    if cfg.get(path_key) is not None and cfg.get("speculative_draft_model") is not None:
        raise EngineConfigError(f"{section}.speculative_draft_model",
                                "an alias of speculative_draft_model_path; give one of them")
    if cfg.get(path_key) is None and cfg.get("speculative_draft_model") is not None:
        path_key = "speculative_draft_model"
    ref = _str(section, cfg, path_key)
    if ours == "ngram":
        if ref is not None:
            raise EngineConfigError(f"{section}.{path_key}", "n-gram lookup takes no draft model")
    else:
        _drafter(m, path_key, ref, ours, DRAFTERS.info(ours).draft_model)
    return m


# ------------------------------------------------------------------ the hook


def map_engine_config(section: str, value: Any) -> Mapped:
    """One engine section -> specsim keys (pure: no scenario needed)."""
    return (map_vllm if section == VLLM_KEY else map_sglang)(value)


def resolve(spec: dict[str, Any]) -> dict[str, Any]:
    """The raw ``speculation`` mapping with its engine config written onto specsim's keys.

    A specsim key given natively with a different value is an error naming both keys
    (equal values are fine); a native ``method: none`` switches speculation off and keeps the
    engine config as a record. Without an engine section the mapping is returned unchanged.
    """
    given = [s for s in ENGINE_SECTIONS if spec.get(s) is not None]
    if not given:
        return spec
    if len(given) > 1:
        raise EngineConfigError(given[1], f"give one engine's config, not both {given[0]} "
                                          f"and {given[1]}")
    m = map_engine_config(given[0], spec[given[0]])
    out = {**spec, given[0]: m.config}
    if spec.get("method") == "none":
        return out  # switched off (e.g. --set speculation.method=none, --baseline)
    for key, value in m.keys.items():
        if key in spec and spec[key] is not None and spec[key] != value:
            src = m.origin[key]
            ev = m.config.get(src)
            said = show(ev) + ("" if ev == value else f" (= {key} {show(value)})")
            raise EngineConfigError(f"{given[0]}.{src}", f"{said} conflicts with speculation."
                                                         f"{key}: {show(spec[key])} (the same "
                                                         "setting given twice); give one of them")
        out[key] = value
    if m.model_id is not None and spec.get("drafter") is None and not _draft_cost(spec):
        key = "model" if given[0] == VLLM_KEY else (
            "speculative_draft_model_path" if "speculative_draft_model_path" in m.config
            else "speculative_draft_model")
        raise EngineConfigError(f"{given[0]}.{key}", (
            f"{show(m.model_id)} matches no model in specsim's catalog; add speculation.drafter "
            "(a catalog name, or an inline mapping with the model's shape) next to it"))
    return out


def _draft_cost(spec: dict[str, Any]) -> bool:
    dc = spec.get("draft_cost")
    return isinstance(dc, dict) and any(dc.get(k) is not None
                                        for k in ("ratio", "seconds_per_token"))


def _config_of(spec: Any) -> tuple[str, Any] | None:
    """The validated speculation section's engine config: (its key, its mapping), or None."""
    for section in ENGINE_SECTIONS:
        value = getattr(spec, section)
        if value is not None:
            return section, value
    return None


def note(spec: Any) -> str | None:
    """One line saying which engine config the speculation section came from and how it
    mapped (None without one), for ``specsim validate``, metrics.json notes and the report."""
    found = _config_of(spec)
    if found is None:
        return None
    m = map_engine_config(found[0], found[1])
    text = json.dumps(m.config, separators=(",", ":"), sort_keys=True, default=str)
    if spec.method == "none":
        return f"speculation from {m.engine} {text} is switched off (method none)"
    parts = [f"{m.origin[k]} -> {k} {show(v, 40)}" for k, v in m.keys.items()
             if k != "policy_params"]
    if m.model_id is not None:
        parts.append(f"draft model {m.model_id!r} -> speculation.drafter as given")
    if m.draft_tp is not None:
        parts.append(f"draft_tensor_parallel_size {m.draft_tp} recorded")
    return (f"speculation from {m.engine} {text}: " + ", ".join(parts)
            + "".join(f"; {n}" for n in m.notes))


def check_draft_tp(spec: Any, tensor_parallel: int) -> None:
    """A vLLM ``draft_tensor_parallel_size`` other than the target's is an error: specsim
    prices a drafter at the target's tensor parallelism (``ForwardCostModel(..., ctx.tp)``)."""
    found = _config_of(spec)
    if found is None or found[0] != VLLM_KEY or spec.method in ("none", "ngram"):
        return
    m = map_vllm(found[1])
    if m.draft_tp is not None and m.draft_tp != tensor_parallel:
        raise EngineConfigError(
            f"{VLLM_KEY}.draft_tensor_parallel_size",
            f"{m.draft_tp} differs from hardware.tensor_parallel {tensor_parallel}: specsim "
            "prices the drafter at the target's tensor parallelism and cannot price it on "
            f"{m.draft_tp} device(s) yet (give {tensor_parallel} or leave it out)")
