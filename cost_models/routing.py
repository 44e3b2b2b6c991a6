"""Routing skew under expert parallelism, sampled: the busiest device's routed tokens / the
mean, as a function of the tokens a pass routes (docs/architecture.md, "Expert parallelism").

Every MoE layer's step waits for its busiest expert-parallel device, so the price of a pass
under EP is set by that device's routed tokens. Two things make it busier than the mean:

- expert popularity: a trained router does not spread tokens evenly. Each layer's experts get
  a popularity w_e = exp(sigma z_e), z_e ~ N(0, 1) (log-normal: the shape DeepEP PR #393
  found to fit DeepSeek-V3's per-rank token counts best, lowest sum of squared errors, on
  MMLU-Pro), and a token includes expert e with probability pi_e = top_k w_e / sum(w)
  (capped at 1, the excess spread over the others), top_k experts per token on average;
- statistics: a pass of T tokens draws its per-expert counts, Binomial(T, pi_e), so few
  tokens are lumpy (one token's top_k experts can sit on one device) and many tokens tend to
  the popularity's own skew.

``POPULARITY_SIGMA`` is fitted to a published measurement: NVIDIA's "Scaling Expert
Parallelism in TensorRT-LLM (Part 1)" (TensorRT-LLM tech blog 4, Table 1: DeepSeek-R1, 256
experts top-8, EP 32 on 32 GB200s, a machine-translation dataset, averages of per-layer
per-iteration metrics) reports per expert a mean of 128 routed tokens per step with standard
deviation 164.1 (coefficient of variation 1.282), and per device (8 experts each) a mean of
1024 with imbalance ratio (max - mean) / mean 1.564 without EPLB and 0.109 with EPLB over 32
redundant experts (288 slots, 9 per device). sigma is chosen so that this model reproduces the
per-expert coefficient of variation at that point (T = 4096 tokens); the two per-device
ratios are then predictions (tests/test_routing_skew.py checks them: the model gives 1.41
against the measured 1.56, within 15%, and 0.058 against 0.109, EPLB given perfect
statistics).

EPLB (DeepSeek's Expert Parallelism Load Balancer, vLLM ``--num-redundant-experts``,
SGLang ``--ep-num-redundant-experts``): ``redundant`` extra expert slots hold replicas of the
hottest experts (each replica taking an equal share of its expert's tokens; the next replica
goes to the expert with the most load per replica), and the slots are packed onto the
devices heaviest first, each to the least-loaded device with a free slot, all from the
popularity (the statistics EPLB is given: perfect ones, an upper bound on its effect).
``redundant=None`` is no EPLB: experts sit in their natural order, E / ep per device.

The table is Monte Carlo with a fixed seed (``SEED``), so the same deployment gives the same
bits; each layer is one popularity draw and one pass's counts (the same draws for every T,
so the curve is smooth; a running minimum keeps it from rising, as the true curve cannot).
Deterministic, cached per (experts, top_k, ep, redundant, sigma).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

#: the table's points: passes of 1, 2, 4, ... 2^(SKEW_POINTS - 1) routed tokens (the pass
#: rule interpolates linearly in tokens between them and holds the last beyond it)
SKEW_POINTS = 21
#: log-normal sigma of expert popularity (fitted: module docstring, ``fit_sigma``)
POPULARITY_SIGMA = 1.0
#: the measurement it is fitted to: experts, top_k, tokens per step, per-expert std / mean
TRTLLM_TABLE1 = {"experts": 256, "top_k": 8, "ep": 32, "tokens": 4096,
                 "expert_cv": 164.1 / 128, "rank_imbalance": 1.564,
                 "rank_imbalance_eplb": 0.109, "redundant": 32}
SEED = 20250505  # fixed: the table is a property of the deployment, not of the run's seed
LAYERS = 256  # Monte Carlo draws (layers) per table


def tokens_at() -> np.ndarray:
    """The tokens of the table's points: 1, 2, 4, ... 2^(SKEW_POINTS - 1)."""
    return 2.0 ** np.arange(SKEW_POINTS)


def inclusion(w: np.ndarray, top_k: int) -> np.ndarray:
    """Per-expert chance that a token picks it: top_k w / sum(w) per row, capped at 1 with
    the excess spread over the uncapped experts in proportion (rows sum to top_k)."""
    pi = top_k * w / w.sum(axis=1, keepdims=True)
    for _ in range(w.shape[1]):
        over = pi > 1.0
        if not over.any():
            break
        free = ~over & (pi < 1.0)
        excess = np.where(over, pi - 1.0, 0.0).sum(axis=1, keepdims=True)
        room = np.where(free, pi, 0.0).sum(axis=1, keepdims=True)
        pi = np.where(over, 1.0, np.where(free, pi * (1.0 + excess / np.maximum(room, 1e-300)),
                                          pi))
    return np.minimum(pi, 1.0)


def placement(pi: np.ndarray, ep: int, redundant: int | None) -> np.ndarray:
    """(layers, ep, experts): the share of each expert's tokens each device serves. Without
    EPLB (``redundant`` None) experts in order, E / ep per device; with it, ``redundant``
    replicas of the hottest experts and the slots packed by load (module docstring)."""
    layers, experts = pi.shape
    share = np.zeros((layers, ep, experts))
    if redundant is None:
        per = experts // ep
        for r in range(ep):
            share[:, r, r * per:(r + 1) * per] = 1.0
        return share
    slots = (experts + redundant) // ep
    for li in range(layers):
        load = pi[li]
        reps = np.ones(experts, dtype=np.int64)
        for _ in range(redundant):  # the next replica to the most load per replica
            reps[int(np.argmax(load / reps))] += 1
        items = np.repeat(np.arange(experts), reps)
        weights = load[items] / reps[items]
        rank_load = np.zeros(ep)
        free = np.full(ep, slots)
        for j in np.argsort(-weights, kind="stable"):  # heaviest first, least-loaded device
            r = int(np.argmin(np.where(free > 0, rank_load, np.inf)))
            rank_load[r] += weights[j]
            free[r] -= 1
            share[li, r, items[j]] += 1.0 / reps[items[j]]
    return share


def _draws(experts: int, top_k: int, sigma: float, layers: int):
    rng = np.random.default_rng(SEED)
    w = np.exp(sigma * rng.standard_normal((layers, experts)))
    return rng, inclusion(w, top_k)


def counts(rng, pi: np.ndarray, tokens: float) -> np.ndarray:
    """Routed tokens per expert of one pass of ``tokens`` tokens, per layer."""
    return rng.binomial(int(tokens), pi).astype(np.float64)


@lru_cache(maxsize=64)
def _table(experts: int, top_k: int, ep: int, redundant: int | None, sigma: float,
           layers: int) -> tuple[float, ...]:
    rng, pi = _draws(experts, top_k, sigma, layers)
    share = placement(pi, ep, redundant)
    out = []
    for t in tokens_at():
        c = counts(rng, pi, t)
        busiest = np.einsum("lre,le->lr", share, c).max(axis=1)
        out.append(max(float(busiest.mean()) / (t * top_k / ep), 1.0))
    # the true curve never rises: the busiest device's share of T + T' tokens averages its
    # shares of the two parts, and a max of averages is at most the average of maxes;
    # the running minimum removes the Monte Carlo's ~0.1% wobble at large T
    return tuple(float(x) for x in np.minimum.accumulate(out))


def skew_table(experts: int, top_k: int, ep: int, redundant: int | None = None,
               sigma: float = POPULARITY_SIGMA, layers: int = LAYERS) -> np.ndarray:
    """The busiest device's expected routed tokens / the mean (T top_k / ep) at each of the
    table's points (``tokens_at``), at least 1: the sampled ``hardware.routing_skew``."""
    return np.array(_table(int(experts), int(top_k), int(ep),
                           None if redundant is None else int(redundant), float(sigma),
                           int(layers)))


def expert_cv(experts: int, top_k: int, tokens: float, sigma: float,
              layers: int = LAYERS) -> float:
    """The per-expert standard deviation / mean of routed tokens in a pass of ``tokens``,
    averaged over layers (the statistic ``POPULARITY_SIGMA`` is fitted to)."""
    rng, pi = _draws(experts, top_k, sigma, layers)
    c = counts(rng, pi, tokens)
    return float((c.std(axis=1) / c.mean(axis=1)).mean())


def rank_imbalance(experts: int, top_k: int, ep: int, tokens: float,
                   redundant: int | None = None, sigma: float = POPULARITY_SIGMA,
                   layers: int = LAYERS) -> float:
    """(max - mean) / mean of the devices' routed tokens in a pass of ``tokens``, averaged
    over layers: TensorRT-LLM's imbalance ratio, the prediction checked against Table 1."""
    rng, pi = _draws(experts, top_k, sigma, layers)
    c = counts(rng, pi, tokens)
    loads = np.einsum("lre,le->lr", placement(pi, ep, redundant), c)
    return float((loads.max(axis=1) / loads.mean(axis=1) - 1.0).mean())


def fit_sigma(target: dict = TRTLLM_TABLE1) -> float:
    """The sigma whose per-expert coefficient of variation matches ``target``'s (bisection;
    ``POPULARITY_SIGMA`` is its result, rounded)."""
    lo, hi = 0.0, 3.0
    for _ in range(30):
        mid = (lo + hi) / 2
        if expert_cv(target["experts"], target["top_k"], target["tokens"], mid) < \
                target["expert_cv"]:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
