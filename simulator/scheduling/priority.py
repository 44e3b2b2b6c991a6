"""SLO-tier schedulers: strict priority by tier (``priority``) and earliest deadline first
(``edf``), with admission per tier.

Both keep the worker's queue as it is (arrival order, preempted rows first: what the
overload watch and the snapshots read) and only choose whom to admit from it, in their own
order, stopping at the first request whose KV does not fit (no request overtakes a better
one waiting for blocks). Step 0's shape is FCFS's (``FcfsScheduler.shape``, inherited), so
the kernel computes it compiled as for fcfs (``Kernel.fused``); only admission and the
preemption order differ, both in Python as fcfs's are.

- ``priority``: tiers in the order ``tiers`` gives (highest first; a tier not listed comes
  after them), first come first served within a tier. This is vLLM's
  ``--scheduling-policy priority`` (``vllm/v1/core/sched/request_queue.py``: waiting
  requests by (priority, arrival); ``scheduler.py``: under KV pressure the running request
  of the lowest priority, latest arrival among equals, is preempted first), with the SLO
  tier as the priority. ``aging_s`` (optional) bounds starvation: a request queued that
  long ranks with the highest tier (by its arrival among them).
- ``edf``: earliest deadline first, deadline = arrival + the request's TTFT target
  (``slo.tiers.<tier>.ttft_s``, else ``slo.ttft_s``; none: no deadline, served last,
  first come first served). A request that has its first token already (preempted, or
  handed over by a PD prefill pool) is past its deadline and goes first, in queue order,
  as under FCFS.

Admission per tier (both, all optional; ``Scheduler.refuse``, at arrival): ``queue_limit``
(tier -> how many of that tier one worker may queue) and ``shed_at_risk`` (when the oldest
queued request of the first tier of ``tiers`` has waited this share of its TTFT target,
arrivals of every other tier are refused), so overload is absorbed by the low tiers.
Preemption under KV pressure takes the lowest tier first (within a tier, the eviction
policy's order).
"""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
from pydantic import BeforeValidator, Field

from specsim import values
from specsim.errors import ScenarioError
from specsim.messages import fail, fail_key
from specsim.simulator.cluster import requests as rq
from specsim.simulator.metrics.collector import slo_targets
from specsim.simulator.registry import BATCH_SCHEDULERS
from specsim.simulator.scenario.fields import OptFloat, Section, show
from specsim.simulator.scheduling.batching import FcfsScheduler

#: the traces' tier names, highest first (the prefix cache's eviction weights them the same
#: way: kv/prefix_cache.PRIORITY); a scenario names its own with ``tiers``
DEFAULT_TIERS = ("premium", "standard", "batch")


def _tier_list(value: Any) -> Any:
    if not isinstance(value, list | tuple) or not value or not all(
            isinstance(x, str) and x for x in value) or len(set(value)) != len(value):
        raise fail(f"expected a list of distinct SLO tier names, highest priority first, "
                   f"got {show(value)}")
    return list(value)


def _limits(value: Any) -> Any:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise fail(f"expected a mapping of SLO tier name to a queue limit, got {show(value)}")
    out = {}
    for k, v in value.items():
        try:
            out[str(k)] = values.number(v, integer=True, lo=0)
        except values.ValueRuleError as exc:
            raise fail_key(str(k), str(exc)) from None
    return out


_tier_list.kind = "list"
_limits.kind = "mapping"


class TierParams(Section):
    """``scheduler.params`` of ``priority`` and ``edf``."""

    tiers: Annotated[list[str], BeforeValidator(_tier_list)] = Field(
        default_factory=lambda: list(DEFAULT_TIERS),
        description="SLO tiers, highest priority first (priority: the admission order; "
                    "both: the first is the one shed_at_risk protects)")
    aging_s: OptFloat(0.0, exclusive_lo=True) = Field(
        None, description="priority: a request queued this long ranks with the highest "
                          "tier (none: strict priority, the low tiers may starve)")
    queue_limit: Annotated[dict[str, int], BeforeValidator(_limits)] = Field(
        default_factory=dict, description="SLO tier -> requests of that tier one worker "
                                          "may queue; more are rejected")
    shed_at_risk: OptFloat(0.0, exclusive_lo=True) = Field(
        None, description="when the oldest queued request of the first tier has waited "
                          "this share of its TTFT target, arrivals of other tiers are "
                          "rejected (none: never)")


class _TierScheduler(FcfsScheduler):
    """What ``priority`` and ``edf`` share: tiers per request, admission in ``order``,
    refusal per tier, preemption lowest tier first."""

    def __init__(self, max_batch: int, token_budget: int, chunked_prefill: bool,
                 max_queue: int | None, *, params: TierParams, slo: Any) -> None:
        super().__init__(max_batch, token_budget, chunked_prefill, max_queue)
        self.p, self.slo = params, slo
        if params.shed_at_risk is not None and not np.isfinite(
                self._ttft(np.array([params.tiers[0]]))).all():
            raise ScenarioError(f"scheduler.params.shed_at_risk: needs a TTFT target for tier "
                                f"{params.tiers[0]!r} (slo.tiers.{params.tiers[0]}.ttft_s "
                                f"or slo.ttft_s)")
        self._table = None

    def _ttft(self, tiers: np.ndarray) -> np.ndarray:
        """The TTFT target of each of ``tiers`` (inf: none), by the metrics' rule."""
        slo = self.slo
        ttft, _ = slo_targets(tiers, slo.ttft_s, None, slo.tiers)
        return np.broadcast_to(np.inf if ttft is None else ttft, len(tiers)).astype(np.float64)

    # ------------------------------------------------------------ per request, once
    def _bind(self, table) -> None:
        """Each request's tier rank (0 = the first of ``tiers``) and TTFT target, computed
        once per table (arrivals may still be written: closed-loop clients)."""
        names, inv = np.unique(np.asarray(table.slo_tier, dtype=str), return_inverse=True)
        order = {t: i for i, t in enumerate(self.p.tiers)}
        rank = np.array([order.get(str(n), len(order)) for n in names], np.int64)
        self.rank, self.ttft = rank[inv], self._ttft(names)[inv]
        self._names = names
        self._tier = inv
        self._table = table

    def _ready(self, table) -> None:
        if self._table is not table:
            self._bind(table)

    # ------------------------------------------------------------ the interface
    def order(self, worker, queued: np.ndarray) -> np.ndarray:
        """Positions in ``queued`` (the worker's queue) in admission order."""
        raise NotImplementedError

    def admit(self, worker) -> None:
        room = self.max_batch - len(worker.run)
        if room <= 0 or not worker.waiting:
            return
        self._ready(worker.table)
        t = worker.table
        queued = np.fromiter(worker.waiting, np.int64, len(worker.waiting))
        new = []
        for i in self.order(worker, queued).tolist():
            if room <= 0:
                break
            rid = int(queued[i])
            if not self.reserve(worker, rid, not len(worker.run) and not new):
                break
            t.status[rid] = rq.RUNNING
            new.append(rid)
            room -= 1
        if new:
            if len(new) == len(queued):
                worker.waiting.clear()
            else:  # the rest keep their queue order
                keep = ~np.isin(queued, new)
                worker.waiting.clear()
                worker.waiting.extend(queued[keep].tolist())
            worker.run = np.concatenate([worker.run, np.array(new, np.int64)])

    def refuse(self, worker, rid: int) -> str | None:
        p = self.p
        if not p.queue_limit and p.shed_at_risk is None:
            return None
        self._ready(worker.table)
        tier = str(self._names[self._tier[rid]])
        limit = p.queue_limit.get(tier)
        if limit is not None and worker.waiting:
            queued = np.fromiter(worker.waiting, np.int64, len(worker.waiting))
            if int(np.count_nonzero(self._tier[queued] == self._tier[rid])) >= limit:
                return f"tier queue full ({tier})"
        if p.shed_at_risk is not None and self.rank[rid] != 0 and worker.waiting:
            queued = np.fromiter(worker.waiting, np.int64, len(worker.waiting))
            t = worker.table
            # the first tier's requests still waiting for their first token
            top = queued[(self.rank[queued] == 0) & np.isnan(t.first_token[queued])]
            if len(top):
                waited = worker.env.now - float(t.arrival[top].min())
                if waited >= p.shed_at_risk * float(self.ttft[top[0]]):
                    return f"shed ({p.tiers[0]} at risk)"
        return None

    def preempt_order(self, rows: np.ndarray, table, eviction) -> np.ndarray:
        """The eviction policy's order, lowest tier first (a stable sort keeps it within a
        tier)."""
        self._ready(table)
        victims = eviction.order(rows, table)
        return victims[np.argsort(-self.rank[victims], kind="stable")]


@BATCH_SCHEDULERS.register("priority", params=TierParams)
class PriorityScheduler(_TierScheduler):
    """Strict priority by SLO tier, first come first served within a tier; aged requests
    rank with the highest tier."""

    name = "priority"

    def order(self, worker, queued: np.ndarray) -> np.ndarray:
        rank = self.rank[queued]
        if self.p.aging_s is not None:
            waited = worker.env.now - worker.table.arrival[queued]
            rank = np.where(waited >= self.p.aging_s, 0, rank)
        return np.argsort(rank, kind="stable")  # ties: queue order


@BATCH_SCHEDULERS.register("edf", params=TierParams)
class EdfScheduler(_TierScheduler):
    """Earliest deadline first: arrival + the request's TTFT target."""

    name = "edf"

    def order(self, worker, queued: np.ndarray) -> np.ndarray:
        t = worker.table
        deadline = t.arrival[queued] + self.ttft[queued]
        # a preempted request has had its first token: its deadline is behind it
        deadline = np.where(np.isfinite(t.first_token[queued]), -np.inf, deadline)
        return np.argsort(deadline, kind="stable")  # ties (and no deadline): queue order
