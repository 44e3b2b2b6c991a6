"""``workload.closed_loop``: N clients at a fixed concurrency instead of the trace's times.

The trace (a file or a generator) still supplies each request's lengths, class and tier, in
order; a client sends the next request when its previous one ends (finished or rejected)
plus a think time. The simulator runs it (``specsim.simulator.cluster.arrivals``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specsim.traces.distributions import Distribution, parse_distribution
from specsim.traces.spec import Section

MAX_CLIENTS = 1_000_000


@dataclass(frozen=True)
class ClosedLoopSpec:
    """Concurrent clients, their think time (seconds; None = 0) and a start-up ramp."""

    clients: int
    think_time: Distribution | None = None
    ramp_s: float = 0.0  # client i starts at i * ramp_s / clients


def parse_closed_loop(sec: Section, base_dir: Path) -> ClosedLoopSpec:
    clients = sec.integer("clients", required=True, minimum=1, maximum=MAX_CLIENTS)
    think: Any = sec.raw("think_time_s", 0.0)
    dist = parse_distribution(think, sec.key("think_time_s"), base_dir, integer=False, low=0.0)
    if dist.kind == "fixed" and float(dist.params["value"]) == 0.0:
        dist = None
    ramp = sec.number("ramp_s", 0.0, minimum=0.0, maximum=1e9)
    sec.finish()
    return ClosedLoopSpec(int(clients), dist, float(ramp))
