"""Verification-pass microbenchmark: batch x query tokens x context, plus the device's ceilings.

A verification pass is a forward pass of q = k + 1 new tokens per sequence over a KV cache of c
tokens, with logits for every position. We time it with warm-up and repeats and keep medians
(CPU timings have a long right tail). The same code runs on CUDA, synchronising before each
clock read. The device's "datasheet" figures for a CPU are measured here too: a large matmul
for the peak FLOP/s and a large copy for the memory bandwidth.
"""

from __future__ import annotations

import itertools
import math
import os
import platform
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from ..roofline import attention_area
from .model import ModelConfig, Transformer

DTYPES = {"float32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def sync(device: torch.device | str) -> None:
    """Wait for queued kernels so a host clock read brackets the work (no-op on CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def time_call(fn: Callable[[], object], device: torch.device | str, warmup: int,
              repeats: int) -> np.ndarray:
    """Seconds per call for ``repeats`` calls after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    sync(device)
    out = np.empty(repeats)
    cuda = torch.device(device).type == "cuda"
    for r in range(repeats):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize(device)
            out[r] = start.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            fn()
            out[r] = time.perf_counter() - t0
    return out


Point = tuple[int, int, int, int]  # (layers, batch, q, ctx)


@dataclass(frozen=True)
class Grid:
    """The verification shapes to time: every layers x batch x q x ctx combination.

    ``settle``: a point is done early once it has two clean samples within this relative
    spread (0: always ``repeats`` clean samples).
    """

    batch: tuple[int, ...]
    q: tuple[int, ...]
    ctx: tuple[int, ...]
    layers: tuple[int, ...]
    warmup: int = 2
    repeats: int = 5
    settle: float = 0.0

    def points(self) -> list[Point]:
        return list(itertools.product(self.layers, self.batch, self.q, self.ctx))


# Full grid: q = k + 1 up to 17 (k = 16); the target's depth and a shallow one, so per-layer
# and per-pass overheads separate; contexts cover the prompts the end-to-end check runs.
FULL_GRID = Grid(batch=(1, 2, 4, 8), q=(1, 2, 3, 5, 9, 17), ctx=(32, 256, 1024), layers=(30, 12),
                 warmup=1, repeats=5)
# Quick grid: 24 of the full grid's points spanning its regimes: decode and short verify
# passes (overhead/memory-bound), 68-token passes (compute-bound linear layers), context 32
# and 1024 (attention negligible / heavy, so attention's own efficiency is identified), both
# depths. Chosen by refitting subsets of the committed full-grid measurements with 12%
# noise added: it predicted all 144 points with a median error of ~7% (the full grid: 6%),
# and never fell into the memory-bound reading of this overhead-bound CPU. Repeats buy
# more than points on a noisy machine; a point stops at 2 samples within 2%.
QUICK_GRID = Grid(batch=(1, 4), q=(1, 3, 17), ctx=(32, 1024), layers=(30, 12), warmup=1,
                  repeats=5, settle=0.02)


def verification_shape(batch: int, q: int, ctx: int) -> dict[str, float]:
    """Roofline aggregates of a pass (the simulator's convention: token j attends c + j + 1)."""
    return {"tokens": float(batch * q), "qc": float(batch * attention_area(q, ctx)),
            "ctx_sum": float(batch * ctx), "logits": float(batch * q)}


class Contention:
    """CPU time other processes used while we timed something (Linux /proc; else unknown).

    A shared machine's other jobs inflate CPU timings several-fold for a moment; samples taken
    while others were busy are set aside and re-taken, so a burst of load cannot become the
    median.
    """

    def __init__(self) -> None:
        self.enabled = Path("/proc/stat").is_file() and Path("/proc/self/stat").is_file()
        self.ncpu = os.cpu_count() or 1
        self.hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def snapshot(self) -> tuple[int, int]:
        if not self.enabled:
            return (0, 0)
        with open("/proc/stat") as fh:
            vals = [int(v) for v in fh.readline().split()[1:]]
        busy = sum(vals) - vals[3] - (vals[4] if len(vals) > 4 else 0)
        with open("/proc/self/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return busy, int(fields[11]) + int(fields[12])

    def others_cores(self, sample_s: float = 1.0) -> float:
        """Cores other processes kept busy over the next ``sample_s`` seconds (0: unknown)."""
        if not self.enabled:
            return 0.0
        a, t0 = self.snapshot(), time.perf_counter()
        time.sleep(sample_s)
        return self.other_share(a, self.snapshot(), time.perf_counter() - t0) * self.ncpu

    def other_share(self, before: tuple[int, int], after: tuple[int, int], wall_s: float) -> float:
        """Share of the machine's cores others used in the interval (0 when unknown)."""
        if not self.enabled or wall_s <= 0:
            return 0.0
        other = (after[0] - before[0]) - (after[1] - before[1])
        if other < 2:  # one tick of jitter is not load
            return 0.0
        return other / self.hz / (wall_s * self.ncpu)


def reference_time(model: Transformer, repeats: int = 7, ctx: int = 64) -> float:
    """Median seconds of one decode pass (batch 1, q 1): a speed index of the machine now.

    Timed before and after each phase, it shows how much a shared machine's speed drifted
    between the grid and the end-to-end runs (their ratio is reported, not corrected for).
    """
    cache = model.new_cache(1, ctx + 2)
    tok = torch.zeros((1, 1), dtype=torch.long, device=model.device)

    def one() -> None:
        cache.length = ctx
        model(tok, cache)

    return float(np.median(time_call(one, model.device, warmup=2, repeats=repeats)))


def choose_threads(requested: int | None = None, sample_s: float = 1.0,
                   most: int = 2) -> tuple[int, dict]:
    """CPU threads for torch, and why: ``requested``, else min(``most``, cores) less the
    cores other processes are using now (at least 1).

    Torch's threads wait for each other at every op: when one of them shares a core with
    another process, each op waits for its time slice, and passes run 5-20x slower and
    erratic (measured here: a 45 ms decode pass took 350 ms with two threads on two cores
    and one busy process; with one thread it took 70 ms, steadily). So a busy machine is
    timed with the cores it has free; the profile records the thread count it describes.
    """
    cores = os.cpu_count() or 1
    if requested:
        return requested, {"threads": requested, "cores": cores, "why": "--threads"}
    default = min(most, cores)
    others = Contention().others_cores(sample_s)
    free = max(1, min(default, int(math.floor(cores - others + 0.5))))
    why = (f"min({most}, cores)" if free == default else
           f"other processes were using {others:.1f} of {cores} cores: {free} of the default "
           f"{default} threads (pass --threads {default} to insist)")
    return free, {"threads": free, "cores": cores, "others_busy_cores": round(others, 2),
                  "why": why}


def load_average() -> float | None:
    """1-minute load average per core (recorded in the profile; high means noisy timings)."""
    try:
        return round(os.getloadavg()[0] / (os.cpu_count() or 1), 3)
    except OSError:
        return None


def run_grid(cfg: ModelConfig, grid: Grid, dtype: str = "bf16", device: str = "cpu",
             seed: int = 0, progress: Callable[[str], None] | None = None,
             max_other_share: float = 0.10, budget_s: float | None = None) -> pd.DataFrame:
    """Median seconds of each verification pass in ``grid`` (random weights of shape ``cfg``).

    Random weights time the same as real ones. The model is built once at the deepest depth
    and truncated for the shallower ones, so each depth reads its own layers' weights. Each
    point is timed once per round and rounds visit the points in a fresh random order.

    On CPU, a sample during which other processes took cores this run's threads needed
    (more than the spare cores plus ``max_other_share`` of all cores) is set aside, and
    extra rounds top up points short of ``repeats`` clean samples (up to three times the
    rounds). A point is done early once two clean samples agree within ``grid.settle``.
    With ``budget_s``, no round after the second starts once the grid has run that long;
    ``attrs["timing"]`` says how many rounds ran, why they stopped and how many points were
    left short of clean samples. The median is over clean samples (all samples if none).
    """
    t_start = time.perf_counter()
    tdtype = DTYPES[dtype]
    gen = torch.Generator(device="cpu").manual_seed(seed)
    rng = np.random.default_rng(seed)
    deep = cfg.truncated(max(grid.layers)) if max(grid.layers) < cfg.n_layers else cfg
    full = Transformer(deep, dtype=tdtype, device=device, seed=seed)
    models = {n: (full if n == deep.n_layers else full.truncated(n)) for n in grid.layers}
    max_len = max(grid.ctx) + max(grid.q) + 1
    caches = {b: full.new_cache(b, max_len) for b in grid.batch}
    for cache in caches.values():
        # Random values in the whole (contiguous) buffers at once: KVCache.fill_random
        # fills a strided slice, which took seconds per cache on CPU. Timing ignores values.
        cache.k.normal_(generator=gen)
        cache.v.normal_(generator=gen)
        cache.length = max(grid.ctx)
    points = grid.points()
    inputs = {(b, q): torch.randint(0, cfg.vocab_size, (b, q), generator=gen).to(device)
              for b in grid.batch for q in grid.q}
    cont = Contention() if torch.device(device).type == "cpu" else None
    # Other processes may use the cores our threads leave free without slowing us.
    spare = max(0, cont.ncpu - torch.get_num_threads()) if cont else 0
    allowed = (spare + max_other_share * cont.ncpu) / cont.ncpu if cont else 1.0

    def one_pass(point: Point) -> None:
        n, b, q, c = point
        caches[b].length = c
        models[n](inputs[(b, q)], caches[b])

    def done(p: Point) -> bool:
        got = clean[p]
        if len(got) >= grid.repeats:
            return True
        return (grid.settle > 0 and len(got) >= 2
                and max(got) <= min(got) * (1.0 + grid.settle))

    ref_before = reference_time(full)
    clean: dict[Point, list[float]] = {p: [] for p in points}
    dirty: dict[Point, list[float]] = {p: [] for p in points}
    for _ in range(grid.warmup):
        for p in points:
            one_pass(p)
    rounds, stopped = 0, None
    for r in range(3 * grid.repeats):
        todo = [p for p in points if not done(p)]
        if not todo:
            break
        if r >= grid.repeats and not cont:
            break
        if budget_s is not None and r >= 2 and time.perf_counter() - t_start > budget_s:
            stopped = f"time budget ({budget_s:g} s) spent"
            break
        for i in rng.permutation(len(todo)):
            p = todo[i]
            before = cont.snapshot() if cont else (0, 0)
            secs = float(time_call(lambda p=p: one_pass(p), device, 0, 1)[0])
            share = cont.other_share(before, cont.snapshot(), secs) if cont else 0.0
            (clean if share <= allowed else dirty)[p].append(secs)
        rounds = r + 1
        if progress:
            progress(f"round {r + 1}: {len(todo)} points timed")
    ref_after = reference_time(full)
    rows = []
    for p in points:
        n, b, q, c = p
        secs = np.asarray(clean[p] or dirty[p])
        rows.append({"n_layers": n, "batch": b, "q": q, "ctx": c, **verification_shape(b, q, c),
                     "median_s": float(np.median(secs)), "min_s": float(secs.min()),
                     "max_s": float(secs.max()), "samples": int(secs.size),
                     "contended_samples": len(dirty[p]), "dtype": dtype, "device": device})
    df = pd.DataFrame(rows)
    df.attrs["reference_s"] = {"depth": deep.n_layers, "before": ref_before, "after": ref_after}
    short = [p for p in points if not done(p)]
    if stopped is None:
        stopped = (f"{rounds} rounds" if short else "every point has its clean samples")
    df.attrs["timing"] = {
        "rounds": rounds, "stopped": stopped, "elapsed_s": round(time.perf_counter() - t_start, 1),
        "budget_s": budget_s, "samples": int(sum(len(v) for v in clean.values())
                                             + sum(len(v) for v in dirty.values())),
        "contended_samples": int(sum(len(v) for v in dirty.values())),
        "points_short_of_clean_samples": len(short),
        "contention_limit_cores": round(allowed * cont.ncpu, 2) if cont else None}
    return df


# ---------------------------------------------------------------- the device's ceilings


def measure_peak_flops(dtype: str = "bf16", device: str = "cpu", n: int | None = None,
                       repeats: int = 3) -> float:
    """FLOP/s of a large square matmul: the practical compute ceiling (CPU "datasheet").

    Uses ``F.linear`` (x @ W^T), the layout every projection of the model uses; on CPU the
    BLAS path for x @ W is slower for bf16, and it is the model's path that matters.
    """
    tdtype = DTYPES[dtype]
    n = n or (2048 if torch.device(device).type == "cpu" else 8192)
    a = torch.randn(n, n, device=device).to(tdtype)
    b = torch.randn(n, n, device=device).to(tdtype)
    secs = time_call(lambda: F.linear(a, b), device, warmup=1, repeats=repeats)
    return 2.0 * n ** 3 / float(secs.min())


def measure_bandwidth(device: str = "cpu", mbytes: int = 256, repeats: int = 5) -> float:
    """Bytes/s of a large tensor copy (read + write counted): the memory ceiling."""
    n = mbytes * 2 ** 20 // 4
    src = torch.empty(n, device=device).normal_()
    dst = torch.empty_like(src)
    secs = time_call(lambda: dst.copy_(src), device, warmup=1, repeats=repeats)
    return 2.0 * n * 4 / float(secs.min())


def device_description(device: str = "cpu") -> str:
    """A one-line name of the device for the profile."""
    if torch.device(device).type == "cuda":
        return torch.cuda.get_device_name(device)
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{name}, {torch.get_num_threads()} threads"


def hardware_entry(name: str, peak_flops: float, bandwidth: float, dtype: str, device: str,
                   memory_bytes: float | None = None) -> dict:
    """An inline hardware mapping (catalog fields) for the measured device.

    The catalog keys its peaks by dtype family and requires ``bf16``; a CPU run in float32
    stores its float32 matmul ceiling under that key, and the notes say so.
    """
    if memory_bytes is None:
        memory_bytes = _memory_bytes(device)
    notes = (f"peak_tflops.bf16 is the measured {dtype} matmul ceiling of this device; "
             "hbm_* is main memory (copy bandwidth, read+write). Power and price are assumed "
             "placeholders, not measured.")
    return {
        "name": name, "kind": "cpu" if torch.device(device).type == "cpu" else "gpu",
        "vendor": "", "peak_tflops": {"bf16": round(peak_flops / 1e12, 6)},
        "hbm_gb": round(memory_bytes / 1e9, 3), "hbm_bw_gb_s": round(bandwidth / 1e9, 3),
        "interconnect": {"bw_gb_s": 10.0, "latency_us": 10.0, "name": "none (single device)"},
        "power_w": {"idle": 10.0, "max": 60.0}, "price_usd_per_hour": 0.1,
        "price_date": time.strftime("%Y-%m-%d"),
        "source": f"measured by specsim calibrate ({dtype} matmul, {device} copy)",
        "notes": notes,
    }


def _memory_bytes(device: str) -> float:
    if torch.device(device).type == "cuda":
        return float(torch.cuda.get_device_properties(device).total_memory)
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return 16e9


def dtypes_for(device: str) -> Iterable[str]:
    """Dtypes worth timing on ``device`` (bf16 first: the serving dtype)."""
    if torch.device(device).type == "cuda":
        return ("bf16", "fp16")
    return ("bf16", "float32")
