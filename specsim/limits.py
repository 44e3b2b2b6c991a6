"""Refuse runs that cannot fit in memory, before allocating anything big.

A run holds every request as a row of numpy columns (``requests.RequestTable``: 23 int64 /
float64 columns and two int8 ones, ~190 bytes), the trace it came from, the
``requests.csv`` frame built at the end and the summary's temporaries: about 0.5 KB per
request measured on ``scenarios/chat.yaml`` (peak RSS, 1k vs 50k requests), budgeted
here at 1 KB. The iteration log (12 float64 columns per iteration, a doubling buffer,
then a DataFrame copy) adds about 6.5 KB per request on the same scenario (~23
iterations per request), budgeted at 7 KB. Each worker (its SimPy process, kernel and its
buffers, scheduler, KV allocator and ledger) takes ~6.3 KB with the numpy kernel and ~8.5 KB
with the compiled one (peak RSS, 5k-20k workers on ``chat.yaml``), budgeted at 10 KB; a
prefix cache adds ~3.6 KB per worker (budgeted 4 KB) and each KV tier below HBM ~0.75 KB
(budgeted 1 KB).

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
WORKER_BYTES = 10 * 1024  # one worker's Python objects and kernel buffers
PREFIX_CACHE_BYTES = 4 * 1024  # a worker's prefix cache (its page tables and LRU)
TIER_BYTES = 1024  # a worker's KV tier below HBM
#: the latest arrival a run simulates: over three years; float64 time there still resolves
#: 15 ns, while at 1e300 s adding a step's duration changes nothing
MAX_ARRIVAL_S = 1e8
BUDGET_SHARE = 0.8  # of the memory available now
FALLBACK_BYTES = 8 * 1024**3  # when nothing can be read
ENV = "SPECSIM_MEMORY_LIMIT_GB"
#: workers one run may simulate, whatever the memory budget: 1,000,000 workers fit a large
#: machine's memory yet take minutes to build and step. Assumed: 100,000, about the largest
#: single GPU clusters announced (xAI's Colossus: 100,000 H100s, 2024); a real inference
#: fleet is served as many far smaller deployments, each a scenario of its own
MAX_WORKERS = 100_000
WORKERS_ENV = "SPECSIM_MAX_WORKERS"


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


def gb(n: float) -> str:
    """Bytes as a message shows them: "1.5 GB", "4,096 GB"."""
    gb = n / 1e9
    return f"{gb:,.0f} GB" if gb >= 100 else f"{gb:.3g} GB"


def hint(where: str) -> str:
    """The override named in a refusal, unless the budget already came from it."""
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
    raise ScenarioError(f"{key}: {int(n_requests):,} requests need ~{gb(need)} of memory "
                        f"({per}), more than the {gb(budget)} {where}; {tip}{hint(where)}")


def worker_bytes(*, prefix_cache: bool = False, tiers: int = 0) -> int:
    """Estimated bytes one worker holds: its objects and buffers, its prefix cache, its
    KV tiers below HBM."""
    return WORKER_BYTES + (PREFIX_CACHE_BYTES if prefix_cache else 0) + int(tiers) * TIER_BYTES


def check_workers(n_workers: int, key: str = "hardware.count", *,
                  devices: int | None = None, prefix_cache: bool = False,
                  tiers: int = 0) -> None:
    """Raise ScenarioError naming ``key`` when ``n_workers`` workers would not fit in memory,
    or are more than ``max_workers()`` (a run that fits can still take minutes to build).

    Call it before building the workers; ``devices`` (the fleet size) only words the message;
    ``prefix_cache`` and ``tiers`` (KV tiers below HBM) add to each worker's state.
    """
    per = worker_bytes(prefix_cache=prefix_cache, tiers=tiers)
    need = int(n_workers) * per
    budget, where = memory_budget()
    fleet = f"{int(devices):,} devices -> " if devices is not None else ""
    if need > budget:
        counted = f"~{WORKER_BYTES // 1024} KB each" + (
            f" + ~{PREFIX_CACHE_BYTES // 1024} KB of prefix cache" if prefix_cache else "") + (
            f" + ~{TIER_BYTES // 1024} KB per KV tier x {int(tiers)}" if tiers else "")
        raise ScenarioError(f"{key}: {fleet}{int(n_workers):,} workers need ~{gb(need)} of "
                            f"memory ({counted}), more than the {gb(budget)} {where}; use "
                            f"fewer devices or a larger tensor_parallel{hint(where)}")
    most = max_workers()
    if n_workers > most:
        set_by = f"set by {WORKERS_ENV}" if most != MAX_WORKERS else "the default, assumed"
        raise ScenarioError(f"{key}: {fleet}{int(n_workers):,} workers, more than the "
                            f"{most:,} one run simulates ({set_by}); use fewer devices or a "
                            f"larger tensor_parallel, or set {WORKERS_ENV} higher if it is "
                            "meant")


def max_workers() -> int:
    """Workers a run may hold: ``SPECSIM_MAX_WORKERS`` when set (a positive whole number,
    read as safe_read reads every cap's variable), else ``MAX_WORKERS``."""
    from specsim import safe_read

    return safe_read.limit(safe_read.Cap(WORKERS_ENV, MAX_WORKERS, "workers",
                                         "workers one run simulates"))


# ---------------------------------------------------------------------------- shapes
def check_tensor_parallel(tp: int, n_heads: int, n_kv_heads: int, model: str,
                          key: str = "hardware.tensor_parallel",
                          linear_heads: tuple[int, int] | None = None) -> None:
    """Raise ScenarioError naming ``key`` when ``tp`` devices cannot split the model's
    attention: vLLM's rule (``ModelConfig.verify_with_parallel_config``: the attention heads
    divide evenly; ``QKVParallelLinear``: the KV heads divide evenly, or, with more devices
    than KV heads, each KV head is copied to a whole number of devices); ``linear_heads``,
    a linear-attention layer's (key, value) heads: vLLM's Gated DeltaNet layer shards both
    over the group, so both must divide evenly."""
    tp, heads, kv = int(tp), int(n_heads), int(n_kv_heads)
    if linear_heads is not None and any(int(h) % tp for h in linear_heads):
        k_h, v_h = linear_heads
        raise ScenarioError(f"{key}: {model}'s linear-attention layers have {k_h} key and "
                            f"{v_h} value heads, which {tp} devices cannot split evenly")
    if heads % tp:
        raise ScenarioError(f"{key}: {model} has {heads} attention heads, which {tp:,} devices "
                            f"cannot split evenly; expected a divisor of {heads} "
                            f"({_divisors(heads)})")
    if kv and (kv % tp if tp < kv else tp % kv):
        raise ScenarioError(f"{key}: {model} has {kv} KV heads, which {tp:,} devices cannot "
                            f"split evenly (nor copy to a whole number of devices each); "
                            f"expected a divisor or a multiple of {kv}")


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)
