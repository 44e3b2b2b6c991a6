"""The typed scenario: one pydantic model per section, extra keys forbidden everywhere.

Every number is checked by one rule (``specsim.values``: finite; integers also take
integral floats such as ``1e3``; inclusive or exclusive bounds), every error becomes one
line naming the dotted key and what was expected (with "did you mean" for near-miss keys),
and ``speculation`` is dispatched on ``method``: each method admits the keys that mean
something for it. The methods, each method's own keys (``DrafterInfo.params``) and which
may draft a tree come from the ``DRAFTERS`` registry, read when a scenario is validated,
so a drafter a plug-in registers is a valid method with its own keys. Policy names (router,
batch scheduler, speculation policy, eviction) are checked against their registries too.
The ``workload`` section is validated by ``traces`` and ``speculation.acceptance`` by the
acceptance model; both stay mappings here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    SerializeAsAny,
    ValidationError,
    create_model,
    model_validator,
)

from specsim import values
from specsim.errors import ScenarioError
from specsim.messages import fail, fail_key, unknown_key
from specsim.simulator.kv import radix as _radix  # noqa: F401  (registers lru, lfu, priority)
from specsim.simulator.registry import (
    BATCH_SCHEDULERS,
    DRAFTERS,
    EVICTION,
    RADIX_EVICTION,
    ROUTERS,
    SPECULATION_POLICIES,
)
from specsim.simulator.scenario.fields import (  # noqa: F401  (the value types, re-exported)
    INT_HI,
    AutoBool,
    Bool,
    Choice,
    Float,
    Int,
    Mapping,
    OptBool,
    OptFloat,
    OptInt,
    OptMapping,
    OptRef,
    OptStr,
    Policy,
    Ref,
    Section,
    Str,
    show,
)
from specsim.simulator.scenario.fields import optional_section as _optional_section
from specsim.simulator.scenario.fields import section as _section
from specsim.simulator.scheduling import priority as _priority  # noqa: F401  (priority, edf)
from specsim.simulator.speculation import drafters as _drafters  # noqa: F401  (registers them)
from specsim.simulator.speculation import engine_config

MAX_DEVICES = 1_000_000  # a sanity bound on hardware.count (the memory check comes later)
MAX_TREE_NODES = 4096  # nodes per depth at most (a sanity bound; SGLang trees are < 100)


# ------------------------------------------------------------------ sections

SAMPLED = "sampled"  # hardware.routing_skew: the busiest device's load sampled per pass size
SKEW_HI = 64.0


def _skew_in(value: Any) -> Any:
    """``hardware.routing_skew``: a number from 1 to 64, or ``sampled`` (None: the default,
    sampled under expert parallelism)."""
    if value is None:
        return None
    if isinstance(value, str) and value == SAMPLED:
        return value
    if isinstance(value, str):
        raise fail(f"expected a number from 1 to {SKEW_HI:g} or {SAMPLED}, got {show(value)}")
    try:
        return values.number(value, lo=1.0, hi=SKEW_HI)
    except values.ValueRuleError as exc:
        raise fail(str(exc)) from None


_skew_in.kind, _skew_in.lo, _skew_in.hi = "float", 1.0, SKEW_HI
Skew = Annotated[float | Literal["sampled"] | None, BeforeValidator(_skew_in),
                 Field(json_schema_extra={"minimum": 1.0, "maximum": SKEW_HI})]


class Hardware(Section):
    accelerator: Ref = Field("H100-SXM", description="catalog name or inline mapping")
    count: Int(1, MAX_DEVICES) = Field(1, description="devices in the fleet")
    tensor_parallel: Int(1, MAX_DEVICES) = Field(1, description="devices per worker")
    memory_fraction: Float(0.0, 1.0, exclusive_lo=True) = Field(
        0.90, description="share of HBM the engine may use (weights + KV)")
    expert_parallel: Bool = Field(
        False, description="MoE: each expert whole on one of the worker's tensor_parallel "
                           "devices (EP size = tensor_parallel) instead of sharded over them")
    dp_attention: Bool = Field(
        False, description="attention data-parallel over the worker's devices (each its own "
                           "sequences, weights copied), experts by all-to-all; needs "
                           "expert_parallel")
    routing_skew: Skew = Field(
        None, description="routed tokens on the busiest expert-parallel device / the mean: "
                          "a number (1: balanced), or sampled (by tokens per pass, from a "
                          "measured expert popularity: docs/architecture.md); default: "
                          "sampled under expert_parallel")
    redundant_experts: OptInt(0, 65536) = Field(
        None, description="EPLB: extra expert slots per MoE layer holding replicas of the "
                          "hottest experts, a multiple of tensor_parallel (0: placement "
                          "only; null: no EPLB); needs expert_parallel")


class Quantization(Section):
    weights: Str = "bf16"
    activations: Str = "bf16"
    kv_cache: Str = "bf16"


class DraftCost(Section):
    ratio: OptFloat(0.0, 1e3) = Field(
        None, description="draft time per drafted token / one target decode step")
    seconds_per_token: OptFloat(0.0, 3600.0) = None




def _widths_in(value: Any) -> Any:
    """``tree.widths``: a non-empty list of positive integers, one per depth."""
    if value is None:
        return None
    what = "a non-empty list of positive integers (tree nodes per depth)"
    if not isinstance(value, list | tuple) or not value:
        raise fail(f"expected {what}, got {show(value)}")
    if len(value) > 64:
        raise fail(f"expected at most 64 depths (speculation.k is at most 64), got {len(value)}")
    out = []
    for w in value:
        ok = (not isinstance(w, bool) and isinstance(w, int | float)
              and (isinstance(w, int) or (math.isfinite(w) and w.is_integer())))
        if not ok or w < 1:
            raise fail(f"expected {what}, got {show(w)} in {show(value)}")
        if w > MAX_TREE_NODES:
            raise fail(f"expected at most {MAX_TREE_NODES} nodes per depth, got {show(w)}")
        out.append(int(w))
    return out


_widths_in.kind = "list"
OptWidths = Annotated[list[int] | None, BeforeValidator(_widths_in)]


class Tree(Section):
    """``speculation.tree``: a static draft tree, as nodes per depth or SGLang's three flags.

    ``widths: [4, 2, 2, 1]``: nodes at depths 1..4 (the verify width is their sum + 1, the
    draft depth 4). SGLang form (docs/advanced_features/speculative_decoding.md):
    ``num_steps`` = --speculative-num-steps (depth of autoregressive drafting), ``topk`` =
    --speculative-eagle-topk (branching factor per step), ``num_draft_tokens`` =
    --speculative-num-draft-tokens (tokens verified per sequence, the root included: at most
    1 + topk + (num_steps - 1) x topk^2, the candidates SGLang scores; num_steps + 1 for
    topk 1, SGLang's own rule). How the nodes spread over depths: see
    ``drafters.tree_from_sglang``.
    """

    widths: OptWidths = Field(None, description="tree nodes per depth, e.g. [4, 2, 2, 1]")
    topk: OptInt(1, 64) = Field(None, description="SGLang --speculative-eagle-topk")
    num_steps: OptInt(1, 64) = Field(None, description="SGLang --speculative-num-steps")
    num_draft_tokens: OptInt(2, 64 * MAX_TREE_NODES + 1) = Field(
        None, description="SGLang --speculative-num-draft-tokens (the root included)")

    @model_validator(mode="after")
    def _form(self) -> Tree:
        sglang = [k for k in ("topk", "num_steps", "num_draft_tokens") if getattr(self, k) is not None]
        if self.widths is not None:
            if sglang:
                raise fail_key(sglang[0], "give widths or SGLang's topk / num_steps / "
                                          "num_draft_tokens, not both")
            return self
        if not sglang:
            raise fail("expected widths: [nodes per depth] or topk and num_steps (SGLang's "
                       "form), got neither")
        if self.topk is None:
            raise fail_key("topk", "required with num_steps (SGLang --speculative-eagle-topk)")
        if self.num_steps is None:
            raise fail_key("num_steps", "required with topk (SGLang --speculative-num-steps)")
        n, k, s = self.num_draft_tokens, self.topk, self.num_steps
        if n is None:
            if k > 1:
                raise fail_key("num_draft_tokens", "required when topk > 1 (SGLang "
                               "--speculative-num-draft-tokens: tokens verified per sequence)")
            return self
        cap = 1 + k + (s - 1) * k * k
        if n > cap:
            raise fail_key("num_draft_tokens", f"expected at most {cap} (the root + topk + "
                           f"(num_steps - 1) x topk^2 candidates {s} steps of top-{k} "
                           f"propose), got {n}")
        if n < s + 1:
            raise fail_key("num_draft_tokens", f"expected at least num_steps + 1 = {s + 1} (a "
                           f"path through all {s} drafted depths plus the root), got {n}")
        return self

    @property
    def depth(self) -> int:
        return len(self.widths) if self.widths is not None else int(self.num_steps)


def _per_class_in(value: Any) -> Any:
    """``speculation.per_class``: each class's entry validated as a speculation section
    (a chain, no nested per_class; speculation/per_class.py rule 1)."""
    if value is None:
        return None
    if not isinstance(value, dict) or not value:
        raise fail(f"expected a mapping of class names to speculation sections, got "
                   f"{show(value)}")
    out = {}
    for name, entry in value.items():
        if not isinstance(name, str) or not name:
            raise fail(f"expected class names as keys, got {show(name)}")
        out[name] = _speculation_entry(name, entry)
    return out


def _speculation_entry(name: str | None, entry: Any) -> Any:
    """One drafter's speculation section (a per-class entry, or the switching fallback when
    ``name`` is None), errors naming ``[name.]KEY``."""

    def key_of(key: str) -> str:
        return ".".join(x for x in (name, key) if x)

    if isinstance(entry, dict):
        for key in ("per_class", "tree", "switching"):
            if entry.get(key) is not None:
                raise fail_key(key_of(key), "not allowed in a per-class or fallback entry "
                               "(it drafts a chain and does not nest)")
    try:
        return _speculation(entry, qualify=False)
    except _Bad as bad:
        if not key_of(bad.key):
            raise fail(bad.message) from None
        raise fail_key(key_of(bad.key), bad.message) from None


def _fallback_in(value: Any) -> Any:
    if value is None:
        raise fail("required: the drafter a class switches to (a speculation section: "
                   "method, k, acceptance, ...; method none stops drafting)")
    return _speculation_entry(None, value)


def _class_list(value: Any) -> Any:
    if value is None:
        return None
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(
            isinstance(x, str) and x for x in names):
        raise fail(f"expected a class name or a list of names, got {show(value)}")
    return names


class Switching(Section):
    """``speculation.switching``: a fallback drafter a class switches to on a worker when its
    acceptance collapses, and back (speculation/per_class.py rules 4-6)."""

    classes: Annotated[list[str] | None, BeforeValidator(_class_list)] = Field(
        None, description="classes that may switch (default: all)")
    below: Float(0.0, 1.0) = Field(0.4, description="switch to the fallback when the class's "
                                   "acceptance estimate on its own drafter falls below this")
    above: Float(0.0, 1.0) = Field(0.6, description="switch back when the (probed) estimate "
                                   "reaches this (hysteresis: above > below)")
    min_steps: Int(0, 10**9) = Field(64, description="steps between two switches of a class")
    probe_every: Int(1, 10**9) = Field(8, description="on the fallback, every Nth request of "
                                       "the class admitted drafts with its own drafter")
    decay: Float(0.0, 1.0, exclusive_lo=True) = Field(
        0.98, description="the estimate's decay per observed step (as policy_params.decay)")
    prior_weight: Float(0.0, 1e9) = Field(
        20.0, description="pseudo-trials at the profile's alpha (as policy_params)")
    # last: a bad number elsewhere in the section is named before a missing fallback
    fallback: Annotated[Any, BeforeValidator(_fallback_in)] = Field(
        None, validate_default=True, description="a speculation section: the drafter a "
        "class switches to (loaded and counted in HBM like the others)")

    @model_validator(mode="after")
    def _hysteresis(self) -> Switching:
        if self.above <= self.below:
            raise fail_key("above", f"expected more than below ({self.below:g}): the band "
                           f"between them keeps a class from switching back and forth, got "
                           f"{self.above:g}")
        return self


class _Speculation(Section):
    """Keys every speculation method shares."""

    k: Int(0, 64) = Field(4, description="draft length")
    policy: Policy(SPECULATION_POLICIES) = "static"
    policy_params: OptMapping = Field(
        None, description="the policy's settings (see README: speculation policies)")
    drafter: OptRef = Field(None, description="catalog model or inline mapping")
    drafter_quantization: _section(Quantization)
    draft_cost: _section(DraftCost)
    acceptance: OptMapping = Field(None, description="profile name, alpha, tau at k, ...")
    overlap_draft: Bool = False
    # the engine's own form, mapped onto the keys above before validation and kept as a record
    vllm_speculative_config: OptMapping = Field(
        None, description="vLLM --speculative-config (a mapping or its JSON string)")
    sglang: OptMapping = Field(None, description="SGLang --speculative-* server arguments")
    per_class: Annotated[dict[str, Any] | None, BeforeValidator(_per_class_in)] = Field(
        None, description="class name -> a speculation section (method, drafter, k, "
        "acceptance, ...): that class drafts with its own drafter (speculation/per_class.py)")
    switching: _optional_section(Switching)

    @model_validator(mode="after")
    def _per_class_k(self) -> _Speculation:
        for name, entry in (self.per_class or {}).items():
            if entry.k > self.k:
                raise fail_key(f"per_class.{name}.k", f"expected at most speculation.k "
                               f"({self.k}, the policy's range), got {entry.k}")
        fb = self.switching.fallback if self.switching is not None else None
        if fb is not None and fb.k > self.k:
            raise fail_key("switching.fallback.k", f"expected at most speculation.k "
                           f"({self.k}, the policy's range), got {fb.k}")
        return self


class _TreeSpeculation(_Speculation):
    """A method that may draft a tree: ``speculation.tree`` sets the draft depth, so k must be
    that depth (or left out, and it is set to it)."""

    tree: _optional_section(Tree)

    @model_validator(mode="after")
    def _k_is_depth(self) -> _TreeSpeculation:
        if self.tree is None:
            return self
        depth = self.tree.depth
        if "k" not in self.model_fields_set:
            object.__setattr__(self, "k", depth)  # frozen: set once, while validating
        elif self.k != depth:
            raise fail_key("k", f"expected the tree's depth {depth} (speculation.tree drafts "
                                f"{depth} tokens deep), got {self.k}")
        return self



_VARIANTS: dict[tuple, type[_Speculation]] = {}
_NO_SPECULATION = """``method: none``: the other keys may stay in the file (switching speculation off with
``--set speculation.method=none`` keeps them) and are not used."""


def variant(method: str) -> type[_Speculation]:
    """The ``speculation`` section's model for ``method``: the shared keys, ``method``, the
    method's own keys (its ``DrafterInfo.params``), and ``tree`` for a method that may draft
    one. ``none`` admits every registered method's keys and ``tree`` unchecked (switching
    speculation off with ``--set speculation.method=none`` keeps them) and uses none."""
    names = DRAFTERS.names()
    infos = {m: DRAFTERS.info(m) for m in names}
    if method == "none":
        key = ("none", *((m, id(i)) for m, i in infos.items()))
        own = [m for m in names if m != "none"]
    else:
        key, own = (method, id(infos[method])), [method]
    cls = _VARIANTS.get(key)
    if cls is not None:
        return cls
    fields: dict[str, Any] = {
        "method": (Literal[method], "none") if method == "none" else (Literal[method], ...)}
    for m in own:
        params = infos[m].params
        for fname, field in (params.model_fields.items() if params is not None else ()):
            fields.setdefault(fname, (field.annotation, field))
    base = _TreeSpeculation if method != "none" and infos[method].tree else _Speculation
    if method == "none":
        fields["tree"] = (_optional_section(Tree), None)
    title = "NoSpeculation" if method == "none" else (
        "".join(p.title() for p in method.split("_")) + "Speculation")
    doc = _NO_SPECULATION if method == "none" else infos[method].doc
    cls = create_model(title, __base__=base, __module__=__name__, __doc__=doc, **fields)
    _VARIANTS[key] = cls
    return cls


def variants() -> list[type[_Speculation]]:
    """Every registered method's ``speculation`` model, ``none`` first."""
    return [variant("none")] + [variant(m) for m in DRAFTERS.names() if m != "none"]


class _Bad(Exception):
    """A problem in a speculation section: ``key`` relative to it ("" for the section)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key, self.message = key, message


def _speculation(value: Any, qualify: bool) -> Section:
    """A speculation mapping validated as its method's model (engine configs mapped onto
    specsim's keys first); ``_Bad`` names the first problem. ``qualify``: an unknown key
    directly in the section says which method does not take it."""
    if value is None:
        value = {"method": "none"}
    if isinstance(value, Section):
        return value
    if not isinstance(value, dict):
        raise _Bad("", f"expected a mapping, got {show(value)}")
    try:  # vllm_speculative_config / sglang -> specsim's own keys
        value = engine_config.resolve(value)
    except engine_config.EngineConfigError as exc:
        raise _Bad(exc.key, exc.message) from None
    method = value.get("method", "none")
    if not isinstance(method, str) or method not in DRAFTERS:
        raise _Bad("method", f"expected one of {', '.join(DRAFTERS.names())}, got "
                             f"{show(method)}")
    if value.get("tree") is not None and method != "none" and not DRAFTERS.info(method).tree:
        trees = [m for m in DRAFTERS.names() if DRAFTERS.info(m).tree]
        raise _Bad("tree", f"method {method} drafts a chain, not a tree (a tree is for "
                           f"{', '.join(trees)})")
    cls = variant(method)
    try:
        return cls.model_validate({**value, "method": method})
    except ValidationError as exc:
        key, message = error_line(exc, cls, f" for speculation.method {method}" if qualify
                                  else "")
        raise _Bad(key, message) from None


def _speculation_in(value: Any) -> Any:
    try:
        return _speculation(value, qualify=True)
    except _Bad as bad:
        if not bad.key:
            raise fail(bad.message) from None
        raise fail_key(bad.key, bad.message) from None


Speculation = Annotated[SerializeAsAny[_Speculation], BeforeValidator(_speculation_in)]

class Scheduler(Section):
    policy: Policy(BATCH_SCHEDULERS) = "fcfs"
    max_batch: Int(1) = Field(256, description="sequences per worker")
    token_budget: Int(1) = Field(8192, description="tokens per iteration")
    chunked_prefill: Bool = True
    block_size: Int(1) = Field(16, description="KV block size in tokens")
    kv_blocks: OptInt(2) = Field(
        None, description="KV blocks per worker; default: what memory holds after the weights")
    max_queue: OptInt(0) = Field(None, description="per-worker queue limit")
    preemption: Policy(EVICTION) = Field(
        "newest", description="whose KV is freed first when blocks run out")
    params: OptMapping = Field(None, description="the batch scheduler's own settings (the "
                                                 "params model it registers with)")

    @model_validator(mode="after")
    def _params(self) -> Scheduler:
        return _policy_params(self, BATCH_SCHEDULERS, "batch scheduler")


#: vLLM v1's output rhythm, in engine steps (``engine.output_lag_steps``' default): fitted to
#: the 16 load stages of the 8 shared vLLM v0.15.1 runs on H100 (benchmarks/fidelity.py,
#: 2026-12-06: closed-form least squares of the relative TTFT mean error of the replays made
#: without it; 1.64-1.97 with each model or workload left out). About one step is async
#: scheduling (on by default in vLLM v1 since vllm#27614: the scheduler runs one step ahead,
#: vllm#19970, so a request that arrives while a step runs waits for the step already
#: scheduled), the rest the output path (engine core output processing, detokenise, stream);
#: docs/fidelity.md, "The engine's rhythm"
VLLM_OUTPUT_LAG_STEPS = 1.64


class Engine(Section):
    """The serving engine's own flag names (vLLM's), mapped onto the keys above: giving a
    setting both ways with different values is an error (see ``ENGINE_KEYS``); and its output
    rhythm (``output_lag_steps``, ``output_delay_s``: no flag, ``metrics.collector.deliver``)."""

    kind: Choice("vllm") = Field("vllm", description="whose flag names these are")
    max_num_seqs: OptInt(1) = Field(None, description="vLLM --max-num-seqs = scheduler.max_batch")
    max_num_batched_tokens: OptInt(1) = Field(
        None, description="vLLM --max-num-batched-tokens = scheduler.token_budget")
    enable_chunked_prefill: OptBool = Field(
        None, description="vLLM --enable-chunked-prefill = scheduler.chunked_prefill")
    gpu_memory_utilization: OptFloat(0.0, 1.0, exclusive_lo=True) = Field(
        None, description="vLLM --gpu-memory-utilization = hardware.memory_fraction")
    block_size: OptInt(1) = Field(None, description="vLLM --block-size = scheduler.block_size")
    num_gpu_blocks_override: OptInt(2) = Field(
        None, description="vLLM --num-gpu-blocks-override = scheduler.kv_blocks (KV blocks "
                          "per worker)")
    enable_prefix_caching: OptBool = Field(
        None, description="vLLM --enable-prefix-caching = kv_cache.prefix_cache (vLLM v1 "
                          "turns it on by default; specsim's default stays off, so give it "
                          "to match an engine that caches)")
    output_lag_steps: Float(0.0, 16.0) = Field(
        VLLM_OUTPUT_LAG_STEPS,
        description="engine steps between the step in flight when a token could first be "
                    "made and the client seeing it (vLLM v1: async scheduling's step "
                    "already scheduled, then output processing, detokenise, stream); moves "
                    "TTFT and E2E, not TPOT. Default: vLLM v1's, fitted to the shared vLLM "
                    "runs (1.64); 0: not modelled")
    output_delay_s: Float(0.0, 10.0) = Field(
        0.0, description="fixed seconds added to every token the client sees (detokenise "
                         "and stream; 0: not modelled)")


#: the engine's own settings, which set no other key
ENGINE_OWN = ("kind", "output_lag_steps", "output_delay_s")
#: engine key -> the scenario key it sets (section, key)
ENGINE_KEYS: dict[str, tuple[str, str]] = {
    "max_num_seqs": ("scheduler", "max_batch"),
    "max_num_batched_tokens": ("scheduler", "token_budget"),
    "enable_chunked_prefill": ("scheduler", "chunked_prefill"),
    "gpu_memory_utilization": ("hardware", "memory_fraction"),
    "block_size": ("scheduler", "block_size"),
    "num_gpu_blocks_override": ("scheduler", "kv_blocks"),
    "enable_prefix_caching": ("kv_cache", "prefix_cache"),
}


class Router(Section):
    policy: Policy(ROUTERS) = "round_robin"
    params: OptMapping = Field(None, description="the router's own settings (the params "
                                                 "model it registers with)")

    @model_validator(mode="after")
    def _params(self) -> Router:
        return _policy_params(self, ROUTERS, "router")


def _policy_params(sec: Any, registry: Any, what: str) -> Any:
    """``sec.params`` checked by the params model ``sec.policy`` registered with (defaults
    filled in); a policy that registered none takes no parameters."""
    model = registry.info(sec.policy).params
    if model is None:
        if sec.params:
            raise fail_key("params", f"{what} {sec.policy} takes no parameters, got "
                                     f"{show(sec.params)}")
        return sec
    try:
        given = model.model_validate(sec.params or {})
    except ValidationError as exc:
        key, message = error_line(exc, model)
        raise fail_key(".".join(x for x in ("params", key) if x), message) from None
    object.__setattr__(sec, "params", given.model_dump())  # defaults filled in
    return sec


class KvTier(Section):
    """One ``kv_cache.tiers`` entry: a memory tier below HBM, per worker. A ``host_dram``
    tier takes its capacity and link from the accelerator's catalog ``host`` entry (with its
    source) when not given; any other tier needs ``capacity_gb``, and its link default is
    assumed."""

    name: Str = Field(description="e.g. host_dram, remote_dram, ssd (unique)")
    capacity_gb: OptFloat(0.0, 1e9, exclusive_lo=True) = Field(
        None, description="GB (1e9 bytes) of this worker's KV the tier holds (host_dram: "
                          "the catalog's host memory per device x devices per worker)")
    bandwidth_gb_s: OptFloat(1e-3, 1e6) = Field(
        None, description="GB/s per device between this tier and the one above (host_dram: "
                          "the catalog's host link; else assumed 25, a PCIe Gen5 x16 host "
                          "link's practical copy rate)")
    latency_s: Float(0.0, 60.0) = Field(1e-5, description="per transfer (assumed default)")


def _mappings(value: Any, model: type, what: str, fields_text: str, limit: int) -> list:
    """A list of at most ``limit`` mappings, each validated as ``model`` (an item already of
    that type is kept): the one rule for the scenario's lists of named sections (KV tiers,
    decode pools); errors name the item's index and key."""
    if not isinstance(value, list | tuple):
        raise fail(f"expected a list of {what} ({{{fields_text}}} mappings), got {show(value)}")
    if len(value) > limit:
        raise fail(f"expected at most {limit} {what}, got {len(value)}")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, model):
            if not isinstance(item, dict):
                raise fail_key(str(i), f"expected a mapping ({fields_text}), got {show(item)}")
            try:
                item = model.model_validate(item)
            except ValidationError as exc:
                key, msg = error_line(exc, model)
                raise fail_key(f"{i}.{key}", msg) from None
        out.append(item)
    return out


def _tiers_in(value: Any) -> Any:
    """``kv_cache.tiers``: a list of tier mappings, fastest first, names unique."""
    if value is None:
        return []
    out, names = [], set()
    items = _mappings(value, KvTier, "tiers", "name, capacity_gb, bandwidth_gb_s, latency_s", 8)
    for i, tier in enumerate(items):
        if tier.name in names or tier.name == "hbm":
            raise fail_key(f"{i}.name", f"expected a unique name other than 'hbm', got "
                                        f"{show(tier.name)}")
        names.add(tier.name)
        out.append(tier.model_dump())
    return out


_tiers_in.kind = "list"
Tiers = Annotated[list[dict[str, Any]], BeforeValidator(_tiers_in)]


class KvCache(Section):
    """``kv_cache:``: a radix prefix cache per worker, tiers below HBM, swap preemption
    (simulator/kv/prefix_cache.py). Absent or all defaults: KV blocks are counted as before."""

    prefix_cache: Bool = Field(False, description="reuse cached prefixes (block ids or "
                                                  "sessions in the trace)")
    page_size: OptInt(1) = Field(None, description="tokens per cache page (default and only "
                                                   "value: scheduler.block_size)")
    eviction: Policy(RADIX_EVICTION) = Field("lru", description="which unreferenced pages "
                                                                "go first")
    tiers: Tiers = Field(default_factory=list, description="tiers below HBM, fastest first")
    preemption: Choice("recompute", "swap") = Field(
        "recompute", description="swap: a preempted request's KV moves to a tier")
    swap_tier: OptStr = Field(None, description="tier swapped KV goes to (default: the "
                                                "first of tiers)")
    layerwise_loading: Bool = Field(
        False, description="the engine loads KV layer by layer under the forward pass: a "
                           "transfer delays an iteration only by what its compute does not hide")

    @model_validator(mode="after")
    def _swap(self) -> KvCache:
        names = [t["name"] for t in self.tiers]
        if self.swap_tier is not None and self.swap_tier not in names:
            given = ", ".join(names) or "none given"
            raise fail_key("swap_tier", f"expected one of the tiers ({given}), got "
                                        f"{show(self.swap_tier)}")
        if self.preemption == "swap" and not names:
            raise fail_key("preemption", "swap needs a tier to swap to (kv_cache.tiers, e.g. "
                                         "[{name: host_dram, capacity_gb: 256}])")
        return self

    @property
    def enabled(self) -> bool:
        return bool(self.prefix_cache or self.tiers or self.preemption != "recompute")


class SloTier(Section):
    """One ``slo.tiers`` entry: the targets of the requests of one SLO tier (the workload's
    ``slo_tier``); a target not given is the run's (``slo.ttft_s``, ``slo.tpot_s``)."""

    ttft_s: OptFloat(0.0, exclusive_lo=True) = None
    tpot_s: OptFloat(0.0, exclusive_lo=True) = None


def _slo_tiers_in(value: Any) -> Any:
    """``slo.tiers``: SLO tier name -> its targets (``{ttft_s, tpot_s}``)."""
    if value is None:
        return None
    if not isinstance(value, dict) or not value:
        raise fail(f"expected a mapping of SLO tier name to {{ttft_s, tpot_s}}, e.g. "
                   f"{{premium: {{ttft_s: 1.0}}}}, got {show(value)}")
    out = {}
    for name, item in value.items():
        if not isinstance(name, str) or not name:
            raise fail(f"expected SLO tier names as keys, got {show(name)}")
        if not isinstance(item, dict | SloTier):
            raise fail_key(name, f"expected a mapping (ttft_s, tpot_s), got {show(item)}")
        try:
            tier = item if isinstance(item, SloTier) else SloTier.model_validate(item)
        except ValidationError as exc:
            key, msg = error_line(exc, SloTier)
            raise fail_key(f"{name}.{key}", msg) from None
        out[name] = tier.model_dump()
    return out


_slo_tiers_in.kind = "mapping"
SloTiers = Annotated[dict[str, dict[str, Any]] | None, BeforeValidator(_slo_tiers_in)]


class Slo(Section):
    ttft_s: OptFloat(0.0, exclusive_lo=True) = None
    tpot_s: OptFloat(0.0, exclusive_lo=True) = None
    tiers: SloTiers = Field(None, description="per SLO tier (the workload's slo_tier): "
                                              "{ttft_s, tpot_s}; a target not given is the "
                                              "run's")


class Cost(Section):
    price_usd_per_hour: OptFloat(0.0, 1e6) = Field(
        None, description="per device; overrides the catalog's dated default")
    power_idle_w: OptFloat(0.0, 1e7) = None
    power_max_w: OptFloat(0.0, 1e7) = None


class Overload(Section):
    """``simulation.overload``: stop a run whose queue only grows (simulator/cluster/overload.py)."""

    detect: Bool = Field(True, description="stop and report a queue that only grows")
    window_s: Float(0.0, 1e9, exclusive_lo=True) = Field(
        30.0, description="simulated seconds between two looks at the queue")
    windows: Int(1, 10_000) = Field(
        6, description="consecutive looks the queue must have grown in")
    max_wait_s: Float(0.0, 1e9, exclusive_lo=True) = Field(
        120.0, description="and the oldest queued request has waited longer than this")


class Simulation(Section):
    horizon_s: OptFloat(0.0, 1e9, exclusive_lo=True) = Field(
        None, description="stop here; unfinished requests are counted in flight")
    record_iterations: Bool = True
    progress: Bool = True
    fast_path: Bool = Field(True, description="plan stable batches many iterations at once")
    compiled: AutoBool = Field("auto", description="the iteration kernel compiled with numba "
                               "(auto: when numba is installed and its cache is on disk, "
                               "the run has 3,000 requests or more, or a sweep or plan runs "
                               "it; false: the same functions as Python source, same results, "
                               "~15x slower)")
    iteration_log: Literal["parquet", "csv"] = Field(
        "parquet", description="the iteration log's format with --out: iterations.parquet "
        "(streamed in row groups) or iterations.csv (streamed in chunks)")
    overload: _section(Overload)


class PdPool(Section):
    """``disaggregation.prefill`` / ``.decode``: one pool's devices. ``accelerator`` and
    ``tensor_parallel`` default to ``hardware``'s, ``memory_fraction`` too; price and power to
    ``cost``'s, then the catalog's (see ``simulator/cluster/pd.py``)."""

    accelerator: OptRef = Field(None, description="catalog name or inline mapping "
                                                  "(default: hardware.accelerator)")
    count: OptInt(1, MAX_DEVICES) = Field(None, description="devices in the pool (required)")
    tensor_parallel: OptInt(1, MAX_DEVICES) = Field(
        None, description="devices per worker (default: hardware.tensor_parallel)")
    memory_fraction: OptFloat(0.0, 1.0, exclusive_lo=True) = Field(
        None, description="default: hardware.memory_fraction")
    price_usd_per_hour: OptFloat(0.0, 1e6) = Field(
        None, description="per device (default: cost.price_usd_per_hour, then the catalog)")
    power_idle_w: OptFloat(0.0, 1e7) = None
    power_max_w: OptFloat(0.0, 1e7) = None
    calibration: OptStr = Field(None, description="the pool's profile, as the top-level key "
                                "(default: calibration, then the profile fitted to the "
                                "pool's accelerator)")

    @model_validator(mode="after")
    def _count(self) -> PdPool:
        # checked after the keys' own rules, so a bad value is named before a missing count
        if self.count is None:
            raise fail_key("count", "required: the devices in this pool")
        # a multiple of tensor_parallel: checked where the pool is built (cluster/build.py),
        # which knows the tensor_parallel it falls back to
        return self


class PdLink(Section):
    """``disaggregation.link``: the network KV moves over, prefill -> decode. A transfer takes
    bytes / bandwidth + latency; ``shared``: one link for the whole fleet (transfers queue for
    it), else one per prefill worker (its NIC). Defaults assumed: one 400 Gb/s RDMA port."""

    bandwidth_gb_s: Float(0.0, 1e6, exclusive_lo=True) = Field(
        50.0, description="GB/s (1e9 bytes/s); assumed default: one 400 Gb/s NIC port")
    latency_s: Float(0.0, 60.0) = Field(1e-5, description="per transfer (assumed default)")
    shared: Bool = Field(True, description="one link for all transfers (FIFO), else one "
                                           "per prefill worker")


class DecodePool(PdPool):
    """One ``disaggregation.decode_pools`` entry: a decode pool's devices (``PdPool``'s
    keys) and its name (metrics.json's ``disaggregation.pools.<name>``)."""

    name: OptStr = Field(None, description="the pool's name, unique (default: decode_1, "
                                           "decode_2, ... in list order)")


def _decode_pools_in(value: Any) -> Any:
    """``disaggregation.decode_pools``: a list of decode pools (``DecodePool``), names unique
    (defaults ``decode_<i>``), none named ``prefill``."""
    if value is None:
        return None
    if isinstance(value, list | tuple) and not value:
        raise fail("expected a non-empty list of decode pools ({name, count, accelerator, "
                   "tensor_parallel, ...} mappings), got []")
    out, names = [], set()
    items = _mappings(value, DecodePool, "decode pools",
                      "name, count, accelerator, tensor_parallel, ...", 16)
    for i, pool in enumerate(items):
        if pool.name is None:
            pool = pool.model_copy(update={"name": f"decode_{i + 1}"})
        if pool.name in names or pool.name == "prefill":
            raise fail_key(f"{i}.name", f"expected a unique name other than 'prefill', got "
                                        f"{show(pool.name)}")
        names.add(pool.name)
        out.append(pool)
    return out


_decode_pools_in.kind = "list"
DecodePools = Annotated[list[DecodePool] | None, BeforeValidator(_decode_pools_in)]


class Disaggregation(Section):
    """Prefill/decode disaggregation: a prefill pool, one decode pool (``decode``) or several
    (``decode_pools``), and the KV link from the prefill pool (absent: every worker is
    mixed, as before). ``router.policy`` places arrivals on the prefill pool,
    ``decode_router`` places transferred requests on a decode worker (with several decode
    pools, over the workers of every pool that can hold the request's KV)."""

    link: _section(PdLink)
    decode_router: Policy(ROUTERS) = Field(
        "least_loaded", description="router policy over the decode pool(s)")
    local_prefill_max_tokens: OptInt(0) = Field(
        None, description="prefill on the decode worker holding the request's prefix (needs "
                          "kv_cache.prefix_cache) when at most this many prompt tokens are "
                          "not cached there (Dynamo's conditional disaggregation); null: never")
    prefill: _optional_section(PdPool)
    decode: _optional_section(PdPool)
    decode_pools: DecodePools = Field(
        None, description="several decode pools (a list of decode's keys plus a name), "
                          "instead of decode: the prefill pool hands each request to one "
                          "of them (decode_router)")

    @model_validator(mode="after")
    def _pools(self) -> Disaggregation:
        if self.decode is not None and self.decode_pools is not None:
            raise fail_key("decode_pools", "give decode (one decode pool) or decode_pools "
                                           "(several), not both")
        for pool in ("prefill", "decode"):
            if getattr(self, pool) is None and not (pool == "decode" and self.decode_pools):
                raise fail_key(pool, f"required: the {pool} pool (a mapping with count, and "
                                     "optionally accelerator, tensor_parallel, "
                                     "price_usd_per_hour)"
                               + (", or decode_pools: a list of them" if pool == "decode"
                                  else ""))
        return self


class Scenario(Section):
    """A whole scenario file."""

    name: Str = "scenario"
    description: Str = ""
    seed: Int(0, 2**63 - 1) = 0
    hardware: _section(Hardware)
    model: Ref = "Llama-3.1-8B"
    quantization: _section(Quantization)
    speculation: Speculation = Field(default_factory=lambda: variant("none")())
    scheduler: _section(Scheduler)
    engine: _section(Engine)
    router: _section(Router)
    kv_cache: _section(KvCache)
    workload: OptMapping = Field(None, description="a trace file or a synthetic generator "
                                                   "(validated by traces)")
    slo: _section(Slo)
    cost: _section(Cost)
    calibration: OptStr = Field(None, description="bundled profile name, a YAML path, or "
                                "'uncalibrated' (default: the profile fitted to the hardware)")
    simulation: _section(Simulation)
    disaggregation: _optional_section(Disaggregation)  # PD pools; absent: mixed workers

    def dump(self) -> dict[str, Any]:
        """The validated scenario as plain data (defaults filled in)."""
        return self.model_dump(mode="python")


# ------------------------------------------------------------------ errors as one line


def _keys_of(cls: type[BaseModel], loc: tuple) -> list[str]:
    """The keys allowed in the section of ``cls`` that holds ``loc[-1]`` (for "unknown key"
    messages)."""
    parts = list(loc[:-1])
    while parts:
        part = parts.pop(0)
        field = cls.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            return []
        ann = field.annotation
        sub = [a for a in getattr(ann, "__args__", (ann,))
               if isinstance(a, type) and issubclass(a, BaseModel)]
        if not sub:
            return []
        cls = sub[0]
    return list(cls.model_fields)


def error_line(exc: ValidationError, cls: type[BaseModel], qualifier: str = "") -> tuple[str, str]:
    """(dotted key, message) of the first problem of a failed validation of ``cls``; the key
    is "" for the value as a whole. ``qualifier`` goes into an unknown-key message about a key
    of ``cls`` itself (e.g. " for speculation.method ngram")."""
    err = exc.errors(include_url=False)[0]
    loc = tuple(err["loc"])
    path = ".".join(str(p) for p in loc)
    kind = err["type"]
    if kind == "specsim_key":
        return ".".join(x for x in (path, err["ctx"]["key"]) if x), err["ctx"]["message"]
    if kind == "specsim":
        return path, err["ctx"]["message"]
    if kind == "extra_forbidden":
        bad = loc[-1]
        name = bad if isinstance(bad, str) and bad.isprintable() and len(bad) <= 60 else show(bad)
        where = ".".join(str(p) for p in loc[:-1])
        return (f"{where + '.' if where else ''}{name}",
                unknown_key(bad, _keys_of(cls, loc), qualifier if len(loc) == 1 else ""))
    if kind == "invalid_key":
        return path, f"unknown key (keys are names, got {show(loc[-1])})"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return path, f"expected a mapping, got {show(err.get('input'))}"
    if kind == "missing":
        return path, "required key is missing"
    return path, err["msg"]


def scenario_error(exc: ValidationError) -> ScenarioError:
    """The first problem of a failed validation, as specsim's one-line error."""
    key, message = error_line(exc, Scenario)
    return ScenarioError(f"{key or 'scenario'}: {message}")


def validate(data: Any) -> Scenario:
    """The typed scenario, or a ScenarioError naming the first bad key."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ScenarioError(f"scenario: expected a mapping, got {show(data)}")
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise ScenarioError(f"{show(bad[0])}: unknown key (expected one of: "
                            f"{', '.join(Scenario.model_fields)})")
    try:
        sc = Scenario.model_validate(data)
    except ValidationError as exc:
        raise scenario_error(exc) from None
    sc = apply_engine(sc)
    try:
        engine_config.check_draft_tp(sc.speculation, sc.hardware.tensor_parallel)
    except engine_config.EngineConfigError as exc:
        raise ScenarioError(f"speculation.{exc.key}: {exc.message}") from None
    return sc


def apply_engine(sc: Scenario) -> Scenario:
    """The ``engine:`` flags written onto the keys they mean (``ENGINE_KEYS``).

    A flag and its key given both with different values is a one-line error naming both;
    equal values, or only one of them given, are fine."""
    eng = sc.engine
    updates: dict[str, dict[str, Any]] = {}
    for flag, (section, key) in ENGINE_KEYS.items():
        value = getattr(eng, flag)
        if value is None:
            continue
        sec = getattr(sc, section)
        given = getattr(sec, key)
        if key in sec.model_fields_set and given is not None and given != value:
            raise ScenarioError(
                f"engine.{flag}: {show(value)} conflicts with {section}.{key}: "
                f"{show(given)} (the same setting given twice); give one of them")
        updates.setdefault(section, {})[key] = value
    if not updates:
        return sc
    return sc.model_copy(update={section: getattr(sc, section).model_copy(update=keys)
                                 for section, keys in updates.items()})


def _walk(cls: type[BaseModel], prefix: str):
    """(dotted key, field) for every leaf key of a section, speculation's variants merged."""
    for name, field in cls.model_fields.items():
        if cls is Scenario and name == "speculation":
            seen: set[str] = set()
            for cls_ in variants():
                for item in _walk(cls_, "speculation."):
                    if item[0] not in seen:
                        seen.add(item[0])
                        yield item
            continue
        sub = [a for a in getattr(field.annotation, "__args__", (field.annotation,))
               if isinstance(a, type) and issubclass(a, BaseModel)]
        if sub:
            yield from _walk(sub[0], f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", field


def leaf_keys() -> list[str]:
    """Every leaf key of the scenario as a dotted path (``hardware.count``, ...)."""
    return [key for key, _ in _walk(Scenario, "")]


def number_keys(kind: str) -> list[str]:
    """Dotted paths of the ``int`` or ``float`` keys."""
    return [key for key, field in _walk(Scenario, "")
            if any(getattr(getattr(m, "func", None), "kind", None) == kind
                   for m in field.metadata)]


@dataclass(frozen=True)
class KeyInfo:
    """What the schema says about one leaf key (for tools and property tests)."""

    kind: str  # int | float | bool | str | ref | mapping | choice
    default: Any
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] = ()


def key_info(dotted: str) -> KeyInfo | None:
    """The kind, default, bounds or choices of a leaf key; None for an unknown key."""
    if dotted == "speculation.method":
        return KeyInfo("choice", "none", choices=tuple(DRAFTERS.names()))
    for key, field in _walk(Scenario, ""):
        if key != dotted:
            continue
        for m in field.metadata:
            check = getattr(m, "func", None)
            kind = getattr(check, "kind", None)
            if kind is None:
                continue
            registry = getattr(check, "registry", None)
            choices = (tuple(registry.names()) if registry is not None
                       else tuple(getattr(check, "choices", ())))
            return KeyInfo(kind, field.get_default(call_default_factory=True),
                           getattr(check, "lo", None), getattr(check, "hi", None), choices)
    return None


def json_schema() -> dict[str, Any]:
    """JSON Schema of the scenario file (for editors)."""
    union = Annotated[Union[tuple(variants())], Field(discriminator="method")]  # noqa: UP007
    described = create_model("Scenario", __base__=Scenario, __doc__=Scenario.__doc__,
                             speculation=(union, Field(default_factory=variant("none"))))
    schema = described.model_json_schema()  # speculation: one of the registered methods'
    schema["title"] = "specsim scenario"
    return schema
