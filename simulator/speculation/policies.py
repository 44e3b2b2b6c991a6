"""Speculation policies: how many tokens each decode row drafts this iteration.

A policy registers by name (``speculation.policy`` picks it), reads its settings from
``speculation.policy_params`` (each declares ``PARAMS``: name -> default, and checks them),
and declares ``fixed_k`` when its k never changes, which lets the kernel plan many
iterations at once. Adaptive policies are bound to one worker (``bind``), see what each
committed step accepted (``observe``), and give a reason with every decision, which goes
into iterations.csv (``policy_reason``). The numbered rules:

1. A policy never drafts more than the scenario's ``k`` (the drafter and the KV budget are
   sized for it) nor past a request's end (the scheduler caps that).
2. Acceptance estimates are decayed counts of accepted vs rejected draft tokens (the
   i.i.d. maximum-likelihood alpha, successes / trials), seeded with ``prior_weight``
   pseudo-trials at the prior (the acceptance profile's alpha, or ``prior``).
3. A disabled row or class still drafts one token every ``probe_every`` steps, so the
   estimate can recover when acceptance comes back.
4. The guardrail (any adaptive policy, ``guardrail: true``) compares the measured time per
   delivered token with the priced time per token of the same batch without drafting,
   and turns drafting off for ``cooldown`` steps when speculation has cost more than
   ``guardrail_margin`` for ``patience`` steps in a row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specsim.errors import ScenarioError
from specsim.simulator.registry import SPECULATION_POLICIES
from specsim.simulator.speculation.acceptance import expected_tokens_per_step


@dataclass
class PolicyContext:
    """What a policy may read besides the batch: the run's classes and their prior
    acceptance, the executor (to price a candidate k), and the worker it serves."""

    k: int
    params: dict[str, Any]
    class_names: list[str] = field(default_factory=list)
    class_alpha: np.ndarray = field(default_factory=lambda: np.zeros(1))  # prior per class
    executor: Any = None
    ridge_tokens: float = float("inf")


class SpeculationPolicy:
    """Interface: the draft length of each decode row this iteration.

    ``choose(rows, table)`` returns one k per row; ``reason`` says why (iterations.csv).
    A policy whose k never changes declares it as ``fixed_k``.
    """

    name = "policy"
    fixed_k: int | None = None
    PARAMS: dict[str, Any] = {}

    def __init__(self, ctx: PolicyContext) -> None:
        self.ctx, self.k = ctx, ctx.k
        self.p = self._params(ctx.params)
        self.reason = self.name

    def _params(self, given: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(given) - set(self.PARAMS))
        if unknown:
            known = ", ".join(self.PARAMS) or "none"
            raise ScenarioError(f"speculation.policy_params.{unknown[0]}: not a setting of "
                                f"policy {self.name!r} (its settings: {known})")
        out = dict(self.PARAMS)
        for key, value in given.items():
            default = self.PARAMS[key]
            if isinstance(default, bool):
                ok = isinstance(value, bool)
            elif isinstance(default, int | float):
                ok = isinstance(value, int | float) and not isinstance(value, bool) \
                    and np.isfinite(value) and value >= 0
            else:
                ok = True
            if not ok:
                raise ScenarioError(f"speculation.policy_params.{key}: expected "
                                    f"{type(default).__name__} like {default!r}, got {value!r}")
            out[key] = value
        return out

    def bind(self, worker) -> SpeculationPolicy:
        """The instance that serves ``worker`` (stateless policies share one)."""
        return self

    def choose(self, rows: np.ndarray, table) -> np.ndarray:
        raise NotImplementedError

    def observe(self, rows: np.ndarray, k: np.ndarray, acc: np.ndarray, emit: np.ndarray,
                dt: float, table) -> None:
        """One committed step: the rows, their drafted and accepted tokens, the tokens each
        delivered, the step's seconds. Only called for policies without ``fixed_k``."""

    def restart_class(self, c: int, alpha: float) -> None:
        """Class ``c`` now drafts with another drafter whose prior acceptance is ``alpha``
        (per_class.py rule 6): a policy that keeps estimates per class restarts that one
        there; the others have nothing to restart."""


@SPECULATION_POLICIES.register("static")
class StaticK(SpeculationPolicy):
    """The scenario's k for every row, every iteration."""

    name = "static"

    def __init__(self, ctx: PolicyContext) -> None:
        # takes no settings: another policy's policy_params may stay in the file (switching
        # with --set speculation.policy=static keeps them) and are not used
        super().__init__(PolicyContext(ctx.k, {}, ctx.class_names, ctx.class_alpha,
                                       ctx.executor, ctx.ridge_tokens))
        self.ctx = ctx
        self.fixed_k = self.k
        self.reason = f"static k={self.k}"

    def choose(self, rows: np.ndarray, table) -> np.ndarray:
        return np.full(len(rows), self.k, dtype=np.int64)


@SPECULATION_POLICIES.register("off")
class Off(StaticK):
    """No drafting (also what ``method: none`` or ``k: 0`` mean)."""

    name = "off"

    def __init__(self, ctx: PolicyContext | None = None) -> None:
        super().__init__(PolicyContext(0, {}))
        self.reason = "off"


@SPECULATION_POLICIES.register("tier_yield")
class TierYield(SpeculationPolicy):
    """Speculation yields to the tight-TPOT SLO tiers under load: while ``batch_at_least``
    or more rows decode, rows of a tier not in ``keep`` draft ``yield_k`` tokens (0: none)
    and the kept tiers the scenario's k; below it every row drafts k. A step's verify tokens
    are shared work: each loose row that drafts k adds k tokens to every row's step time,
    so the kept rows' TPOT (step time / tokens per step) falls when loose rows stop
    drafting, and the loose rows' rises (docs/user-guide.md "SLO tiers" measures both)."""

    name = "tier_yield"
    PARAMS = {"keep": ["premium"], "batch_at_least": 64, "yield_k": 0}

    def __init__(self, ctx: PolicyContext) -> None:
        super().__init__(ctx)
        keep = self.p["keep"]
        if not isinstance(keep, list) or not keep or not all(
                isinstance(x, str) and x for x in keep):
            raise ScenarioError(f"speculation.policy_params.keep: expected a list of SLO "
                                f"tier names, got {keep!r}")
        for key in ("batch_at_least", "yield_k"):
            v = self.p[key]
            if not isinstance(v, int) or isinstance(v, bool):
                raise ScenarioError(f"speculation.policy_params.{key}: expected an integer "
                                    f"at least 0, got {v!r}")
        if self.p["yield_k"] > self.k:
            raise ScenarioError(f"speculation.policy_params.yield_k: expected an integer in "
                                f"[0, speculation.k = {self.k}], got {self.p['yield_k']!r}")
        self._table = self._kept = None
        tiers = ", ".join(keep)
        self._why = (f"tier_yield: >= {self.p['batch_at_least']} rows, tiers other than "
                     f"{tiers} draft k={self.p['yield_k']}",
                     f"tier_yield: < {self.p['batch_at_least']} rows, k={self.k}")

    def choose(self, rows: np.ndarray, table) -> np.ndarray:
        if len(rows) < self.p["batch_at_least"]:
            self.reason = self._why[1]
            return np.full(len(rows), self.k, dtype=np.int64)
        if self._table is not table:  # each request's tier, once per table
            self._table = table
            self._kept = np.isin(np.asarray(table.slo_tier, dtype=str), self.p["keep"])
        self.reason = self._why[0]
        return np.where(self._kept[rows], self.k, int(self.p["yield_k"])).astype(np.int64)


# ------------------------------------------------------------------ adaptive policies

_COMMON = {"scope": "class", "prior": "profile", "prior_weight": 20.0, "decay": 0.98,
           "probe_every": 16, "guardrail": False, "guardrail_margin": 0.05, "patience": 8,
           "cooldown": 64}


class AdaptivePolicy(SpeculationPolicy):
    """Acceptance estimates per class (or per worker), probing and the guardrail."""

    PARAMS = dict(_COMMON)

    def __init__(self, ctx: PolicyContext) -> None:
        super().__init__(ctx)
        if self.p["scope"] not in ("class", "worker"):
            raise ScenarioError(f"speculation.policy_params.scope: expected class or worker, "
                                f"got {self.p['scope']!r}")
        prior = self.p["prior"]
        if prior == "profile":
            self.prior = np.asarray(ctx.class_alpha, np.float64)
        elif isinstance(prior, int | float) and not isinstance(prior, bool) and 0 <= prior <= 1:
            self.prior = np.full(max(len(ctx.class_alpha), 1), float(prior))
        else:
            raise ScenarioError(f"speculation.policy_params.prior: expected 'profile' or an "
                                f"alpha in [0, 1], got {prior!r}")
        if not 0 < self.p["decay"] <= 1:
            raise ScenarioError(f"speculation.policy_params.decay: expected a value in (0, 1], "
                                f"got {self.p['decay']!r}")
        self.worker = None

    def bind(self, worker) -> AdaptivePolicy:
        inst = type(self)(self.ctx)  # the context now knows the run's classes and pricing
        inst.worker = worker
        worker_scope = self.p["scope"] == "worker"
        n = 1 if worker_scope else max(len(inst.prior), 1)
        prior = inst.prior.mean(keepdims=True) if worker_scope else inst.prior
        w = float(self.p["prior_weight"])
        inst.succ = prior[:n] * w
        inst.trials = np.full(n, w)
        inst.steps = 0
        inst.bad_run = 0
        inst.off_until = -1
        return inst

    def restart_class(self, c: int, alpha: float) -> None:
        if self.p["scope"] == "class":  # per-worker estimates do not follow one class
            w = float(self.p["prior_weight"])
            self.succ[c] = alpha * w
            self.trials[c] = w

    # --- estimates
    def _key(self, rows: np.ndarray, table) -> np.ndarray:
        if self.p["scope"] == "worker":
            return np.zeros(len(rows), np.int64)
        return table.cls_idx[rows]

    def alpha(self, rows: np.ndarray, table) -> np.ndarray:
        """Each row's estimated per-token acceptance (rule 2)."""
        key = self._key(rows, table)
        return self.succ[key] / np.maximum(self.trials[key], 1e-12)

    def observe(self, rows, k, acc, emit, dt, table) -> None:
        self.steps += 1
        drafted = k > 0
        if drafted.any():
            key = self._key(rows[drafted], table)
            ok = acc[drafted].astype(np.float64)
            fails = (acc[drafted] < k[drafted]).astype(np.float64)
            self.succ *= self.p["decay"]
            self.trials *= self.p["decay"]
            np.add.at(self.succ, key, ok)
            np.add.at(self.trials, key, ok + fails)
        if self.p["guardrail"] and drafted.any():
            self._guard(rows, k, emit, dt)

    def _guard(self, rows, k, emit, dt) -> None:
        """Rule 4: priced no-draft time per token vs the measured time per token."""
        ex, t = self.ctx.executor, self.worker.table
        ctx = t.kv_len[rows].astype(np.float64)[None, :]
        n = float(len(rows))
        z = np.zeros((1, len(rows)), np.int64)
        off = ex.price(z, ctx, np.array([n]), np.array([float(ctx.sum() + n)]),
                       np.array([float(ctx.sum())]), np.array([n]), np.zeros(1), np.zeros(1),
                       np.array([n]), np.zeros(1))[0][0]
        measured = dt / max(float(emit.sum()) / n, 1e-12)
        if measured > off * (1 + self.p["guardrail_margin"]):
            self.bad_run += 1
        else:
            self.bad_run = 0
        if self.bad_run >= self.p["patience"]:
            self.off_until = self.steps + int(self.p["cooldown"])
            self.bad_run = 0

    def choose(self, rows: np.ndarray, table) -> np.ndarray:
        if not len(rows):
            self.reason = "no decoding rows"
            return np.zeros(0, np.int64)
        if self.off_until > self.steps:
            probe = self.steps % max(int(self.p["probe_every"]), 1) == 0
            self.reason = "guardrail: speculation slower than none" + (", probe" if probe else "")
            return np.full(len(rows), 1 if probe else 0, np.int64)
        k, reason = self.decide(rows, table)
        k = np.minimum(np.asarray(k, np.int64), self.k)  # rule 1
        self.reason = reason
        return k

    def _probe(self, k: np.ndarray) -> np.ndarray:
        """Rule 3: a disabled row drafts one token every ``probe_every`` steps."""
        if self.steps % max(int(self.p["probe_every"]), 1) == 0:
            return np.where(k == 0, 1, k)
        return k

    def decide(self, rows: np.ndarray, table) -> tuple[np.ndarray, str]:
        raise NotImplementedError


@SPECULATION_POLICIES.register("feedback")
class Feedback(AdaptivePolicy):
    """Draft while the next token is likely enough to be accepted: per row, the largest
    k <= max with alpha^k >= ``min_reach`` (P(a draft at position k is reached and
    accepted)); none below ``disable_below``."""

    name = "feedback"
    PARAMS = {**_COMMON, "min_reach": 0.3, "disable_below": 0.3}

    def decide(self, rows, table):
        a = np.clip(self.alpha(rows, table), 1e-9, 1 - 1e-9)
        k = np.floor(np.log(self.p["min_reach"]) / np.log(a)).astype(np.int64)
        k = np.where(a < self.p["disable_below"], 0, np.clip(k, 0, self.k))
        k = self._probe(k)
        return k, f"feedback: k {int(k.min()) if len(k) else 0}-{int(k.max()) if len(k) else 0}"


@SPECULATION_POLICIES.register("load_aware")
class LoadAware(AdaptivePolicy):
    """Shrink k as the verify tokens near the compute-bound region (``ridge_share`` x the
    cost model's ridge point) or KV use passes ``kv_high``; static otherwise."""

    name = "load_aware"
    PARAMS = {**_COMMON, "ridge_share": 1.0, "kv_high": 0.9, "k_at_kv_high": 1}

    def decide(self, rows, table):
        n = max(len(rows), 1)
        cap = self.ctx.ridge_tokens * self.p["ridge_share"]
        k = int(np.clip(np.floor(cap / n) - 1, 0, self.k)) if np.isfinite(cap) else self.k
        why = f"load: batch near the compute-bound region -> k {k}" if k < self.k else \
            f"load: below the compute-bound region -> k {k}"
        kv = self.worker.kv
        if kv.total and kv.used / kv.total >= self.p["kv_high"]:
            k = min(k, int(self.p["k_at_kv_high"]))
            why = f"load: KV use >= {self.p['kv_high']:.0%} -> k {k}"
        return np.full(len(rows), k, np.int64), why


@SPECULATION_POLICIES.register("goodput")
class Goodput(AdaptivePolicy):
    """The k (0..max, one for the batch) with the most expected tokens per second: the
    estimated alphas give E[tokens | k] per row, the executor prices the step."""

    name = "goodput"

    def decide(self, rows, table):
        n = len(rows)
        a = np.clip(self.alpha(rows, table), 0.0, 1.0)
        t = self.worker.table
        ctx = t.kv_len[rows].astype(np.float64)
        ks = np.arange(self.k + 1)
        kk = np.repeat(ks[:, None], n, axis=1)  # (K+1, n)
        cx = np.broadcast_to(ctx, kk.shape)
        q = self.worker.drafter.verify_width(kk).astype(np.float64)
        tokens = q.sum(axis=1)
        qc = (q * cx + q * (q + 1) / 2).sum(axis=1)
        dt = self.ctx.executor.price(kk, cx, tokens, qc, cx.sum(axis=1), tokens,
                                     np.zeros(len(ks)), np.zeros(len(ks)),
                                     np.full(len(ks), float(n)), np.zeros(len(ks)))[0]
        gain = np.array([sum(expected_tokens_per_step(float(x), int(k)) for x in a)
                         for k in ks]) / dt
        best = int(np.argmax(gain))
        return np.full(n, best, np.int64), f"goodput: k {best}"


@SPECULATION_POLICIES.register("rules")
class Rules(AdaptivePolicy):
    """Ordered rules, first match per row wins; each ``{when: {...}, k: n}``. Conditions:
    ``class`` (a name or a list), ``acceptance_at_least`` / ``acceptance_below`` (the
    row's estimated alpha), ``kv_use_at_least`` (share of the worker's KV blocks),
    ``batch_at_least`` (decoding rows), ``temperature_above``. A rule without ``when``
    matches every row; a row no rule matches does not draft."""

    name = "rules"
    PARAMS = {**_COMMON, "rules": []}
    CONDITIONS = ("class", "acceptance_at_least", "acceptance_below", "kv_use_at_least",
                  "batch_at_least", "temperature_above")

    def __init__(self, ctx: PolicyContext) -> None:
        super().__init__(ctx)
        rules = self.p["rules"]
        if not isinstance(rules, list) or not rules:
            raise ScenarioError("speculation.policy_params.rules: expected a non-empty list "
                                "of {when: {...}, k: n}")
        self.rules = []
        for i, r in enumerate(rules):
            where = f"speculation.policy_params.rules[{i}]"
            if not isinstance(r, dict) or set(r) - {"when", "k", "name"} or "k" not in r:
                raise ScenarioError(f"{where}: expected a mapping with k and optionally when "
                                    f"and name, got {r!r}")
            k = r["k"]
            if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= ctx.k:
                raise ScenarioError(f"{where}.k: expected an integer in [0, speculation.k = "
                                    f"{ctx.k}], got {k!r}")
            when = r.get("when") or {}
            if not isinstance(when, dict):
                raise ScenarioError(f"{where}.when: expected a mapping, got {when!r}")
            for c, v in when.items():
                if c not in self.CONDITIONS:
                    raise ScenarioError(f"{where}.when.{c}: unknown condition (known: "
                                        f"{', '.join(self.CONDITIONS)})")
                if c == "class":
                    names = [v] if isinstance(v, str) else v
                    if not isinstance(names, list) or not all(isinstance(x, str) for x in names):
                        raise ScenarioError(f"{where}.when.class: expected a class name or a "
                                            f"list of names, got {v!r}")
                elif not isinstance(v, int | float) or isinstance(v, bool):
                    raise ScenarioError(f"{where}.when.{c}: expected a number, got {v!r}")
            self.rules.append((str(r.get("name", f"rule {i + 1}")), when, k))

    def decide(self, rows, table):
        n = len(rows)
        k = np.zeros(n, np.int64)
        open_ = np.ones(n, bool)
        a = self.alpha(rows, table)
        kv = self.worker.kv
        kv_use = kv.used / kv.total if kv.total else 0.0
        names = np.array(self.ctx.class_names + ["?"], object)
        cls = names[np.minimum(table.cls_idx[rows], len(names) - 1)]
        hits = []
        for label, when, kr in self.rules:
            m = open_.copy()
            for c, v in when.items():
                if c == "class":
                    m &= np.isin(cls, [v] if isinstance(v, str) else v)
                elif c == "acceptance_at_least":
                    m &= a >= v
                elif c == "acceptance_below":
                    m &= a < v
                elif c == "kv_use_at_least":
                    m &= kv_use >= v
                elif c == "batch_at_least":
                    m &= n >= v
                elif c == "temperature_above":
                    m &= table.temperature[rows] > v
            if m.any():
                k[m] = kr
                open_ &= ~m
                hits.append(f"{label} (k {kr})")
        k = self._probe(k)
        return k, "rules: " + (" + ".join(hits) or "none matched (k 0)")


def make_policy(policy: str, method: str, k: int, ctx: PolicyContext | None = None
                ) -> SpeculationPolicy:
    """The scenario's policy (``off`` when nothing is drafted)."""
    if method == "none" or k == 0:
        return Off()
    ctx = ctx if ctx is not None else PolicyContext(k, {})
    ctx.k = k
    return SPECULATION_POLICIES.get(policy)(ctx)
