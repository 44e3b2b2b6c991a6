"""Speculation: drafters (what drafting costs) and controllers (how many tokens to draft).

A drafter prices the drafting of one iteration from the speculating rows' draft lengths and
contexts; a controller picks each row's k. Both are small classes chosen by name from the
scenario (``speculation.method`` and ``speculation.policy``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from pydantic import Field, model_validator

from specsim.cost_models.catalog import get_model, get_precision
from specsim.cost_models.roofline import ForwardCostModel
from specsim.errors import ScenarioError
from specsim.messages import fail_key
from specsim.simulator.registry import DRAFTERS
from specsim.simulator.scenario.fields import Bool, Float, Section, section
from specsim.simulator.speculation.engine_config import VLLM_MTP_METHODS

MAX_DEPTH = 64  # the longest draft (speculation.k is at most 64)


@dataclass(frozen=True)
class DraftTree:
    """A static draft tree: what verification, drafting and acceptance see of it.

    ``nodes[j]``: tree nodes at depth j + 1 (all verified in one target pass);
    ``candidates[j]``: of those, the ones that continue the path accepted so far, so compete
    for acceptance at depth j + 1 (at most ``nodes[j]``); ``pass_rows[j]``: rows per sequence
    that draft pass j + 1 runs (the nodes it expands: 1 for the root, then the previous
    depth's nodes, or SGLang's topk beams). A chain of k is nodes = candidates = pass_rows
    = (1,) * k.

    Acceptance (``transform``), an independence assumption: with the chain's conditional
    acceptance a_j at depth j and c_j candidates there, the target accepts depth j, given
    it reached it, with probability 1 - (1 - a_j)^{c_j}, as if each candidate were accepted
    independently with the chain's a_j. Candidates are drawn without replacement from the
    drafter's distribution, so the second-best token is accepted less often than the first:
    the formula is an upper bound, closest when a_j is small. Depths with one candidate keep
    a_j exactly, so a tree of one node per depth gives the chain's numbers bit for bit.
    """

    nodes: tuple[int, ...]
    candidates: tuple[int, ...]
    pass_rows: tuple[int, ...]
    how: str = ""

    def __post_init__(self) -> None:
        n = np.zeros(MAX_DEPTH + 1, np.int64)
        d = self.depth
        n[1:d + 1] = self.nodes
        n[d + 1:] = 1  # beyond the tree (never used: k is the tree's depth): a chain
        object.__setattr__(self, "widths", 1 + np.cumsum(n))  # verify width at depth 0..64

    @property
    def depth(self) -> int:
        return len(self.nodes)

    @property
    def size(self) -> int:
        """Verified tokens at full depth: the nodes plus the root."""
        return 1 + sum(self.nodes)

    def transform(self, table: np.ndarray) -> np.ndarray:
        """Per-depth acceptance of the tree from the chain's conditional table (see above)."""
        out = np.array(table, dtype=np.float64, copy=True)
        d = min(self.depth, out.shape[-1])
        c = np.asarray(self.candidates[:d], dtype=np.float64)
        a = out[..., :d]
        out[..., :d] = np.where(c > 1, 1.0 - (1.0 - a) ** c, a)
        return out

    def describe(self) -> str:
        return (f"tree {self.how}: {self.size} verified tokens, nodes per depth "
                f"{list(self.nodes)}, candidates per depth {list(self.candidates)}")


def tree_from_widths(widths) -> DraftTree:
    """``speculation.tree.widths``: nodes per depth. Assumed: every node at depth j is a
    child of the path's node at depth j - 1 (all compete for acceptance), and draft pass j
    expands the previous depth's nodes."""
    w = tuple(int(x) for x in widths)
    return DraftTree(w, w, (1, *w[:-1]), how=f"widths {list(w)}")


def tree_from_sglang(topk: int, num_steps: int, num_draft_tokens: int | None) -> DraftTree:
    """SGLang's ``--speculative-eagle-topk`` (branching factor per step),
    ``--speculative-num-steps`` (depth of autoregressive drafting) and
    ``--speculative-num-draft-tokens`` (tokens verified per sequence, the root included, so
    num_steps + 1 for a chain; SGLang sets it so when topk is 1), as SGLang's docs
    (docs/advanced_features/speculative_decoding.md) define them.

    Drafting: num_steps sequential head passes, the first over the root, the others over the
    topk beams each step keeps. The tree: SGLang keeps the num_draft_tokens - 1 best-scored
    nodes of the candidate pool (topk at depth 1, topk x topk at each later depth). Which
    depths they fall in depends on the drafter's probabilities; assumed here: the greedy
    chain through all num_steps depths first (the most likely path scores highest), then
    the rest shallow-first up to each depth's pool; at most topk of a depth's nodes are
    children of the path's node (candidates), the others hang off other branches (verified
    and paid for, never on the accepted path).
    """
    n = num_steps + 1 if num_draft_tokens is None else num_draft_tokens
    nodes = [1] * num_steps
    rest = n - 1 - num_steps
    for j in range(num_steps):
        room = (topk if j == 0 else topk * topk) - nodes[j]
        add = min(room, max(rest, 0))
        nodes[j] += add
        rest -= add
    cands = tuple(min(x, topk) for x in nodes)
    return DraftTree(tuple(nodes), cands, (1,) + (topk,) * (num_steps - 1),
                     how=f"topk {topk}, num_steps {num_steps}, num_draft_tokens {n}")


def build_tree(section: Any) -> DraftTree | None:
    """The validated ``speculation.tree`` section as a DraftTree (None: a chain)."""
    if section is None:
        return None
    if section.widths is not None:
        return tree_from_widths(section.widths)
    return tree_from_sglang(section.topk, section.num_steps, section.num_draft_tokens)


class Drafter:
    """Interface: price drafting for S steps at once (the kernel's one pricing call).

    A built-in drafter is data: ``kind`` (how the kernel prices it, one of
    ``kernel_jit.DRAFTER_KINDS``), ``cost`` (the roofline its passes run on, if any) and
    ``scalar`` (the kind's one number); its cost is only the kernel's (``kernel_jit._draft``,
    compiled inside the plan, or run as Python source for a Python caller through
    ``cost_steps``). A plug-in gives its own ``cost_steps(k, ctx, pf_tokens, pf_qc)``: k and
    ctx are (S, B) draft lengths and KV contexts of the batch's rows; pf_tokens / pf_qc the
    prefill tokens and attention area of each step (drafters with their own KV prefill them
    too); it returns per-step (seconds, FLOPs, bytes). The kernel then calls it through the
    Python pricing hook, which runs slower (the run's notes say so, ``execution/plugins.py``).
    Declares ``proposes_always`` (n-gram lookup proposes only on a match),
    ``prefills`` (it keeps its own KV cache, so new prompt chunks pass through it),
    ``drafts`` (False: no drafting at all) and ``per_class`` (True: each row drafts with its
    workload class's own drafter, and the drafter answers ``k_cap(rows)``,
    ``row_alpha(rows, cls, kmax)``, ``bind(rows, prefill)`` and ``request_tables``:
    ``per_class.PerClassDrafter``). Callers read these, never the drafter's class.
    """

    name = "none"
    proposes_always = True
    prefills = False
    drafts = True
    per_class = False
    match_rate = 1.0
    #: how the kernel prices it (``kernel_jit.DRAFTER_KINDS``); None: only its own
    #: ``cost_steps`` can (drafters per class)
    kind: str | None = "none"
    #: the ForwardCostModel its passes are priced with (None: no passes)
    cost: ForwardCostModel | None = None
    #: the kind's scalar: CPU seconds per lookup, the ratio, or seconds per drafted token
    scalar = 0.0

    def match_probability(self, rows: np.ndarray, table) -> float | np.ndarray:
        """The chance each row's lookup finds a draft this step (``match_rate`` unless a
        drafter's depends on the request, which then declares ``state_dependent_match``)."""
        return self.match_rate

    #: the draft tree (``DraftTree``) when drafting a tree, None for a chain
    tree: DraftTree | None = None

    def verify_width(self, k):
        """Tokens the target verifies for a draft of depth k: k + 1 for a chain; for a tree
        the nodes of its first k depths plus the root (the bonus token), so a tree of one
        node per depth is the chain. Works on scalars and arrays."""
        if self.tree is None:
            return k + 1
        return self.tree.widths[np.minimum(k, MAX_DEPTH)]

    def k_for_width(self, width: int) -> int:
        """The deepest draft whose verification fits in ``width`` tokens."""
        if self.tree is None:
            return max(width - 1, 0)
        return max(int(np.searchsorted(self.tree.widths, width, side="right")) - 1, 0)

    def transform_acceptance(self, table: np.ndarray) -> np.ndarray:
        """The per-class conditional acceptance table (classes x positions, the chain's
        P(accept j | accepted 1..j-1)) this drafter's proposals meet: the chain's own
        (identity) unless it drafts a tree (``DraftTree.transform``)."""
        return table if self.tree is None else self.tree.transform(table)

    def cost_steps(self, k: np.ndarray, ctx: np.ndarray, pf_tokens: np.ndarray,
                   pf_qc: np.ndarray) -> tuple[np.ndarray, ...]:
        """Per-step (seconds, FLOPs, bytes): the kernel's pricing of this drafter's kind
        (``kernel_jit.draft_cost``), the very rules the compiled plan runs. A plug-in
        overrides it with its own."""
        from specsim.simulator.execution.kernel_jit import draft_cost

        return draft_cost(self, k, ctx, pf_tokens, pf_qc)

    def priced_by_kernel(self) -> bool:
        """The kernel prices it from its data: a kind, and no ``cost_steps`` of its own (on
        its class or set on it)."""
        return (self.kind is not None and type(self).cost_steps is Drafter.cost_steps
                and "cost_steps" not in vars(self))

    def describe(self) -> str:
        return "no drafting"


class NoDrafter(Drafter):
    drafts = False


class SequentialDrafter(Drafter):
    """A draft model, EAGLE head or MTP module: k sequential passes of a smaller model."""

    prefills = True
    kind = "sequential"  # pass j: the rows drafting more than j tokens, reading ctx + j

    def __init__(self, name: str, model: ForwardCostModel) -> None:
        self.name, self.model, self.cost = name, model, model

    def describe(self) -> str:
        m = self.model.model
        params = getattr(self.model, "resident_params", m.total_params)
        text = (f"{self.name}: k sequential passes of {m.name} ({m.n_layers} layers, "
                f"{params / 1e9:.2f} B params)")
        return text + ("" if self.tree is None else f"; {self.tree.describe()}")


class ParallelDrafter(SequentialDrafter):
    """PARD / DFlash: one drafter pass over all k positions of each row."""

    kind = "parallel"

    def describe(self) -> str:
        m = self.model.model
        return f"{self.name}: one parallel pass of {m.name} over the k draft positions"


class MedusaDrafter(Drafter):
    """Medusa: k heads on the target's last hidden state, all in one pass over the decoding
    rows (no sequential passes, no KV cache, no prompt pass). A tree (``speculation.tree``)
    takes each depth's candidates from its head's top tokens and changes only what is
    verified and accepted, not this cost."""

    kind = "medusa"  # one pass of the heads over the drafting rows

    def __init__(self, name: str, cost: ForwardCostModel, heads: int) -> None:
        self.name, self.cost, self.heads = name, cost, heads

    def describe(self) -> str:
        text = (f"{self.name}: one pass of {self.heads} Medusa heads "
                f"({self.cost.resident_params / 1e9:.2f} B params)")
        return text + ("" if self.tree is None else f"; {self.tree.describe()}")


class LookupDrafter(Drafter):
    """n-gram / prompt lookup: CPU microseconds per step, proposes only on a match."""

    name = "ngram"
    proposes_always = False
    kind = "lookup"  # scalar: CPU seconds per step where a row drafts

    def __init__(self, cpu_s_per_step: float, match_rate: float) -> None:
        self.cpu_s, self.match_rate = cpu_s_per_step, match_rate
        self.scalar = cpu_s_per_step

    def describe(self) -> str:
        return (f"ngram lookup: {self.cpu_s * 1e6:.0f} us CPU per step, match rate "
                f"{self.match_rate:.2f}")


class SuffixDrafter(LookupDrafter):
    """Suffix decoding (Oliaro et al., arXiv 2411.04975): a suffix-tree lookup over the
    request's own tokens and earlier outputs, so its chance of finding a draft grows as the
    request (and its session) repeats itself; CPU microseconds per step. The chance depends
    on each row's progress, so a fixed k still runs step by step."""

    name = "suffix"
    state_dependent_match = True

    def __init__(self, cpu_s_per_step: float, start: float, top: float, growth: float,
                 session_carry: bool) -> None:
        super().__init__(cpu_s_per_step, top)
        self.start, self.top, self.growth = start, top, growth
        self.session_carry = session_carry

    def match_probability(self, rows, table):
        seen = table.generated[rows].astype(np.float64)
        if self.session_carry:
            seen = seen + np.where(table.turn[rows] > 0, table.prompt[rows], 0)
        return self.top - (self.top - self.start) * np.exp(-seen / self.growth)

    def describe(self) -> str:
        return (f"suffix decoding: {self.cpu_s * 1e6:.0f} us CPU per step, match chance "
                f"{self.start:.2f} -> {self.top:.2f} over ~{self.growth:g} tokens seen")


class RatioDrafter(Drafter):
    """What-if: each drafted token costs ``ratio`` x a target decode pass over the same rows."""

    kind = "ratio"  # scalar: the ratio; cost: the target's roofline

    def __init__(self, name: str, target: ForwardCostModel, ratio: float) -> None:
        self.name, self.target, self.ratio = name, target, ratio
        self.cost, self.scalar = target, ratio

    def describe(self) -> str:
        return f"{self.name}: draft cost {self.ratio:g} x target decode step per drafted token"


class FixedTimeDrafter(Drafter):
    """What-if: each sequential draft position costs a fixed number of seconds."""

    kind = "fixed"  # scalar: seconds per draft position

    def __init__(self, name: str, seconds_per_token: float) -> None:
        self.name, self.s = name, seconds_per_token
        self.scalar = seconds_per_token

    def describe(self) -> str:
        return f"{self.name}: {self.s * 1e3:g} ms per drafted token"


# ------------------------------------------------------------------ speculation modules


class ModuleCostModel(ForwardCostModel):
    """The roofline of a speculation module whose shape a ModelSpec cannot say in full.

    ``extra_linear_params``: dense weights every drafted token multiplies through besides the
    module's layers and LM head (MTP's [hidden; embedding] projection, Medusa's residual
    blocks), priced in the same linear group (FLOPs and weight bytes); ``resident_params``:
    the weights the module adds to the device (tensors it shares with the target, such as
    MTP's embedding and LM head, are not counted again); ``kv_layers``: layers of KV cache it
    keeps per token (each MTP module its own).
    """

    def __init__(self, model, hardware, tp, precision, calibration, *,
                 extra_linear_params: float = 0.0, resident_params: float | None = None,
                 kv_layers: int | None = None) -> None:
        super().__init__(model, hardware, tp, precision, calibration, role="drafter")
        w_b = precision.weights.bytes_per_element
        self._lin_flops_per_token += 2.0 * extra_linear_params / tp
        self._dense_weight_bytes += extra_linear_params * w_b / tp
        self.extra_linear_params = extra_linear_params
        self.resident_params = (model.total_params + extra_linear_params
                                if resident_params is None else resident_params)
        if kv_layers is not None and model.n_layers:
            self.kv_bytes_per_token *= kv_layers / model.n_layers

    @property
    def weight_bytes_per_device(self) -> float:
        return self.resident_params * self.prec.weights.bytes_per_element / self.tp


def mtp_module(target_model):
    """One MTP module of ``target_model`` (DeepSeek-V3, arXiv 2412.19437 sec. 2.2; MiMo-7B,
    arXiv 2505.07608): RMSNorm of the previous hidden state and of the next token's embedding,
    their concatenation projected 2h -> h, one decoder layer of the target's own shape (its
    MoE layer for an MoE target), and the target's shared full-vocabulary LM head. The
    ModelSpec holds the layer and the head; the projection is ``mtp_projection_params``."""
    moe = None if target_model.moe is None else replace(target_model.moe, first_dense_layers=0)
    att = target_model.attention
    if att is not None:  # the module's layer attends in full: MLA (DeepSeek-V3) or gated
        # full attention (Qwen3-Next / Qwen3.5 MTP, vLLM qwen3_next_mtp.py), never linear
        att = replace(att, pattern=("mla",) if "mla" in att.pattern else ("gqa",))
    return replace(target_model, name=f"{target_model.name}-mtp-module", n_layers=1, moe=moe,
                   tied_embeddings=True, mtp_layers=0, attention=att,
                   source=f"derived: one MTP module of {target_model.name} (a decoder layer of "
                          "its shape + the 2h -> h projection; embedding and LM head shared)")


def mtp_projection_params(target_model) -> int:
    """eh_proj / input_proj of an MTP module: [hidden; embedding] (2h) -> h."""
    return 2 * target_model.hidden_size * target_model.hidden_size


def medusa_heads(target_model, heads: int):
    """k Medusa heads (Cai et al. 2024, arXiv 2401.10774, sec. 2.1.1: head k is
    softmax(W2_k (SiLU(W1_k h) + h)), W1_k d x d, W2_k d x V, one residual block per head as
    the reference implementation's default medusa_num_layers = 1): as a ModelSpec, no
    decoder layers and an LM head of heads x V rows (each head its own); the d x d blocks
    are ``medusa_block_params``."""
    return replace(target_model, name=f"{target_model.name}-medusa-{heads}", n_layers=0,
                   moe=None, tied_embeddings=True, mtp_layers=0,
                   vocab_size=heads * target_model.vocab_size,
                   source=f"derived: {heads} Medusa heads over {target_model.name}'s hidden "
                          "state (d x d residual block + d x V LM head each)")


def medusa_block_params(target_model, heads: int) -> int:
    return heads * target_model.hidden_size * target_model.hidden_size


# ------------------------------------------------------------------ building drafters


@dataclass
class DraftContext:
    """What a drafter factory may read: the speculation section and the target's pricing."""

    spec: dict[str, Any]  # the validated ``speculation`` section
    model: Any  # the target's ModelSpec
    target: ForwardCostModel
    hardware: Any
    tp: int
    calibration: Any


@dataclass
class DrafterModel:
    """A drafter that is a model on the target's devices: its weights and KV take HBM."""

    model: Any
    precision: Any
    cost: ForwardCostModel


def build_drafter(ctx: DraftContext) -> tuple[Drafter, DrafterModel | None]:
    """The scenario's drafter (``speculation.method``), with every cross-field rule checked."""
    spec, where = ctx.spec, "speculation"
    method = spec.method
    factory = DRAFTERS.get(method)
    if method == "none":
        return factory(ctx), None
    get_precision(spec.drafter_quantization.model_dump(), f"{where}.drafter_quantization")
    dc = spec.draft_cost
    if dc.ratio is not None and dc.seconds_per_token is not None:
        raise ScenarioError(f"{where}.draft_cost: expected ratio or seconds_per_token, not both")
    drafter, model = factory(ctx)
    tree = build_tree(getattr(spec, "tree", None))  # only a tree method has the key
    if tree is not None:
        drafter.tree = tree  # verify width, draft passes and acceptance follow the tree
    return drafter, model


# ------------------------------------------------------------------ the methods' own keys


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


class NgramKeys(Section):
    """``method: ngram``'s own keys in ``speculation``."""

    ngram: section(Ngram)


class SuffixKeys(Section):
    """``method: suffix``'s own keys in ``speculation`` (see ``Suffix``)."""

    suffix: section(Suffix)


# ------------------------------------------------------------------ registrations
# Each drafter declares here what the schema and the engine-config mapping need (DrafterInfo):
# its own keys, whether it may draft a tree, whether it is a network with weights (its
# precision scales acceptance), whether an engine's draft-model id names a separate model,
# and the vLLM / SGLang names that mean it.


@DRAFTERS.register("none")
def _no_drafter(ctx: DraftContext) -> Drafter:
    return NoDrafter()


@DRAFTERS.register("ngram", params=NgramKeys, vllm=("ngram", "[ngram]", "ngram_gpu"),
                   sglang=("NGRAM",))
def _ngram(ctx: DraftContext):
    if ctx.spec.drafter is not None:
        raise ScenarioError("speculation.drafter: ngram lookup takes no drafter model")
    ng = ctx.spec.ngram
    return LookupDrafter(ng.cpu_s_per_step, ng.match_rate), None


@DRAFTERS.register("suffix", params=SuffixKeys, vllm=("suffix",), doc=(
    "``method: suffix``: suffix decoding (a CPU lookup whose match chance grows with\n"
    "repetition within the request and its session; see ``Suffix``)."))
def _suffix(ctx: DraftContext):
    if ctx.spec.drafter is not None:
        raise ScenarioError("speculation.drafter: suffix decoding takes no drafter model")
    sx = ctx.spec.suffix
    return SuffixDrafter(sx.cpu_s_per_step, sx.match_rate_start, sx.match_rate_max,
                         sx.growth_tokens, sx.session_carry), None


def _what_if(ctx: DraftContext) -> Drafter | None:
    """The ``draft_cost`` what-if drafter, if the scenario gives one."""
    method, dc = ctx.spec.method, ctx.spec.draft_cost
    if dc.ratio is not None:
        return RatioDrafter(method, ctx.target, dc.ratio)
    if dc.seconds_per_token is not None:
        return FixedTimeDrafter(method, dc.seconds_per_token)
    return None


def _drafter_precision(ctx: DraftContext):
    return get_precision(ctx.spec.drafter_quantization.model_dump(),
                         "speculation.drafter_quantization")


def _model_drafter(ctx: DraftContext, drafter_model, parallel: bool):
    """A drafter model priced by the roofline, unless a ``draft_cost`` what-if replaces it."""
    what_if = _what_if(ctx)
    if what_if is not None:
        return what_if, None
    dq = _drafter_precision(ctx)
    cm = ForwardCostModel(drafter_model, ctx.hardware, ctx.tp, dq, ctx.calibration,
                          role="drafter")
    cls = ParallelDrafter if parallel else SequentialDrafter
    return cls(ctx.spec.method, cm), DrafterModel(drafter_model, dq, cm)


def _separate_model(ctx: DraftContext, parallel: bool):
    spec, method = ctx.spec, ctx.spec.method
    dc = spec.draft_cost
    if spec.drafter is None:
        if dc.ratio is None and dc.seconds_per_token is None:
            raise ScenarioError(f"speculation.drafter: required for method {method!r} (a "
                                "catalog model or inline mapping), or give draft_cost")
        return _model_drafter(ctx, None, parallel)
    drafter_model = get_model(spec.drafter, "speculation.drafter")
    if drafter_model.tokenizer != ctx.model.tokenizer and not isinstance(spec.drafter, dict):
        raise ScenarioError(f"speculation.drafter: {drafter_model.name} uses tokenizer "
                            f"{drafter_model.tokenizer!r} but {ctx.model.name} uses "
                            f"{ctx.model.tokenizer!r}; a draft model must share the target's "
                            "tokenizer")
    return _model_drafter(ctx, drafter_model, parallel)


@DRAFTERS.register("draft_model", has_weights=True, draft_model=True, vllm=("draft_model",),
                   sglang=("STANDALONE",))
def _draft_model(ctx: DraftContext):
    return _separate_model(ctx, parallel=False)


# vLLM names PARD as draft_model with parallel_drafting (engine_config maps it)
@DRAFTERS.register("pard", has_weights=True, draft_model=True)
def _pard(ctx: DraftContext):
    return _separate_model(ctx, parallel=True)


@DRAFTERS.register("dflash", has_weights=True, draft_model=True, vllm=("dflash",),
                   sglang=("DFLASH",))
def _dflash(ctx: DraftContext):
    return _separate_model(ctx, parallel=True)


def _head(ctx: DraftContext):
    spec = ctx.spec
    if spec.drafter is not None:
        return _model_drafter(ctx, get_model(spec.drafter, "speculation.drafter"), False)
    return _model_drafter(ctx, eagle_head(ctx.model), False)


@DRAFTERS.register("eagle3", tree=True, has_weights=True, vllm=("eagle", "eagle3"),
                   sglang=("EAGLE", "EAGLE3"))
def _eagle3(ctx: DraftContext):
    return _head(ctx)


@DRAFTERS.register("mtp", tree=True, has_weights=True, vllm=tuple(sorted(VLLM_MTP_METHODS)),
                   sglang=("NEXTN",))
def _mtp(ctx: DraftContext):
    """The target's own MTP modules, k sequential passes (with k above mtp_layers the modules
    are reused autoregressively, as vLLM does), each priced as ``mtp_module`` plus its
    projection; a ``drafter:`` given explicitly is priced as that model instead."""
    if ctx.spec.drafter is not None:
        return _head(ctx)
    target = ctx.model
    if target.mtp_layers < 1:
        raise ScenarioError(f"speculation.method: {target.name} has no MTP modules "
                            "(mtp_layers is 0 in the catalog); use eagle3 or a drafter")
    what_if = _what_if(ctx)
    if what_if is not None:
        return what_if, None
    module = mtp_module(target)
    proj = mtp_projection_params(target)
    layer = module.total_params - module.embedding_params  # embedding and LM head: shared
    dq = _drafter_precision(ctx)
    cm = ModuleCostModel(module, ctx.hardware, ctx.tp, dq, ctx.calibration,
                         extra_linear_params=proj,
                         resident_params=target.mtp_layers * (layer + proj),
                         kv_layers=target.mtp_layers)
    return SequentialDrafter("mtp", cm), DrafterModel(module, dq, cm)


@DRAFTERS.register("medusa", tree=True, has_weights=True, vllm=("medusa",), doc=(
    "``method: medusa``: k Medusa heads on the target (usually with a tree)."))
def _medusa(ctx: DraftContext):
    """Medusa heads on the target: k heads (speculation.k), one pass over the decoding rows."""
    if ctx.spec.drafter is not None:
        raise ScenarioError("speculation.drafter: medusa heads are derived from the target "
                            "(k heads over its hidden state); remove drafter, or use "
                            "draft_cost for a measured head cost")
    what_if = _what_if(ctx)
    if what_if is not None:
        return what_if, None
    heads = max(int(ctx.spec.k), 1)
    spec_model = medusa_heads(ctx.model, heads)
    dq = _drafter_precision(ctx)
    cm = ModuleCostModel(spec_model, ctx.hardware, ctx.tp, dq, ctx.calibration,
                         extra_linear_params=medusa_block_params(ctx.model, heads))
    return MedusaDrafter("medusa", cm, heads), DrafterModel(spec_model, dq, cm)


EAGLE3_DRAFT_VOCAB = 32000  # EAGLE-3's reduced draft vocabulary (Li et al. 2025; draft_vocab_size)


def eagle_head(target_model, layers: int = 1):
    """EAGLE-style draft head: one decoder layer of the target's shape plus a draft LM head.

    The head reads the target's embeddings (a lookup, not a pass over the matrix) and has
    its own LM head over a reduced vocabulary, so only one layer and that head are priced.
    """
    inter = target_model.intermediate_size or (target_model.moe.expert_intermediate_size
                                                * target_model.moe.top_k)
    # attention=None: the head's layers attend in full (a Llama-style layer of the target's
    # heads), whatever kinds the target's own layers are (docs/architecture.md, Layer kinds)
    return replace(target_model, name=f"{target_model.name}-draft-head", n_layers=layers,
                   moe=None, intermediate_size=inter, tied_embeddings=True, mtp_layers=0,
                   attention=None,
                   vocab_size=min(target_model.vocab_size, EAGLE3_DRAFT_VOCAB),
                   source=f"derived: {layers} decoder layer(s) of {target_model.name} + LM head "
                          f"over a {EAGLE3_DRAFT_VOCAB}-token draft vocabulary (EAGLE-3)")
