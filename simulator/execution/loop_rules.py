"""The worker loop's rules, written once: how long a segment is planned, where it is cut,
what a request needs to be admitted, what a commit leaves in the KV pool, when the streamed
iteration log writes a chunk, and when the overload watch looks and stops a run; and the
codes both loops write: a request's state and why it is rejected before routing.

Two loops run them: the SimPy worker (``cluster/worker.py``, the schedulers,
``cluster/overload.py``) calls these functions as Python, and the compiled solo loop
(``execution/solo_jit.py``) compiles the same source with numba (as ``kernel_jit`` compiles
``rng.py``'s SplitMix64): the same integer and float operations in the same order, so the
same bits either way. Plain scalars in and out (no numba import here: a scenario's
validation never loads it).
"""

from __future__ import annotations

import math

MAX_STEPS = 256  # the longest segment planned at once

#: a request's state (the request table's ``status`` column, ``cluster/requests.py``)
PENDING, QUEUED, RUNNING, DONE, REJECTED = 0, 1, 2, 3, 4
#: why a request is rejected before it is routed (``Simulation._plan_arrivals``: too long
#: for the model's context, too big for a worker's KV; 0: it is routed)
TOO_LONG, TOO_BIG = 1, 2


def segment_steps(multi_step: bool, queue_empty: bool, blocked: bool, has_hint: bool,
                  hint: float, now: float, last_dt: float, planned: int) -> tuple[int, bool]:
    """(steps to plan, whether they run through arrivals) for a worker at ``now``
    (``Worker._ahead``): one step unless the plan may run many (``multi_step``); with an
    empty queue, until the next arrival the router foresees (``hint``) at the last step's
    pace, else twice the last segment (``planned``); with a full batch blocking the queue,
    ``planned`` steps through arrivals up to the first finish (exact: nothing can join
    before). Only speed depends on the length: a segment cut short commits what it would
    have run step by step."""
    if not multi_step:
        return 1, False
    if queue_empty:
        if not has_hint or last_dt <= 0:
            return planned, False
        ahead = hint - now
        if ahead == math.inf:
            return MAX_STEPS, False
        return min(max(int(ahead / last_dt) + 1, 2), MAX_STEPS), False
    if blocked:
        return planned, True
    return 1, False


def next_planned(m: int) -> int:
    """The next segment's length without a hint: twice this one's (2 to MAX_STEPS)."""
    return min(max(2 * m, 2), MAX_STEPS)


def hint_cut(started_before_hint: int, m: int) -> int:
    """A segment planned up to the foreseen arrival ends with the last step that starts
    before it (where the arrival would cut it anyway: no interrupt needed)."""
    return started_before_hint if 0 < started_before_hint < m else m


def submit_keep(started_before_now: int, done: int, m: int, resumed_at: float,
                now: float) -> int:
    """Steps of the running segment kept when a request joins the queue at ``now``
    (``Worker.submit``): those already under way; one starting exactly now is planned again
    with the request, unless the worker began it just now itself (judged by the worker's
    resume time, never by comparing float start times)."""
    keep = max(started_before_now, done)
    if keep == done < m and resumed_at == now:
        keep += 1
    return keep


def admission_blocks(tokens: int, block_size: int, state_blocks: int) -> int:
    """KV blocks a request takes at admission (``BatchScheduler.reserve``): its prompt's,
    one spare, and its state's (a model with sliding-window or linear layers,
    ``Deployment.state_blocks``)."""
    return -(-tokens // block_size) + 1 + state_blocks


def commit_held(used: int, peak: int, total: int, held_before: int, held_after: int,
                peak_during: int) -> tuple[bool, int, int]:
    """A KV pool of ``total`` blocks, ``used`` in use (``peak`` at most so far), after a
    commit (``BlockAllocator.set_held``): its rows held ``held_before`` blocks and now hold
    ``held_after``, at most ``peak_during`` were in use while the steps ran. Returns (whether
    that can be, blocks used after, the peak after)."""
    now_used = used + held_after - held_before
    if now_used < 0 or now_used > total or peak_during > total:
        return False, now_used, peak
    return True, now_used, max(peak, peak_during, now_used)


def log_flush(streaming: bool, held: int, m: int, chunk_rows: int) -> bool:
    """The streamed iteration log writes the ``held`` rows it holds before ``m`` more would
    pass ``chunk_rows`` (``Metrics.reserve_rows``)."""
    return streaming and held > 0 and held + m > chunk_rows


def look_due(now: float, next_at: float, window_s: float) -> tuple[bool, float]:
    """Whether the overload watch looks at an arrival at ``now`` (``OverloadWatch.on_arrival``:
    once its clock reaches ``next_at``, then not for ``window_s``), and when it looks next."""
    if now < next_at:
        return False, next_at
    return True, now + window_s


def record_look(looks, nlook: int, windows: int, now: float, queued: int, arrived: int,
                completed: int) -> int:
    """The overload watch's look (``OverloadWatch.on_arrival``) into its ring of the last
    ``windows`` + 1 looks: (time, queued, arrived, completed); returns the looks so far."""
    slot = nlook % (windows + 1)
    looks[slot, 0] = now
    looks[slot, 1] = queued
    looks[slot, 2] = arrived
    looks[slot, 3] = completed
    return nlook + 1


def overloaded(looks, nlook: int, windows: int, queued: int, oldest_wait: float,
               max_wait: float) -> bool:
    """Rule 2 of ``cluster/overload.py``: the queue grew at each of the last ``windows``
    looks and its oldest request has waited more than ``max_wait``."""
    if nlook <= windows or queued <= 0:
        return False
    for j in range(windows):
        a = (nlook - 1 - windows + j) % (windows + 1)
        b = (a + 1) % (windows + 1)
        if looks[b, 1] <= looks[a, 1]:
            return False
    return oldest_wait > max_wait
