"""Speculation: drafters (what drafting costs) and controllers (how many tokens to draft).

A drafter prices the drafting of one iteration from the speculating rows' draft lengths and
contexts; a controller picks each row's k. Both are small classes chosen by name from the
scenario (``speculation.method`` and ``speculation.policy``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from cost_models.roofline import ForwardCostModel

from .errors import ScenarioError


@dataclass
class DraftCost:
    time_s: float
    flops: float = 0.0
    bytes: float = 0.0


class Drafter:
    """Interface: price drafting ``k`` tokens for rows with KV context ``ctx``."""

    name = "none"
    proposes_always = True  # n-gram lookup proposes only on a match

    def cost(self, k: np.ndarray, ctx: np.ndarray, prefill_tokens: int,
             prefill_qc: float) -> DraftCost:
        return DraftCost(0.0)

    def cost_steps(self, k: np.ndarray, ctx: np.ndarray, pf_tokens: np.ndarray | None = None,
                   pf_qc: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
        """Vectorised over S steps: k and ctx are (S, B); prefill tokens and qc are (S,).

        Returns per-step (seconds, FLOPs, bytes); used by the worker's multi-step fast path.
        """
        z = np.zeros(k.shape[0])
        return z, z, z

    def describe(self) -> str:
        return "no drafting"


class NoDrafter(Drafter):
    pass


def _passes(k: np.ndarray, ctx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Aggregates of k sequential one-token passes: pass j holds the rows with k_i > j."""
    kmax = int(k.max()) if k.size else 0
    cnt = np.bincount(k, minlength=kmax + 1)
    csum = np.bincount(k, weights=ctx, minlength=kmax + 1)
    # rows with k_i > j: suffix sums over k = j+1 .. kmax
    n = (cnt[::-1].cumsum()[::-1])[1:].astype(np.float64)
    c = (csum[::-1].cumsum()[::-1])[1:] + np.arange(kmax) * n
    return n, c + n, c  # tokens, qc (each token attends ctx + j + 1), ctx read


class SequentialDrafter(Drafter):
    """A draft model, EAGLE head or MTP module: k sequential passes of a smaller model."""

    def __init__(self, name: str, model: ForwardCostModel) -> None:
        self.name, self.model = name, model

    def cost(self, k, ctx, prefill_tokens, prefill_qc):
        price = self.model.scalar
        if not k.size:
            return DraftCost(*price(prefill_tokens, prefill_qc, 0.0, 0.0))
        n, qc, c = _passes(k, ctx)
        # the drafter also prefills the new prompt chunks (its own KV), in its first pass
        total = DraftCost(*price(n[0] + prefill_tokens, qc[0] + prefill_qc, c[0], n[0]))
        for j in range(1, len(n)):
            t, f, b = price(n[j], qc[j], c[j], n[j])
            total.time_s += t
            total.flops += f
            total.bytes += b
        return total

    def cost_steps(self, k, ctx, pf_tokens=None, pf_qc=None):
        S = k.shape[0]
        has_pf = pf_tokens is not None and bool(pf_tokens.any())
        kmax = max(int(k.max()) if k.size else 0, 1 if has_pf else 0)
        if kmax == 0:
            z = np.zeros(S)
            return z, z, z
        j = np.arange(kmax)
        mask = k[:, :, None] > j[None, None, :]  # (S, B, passes)
        n = mask.sum(axis=1).astype(np.float64)  # rows in pass j of step s
        c = np.einsum("sb,sbj->sj", ctx, mask) + j[None, :] * n
        tok, qc = n.copy(), c + n
        if has_pf:  # the drafter prefills new prompt chunks in its first pass
            tok[:, 0] += pf_tokens
            qc[:, 0] += pf_qc
        t, f, b = self.model.time_and_work(tok, qc, c, n)
        return t.sum(axis=1), f.sum(axis=1), b.sum(axis=1)

    def describe(self) -> str:
        m = self.model.model
        return (f"{self.name}: k sequential passes of {m.name} ({m.n_layers} layers, "
                f"{m.total_params / 1e9:.2f} B params)")


class ParallelDrafter(SequentialDrafter):
    """PARD / DFlash: one drafter pass over all k positions of each row."""

    def cost(self, k, ctx, prefill_tokens, prefill_qc):
        kk = k.astype(np.float64)
        tokens = float(kk.sum()) + prefill_tokens
        if tokens <= 0:
            return DraftCost(0.0)
        qc = float((kk * ctx + kk * (kk + 1) / 2).sum()) + prefill_qc
        c = float(ctx[k > 0].sum())
        return DraftCost(*self.model.scalar(tokens, qc, c, float(kk.sum())))

    def cost_steps(self, k, ctx, pf_tokens=None, pf_qc=None):
        kk = k.astype(np.float64)
        drafted = kk.sum(axis=1)
        qc = (kk * ctx + kk * (kk + 1) / 2).sum(axis=1)
        c = (ctx * (k > 0)).sum(axis=1)
        if pf_tokens is not None:
            return self.model.time_and_work(drafted + pf_tokens, qc + pf_qc, c, drafted)
        return self.model.time_and_work(drafted, qc, c, drafted)

    def describe(self) -> str:
        m = self.model.model
        return f"{self.name}: one parallel pass of {m.name} over the k draft positions"


class LookupDrafter(Drafter):
    """n-gram / prompt lookup: CPU microseconds per step, proposes only on a match."""

    name = "ngram"
    proposes_always = False

    def __init__(self, cpu_s_per_step: float, match_rate: float) -> None:
        self.cpu_s, self.match_rate = cpu_s_per_step, match_rate

    def cost(self, k, ctx, prefill_tokens, prefill_qc):
        return DraftCost(self.cpu_s if k.size else 0.0)

    def cost_steps(self, k, ctx, pf_tokens=None, pf_qc=None):
        z = np.zeros(k.shape[0])
        return np.where((k > 0).any(axis=1), self.cpu_s, 0.0), z, z

    def describe(self) -> str:
        return (f"ngram lookup: {self.cpu_s * 1e6:.0f} us CPU per step, match rate "
                f"{self.match_rate:.2f}")


class RatioDrafter(Drafter):
    """What-if: each drafted token costs ``ratio`` x a target decode pass over the same rows."""

    def __init__(self, name: str, target: ForwardCostModel, ratio: float) -> None:
        self.name, self.target, self.ratio = name, target, ratio

    def cost(self, k, ctx, prefill_tokens, prefill_qc):
        if not k.size or k.max() <= 0:
            return DraftCost(0.0)
        rows = k > 0
        n = float(rows.sum())
        c = float(ctx[rows].sum())
        step = self.target.scalar(n, c + n, c, n)[0]
        return DraftCost(self.ratio * float(k.max()) * step)

    def cost_steps(self, k, ctx, pf_tokens=None, pf_qc=None):
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

    def cost(self, k, ctx, prefill_tokens, prefill_qc):
        return DraftCost(self.s * float(k.max()) if k.size else 0.0)

    def cost_steps(self, k, ctx, pf_tokens=None, pf_qc=None):
        z = np.zeros(k.shape[0])
        return self.s * k.max(axis=1).astype(np.float64), z, z

    def describe(self) -> str:
        return f"{self.name}: {self.s * 1e3:g} ms per drafted token"


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


# ------------------------------------------------------------------ controllers


class SpeculationController:
    """Interface: the draft length of each decode row this iteration."""

    name = "static"

    def choose(self, n_rows: int) -> np.ndarray:
        raise NotImplementedError


class StaticK(SpeculationController):
    name = "static"

    def __init__(self, k: int) -> None:
        self.k = k

    def choose(self, n_rows: int) -> np.ndarray:
        return np.full(n_rows, self.k, dtype=np.int64)


class Off(StaticK):
    name = "off"

    def __init__(self) -> None:
        super().__init__(0)


def make_controller(policy: str, method: str, k: int) -> SpeculationController:
    if method == "none" or policy == "off" or k == 0:
        return Off()
    if policy == "static":
        return StaticK(k)
    raise ScenarioError(f"speculation.policy: unknown policy {policy!r}")
