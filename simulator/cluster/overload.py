"""Overload detection: a queue that only grows is reported, not simulated token by token.

A load far beyond capacity would otherwise be simulated to the end: the backlog drains
long after the last arrival, at full batch, iteration by iteration (a 10x overload of an
hour-long trace is ten simulated hours). The watch looks at the cluster's queue as
requests arrive and stops the run, like a horizon, once it is sure the queue only grows.

Rules:
1. It looks only when a request arrives, at most once per ``window_s`` of simulated time:
   it schedules no event of its own, so a run it does not stop is the same bit for bit.
2. It fires when the queued requests (all workers) grew at each of the last ``windows``
   looks, and the oldest queued request has waited more than ``max_wait_s``: arrivals are
   outrunning completions for minutes and the queue is already unusable.
3. On firing the run stops at that time: iterations ended by then count, unfinished
   requests are in flight, later ones never arrived (as with ``simulation.horizon_s``).
   metrics.json's ``overload`` block says when, the queue, the arrival and completion
   rates over the last windows, and the rule; the report and the CLI say it in one line.
4. Closed-loop clients cannot overload a queue (at most one request each): there it is
   off. A PD fleet is watched over both pools: the prefill queues and the decode queues
   (requests whose KV landed but that wait for a decode slot) count together, and the
   oldest wait runs from the request's arrival.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from specsim.simulator.cluster import requests as rq
from specsim.simulator.execution import loop_rules as rules


class Overloaded(Exception):  # noqa: N818  (a stop, not an error)
    """Raised out of the arrival process to stop the run; ``info`` is the metrics block."""

    def __init__(self, info: dict[str, Any]) -> None:
        super().__init__(info)  # in args: SimPy re-raises a copy built from them
        self.info = info


class OverloadWatch:
    def __init__(self, sim, window_s: float, windows: int, max_wait_s: float) -> None:
        self.sim = sim
        self.window_s, self.windows, self.max_wait_s = window_s, windows, max_wait_s
        self.next_at = window_s
        # the last windows + 1 looks, (t, queued, arrived, completed), a ring
        # (``loop_rules.record_look``; the compiled solo loop keeps the same one)
        self.looks = np.zeros((windows + 1, 4))
        self.nlook = 0

    def on_arrival(self, rid: int) -> None:
        """Called after request ``rid`` arrived; raises Overloaded when rule 2 holds."""
        now = float(self.sim.env.now)
        look, self.next_at = rules.look_due(now, self.next_at, self.window_s)
        if not look:
            return
        sim, t = self.sim, self.sim.table
        heads = [w.waiting[0] for w in sim.workers if w.waiting]
        queued = sum(len(w.waiting) for w in sim.workers)
        completed = int(np.count_nonzero(t.status == rq.DONE))
        self.nlook = rules.record_look(self.looks, self.nlook, self.windows, now, queued,
                                       rid + 1, completed)
        if not heads:
            return
        oldest_wait = now - float(min(t.arrival[h] for h in heads))
        if rules.overloaded(self.looks, self.nlook, self.windows, queued, oldest_wait,
                            self.max_wait_s):
            raise Overloaded(self.info(now, oldest_wait))

    def info(self, now: float, oldest_wait: float) -> dict[str, Any]:
        """metrics.json's ``overload`` block from the last windows + 1 looks (the SimPy
        watch's and the compiled solo loop's ring)."""
        k = self.windows + 1
        recent = [self.looks[i % k].tolist() for i in range(self.nlook - k, self.nlook)]
        span = now - recent[0][0]
        return {
            "detected": True,
            "at_s": now,
            "queued_requests": int(recent[-1][1]),
            "oldest_wait_s": oldest_wait,
            "arrival_rate_per_s": (int(recent[-1][2]) - int(recent[0][2])) / span,
            "completion_rate_per_s": (int(recent[-1][3]) - int(recent[0][3])) / span,
            "rule": (f"queue grew at each of {self.windows} looks {self.window_s:g} s apart "
                     f"and its oldest request waited over {self.max_wait_s:g} s"),
        }


def make_watch(sim, spec) -> OverloadWatch | None:
    """The watch for ``simulation.overload`` (None when off or not applicable, rule 4)."""
    if not spec.detect or sim.arrivals.notify_finishes:
        return None
    return OverloadWatch(sim, float(spec.window_s), int(spec.windows),
                         float(spec.max_wait_s))
