"""Speculative decoding under load: simulated speedup vs batch size and vs QPS, next to
the published load curves (shared/REFERENCES-speculation-load.md, A1-A4 and A7).

Everything below is the simulator itself (``specsim.run_scenario`` for the load curves, the
``Deployment``'s executor for the per-step prices), at whatever calibration is the default
for the hardware (a bundled profile named after it, else the uncalibrated default; the name
and values are printed). Targets: Llama-3.1-8B on 1x H100-SXM, Llama-3.1-70B on 4x H100-SXM
(TP4), and for the long context also Llama-3.1-8B on 8x H100-SXM (TP8, MagicDec's setup, the
only one where 64-128 sequences of 16-32K tokens fit in the KV cache). Drafters, k = 4:

- draft_model: a separate small model (Llama-3.2-1B for Llama-3.1-8B, Llama-3.1-8B for
  Llama-3.1-70B), acceptance a *stated* i.i.d. alpha 0.75 (assumed for these pairs; it is
  Leviathan et al.'s T5-XXL/T5-small EnDe figure, shared/REFERENCES.md);
- eagle3: bundled profiles ``llama3.1-8b-eagle3`` / ``llama3.3-70b-eagle3`` (EAGLE-3 paper
  Table 1, MT-bench class ``chat``, tau at k=8 solved for alpha and applied at k=4);
- ngram: bundled profile ``vicuna-7b-specbench-prompt-lookup`` (Spec-Bench PLD, tau 1.75 at
  k=10, applied at k=4), lookup on every step (match_rate 1.0), 20 us of CPU per step;
- selfspec (MagicDec's setup only): MagicDec's drafter, the target itself reading a 512-token
  StreamingLLM KV, k = 3, stated alpha 0.8 (assumed). No catalog drafter bounds its KV, so
  its pass is priced by the target's own per-op model at each batch and enters as
  ``draft_cost.seconds_per_token`` (so it is left out of the open-loop QPS runs).

Per (target, context):
1. vs batch, closed loop with ``clients = batch`` and no think time, stopped at a horizon of
   3/4 of the baseline's time to serve ``waves x batch`` requests (so both runs are measured
   at full concurrency, not while draining): ``thr x`` = output tokens/s with speculation
   over without, ``TPOT x`` = mean TPOT (requests finished by the horizon) without over
   with; both include the prefills that closed-loop clients keep sending, which ride in the
   same iterations (chunked prefill). ``dec x`` is a fixed batch: ``batch`` requests of the
   mean lengths sent together, prefilled in one pass, then decoded in lock-step: the
   decode-phase TPOT ratio (what MagicDec reports); '-' where the batch does not fit in the
   KV cache. ``batch~`` is the time-weighted mean number of running sequences of the
   baseline (below ``batch`` when the KV cache is full).
2. the executor's price of one pure-decode step at the mean context: decode (k=0) vs
   speculative step (draft + verify), and tau x decode / step, the speedup the cost model
   alone gives at that batch;
3. vs QPS, open-loop Poisson at fractions of the baseline's capacity (its closed-loop
   throughput with 256 clients), through overload: TPOT and E2E ratios; ``q`` marks a run
   whose queue keeps growing (the last fifth of its requests waits over 5x longer for the
   first token than the first fifth, and over 1 s).
Then a shape table: speedup at the smallest batch, at 32, at the largest, and where it
crosses 1, for the simulator and for the published curves, with sources; and A7's cost of
speculation configured with nothing drafted next to the simulator's. Last, each published
curve point by point against its targets (``CURVES``): by the executor's step price, except
A1 (DeepSeek-V3 + its MTP layer, k=2, on 8x MI300X TP8, SGLang), which is compared in its own
metric: mean E2E latency without / with, from closed-loop runs at each max concurrency.

    python benchmarks/spec_load.py [--quick] [--model 8b|70b|all] [--context short|long|both]
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from specsim import run_scenario
from specsim.cost_models.roofline import attention_area
from specsim.simulator.cluster.engine import Deployment, load_scenario
from specsim.simulator.execution.executor import Executor
from specsim.yamlio import load_file

K = 4
SEED = 7
CHAT_SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "chat.yaml"


@dataclass(frozen=True)
class Setup:
    key: str
    label: str
    model: str
    tp: int
    draft_model: str
    eagle_profile: str
    hardware: str = "H100-SXM"
    weights: str = "bf16"
    engine: str = "vllm"  # "gpt-fast": see engine_profile()
    activations: str = "bf16"
    memory_fraction: float | None = None  # hardware.memory_fraction (None: specsim's default)


SETUPS = {
    "8b": Setup("8b", "Llama-3.1-8B, 1x H100-SXM", "Llama-3.1-8B", 1, "Llama-3.2-1B",
                "llama3.1-8b-eagle3"),
    "70b": Setup("70b", "Llama-3.1-70B, 4x H100-SXM TP4", "Llama-3.1-70B", 4, "Llama-3.1-8B",
                 "llama3.3-70b-eagle3"),
    # MagicDec's setup (A3): room in the KV cache for 128 sequences of 32K tokens
    "8b-tp8": Setup("8b-tp8", "Llama-3.1-8B, 8x H100-SXM TP8 (MagicDec's setup)", "Llama-3.1-8B",
                    8, "Llama-3.2-1B", "llama3.1-8b-eagle3"),
}


@dataclass(frozen=True)
class Context:
    key: str
    prompt: tuple[int, int]  # uniform low, high
    output: tuple[int, int]
    # lognormal lengths (sigma of prompt, of output; mean = the pair's value, cut at ``cap``)
    lognormal: tuple[float, float] | None = None
    cap: tuple[int, int] = (8000, 4000)

    @property
    def prompt_mean(self) -> int:
        return sum(self.prompt) // 2

    @property
    def output_mean(self) -> int:
        return sum(self.output) // 2

    def label(self) -> str:
        return (f"{self.key} context: prompts U[{self.prompt[0]}, {self.prompt[1]}], outputs "
                f"U[{self.output[0]}, {self.output[1]}] tokens")


CONTEXTS = {
    "short": Context("short", (200, 600), (192, 320)),
    "long": Context("long", (16000, 32000), (192, 320)),
}

DRAFTERS = ("draft_model", "eagle3", "ngram")
SHORT = {"draft_model": "draft", "eagle3": "eagle3", "ngram": "ngram", "selfspec": "selfspec"}
STREAMING_KV = 512  # MagicDec's self-speculation reads a StreamingLLM KV of 256-512 tokens
GAMMA = 3  # MagicDec's best draft length at batch 32-64


_ENGINE_DIR: list[Path] = []


def engine_profile(setup: Setup) -> str | None:
    """The calibration a setup's engine runs with: None (the hardware's bundled profile, whose
    engine stack is fitted to vLLM: CUDA graphs, its custom all-reduce) or, for gpt-fast
    (MagicDec's engine, torch.distributed NCCL all-reduce), the bundled profile with the
    operator tables' per-layer floor and NCCL all-reduce latency (Vidur's measured kernels,
    ``operator_tables_fitted``) in place of vLLM's; written to a temporary folder."""
    if setup.engine == "vllm":
        return None
    import tempfile

    import yaml

    from specsim.cost_models.calibration import _bundled_dir

    doc = yaml.safe_load(_bundled_dir().joinpath(f"{setup.hardware}.yaml").read_text())
    ops = doc["operator_tables_fitted"]
    doc["fitted"].update({k: ops[k] for k in ("allreduce_latency_s", "per_layer_overhead_s")})
    doc["name"] = f"{setup.hardware}-{setup.engine}"
    if not _ENGINE_DIR:
        _ENGINE_DIR.append(Path(tempfile.mkdtemp(prefix="specsim-spec-load-")))
    path = _ENGINE_DIR[0] / f"{doc['name']}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def drafters(setup: Setup, ctx: Context) -> tuple[str, ...]:
    """The drafters of a case: MagicDec's setup also gets MagicDec's drafter."""
    return DRAFTERS + (("selfspec",) if setup.key == "8b-tp8" else ())


def selfspec_seconds(setup: Setup, ctx: Context, batch: int) -> float:
    """One pass of the target over ``batch`` rows that read only STREAMING_KV tokens of KV:
    MagicDec's self-speculation draft, priced by the target's own per-op model. No catalog
    drafter bounds its KV, so it enters as ``draft_cost.seconds_per_token`` at this batch."""
    tm = deployment(setup, ctx, "none").target
    return float(tm.time(batch, batch * (STREAMING_KV + 1), batch * STREAMING_KV, batch))


def speculation(setup: Setup, method: str, ctx: Context | None = None,
                batch: int | None = None) -> tuple[dict[str, Any], str]:
    """The speculation section and the workload class its acceptance is given for.
    ``selfspec-G`` / ``eagle3-kK-aA`` name a draft length (and a stated alpha) other than
    the defaults, for the published curves' own settings."""
    if method.startswith("selfspec"):
        gamma = int(method.split("-")[1]) if "-" in method else GAMMA
        sec = selfspec_seconds(setup, ctx, batch) if batch else 1e-3
        return {"method": "draft_model", "k": gamma, "draft_cost": {"seconds_per_token": sec},
                "acceptance": {"alpha": 0.8}}, "chat"
    if method.startswith("mtp-"):  # mtp-kK-tTAU: the model's own MTP layer, a stated tau
        _, k, t = method.split("-")
        return {"method": "mtp", "k": int(k[1:]),
                "acceptance": {"tau": float(t[1:]), "at_k": int(k[1:])}}, "chat"
    if method.startswith("eagle3-"):
        _, k, a = method.split("-")
        return {"method": "eagle3", "k": int(k[1:]),
                "acceptance": {"alpha": float(a[1:])}}, "chat"
    if method == "none":
        return {"method": "none"}, "chat"
    if method == "draft_model":
        return {"method": method, "k": K, "drafter": setup.draft_model,
                "acceptance": {"alpha": 0.75}}, "chat"
    if method == "eagle3":
        return {"method": method, "k": K, "acceptance": {"profile": setup.eagle_profile}}, "chat"
    if method == "ngram":
        return {"method": method, "k": K, "ngram": {"match_rate": 1.0, "cpu_s_per_step": 20e-6},
                "acceptance": {"profile": "vicuna-7b-specbench-prompt-lookup"}}, "default"
    raise ValueError(method)


def scenario(setup: Setup, ctx: Context, method: str, *, n: int, clients: int | None = None,
             rate: float = 1.0, horizon: float | None = None, fixed: bool = False,
             token_budget: int = 8192, batch: int | None = None) -> dict[str, Any]:
    spec, cls = speculation(setup, method, ctx, batch)

    def lengths(i, lo_hi, mean):
        if fixed:
            return mean
        if ctx.lognormal:
            return {"distribution": "lognormal", "mean": mean, "sigma": ctx.lognormal[i],
                    "max": ctx.cap[i]}
        return {"distribution": "uniform", "low": lo_hi[0], "high": lo_hi[1]}

    wl: dict[str, Any] = {
        "synthetic": {"requests": n, "arrival": {"process": "poisson", "rate": rate},
                      "prompt_tokens": lengths(0, ctx.prompt, ctx.prompt_mean),
                      "output_tokens": lengths(1, ctx.output, ctx.output_mean)},
        "class": cls, "seed": SEED,
    }
    if clients is not None:
        wl["closed_loop"] = {"clients": clients}
    cal = engine_profile(setup)
    return {
        **({"calibration": cal} if cal else {}),
        "name": f"spec-load-{setup.key}-{ctx.key}-{method}", "seed": SEED,
        "hardware": {"accelerator": setup.hardware, "count": setup.tp,
                     "tensor_parallel": setup.tp,
                     **({"memory_fraction": setup.memory_fraction}
                        if setup.memory_fraction else {})},
        "model": setup.model,
        "quantization": {"weights": setup.weights, "activations": setup.activations,
                         "kv_cache": "bf16"},
        "speculation": spec,
        "scheduler": {"max_batch": 256, "token_budget": token_budget},
        "workload": wl,
        "simulation": {"progress": False, "horizon_s": horizon,
                       "record_iterations": True},
    }


def mean_batch(res, end: float) -> float:
    """Time-weighted mean of running sequences over the iterations."""
    it = res.iterations
    if it.empty:
        return 0.0
    t = it["time_s"].to_numpy()
    dt = np.diff(np.append(t, max(end, t[-1])))
    return float((it["batch_size"].to_numpy() * dt).sum() / max(dt.sum(), 1e-12))


def queue_growing(res) -> bool:
    """The wait keeps growing: the last fifth of the requests (by arrival) waits for its first
    token over 5x longer than the first fifth, and over a second."""
    r = res.requests
    r = r[r["status"] == "completed"].sort_values("arrival_s")
    if len(r) < 10:
        return False
    ttft = r["ttft_s"].to_numpy()
    n = len(ttft) // 5
    late, early = float(np.mean(ttft[-n:])), float(np.mean(ttft[:n]))
    return late > 5.0 * early and late > 1.0


# ------------------------------------------------------------------ measurements


def vs_batch(setup: Setup, ctx: Context, batches: list[int], waves: int) -> list[dict[str, Any]]:
    methods = ("none", *drafters(setup, ctx))
    rows = []
    for b in batches:
        n = waves * b
        probe = run_scenario(scenario(setup, ctx, "none", n=n, clients=b))
        horizon = 0.75 * probe.metrics["simulated_time_s"]
        pool = 6 * n  # enough that a faster speculative run never runs out of requests
        runs = {m: run_scenario(scenario(setup, ctx, m, n=pool, clients=b, horizon=horizon,
                                         batch=b))
                for m in methods}
        budget = max(8192, b * (ctx.prompt_mean + 1))
        fits = b <= min(fit(setup, ctx, m) for m in methods)
        static = {m: run_scenario(scenario(setup, ctx, m, n=b, clients=b, fixed=True,
                                           token_budget=budget, batch=b))
                  for m in methods} if fits else None
        base = runs["none"].metrics
        sbase = static["none"].metrics if static else None
        row = {"batch": b, "eff": mean_batch(runs["none"], horizon),
               "base_thr": base["throughput_output_tokens_per_s"],
               "base_tpot": base["tpot_s"]["mean"], "cal": base["calibration"],
               "cal_values": base["calibration_values"],
               "exhausted": any(r.metrics["requests_completed"] + r.metrics["requests_in_flight"]
                                >= pool for r in runs.values())}
        for m in methods[1:]:
            mm = runs[m].metrics
            dec = (sbase["tpot_s"]["mean"] / static[m].metrics["tpot_s"]["mean"] if static
                   else float("nan"))
            row[m] = {"thr": mm["throughput_output_tokens_per_s"]
                      / base["throughput_output_tokens_per_s"],
                      "tpot": base["tpot_s"]["mean"] / mm["tpot_s"]["mean"],
                      "dec": dec, "tau": mm["mean_acceptance_length"]}
        rows.append(row)
    return rows


_DEPLOYMENTS: dict[tuple[str, str, str, int | None], Deployment] = {}


def deployment(setup: Setup, ctx: Context, method: str, batch: int | None = None) -> Deployment:
    key = (setup.key, ctx.key, method, batch if method.startswith("selfspec") else None)
    if key not in _DEPLOYMENTS:
        sc, base, _ = load_scenario(scenario(setup, ctx, method, n=1, batch=batch))
        _DEPLOYMENTS[key] = Deployment(sc, base)
    return _DEPLOYMENTS[key]


def fit(setup: Setup, ctx: Context, method: str) -> int:
    """Sequences of the mean lengths (plus a draft's tentative tokens) the KV cache holds."""
    d = deployment(setup, ctx, method)
    per_seq = -(-(ctx.prompt_mean + ctx.output_mean + K + 1) // d.block_size) + 1
    return d.kv_blocks // per_seq


def step_price(d: Deployment, batch: int, context: float, k: int) -> tuple[float, float, float]:
    """(step s, draft s, verify s) of one pure-decode step: ``batch`` rows drafting ``k``."""
    ex = Executor(d.target, d.drafter, d.overlap_draft)
    kk = np.full((1, batch), k, np.int64)
    c = np.full((1, batch), float(context))
    q = d.drafter.verify_width(kk).astype(np.float64)
    tokens = q.sum(axis=1)
    z = np.zeros(1)
    dt, draft, verify = ex.price(kk, c, tokens, attention_area(q, c).sum(axis=1),
                                 c.sum(axis=1), tokens.copy(), z, z,
                                 np.array([float(batch)]), z)[:3]
    return float(dt[0]), float(draft[0]), float(verify[0])


def step_prices(setup: Setup, ctx: Context, batches: list[int]) -> list[dict[str, Any]]:
    off = deployment(setup, ctx, "none")
    context = ctx.prompt_mean + ctx.output_mean / 2
    rows = []
    for b in batches:
        t0 = step_price(off, b, context, 0)[0]
        row = {"batch": b, "decode": t0}
        for m in drafters(setup, ctx):
            d = deployment(setup, ctx, m, b)
            spec, c = speculation(setup, m, ctx, b)
            k = spec["k"]
            tau = 1.0 + float(d.acceptance.for_class(c).survival(k).sum())
            dt, draft, verify = step_price(d, b, context, k)
            row[m] = {"step": dt, "draft": draft, "verify": verify, "tau": tau,
                      "speedup": tau * t0 / dt}
        rows.append(row)
    return rows


def vs_qps(setup: Setup, ctx: Context, capacity_rps: float, fractions: list[float],
           n: int) -> list[dict[str, Any]]:
    rows = []
    for f in fractions:
        rate = capacity_rps * f
        runs = {m: run_scenario(scenario(setup, ctx, m, n=n, rate=rate))
                for m in ("none", *DRAFTERS)}
        base = runs["none"].metrics
        row = {"rate": rate, "load": f, "base_tpot": base["tpot_s"]["mean"],
               "base_e2e": base["e2e_s"]["p50"], "base_q": queue_growing(runs["none"]),
               "base_batch": mean_batch(runs["none"], base["simulated_time_s"])}
        for m in DRAFTERS:  # selfspec's draft time is priced at one batch: not under open load
            mm = runs[m].metrics
            row[m] = {"tpot": base["tpot_s"]["mean"] / mm["tpot_s"]["mean"],
                      "e2e": base["e2e_s"]["mean"] / mm["e2e_s"]["mean"],
                      "q": queue_growing(runs[m])}
        rows.append(row)
    return rows


# ------------------------------------------------------------------ published shapes

# (series, setup, metric, [(batch, speedup)], source); values copied from
# shared/REFERENCES-speculation-load.md, "derived" where that file derives them.
PUBLISHED = [
    ("A1 DeepSeek-V3 + MTP k=2, random 1K/1K", "8x MI300X TP8, SGLang", "E2E latency ratio",
     [(1, 2.11), (2, 2.04), (4, 1.84), (8, 1.70), (16, 1.53), (32, 1.44), (64, 1.25)],
     "LMSYS blog 2025-09-02 (lm-sys.github.io @03d5107), Table 1"),
    ("A1 DeepSeek-V3 + MTP k=2, ShareGPT", "8x MI300X TP8, SGLang", "E2E latency ratio",
     [(4, 1.80), (8, 1.75), (16, 1.58), (32, 1.51), (64, 1.36)],
     "LMSYS blog 2025-09-02, Table 2"),
    ("A2 Qwen3.8-27B + DSpark k=7, HumanEval", "1x B200, vLLM", "throughput gain",
     [(1, 2.70), (2, 2.65), (4, 2.63), (8, 2.42), (16, 2.08), (32, 1.59), (64, 1.10),
      (128, 0.74)],
     "vllm-project/speculators @01d6d4d, throughput_interactivity.md"),
    ("A2 Qwen3.8-27B + DSpark k=7, math", "1x B200, vLLM", "throughput gain",
     [(1, 3.64), (2, 3.44), (4, 3.28), (8, 3.01), (16, 2.61), (32, 1.99), (64, 1.36),
      (128, 0.95)],
     "vllm-project/speculators @01d6d4d"),
    ("A2 Qwen3.8-27B + MTP k=2, HumanEval", "1x B200, vLLM", "throughput gain (derived)",
     [(1, 178.84 / 92), (32, 3706.57 / 2238), (64, 5173.85 / 3666), (128, 6128.96 / 5359)],
     "speculators MTP CSV @8685273 / DSpark baseline (derived in REFERENCES)"),
    ("A3 MagicDec Llama3.1-8B selfspec, 32K", "8x A100 TP8, gpt-fast", "decode speedup",
     [(32, 1.22), (64, 1.38), (128, 1.47)], "Infini-AI-Lab/MagicDec index.html @09cd671"),
    ("A3 MagicDec Llama3.1-8B selfspec, 32K", "8x H100 TP8, gpt-fast", "decode speedup",
     [(32, 1.23), (64, 1.43)], "Infini-AI-Lab/MagicDec index.html @09cd671"),
    ("A3 MagicDec Llama2-7B selfspec, 8K", "8x A100 TP8, gpt-fast", "decode speedup",
     [(32, 1.18), (64, 1.48), (128, 1.63)], "Infini-AI-Lab/MagicDec index.html @09cd671"),
    ("A4 TRT-LLM n-gram, Magpie turn 2", "8x B200 TP8, TRT-LLM", "E2E runtime ratio",
     [(1, 1.9613), (4, 1.6399), (32, 1.3306)],
     "NVIDIA/TensorRT-LLM blog7 @7274a59 (bs32 with k=5,v=3, others k=3,v=5)"),
]


def shape(points: list[tuple[int, float]]) -> tuple[str, str, str, str, str]:
    """Speedup at the smallest batch, at 32, at the largest, @32/@min, where it first crosses 1."""
    pts = sorted(points)
    at = dict(pts)
    first, last = pts[0], pts[-1]
    s32 = f"{at[32]:.2f}" if 32 in at else "-"
    ratio = f"{at[32] / first[1]:.2f}" if 32 in at else "-"
    cross = "below 1 throughout" if pts[0][1] < 1.0 else "none"
    for (b0, s0), (b1, s1) in zip(pts, pts[1:], strict=False):
        if s0 >= 1.0 > s1:
            cross = f"falls below: {b0}-{b1}"
            break
        if s0 < 1.0 <= s1:
            cross = f"rises above: {b0}-{b1}"
            break
    return (f"{first[1]:.2f} @{first[0]}", s32, f"{last[1]:.2f} @{last[0]}", ratio, cross)


# ------------------------------------------------------------------ published curves, point by point

SPEEDUP_TOL, STEP_TOL, CROSS_TOL = 20.0, 15.0, 25.0  # % per point / crossover (issue 23 part 6)


@dataclass(frozen=True)
class Point:
    x: int  # batch (requests in flight)
    speedup: float | None  # published speedup (None: the source gives a step ratio only)
    method: str  # speculation() name at this point (the source's own k)
    al: float | None = None  # published acceptance length (tau), used where given
    step_ratio: float | None = None  # published step-cost ratio spec / no-spec, if any


@dataclass(frozen=True)
class Curve:
    """A published load curve and the simulated configuration it is compared with."""

    name: str
    source: str
    setup: Setup
    ctx: Context
    points: tuple[Point, ...]
    match: str  # "matched: ..." or "proxy: what differs"
    # "step": the executor's price of one decode step at the mean context (tau x decode /
    # step); "e2e": closed-loop runs with clients = the point's x and ``requests`` requests,
    # mean E2E latency without / with speculation (the source's own metric)
    metric: str = "step"
    requests: int = 300
    token_budget: int = 8192


def _ctx(key: str, prompt: int, output: int) -> Context:
    return Context(key, (prompt, prompt), (output, output))


def _setup(key: str, label: str, model: str, tp: int, hw: str, weights: str = "bf16",
           engine: str = "vllm", activations: str = "bf16",
           memory_fraction: float | None = None) -> Setup:
    return Setup(key, label, model, tp, "Llama-3.2-1B", "llama3.1-8b-eagle3", hw, weights,
                 engine, activations, memory_fraction)


def _sharegpt() -> tuple[Context, str]:
    """The repo's ShareGPT lengths, read from ``scenarios/chat.yaml`` (the one place they are
    written, with their source), and the words citing them: A1's ShareGPT curve runs them."""
    syn = load_file(CHAT_SCENARIO, "a scenario")["workload"]["synthetic"]
    p, o = syn["prompt_tokens"], syn["output_tokens"]
    if not p["distribution"] == o["distribution"] == "lognormal":
        raise ValueError(f"{CHAT_SCENARIO}: expected lognormal prompt and output lengths")
    ctx = Context("sharegpt", (p["mean"], p["mean"]), (o["mean"], o["mean"]),
                  lognormal=(p["sigma"], o["sigma"]), cap=(p["max"], o["max"]))
    return ctx, (f"lengths: the repo's ShareGPT workload (scenarios/chat.yaml: lognormal means "
                 f"{p['mean']} / {o['mean']} tokens, vLLM paper Fig. 11; sigmas {p['sigma']} / "
                 f"{o['sigma']} assumed; cut at {p['max']:,} / {o['max']:,})")


SHAREGPT, SHAREGPT_LENGTHS = _sharegpt()
A3_NOTE = ("matched: model, GPU, TP8 and each row's own gamma; the source's engine is gpt-fast "
           "(a fixed batch's decode step is what both price), priced with the operator tables' "
           "NCCL all-reduce latency and per-layer floor (engine_profile), not vLLM's; acceptance "
           "not published: stated alpha 0.8 (assumed); decode length not published: 256 "
           "(assumed)")
A2_NOTE = ("proxy: Qwen3-32B for Qwen3.8-27B (not in the catalog), B200 uncalibrated, the "
           "speculator priced as an EAGLE-3 head with the source's k; tau = the published AL "
           "per point; prompt 200 tokens (assumed; the source gives output lengths only); "
           "decode-phase price vs the run's throughput gain (outputs >> prompts)")
A2_AL_DSPARK_HE = (3.40, 3.36, 3.44, 3.44, 3.45, 3.43, 3.44, 3.43)
A2_AL_DSPARK_MATH = (4.59, 4.49, 4.61, 4.65, 4.61, 4.67, 4.67, 4.67)
A2_AL_MTP_HE = (2.25, 2.27, 2.28, 2.29, 2.26, 2.27, 2.28, 2.27)
A2_N = (1, 2, 4, 8, 16, 32, 64, 128)
A2_BASE = (92, 177, 346, 671, 1250, 2238, 3666, 5359)  # HumanEval baseline tok/s
A2_MTP = (178.84, 360.73, 687.48, 1272.76, 2249.44, 3706.57, 5173.85, 6128.96)


def _a2(gains, als, method) -> tuple[Point, ...]:
    """A2's points: throughput gain and AL per N; the step-cost ratio AL / gain (derived)."""
    return tuple(Point(n, g, method, al, al / g) for n, g, al in zip(A2_N, gains, als,
                                                                      strict=True))


# A1: mean E2E latency per request (ms), (max concurrency, without MTP, with MTP, speedup)
A1_RANDOM = ((1, 17348.25, 8229.37, 2.11), (2, 17162.29, 8408.02, 2.04),
             (4, 17948.3, 9736.64, 1.84), (8, 19919.06, 11742.82, 1.70),
             (16, 23708.94, 15483.11, 1.53), (32, 30868.39, 21399.39, 1.44),
             (64, 43848.2, 35074.26, 1.25))
A1_SHAREGPT = ((4, 3981.91, 2215.44, 1.80), (8, 5007.75, 2854.36, 1.75),
               (16, 6255.86, 3947.93, 1.58), (32, 7571.25, 5023.23, 1.51),
               (64, 11900.36, 8763.65, 1.36))
# A1 reports no AL: tau 2.18 borrowed from SGLang DeepSeek-V3 MTP with the same chain
# (topk 1, a 3-token window = --speculative-num-draft-tokens 3, 2 drafts) on 16x H200,
# ISL 65,536 / OSL 4,096 (LMSYS blog 2025-07-17, lm-sys.github.io @0947bdc, A5)
A1_TAU = 2.18
A1_METHOD = f"mtp-k2-t{A1_TAU}"
A1_SRC = "LMSYS blog 2025-09-02 (lm-sys.github.io @03d5107)"
A1_NOTE = ("proxy: MI300X uncalibrated (no fitted profile: specsim's default stack); "
           "DeepSeek-V3 as the blog served it (deepseek-ai's checkpoint: FP8 block-quantized "
           "weights, W8A8 FP8 GEMMs assumed, BF16 KV: SGLang's 'auto', assumed), plain TP8 "
           "(no --enable-ep-moe: expert_parallel off, so no routing skew), "
           "--mem-fraction-static 0.85; MTP k=2 chain (--speculative-num-steps 2 "
           "--speculative-eagle-topk 1 --speculative-num-draft-tokens 3) drafted by the "
           "model's own MTP layer; AL not reported: tau 2.18 BORROWED (SGLang DeepSeek-V3 MTP, "
           "same 3-token window, 16x H200, LMSYS blog 2025-07-17 = A5); closed loop, clients = "
           "max concurrency, 300 prompts (--num-prompt; the post's --request-rate 1 not "
           "applied); simulated x = mean E2E without / with (the source's metric); SGLang's "
           "rhythm assumed: specsim's mixed chunked prefill (SGLang does not mix by default), "
           "token budget 16,384 (its --max-prefill-tokens default), vLLM's fitted output lag")
_MI300X = _setup("a1-dsv3-mi300x", "DeepSeek-V3 FP8, 8x MI300X TP8", "DeepSeek-V3", 8, "MI300X",
                 "fp8", activations="fp8", memory_fraction=0.85)
A3_SRC = "Infini-AI-Lab/MagicDec index.html @09cd671"
A2_SRC = "vllm-project/speculators @01d6d4d (MTP CSV @8685273)"
_B200 = _setup("a2-qwen32b-b200", "Qwen3-32B, 1x B200", "Qwen3-32B", 1, "B200")
CURVES = (
    Curve("A1 DeepSeek-V3 + MTP k=2, random 1K/1K, 8x MI300X, SGLang", A1_SRC + ", Table 1",
          _MI300X, Context("random", (1, 1024), (1, 1024)),
          tuple(Point(x, sp, A1_METHOD) for x, _, _, sp in A1_RANDOM),
          A1_NOTE + "; lengths: bench_serving --random-input/--random-output 1024 at its "
          "default --random-range-ratio 0.0, i.e. input U[1, 1024], output U[0, 1024] "
          "(sgl-project/sglang python/sglang/bench_serving.py sample_random_requests @0033168; "
          "output >= 1 here)", metric="e2e", token_budget=16384),
    Curve("A1 DeepSeek-V3 + MTP k=2, ShareGPT, 8x MI300X, SGLang", A1_SRC + ", Table 2",
          _MI300X, SHAREGPT, tuple(Point(x, sp, A1_METHOD) for x, _, _, sp in A1_SHAREGPT),
          A1_NOTE + f"; {SHAREGPT_LENGTHS}, not SGLang's sampler over DeepSeek-V3's tokenizer",
          metric="e2e", token_budget=16384),
    Curve("A3 MagicDec Llama3.1-8B selfspec, 32K, 8x H100", A3_SRC,
          _setup("a3-8b-h100", "Llama-3.1-8B, 8x H100-SXM TP8", "Llama-3.1-8B", 8, "H100-SXM", engine="gpt-fast"),
          _ctx("32k", 32000, 256),
          (Point(32, 1.23, "selfspec-3"), Point(64, 1.43, "selfspec-3")), A3_NOTE),
    Curve("A3 MagicDec Llama3.1-8B selfspec, 32K, 8x A100", A3_SRC,
          _setup("a3-8b-a100", "Llama-3.1-8B, 8x A100-SXM-80GB TP8", "Llama-3.1-8B", 8,
                 "A100-SXM-80GB", engine="gpt-fast"), _ctx("32k", 32000, 256),
          (Point(32, 1.22, "selfspec-3"), Point(64, 1.38, "selfspec-3"),
           Point(128, 1.47, "selfspec-4")), A3_NOTE),
    Curve("A3 MagicDec Llama2-7B selfspec, 8K, 8x H100", A3_SRC,
          _setup("a3-7b-h100", "Llama-2-7B, 8x H100-SXM TP8", "Llama-2-7B", 8, "H100-SXM", engine="gpt-fast"),
          _ctx("8k", 8000, 256),
          (Point(32, 1.19, "selfspec-3"), Point(64, 1.42, "selfspec-4"),
           Point(128, 1.65, "selfspec-4")),
          A3_NOTE + "; the catalog's Llama-2-7B stops at 4,096 tokens (MagicDec extends it): "
          "priced at 8K through the per-op model, which does not check it"),
    Curve("A3 MagicDec Llama2-7B selfspec, 8K, 8x A100", A3_SRC,
          _setup("a3-7b-a100", "Llama-2-7B, 8x A100-SXM-80GB TP8", "Llama-2-7B", 8,
                 "A100-SXM-80GB", engine="gpt-fast"), _ctx("8k", 8000, 256),
          (Point(32, 1.18, "selfspec-3"), Point(64, 1.48, "selfspec-3"),
           Point(128, 1.63, "selfspec-4")),
          A3_NOTE + "; Llama-2-7B past its catalog 4,096 tokens, as above"),
    Curve("A2 Qwen3.8-27B + DSpark k=7, HumanEval, 1x B200, vLLM", A2_SRC, _B200,
          _ctx("humaneval", 200, 760),
          _a2((2.70, 2.65, 2.63, 2.42, 2.08, 1.59, 1.10, 0.74), A2_AL_DSPARK_HE,
              "eagle3-k7-a0.72"), A2_NOTE),
    Curve("A2 Qwen3.8-27B + DSpark k=7, math, 1x B200, vLLM", A2_SRC, _B200,
          _ctx("math", 200, 305),
          _a2((3.64, 3.44, 3.28, 3.01, 2.61, 1.99, 1.36, 0.95), A2_AL_DSPARK_MATH,
              "eagle3-k7-a0.8"), A2_NOTE),
    Curve("A2 Qwen3.8-27B + MTP k=2, HumanEval, 1x B200, vLLM (gain derived)", A2_SRC, _B200,
          _ctx("humaneval", 200, 760),
          _a2(tuple(m / b for m, b in zip(A2_MTP, A2_BASE, strict=True)), A2_AL_MTP_HE,
              "eagle3-k2-a0.7"),
          A2_NOTE.replace("EAGLE-3 head", "EAGLE-3 head (no catalog model has MTP layers)")
          + "; the MTP and baseline servers had different max-num-seqs (the source's caveat)"),
    Curve("A7 vLLM, speculator configured at K=0 (TPOT ratio)", "vLLM issue #49548",
          _setup("a7-qwen32b-fp8", "Qwen3-32B FP8, 1x H100-SXM", "Qwen3-32B", 1, "H100-SXM",
                 "fp8"), _ctx("a7", 400, 100),
          (Point(2, None, "eagle3-k0", None, 15.317 / 14.374),
           Point(189, None, "eagle3-k0", None, 93.820 / 77.164)),
          "proxy: Qwen3-32B FP8 weights on H100-SXM for gemma-4-31B FP8 on H100 NVL (neither "
          "in the catalog); the source's mode (vLLM V1 dynamic SD at K=0: piecewise instead of "
          "full CUDA graphs, and a drafter pass every step) is not what specsim prices: an idle "
          "speculator pays the V2 runner's measured 0.11 ms per step "
          "(cost_models/data/spec_step_costs.yaml)"),
)

NOT_COMPARED = (
    ("A4 TRT-LLM n-gram, Llama-4-Scout-17B-16E FP8, 8x B200", "Llama-4-Scout is not in the "
     "catalog; the n-gram acceptance per batch is not published (only E2E runtime)"),
    ("A5 DeepSeek-V3 MTP, H200, SGLang", "not a load curve: two single points from two "
     "different deployments (2 requests per rank on 2 decode nodes of 8x H200, ISL 65,536 / "
     "OSL 4,096, whose attention/expert layout and prefill side are not stated; and +14.2% "
     "with PD disaggregation + large EP over 128x H200, ISL 2,000 / OSL 100, 128 requests "
     "per rank); DeepSeek-V3 and method mtp are in the catalog now (A1 uses them, with "
     "A5's AL 2.18 borrowed)"),
    ("A6 MiniCPM3-4B + EAGLE-3, RTX 4090", "neither the model nor the GPU is in the catalog"),
    ("A8", "qualitative statements, no points"),
)


def crossover(points) -> tuple[float, str] | None:
    """Where a speedup curve first crosses 1: x interpolated linearly in log x between the
    two points that bracket it, and which way it crosses; None if it never does."""
    pts = sorted((float(x), float(y)) for x, y in points)
    for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
        if (y0 > 1.0 >= y1) or (y0 < 1.0 <= y1):
            f = (y0 - 1.0) / (y0 - y1)
            x = math.exp(math.log(x0) + f * (math.log(x1) - math.log(x0)))
            return x, ("falls below" if y0 > 1.0 else "rises above")
    return None


_E2E: dict[tuple[str, int, str], dict[str, float]] = {}


def e2e_runs(curve: Curve, x: int, method: str) -> dict[str, float]:
    """Closed loop with ``x`` clients and the curve's number of requests, without and with
    speculation: mean E2E (s), mean TPOT (s) and the mean tau of the run with."""
    key = (curve.name, x, method)
    if key not in _E2E:
        off, on = (run_scenario(scenario(curve.setup, curve.ctx, m, n=curve.requests,
                                         clients=x, token_budget=curve.token_budget)).metrics
                   for m in ("none", method))
        _E2E[key] = {"off": off["e2e_s"]["mean"], "on": on["e2e_s"]["mean"],
                     "off_tpot": off["tpot_s"]["mean"], "on_tpot": on["tpot_s"]["mean"],
                     "tau": on["mean_acceptance_length"]}
    return _E2E[key]


def sim_point(curve: Curve, x: int, method: str, al: float | None) -> tuple[float, float]:
    """(speedup, step-cost ratio spec / no-spec) of one pure-decode step at ``x`` rows and
    the curve's mean decode context, from the executor's price; tau is the published AL
    where the source gives one, else the acceptance's expectation at k. An "e2e" curve's
    speedup is instead its closed-loop runs' mean E2E ratio (``e2e_runs``)."""
    setup, ctx = curve.setup, curve.ctx
    context = ctx.prompt_mean + ctx.output_mean / 2
    t0 = step_price(deployment(setup, ctx, "none"), x, context, 0)[0]
    if method.endswith("-k0"):  # a speculator configured, nothing drafted (A7)
        dt = step_price(deployment(setup, ctx, "eagle3-k4-a0.7"), x, context, 0)[0]
        return t0 / dt, dt / t0
    d = deployment(setup, ctx, method, x)
    spec, cls = speculation(setup, method, ctx, x)
    k = spec["k"]
    tau = al if al is not None else 1.0 + float(d.acceptance.for_class(cls).survival(k).sum())
    dt = step_price(d, x, context, k)[0]
    if curve.metric == "e2e":
        r = e2e_runs(curve, x, method)
        return r["off"] / r["on"], dt / t0
    return tau * t0 / dt, dt / t0


def _err(sim: float, pub: float) -> float:
    return abs(sim / pub - 1.0) * 100.0


def compare_curves(grid: int) -> list[dict[str, Any]]:
    """Each comparable published curve against the simulator, point by point, and its
    crossover (the simulated curve on ``grid`` points per doubling between the published
    batches, at the nearest published point's k and AL)."""
    out = []
    for c in CURVES:
        rows = []
        for pt in c.points:
            sp, ratio = sim_point(c, pt.x, pt.method, pt.al)
            rows.append({"x": pt.x, "pub": pt.speedup, "sim": sp, "pub_ratio": pt.step_ratio,
                         "sim_ratio": ratio, "method": pt.method,
                         "err": _err(sp, pt.speedup) if pt.speedup else None,
                         "ratio_err": (_err(ratio, pt.step_ratio) if pt.step_ratio else None)})
        res: dict[str, Any] = {"curve": c, "rows": rows, "pub_cross": None, "sim_cross": None,
                               "cross_err": None}
        pub = [(pt.x, pt.speedup) for pt in c.points if pt.speedup]
        if len(pub) >= 2:
            g = 1 if c.metric == "e2e" else grid  # runs, not prices: one point per doubling
            lo, hi = math.log2(pub[0][0]), math.log2(pub[-1][0])
            xs = sorted({round(2 ** (lo + i / g)) for i in range(int((hi - lo) * g) + 1)}
                        | {x for x, _ in pub})
            near = [min(c.points, key=lambda p, x=x: abs(math.log2(p.x / x))) for x in xs]
            curve = [(x, sim_point(c, x, p.method, p.al)[0]) for x, p in zip(xs, near,
                                                                             strict=True)]
            res["pub_cross"], res["sim_cross"] = crossover(pub), crossover(curve)
            if res["pub_cross"] and res["sim_cross"]:
                res["cross_err"] = _err(res["sim_cross"][0], res["pub_cross"][0])
        out.append(res)
    return out


def print_comparisons(results: list[dict[str, Any]]) -> list[list[str]]:
    """Per point tables and the verdict rows (targets: speedup within 20%, step-cost ratio
    within 15% per point, crossover within 25%)."""
    verdict = []
    for r in results:
        c = r["curve"]
        body = [[str(x["x"]), x["method"], fmt(x["pub"]), fmt(x["sim"]),
                 fmt(x["err"], 1) + "%" if x["err"] is not None else "-",
                 fmt(x["pub_ratio"], 3), fmt(x["sim_ratio"], 3),
                 fmt(x["ratio_err"], 1) + "%" if x["ratio_err"] is not None else "-"]
                for x in r["rows"]]
        table(["batch", "sim method", "published x", "simulated x", "error", "published "
               "step ratio", "simulated step ratio", "error"], body,
              f"{c.name} ({c.source}) vs {c.setup.label}, context {c.ctx.prompt_mean} + "
              f"{c.ctx.output_mean}\n  {c.match}")

        def cross(x):
            return "none" if x is None else f"{x[1]} at {x[0]:.0f}"

        sp = [x["err"] for x in r["rows"] if x["err"] is not None]
        st = [x["ratio_err"] for x in r["rows"] if x["ratio_err"] is not None]
        pc, sc = r["pub_cross"], r["sim_cross"]
        if not sp:
            cross_ok = "-"
        elif pc is None and sc is None:
            cross_ok = "yes (neither crosses)"
        elif r["cross_err"] is not None:
            cross_ok = "yes" if r["cross_err"] <= CROSS_TOL else "no"
        else:
            cross_ok = "no (one crosses)"
        print(f"  crosses 1: published {cross(pc)}, simulated {cross(sc)}"
              + (f" (error {r['cross_err']:.0f}%)" if r["cross_err"] is not None else ""))
        verdict.append([c.name[:58], c.match.split(":")[0],
                        f"{sum(e <= SPEEDUP_TOL for e in sp)}/{len(sp)}" if sp else "-",
                        fmt(max(sp), 1) + "%" if sp else "-",
                        f"{sum(e <= STEP_TOL for e in st)}/{len(st)}" if st else "-",
                        fmt(max(st), 1) + "%" if st else "-",
                        cross(pc), cross(sc), cross_ok,
                        ("yes" if all(e <= SPEEDUP_TOL for e in sp) else "no") if sp else "-",
                        ("yes" if all(e <= STEP_TOL for e in st) else "no") if st else "-"])
    return verdict


def print_a2_baseline() -> None:
    """A2's proxy check: the simulated no-spec decode step against the source's own no-spec
    run (batch / throughput), so a reader sees how much of a proxy curve's error is the
    baseline (the chip and model stand-ins), not speculation."""
    c = next(c for c in CURVES if c.name.startswith("A2") and "HumanEval" in c.name)
    d = deployment(c.setup, c.ctx, "none")
    ctx = c.ctx.prompt_mean + c.ctx.output_mean / 2
    rows = []
    for n, base in zip(A2_N, A2_BASE, strict=True):
        sim, meas = step_price(d, n, ctx, 0)[0], n / base
        rows.append([str(n), fmt(meas * 1e3, 2), fmt(sim * 1e3, 2), fmt(_err(sim, meas), 1) + "%"])
    table(["batch", "source's no-spec step ms (batch / tok/s)", "simulated decode step ms",
           "error"], rows, f"A2 proxy baseline ({c.setup.label}, uncalibrated, for the "
          "source's Qwen3.8-27B): the no-spec half of the curve, not speculation")


def print_a1_baseline() -> None:
    """A1's runs in the source's units: mean E2E per request (ms) without and with MTP,
    published and simulated, so a reader sees the proxy's baseline (uncalibrated MI300X)
    next to the ratio; and the executor's step-price speedup (tau x decode / step at the
    mean context) beside the runs' E2E ratio."""
    for c in (c for c in CURVES if c.name.startswith("A1")):
        pub = A1_RANDOM if "random" in c.name else A1_SHAREGPT
        context = c.ctx.prompt_mean + c.ctx.output_mean / 2
        rows = []
        for x, off, on, sp in pub:
            r = e2e_runs(c, x, A1_METHOD)
            price = sim_point(replace(c, metric="step"), x, A1_METHOD, None)[0]
            rows.append([str(x), fmt(off, 0), fmt(r["off"] * 1e3, 0), fmt(on, 0),
                         fmt(r["on"] * 1e3, 0), fmt(r["off_tpot"] * 1e3, 2),
                         fmt(r["on_tpot"] * 1e3, 2), fmt(r["tau"]), fmt(sp),
                         fmt(r["off"] / r["on"]), fmt(price)])
        table(["conc", "pub E2E no-MTP ms", "sim", "pub E2E MTP ms", "sim", "sim TPOT ms",
               "sim TPOT MTP ms", "sim tau", "pub x", "sim E2E x", "sim step-price x"], rows,
              f"{c.name}: the source's E2E (ms/request) next to the simulated runs "
              f"({c.setup.label}, uncalibrated; step price at context {context:.0f})")


def print_verdict(verdict: list[list[str]]) -> None:
    table(["curve", "match", "speedup pts ok", "worst", "step-ratio pts ok", "worst",
           "published crossing", "simulated crossing", f"crossing <= {CROSS_TOL:g}%",
           f"speedup <= {SPEEDUP_TOL:g}%", f"step <= {STEP_TOL:g}%"], verdict,
          "Targets per published curve (speedup within 20% and step-cost ratio within 15% at "
          "every point, crossover batch within 25%); 'proxy' rows differ in model or GPU")
    print("Not compared (the model, engine or k cannot be matched):")
    for name, why in NOT_COMPARED:
        print(f"  {name}: {why}")
    print("Against QPS: no published curve gives the speedup against an open-loop request "
          "rate (A1's tables are by max concurrency), so the QPS sweeps above stand alone.")


# ------------------------------------------------------------------ printing


def table(headers: list[str], rows: list[list[str]], title: str | None = None) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    if title:
        print(f"\n{title}")
    line = "  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(headers,
                                                                                     widths,
                                                                                     strict=True)))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r,
                                                                                      widths,
                                                                                      strict=True))))


def fmt(x: float, nd: int = 2) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.{nd}f}"


def print_batch(setup: Setup, ctx: Context, rows: list[dict[str, Any]],
                fits: dict[str, int]) -> None:
    ms = drafters(setup, ctx)
    heads = ["batch", "batch~", "base tok/s", "base TPOT ms"]
    for m in ms:
        heads += [f"{SHORT[m]} thr x", "TPOT x", "dec x"]
    body = []
    for r in rows:
        line = [str(r["batch"]) + ("!" if r["exhausted"] else ""), fmt(r["eff"], 1),
                fmt(r["base_thr"], 0), fmt(r["base_tpot"] * 1e3)]
        for m in ms:
            line += [fmt(r[m]["thr"]), fmt(r[m]["tpot"]), fmt(r[m]["dec"])]
        body.append(line)
    taus = ", ".join(f"{SHORT[m]} {rows[-1][m]['tau']:.2f}" for m in ms)
    room = ", ".join(f"{SHORT.get(m, m)} {v}" for m, v in fits.items())
    table(heads, body, f"[{setup.label}; {ctx.label()}] speedup vs batch "
                       f"(closed loop, clients = batch; simulated tau: {taus}; sequences the KV "
                       f"cache holds: {room}; dec x '-': the batch does not fit; '!': request "
                       "pool ran out)")


def print_prices(setup: Setup, ctx: Context, rows: list[dict[str, Any]]) -> None:
    ms = drafters(setup, ctx)
    heads = ["batch", "decode ms"]
    for m in ms:
        heads += [f"{SHORT[m]} draft ms", "verify ms", "verify/decode", "tau*dec/step"]
    body = []
    for r in rows:
        line = [str(r["batch"]), fmt(r["decode"] * 1e3)]
        for m in ms:
            x = r[m]
            line += [fmt(x["draft"] * 1e3), fmt(x["verify"] * 1e3), fmt(x["verify"] / r["decode"]),
                     fmt(x["speedup"])]
        body.append(line)
    context = ctx.prompt_mean + ctx.output_mean / 2
    taus = ", ".join(f"{SHORT[m]} {rows[0][m]['tau']:.2f}" for m in ms)
    table(heads, body, f"[{setup.label}; {ctx.key} context] executor price of one pure-decode "
                       f"step at context {context:.0f}, k={K} (selfspec {GAMMA}) (expected tau: "
                       f"{taus}; step = draft + verify + speculation and engine overheads)")


def print_qps(setup: Setup, ctx: Context, rows: list[dict[str, Any]], capacity: float) -> None:
    heads = ["req/s", "load", "base batch~", "base TPOT ms", "base E2E p50 s"]
    for m in DRAFTERS:
        heads += [f"{SHORT[m]} TPOT x", "E2E x"]
    body = []
    for r in rows:
        line = [fmt(r["rate"], 2), fmt(r["load"]), fmt(r["base_batch"], 1),
                fmt(r["base_tpot"] * 1e3), fmt(r["base_e2e"]) + (" q" if r["base_q"] else "")]
        for m in DRAFTERS:
            line += [fmt(r[m]["tpot"]), fmt(r[m]["e2e"]) + (" q" if r[m]["q"] else "")]
        body.append(line)
    table(heads, body, f"[{setup.label}; {ctx.key} context] speedup vs QPS (open-loop Poisson; "
                       f"load = rate / baseline closed-loop capacity {capacity:.2f} req/s; "
                       "q = queue keeps growing)")


def capacity(setup: Setup, ctx: Context, waves: int) -> float:
    """Requests/s the baseline serves at the scheduler's full batch (256 closed-loop clients)."""
    r = run_scenario(scenario(setup, ctx, "none", n=waves * 256, clients=256))
    return r.metrics["throughput_output_tokens_per_s"] / ctx.output_mean


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer points (about 30 s)")
    ap.add_argument("--model", choices=["8b", "70b", "all"], default="all",
                    help="8b also runs the long context on 8x H100 TP8 (MagicDec's setup)")
    ap.add_argument("--context", choices=["short", "long", "both"], default="both")
    ap.add_argument("--compare-only", action="store_true",
                    help="only the published curves, point by point (a few seconds)")
    args = ap.parse_args()
    t_start = time.perf_counter()
    if args.compare_only:
        return compare_published(args.quick, t_start)
    batches = [1, 8, 32, 128] if args.quick else [1, 2, 4, 8, 16, 32, 64, 128]
    price_batches = [1, 8, 32, 64, 128, 256] if args.quick else [1, 2, 4, 8, 16, 32, 64, 128,
                                                                    256]
    fractions = [0.2, 0.7, 1.2] if args.quick else [0.05, 0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.5]
    waves = 2 if args.quick else 4
    models = ("8b", "70b") if args.model == "all" else (args.model,)
    contexts = ("short", "long") if args.context == "both" else (args.context,)
    cases = [(SETUPS[m], CONTEXTS[c]) for m in models for c in contexts]
    if "8b" in models and "long" in contexts:
        cases.append((SETUPS["8b-tp8"], CONTEXTS["long"]))
    print("Speculative decoding vs load (specsim; " + ("--quick" if args.quick else "full") + ")")
    print(f"drafters, k={K}: draft = separate draft model (Llama-3.2-1B for 8B, Llama-3.1-8B for "
          "70B), stated alpha 0.75 (assumed);\n  eagle3 = bundled EAGLE-3 profile (chat class); "
          "ngram = bundled Spec-Bench prompt-lookup profile, lookup every step, 20 us CPU/step;\n"
          f"  selfspec (MagicDec's setup only) = the target drafting with a {STREAMING_KV}-token "
          f"StreamingLLM KV, k={GAMMA}, stated alpha 0.8 (assumed), its pass priced by the "
          "target's model at each batch")
    shapes: list[list[str]] = []
    printed_cal = False
    for setup, ctx in cases:
        t0 = time.perf_counter()
        rows = vs_batch(setup, ctx, batches, waves)
        if not printed_cal:
            vals = rows[0]["cal_values"]
            shown = {k: v for k, v in vals.items() if k != "source" and v not in (None, 0.0)}
            print(f"calibration (the default for H100-SXM): {rows[0]['cal']}: "
                  + ", ".join(f"{k}={v:g}" for k, v in shown.items()))
            print(f"  source: {vals['source']}")
            printed_cal = True
        fits = {m: fit(setup, ctx, m) for m in ("none", *DRAFTERS)}
        print_batch(setup, ctx, rows, fits)
        print_prices(setup, ctx, step_prices(setup, ctx, price_batches))
        cap = capacity(setup, ctx, waves)
        n = (150 if ctx.key == "short" else 60) if args.quick else \
            (1000 if ctx.key == "short" else 150)
        print_qps(setup, ctx, vs_qps(setup, ctx, cap, fractions, n), cap)
        metric = "thr x" if ctx.key == "short" else "dec x"
        key = "thr" if ctx.key == "short" else "dec"
        for m in drafters(setup, ctx):
            pts = [(r["batch"], r[m][key]) for r in rows if math.isfinite(r[m][key])]
            shapes.append([f"sim {setup.model} {m}, {ctx.key}", setup.label.split(", ")[1],
                           f"{metric} (simulated)", *shape(pts), "this run"])
        print(f"  ({time.perf_counter() - t0:.1f} s)")
    pub = [[name, hw, metric, *shape(pts), src] for name, hw, metric, pts, src in PUBLISHED]
    table(["series", "hardware", "metric", "@min batch", "@32", "@max batch", "@32/@min",
           "crosses 1", "source"], shapes + pub,
          "Shape: simulated (this run; short context: closed-loop throughput ratio, long: "
          "fixed-batch decode ratio) vs published (shared/REFERENCES-speculation-load.md)")
    print("A7 (vLLM #49548, 1x H100 NVL, gemma-4-31B FP8): speculation configured but K=0 "
          "costs +6.56% TPOT at concurrency 2, +21.58% at 189.")
    for setup, ctx in cases[:1]:
        off = deployment(setup, ctx, "none")
        parts = []
        for m in DRAFTERS:
            d = deployment(setup, ctx, m)
            extra = [step_price(d, b, ctx.prompt_mean, 0)[0] / step_price(off, b, ctx.prompt_mean,
                                                                          0)[0] - 1 for b in (2, 189)]
            parts.append(f"{SHORT[m]} {100 * extra[0]:+.2f}% / {100 * extra[1]:+.2f}%")
        print(f"  simulator, {setup.model} with a drafter configured and k=0, at batch 2 / 189: "
              + "; ".join(parts))
    print("Note: the shape table's published rows differ in model, hardware, engine, k and "
          "acceptance; the point-by-point comparison below matches them where it can.")
    return compare_published(args.quick, t_start)


def compare_published(quick: bool, t_start: float) -> int:
    """Every comparable published curve point by point, the crossovers and the verdict."""
    print("\nPublished curves point by point (shared/REFERENCES-speculation-load.md): simulated "
          "speedup = tau x decode step / speculative step from the executor's price at the "
          "curve's batch and mean decode context (A1: mean E2E ratio of closed-loop runs at "
          "the source's concurrency, its metric); step ratio = speculative step / decode step")
    print_verdict(print_comparisons(compare_curves(2 if quick else 4)))
    print_a1_baseline()
    print_a2_baseline()
    print(f"\ntotal wall time: {time.perf_counter() - t_start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

