"""Replay a measured serving run through the simulator and compare predicted with measured.

The run's exact arrivals and token counts become the trace (``replay_trace``); its engine
settings become the scenario's ``engine:`` section with vLLM's flag names (``replay_scenario``:
max_num_seqs, max_num_batched_tokens, chunked prefill, block size, and the run's KV block
count as ``num_gpu_blocks_override``), speculation off, and the default calibration for the
hardware unless ``--scenario`` names one. ``compare`` then gives, per load stage and for the
whole run, TTFT / TPOT / E2E mean and percentiles and output throughput, predicted against
measured, on the same requests.

Measured TPOT is the ground truth's (e2e_s - ttft_s) / (output_tokens - 1) per request, not
inference-perf's TPOT/ITL (two stream events per token: about half the real time).
"""

from __future__ import annotations

import copy
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from specsim.cost_models.errors import CatalogError
from specsim.errors import ScenarioError
from specsim.simulator.cluster.engine import Result, finite_or_none, run_scenario
from specsim.simulator.scenario import config as cfg
from specsim.simulator.scenario.schema import ENGINE_KEYS
from specsim.simulator.validation.measured import (
    MeasuredRun,
    load_csv,
    load_vllm_run,
    request_notes,
)
from specsim.traces.errors import TraceError

METRICS = (("TTFT", "ttft_s", "ms", 1e3), ("TPOT", "tpot_s", "ms", 1e3),
           ("E2E", "e2e_s", "s", 1.0))
STATS = ("mean", "p50", "p90", "p99")
TPOT_NOTE = ("measured TPOT = (e2e_s - ttft_s) / (output_tokens - 1) per request from the "
             "ground truth; inference-perf's TPOT/ITL in measured.csv count two stream events "
             "per token (ITL p50 ~0.04 ms) and are about half the real per-token time")


def load_measured(path: str | Path) -> MeasuredRun:
    """A vllm_runs ``<run>.json.gz`` (or ``.json``) or a generic measured CSV."""
    p = Path(path)
    name = p.name.lower()
    if name.endswith((".json.gz", ".json")):
        if name.endswith(("_ground_truth.json.gz", "_ground_truth.json")):
            raise TraceError(f"{p}: this is a ground truth; pass the run file next to it "
                             f"({p.name.replace('_ground_truth', '')})")
        return load_vllm_run(p)
    if name.endswith((".csv", ".csv.gz")):
        return load_csv(p)
    raise TraceError(f"{p}: expected a vllm_runs <run>.json.gz (its _ground_truth.json.gz "
                     "next to it) or a measured CSV (.csv: arrival_s, input_tokens, "
                     "output_tokens, ttft_s, e2e_s[, stage])")


# ------------------------------------------------------------------ scenario and trace


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in top.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _given(data: dict[str, Any], section: str, key: str) -> bool:
    sec = data.get(section)
    return isinstance(sec, dict) and sec.get(key) is not None


def replay_scenario(run: MeasuredRun, base: str | Path | None = None, *, model: str | None = None,
                    hardware: str | None = None, tp: int | None = None,
                    record_iterations: bool = False) -> tuple[dict[str, Any], list[str]]:
    """The scenario (a raw dict, validated by ``run_scenario``) that replays ``run``, and
    notes on what was taken from where.

    Layers, later wins: the run (model, GPU, TP, engine flags), the ``base`` YAML (any
    scenario keys; its workload is ignored), then the flags. A run's engine flag is dropped
    where the base sets that flag or the key it maps to; its KV block count is dropped when
    the model, hardware or TP differ from what the run names (it no longer describes that
    memory). What the run does not name (a run without measured.csv names no GPU) is taken
    to be the run's own, so its block count is kept.
    """
    notes: list[str] = []
    user: dict[str, Any] = {}
    if base is not None:
        base_path = Path(base)
        user = cfg.read_yaml(base_path)
        if "workload" in user:
            user = {k: v for k, v in user.items() if k != "workload"}
            notes.append(f"{base_path}: its workload is ignored (the run's requests are replayed)")
        cal = user.get("calibration")
        if isinstance(cal, str) and not Path(cal).is_absolute() and (
                base_path.resolve().parent / cal).is_file():
            user["calibration"] = str(base_path.resolve().parent / cal)
    sc: dict[str, Any] = {
        "name": f"replay {run.name}", "seed": 0,
        "speculation": {"method": "none"},
        "workload": {"replay": str(run.path)},
        "simulation": {"progress": False, "record_iterations": record_iterations,
                       "overload": {"detect": False}},  # the engine ran every request
    }
    if run.model:
        sc["model"] = run.model
    if run.hardware or run.tp:
        sc["hardware"] = {}
        if run.hardware:
            sc["hardware"]["accelerator"] = run.hardware
        if run.tp:
            sc["hardware"].update(count=run.tp, tensor_parallel=run.tp)
    engine = {k: v for k, v in run.engine.items() if v is not None}
    for flag, (section, key) in ENGINE_KEYS.items():
        if flag in engine and (_given(user, "engine", flag) or _given(user, section, key)):
            engine.pop(flag)
            notes.append(f"engine.{flag}: the base scenario's value is used, not the run's")
    period = prompt_repeats(run)
    if (period is not None and run.fmt == "vllm_runs" and "enable_prefix_caching" not in engine
            and not _given(user, "engine", "enable_prefix_caching")
            and not _given(user, "kv_cache", "prefix_cache")):
        engine["enable_prefix_caching"] = True  # vLLM v1's default
        notes.append(f"the run's prompts repeat every {period} requests (its load generator "
                     "cycles through a fixed prompt set): replayed with vLLM v1's default "
                     "prefix caching, so a repeated prompt is served from the cache; set "
                     "engine.enable_prefix_caching: false in --scenario to price every prompt")
    if engine:
        sc["engine"] = engine
    sc = _merge(sc, user)
    if model is not None:
        sc["model"] = model
    if hardware is not None:
        sc.setdefault("hardware", {})["accelerator"] = hardware
    if tp is not None:
        sc.setdefault("hardware", {}).update(tensor_parallel=tp, count=tp)
    if "model" not in sc:
        raise ScenarioError(f"{run.path}: no model: pass --model NAME (a catalog model) or give "
                            "model: in --scenario")
    if not isinstance(sc.get("hardware"), dict) or "accelerator" not in sc["hardware"]:
        raise ScenarioError(f"{run.path}: no hardware: pass --hardware NAME (a catalog "
                            "accelerator) and --tp N, or give hardware: in --scenario")
    hw = sc["hardware"]
    if "tensor_parallel" in hw and "count" not in hw:
        hw["count"] = hw["tensor_parallel"]
    blocks = sc.get("engine", {}).get("num_gpu_blocks_override") if isinstance(
        sc.get("engine"), dict) else None
    if blocks is not None and run.fmt == "vllm_runs" and "num_gpu_blocks_override" in engine:
        named = (("model", sc["model"], run.model), ("hardware", hw.get("accelerator"),
                                                      run.hardware),
                 ("tensor parallelism", hw.get("tensor_parallel", 1), run.tp))
        changed = [what for what, mine, theirs in named if theirs is not None and mine != theirs]
        unnamed = [(what, mine) for what, mine, theirs in named if theirs is None]
        if changed:
            sc["engine"].pop("num_gpu_blocks_override")
            notes.append(f"the run's KV block count ({blocks:,}) is not used: the "
                         f"{' and '.join(changed)} {'differs' if len(changed) == 1 else 'differ'}"
                         " from the run's; KV is sized from memory")
        elif unnamed:
            notes.append(f"the run's KV block count ({blocks:,}) is kept: the run does not "
                         f"name its {' or '.join(w for w, _ in unnamed)}; "
                         f"{' and '.join(str(m) for _, m in unnamed)} taken to be the run's")
    return sc, notes


def prompt_repeats(run: MeasuredRun) -> int | None:
    """The period N of a run whose load generator cycles through N prompts (request i and
    i + N send the same prompt: ``engine_fit.prompt_period``, read from the prompt lengths
    since runs record no prompt content), or None."""
    from specsim.cost_models.calibrate.engine_fit import prompt_period

    req = run.requests
    if "index" not in req:
        return None
    return prompt_period(req["index"], req["input_tokens"])


def replay_trace(run: MeasuredRun) -> pd.DataFrame:
    """The run's requests as a trace: exact arrivals and token counts (0 tokens as 1, the
    traces' rule: a failed request may record a 0-token prompt; a request whose recorded
    output count is short of what its decode time implies decodes the implied count,
    ``measured.decoded_tokens``, as the engine did). Where the prompts repeat
    every N requests (``prompt_repeats``), request i carries the prefix keys of prompt
    i mod N: two 512-token trace blocks per distinct prompt, which the prefix cache cuts
    to the prompt's own full pages, so a repeated prompt finds its full blocks cached as
    vLLM v1's prefix cache does (a prompt's first sending finds nothing)."""
    req = run.requests
    n = len(req)
    blocks = np.empty(n, dtype=object)
    blocks.fill(())
    period = prompt_repeats(run)
    if period is not None:
        pid = req["index"].to_numpy(np.int64) % period
        for i, p in enumerate(pid):
            blocks[i] = (int(2 * p + 1), int(2 * p + 2))
    return pd.DataFrame({
        "arrival_s": req["arrival_s"].to_numpy(np.float64),
        "request_id": np.arange(n, dtype=np.int64),
        "session_id": np.full(n, -1, np.int64), "turn": np.zeros(n, np.int64),
        "prompt_tokens": np.maximum(req["input_tokens"].to_numpy(np.int64), 1),
        "output_tokens": np.maximum(req["decoded_tokens"].to_numpy(np.int64), 1),
        "workload_class": np.array(req["stage"].astype(str).map(lambda s: f"stage {s}"), object),
        "prefix_block_ids": blocks, "temperature": np.zeros(n),
        "slo_tier": np.full(n, "standard", object),
    })


def check_model_shape(run: MeasuredRun, model_name: str) -> list[str]:
    """Notes where the run's model_config disagrees with the catalog model replayed."""
    if not run.model_config or not isinstance(model_name, str):
        return []
    from specsim.cost_models.catalog import get_model
    from specsim.cost_models.errors import CatalogError

    try:
        m = get_model(model_name, "model")
    except CatalogError:
        return []
    mc = run.model_config
    moe = getattr(m, "moe", None)
    inter = moe.expert_intermediate_size if moe is not None else m.intermediate_size
    pairs = (("num_layers", m.n_layers), ("hidden_dim", m.hidden_size), ("num_heads", m.n_heads),
             ("num_kv_heads", m.n_kv_heads), ("intermediate_dim", inter),
             ("vocab_size", m.vocab_size),
             ("num_local_experts", moe.n_experts if moe is not None else 0),
             ("num_experts_per_tok", moe.top_k if moe is not None else 0))
    off = [f"{k} {mc[k]} (catalog {v})" for k, v in pairs
           if k in mc and isinstance(mc[k], int | float) and mc[k] != v]
    return ([f"the run's model_config differs from catalog {model_name}: {', '.join(off)}"]
            if off else [])


# ------------------------------------------------------------------ the replay


@dataclass
class Replay:
    """A replayed run: the simulator's result, the per-request pairs, the comparison."""

    run: MeasuredRun
    result: Result
    requests: pd.DataFrame  # per request: measured and predicted side by side
    comparison: pd.DataFrame  # scope, subset, metric, stat, unit, n, predicted, measured, error_pct
    scenario: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def calibration(self) -> str:
        return str(self.result.metrics.get("calibration"))


def replay(run: MeasuredRun, base: str | Path | None = None, *, model: str | None = None,
           hardware: str | None = None, tp: int | None = None, limit: int | None = None,
           record_iterations: bool = False, progress: Any = None) -> Replay:
    """Replay ``run`` (its first ``limit`` requests) and compare."""
    t0 = time.perf_counter()
    if limit is not None:
        if limit < 1:
            raise ScenarioError(f"--limit: expected at least 1 request, got {limit}")
        if limit < len(run.requests):
            run = run.limit(limit)
    sc, notes = replay_scenario(run, base, model=model, hardware=hardware, tp=tp,
                                record_iterations=record_iterations)
    notes = [*run.notes, *request_notes(run), *notes, *check_model_shape(run, sc.get("model"))]
    trace = replay_trace(run)
    origin = str(base) if base is not None else str(run.path)
    try:
        result = run_scenario(sc, trace=trace, progress=progress)
    except (ScenarioError, TraceError, CatalogError) as exc:
        msg = str(exc)
        raise type(exc)(msg if msg.startswith(origin) else f"{origin}: {msg}") from None
    pairs = pair_requests(run, result)
    comp = compare(run, pairs, result)
    done = pairs["predicted_done"].to_numpy()
    if not done.all():
        notes.append(f"{int((~done).sum()):,} requests did not complete in the simulator "
                     f"({', '.join(f'{k}: {v}' for k, v in result.metrics.get('rejected_by_reason', {}).items()) or 'in flight'}); "
                     "left out of the comparison")
    notes.append(TPOT_NOTE)
    rep = Replay(run, result, pairs, comp, result.scenario, notes)
    rep.notes += _reported_notes(rep)
    rep.wall_s = time.perf_counter() - t0
    return rep


def pair_requests(run: MeasuredRun, result: Result) -> pd.DataFrame:
    """Measured and predicted per request (trace row i is the run's request i)."""
    req = run.requests
    sim = result.requests
    if len(sim) != len(req):  # pragma: no cover (the trace has one row per request)
        raise AssertionError("the simulator's request table does not match the run")
    return pd.DataFrame({
        "index": req["index"].to_numpy(), "stage": req["stage"].astype(str).to_numpy(),
        "arrival_s": req["arrival_s"].to_numpy(),
        "input_tokens": req["input_tokens"].to_numpy(),
        "output_tokens": req["output_tokens"].to_numpy(),
        "has_error": req["has_error"].to_numpy(), "output_ok": req["output_ok"].to_numpy(),
        "measured_ttft_s": req["ttft_s"].to_numpy(), "measured_e2e_s": req["e2e_s"].to_numpy(),
        "measured_tpot_s": req["tpot_s"].to_numpy(),
        "predicted_done": (sim["status"] == "completed").to_numpy(),
        "predicted_output_tokens": sim["output_tokens"].to_numpy(),
        "predicted_ttft_s": sim["ttft_s"].to_numpy(), "predicted_e2e_s": sim["e2e_s"].to_numpy(),
        "predicted_tpot_s": sim["tpot_s"].to_numpy(),
        "preemptions": sim["preemptions"].to_numpy(),
    })


def _dist(v: np.ndarray) -> dict[str, float]:
    v = v[np.isfinite(v)]
    if not v.size:
        return dict.fromkeys(STATS, math.nan)
    p = np.percentile(v, [50, 90, 99])
    return {"mean": float(v.mean()), "p50": float(p[0]), "p90": float(p[1]), "p99": float(p[2])}


def _err(pred: float, meas: float) -> float:
    if not (math.isfinite(pred) and math.isfinite(meas)) or meas == 0:
        return math.nan
    return 100.0 * (pred - meas) / meas


def _throughput(p: pd.DataFrame, side: str) -> float:
    """Output tokens / (last finish - first arrival) of these requests."""
    if not len(p):
        return math.nan
    tokens = float(p["predicted_output_tokens"].sum())
    span = float((p["arrival_s"] + p[f"{side}_e2e_s"]).max() - p["arrival_s"].min())
    return tokens / span if span > 0 else math.nan


def compare(run: MeasuredRun, pairs: pd.DataFrame, result: Result | None = None) -> pd.DataFrame:
    """Predicted vs measured per scope (each stage, then "all") and subset ("all": every
    request without an error that the simulator completed; "consistent": of those, the
    ones whose recorded output count agrees with their measured decode time)."""
    base = pairs["predicted_done"] & ~pairs["has_error"]
    subsets = {"all": base, "consistent": base & pairs["output_ok"]}
    names = [s.name for s in run.stages]
    scopes = [*names, "all"] if len(names) > 1 else ["all"]
    rows = []
    for subset, mask in subsets.items():
        for scope in scopes:
            sel = mask if scope == "all" else mask & (pairs["stage"] == scope)
            p = pairs[sel]
            for label, col, unit, scale in METRICS:
                pred, meas = _dist(p[f"predicted_{col}"].to_numpy()), _dist(
                    p[f"measured_{col}"].to_numpy())
                n = int(np.isfinite(p[f"measured_{col}"].to_numpy()).sum())
                for stat in STATS:
                    rows.append((scope, subset, label, stat, unit, n, pred[stat] * scale,
                                 meas[stat] * scale, _err(pred[stat], meas[stat])))
            tp_pred, tp_meas = _throughput(p, "predicted"), _throughput(p, "measured")
            rows.append((scope, subset, "throughput", "output", "tok/s", len(p), tp_pred, tp_meas,
                         _err(tp_pred, tp_meas)))
    if result is not None:  # the simulator's ITL (per-token gaps) vs the measured TPOT spread
        itl = result.metrics.get("itl_s") or {}
        meas = _dist(pairs.loc[subsets["all"], "measured_tpot_s"].to_numpy())
        for stat in STATS:
            pred = float(itl.get(stat, math.nan) if itl.get(stat) is not None else math.nan)
            rows.append(("all", "all", "ITL", stat, "ms", int(subsets["all"].sum()), pred * 1e3,
                         meas[stat] * 1e3, _err(pred, meas[stat])))
    return pd.DataFrame(rows, columns=["scope", "subset", "metric", "stat", "unit", "n",
                                       "predicted", "measured", "error_pct"])


def _reported_notes(rep: Replay) -> list[str]:
    """inference-perf's own TPOT/ITL (measured.csv) next to the ground truth's TPOT."""
    rows = rep.run.reported
    if rep.run.limited or rows is None or not len(rows) or "tpot_mean_ms" not in rows.columns:
        return []  # (inference-perf's summaries describe the whole run)
    out = []
    comp = rep.comparison

    def gt(scope: str, subset: str) -> float:
        hit = comp[(comp.scope == scope) & (comp.subset == subset) & (comp.metric == "TPOT")
                   & (comp.stat == "mean")]
        return float(hit.measured.iloc[0]) if len(hit) else math.nan

    for _, r in rows.iterrows():
        stage = "all" if r["stage"] == "summary" else str(r["stage"])
        try:
            ip, itl50 = float(r["tpot_mean_ms"]), float(r.get("itl_p50_ms", "nan"))
        except (TypeError, ValueError):
            continue
        a, c = gt(stage, "all"), gt(stage, "consistent")
        if math.isfinite(ip) and math.isfinite(a):
            extra = f" ({c:.2f} ms on the consistent requests)" if abs(c - a) > 0.005 * a else ""
            out.append(f"{'whole run' if stage == 'all' else 'stage ' + stage}: inference-perf "
                       f"TPOT mean {ip:.2f} ms (ITL p50 {itl50:.3f} ms); ground truth "
                       f"{a:.2f} ms per token{extra}: the table uses the ground truth")
    return out


# ------------------------------------------------------------------ presenting


def _fmt(x: float, unit: str) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    digits = {"ms": 2, "s": 3, "tok/s": 1}.get(unit, 2)
    return f"{x:,.{digits}f}"


def _fmt_err(x: float) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:+.1f}%"


def tables(rep: Replay) -> list[Any]:
    """Rich tables: one per scope (metric x stat: predicted, measured, error %), then the
    error of the means on the consistent subset."""
    from rich.table import Table

    comp = rep.comparison
    out = []
    stages = {s.name: s for s in rep.run.stages}
    for scope in dict.fromkeys(comp["scope"]):
        c = comp[(comp.scope == scope) & (comp.subset == "all")]
        n = int(c[c.metric == "E2E"]["n"].iloc[0]) if len(c[c.metric == "E2E"]) else 0
        st = stages.get(scope)
        if scope == "all" and len(stages) == 1:
            st = next(iter(stages.values()))
            scope_name = "whole run" if st.name == "all" else f"stage {st.name}"
        else:
            scope_name = "whole run" if scope == "all" else f"stage {scope}"
        what = scope_name + (f" ({st.rate:g} req/s, {st.start_s:,.0f}-{st.end_s:,.0f} s)"
                             if st is not None and st.rate else "")
        tab = Table(title=f"replay {rep.run.name}: {what}, {n:,} requests")
        tab.add_column("metric")
        tab.add_column("stat")
        tab.add_column("predicted", justify="right")
        tab.add_column("measured", justify="right")
        tab.add_column("error", justify="right")
        for r in c.itertuples():
            label = f"{r.metric} ({r.unit})"
            if r.metric == "ITL":
                label = "ITL sim gap vs measured TPOT (ms)"
            tab.add_row(label, r.stat, _fmt(r.predicted, r.unit), _fmt(r.measured, r.unit),
                        _fmt_err(r.error_pct))
        out.append(tab)
    cons = comp[comp.subset == "consistent"]
    n_all = int((rep.requests["predicted_done"] & ~rep.requests["has_error"]).sum())
    n_ok = int((rep.requests["predicted_done"] & rep.requests["output_ok"]
                & ~rep.requests["has_error"]).sum())
    if len(cons) and n_ok < n_all:
        tab = Table(title=f"error on the requests whose recorded output count agrees with their "
                          f"measured decode time ({n_ok:,} of {n_all:,})")
        tab.add_column("scope")
        for label in ("E2E mean", "TPOT mean", "TTFT mean", "E2E p99"):
            tab.add_column(label, justify="right")
        for scope in dict.fromkeys(cons["scope"]):
            c = cons[cons.scope == scope]

            def e(metric: str, stat: str, c=c) -> str:
                hit = c[(c.metric == metric) & (c.stat == stat)]
                return _fmt_err(float(hit.error_pct.iloc[0])) if len(hit) else "-"

            tab.add_row("whole run" if scope == "all" else f"stage {scope}", e("E2E", "mean"), e("TPOT", "mean"), e("TTFT", "mean"),
                        e("E2E", "p99"))
        out.append(tab)
    return out


def summary_json(rep: Replay) -> dict[str, Any]:
    """What replay.json holds."""
    m = rep.result.metrics
    run = rep.run
    reported = None
    if run.reported is not None:
        reported = run.reported.drop(columns=[c for c in ("source_path",)
                                              if c in run.reported.columns]).to_dict("records")
    return finite_or_none({
        "run": run.name, "source": str(run.path), "format": run.fmt,
        "model": m.get("model"), "model_id": run.model_id,
        "hardware": m.get("fleet", {}).get("accelerator"), "gpu": run.gpu,
        "tensor_parallel": m.get("fleet", {}).get("tensor_parallel"),
        "engine": rep.scenario.get("engine"),
        "scheduler": rep.scenario.get("scheduler"),
        "kv_blocks_per_worker": m.get("kv_blocks_per_worker"),
        "calibration": m.get("calibration"), "calibration_values": m.get("calibration_values"),
        "requests": len(run.requests),
        "failed_requests": int(run.requests["has_error"].sum()),
        "stages": [{"name": s.name, "start_s": s.start_s, "end_s": s.end_s, "rate": s.rate,
                    "requests": int((run.requests["stage"] == s.name).sum())}
                   for s in run.stages],
        "definitions": {
            "tpot": TPOT_NOTE,
            "throughput": "output tokens of the scope's requests / (last finish - first "
                          "arrival)",
            "error_pct": "100 x (predicted - measured) / measured",
            "subset_all": "requests without has_error that the simulator completed",
            "failed_requests": "requests with has_error: replayed (0 tokens as 1), left out "
                               "of every subset",
            "subset_consistent": "of those, the ones whose recorded output count agrees with "
                                 "their measured decode time",
            "itl": "the simulator's per-token gaps (its ITL histogram) vs the measured "
                   "per-request TPOT distribution",
        },
        "comparison": rep.comparison.to_dict("records"),
        "inference_perf": reported,
        "preemptions": m.get("preemptions"),
        "simulated_time_s": m.get("simulated_time_s"),
        "wall_time_s": rep.wall_s,
        "notes": list(dict.fromkeys([*rep.notes, *rep.result.notes])),
    })


REPLAY_FILES = ("replay.csv", "replay.json", "replay.png")


def iteration_log_format(result: Any) -> str:
    """The run's ``simulation.iteration_log`` (parquet or csv)."""
    return (result.scenario.get("simulation") or {}).get("iteration_log", "parquet")


def write_replay(rep: Replay, out_dir: Path, *, force: bool = False,
                 report: bool = True) -> str:
    """replay.csv, replay.json, replay.png and the run's own outputs (metrics.json,
    requests.csv, the iteration log as ``simulation.iteration_log`` says, report.md) into
    ``out_dir``, by the rules of
    ``report.output`` (checked first, written into a temporary folder, moved into place)."""
    from specsim.outputs import Staging, escape_frame
    from specsim.simulator.metrics.iteration_log import open_log, write_csv
    from specsim.simulator.report import output as o
    from specsim.simulator.validation.plots import replay_figure

    result = rep.result
    with Staging(out_dir, force) as staging:  # checked again; any failure leaves nothing
        tmp = staging.tmp
        (tmp / "metrics.json").write_text(o.metrics_json(result))
        with open(tmp / "requests.csv", "w", newline="") as f:
            write_csv(escape_frame(result.requests), f)
        log = open_log(iteration_log_format(result), tmp)
        log.write(result.iterations)
        log.close()
        if report:
            from specsim.simulator.report.report import write_report

            write_report(result, tmp)
        escape_frame(rep.comparison).to_csv(tmp / "replay.csv", index=False,
                                            float_format="%.6g")
        (tmp / "replay.json").write_text(json.dumps(summary_json(rep), indent=2) + "\n")
        replay_figure(rep, tmp / "replay.png")
        return staging.commit("specsim replay", scenario=result.metrics.get("scenario"))
