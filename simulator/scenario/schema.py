"""The typed scenario: one pydantic model per section, extra keys forbidden everywhere.

Every number is checked by one rule (finite; integers also take integral floats such as
``1e3``; inclusive or exclusive bounds), every error becomes one line naming the dotted key
and what was expected (with "did you mean" for near-miss keys), and ``speculation`` is a
union discriminated by ``method``: each method admits the keys that mean something for it.
Policy names (router, batch scheduler, speculation policy, eviction) are checked against
their registries, so a policy registered by a plug-in is a valid name. The ``workload``
section is validated by ``traces`` and ``speculation.acceptance`` by the acceptance model;
both stay mappings here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from specsim import messages
from specsim.errors import ScenarioError
from specsim.messages import fail, fail_key, own_message, unknown_key
from specsim.simulator.kv import radix as _radix  # noqa: F401  (registers lru, lfu, priority)
from specsim.simulator.registry import (
    BATCH_SCHEDULERS,
    EVICTION,
    RADIX_EVICTION,
    ROUTERS,
    SPECULATION_POLICIES,
    Registry,
)
from specsim.simulator.speculation import engine_config

# Integer keys without their own upper bound stop here: beyond 2**53 a YAML float such as
# 1e18 no longer holds an exact integer, and numpy's int64 arithmetic would overflow.
INT_HI = 2**53
MAX_DEVICES = 1_000_000  # a sanity bound on hardware.count (the memory check comes later)
SPEC_METHODS = ("none", "draft_model", "eagle3", "mtp", "ngram", "pard", "dflash", "medusa",
                "suffix")
#: methods that may draft a tree (speculation.tree): EAGLE heads, MTP modules, Medusa heads
TREE_METHODS = ("eagle3", "mtp", "medusa")
MAX_TREE_NODES = 4096  # nodes per depth at most (a sanity bound; SGLang trees are < 100)


def show(value: Any, limit: int = 60) -> str:
    """A value as a scenario message quotes it (60 characters at most)."""
    return messages.show(value, limit)


def _num(x: float) -> str:
    """A bound as a person writes it: 1, 0.9, 1000000, 1e+09."""
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) < 1e7):
        return f"{int(x)}"
    return f"{x:g}"



# ------------------------------------------------------------------ value rules


def _number(kind: str, lo: float | None, hi: float | None, exclusive_lo: bool,
            nullable: bool):
    word = "an integer" if kind == "int" else "a number"

    def check(value: Any) -> Any:
        if value is None:
            if nullable:
                return None
            raise fail("expected a value, got null")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise fail(f"expected {word}, got {show(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            raise fail(f"expected a finite number, got {value}")
        given = value  # messages quote what was written (1e+30, not its int)
        if kind == "int":
            if isinstance(value, float):
                if not value.is_integer():
                    raise fail(f"expected an integer, got {show(value)}")
                value = int(value)
        else:
            value = float(value)
        top = hi if hi is not None else (INT_HI if kind == "int" else None)
        if lo is not None and (value < lo or (exclusive_lo and value == lo)):
            rel = "greater than" if exclusive_lo else "at least"
            raise fail(f"expected {word} {rel} {_num(lo)}, got {show(given)}")
        if top is not None and value > top:
            raise fail(f"expected {word} at most {_num(top)}, got {show(given)}")
        return value

    check.kind, check.lo, check.hi = kind, lo, hi if hi is not None else (
        INT_HI if kind == "int" else None)
    return check


def _bounds(lo: float | None, hi: float | None, exclusive_lo: bool = False) -> Any:
    """The bounds in the JSON Schema (the check itself is the BeforeValidator's)."""
    extra: dict[str, Any] = {}
    if lo is not None:
        extra["exclusiveMinimum" if exclusive_lo else "minimum"] = lo
    if hi is not None:
        extra["maximum"] = hi
    return Field(json_schema_extra=extra)


def Int(lo: float | None = None, hi: float | None = None):  # noqa: N802 (a type factory)
    return Annotated[int, BeforeValidator(_number("int", lo, hi, False, False)),
                     _bounds(lo, hi if hi is not None else INT_HI)]


def OptInt(lo: float | None = None, hi: float | None = None):  # noqa: N802
    return Annotated[int | None, BeforeValidator(_number("int", lo, hi, False, True)),
                     _bounds(lo, hi if hi is not None else INT_HI)]


def Float(lo: float | None = None, hi: float | None = None, exclusive_lo: bool = False):  # noqa: N802
    return Annotated[float, BeforeValidator(_number("float", lo, hi, exclusive_lo, False)),
                     _bounds(lo, hi, exclusive_lo)]


def OptFloat(lo: float | None = None, hi: float | None = None,  # noqa: N802
             exclusive_lo: bool = False):
    return Annotated[float | None, BeforeValidator(_number("float", lo, hi, exclusive_lo, True)),
                     _bounds(lo, hi, exclusive_lo)]


def _typed(pytype: type, expected: str, nullable: bool = False):
    def check(value: Any) -> Any:
        if value is None:
            if nullable:
                return None
            raise fail("expected a value, got null")
        if not isinstance(value, pytype) or (pytype is int and isinstance(value, bool)):
            raise fail(f"expected {expected}, got {show(value)}")
        return value

    check.kind = {bool: "bool", str: "str", dict: "mapping"}.get(pytype, "ref")
    return check


Bool = Annotated[bool, BeforeValidator(_typed(bool, "true or false"))]
OptBool = Annotated[bool | None, BeforeValidator(_typed(bool, "true or false", nullable=True))]
Str = Annotated[str, BeforeValidator(_typed(str, "a string"))]
OptStr = Annotated[str | None, BeforeValidator(_typed(str, "a string", nullable=True))]
Mapping = Annotated[dict[str, Any], BeforeValidator(_typed(dict, "a mapping"))]
OptMapping = Annotated[dict[str, Any] | None,
                       BeforeValidator(_typed(dict, "a mapping", nullable=True))]
Ref = Annotated[str | dict[str, Any], BeforeValidator(
    _typed(str | dict, "a catalog name or an inline mapping"))]
OptRef = Annotated[str | dict[str, Any] | None, BeforeValidator(
    _typed(str | dict, "a catalog name or an inline mapping", nullable=True))]


def _auto_or_bool(value: Any) -> Any:
    if value == "auto" or isinstance(value, bool):
        return value
    raise fail(f"expected auto, true or false, got {show(value)}")


_auto_or_bool.kind = "choice"
_auto_or_bool.choices = ("auto", True, False)
AutoBool = Annotated[str | bool, BeforeValidator(_auto_or_bool),
                     Field(json_schema_extra={"enum": ["auto", True, False]})]


def _registered(registry: Registry):
    def check(value: Any) -> Any:
        if not isinstance(value, str) or value not in registry:
            raise fail(f"expected one of {', '.join(registry.names())}, got {show(value)}")
        return value

    check.kind = "choice"
    check.registry = registry
    return check


def _one_of(choices: tuple[str, ...]):
    def check(value: Any) -> Any:
        if not isinstance(value, str) or value not in choices:
            raise fail(f"expected one of {', '.join(choices)}, got {show(value)}")
        return value

    check.kind = "choice"
    check.choices = choices
    return check


def Choice(*choices: str):  # noqa: N802
    return Annotated[str, BeforeValidator(_one_of(choices)),
                     Field(json_schema_extra={"enum": list(choices)})]


def Policy(registry: Registry):  # noqa: N802
    def names(schema: dict[str, Any]) -> None:  # the names registered when asked
        schema["enum"] = registry.names()

    return Annotated[str, BeforeValidator(_registered(registry)),
                     Field(json_schema_extra=names)]


# ------------------------------------------------------------------ sections


class Section(BaseModel):
    """A scenario section: unknown keys are errors; values read as attributes or by key."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=False)

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)


def _section(cls: type[Section]):
    """A nested section: missing or null means all defaults; anything else must be a mapping."""

    def check(value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, dict | Section):
            raise fail(f"expected a mapping, got {show(value)}")
        return value

    return Annotated[cls, BeforeValidator(check), Field(default_factory=cls)]


class Hardware(Section):
    accelerator: Ref = Field("H100-SXM", description="catalog name or inline mapping")
    count: Int(1, MAX_DEVICES) = Field(1, description="devices in the fleet")
    tensor_parallel: Int(1, MAX_DEVICES) = Field(1, description="devices per worker")
    memory_fraction: Float(0.0, 1.0, exclusive_lo=True) = Field(
        0.90, description="share of HBM the engine may use (weights + KV)")


class Quantization(Section):
    weights: Str = "bf16"
    activations: Str = "bf16"
    kv_cache: Str = "bf16"


class DraftCost(Section):
    ratio: OptFloat(0.0, 1e3) = Field(
        None, description="draft time per drafted token / one target decode step")
    seconds_per_token: OptFloat(0.0, 3600.0) = None


class Ngram(Section):
    match_rate: Float(0.0, 1.0) = Field(1.0, description="share of steps where the lookup finds a match")
    cpu_s_per_step: Float(0.0, 3600.0) = Field(
        20e-6, description="assumed default (a compiled lookup); measure yours")


class Suffix(Section):
    """``speculation.suffix``: suffix decoding's chance to find a draft grows as the request
    (and, with ``session_carry``, its session's earlier turns, which later prompts contain)
    repeats itself: p = max - (max - start) x exp(-seen / growth_tokens), seen = tokens this
    request generated (+ its prompt when turn > 0). The functional form and the defaults are
    assumed (SuffixDecoding, arXiv 2411.04975, reports the effect, not this curve): fit them
    to your traffic."""

    match_rate_start: Float(0.0, 1.0) = Field(0.1, description="match chance with nothing seen (assumed)")
    match_rate_max: Float(0.0, 1.0) = Field(0.7, description="match chance after long repetition (assumed)")
    growth_tokens: Float(1.0, 1e9) = Field(256.0, description="tokens seen for 63% of the rise (assumed)")
    session_carry: Bool = True
    cpu_s_per_step: Float(0.0, 3600.0) = Field(
        20e-6, description="assumed default (a compiled suffix-tree lookup); measure yours")

    @model_validator(mode="after")
    def _ordered(self) -> Suffix:
        if self.match_rate_start > self.match_rate_max:
            raise fail_key("match_rate_start", f"expected at most match_rate_max "
                           f"{self.match_rate_max}, got {self.match_rate_start}")
        return self


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
        sglang = [k for k in ("topk", "num_steps", "num_draft_tokens") if self[k] is not None]
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


def _optional_section(cls: type[Section]):
    """A nested section that may be absent (null): None, or a mapping validated as ``cls``."""

    def check(value: Any) -> Any:
        if value is None or isinstance(value, dict | Section):
            return value
        raise fail(f"expected a mapping, got {show(value)}")

    return Annotated[cls | None, BeforeValidator(check), Field(default=None)]


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
    from pydantic import TypeAdapter

    def key_of(key: str) -> str:
        return ".".join(x for x in (name, key) if x)

    if isinstance(entry, dict):
        for key in ("per_class", "tree", "switching"):
            if entry.get(key) is not None:
                raise fail_key(key_of(key), "not allowed in a per-class or fallback entry "
                               "(it drafts a chain and does not nest)")
    try:
        return TypeAdapter(Speculation).validate_python(entry)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        loc = [str(p) for p in err["loc"]]
        if loc and loc[0] in SPEC_METHODS:
            loc = loc[1:]  # the union's tag is not a key the user wrote
        sub = ".".join(loc)
        own = own_message(err, sub or "x")
        if own is None:
            if err["type"] == "extra_forbidden":
                tag = str(err["loc"][0])
                fields = next((list(c.model_fields) for c in SPECULATION_VARIANTS
                               if c.model_fields["method"].default == tag
                               or tag in str(c.model_fields["method"].annotation)), [])
                own = f"{sub}: " + unknown_key(err["loc"][-1], fields)
            else:
                own = f"{sub or 'x'}: {err['msg']}"
        key, msg = own.split(": ", 1)
        key = "" if key == "x" else key.removeprefix("x.")
        if not key_of(key):
            raise fail(msg) from None
        raise fail_key(key_of(key), msg) from None


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


class NoSpeculation(_Speculation):
    """``method: none``: the other keys may stay in the file (switching speculation off with
    ``--set speculation.method=none`` keeps them) and are not used."""

    method: Literal["none"] = "none"
    ngram: _section(Ngram)
    suffix: _section(Suffix)
    tree: _optional_section(Tree)


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


class DraftModelSpeculation(_Speculation):
    method: Literal["draft_model"]


class Eagle3Speculation(_TreeSpeculation):
    method: Literal["eagle3"]


class MtpSpeculation(_TreeSpeculation):
    method: Literal["mtp"]


class MedusaSpeculation(_TreeSpeculation):
    """``method: medusa``: k Medusa heads on the target (usually with a tree)."""

    method: Literal["medusa"]


class PardSpeculation(_Speculation):
    method: Literal["pard"]


class DflashSpeculation(_Speculation):
    method: Literal["dflash"]


class NgramSpeculation(_Speculation):
    method: Literal["ngram"]
    ngram: _section(Ngram)


class SuffixSpeculation(_Speculation):
    """``method: suffix``: suffix decoding (a CPU lookup whose match chance grows with
    repetition within the request and its session; see ``Suffix``)."""

    method: Literal["suffix"]
    suffix: _section(Suffix)


SPECULATION_VARIANTS = (NoSpeculation, DraftModelSpeculation, Eagle3Speculation,
                        MtpSpeculation, PardSpeculation, DflashSpeculation, NgramSpeculation,
                        MedusaSpeculation, SuffixSpeculation)


def _speculation_in(value: Any) -> Any:
    if value is None:
        return {"method": "none"}
    if isinstance(value, Section):
        return value
    if not isinstance(value, dict):
        raise fail(f"expected a mapping, got {show(value)}")
    try:  # vllm_speculative_config / sglang -> specsim's own keys
        value = engine_config.resolve(value, SPEC_METHODS)
    except engine_config.EngineConfigError as exc:
        raise fail_key(exc.key, exc.message) from None
    method = value.get("method", "none")
    if not isinstance(method, str) or method not in SPEC_METHODS:
        raise fail_key("method", f"expected one of {', '.join(SPEC_METHODS)}, got {show(method)}")
    if value.get("tree") is not None and method not in (*TREE_METHODS, "none"):
        raise fail_key("tree", f"method {method} drafts a chain, not a tree (a tree is for "
                               f"{', '.join(TREE_METHODS)})")
    return {**value, "method": method}


Speculation = Annotated[
    NoSpeculation | DraftModelSpeculation | Eagle3Speculation | MtpSpeculation
    | PardSpeculation | DflashSpeculation | NgramSpeculation | MedusaSpeculation
    | SuffixSpeculation,
    Field(discriminator="method"), BeforeValidator(_speculation_in)]


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


class Engine(Section):
    """The serving engine's own flag names (vLLM's), mapped onto the keys above: giving a
    setting both ways with different values is an error (see ``ENGINE_KEYS``)."""

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


def _tiers_in(value: Any) -> Any:
    """``kv_cache.tiers``: a list of tier mappings, fastest first, names unique."""
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise fail(f"expected a list of tiers ({{name, capacity_gb, bandwidth_gb_s, "
                   f"latency_s}} mappings), got {show(value)}")
    if len(value) > 8:
        raise fail(f"expected at most 8 tiers, got {len(value)}")
    out, names = [], set()
    for i, item in enumerate(value):
        if isinstance(item, KvTier):
            tier = item
        else:
            if not isinstance(item, dict):
                raise fail_key(str(i), f"expected a mapping (name, capacity_gb, "
                                       f"bandwidth_gb_s, latency_s), got {show(item)}")
            try:
                tier = KvTier.model_validate(item)
            except ValidationError as exc:
                err = exc.errors(include_url=False)[0]
                sub = ".".join(str(p) for p in err["loc"])
                own = own_message(err, sub)
                if own is None:
                    if err["type"] == "extra_forbidden":
                        own = f"{sub}: " + unknown_key(err["loc"][-1], list(KvTier.model_fields))
                    elif err["type"] == "missing":
                        own = f"{sub}: required key is missing"
                    else:
                        own = f"{sub}: {err['msg']}"
                key, msg = own.split(": ", 1)
                raise fail_key(f"{i}.{key}", msg) from None
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


class Slo(Section):
    ttft_s: OptFloat(0.0, exclusive_lo=True) = None
    tpot_s: OptFloat(0.0, exclusive_lo=True) = None


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
                               "(same results; auto: when numba is installed and the run has 1,500+ "
                               "requests or is one of a sweep's or plan's many)")
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

    @model_validator(mode="after")
    def _count(self) -> PdPool:
        # checked after the keys' own rules, so a bad value is named before a missing count
        if self.count is None:
            raise fail_key("count", "required: the devices in this pool")
        if self.tensor_parallel is not None and self.count % self.tensor_parallel:
            raise fail_key("count", f"expected a multiple of tensor_parallel "
                                    f"({self.tensor_parallel}), got {self.count}")
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


class Disaggregation(Section):
    """Prefill/decode disaggregation: a prefill pool, a decode pool and the KV link between
    them (absent: every worker is mixed, as before). ``router.policy`` places arrivals on the
    prefill pool, ``decode_router`` places transferred requests on the decode pool."""

    link: _section(PdLink)
    decode_router: Policy(ROUTERS) = Field(
        "least_loaded", description="router policy over the decode pool")
    local_prefill_max_tokens: OptInt(0) = Field(
        None, description="prefill on the decode worker holding the request's prefix (needs "
                          "kv_cache.prefix_cache) when at most this many prompt tokens are "
                          "not cached there (Dynamo's conditional disaggregation); null: never")
    prefill: _optional_section(PdPool)
    decode: _optional_section(PdPool)

    @model_validator(mode="after")
    def _pools(self) -> Disaggregation:
        for pool in ("prefill", "decode"):
            if self[pool] is None:
                raise fail_key(pool, f"required: the {pool} pool (a mapping with count, and "
                                     "optionally accelerator, tensor_parallel, "
                                     "price_usd_per_hour)")
        return self


class Scenario(Section):
    """A whole scenario file."""

    name: Str = "scenario"
    description: Str = ""
    seed: Int(0, 2**63 - 1) = 0
    hardware: _section(Hardware)
    model: Ref = "Llama-3.1-8B"
    quantization: _section(Quantization)
    speculation: Speculation = Field(default_factory=NoSpeculation)
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


def _path(loc: tuple) -> str:
    parts = [str(p) for p in loc]
    if len(parts) > 1 and parts[0] == "speculation" and parts[1] in SPEC_METHODS:
        parts.pop(1)  # the union's tag is not a key the user wrote
    return ".".join(parts)


def _variant(tag: Any) -> type[Section]:
    for cls in SPECULATION_VARIANTS:
        if cls.model_fields["method"].default == tag or tag in getattr(
                cls.model_fields["method"].annotation, "__args__", ()):
            return cls
    return NoSpeculation


def _keys_of(loc: tuple) -> list[str]:
    """The keys allowed in the section that holds ``loc[-1]`` (for "unknown key" messages)."""
    cls: type[BaseModel] = Scenario
    parts = list(loc[:-1])
    while parts:
        part = parts.pop(0)
        if cls is Scenario and part == "speculation":
            cls = _variant(parts.pop(0) if parts and parts[0] in SPEC_METHODS else "none")
            continue
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


def scenario_error(exc: ValidationError) -> ScenarioError:
    """The first problem of a failed validation, as specsim's one-line error."""
    err = exc.errors(include_url=False)[0]
    loc = tuple(err["loc"])
    path = _path(loc)
    kind = err["type"]
    own = own_message(err, path or "scenario")
    if own is not None:
        return ScenarioError(own)
    if kind == "extra_forbidden":
        bad = loc[-1]
        name = bad if isinstance(bad, str) and bad.isprintable() and len(bad) <= 60 else show(bad)
        where = _path(loc[:-1])
        method = (f" for speculation.method {loc[1]}"
                  if loc[:1] == ("speculation",) and len(loc) == 3 else "")
        return ScenarioError(f"{where + '.' if where else ''}{name}: "
                             + unknown_key(bad, _keys_of(loc), method))
    if kind == "invalid_key":
        return ScenarioError(f"{path}: unknown key (keys are names, got {show(loc[-1])})")
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return ScenarioError(f"{path or 'scenario'}: expected a mapping, got "
                             f"{show(err.get('input'))}")
    return ScenarioError(f"{path or 'scenario'}: {err['msg']}")


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
        engine_config.check_draft_tp(sc.speculation, sc.hardware.tensor_parallel, SPEC_METHODS)
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
        value = eng[flag]
        if value is None:
            continue
        sec = sc[section]
        if key in sec.model_fields_set and sec[key] is not None and sec[key] != value:
            raise ScenarioError(
                f"engine.{flag}: {show(value)} conflicts with {section}.{key}: "
                f"{show(sec[key])} (the same setting given twice); give one of them")
        updates.setdefault(section, {})[key] = value
    if not updates:
        return sc
    return sc.model_copy(update={section: sc[section].model_copy(update=keys)
                                 for section, keys in updates.items()})


def _walk(cls: type[BaseModel], prefix: str):
    """(dotted key, field) for every leaf key of a section, speculation's variants merged."""
    for name, field in cls.model_fields.items():
        if cls is Scenario and name == "speculation":
            seen: set[str] = set()
            for variant in SPECULATION_VARIANTS:
                for item in _walk(variant, "speculation."):
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
        return KeyInfo("choice", "none", choices=SPEC_METHODS)
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
    schema = Scenario.model_json_schema()
    schema["title"] = "specsim scenario"
    return schema
