"""Speculation: drafters (what drafting costs) and controllers (how many tokens to draft).

A drafter prices the drafting of one iteration from the speculating rows' draft lengths and
contexts; a controller picks each row's k. Both are small classes chosen by name from the
scenario (``speculation.method`` and ``speculation.policy``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from specsim.cost_models.catalog import get_model, get_precision
from specsim.cost_models.roofline import ForwardCostModel, attention_area
from specsim.errors import ScenarioError
from specsim.simulator.registry import DRAFTERS


class Drafter:
    """Interface: price drafting for S steps at once (the kernel's one pricing call).

    ``cost_steps(k, ctx, pf_tokens, pf_qc)``: k and ctx are (S, B) draft lengths and KV
    contexts of the batch's rows; pf_tokens / pf_qc the prefill tokens and attention area
    of each step (drafters with their own KV prefill them too). Returns per-step (seconds,
    FLOPs, bytes). Declares ``proposes_always`` (n-gram lookup proposes only on a match)
    and ``prefills`` (it keeps its own KV cache, so new prompt chunks pass through it).
    """

    name = "none"
    proposes_always = True
    prefills = False
    match_rate = 1.0

    def match_probability(self, rows: np.ndarray, table) -> float | np.ndarray:
        """The chance each row's lookup finds a draft this step (``match_rate`` unless a
        drafter's depends on the request, which then declares ``state_dependent_match``)."""
        return self.match_rate

    @staticmethod
    def verify_width(k):
        """Tokens the target verifies for a draft of length k: k + 1 for a chain (a tree
        drafter returns its tree size)."""
        return k + 1

    @staticmethod
    def k_for_width(width: int) -> int:
        """The longest draft whose verification fits in ``width`` tokens."""
        return max(width - 1, 0)

    def cost_steps(self, k: np.ndarray, ctx: np.ndarray, pf_tokens: np.ndarray,
                   pf_qc: np.ndarray) -> tuple[np.ndarray, ...]:
        z = np.zeros(k.shape[0])
        return z, z, z

    def describe(self) -> str:
        return "no drafting"


class NoDrafter(Drafter):
    pass


class SequentialDrafter(Drafter):
    """A draft model, EAGLE head or MTP module: k sequential passes of a smaller model."""

    prefills = True

    def __init__(self, name: str, model: ForwardCostModel) -> None:
        self.name, self.model = name, model

    def cost_steps(self, k, ctx, pf_tokens, pf_qc):
        S = k.shape[0]
        has_pf = bool(pf_tokens.any())
        kmax = max(int(k.max()) if k.size else 0, 1 if has_pf else 0)
        if kmax == 0:
            z = np.zeros(S)
            return z, z, z
        j = np.arange(kmax)
        # rows in pass j of step s: those drafting more than j tokens (counted by k value)
        width = kmax + 1
        idx = (np.arange(S)[:, None] * width + np.minimum(k, kmax)).ravel()
        cnt = np.bincount(idx, minlength=S * width).reshape(S, width)
        csum = np.bincount(idx, weights=ctx.ravel(), minlength=S * width).reshape(S, width)
        n = (cnt[:, ::-1].cumsum(axis=1)[:, ::-1])[:, 1:].astype(np.float64)
        c = (csum[:, ::-1].cumsum(axis=1)[:, ::-1])[:, 1:] + j[None, :] * n  # reads ctx + j
        tok, qc = n.copy(), c + n  # one token per row, attending ctx + j + 1
        tok[:, 0] += pf_tokens  # the drafter prefills new prompt chunks in its first pass
        qc[:, 0] += pf_qc
        t, f, b = self.model.time_and_work(tok, qc, c, n)
        return t.sum(axis=1), f.sum(axis=1), b.sum(axis=1)

    def describe(self) -> str:
        m = self.model.model
        return (f"{self.name}: k sequential passes of {m.name} ({m.n_layers} layers, "
                f"{m.total_params / 1e9:.2f} B params)")


class ParallelDrafter(SequentialDrafter):
    """PARD / DFlash: one drafter pass over all k positions of each row."""

    def cost_steps(self, k, ctx, pf_tokens, pf_qc):
        kk = k.astype(np.float64)
        drafted = kk.sum(axis=1)
        qc = attention_area(kk, ctx).sum(axis=1)
        c = (ctx * (k > 0)).sum(axis=1)
        return self.model.time_and_work(drafted + pf_tokens, qc + pf_qc, c, drafted)

    def describe(self) -> str:
        m = self.model.model
        return f"{self.name}: one parallel pass of {m.name} over the k draft positions"


class LookupDrafter(Drafter):
    """n-gram / prompt lookup: CPU microseconds per step, proposes only on a match."""

    name = "ngram"
    proposes_always = False

    def __init__(self, cpu_s_per_step: float, match_rate: float) -> None:
        self.cpu_s, self.match_rate = cpu_s_per_step, match_rate

    def cost_steps(self, k, ctx, pf_tokens, pf_qc):
        z = np.zeros(k.shape[0])
        return np.where((k > 0).any(axis=1), self.cpu_s, 0.0), z, z

    def describe(self) -> str:
        return (f"ngram lookup: {self.cpu_s * 1e6:.0f} us CPU per step, match rate "
                f"{self.match_rate:.2f}")


class RatioDrafter(Drafter):
    """What-if: each drafted token costs ``ratio`` x a target decode pass over the same rows."""

    def __init__(self, name: str, target: ForwardCostModel, ratio: float) -> None:
        self.name, self.target, self.ratio = name, target, ratio

    def cost_steps(self, k, ctx, pf_tokens, pf_qc):
        rows = k > 0
        n = rows.sum(axis=1).astype(np.float64)
        c = (ctx * rows).sum(axis=1)
        step = self.target.time(n, c + n, c, n)
        z = np.zeros(k.shape[0])
        return np.where(n > 0, self.ratio * k.max(axis=1) * step, 0.0), z, z

    def describe(self) -> str:
        return f"{self.name}: draft cost {self.ratio:g} x target decode step per drafted token"


class FixedTimeDrafter(Drafter):
    """What-if: each sequential draft position costs a fixed number of seconds."""

    def __init__(self, name: str, seconds_per_token: float) -> None:
        self.name, self.s = name, seconds_per_token

    def cost_steps(self, k, ctx, pf_tokens, pf_qc):
        z = np.zeros(k.shape[0])
        return self.s * k.max(axis=1).astype(np.float64), z, z

    def describe(self) -> str:
        return f"{self.name}: {self.s * 1e3:g} ms per drafted token"


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
    method = spec["method"]
    factory = DRAFTERS.get(method)
    if method == "none":
        return factory(ctx), None
    get_precision(spec["drafter_quantization"].model_dump(), f"{where}.drafter_quantization")
    dc = spec["draft_cost"]
    if dc["ratio"] is not None and dc["seconds_per_token"] is not None:
        raise ScenarioError(f"{where}.draft_cost: expected ratio or seconds_per_token, not both")
    return factory(ctx)


@DRAFTERS.register("none")
def _no_drafter(ctx: DraftContext) -> Drafter:
    return NoDrafter()


@DRAFTERS.register("ngram")
def _ngram(ctx: DraftContext):
    if ctx.spec["drafter"] is not None:
        raise ScenarioError("speculation.drafter: ngram lookup takes no drafter model")
    ng = ctx.spec["ngram"]
    return LookupDrafter(ng["cpu_s_per_step"], ng["match_rate"]), None


def _model_drafter(ctx: DraftContext, drafter_model, parallel: bool):
    """A drafter model priced by the roofline, unless a ``draft_cost`` what-if replaces it."""
    spec, method = ctx.spec, ctx.spec["method"]
    dc = spec["draft_cost"]
    if dc["ratio"] is not None:
        return RatioDrafter(method, ctx.target, dc["ratio"]), None
    if dc["seconds_per_token"] is not None:
        return FixedTimeDrafter(method, dc["seconds_per_token"]), None
    dq = get_precision(spec["drafter_quantization"].model_dump(),
                       "speculation.drafter_quantization")
    cm = ForwardCostModel(drafter_model, ctx.hardware, ctx.tp, dq, ctx.calibration,
                          role="drafter")
    cls = ParallelDrafter if parallel else SequentialDrafter
    return cls(method, cm), DrafterModel(drafter_model, dq, cm)


def _separate_model(ctx: DraftContext, parallel: bool):
    spec, method = ctx.spec, ctx.spec["method"]
    dc = spec["draft_cost"]
    if spec["drafter"] is None:
        if dc["ratio"] is None and dc["seconds_per_token"] is None:
            raise ScenarioError(f"speculation.drafter: required for method {method!r} (a "
                                "catalog model or inline mapping), or give draft_cost")
        return _model_drafter(ctx, None, parallel)
    drafter_model = get_model(spec["drafter"], "speculation.drafter")
    if drafter_model.tokenizer != ctx.model.tokenizer and not isinstance(spec["drafter"], dict):
        raise ScenarioError(f"speculation.drafter: {drafter_model.name} uses tokenizer "
                            f"{drafter_model.tokenizer!r} but {ctx.model.name} uses "
                            f"{ctx.model.tokenizer!r}; a draft model must share the target's "
                            "tokenizer")
    return _model_drafter(ctx, drafter_model, parallel)


@DRAFTERS.register("draft_model")
def _draft_model(ctx: DraftContext):
    return _separate_model(ctx, parallel=False)


@DRAFTERS.register("pard")
def _pard(ctx: DraftContext):
    return _separate_model(ctx, parallel=True)


@DRAFTERS.register("dflash")
def _dflash(ctx: DraftContext):
    return _separate_model(ctx, parallel=True)


def _head(ctx: DraftContext):
    spec = ctx.spec
    if spec["drafter"] is not None:
        return _model_drafter(ctx, get_model(spec["drafter"], "speculation.drafter"), False)
    return _model_drafter(ctx, eagle_head(ctx.model), False)


@DRAFTERS.register("eagle3")
def _eagle3(ctx: DraftContext):
    return _head(ctx)


@DRAFTERS.register("mtp")
def _mtp(ctx: DraftContext):
    if ctx.spec["drafter"] is None and ctx.model.mtp_layers < 1:
        raise ScenarioError(f"speculation.method: {ctx.model.name} has no MTP modules "
                            "(mtp_layers is 0 in the catalog); use eagle3 or a drafter")
    return _head(ctx)


EAGLE3_DRAFT_VOCAB = 32000  # EAGLE-3's reduced draft vocabulary (Li et al. 2025; draft_vocab_size)


def eagle_head(target_model, layers: int = 1):
    """EAGLE-style draft head: one decoder layer of the target's shape plus a draft LM head.

    The head reads the target's embeddings (a lookup, not a pass over the matrix) and has
    its own LM head over a reduced vocabulary, so only one layer and that head are priced.
    """
    inter = target_model.intermediate_size or (target_model.moe.expert_intermediate_size
                                                * target_model.moe.top_k)
    return replace(target_model, name=f"{target_model.name}-draft-head", n_layers=layers,
                   moe=None, intermediate_size=inter, tied_embeddings=True, mtp_layers=0,
                   vocab_size=min(target_model.vocab_size, EAGLE3_DRAFT_VOCAB),
                   source=f"derived: {layers} decoder layer(s) of {target_model.name} + LM head "
                          f"over a {EAGLE3_DRAFT_VOCAB}-token draft vocabulary (EAGLE-3)")
