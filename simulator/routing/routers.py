"""Routers: which worker an arriving request joins. Small policies behind one interface.

A router reads a read-only snapshot of every worker (queue depth, batch, KV use, free
blocks; taken after each worker has committed its iterations up to now) and the request's
features, and returns a ``Decision``: the worker and a short reason (requests.csv's
``route_reason``). A router that never
reads load declares ``reads_load = False`` and is given no snapshots (the workers then need
not commit anything to route). With a prefix cache a snapshot also answers, read-only,
how many of a request's prompt tokens the worker has cached per tier (``prefix_hit``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specsim.simulator.registry import ROUTERS


@dataclass(frozen=True)
class RequestFeatures:
    """What a router may know about the request it routes: what a serving engine knows when
    it arrives. Not its output length (nobody knows it before it is generated): the most it
    may generate, ``max_tokens``, as engines admit by prompt + max_tokens. Traces carry no
    max_tokens, so it is the engine's default, the model's context less the prompt (vLLM's
    max_tokens when a request gives none)."""

    rid: int
    prompt_tokens: int
    max_tokens: int
    workload_class: str
    session_id: int
    slo_tier: str


@dataclass(frozen=True)
class Decision:
    worker: int
    reason: str


class Router:
    """Interface: ``route(request, snapshots) -> Decision``."""

    name = "router"
    reads_load = True

    def __init__(self, n_workers: int) -> None:
        self.n_workers = n_workers

    def route(self, request: RequestFeatures, snapshots: list | None) -> Decision:
        raise NotImplementedError

    def turns_until(self, worker: int) -> int | None:
        """Routed requests before ``worker`` gets one, if the router knows (a speed hint
        for planning segments; results never depend on it)."""
        return None


@ROUTERS.register("round_robin")
class RoundRobin(Router):
    """Workers in turn, over the requests that are routed (rejected ones take no turn)."""

    reads_load = False

    def __init__(self, n_workers: int) -> None:
        super().__init__(n_workers)
        self._next = 0

    def route(self, request, snapshots):
        w = self._next
        self._next = (w + 1) % self.n_workers
        return Decision(w, "next in turn")

    def turns_until(self, worker: int) -> int | None:
        return (worker - self._next) % self.n_workers


@ROUTERS.register("least_loaded")
class LeastLoaded(Router):
    """The worker with the fewest running + queued requests (lowest index on ties)."""

    def route(self, request, snapshots):
        best = min(snapshots, key=lambda s: (s.load, s.wid))
        return Decision(best.wid, f"least loaded ({best.load} requests)")


@ROUTERS.register("least_loaded_per_kv")
class LeastLoadedPerKv(Router):
    """The worker with the fewest running + queued requests per KV block it has (then the
    lowest index): among workers of one kind, ``least_loaded``; across pools of different
    HBM (two decode pools of a PD fleet, an A100 pool and an H200 pool), each takes requests
    in proportion to the KV it can hold. A simple rule (assumed, not fitted): it does not
    weigh the pools' speed."""

    def route(self, request, snapshots):
        best = min(snapshots, key=lambda s: ((s.load + 1) / max(s.kv_total_blocks, 1), s.wid))
        return Decision(best.wid, f"least loaded per KV block ({best.load} requests on "
                                  f"{best.kv_total_blocks} blocks)")


def make_router(name: str, n_workers: int, params: dict[str, Any] | None = None) -> Router:
    """The router registered as ``name``; one that registered a params model gets its
    settings (``router.params``, validated) as its second argument."""
    cls, model = ROUTERS.get(name), ROUTERS.info(name).params
    return cls(n_workers) if model is None else cls(n_workers, model.model_validate(params or {}))


def _least_loaded(snapshots):
    return min(snapshots, key=lambda s: (s.load, s.wid))


@ROUTERS.register("session_affinity")
class SessionAffinity(Router):
    """A session's turns go to the worker that served its first routed turn (its earlier
    turns' KV is there); a new session, or a request without one, to the least loaded."""

    def __init__(self, n_workers: int) -> None:
        super().__init__(n_workers)
        self.home: dict[int, int] = {}

    def route(self, request, snapshots):
        sid = request.session_id
        if sid >= 0:
            w = self.home.get(sid)
            if w is not None:
                return Decision(w, f"session {sid} stays on worker {w}")
        best = _least_loaded(snapshots)
        if sid >= 0:
            self.home[sid] = best.wid
            return Decision(best.wid, f"session {sid} starts on the least loaded "
                                      f"({best.load} requests)")
        return Decision(best.wid, f"no session: least loaded ({best.load} requests)")


@ROUTERS.register("cache_aware")
class CacheAware(Router):
    """Most cached prompt, guarded by load (SGLang's cache-aware router, as a score).

    Load guard: only workers with load <= min load x (1 + ``guard_rel``) + ``guard_abs``
    are candidates, so a worker holding a hot prefix is not buried. Among them the best
    score wins (lowest index on ties):
    ``hit_weight`` x (HBM hit + ``lower_tier_credit`` x lower-tier hit) / prompt tokens
    - ``queue_weight`` x load / (max candidate load + 1) - ``kv_weight`` x KV held / KV total.
    The Decision's reason records the parts. Without a prefix cache the hit part is 0 (the
    least loaded candidate with the least KV held wins). The weights are this router's own
    defaults (assumed, not fitted).
    """

    hit_weight = 1.0
    lower_tier_credit = 0.5  # a lower-tier hit still costs a transfer
    queue_weight = 0.5
    kv_weight = 0.25
    guard_abs = 4
    guard_rel = 0.5

    def route(self, request, snapshots):
        low = min(s.load for s in snapshots)
        cap = low * (1.0 + self.guard_rel) + self.guard_abs
        cand = [s for s in snapshots if s.load <= cap]
        top = max(s.load for s in cand) + 1
        prompt = max(request.prompt_tokens, 1)
        best = None
        for s in cand:
            hit = s.prefix_hit(request.rid) if s.prefix_hit is not None else (0,)
            h = min((hit[0] + self.lower_tier_credit * sum(hit[1:])) / prompt, 1.0)
            held = s.kv_held_blocks if s.kv_held_blocks is not None else s.kv_used_blocks
            parts = (self.hit_weight * h, -self.queue_weight * s.load / top,
                     -self.kv_weight * held / max(s.kv_total_blocks, 1))
            score = sum(parts)
            if best is None or score > best[0] + 1e-12:
                best = (score, s, hit, parts)
        score, s, hit, parts = best
        return Decision(s.wid, f"score {score:.3f} = hit {parts[0]:.3f} ({hit[0]} HBM + "
                               f"{sum(hit[1:])} lower-tier tokens) {parts[1]:+.3f} queue "
                               f"({s.load}) {parts[2]:+.3f} kv; {len(cand)} of "
                               f"{len(snapshots)} within the load guard")
