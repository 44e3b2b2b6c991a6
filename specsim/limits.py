"""Refuse runs that cannot fit in memory, before allocating anything big.

A run holds every request as a row of numpy columns (``requests.RequestTable``: 23 int64 /
float64 columns and two int8 ones, ~190 bytes), the trace it came from, the
``requests.csv`` frame built at the end and the summary's temporaries: about 0.5 KB per
request measured on ``scenarios/chat.yaml`` (peak RSS, 1k vs 50k requests), budgeted
here at 1 KB. The iteration log (12 float64 columns per iteration, a doubling buffer,
then a DataFrame copy) adds about 6.5 KB per request on the same scenario (~23
iterations per request), budgeted at 7 KB. Each worker (its SimPy process, kernel,
scheduler, KV allocator and ledger) takes ~3-4 KB, budgeted at 5 KB.

The budget is 80% of the memory available now (``MemAvailable`` in ``/proc/meminfo``,
capped by a cgroup limit when there is one; half the physical memory where neither can
be read). ``SPECSIM_MEMORY_LIMIT_GB`` overrides it. These are estimates for refusing the
absurd (a typo'd rate, a fleet of ten million devices) with a one-line error instead of a
MemoryError minutes later; they do not promise that a run under the budget fits.
"""

from __future__ import annotations

import os
from pathlib import Path

from specsim.errors import ScenarioError

REQUEST_BYTES = 1024  # request table + trace + requests.csv frame + summary temporaries
ITERATION_BYTES_PER_REQUEST = 7 * 1024  # the iteration log, per request (chat.yaml: ~23 rows)
WORKER_BYTES = 5 * 1024  # one worker's Python objects
BUDGET_SHARE = 0.8  # of the memory available now
FALLBACK_BYTES = 8 * 1024**3  # when nothing can be read
ENV = "SPECSIM_MEMORY_LIMIT_GB"


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_available() -> int | None:
    """Room left under a cgroup v2 (or v1) memory limit, if this process has one."""
    for limit_file, usage_file in (
            ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
            ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
             "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            raw = Path(limit_file).read_text().strip()
            if raw == "max":
                return None
            limit = int(raw)
            if limit >= 1 << 60:  # v1 reports "no limit" as a huge number
                return None
            return max(limit - int(Path(usage_file).read_text().strip()), 0)
        except (OSError, ValueError):
            continue
    return None


def _physical() -> int | None:
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def memory_budget() -> tuple[int, str]:
    """Bytes a run may use, and where the figure comes from (for messages)."""
    env = os.environ.get(ENV)
    if env is not None and env.strip():
        try:
            gb = float(env)
        except ValueError:
            gb = float("nan")
        if not (gb > 0 and gb != float("inf")):
            raise ScenarioError(f"{ENV}: expected a positive number of GB, got {env!r}")
        return int(gb * 1e9), f"allowed by {ENV}"
    avail = [a for a in (_meminfo_available(), _cgroup_available()) if a is not None]
    if avail:
        return int(min(avail) * BUDGET_SHARE), "available"
    phys = _physical()
    if phys:
        return int(phys * 0.5), "allowed (half the physical memory)"
    return FALLBACK_BYTES, "assumed available"


def _gb(n: float) -> str:
    gb = n / 1e9
    return f"{gb:,.0f} GB" if gb >= 100 else f"{gb:.3g} GB"


def _hint(where: str) -> str:
    return "" if ENV in where else f" (the limit can be overridden with {ENV})"


def request_bytes(n_requests: int, *, record_iterations: bool = True) -> int:
    """Estimated bytes a run of ``n_requests`` requests needs."""
    per = REQUEST_BYTES + (ITERATION_BYTES_PER_REQUEST if record_iterations else 0)
    return int(n_requests) * per


def check_requests(n_requests: int, key: str, *, record_iterations: bool = True) -> None:
    """Raise ScenarioError naming ``key`` when ``n_requests`` would not fit in memory.

    Call it before allocating per-request arrays (the synthetic generator: before drawing
    arrivals; the engine: after the trace is built, before the request table).
    """
    need = request_bytes(n_requests, record_iterations=record_iterations)
    budget, where = memory_budget()
    if need <= budget:
        return
    tip = "lower it (or set workload.max_requests)"
    if record_iterations and request_bytes(n_requests, record_iterations=False) <= budget:
        tip += ", or set simulation.record_iterations: false (~1 KB per request)"
    per = "~8 KB per request with the iteration log" if record_iterations else \
        "~1 KB per request"
    raise ScenarioError(f"{key}: {int(n_requests):,} requests need ~{_gb(need)} of memory "
                        f"({per}), more than the {_gb(budget)} {where}; {tip}{_hint(where)}")


def check_workers(n_workers: int, key: str = "hardware.count", *,
                  devices: int | None = None) -> None:
    """Raise ScenarioError naming ``key`` when ``n_workers`` workers would not fit in memory.

    Call it before building the workers; ``devices`` (the fleet size) only words the message.
    """
    need = int(n_workers) * WORKER_BYTES
    budget, where = memory_budget()
    if need <= budget:
        return
    fleet = f"{int(devices):,} devices -> " if devices is not None else ""
    raise ScenarioError(f"{key}: {fleet}{int(n_workers):,} workers need ~{_gb(need)} of memory "
                        f"(~5 KB each), more than the {_gb(budget)} {where}; use fewer "
                        f"devices or a larger tensor_parallel{_hint(where)}")
