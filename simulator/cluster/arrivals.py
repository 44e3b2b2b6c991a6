"""How requests enter the cluster: an open-loop trace, or N closed-loop clients.

Open loop replays the trace's arrival times. Closed loop is how benchmarks and engine
pressure tests load a server at a fixed concurrency: each of N clients sends a request,
waits for it to finish (or be rejected), thinks for a drawn time, and sends the next; the
trace then supplies only the requests' lengths and classes, in order, and their arrival
times are written as they happen.
"""

from __future__ import annotations

import math

import numpy as np

from specsim.simulator.cluster import requests as rq
from specsim.traces.closed_loop import ClosedLoopSpec


class OpenLoop:
    """Requests arrive at the trace's times."""

    name = "open_loop"
    notify_finishes = False  # nothing waits on a finish

    def __init__(self, sim) -> None:
        self.sim = sim

    def process(self):
        sim, t, env = self.sim, self.sim.table, self.sim.env
        arrival = t.arrival.tolist()  # Python floats: the same values, cheaper arithmetic
        for rid in range(t.n):
            sim.next_rid = rid
            delay = arrival[rid] - env.now
            if delay > 0:
                yield env.timeout(delay)
            sim.arrive(rid)
        sim.next_rid = t.n

    def next_arrival_after(self, i: int) -> float:
        """When the i-th request (in trace order) arrives: a planning hint for workers."""
        t = self.sim.table
        return float(t.arrival[i]) if i < t.n else float("inf")

    def on_done(self, rows: np.ndarray) -> None:
        pass


class ClosedLoop:
    """N clients, each with at most one request outstanding."""

    name = "closed_loop"
    notify_finishes = True  # a finish starts the client's think time: workers report it

    def __init__(self, sim, spec: ClosedLoopSpec, seed: int) -> None:
        self.sim, self.spec = sim, spec
        self.sent = 0
        self.client_of = np.full(sim.table.n, -1, np.int64)
        self._think = [np.random.default_rng([seed, 0xC11E, c]) for c in range(spec.clients)]
        self._steps_seen, self._step_sum = 0, 0.0  # finished requests' mean decode step
        sim.table.arrival[:] = np.inf  # written when each request is sent

    def process(self):
        env, spec = self.sim.env, self.spec
        for c in range(spec.clients):
            start = c * spec.ramp_s / spec.clients
            env.process(self._client_start(c, start))
        return
        yield  # a generator, like the open loop's process

    def _client_start(self, c: int, at: float):
        if at > 0:
            yield self.sim.env.timeout(at)
        self._send(c)

    def _send(self, c: int) -> None:
        sim = self.sim
        if self.sent >= sim.table.n:
            return  # the pool of requests is spent: this client stops
        rid = self.sent
        self.sent += 1
        sim.next_rid = self.sent
        self.client_of[rid] = c
        sim.table.arrival[rid] = sim.env.now
        sim.arrive(rid)
        if sim.table.status[rid] == rq.REJECTED:
            self._after(c)

    def _after(self, c: int, seen_after: float = 0.0) -> None:
        think = 0.0
        if self.spec.think_time is not None:
            think = float(self.spec.think_time.sample(self._think[c], 1)[0])
        if seen_after > 0:  # the client thinks once it has seen the last token
            think = seen_after + think
        self.sim.env.process(self._later(c, think))

    def _seen_after(self, rid: int) -> float:
        """How long after the engine finishes request ``rid`` its client sees the last
        token: the engine's output rhythm (``engine.output_lag_steps`` of its own decode
        steps + ``engine.output_delay_s``, as ``metrics.collector.deliver`` reports it; a
        request without decode steps takes the mean step of those finished before it)."""
        eng = self.sim.sc.engine
        lag, delay = float(eng.output_lag_steps), float(eng.output_delay_s)
        if lag == 0.0 and delay == 0.0:
            return 0.0
        t = self.sim.table
        n = int(t.steps[rid])
        if n > 0:
            step = (float(t.finish[rid]) - float(t.first_token[rid])) / n
            self._steps_seen += 1
            self._step_sum += step
        else:
            k = self._steps_seen
            step = self._step_sum / k if k else 0.0
        return lag * step + delay if math.isfinite(step) else delay

    def _later(self, c: int, delay: float):
        if delay > 0:
            yield self.sim.env.timeout(delay)
        self._send(c)

    def next_arrival_after(self, i: int) -> float:
        return float("inf") if i >= self.sim.table.n else float("nan")

    def on_done(self, rows: np.ndarray) -> None:
        t = self.sim.table
        for rid in rows.tolist():
            c = int(self.client_of[rid])
            if c >= 0:
                done = t.status[rid] != rq.REJECTED
                self._after(c, self._seen_after(rid) if done else 0.0)
