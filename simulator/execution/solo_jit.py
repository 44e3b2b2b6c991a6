"""A worker alone, compiled: its arrivals, admission and step loop in one call (issue 22).

A fleet of one worker fed by an open-loop trace needs no router and nothing from Python
between two steps, yet the SimPy loop (``cluster/worker.py``) spends ~70 us of Python per
segment around the kernel's two compiled calls. ``_run`` is that loop compiled: it calls the
same ``_shape_plan_priced`` and ``_commit`` and reproduces the SimPy run event by event, so
the results are the same bits:

1. At a boundary (``now``) the fcfs scheduler admits queued requests while the batch and
   the KV blocks have room (``FcfsScheduler.admit``); an empty batch waits for the next
   arrival (requests arriving at that same instant come with it).
2. It plans a segment as ``Worker.loop`` does (``Worker._ahead``: up to the next eligible
   arrival while the queue is empty, up to the first finish while a full batch blocks the
   queue, one step otherwise; the same lengths, so the same float sums).
3. Arrivals during the segment are processed in order at their SimPy clock (the arrival
   process's ``now + (arrival - now)``): rejected (too long, a full queue) or queued, each
   cutting the segment after the steps already under way (``Worker.submit``), and the
   overload watch's look (``OverloadWatch.on_arrival``: its queue, its head's wait, the
   completions committed so far). An arrival at the very instant the worker resumes comes
   first when its timeout was scheduled no later than the worker's.
4. The segment is committed at ``now + (end - now)`` (the worker's timeout), with the
   ledger's sums (``_commit`` adds them to the ledger's own, as for the SimPy worker), the
   KV pool's held blocks, the ITL gaps and the iteration log's rows (``Kernel.commit`` and
   ``Worker._commit``); finished rows leave the batch.

It returns to Python (``cluster/solo.py``) when Python must act: the step's KV does not fit
(the scheduler preempts, then hands the planned segment back), the iteration log or the ITL
buffer needs room, a progress update, the overload watch fires, or the run is over.
"""

from __future__ import annotations

import numpy as np

from specsim.simulator.execution import loop_rules as rules
from specsim.simulator.execution.kernel_jit import (
    F_BYTES,
    F_DBYTES,
    F_DFLOPS,
    F_DRAFT,
    F_DT,
    F_END,
    F_FLOPS,
    F_PF,
    F_START,
    F_TOKENS,
    F_VERIFY,
    LEDGER_SUMS,
    _commit,
    _shape_plan_priced,
)
from specsim.simulator.execution.loop_rules import (
    DONE,
    QUEUED,
    REJECTED,
    RUNNING,
    TOO_BIG,
    TOO_LONG,
)
from specsim.simulator.execution.numpy_order import jit

# the worker loop's rules (loop_rules.py), compiled as written there; the SimPy worker runs
# the same source as Python
_segment_steps = jit(rules.segment_steps)
_next_planned = jit(rules.next_planned)
_hint_cut = jit(rules.hint_cut)
_submit_keep = jit(rules.submit_keep)
_admission_blocks = jit(rules.admission_blocks)
_commit_held = jit(rules.commit_held)
_log_flush = jit(rules.log_flush)
_look_due = jit(rules.look_due)
_record_look = jit(rules.record_look)
_overloaded = jit(rules.overloaded)

# the integer state ``si``
(NRUN, QH, QT, KV_USED, KV_PEAK, ROW, ITLN, INEXT, PLANNED, NITER, SPEC_TAKEN, SPEC_FREED,
 NDONE, NLOOK, REJ_CONTEXT, REJ_KV, REJ_QUEUE, ROUTED, PROGRESS_AT, COMMITS, SI_LEN) = range(21)
# the float state ``sf``
(NOW, LAST_DT, CLOCK, CLOCK_PREV, LAST_EVENT, LOOK_AT, OVER_WAIT, SF_LEN) = range(8)

# what ``_run`` returns for
(DONE_RUN, NEED_PLAN, NEED_ROOM, PROGRESS, OVERLOAD, KV_ERROR) = range(6)
# what it is handed: nothing pending, a segment Python planned, a segment to commit
(PEND_NONE, PEND_PLANNED, PEND_COMMIT) = range(3)


@jit
def _below(a, m, t):
    """How many of the first ``m`` values of ``a`` (ascending) are below ``t``: steps started
    before t (``Segment.steps_started_before``) or ended before it
    (``steps_ending_by(t, strict=True)``)."""
    n = 0
    while n < m and a[n] < t:
        n += 1
    return n


@jit
def _next_clock(arrival, i, clock):
    """The SimPy clock at which request ``i`` arrives: the arrival process waits
    ``arrival - now`` from ``clock`` (its last resume), or not at all."""
    d = arrival[i] - clock
    return clock + d if d > 0 else clock


@jit
def _arrive(rid, si, sf, q, status, worker_col, route_col, route_val, why, wid, max_queue,
            watch_on, window_s, windows, max_wait, looks, arrival):
    """``Simulation.arrive`` of request ``rid`` at clock ``sf[CLOCK]`` (one worker, fcfs):
    returns (submitted, the overload watch fired)."""
    submitted = False
    w = why[rid]
    if w == TOO_LONG:
        status[rid] = REJECTED
        si[REJ_CONTEXT] += 1
    elif w == TOO_BIG:
        status[rid] = REJECTED
        si[REJ_KV] += 1
    else:
        route_col[rid] = route_val
        si[ROUTED] += 1
        if max_queue >= 0 and si[QT] - si[QH] >= max_queue:
            status[rid] = REJECTED
            si[REJ_QUEUE] += 1
        else:
            status[rid] = QUEUED
            worker_col[rid] = wid
            q[si[QT]] = rid
            si[QT] += 1
            submitted = True
    fired = False
    now = sf[CLOCK]
    look = False
    if watch_on:  # OverloadWatch.on_arrival
        look, sf[LOOK_AT] = _look_due(now, sf[LOOK_AT], window_s)
    if look:
        queued = si[QT] - si[QH]
        si[NLOOK] = _record_look(looks, si[NLOOK], windows, now, queued, rid + 1, si[NDONE])
        if queued > 0:
            wait = now - arrival[q[si[QH]]]
            if _overloaded(looks, si[NLOOK], windows, queued, wait, max_wait):
                sf[OVER_WAIT] = wait
                fired = True
    return submitted, fired


@jit
def _run(si, sf, run, q, status, worker_col, route_col, route_val, blocks, ptarget,
         arrival, why, elig_next, n_total, max_batch, max_queue, kv_total, bs, state_blocks,
         wid,
         multi_step, chunk_ok, has_horizon, horizon, watch_on, window_s, windows, max_wait,
         looks, record, buf, buf_rows, streaming, chunk_rows, extra0, spec_cols, drafts,
         itl, reason, progress_every, pstatic, cstatic,
         pend, p_rows, p_S, p_m, p_Ia, p_Bo, p_Iv, p_F, p_pre0, p_chunking, p_through,
         p_steps, p_hint):
    """Run the worker until Python must act (the module docstring); returns (what, the
    segment left pending: rows, S, m, Ia, Bo, Iv, F, pre0, chunking, and its steps, which
    after a last commit say the run ends: -1 the overload watch fired, -2 the horizon)."""
    rows, S, m, Ia, Bo, Iv, F, pre0, chunking = (p_rows, p_S, p_m, p_Ia, p_Bo, p_Iv, p_F,
                                                  p_pre0, p_chunking)
    through, steps, hint = p_through, p_steps, p_hint
    phase = pend
    while True:
        if phase == PEND_NONE:
            # -------- 1. admission at the boundary (FcfsScheduler.admit)
            room = max_batch - si[NRUN]
            while room > 0 and si[QT] > si[QH]:
                rid = q[si[QH]]
                need = _admission_blocks(ptarget[rid], bs, state_blocks)
                if need > kv_total - si[KV_USED]:
                    break
                si[KV_USED] += need
                if si[KV_USED] > si[KV_PEAK]:
                    si[KV_PEAK] = si[KV_USED]
                blocks[rid] = need
                si[QH] += 1
                status[rid] = RUNNING
                run[si[NRUN]] = rid
                si[NRUN] += 1
                room -= 1
            if si[NRUN] == 0:  # idle: the next arrival wakes the worker
                i = si[INEXT]
                if i >= n_total:
                    return DONE_RUN, p_rows, p_S, p_m, p_Ia, p_Bo, p_Iv, p_F, p_pre0, False, 0
                c = _next_clock(arrival, i, sf[CLOCK])
                if has_horizon and c >= horizon:
                    sf[NOW] = horizon
                    return DONE_RUN, p_rows, p_S, p_m, p_Ia, p_Bo, p_Iv, p_F, p_pre0, False, 0
                while True:  # it and those at the same instant, before the worker resumes
                    sf[CLOCK_PREV] = sf[CLOCK]
                    sf[CLOCK] = c
                    sf[LAST_EVENT] = max(sf[LAST_EVENT], c)
                    si[INEXT] = i + 1
                    _, fired = _arrive(i, si, sf, q, status, worker_col, route_col,
                                       route_val, why, wid, max_queue, watch_on, window_s,
                                       windows, max_wait, looks, arrival)
                    if fired:
                        sf[NOW] = c
                        return OVERLOAD, p_rows, p_S, p_m, p_Ia, p_Bo, p_Iv, p_F, p_pre0, False, 0
                    i += 1
                    if i >= n_total or arrival[i] - c > 0:
                        break
                sf[NOW] = c
                continue
            # -------- 2. plan (Worker._ahead, then the fused shape + plan)
            queue_empty = si[QT] == si[QH]
            hint = elig_next[si[INEXT]] if multi_step and queue_empty else np.nan
            steps, through = _segment_steps(multi_step, queue_empty,
                                            si[NRUN] >= max_batch, not np.isnan(hint),
                                            0.0 if np.isnan(hint) else hint, sf[NOW],
                                            sf[LAST_DT], si[PLANNED])
            rows = run[:si[NRUN]].copy()
            fits, multi, pre0, chunking, S, m, Ia, Bo, Iv, F = _shape_plan_priced(
                rows, steps, chunk_ok, kv_total - si[KV_USED], sf[NOW], *pstatic)
            if not fits:  # the Python scheduler frees KV (preemption) and plans
                return NEED_PLAN, p_rows, p_S, p_m, p_Ia, p_Bo, p_Iv, p_F, p_pre0, False, 0
            through = through and multi
            phase = PEND_PLANNED
        if phase == PEND_PLANNED:
            # -------- 3. the segment's cut, then the arrivals while it runs
            if through:
                for s in range(m):
                    fin = False
                    for j in range(len(rows)):
                        if Bo[S + s, j]:
                            fin = True
                            break
                    if fin:
                        m = s + 1
                        break
            elif steps > 1 and not np.isnan(hint):
                m = _hint_cut(_below(F[F_START], m, hint), m)
            t_plan = sf[NOW]
            base = t_plan  # when the worker's current timeout was set
            fired = False
            while si[INEXT] < n_total:
                i = si[INEXT]
                c = _next_clock(arrival, i, sf[CLOCK])
                e = base + (F[F_END, m - 1] - base)
                if c > e or (c == e and sf[CLOCK] > base):
                    break  # the worker resumes first
                if has_horizon and c >= horizon:
                    break
                while True:  # the arrival and those at the same instant
                    sf[CLOCK_PREV] = sf[CLOCK]
                    sf[CLOCK] = c
                    sf[LAST_EVENT] = max(sf[LAST_EVENT], c)
                    si[INEXT] = i + 1
                    submitted, fired = _arrive(i, si, sf, q, status, worker_col, route_col,
                                               route_val, why, wid, max_queue, watch_on,
                                               window_s, windows, max_wait, looks, arrival)
                    if submitted and not through:  # Worker.submit cuts the segment
                        keep = _submit_keep(_below(F[F_START], m, c), 0, m,
                                            t_plan, c)
                        if keep < m:  # an interrupt: a new timeout from now (the old
                            # one still fires, unheeded: SimPy's clock reaches it)
                            sf[LAST_EVENT] = max(sf[LAST_EVENT], base + (F[F_END, m - 1] - base))
                            m = keep
                            base = c
                    if fired:
                        break
                    i += 1
                    if i >= n_total or arrival[i] - c > 0:
                        break
                if fired:
                    break
            e = base + (F[F_END, m - 1] - base)
            sf[LAST_EVENT] = max(sf[LAST_EVENT], e)
            stop = sf[CLOCK] if fired else horizon
            if fired or (has_horizon and e >= horizon):  # the run ends inside the segment
                m = _below(F[F_END], m, stop)
                sf[NOW] = stop
                if m == 0:
                    return (OVERLOAD if fired else DONE_RUN, p_rows, p_S, p_m, p_Ia, p_Bo,
                            p_Iv, p_F, p_pre0, False, 0)
            else:
                sf[NOW] = e
            phase = PEND_COMMIT
            if fired or (has_horizon and e >= horizon):
                sf[OVER_WAIT] = sf[OVER_WAIT] if fired else 0.0
                steps = -1 if fired else -2  # after this commit the run is over
        # -------- 4. commit the segment's m steps (Kernel.commit, Worker._commit)
        B = len(rows)
        if (record and (_log_flush(streaming, si[ROW], m, chunk_rows)
                        or si[ROW] + m > buf_rows)) or si[ITLN] + m * B > len(itl):
            return NEED_ROOM, rows, S, m, Ia, Bo, Iv, F, pre0, chunking, steps
        chunked = False
        pre = Bo[:1]
        firsts = Bo[:1]
        counted = Bo[:1]
        if chunking:
            pre = Bo[2 * S + 2:3 * S + 2]
            for s in range(1, S):
                for j in range(B):
                    if pre[s, j]:
                        chunked = True
            if chunked:
                firsts = Bo[3 * S + 2:4 * S + 2]
                counted = Bo[4 * S + 2:]
        if not chunked:
            pre = np.zeros((1, 1), np.bool_)
            firsts = pre
            counted = pre
        Fo, Io, ng, nf, held_before, held_after, peak = _commit(
            0, m, rows, Ia[2], Ia[1], Ia[0], Bo[:S], Ia[3], Bo[S:2 * S], Ia[4], Iv[0],
            F[F_END], F[F_DT], F[F_DRAFT], F[F_VERIFY], F[F_FLOPS], F[F_BYTES], F[F_DFLOPS],
            F[F_DBYTES], F[F_PF], F[F_TOKENS], Bo[2 * S + 1], Bo[2 * S], pre0, *cstatic,
            buf, si[ROW], record, wid, reason, F[F_START], chunked, pre, firsts, counted)
        g = 2 * m + LEDGER_SUMS
        for x in range(ng):
            itl[si[ITLN] + x] = Fo[g + x]
        si[ITLN] += ng
        ok, si[KV_USED], si[KV_PEAK] = _commit_held(si[KV_USED], si[KV_PEAK], kv_total,
                                                    held_before, held_after, peak)
        if not ok:  # (BlockAllocator.set_held's check)
            return KV_ERROR, rows, S, m, Ia, Bo, Iv, F, pre0, chunking, steps
        si[NITER] += m
        si[COMMITS] += 1
        if record:
            for x in range(m):
                r = buf[si[ROW] + x]
                for c in range(extra0, buf.shape[1]):
                    r[c] = 0.0
                if spec_cols:
                    r[extra0] = Iv[3, x]
                    r[extra0 + 1] = Iv[2, x]
            si[ROW] += m
        if drafts:
            for x in range(m):
                si[SPEC_FREED] += Iv[2, x]
                si[SPEC_TAKEN] += Iv[3, x]
        if nf:
            for x in range(nf):
                status[Io[x]] = DONE
            si[NDONE] += nf
            keep = 0
            for x in range(si[NRUN]):
                if status[run[x]] != DONE:
                    run[keep] = run[x]
                    keep += 1
            si[NRUN] = keep
        sf[LAST_DT] = F[F_DT, m - 1]
        si[PLANNED] = _next_planned(m)
        phase = PEND_NONE
        if steps == -1:
            return OVERLOAD, p_rows, p_S, p_m, p_Ia, p_Bo, p_Iv, p_F, p_pre0, False, 0
        if steps == -2:
            return DONE_RUN, p_rows, p_S, p_m, p_Ia, p_Bo, p_Iv, p_F, p_pre0, False, 0
        if progress_every > 0 and si[INEXT] >= si[PROGRESS_AT]:
            si[PROGRESS_AT] = (si[INEXT] // progress_every + 1) * progress_every
            return PROGRESS, p_rows, p_S, p_m, p_Ia, p_Bo, p_Iv, p_F, p_pre0, False, 0
