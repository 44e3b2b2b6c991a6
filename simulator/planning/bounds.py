"""The size of a sweep or a plan, estimated and checked before anything runs.

A grid's size is a product (keys x values x seeds): five keys of ten values with ten seeds
are a million runs, and listing, validating or journalling them takes longer and more memory
than the person who typed them meant. So the count, the time and the memory are worked out
from the arithmetic alone -- no point is built, validated or listed first -- and a grid past
a limit is refused with one line that says what was counted:

- memory (the finished runs' rows held for the table, each worker process, and the biggest
  run's requests) must fit the budget of ``specsim.limits`` (``SPECSIM_MEMORY_LIMIT_GB``
  overrides it): going past it is a crash, not a choice;
- more than ``MAX_RUNS`` runs, or more than ``MAX_HOURS`` of estimated time, needs
  ``--yes``.

The time is an estimate from measured constants (below: numpy kernel, ``chat.yaml``), not a
promise: the compiled kernel is faster, a long-context or PD scenario slower.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specsim import limits
from specsim.errors import ScenarioError

MAX_RUNS = 100_000  # runs (sweep: points x seeds; plan: configurations x probes) without --yes
MAX_HOURS = 24.0  # estimated hours without --yes
#: seconds per simulated request: chat.yaml on the numpy kernel, 1,000 requests in 2.2 s
#: (300 in 0.74 s), measured on this project's 2-core machine
REQUEST_S = 0.002
#: seconds per run besides its requests (building the deployment, the trace, the summary)
RUN_S = 0.05
#: seconds to validate one point (schema, catalogs, its trace): 21 ms measured on
#: chat.yaml's 1,000 requests
VALIDATE_S = 0.025
#: bytes a finished run holds in the sweep's process until the table is written: its journal
#: row (~14 KB), table row (~7 KB), summary share (~2.5 KB) and grid entry (~1 KB), ~25 KB
#: measured on chat.yaml's 98 metrics; budgeted at 32 KB
ROW_BYTES = 32 * 1024
#: bytes a worker process takes before its run: Python, numpy, pandas, SimPy and specsim's
#: modules (~170 MB RSS measured), budgeted at 200 MB
PROCESS_BYTES = 200 * 1024**2
#: plan: probes of one configuration, growing the rate from qps/64 by doubling (7 at most)
GROWTH_PROBES = 7


@dataclass(frozen=True)
class Estimate:
    """What a sweep or plan will do, counted before it does it."""

    command: str  # "sweep" or "plan"
    counted: str  # how ``runs`` was counted, e.g. "5 x 10,000 x 100 seeds"
    runs: int
    seconds: float
    time_counted: str  # what the time is made of
    bytes: int
    memory_counted: str  # what the memory is made of

    def describe(self) -> str:
        return (f"{self.counted} = {self.runs:,} runs, estimated ~{hours(self.seconds)} "
                f"({self.time_counted}) and ~{limits.gb(self.bytes)} of memory "
                f"({self.memory_counted})")


def hours(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    h = seconds / 3600
    return f"{h:,.0f} h" if h < 1e6 else f"{h:.2g} h"


def grid_runs(lengths: list[int], zipped: bool, seeds: int) -> tuple[int, str]:
    """Runs of a sweep grid and how they were counted ("3 x 4 x 2 seeds"), without listing
    the points."""
    if zipped and lengths:
        points, shown = lengths[0], f"{lengths[0]:,} zipped points"
    else:
        points = math.prod(lengths)
        shown = " x ".join(f"{n:,}" for n in lengths) or "1 point"
    return points * seeds, f"{shown} x {seeds:,} seed(s)"


def sweep_estimate(lengths: list[int], zipped: bool, seeds: int, jobs: int,
                   requests_per_run: int, fleet_bytes: int = 0) -> Estimate:
    """A sweep's runs, time and memory: ``lengths`` are each --set's value count;
    ``requests_per_run`` and ``fleet_bytes`` (its workers' state, ``limits.worker_bytes``
    each) are point 0's, the unit of the estimate."""
    runs, counted = grid_runs(lengths, zipped, seeds)
    points = runs // seeds
    validations = sum(lengths) + (points if len(lengths) > 1 else 0)
    per_run = RUN_S + requests_per_run * REQUEST_S
    workers = max(min(jobs, runs), 1)
    seconds = validations * VALIDATE_S + runs * per_run / workers
    need = runs * ROW_BYTES + workers * (PROCESS_BYTES + fleet_bytes + limits.request_bytes(
        requests_per_run, record_iterations=False))
    return Estimate(
        "sweep", counted, runs, seconds,
        f"{validations:,} validations at ~{VALIDATE_S * 1e3:.0f} ms, then runs of point 0's "
        f"{requests_per_run:,} requests at ~{per_run:.2g} s each on {workers} process(es)",
        need, f"~{ROW_BYTES // 1024} KB per run's row, {workers} process(es) of "
              f"~{PROCESS_BYTES // 1024**2} MB plus their runs' requests and workers")


def bisection_probes(rel_tol: float) -> int:
    """Probes to narrow a 2x bracket to within ``1 + rel_tol`` (planning.plan's loop)."""
    return max(math.ceil(math.log2(math.log(2.0) / math.log1p(rel_tol))), 0)


def probe_requests(rate: float, requests: int, duration_s: float) -> int:
    """Requests one probe simulates at ``rate`` (planning.plan.Planner.probe)."""
    return max(requests, math.ceil(min(rate * duration_s, 1e18)))


def plan_estimate(configs: int, qps: float, requests: int, duration_s: float,
                  rel_tol: float) -> Estimate:
    """A plan's probes, time and memory, at most: every configuration grows its rate up
    to ``qps`` before the bisection (one that fails sooner takes less)."""
    growth = [qps / 64.0 * 2**i for i in range(GROWTH_PROBES - 1)] + [qps]
    tail = bisection_probes(rel_tol) + 1  # the bisection, then the sized operating point
    per_config = len(growth) + tail
    top = probe_requests(qps, requests, duration_s)
    req = sum(probe_requests(r, requests, duration_s) for r in growth) + tail * top
    runs = configs * per_config
    seconds = configs * (per_config * RUN_S + req * REQUEST_S)
    need = PROCESS_BYTES + limits.request_bytes(top, record_iterations=False)
    return Estimate(
        "plan", f"{configs:,} configuration(s) x up to {per_config} probes", runs, seconds,
        f"up to {req:,} simulated requests per configuration at ~{REQUEST_S * 1e3:.0f} ms; "
        f"a probe at --qps {qps:g} simulates {top:,}", need,
        f"this process (~{PROCESS_BYTES // 1024**2} MB) and the largest probe's {top:,} "
        "requests at ~1 KB each")


def check(est: Estimate, yes: bool = False) -> None:
    """Refuse (one line) an estimate past the memory budget, or past MAX_RUNS / MAX_HOURS
    without ``yes``."""
    budget, where = limits.memory_budget()
    if est.bytes > budget:
        raise ScenarioError(f"{est.command}: {est.describe()}: more than the "
                            f"{limits.gb(budget)} {where}; make the grid smaller"
                            f"{limits.hint(where)}")
    if yes:
        return
    if est.runs > MAX_RUNS:
        raise ScenarioError(f"{est.command}: {est.describe()}: more than the {MAX_RUNS:,} runs "
                            "allowed without --yes; make the grid smaller or pass --yes")
    if est.seconds > MAX_HOURS * 3600:
        raise ScenarioError(f"{est.command}: {est.describe()}: longer than the {MAX_HOURS:g} h "
                            "allowed without --yes; make the grid smaller or pass --yes")
