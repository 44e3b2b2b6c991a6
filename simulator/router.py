"""Routers: which worker an arriving request joins. Small policies behind one interface."""

from __future__ import annotations

from .errors import ScenarioError


class Router:
    name = "router"

    def __init__(self, workers: list) -> None:
        self.workers = workers

    def pick(self, rid: int):
        raise NotImplementedError


class RoundRobin(Router):
    name = "round_robin"

    def __init__(self, workers: list) -> None:
        super().__init__(workers)
        self._next = 0
        self.assignment: dict[int, int] | None = None  # precomputed by the simulation

    def pick(self, rid: int):
        if self.assignment is not None:
            return self.workers[self.assignment[rid]]
        w = self.workers[self._next]
        self._next = (self._next + 1) % len(self.workers)
        return w


class LeastLoaded(Router):
    """The worker with the fewest running + queued requests (lowest index on ties)."""

    name = "least_loaded"

    def pick(self, rid: int):
        return min(self.workers, key=lambda w: w.load)


ROUTERS = {"round_robin": RoundRobin, "least_loaded": LeastLoaded}


def make_router(name: str, workers: list) -> Router:
    if name not in ROUTERS:
        raise ScenarioError(f"router.policy: expected one of {', '.join(ROUTERS)}, got {name!r}")
    return ROUTERS[name](workers)
