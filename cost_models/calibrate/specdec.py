"""Exact speculative decoding in torch: drafters, verification, rollback, and its timing.

A step drafts up to k tokens, verifies them together with the pending token in one target
pass of q = drafts + 1 tokens, and keeps the accepted prefix plus one more token (a
correction on the first rejection, else a bonus from the last position). Sampling follows
Leviathan et al. 2023: a draft x ~ q is kept with probability min(1, p(x) / q(x)); on
rejection the token is drawn from normalise(max(0, p - q)), which makes every emitted
token distributed exactly as the target alone would emit it. Temperature 0 is the greedy
limit: keep a draft iff it equals the target's argmax. Rejected tokens' KV entries are
dropped by moving the cache's length pointer back.

Drafters: the target's own first layers (self-speculation; they share the target's KV cache
because their layers *are* the target's first layers) and prompt lookup (n-gram match in the
text so far, no model at all).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch

from .model import KVCache, Transformer


def probs_of(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Softmax of ``logits / temperature`` in float32 (last axis)."""
    return torch.softmax(logits.float() / temperature, dim=-1)


def sample(probs: torch.Tensor, gen: torch.Generator) -> int:
    return int(torch.multinomial(probs, 1, generator=gen))


def speculative_accept(drafts: Sequence[int], q_probs: torch.Tensor | None,
                       p_probs: torch.Tensor, gen: torch.Generator) -> tuple[int, int]:
    """Accepted draft count and the next token (correction or bonus), exact sampling.

    ``p_probs`` [m + 1, V]: the target's distributions at the m draft positions and after
    them. ``q_probs`` [m, V]: the drafter's distributions the drafts were sampled from, or
    None for a deterministic drafter (q is one-hot at the draft, e.g. prompt lookup).
    """
    m = len(drafts)
    u = torch.rand(m, generator=gen) if m else None
    for j, d in enumerate(drafts):
        p_d = float(p_probs[j, d])
        q_d = float(q_probs[j, d]) if q_probs is not None else 1.0
        if float(u[j]) * q_d < p_d:  # u < p/q, i.e. accept with probability min(1, p/q)
            continue
        if q_probs is not None:
            resid = torch.clamp(p_probs[j] - q_probs[j], min=0.0)
        else:
            resid = p_probs[j].clone()
            resid[d] = 0.0
        total = float(resid.sum())
        # A rejection implies p(d) < q(d), so some other token has p > q; guard rounding only.
        return j, sample(resid / total if total > 0 else p_probs[j], gen)
    return m, sample(p_probs[m], gen)


def greedy_accept(drafts: Sequence[int], target_argmax: Sequence[int]) -> tuple[int, int]:
    """Temperature 0: keep drafts while they equal the target's argmax; then its argmax."""
    for j, d in enumerate(drafts):
        if int(target_argmax[j]) != d:
            return j, int(target_argmax[j])
    return len(drafts), int(target_argmax[len(drafts)])


# ---------------------------------------------------------------- drafters


@dataclass
class Draft:
    tokens: list[int]
    q_probs: torch.Tensor | None  # [len(tokens), V] or None (deterministic)
    passes: int  # drafter forward passes run (each one token)


class Drafter(Protocol):
    name: str

    def propose(self, ids: list[int], cache: KVCache, k: int, temperature: float,
                gen: torch.Generator) -> Draft: ...


class SelfSpecDrafter:
    """The target's first ``n_layers`` layers + its final norm and LM head.

    Shares the target's KV cache: those layers' keys and values for accepted tokens are the
    ones the target wrote, so no catch-up pass is needed; the drafter's own entries are
    rolled back before verification rewrites them.
    """

    def __init__(self, target: Transformer, n_layers: int) -> None:
        self.model = target.truncated(n_layers)
        self.n_layers = n_layers
        self.name = f"self-spec-{n_layers}L"

    def propose(self, ids: list[int], cache: KVCache, k: int, temperature: float,
                gen: torch.Generator) -> Draft:
        start = cache.length
        tok = ids[-1]
        tokens: list[int] = []
        probs: list[torch.Tensor] = []
        dev = self.model.device
        for _ in range(k):
            logits = self.model(torch.tensor([[tok]], device=dev), cache)[0, -1]
            if temperature == 0:
                tok = int(logits.argmax())
            else:
                pr = probs_of(logits, temperature)
                tok = sample(pr, gen)
                probs.append(pr)
            tokens.append(tok)
        cache.rollback(start)
        return Draft(tokens, torch.stack(probs) if probs else None, k)


class PromptLookupDrafter:
    """Prompt lookup decoding: copy what followed the latest earlier match of the last n-gram.

    Tries n = max_ngram down to min_ngram; proposes nothing when no n-gram recurs (the step
    is then a plain decode step).
    """

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.name = "prompt-lookup"

    def lookup(self, ids: Sequence[int], k: int) -> list[int]:
        arr = np.asarray(ids, dtype=np.int64)
        n_tok = arr.size
        for n in range(self.max_ngram, self.min_ngram - 1, -1):
            if n_tok <= n:
                continue
            pattern = arr[-n:]
            windows = np.lib.stride_tricks.sliding_window_view(arr[:-1], n)
            hits = np.flatnonzero((windows == pattern).all(axis=1))
            if hits.size:
                start = int(hits[-1]) + n
                return arr[start:start + k].tolist()
        return []

    def propose(self, ids: list[int], cache: KVCache, k: int, temperature: float,
                gen: torch.Generator) -> Draft:
        return Draft(self.lookup(ids, k), None, 0)


# ---------------------------------------------------------------- the loop


@dataclass
class Step:
    """One draft + verify step (ctx: KV entries before the verify pass)."""

    ctx: int
    q: int
    drafted: int
    accepted: int
    emitted: int
    draft_passes: int
    draft_s: float
    verify_s: float
    end_s: float  # since the request started


@dataclass
class RunResult:
    drafter: str
    k: int
    temperature: float
    prompt_len: int
    tokens: list[int]
    prefill_s: float
    steps: list[Step] = field(default_factory=list)
    prompt: str = ""
    kind: str = ""

    @property
    def decode_s(self) -> float:
        return self.steps[-1].end_s - self.prefill_s if self.steps else 0.0

    @property
    def tpot_s(self) -> float:
        """(last token time - first token time) / (output tokens - 1), as DESIGN.md defines."""
        return self.decode_s / max(len(self.tokens) - 1, 1)

    @property
    def tau(self) -> float:
        """Output tokens per target verification step (1.0 without speculation)."""
        return sum(s.emitted for s in self.steps) / max(len(self.steps), 1)

    @property
    def acceptance_rate(self) -> float:
        drafted = sum(s.drafted for s in self.steps)
        return sum(s.accepted for s in self.steps) / drafted if drafted else float("nan")

    def summary(self) -> dict:
        return {"prompt": self.prompt, "kind": self.kind, "drafter": self.drafter, "k": self.k,
                "temperature": self.temperature, "prompt_len": self.prompt_len,
                "output_tokens": len(self.tokens), "steps": len(self.steps),
                "tau": self.tau, "acceptance_rate": self.acceptance_rate,
                "prefill_s": self.prefill_s, "tpot_s": self.tpot_s,
                "draft_share": (sum(s.draft_s for s in self.steps)
                                / max(sum(s.draft_s + s.verify_s for s in self.steps), 1e-12)),
                "step_table": {name: [getattr(s, name) for s in self.steps]
                               for name in ("ctx", "q", "emitted", "draft_passes", "draft_s",
                                            "verify_s")}}


def generate(target: Transformer, prompt_ids: Sequence[int], max_new: int,
             drafter: Drafter | None = None, k: int = 4, temperature: float = 0.0,
             seed: int = 0, stop_ids: Sequence[int] = ()) -> RunResult:
    """Decode up to ``max_new`` tokens, speculatively when a drafter is given; timed per step."""
    dev = target.device
    gen = torch.Generator().manual_seed(seed)
    cache = target.new_cache(1, len(prompt_ids) + max_new + k + 2)
    t0 = time.perf_counter()

    def pick(logits: torch.Tensor) -> int:
        return int(logits.argmax()) if temperature == 0 else sample(
            probs_of(logits, temperature), gen)

    logits = target(torch.tensor([list(prompt_ids)], device=dev), cache, logits="last")
    out = [pick(logits[0, -1])]
    res = RunResult(drafter.name if drafter else "none", k if drafter else 0, temperature,
                    len(prompt_ids), out, time.perf_counter() - t0)
    ids = list(prompt_ids) + out
    stops = set(stop_ids)
    while len(out) < max_new and out[-1] not in stops:
        ctx = cache.length
        td = time.perf_counter()
        draft = (drafter.propose(ids, cache, k, temperature, gen) if drafter
                 else Draft([], None, 0))
        tv = time.perf_counter()
        logits = target(torch.tensor([[ids[-1]] + draft.tokens], device=dev), cache)[0]
        if temperature == 0:
            n_acc, nxt = greedy_accept(draft.tokens, logits.argmax(dim=-1).tolist())
        else:
            n_acc, nxt = speculative_accept(draft.tokens, draft.q_probs,
                                            probs_of(logits, temperature), gen)
        cache.rollback(ctx + 1 + n_acc)
        new = draft.tokens[:n_acc] + [nxt]
        te = time.perf_counter()
        res.steps.append(Step(ctx, len(draft.tokens) + 1, len(draft.tokens), n_acc, len(new),
                              draft.passes, tv - td, te - tv, te - t0))
        for tok in new:
            out.append(tok)
            ids.append(tok)
            if tok in stops or len(out) >= max_new:
                break
    return res


def median_of_runs(runs: Sequence[RunResult]) -> RunResult:
    """One run whose prefill and per-step durations are medians over identical repeats.

    Greedy decoding repeats exactly, so the i-th steps of the repeats did the same work;
    their median duration discards a moment of load from another process on a shared CPU.
    """
    first = runs[0]
    for r in runs[1:]:
        if r.tokens != first.tokens or len(r.steps) != len(first.steps):
            raise ValueError("repeats differ: median_of_runs needs deterministic (greedy) runs")
    if len(runs) == 1:
        return first
    prefill = float(np.median([r.prefill_s for r in runs]))
    ends = np.array([[s.end_s for s in r.steps] for r in runs])
    starts = np.concatenate([np.array([[r.prefill_s] for r in runs]), ends[:, :-1]], axis=1)
    dur = np.median(ends - starts, axis=0)
    draft = np.median([[s.draft_s for s in r.steps] for r in runs], axis=0)
    verify = np.median([[s.verify_s for s in r.steps] for r in runs], axis=0)
    end = prefill + np.cumsum(dur)
    steps = [Step(s.ctx, s.q, s.drafted, s.accepted, s.emitted, s.draft_passes, float(draft[i]),
                  float(verify[i]), float(end[i])) for i, s in enumerate(first.steps)]
    return RunResult(first.drafter, first.k, first.temperature, first.prompt_len,
                     list(first.tokens), prefill, steps, first.prompt, first.kind)
