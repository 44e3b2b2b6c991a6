"""Drafter switching per class: each workload class drafts with its own drafter.

``speculation.per_class: {CLASS: {method, drafter, k, acceptance, ...}}`` gives a class its
own speculation section; the other classes use the scenario's own. Every drafter is loaded
on every worker (their weights and KV per token all take HBM), and one iteration's batch may
mix them: each drafter drafts for its rows, one after another (their passes are summed),
and each row's acceptance is its drafter's profile for its class.

Rules:
1. A class's entry is a speculation section like the scenario's own, validated as one
   (errors name ``speculation.per_class.CLASS.KEY``); it may not nest ``per_class``, draft a
   tree, or set a k above the scenario's ``speculation.k`` (the policy's range). Its
   ``policy`` keys are not used: the scenario's policy picks every row's k, capped at the
   row's drafter's k (``method: none`` or k 0: the class does not draft).
2. Prefill: a drafter that keeps its own KV (a draft model, EAGLE, MTP) prefills the prompt
   tokens of its own rows only (the step's prefill split by each drafter's rows' share).
3. Acceptance: a row's conditional alphas and per-request variation come from the acceptance
   model of its row's drafter (its ``for_class`` of the row's class).
4. Switching at run time (``speculation.switching``, ``SwitchingPolicy``): a fallback drafter
   (one more member, loaded and counted like the others) takes over a class on a worker when
   the class's acceptance estimate on its own drafter falls below ``below``, and hands it
   back when the estimate climbs to ``above`` (> ``below``: hysteresis), at most once per
   ``min_steps`` steps. The estimate is the policies' decayed count of accepted vs rejected
   draft tokens (policies.py rule 2), per (class, drafter), seeded at the drafter's profile.
5. A request keeps the drafter it was admitted with (its drafter's KV holds its prompt; a
   switch mid-request would have to prefill another drafter): a switch applies to the
   class's requests admitted after it. While a class is on the fallback, every
   ``probe_every``-th request of it admitted is still given its own drafter, so the estimate
   can climb back (as a disabled row's probes, policies.py rule 3).
6. The scenario's policy still sets k per row (capped at the row's drafter's k) and may
   shorten or stop a class's drafts; on a switch its estimate for the class restarts at the
   new drafter's prior.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from specsim.errors import ScenarioError
from specsim.simulator.speculation.drafters import Drafter
from specsim.simulator.speculation.policies import SpeculationPolicy


@dataclass
class Member:
    """One drafter of the composite and the classes that use it."""

    label: str  # "scenario" or the class name of the per_class entry
    drafter: Drafter
    k: int  # its largest draft (the cap on a row's k)
    acceptance: Any  # its AcceptanceModel
    method: str = ""  # speculation.method of its section (for logs)
    key: str = "speculation"  # where its section is in the scenario (for errors)


class PerClassDrafter(Drafter):
    """Interface-compatible drafter that prices each row with its class's member."""

    name = "per_class"
    per_class = True  # rows draft with their class's member: k_cap, row_alpha, bind
    kind = None  # no kind of its own: each member is priced by the kernel (cost_steps)
    state_dependent_match = True  # the match chance depends on the row's drafter

    def __init__(self, members: list[Member], member_of_class: dict[str, int]) -> None:
        self.members = members
        self.member_of_class = member_of_class  # class name -> member index (else 0)
        self.proposes_always = all(m.drafter.proposes_always for m in members)
        self.prefills = any(m.drafter.prefills for m in members)
        self.match_rate = min(m.drafter.match_rate for m in members)
        self._row_member = np.zeros(0, np.int64)  # per request (set by ``attach``)
        self._bound = np.zeros(0, np.int64)  # member of each row of the batch being priced
        self._pf_share = np.zeros(len(members))
        self.fallback: int | None = None  # the switching fallback's member (rule 4)
        # per member: classes x positions conditional alphas, and per request the scale
        # (``request_tables``), so a row accepts as the drafter it was given (rule 3)
        self._alpha = np.zeros((len(members), 1, 64))
        self._scale = np.ones((len(members), 0))
        self.pinned = np.zeros(0, bool)  # per request: its drafter was chosen (rule 5)

    # ---- which member a row belongs to
    def attach(self, classes: np.ndarray) -> None:
        """Each request's member, from its workload class (rule 3)."""
        self._row_member = np.array([self.member_of_class.get(str(c), 0) for c in classes],
                                    dtype=np.int64)

    def member_rows(self, rows: np.ndarray) -> np.ndarray:
        return self._row_member[rows]

    def pin(self, rows: np.ndarray, member: np.ndarray) -> None:
        """Give requests their drafter for the rest of their life (rule 5)."""
        self._row_member[rows] = member
        self.pinned[rows] = True

    def row_alpha(self, rows: np.ndarray, cls: np.ndarray, kmax: int) -> np.ndarray:
        """The rows' conditional alphas (B x kmax), each from its drafter's profile for its
        class, times its request's scale under that drafter (rule 3); the kernel's
        ``alpha_table[cls] * alpha_scale`` for a single drafter."""
        mem = self._row_member[rows]
        return np.minimum(self._alpha[mem, cls, :kmax] * self._scale[mem, rows][:, None], 1.0)

    def bind(self, rows: np.ndarray, prefill_tokens: np.ndarray | None) -> None:
        """The batch the next ``cost_steps`` prices, and each member's share of its prefill
        tokens (rule 2)."""
        self._bound = self._row_member[rows]
        share = np.zeros(len(self.members))
        if prefill_tokens is not None:
            total = float(prefill_tokens.sum())
            if total > 0:
                share = np.bincount(self._bound, weights=prefill_tokens.astype(np.float64),
                                    minlength=len(self.members)) / total
        self._pf_share = share

    # ---- the Drafter interface
    def verify_width(self, k):
        return k + 1  # chains only (rule 1)

    def k_for_width(self, width: int) -> int:
        return max(width - 1, 0)

    def k_cap(self, rows: np.ndarray) -> np.ndarray:
        """The largest k each row's drafter drafts (rule 1)."""
        caps = np.array([m.k for m in self.members], np.int64)
        return caps[self._row_member[rows]]

    def match_probability(self, rows, table):
        out = np.ones(len(rows))
        who = self._row_member[rows]
        for i, m in enumerate(self.members):
            sel = who == i
            if sel.any() and not m.drafter.proposes_always:
                out[sel] = m.drafter.match_probability(rows[sel], table)
        return out

    def cost_steps(self, k, ctx, pf_tokens, pf_qc):
        """Each member prices its own rows (the kernel's rules for its kind, its
        ``cost_steps``), and the members' costs add up (rule 2: its share of the prefill)."""
        S = k.shape[0]
        t, f, b = np.zeros(S), np.zeros(S), np.zeros(S)
        for i, m in enumerate(self.members):
            mine = (self._bound == i)[None, :]
            km = np.where(mine, k, 0)
            share = self._pf_share[i] if m.drafter.prefills else 0.0
            if not km.any() and share == 0.0:
                continue
            dt, df, db = m.drafter.cost_steps(km, np.where(mine, ctx, 0.0), pf_tokens * share,
                                              pf_qc * share)
            t, f, b = t + dt, f + df, b + db
        return t, f, b

    def request_tables(self, ids: np.ndarray, classes: np.ndarray, temperatures: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
        """Per request a class index and alpha multiplier, the per-class conditional
        acceptance table and the class order (rule 3): each class's from its drafter's
        acceptance model, as ``AcceptanceModel.request_scale`` / ``survival_table`` give them
        for a single drafter. Also attaches each request to its member and keeps every
        member's tables (a request may be given another drafter, rules 4-5)."""
        classes = np.asarray(classes, dtype=object)
        temps = np.asarray(temperatures)
        self.attach(classes)
        self.pinned = np.zeros(len(ids), bool)
        names = sorted(set(classes.tolist()))
        idx = np.searchsorted(np.array(names, dtype=object), classes).astype(np.int64)
        M = len(self.members)
        alpha = np.zeros((M, len(names), 64))  # (members, classes, positions)
        scale = np.ones((M, len(ids)))
        for c, n in enumerate(names):
            sel = classes == n
            own = self.member_of_class.get(n, 0)
            for i in {own} | ({self.fallback} if self.fallback is not None else set()):
                acc = self.members[i].acceptance
                try:
                    row = acc.for_class(n).position_alpha
                except ScenarioError as exc:  # name the section the profile came from
                    where = self.members[i].key
                    raise ScenarioError(str(exc).replace("speculation.acceptance",
                                                         f"{where}.acceptance", 1)) from None
                alpha[i, c, :len(row)] = row[:64]
                scale[i, sel] = acc.request_scale(ids[sel], classes[sel], temps[sel])[1]
        self._alpha, self._scale = alpha, scale
        own = np.array([self.member_of_class.get(n, 0) for n in names], np.int64)
        return (idx, scale[own[idx], np.arange(len(ids))], alpha[own, np.arange(len(names))],
                names)

    def describe(self) -> str:
        by = {i: [c for c, j in self.member_of_class.items() if j == i]
              for i in range(len(self.members))}
        def who(i: int) -> str:
            if i == self.fallback:
                return "switching fallback"
            return ", ".join(by[i]) or "other classes"

        return "per class: " + "; ".join(
            f"{who(i)} -> {m.drafter.describe()} (k <= {m.k})"
            for i, m in enumerate(self.members))


class SwitchingPolicy(SpeculationPolicy):
    """The scenario's policy plus drafter switching per class at run time (rules 4-6).

    Wraps the policy: picks each newly admitted request's drafter from its class's current
    drafter on this worker, lets the policy pick k, and after every committed step updates
    the (class, drafter) acceptance estimates and switches classes whose own drafter's
    estimate crossed a threshold. Each switch is logged (``switches``: time, worker, class,
    drafters, estimate, why) and every iteration's reason names the classes on the fallback.
    """

    def __init__(self, inner: SpeculationPolicy, cfg: Any, drafter: PerClassDrafter) -> None:
        self.inner, self.cfg, self.drafter = inner, cfg, drafter
        self.ctx, self.k = inner.ctx, inner.k
        self.p = inner.p
        self.name = inner.name
        self.reason = inner.reason
        self.worker = None
        self.switches: list[dict[str, Any]] = []
        self._said = ""  # the last step's switches, said in the next iteration's reason

    def bind(self, worker) -> SwitchingPolicy:
        inst = SwitchingPolicy(self.inner.bind(worker), self.cfg, self.drafter)
        inst.worker = worker
        d, cfg = self.drafter, self.cfg
        names = list(self.ctx.class_names)
        unknown = [c for c in (cfg.classes or []) if c not in names]
        if unknown and names:  # (a run without requests has no classes to check)
            raise ScenarioError(f"speculation.switching.classes: {unknown[0]!r} is not a "
                                f"workload class of this run (classes: {', '.join(names)})")
        C = max(len(names), 1)
        inst.names = names
        inst.own = np.array([d.member_of_class.get(n, 0) for n in names] or [0], np.int64)
        inst.cur = inst.own.copy()  # each class's drafter for requests admitted now
        fb = int(d.fallback)
        inst.fb = fb
        allowed = set(cfg.classes) if cfg.classes else set(names)
        inst.eligible = np.array([n in allowed for n in names] or [False]) & (inst.own != fb)
        w = float(cfg.prior_weight)
        inst.succ = d._alpha[:, :C, 0] * w  # (members, classes): decayed accepted drafts
        inst.trials = np.full(inst.succ.shape, w)  # accepted + rejected
        inst.steps = 0
        inst.since = np.full(C, -10**9)  # step of each class's last switch
        inst.admitted = np.zeros(C, np.int64)  # requests admitted while on the fallback
        return inst

    def estimate(self, member: int, cls: int) -> float:
        """The class's acceptance estimate on ``member`` (policies.py rule 2)."""
        return float(self.succ[member, cls] / max(self.trials[member, cls], 1e-12))

    # ---- drafter per request (rule 5)
    def _pin_new(self, table) -> None:
        d = self.drafter
        run = self.worker.run
        new = run[~d.pinned[run]]
        if not len(new):
            return
        cls = table.cls_idx[new]
        mem = self.cur[cls].copy()
        probe_every = max(int(self.cfg.probe_every), 1)
        for i in np.flatnonzero(mem != self.own[cls]):  # admission order
            c = cls[i]
            if self.admitted[c] % probe_every == probe_every - 1:
                mem[i] = self.own[c]  # a probe on the class's own drafter
            self.admitted[c] += 1
        d.pin(new, mem)

    def choose(self, rows: np.ndarray, table) -> np.ndarray:
        self._pin_new(table)
        k = self.inner.choose(rows, table)
        on_fb = [self.names[c] for c in np.flatnonzero(self.cur != self.own)]
        fb = self.drafter.members[self.fb].method
        self.reason = self.inner.reason + (f" | {', '.join(on_fb)} on fallback {fb}"
                                           if on_fb else "") + self._said
        return k

    def observe(self, rows, k, acc, emit, dt, table) -> None:
        self.inner.observe(rows, k, acc, emit, dt, table)
        self.steps += 1
        self._said = ""
        drafted = k > 0
        if not drafted.any():
            return
        mem = self.drafter._row_member[rows[drafted]]
        cls = table.cls_idx[rows[drafted]]
        ok = acc[drafted].astype(np.float64)
        fails = (acc[drafted] < k[drafted]).astype(np.float64)
        seen = np.zeros(self.succ.shape, bool)
        seen[mem, cls] = True
        decay = float(self.cfg.decay)
        self.succ[seen] *= decay  # each estimate decays with its own observations only
        self.trials[seen] *= decay
        np.add.at(self.succ, (mem, cls), ok)
        np.add.at(self.trials, (mem, cls), ok + fails)
        self._switch(np.unique(cls))

    def _switch(self, classes: np.ndarray) -> None:
        """Rule 4: own drafter's estimate below ``below`` -> fallback; back at ``above``."""
        cfg = self.cfg
        for c in classes:
            if not self.eligible[c] or self.steps - self.since[c] < int(cfg.min_steps):
                continue
            own = int(self.own[c])
            a = self.estimate(own, c)
            if self.cur[c] == own and a < cfg.below:
                to, why = self.fb, f"acceptance {a:.3f} < {cfg.below:g}"
            elif self.cur[c] != own and a >= cfg.above:
                to, why = own, f"acceptance {a:.3f} >= {cfg.above:g} (probes)"
            else:
                continue
            m = self.drafter.members
            self.switches.append({
                "time_s": float(self.worker.env.now), "worker": int(self.worker.wid),
                "step": int(self.steps), "class": self.names[c],
                "from": m[self.cur[c]].method, "to": m[to].method,
                "acceptance": round(a, 4), "why": why})
            self._said += f" | switch {self.names[c]} to {m[to].method}: {why}"
            self.cur[c] = to
            self.since[c] = self.steps
            self.admitted[c] = 0
            self.inner.restart_class(c, self.drafter._alpha[to, c, 0])  # rule 6: new prior


@dataclass
class _Cost:
    weight_bytes_per_device: float
    kv_bytes_per_token: float


@dataclass
class _Named:
    name: str


@dataclass
class CombinedDrafterModel:
    """Every loaded drafter's weights and KV per token, as one DrafterModel to the memory
    sizing (``Deployment._kv_blocks``)."""

    model: _Named
    cost: _Cost


def combined_drafter_model(models: list) -> CombinedDrafterModel:
    return CombinedDrafterModel(
        _Named(" + ".join(m.model.name for m in models)),
        _Cost(sum(m.cost.weight_bytes_per_device for m in models),
              sum(m.cost.kv_bytes_per_token for m in models)))
