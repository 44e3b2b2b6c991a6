"""Batch schedulers: who joins the running batch, and how one iteration's tokens are split.

A scheduler admits queued requests (KV permitting) and shapes step 0 of the next segment:
decode rows get their draft length + 1 tokens, prefill rows chunks of what the token budget
has left, and KV grows to fit (recompute-style preemption of the newest rows otherwise).
With a prefix cache (``worker.cache``, simulator/kv/prefix_cache.py) admission matches the
request's prefix first (a hit is not prefilled and its pages are shared, not counted in
the request's blocks), and growth demotes or frees unlocked cached pages before it
preempts anyone (by recompute or by swap, as the scenario says).
"""

from __future__ import annotations

import numpy as np

from specsim.simulator.cluster import requests as rq
from specsim.simulator.execution.loop_rules import admission_blocks
from specsim.simulator.execution.segment import StepShape
from specsim.simulator.registry import BATCH_SCHEDULERS


class BatchScheduler:
    """Interface. ``admit`` moves requests from the queue into the batch; ``shape`` plans step 0.

    Optional, with defaults that change nothing: ``refuse`` (a request arriving at a
    worker is turned away, and why) and ``preempt_order`` (whose KV goes first when blocks
    run out: the eviction policy's order). A
    scheduler registered with a params model (``BATCH_SCHEDULERS.register(name,
    params=Model)``) is built with ``params`` (validated) and ``slo`` (the scenario's)
    as keywords (``make_scheduler``)."""

    name = "batch scheduler"

    def __init__(self, max_batch: int, token_budget: int, chunked_prefill: bool,
                 max_queue: int | None) -> None:
        self.max_batch, self.token_budget = max_batch, token_budget
        self.chunked_prefill, self.max_queue = chunked_prefill, max_queue

    def admit(self, worker) -> None:
        raise NotImplementedError

    def refuse(self, worker, rid: int) -> str | None:
        """Why request ``rid``, routed to ``worker``, is rejected at arrival (a reason for
        ``rejected_by_reason``), or None: it joins the queue (the run's ``max_queue`` is
        checked after this)."""
        return None

    def preempt_order(self, rows: np.ndarray, table, eviction) -> np.ndarray:
        """Running rows in the order their KV is freed when blocks run out."""
        return eviction.order(rows, table)

    def reserve(self, worker, rid: int, alone: bool) -> bool:
        """Reserve request ``rid``'s KV for its admission: its prompt's blocks (+1, + its
        state's, ``BlockAllocator.state_blocks``), or,
        with a prefix cache, its match and the rest (``alone``: nothing else is in or
        joining the batch, so swapped KV that pins what it needs is dropped). False when it
        does not fit now."""
        cache = worker.cache
        if cache is not None:
            while not cache.admit(rid):
                if not (alone and cache.swapped):
                    return False
                cache.drop_swaps()  # swapped KV pins what an empty batch needs
            return True
        t, kv = worker.table, worker.kv
        need = admission_blocks(int(t.prefill_target[rid]), kv.block_size, kv.state_blocks)
        if need > kv.free:
            return False
        kv.allocate(need)
        t.blocks[rid] = need
        return True

    def shape(self, worker, policy, drafter) -> StepShape:
        raise NotImplementedError

    def blocked(self, worker) -> bool:
        """True when no queued request can join before a running one finishes, so a
        multi-step segment may run through arrivals up to its first finish and stay exact.
        The default, False, is always safe (the segment ends at the next arrival)."""
        return False


@BATCH_SCHEDULERS.register("fcfs")
class FcfsScheduler(BatchScheduler):
    """First come, first served: admit in arrival order while KV and the batch have room."""

    name = "fcfs"

    def admit(self, worker) -> None:
        t = worker.table
        room = self.max_batch - len(worker.run)
        if room <= 0 or not worker.waiting:
            return
        new = []
        while worker.waiting and room > 0:
            rid = worker.waiting[0]
            if not self.reserve(worker, rid, not len(worker.run) and not new):
                break
            worker.waiting.popleft()
            t.status[rid] = rq.RUNNING
            new.append(rid)
            room -= 1
        if new:
            worker.run = np.concatenate([worker.run, np.array(new, np.int64)])

    def blocked(self, worker) -> bool:
        """Nothing joins a full batch until a row finishes (or is preempted, which ends the
        segment). A head too big for the free KV is not enough: free KV changes step by
        step as rejected drafts' blocks return, so the head may fit again (and churn)."""
        return bool(worker.waiting) and len(worker.run) >= self.max_batch

    def shape(self, worker, policy, drafter) -> StepShape:
        """Step 0: the kernel's fcfs rules (``kernel_jit._shape``, the fused path's own),
        given what only Python knows: the policy's k and, for a lookup whose chance
        depends on the row, each decode row's match chance; KV that does not fit is made
        (cached pages freed, else rows preempted) and the step shaped again."""
        t, kv = worker.table, worker.kv
        cache = worker.cache
        while True:
            run = worker.run
            dec = run[t.kv_len[run] >= t.prefill_target[run]]
            k = policy.choose(dec, t)
            if drafter.per_class:  # drafters per class: each row's own drafter's k
                k = np.minimum(k, drafter.k_cap(dec))
            p = (drafter.match_probability(dec, t)
                 if not drafter.proposes_always and len(dec) else None)
            fits, kk, ch, prefilling, completes, uniform, chunking, grow = (
                worker.kernel.shape0(run, k, p, policy.fixed_k, self.token_budget,
                                     self.chunked_prefill, kv.free))
            if not fits and (cache is None or not cache.make_room(grow)):
                worker.preempt(grow - kv.free)
                continue
            return StepShape(run, kk, ch, prefilling, completes, bool(uniform),
                             bool(chunking), self.token_budget)


def make_scheduler(sc) -> BatchScheduler:
    """The scenario's batch scheduler for one worker: its class from the registry, its
    params (checked by the model it registered with) and the run's SLOs where it takes
    params."""
    s = sc.scheduler
    cls = BATCH_SCHEDULERS.get(s.policy)
    args = (s.max_batch, s.token_budget, s.chunked_prefill, s.max_queue)
    model = BATCH_SCHEDULERS.info(s.policy).params
    if model is None:
        return cls(*args)
    return cls(*args, params=model.model_validate(s.params or {}), slo=sc.slo)
