"""A fleet of one worker fed by an open-loop trace, run by the compiled solo loop.

``execution/solo_jit.py`` runs the worker's arrivals, admission and steps in one compiled
call and reproduces the SimPy run event by event (the same bits; its docstring says how).
This module decides where it applies (``applies``), hands it the worker's state, acts where
the loop asks Python to (the scheduler's preemption, room in the iteration log, progress,
the overload watch's stop), and writes the state back so that everything after the run
(the summary, the invariants, requests.csv) reads the worker as the SimPy loop leaves it.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np
import simpy

from specsim.simulator.cluster.arrivals import OpenLoop
from specsim.simulator.cluster.overload import Overloaded, OverloadWatch
from specsim.simulator.execution import solo_jit as sj
from specsim.simulator.execution.kernel import _quiet
from specsim.simulator.execution.numpy_order import pure
from specsim.simulator.kv.blocks import BlockAllocator
from specsim.simulator.metrics.iteration_log import ITER_COLUMNS
from specsim.simulator.scheduling.batching import FcfsScheduler

#: ITL gaps held in the compiled loop before they go to the histogram
ITL_BUFFER = 1 << 16
#: arrivals between two progress updates (as ``Simulation.arrive``'s)
PROGRESS_EVERY = 256


#: tests compare the two ways of running the same scenario by turning this off
ENABLED = True


def applies(sim: Any) -> bool:
    """The compiled solo loop runs this simulation: one worker (no PD link), an open-loop
    trace, the fused shape + plan (``Kernel.fused``: fcfs, a static k, the built-in
    pricing, a plain KV pool), fcfs's own admission, the built-in ledger and watch."""
    if (not ENABLED or len(sim.workers) != 1 or sim.handoffs
            or type(sim.arrivals) is not OpenLoop):
        return False
    w = sim.workers[0]
    return (w._fused is not None and type(w.scheduler) is FcfsScheduler
            and type(w.kv) is BlockAllocator and w.cache is None and not w.adaptive
            and w.kernel._builtin_ledger(w.ledger)
            and (sim.watch is None or type(sim.watch) is OverloadWatch)
            and len(sim.metrics.extra) == (2 if w.spec_columns else 0))


class SoloRun:
    """One run of the compiled solo loop over ``sim`` (``applies(sim)`` holds)."""

    def __init__(self, sim: Any) -> None:
        self.sim = sim
        w = self.w = sim.workers[0]
        t, k = sim.table, w.kernel
        n = t.n
        self.fn = sj._run if k.compiled else pure(sj._run)
        self.si = np.zeros(sj.SI_LEN, np.int64)
        self.sf = np.zeros(sj.SF_LEN)
        self.si[sj.PLANNED] = w._planned_steps
        self.si[sj.PROGRESS_AT] = 0
        self.sf[sj.LAST_DT] = w._last_dt
        self.sf[sj.CLOCK] = 0.0
        self.run = np.zeros(max(int(w.scheduler.max_batch), 1), np.int64)
        self.q = np.zeros(2 * n + 1, np.int64)
        self.si[sj.QH] = self.si[sj.QT] = n  # room in front for preempted requests
        self.itl = np.empty(ITL_BUFFER)
        why = sim._static_reject  # (int8: 0 routed, loop_rules.TOO_LONG or TOO_BIG)
        # the arrival time of the first eligible request at or after each index (the hint)
        nxt = np.full(n + 1, np.inf)
        elig = sim._eligible  # (Simulation._plan_arrivals: the requests that are routed)
        if len(elig):
            idx = np.searchsorted(elig, np.arange(n + 1))
            ok = idx < len(elig)
            nxt[ok] = t.arrival[elig[idx[ok]]]
        self.why, self.elig_next = why, nxt
        self.route_text = sim.fleet.entry.only_worker_reason
        self.route_val = t.route_reasons.get(self.route_text, len(t.route_reasons))
        watch = sim.watch
        self.watch = watch
        # the overload watch's ring of looks (loop_rules.record_look): the loop writes it
        self.looks = watch.looks if watch is not None else np.zeros((2, 4))
        if watch is not None:
            self.sf[sj.LOOK_AT] = watch.next_at
            self.si[sj.NLOOK] = watch.nlook
        reasons = sim.metrics.reasons  # coded at the first commit, as the SimPy loop does
        self.reason_text = w.policy.reason
        self.reason = reasons.get(self.reason_text, len(reasons))
        self.pstatic = k.fused_static(w)
        self.cstatic = k.commit_args(w.ledger)
        self.extra0 = len(ITER_COLUMNS)
        empty_i3 = np.zeros((5, 0, 0), np.int64)
        self.empty = (np.zeros(0, np.int64), 0, 0, empty_i3, np.zeros((0, 0), np.bool_),
                      np.zeros((4, 0), np.int64), np.zeros((11, 0)), np.zeros(0, np.bool_),
                      False)

    # ------------------------------------------------------------------ the loop
    def go(self) -> None:
        sim, w, si, sf = self.sim, self.w, self.si, self.sf
        t, m = sim.table, sim.metrics
        pend, seg, steps, through, hint = sj.PEND_NONE, self.empty, 0, False, np.nan
        watch = self.watch
        horizon = sim.horizon
        streaming = m._log is not None  # (the log is attached after the simulation is built)
        while True:
            buf = m._buf if w.record else _NO_BUF
            with _quiet(w.kernel.compiled):
                code, *out = self.fn(
                    si, sf, self.run, self.q, t.status, t.worker, t.route_code,
                    self.route_val, t.blocks, t.prefill_target, t.arrival, self.why,
                    self.elig_next, t.n, int(w.scheduler.max_batch),
                    -1 if sim.max_queue is None else int(sim.max_queue), int(w.kv.total),
                    int(w.kv.block_size), int(w.kv.state_blocks), w.wid, bool(w.multi_step), bool(w.chunk_segments),
                    horizon is not None, float(horizon) if horizon is not None else 0.0,
                    watch is not None, float(watch.window_s) if watch else 0.0,
                    int(watch.windows) if watch else 1, float(watch.max_wait_s) if watch else 0.0,
                    self.looks, bool(w.record), buf, len(buf), streaming,
                    int(m._chunk) if streaming else 0, self.extra0, bool(w.spec_columns),
                    bool(w.drafts), self.itl, self.reason,
                    PROGRESS_EVERY if sim.progress is not None else 0, self.pstatic,
                    self.cstatic, pend, *seg, through, steps, hint)
            code = int(code)
            if code == sj.DONE_RUN:
                break
            if code == sj.NEED_ROOM:  # the histogram takes the gaps; the log makes room
                self._drain_itl()
                if si[sj.COMMITS]:  # rows carry the policy's reason: coded before a flush
                    m.reason_code(self.reason_text)
                if w.record:
                    m._n = int(si[sj.ROW])
                    m.reserve_rows(int(out[2]))
                    si[sj.ROW] = m._n
                pend, seg, steps = sj.PEND_COMMIT, tuple(out[:9]), int(out[9])
                continue
            if code == sj.PROGRESS:
                sim.progress(float(sf[sj.NOW]), int(si[sj.INEXT]))
                pend, seg = sj.PEND_NONE, self.empty
                continue
            if code == sj.NEED_PLAN:
                seg, steps, through, hint = self._python_plan()
                pend = sj.PEND_PLANNED
                continue
            if code == sj.OVERLOAD:  # the run stops at the arrival the watch looked at
                self._finish(float(sf[sj.CLOCK]))
                raise Overloaded(watch.info(float(sf[sj.CLOCK]), float(sf[sj.OVER_WAIT])))
            if code == sj.KV_ERROR:
                raise RuntimeError(f"KV allocator: the solo loop's commit left "
                                   f"{int(si[sj.KV_USED])} blocks used of {w.kv.total}")
            raise RuntimeError(f"solo loop: unknown return {code}")
        # SimPy's clock ends at the horizon (run(until=...)), else at the last event
        self._finish(float(horizon) if horizon is not None else float(sf[sj.LAST_EVENT]))

    def _python_plan(self):
        """The step's KV does not fit: the Python scheduler shapes step 0 (freeing KV by
        preemption, ``Worker.preempt``) and the kernel plans (``Worker.python_plan``, as
        ``Worker.loop`` does)."""
        sim, w, si, sf = self.sim, self.w, self.si, self.sf
        self._to_worker()
        sim.next_rid = int(si[sj.INEXT])
        w._last_dt, w._planned_steps = float(sf[sj.LAST_DT]), int(si[sj.PLANNED])
        (rows, pre0, chunking, S, m, Ia, Bo, Iv, F), steps, through = w.python_plan(
            float(sf[sj.NOW]), packed=True)
        hint = w._hint if (steps > 1 and not through and w._hint is not None) else np.nan
        self._from_worker()
        seg = (np.asarray(rows, np.int64), int(S), int(m), Ia, Bo, Iv, F,
               np.asarray(pre0, np.bool_), bool(chunking and steps > 1))
        return seg, int(steps), bool(through), float(hint)

    # ------------------------------------------------------------------ state back and forth
    def _to_worker(self) -> None:
        """The Python worker's view of the loop's state (its batch, queue and KV pool)."""
        w, si = self.w, self.si
        w.run = self.run[:si[sj.NRUN]].copy()
        w.waiting = deque(self.q[si[sj.QH]:si[sj.QT]].tolist())
        w.kv.used, w.kv.peak = int(si[sj.KV_USED]), int(si[sj.KV_PEAK])

    def _from_worker(self) -> None:
        w, si = self.w, self.si
        nrun = len(w.run)
        self.run[:nrun] = w.run
        si[sj.NRUN] = nrun
        waiting = list(w.waiting)
        si[sj.QH] = si[sj.QT] - len(waiting)
        self.q[si[sj.QH]:si[sj.QT]] = waiting
        si[sj.KV_USED], si[sj.KV_PEAK] = w.kv.used, w.kv.peak

    def _drain_itl(self) -> None:
        n = int(self.si[sj.ITLN])
        if n:
            self.sim.metrics.add_itl(self.itl[:n].copy())
            self.si[sj.ITLN] = 0

    def _finish(self, end: float) -> None:
        """Everything the SimPy loop would have left: the worker, its pool, the ledger, the
        metrics, the kernel's counters, the simulation's rejections, and the clock at
        ``end`` (the horizon, the overload stop, or the last event)."""
        sim, w, si, sf = self.sim, self.w, self.si, self.sf
        self._drain_itl()
        self._to_worker()
        if w.record:
            sim.metrics._n = int(si[sj.ROW])
        w.ledger.take(int(si[sj.NITER]))  # (its sums: added commit by commit, _account)
        w.spec_blocks_taken += int(si[sj.SPEC_TAKEN])
        w.spec_blocks_freed += int(si[sj.SPEC_FREED])
        w._last_dt, w._planned_steps = float(sf[sj.LAST_DT]), int(si[sj.PLANNED])
        k = w.kernel
        if si[sj.COMMITS]:
            sim.metrics.reason_code(self.reason_text)
            k.reason_iterations[self.reason] = (k.reason_iterations.get(self.reason, 0)
                                                + int(si[sj.NITER]))
            if k.last_reason is not None and k.last_reason != self.reason:
                k.reason_changes += 1
            k.last_reason = self.reason
        if si[sj.ROUTED]:
            sim.table.reason_code(self.route_text)
        for key, n in ((sj.TOO_LONG, si[sj.REJ_CONTEXT]), (sj.TOO_BIG, si[sj.REJ_KV])):
            if n:
                why = sim.STATIC_REASONS[key]
                sim.rejected_reasons[why] = sim.rejected_reasons.get(why, 0) + int(n)
        if si[sj.REJ_QUEUE]:
            sim.rejected_reasons["queue full"] = (sim.rejected_reasons.get("queue full", 0)
                                                  + int(si[sj.REJ_QUEUE]))
        sim.next_rid = int(si[sj.INEXT])
        if self.watch is not None:
            self.watch.next_at = float(sf[sj.LOOK_AT])
            self.watch.nlook = int(si[sj.NLOOK])
        sim.env = simpy.Environment(initial_time=end)
        w.env = sim.env
        w.seg = None


_NO_BUF = np.zeros((1, len(ITER_COLUMNS)))
