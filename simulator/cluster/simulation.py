"""The engine: run a fleet. The SimPy environment, the arrivals, routing into pools,
the hand-offs over links, the overload watch and the stop.

``cluster/build.py`` turns the scenario into a fleet (pools of workers, links between them);
a ``Simulation`` runs it over a trace; ``metrics/summary.py`` reads the finished run;
``api.py`` is the Python API (``run_scenario``). ``cluster/engine.py`` is the import path
older code uses for all of these.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from specsim import limits
from specsim.simulator import rng
from specsim.simulator.cluster import requests as rq
from specsim.simulator.cluster.arrivals import ClosedLoop, OpenLoop
from specsim.simulator.cluster.build import DECODE, PREFILL, Fleet, Pool, build_workers, deploy
from specsim.simulator.cluster.overload import Overloaded, make_watch
from specsim.simulator.cluster.worker import Worker
from specsim.simulator.execution.kernel import SPEC_ITER_COLUMNS
from specsim.simulator.execution.loop_rules import TOO_BIG, TOO_LONG
from specsim.simulator.execution.plugins import note_plugins
from specsim.simulator.kv import prefix_cache as pc
from specsim.simulator.metrics.collector import Metrics, deliver
from specsim.simulator.routing.routers import RequestFeatures, make_router
from specsim.simulator.scenario.schema import Scenario
from specsim.traces.schema import Trace, as_trace

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


def workload_key(sc: Scenario) -> str:
    """The scenario key the request count comes from, for messages."""
    wl = sc.workload
    if isinstance(wl, dict):
        for name in ("synthetic", "trace"):
            if name in wl:
                return f"workload.{name}"
    return "workload"



class Simulation:
    """One run of one scenario: SimPy environment, the fleet's workers, arrival process."""

    def __init__(self, sc: Scenario, trace: Trace | pd.DataFrame, base_dir: Path,
                 progress: Any = None, fleet: Fleet | None = None) -> None:
        trace = as_trace(trace)  # numpy columns (a DataFrame from the API: its columns)
        self.sc = sc
        self.fleet = fleet if fleet is not None else deploy(sc, base_dir)
        d = self.fleet.deployment  # the pool that decodes: how requests are drawn
        self.notes = list(self.fleet.notes)
        self.seed = d.seed
        self.acceptance = d.acceptance
        # --- requests: the memory check comes before any per-request array
        limits.check_requests(len(trace), workload_key(sc),
                              record_iterations=bool(sc.simulation.record_iterations))
        self._context_notes(trace)
        self.table = rq.RequestTable(trace)
        self._prepare_requests()
        # --- SimPy model
        self.max_queue = sc.scheduler.max_queue
        self.horizon = sc.simulation.horizon_s
        self.record_iterations = sc.simulation.record_iterations
        self.env = simpy.Environment()
        kc = d.kv_cache
        # iteration-log columns after ITER_COLUMNS: the KV tiers' use (kv_cache on), then
        # the speculative KV blocks each step took and returned (a scenario that drafts)
        self.spec_columns = d.method != "none" and d.drafter.drafts
        self.metrics = Metrics(extra=(
            *(() if kc is None else ("kv_cached_blocks", *(f"kv_{t.name}_blocks"
                                                          for t in kc.tiers), "kv_transfer_s")),
            *(SPEC_ITER_COLUMNS if self.spec_columns else ())))
        if kc is not None:  # per-request prefix-cache columns, read by the kernel and KV
            t = self.table
            t.kv_shared = np.zeros(t.n, np.int64)
            t.kv_hit_tokens = np.zeros(t.n, np.int64)
            t.kv_xfer_s = np.zeros(t.n)
        closed = trace.attrs.get("closed_loop")
        self.arrivals = (ClosedLoop(self, closed, self.seed) if closed is not None
                         else OpenLoop(self))
        self.progress = progress
        self.rejected_reasons: dict[str, int] = {}
        self.next_rid = 0  # requests before this one have arrived (or been sent)
        self.max_context = int(self.fleet.model.max_context)
        self._build_pools()
        self._plan_arrivals()
        self.overload: dict[str, Any] | None = None  # set when the watch stops the run
        self.watch = make_watch(self, sc.simulation.overload)
        # one worker on an open-loop trace: the compiled solo loop (cluster/solo.py) runs
        # it, the same bits as the SimPy processes; else the arrivals' SimPy process
        from specsim.simulator.cluster import solo

        self.solo = solo.SoloRun(self) if solo.applies(self) else None
        if self.solo is None:
            self.env.process(self.arrivals.process())

    def _build_pools(self) -> None:
        """Every pool's workers and router, and the hand-off of each link. The decoding
        pool is built first (its workers' processes start first, as they always have)."""
        from specsim.simulator.cluster.pd import PDLink, PrefillView

        fleet = self.fleet
        self.handoffs = [PDLink(self, link) for link in fleet.links]
        by_source = {h.link.source: h for h in self.handoffs}
        targets = {name for h in self.handoffs for name in h.link.targets}
        for pool in sorted(fleet.pools, key=lambda p: p.role == PREFILL):
            if pool.role == PREFILL:
                pool.workers = build_workers(pool, self, PrefillView(self.table),
                                             by_source[pool.name].prefill_done,
                                             self.next_arrival_hint)
            else:  # a pool fed by a link has no foresight of its requests (speed only)
                pool.workers = build_workers(
                    pool, self, self.table, self.on_finish,
                    None if pool.name in targets else self.next_arrival_hint)
            pool.router = make_router(pool.router_policy, len(pool.workers), pool.router_params)
        for h in self.handoffs:
            h.attach(fleet.pool(h.link.source), [fleet.pool(n) for n in h.link.targets])
        note_plugins(self.notes, self.workers)  # plug-ins run through slower Python hooks

    # ------------------------------------------------------------------ what others read
    @property
    def workers(self) -> list[Worker]:
        """Every worker of the fleet, in id order."""
        return self.fleet.workers

    @property
    def kv_cache(self) -> pc.CacheConfig | None:
        return self.fleet.deployment.kv_cache

    @property
    def drafter(self) -> Any:
        return self.fleet.deployment.drafter

    def _context_notes(self, trace: Trace) -> None:
        """Requests the workload cut or dropped to fit the context (``build_workload`` attrs;
        a trace passed in directly has none: 0)."""
        attrs = getattr(trace, "attrs", None) or {}

        def count(key: str) -> int:
            try:
                return max(int(attrs.get(key) or 0), 0)
            except (TypeError, ValueError):
                return 0

        self.truncated = count("capped_requests")
        self.dropped = count("dropped_requests")
        if self.truncated:
            self.notes.append(f"{self.truncated} requests were longer than the context limit and "
                              "were truncated to fit (workload.context_overflow: truncate); they "
                              "run, and count as completed, at the shorter length")
        if self.dropped:
            self.notes.append(f"{self.dropped} requests were longer than the context limit and "
                              "were dropped before the run (workload.context_overflow: drop); "
                              "they are not counted as arrived")

    def _prepare_requests(self) -> None:
        t = self.table
        ids = t.request_id
        t.accept_key = rng.request_keys(self.seed, rng.STREAM_ACCEPT, ids)
        t.match_key = rng.request_keys(self.seed, rng.STREAM_MATCH, ids)
        if t.n and self.drafter.per_class:  # each class its drafter's
            t.cls_idx, t.alpha_scale, self.alpha_table, names = self.drafter.request_tables(
                ids, t.workload_class, t.temperature)
            self.acceptance._names = names  # the class order the policy and metrics read
        elif t.n:
            t.cls_idx, t.alpha_scale = self.acceptance.request_scale(ids, t.workload_class,
                                                                     t.temperature)
            self.alpha_table = self.acceptance.survival_table()
            # a drafter's proposals may meet the target differently from the chain (a tree)
            self.alpha_table = self.drafter.transform_acceptance(self.alpha_table)
        else:
            self.alpha_table = np.zeros((1, 64))

    # ------------------------------------------------------------------ processes
    def _reject(self, rid: int, reason: str) -> None:
        self.table.status[rid] = rq.REJECTED
        self.rejected_reasons[reason] = self.rejected_reasons.get(reason, 0) + 1

    def arrive(self, rid: int) -> None:
        """A request arrives now: rejected for its size, routed, or refused by a full queue."""
        why = self._static_reject[rid]
        if why:
            self._reject(rid, self.STATIC_REASONS[why])
        else:
            w = self._route(rid)
            refused = w.scheduler.refuse(w, rid)  # per SLO tier (scheduling/priority.py)
            if refused is not None:
                self._reject(rid, refused)
            elif self.max_queue is not None and len(w.waiting) >= self.max_queue:
                self._reject(rid, "queue full")
            else:
                w.submit(rid)
        if self.progress is not None and rid % 256 == 0:
            self.progress(self.env.now, rid + 1)
        if self.watch is not None:
            self.watch.on_arrival(rid)

    STATIC_REASONS = {TOO_LONG: "exceeds model context", TOO_BIG: "exceeds KV capacity"}

    def _plan_arrivals(self) -> None:
        """Rejections decided by a request alone: too long for the context, or for the KV
        of a worker of any pool it would pass through (with several decode pools: of every
        one of them, since the hand-off picks one that can hold it)."""
        t, fleet = self.table, self.fleet
        why = np.zeros(t.n, np.int8)
        decode = [p.too_big(t.prompt, t.output) for p in fleet.pools if p.role == DECODE]
        for pool in fleet.pools:
            if pool.role != DECODE:
                why[pool.too_big(t.prompt, t.output)] = TOO_BIG
        if decode:
            why[np.logical_and.reduce(decode)] = TOO_BIG
        why[t.prompt + t.output > fleet.model.max_context] = TOO_LONG
        self._static_reject = why
        self._eligible = np.flatnonzero(why == 0)  # requests that will be routed (the
        # arrival hint's, here and in the solo loop, cluster/solo.py)

    def next_arrival_hint(self, wid: int) -> float | None:
        """When worker ``wid`` (of the pool arrivals enter) may next receive a request (a
        planning hint, not a promise)."""
        t = self.table
        if self.arrivals.notify_finishes:
            return None  # closed-loop arrivals depend on finishes: no foresight
        j = int(self._eligible.searchsorted(self.next_rid))
        entry = self.fleet.entry
        ahead = entry.router.turns_until(wid - entry.first_wid)
        j += ahead if ahead is not None else 0
        return float(t.arrival[self._eligible[j]]) if j < len(self._eligible) else float("inf")

    def _route(self, rid: int) -> Worker:
        """Where an arriving request goes: a worker of the pool arrivals enter, unless a
        link's conditional rule keeps it on a decode worker (``cluster/pd.py``)."""
        for h in self.handoffs:
            local = h.local_worker(rid)
            if local is not None:
                self.table.routed(rid, local[1])
                return local[0]
        w, reason = self.route_in(self.fleet.entry, rid)
        self.table.routed(rid, reason)
        return w

    def route_in(self, pool: Pool, rid: int, extra_queued: Any = None) -> tuple[Worker, str]:
        """Ask the pool's router: a worker and why. A router that reads load sees every
        worker of the pool synced to now (``extra_queued``: requests on their way to each,
        counted as queued)."""
        workers = pool.workers
        if len(workers) == 1:  # no choice to make (and nothing a router records)
            return workers[0], pool.only_worker_reason
        now = self.env.now
        snaps = None
        if pool.router.reads_load:
            for w in workers:
                w.sync(now)
            # the router indexes the pool's workers from 0
            snaps = [w.snapshot(i, int(extra_queued[i]) if extra_queued is not None else 0)
                     for i, w in enumerate(workers)]
        decision = pool.router.route(self.features(rid), snaps)
        return workers[decision.worker], decision.reason

    def features(self, rid: int) -> RequestFeatures:
        """What a router may know of request ``rid``: not its output length, the most it
        may generate (``RequestFeatures``)."""
        t = self.table
        prompt = int(t.prompt[rid])
        return RequestFeatures(rid, prompt, max(self.max_context - prompt, 0),
                               str(t.workload_class[rid]), int(t.session_id[rid]),
                               str(t.slo_tier[rid]))

    def on_finish(self, rows: np.ndarray) -> None:
        self.arrivals.on_done(rows)

    # ------------------------------------------------------------------ running
    def run(self) -> None:
        try:
            if self.solo is not None:
                self.solo.go()
            elif self.horizon is not None:
                self.env.run(until=self.horizon)
            else:
                self.env.run()
        except Overloaded as stop:  # a queue that only grows: stop here, as at a horizon
            self.overload = stop.info
            self.notes.append(
                f"overloaded: stopped at {stop.info['at_s']:.0f} s simulated with "
                f"{stop.info['queued_requests']:,} requests queued (arrivals "
                f"{stop.info['arrival_rate_per_s']:.2f}/s vs completions "
                f"{stop.info['completion_rate_per_s']:.2f}/s; {stop.info['rule']}); the "
                "figures cover the run until then (simulation.overload.detect: false runs on)")
        end = self.overload["at_s"] if self.overload is not None else self.horizon
        if end is not None:
            for w in self.workers:  # iterations that ended before the stop count
                w.sync(end, strict=True)
        eng, t = self.sc.engine, self.table  # the output path's rhythm (collector.deliver)
        t.first_token, t.finish = deliver(t.first_token, t.finish, t.generated,
                                          eng.output_lag_steps, eng.output_delay_s, t.steps)

    def arrived(self) -> np.ndarray:
        """The requests that arrived in the run (one rule for the summary and the checks):
        all of them, or those at or before a horizon; where the overload watch stopped the
        run at an arrival, those before that instant and those processed at it."""
        t, now = self.table, float(self.env.now)
        if self.overload is not None:
            return (t.arrival < now) | (t.status != rq.PENDING)
        if self.horizon is not None:
            return t.arrival <= now
        return np.ones(t.n, bool)

    def summary(self, wall_s: float) -> dict[str, Any]:
        """metrics.json (``metrics/summary.py``)."""
        from specsim.simulator.metrics.summary import summarise

        return summarise(self, wall_s)

    def requests_columns(self) -> dict[str, np.ndarray]:
        """requests.csv's columns: one row per request, with the prefix cache's and each
        link's columns where the run has them."""
        return requests_columns(self.table, self.kv_cache is not None, self.handoffs)

    def requests_builder(self) -> RequestRows:
        """What builds requests.csv's rows after the run (``Result.requests``) holding the
        request table only, not the simulation (a PD run's links: the columns, built now)."""
        cached = self.kv_cache is not None
        return RequestRows(self.table, cached,
                           self.requests_columns() if self.handoffs else None)

    def check_invariants(self) -> None:
        """Conservation checks (also run by tests): KV blocks, tokens, request states."""
        t = self.table
        for w in self.workers:
            held = int(t.blocks[t.worker == w.wid].sum())
            if held != w.kv.held:
                raise AssertionError(f"worker {w.wid}: allocator has {w.kv.held} blocks held, "
                                     f"requests hold {held}")
        if not np.array_equal(t.generated, t.accepted + t.bonus):
            raise AssertionError("output tokens != accepted + bonus tokens")
        if self.kv_cache is not None:  # every tier: blocks free or cached; tokens conserved
            pc.check_invariants(self)
        for h in self.handoffs:  # PD: arrivals accounted for, tokens over the link, no leak
            h.check(self.arrived())


def requests_columns(t: rq.RequestTable, cached: bool, handoffs: Any,
                     rows: slice = slice(None)) -> dict[str, np.ndarray]:
    """requests.csv's ``rows`` as columns by name: the table's, the prefix cache's
    (``cached``) and each link's (``handoffs``: whole tables only), the router's reason."""
    cols = t.columns(rows)
    if cached:  # per request: prompt tokens found cached, transfer time
        cols["prefix_hit_tokens"] = t.kv_hit_tokens[rows]
        cols["kv_transfer_s"] = t.kv_xfer_s[rows]
    for h in handoffs:  # PD: where each request was prefilled, its KV transfer
        if rows != slice(None):
            raise ValueError("a PD run's requests table is built whole")
        h.amend_columns(cols)
    cols["route_reason"] = t.route_reason(t.route_code[rows])  # Decision.reason
    return cols


@dataclass(frozen=True)
class RequestRows:
    """requests.csv's rows built when read (``self(rows)`` -> those rows' columns by name),
    holding the request table only: ``Result.requests`` builds its frame whole once,
    ``specsim run --out`` writes it a block at a time (``Result.requests_blocks``).
    ``whole``: the columns already built (a PD run's, whose links' columns come whole)."""

    table: rq.RequestTable
    cached: bool
    whole: dict[str, np.ndarray] | None = None

    @property
    def n(self) -> int:
        """Rows the whole table has."""
        return self.table.n

    def __call__(self, rows: slice = slice(None)) -> dict[str, np.ndarray]:
        if self.whole is not None:
            return {name: col[rows] for name, col in self.whole.items()}
        return requests_columns(self.table, self.cached, (), rows)
