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

    def describe(self) -> str:
        return "no drafting"


class NoDrafter(Drafter):
    pass


def _passes(k: np.ndarray, ctx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Aggregates of k sequential one-token passes: pass j holds the rows with k_i > j."""
    kmax = int(k.max()) if k.size else 0
    j = np.arange(kmax)
    mask = k[:, None] > j[None, :]
    n = mask.sum(axis=0).astype(np.float64)
    c = ((ctx[:, None] + j[None, :]) * mask).sum(axis=0).astype(np.float64)
    return n, c + n, c  # tokens, qc (each token attends ctx + j + 1), ctx read


class SequentialDrafter(Drafter):
    """A draft model, EAGLE head or MTP module: k sequential passes of a smaller model."""

    def __init__(self, name: str, model: ForwardCostModel) -> None:
        self.name, self.model = name, model

    def cost(self, k, ctx, prefill_tokens, prefill_qc):
        if not k.size or k.max() <= 0:
            if prefill_tokens:
                t = self.model.time(prefill_tokens, prefill_qc, 0.0)
                return DraftCost(t, *self.model.work(prefill_tokens, prefill_qc, 0.0))
            return DraftCost(0.0)
        n, qc, c = _passes(k, ctx)
        # the drafter also prefills the new prompt chunks (its own KV), in its first pass
        n[0] += prefill_tokens
        qc[0] += prefill_qc
        t = float(np.sum(self.model.time(n, qc, c)))
        fl, by = self.model.work(n, qc, c)
        return DraftCost(t, float(np.sum(fl)), float(np.sum(by)))

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
        t = self.model.time(tokens, qc, c)
        return DraftCost(float(t), *(float(x) for x in self.model.work(tokens, qc, c)))

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
        step = self.target.time(n, c + n, c)
        return DraftCost(self.ratio * float(k.max()) * float(step))

    def describe(self) -> str:
        return f"{self.name}: draft cost {self.ratio:g} x target decode step per drafted token"


class FixedTimeDrafter(Drafter):
    """What-if: each sequential draft position costs a fixed number of seconds."""

    def __init__(self, name: str, seconds_per_token: float) -> None:
        self.name, self.s = name, seconds_per_token

    def cost(self, k, ctx, prefill_tokens, prefill_qc):
        return DraftCost(self.s * float(k.max()) if k.size else 0.0)

    def describe(self) -> str:
        return f"{self.name}: {self.s * 1e3:g} ms per drafted token"


def eagle_head(target_model, layers: int = 1):
    """EAGLE-style draft head: one decoder layer of the target's shape plus its LM head."""
    return replace(target_model, name=f"{target_model.name}-draft-head", n_layers=layers,
                   moe=None, intermediate_size=(target_model.intermediate_size or
                                                 (target_model.moe.expert_intermediate_size *
                                                  target_model.moe.top_k)),
                   tied_embeddings=True, mtp_layers=0,
                   source=f"derived: {layers} decoder layer(s) + LM head of {target_model.name} "
                          "(EAGLE-3 / MTP head structure)")


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
