"""A worker: one tensor-parallel group running continuous batching with speculation.

One SimPy process per worker. It admits from its queue, has its batch scheduler shape the
next iteration, has the kernel plan a segment (one iteration, or many while the batch is
stable and the draft length fixed), and waits for the segment's end or a wake-up. Anything
that needs the worker's state at time t (a router choosing, an arrival joining, the end of
the run) first calls ``sync(t)``, which commits the iterations finished by then; an arrival
also cuts the segment after the iteration in progress. Keyed draws make a cut segment
exactly equal to running its steps one by one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import simpy

from specsim.simulator.cluster import requests as rq
from specsim.simulator.execution import loop_rules as rules
from specsim.simulator.execution.kernel import SPEC_ITER_COLUMNS, Kernel, Segment
from specsim.simulator.execution.ledger import (  # noqa: F401  (their older import path)
    WORK_KINDS,
    Ledger,
    split_work,
)
from specsim.simulator.execution.plugins import plugin_notes
from specsim.simulator.kv.eviction import Newest


@dataclass(frozen=True)
class WorkerSnapshot:
    """What a router may read about a worker: a copy, taken after ``sync(now)``."""

    wid: int
    queued: int
    running: int
    kv_used_blocks: int
    kv_free_blocks: int
    kv_total_blocks: int
    #: blocks the requests hold privately (with a prefix cache, used = held + cached pages)
    kv_held_blocks: int | None = None
    #: read-only prefix match (with ``kv_cache.prefix_cache``): rid -> tokens of its prompt
    #: cached on this worker, per tier (HBM first); None without a prefix cache
    prefix_hit: Callable[[int], tuple[int, ...]] | None = None

    @property
    def load(self) -> int:
        return self.queued + self.running


class Worker:
    """Owns its running batch (row indices), waiting queue, KV pool, segment and ledger."""

    def __init__(self, wid: int, env, table, scheduler, kernel: Kernel, kv, policy, drafter,
                 ledger: Ledger, metrics, *, multi_step: bool, record_iterations: bool,
                 on_finish=None, arrival_hint=None, notify_finishes: bool = False,
                 eviction=None) -> None:
        self.wid, self.env, self.table = wid, env, table
        self.scheduler, self.kernel, self.kv = scheduler, kernel, kv
        self.policy, self.drafter = policy, drafter
        self.ledger, self.metrics = ledger, metrics
        self.policy = policy.bind(self)  # adaptive policies keep per-worker state
        self.adaptive = self.policy.fixed_k is None
        # multi-step plans need draft lengths known ahead: a fixed k, and a lookup whose
        # chance of a match does not change as the request grows
        self.multi_step = (multi_step and policy.fixed_k is not None
                           and not getattr(drafter, "state_dependent_match", False))
        self.record = record_iterations
        self.on_finish = on_finish
        self.arrival_hint = arrival_hint  # when a request may next arrive here (speed only)
        self._last_dt = 0.0
        self.eviction = eviction if eviction is not None else Newest()
        self.notify_finishes = notify_finishes  # commit at each finish (closed-loop clients)
        self._resumed_at = -1.0  # when this process last planned or committed
        self._hint: float | None = None  # the next arrival foreseen when planning
        self.run = np.zeros(0, np.int64)
        self.waiting: deque[int] = deque()
        self.preemptions = 0
        self.spec_blocks_taken = 0  # KV blocks drafting rows took for draft + bonus tokens
        self.spec_blocks_freed = 0  # of them, those of rejected drafts, returned after steps
        self.drafts = self.policy.fixed_k != 0  # (k 0 always: no row drafts, both stay 0)
        # the iteration log has the speculative KV columns (a scenario that drafts)
        self.spec_columns = tuple(metrics.extra[-len(SPEC_ITER_COLUMNS):]) == SPEC_ITER_COLUMNS
        # a KV pool with a prefix cache / tiers / swap (simulator/kv/prefix_cache.py)
        self.cache = kv if hasattr(kv, "admit") else None
        # segments through prefill chunks (Kernel.plan): not with a prefix cache (its
        # inserts follow step 0's prefills) or drafters per class (rows bound per plan)
        self.chunk_segments = self.cache is None and not drafter.per_class
        self.preempt_kinds = {"recompute": 0, "swap": 0}
        self._seg_xfer = 0.0  # transfer time charged to step 0 of the current segment
        self.seg: Segment | None = None
        self._through = False  # the current segment runs through arrivals (blocked queue)
        self._wake = None  # an idle worker waits on this
        self._planned_steps = 16  # adaptive segment length (speed only, never results)
        # the scheduler's step 0 and the kernel's plan as one call, where that gives the
        # same bits (Kernel.fused says where); None: the scheduler's shape, then a plan
        self._fused = kernel.fused(self)
        # plug-ins the compiled kernel has no copy of (they run in Python): the run's notes
        self.notes = plugin_notes(self) + kernel.notes
        self.process = env.process(self.loop())

    # ------------------------------------------------------------------ what others see
    @property
    def load(self) -> int:
        return len(self.run) + len(self.waiting)

    def snapshot(self, wid: int | None = None, extra_queued: int = 0) -> WorkerSnapshot:
        """What a router reads of this worker; ``wid``: its index as the router knows it
        (default its own id), ``extra_queued``: requests on their way to it, counted queued."""
        wid = self.wid if wid is None else wid
        queued = len(self.waiting) + extra_queued
        if self.cache is None:
            return WorkerSnapshot(wid, queued, len(self.run), self.kv.used, self.kv.free,
                                  self.kv.total)
        c = self.cache
        return WorkerSnapshot(wid, queued, len(self.run), c.used, c.free, c.total, c.held,
                              c.peek if c.prefix else None)

    def submit(self, rid: int) -> None:
        """A request joins the queue; the iteration in progress finishes first."""
        t = self.table
        t.status[rid] = rq.QUEUED
        t.worker[rid] = self.wid
        self.waiting.append(rid)
        seg = self.seg
        if seg is not None and not self._through:  # a blocked queue's segment runs on
            now = self.env.now
            # iterations already under way finish first; one starting exactly now is planned
            # again with this request, unless this worker began it just now itself. (That
            # step is seg.done, begun when the worker resumed: compared by the resume time,
            # not by seg.start, which the kernel's cumulative sum and SimPy's clock may
            # round an ulp apart, so a request sent at a finish joined a step early)
            keep = rules.submit_keep(seg.steps_started_before(now), seg.done, seg.m,
                                     self._resumed_at, now)
            if keep < seg.m:
                seg.m = keep
                if self.env.active_process is not self.process:
                    self.process.interrupt("segment cut")
        else:
            self._poke(self._wake)

    @staticmethod
    def _poke(event) -> None:
        if event is not None and not event.triggered:
            event.succeed()

    def sync(self, now: float, strict: bool = False) -> None:
        """Commit every planned iteration that has ended by ``now``."""
        seg = self.seg
        if seg is not None:
            n = seg.steps_ending_by(now, strict)
            if n > seg.done:
                self._commit(n)

    # ------------------------------------------------------------------ the loop
    def loop(self):
        env = self.env
        while True:
            self.scheduler.admit(self)
            if not len(self.run):
                self._wake = env.event()
                yield self._wake
                self._wake = None
                continue
            seg = None
            if self._fused is not None:  # shape + plan compiled as one call
                steps, through = self._ahead(env.now)
                fused = self._fused(env.now, steps)
                if fused is not None:  # (else KV is short: the scheduler preempts below)
                    seg, multi = fused
                    through = through and multi
            if seg is None:
                seg, steps, through = self.python_plan(env.now)
            seg.reason = self.metrics.reason_code(self.policy.reason)
            if through:  # after the first finish a queued request may join
                fin = np.flatnonzero(seg.finishing[:seg.m].any(axis=1))
                if len(fin):
                    seg.m = int(fin[0]) + 1
            elif steps > 1 and self._hint is not None:
                # end where the foreseen arrival would cut it anyway: no interrupt needed
                seg.m = rules.hint_cut(seg.steps_started_before(self._hint), seg.m)
            self.seg = seg
            self._through = through
            self._resumed_at = env.now
            fin_steps = (np.flatnonzero(seg.finishing[:seg.m].any(axis=1))
                         if self.notify_finishes else None)
            while seg.done < seg.m:
                upto = seg.m
                if fin_steps is not None:  # stop at the next finish: its client is waiting
                    nxt = fin_steps[fin_steps >= seg.done]
                    if len(nxt):
                        upto = min(upto, int(nxt[0]) + 1)
                try:
                    yield env.timeout(seg.end[upto - 1] - env.now)
                except simpy.Interrupt:  # an arrival shortened the segment: wait for its new end
                    continue
                self._commit(upto)
                self._resumed_at = env.now
            self.seg = None
            self._last_dt = float(seg.dt[seg.m - 1])
            self._planned_steps = rules.next_planned(seg.m)

    def python_plan(self, now: float, packed: bool = False):
        """The segment planned from the Python scheduler's step 0 (where no fused call runs,
        or where it found the step's KV short: the scheduler then preempts), as both loops
        plan it (this one and the compiled solo loop's, ``cluster/solo.py``): returns (the
        Segment, or with ``packed`` the kernel's packed arrays, ``Kernel.plan``; only where
        there is no prefix cache), steps, and whether they run through arrivals."""
        shape = self.scheduler.shape(self, self.policy, self.drafter)
        steps, through = 1, False
        if self.multi_step and (shape.uniform or (shape.chunking and self.chunk_segments)):
            steps, through = self._ahead(now)
        if self.cache is not None:  # what steps 1.. may hold: their evictions succeed
            self.kernel.kv_limit, self.kernel.kv_limit_kept = self.cache.segment_limits()
        seg = self.kernel.plan(shape, now, steps, self.policy.fixed_k, packed=packed)
        if self.cache is not None:
            self._charge_transfer(seg)
        return seg, steps, through

    def _ahead(self, now: float) -> tuple[int, bool]:
        """Steps to plan where step 0 allows many, and whether they run through arrivals
        (``loop_rules.segment_steps``): with an empty queue until the arrival the router
        foresees for this worker (``self._hint``), with a full batch blocking the queue up
        to its first finish, else one."""
        queue_empty = not self.waiting
        hint = None
        if self.multi_step and queue_empty:
            hint = self.arrival_hint(self.wid) if self.arrival_hint is not None else None
            self._hint = hint
        blocked = self.multi_step and not queue_empty and self.scheduler.blocked(self)
        return rules.segment_steps(self.multi_step, queue_empty, blocked, hint is not None,
                                   hint if hint is not None else 0.0, now,
                                   self._last_dt, self._planned_steps)

    def _charge_transfer(self, seg: Segment) -> None:
        """KV moved between tiers for this iteration (promotions, swaps) delays its step 0:
        by the transfer time, or, with layer-wise loading, by what the compute does not
        hide."""
        x = self.cache.take_pending()
        self._seg_xfer = x
        if x <= 0:
            return
        add = max(x - float(seg.dt[0]), 0.0) if self.cache.cfg.overlap else x
        if add > 0:
            seg.dt[0] += add
            seg.end += add
            seg.start[1:] += add

    def _commit(self, upto: int) -> None:
        seg = self.seg
        first = seg.done
        finished = self.kernel.commit(seg, upto, self.kv, self.ledger, self.metrics, self.wid,
                                      self.record)
        if seg.spec_free is not None and self.drafts:
            self.spec_blocks_freed += int(seg.spec_free[first:upto].sum())
            self.spec_blocks_taken += int(seg.spec_alloc[first:upto].sum())
        extra = []  # the iteration log's columns after ITER_COLUMNS, in Metrics.extra order
        if self.cache is not None:  # evictions and inserts step by step, as if run so
            self.cache.commit_steps(seg, first, upto)
            if self.record and upto > first:
                xfer = np.zeros(upto - first)
                if first == 0:
                    xfer[0] = self._seg_xfer
                extra += [*self.cache.tier_use(), xfer]
        if self.spec_columns and self.record and upto > first:
            extra += [seg.spec_alloc[first:upto], seg.spec_free[first:upto]]
        if extra:
            self.metrics.fill_extra(upto - first, *extra)
        if self.adaptive:  # what each committed step accepted, for the policy's estimates
            for s in range(first, upto):
                self.policy.observe(seg.rows, seg.k[s], seg.acc[s], seg.emit[s],
                                    float(seg.dt[s]), self.table)
        if len(finished):
            t = self.table
            t.status[finished] = rq.DONE
            self.run = self.run[t.status[self.run] != rq.DONE]
            if self.on_finish is not None:
                self.on_finish(finished)

    def preempt(self, blocks_short: int) -> None:
        """Recompute-style preemption: free victims' KV (the scheduler's order: the eviction
        policy's, or a priority scheduler's lowest tier first) until
        ``blocks_short`` blocks are free, and requeue them at the front, in batch order."""
        t, kv = self.table, self.kv
        freed = 0
        victims = []
        for rid in self.scheduler.preempt_order(self.run, t, self.eviction).tolist():
            if freed >= blocks_short:
                break
            freed += int(t.blocks[rid])
            victims.append(rid)
        gone = np.isin(self.run, victims)
        for rid in self.run[gone][::-1].tolist():  # the batch's order kept at the queue front
            if self.cache is not None:  # swap out, or cache its pages for the recompute
                kind = self.cache.preempt(rid)
                self.preempt_kinds[kind] += 1
                if kind == "recompute":
                    t.kv_len[rid] = 0
                    t.prefill_target[rid] = t.prompt[rid] + t.generated[rid]
            else:
                kv.release(int(t.blocks[rid]))
                t.blocks[rid] = 0
                t.kv_len[rid] = 0
                t.prefill_target[rid] = t.prompt[rid] + t.generated[rid]
            t.preemptions[rid] += 1
            t.status[rid] = rq.QUEUED
            self.waiting.appendleft(rid)
        self.preemptions += len(victims)
        self.run = self.run[~gone]
