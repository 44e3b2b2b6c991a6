"""Routers: which worker an arriving request joins. Small policies behind one interface.

A router reads a read-only snapshot of every worker (queue depth, batch, KV use, free
blocks; taken after each worker has committed its iterations up to now) and the request's
features, and returns a ``Decision``: the worker and a short reason. A router that never
reads load declares ``reads_load = False`` and is given no snapshots (the workers then need
not commit anything to route).
"""

from __future__ import annotations

from dataclasses import dataclass

from specsim.simulator.registry import ROUTERS


@dataclass(frozen=True)
class RequestFeatures:
    """What a router may know about the request it routes."""

    rid: int
    prompt_tokens: int
    output_tokens: int
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


def make_router(name: str, n_workers: int) -> Router:
    return ROUTERS.get(name)(n_workers)
