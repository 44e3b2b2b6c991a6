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
   model of its class's drafter (its ``for_class`` of the row's class).
4. The composite decides nothing over time: a policy (``rules``, ``feedback``, ...) still sets
   k per row and may switch a class off; the drafter a class uses is fixed for the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from specsim.simulator.speculation.drafters import Drafter


@dataclass
class Member:
    """One drafter of the composite and the classes that use it."""

    label: str  # "scenario" or the class name of the per_class entry
    drafter: Drafter
    k: int  # its largest draft (the cap on a row's k)
    acceptance: Any  # its AcceptanceModel


class PerClassDrafter(Drafter):
    """Interface-compatible drafter that prices each row with its class's member."""

    name = "per_class"
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

    # ---- which member a row belongs to
    def attach(self, classes: np.ndarray) -> None:
        """Each request's member, from its workload class (rule 3)."""
        self._row_member = np.array([self.member_of_class.get(str(c), 0) for c in classes],
                                    dtype=np.int64)

    def member_rows(self, rows: np.ndarray) -> np.ndarray:
        return self._row_member[rows]

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
        for a single drafter. Also attaches each request to its member."""
        classes = np.asarray(classes, dtype=object)
        self.attach(classes)
        names = sorted(set(classes.tolist()))
        idx = np.searchsorted(np.array(names, dtype=object), classes).astype(np.int64)
        scale = np.ones(len(ids))
        rows = []
        for n in names:
            acc = self.members[self.member_of_class.get(n, 0)].acceptance
            sel = classes == n
            scale[sel] = acc.request_scale(ids[sel], classes[sel],
                                           np.asarray(temperatures)[sel])[1]
            rows.append(acc.for_class(n).position_alpha)
        return idx, scale, np.stack(rows), names

    def describe(self) -> str:
        by = {i: [c for c, j in self.member_of_class.items() if j == i]
              for i in range(len(self.members))}
        return "per class: " + "; ".join(
            f"{', '.join(by[i]) or 'other classes'} -> {m.drafter.describe()} (k <= {m.k})"
            for i, m in enumerate(self.members))


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
