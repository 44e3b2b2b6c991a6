"""Fidelity: replay every measured vLLM run in ../shared/data/vllm_runs and compare.

Each run (``<run>.json.gz`` + ground truth + ``measured.csv``) is replayed by the same code
as ``specsim replay``: its exact arrivals and token counts, its engine settings
(max_num_seqs, max_num_batched_tokens, chunked prefill, block size, its KV block count),
speculation off. Generalisation is the target, not the training fit, so every run is
replayed three times, each with the engine stack (``engine_fit.STACK_PARAMS``) refitted now
on top of the bundled profile's operator-table values:

- full: fitted to every load stage (the bundled profile's procedure);
- LOMO: fitted with the run's model left out (leave one model out);
- LOWO: fitted with the run's workload left out (leave one workload out: codegen vs
  general, read from the run's name).

Per run and load stage: predicted vs measured and the absolute percentage error (APE) of
E2E mean, TPOT mean, TTFT mean and E2E p99 under each fit; then the mean APE per metric
over all stages (the targets' definition) and over the stages not overloaded, for all and
for the consistent requests, each target met or not; the engine rhythm (TTFT in decode
steps, measured vs predicted); which stack parameters the stage data identify (the fit's
Jacobian at its optimum, and how far each moves across the held-out fits); the output lag
(``engine.output_lag_steps``; vLLM's default is the full fit's value) fitted per fit from
replays made with it at 0, without the held-out group, every run replayed again with it: the
main tables are those replays (the lag as shipped, each held-out fit with its own lag), and
the mean APE with the lag at 0 / fitted follows them. Where a run's prompts repeat (the
shared runs send 100 distinct prompts in turn, ``engine_fit.prompt_period``) the replays
serve them from vLLM's prefix cache (on by default in vLLM v1) and the stack fits price
each stage's prefill without its cached tokens; then the operator-table
hold-outs (Vidur's kernel tables, refitted now with whole models, TP 8 and long contexts
left out).

Measured TPOT is the ground truth's (e2e_s - ttft_s) / (output_tokens - 1) per request
(inference-perf's TPOT in measured.csv counts two stream events per token: about half).
"Consistent" requests leave out those whose recorded output count disagrees with their
measured decode time (see ``specsim replay``'s notes; the replay decodes such a request for
the count its decode time implies, ``measured.decoded_tokens``, so the simulated batch
carries the engine's load, but its measured TPOT is still per recorded token).

    python benchmarks/fidelity.py [--jobs N] [--limit N] [--runs SUBSTRING] [--scenario BASE.yaml]

``--scenario`` replays once with that scenario's keys (e.g. ``calibration:``) instead of
the three fits. Exits 0 with a message when the data folder is absent (a fresh clone has
no ../shared).
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "vllm_runs"
OPS = REPO.parent / "shared" / "data" / "gpu_profiles" / "vidur"
OP_TARGETS = (5.0, 20.0)  # operator-table hold-outs: median and worst APE (%)

METRICS = (("E2E", "mean", "s", "E2E mean"), ("TPOT", "mean", "ms", "TPOT mean"),
           ("TTFT", "mean", "ms", "TTFT mean"), ("E2E", "p99", "s", "E2E p99"))
TARGETS = {"E2E mean": 8.0, "TPOT mean": 8.0, "TTFT mean": 15.0, "E2E p99": 15.0}
# issue 23: leave-one-workload-out <= 10 / 10 / 20% (read as E2E mean / TPOT mean / TTFT
# mean, the full fit's first three; it names no E2E p99 target held out)
HELD_OUT_TARGETS = {"E2E mean": 10.0, "TPOT mean": 10.0, "TTFT mean": 20.0}
FITS = ("full", "LOMO", "LOWO")
FIT_LABEL = {"full": "full fit (all stages)", "LOMO": "leave one model out",
             "LOWO": "leave one workload out", "given": "as given (--scenario)"}
FITTED_ON = "H100-SXM"  # the hardware of the shared runs; its bundled profile is refitted
BUNDLED = REPO / "cost_models" / "calibrations"
RHYTHM_STEPS = 3.0  # issue 23: measured TTFT is ~3 decode steps in every stage not overloaded
OVERLOAD_X = 10.0  # a stage whose predicted TTFT mean is over 10x the measured one: the
# simulated queue grows without bound there (the engine's did not)
# best published simulator accuracy on similar real vLLM runs (mean error): about 12% E2E and
# 23% TTFT (the summary of the peers; no comparable TPOT / p99 figure)
PEERS = {"E2E mean": "~12%", "TPOT mean": "-", "TTFT mean": "~23%", "E2E p99": "-"}


def replay_one(path: str, limit: int | None, scenario: str | None,
               fit: str = "given") -> dict[str, Any]:
    """Replay one run (in a worker process) under one fit and return what the tables need."""
    from specsim.simulator.validation.replay import load_measured, replay

    t0 = time.perf_counter()
    rep = replay(load_measured(path), scenario, limit=limit)  # repeats cached (replay_trace)
    comp = rep.comparison
    req = rep.run.requests
    rows = []
    for subset in ("all", "consistent"):
        for scope in dict.fromkeys(comp["scope"]):
            if scope == "all" and len(rep.run.stages) > 1:
                continue  # per stage only (the whole run mixes two loads)
            cell = {}
            for metric, stat, _unit, label in METRICS:
                hit = comp[(comp.scope == scope) & (comp.subset == subset)
                           & (comp.metric == metric) & (comp.stat == stat)]
                cell[label] = ((float(hit.predicted.iloc[0]), float(hit.measured.iloc[0]))
                               if len(hit) else (math.nan, math.nan))
            stage = (rep.run.stages[0].name if scope == "all" else scope)
            st = next((s for s in rep.run.stages if s.name == stage), None)
            sub = req[req["stage"] == stage] if "stage" in req else req
            rows.append({"subset": subset, "stage": stage,
                         "rate": st.rate if st is not None else None, "cells": cell,
                         "prompt": float(sub["input_tokens"].mean()) if len(sub) else math.nan})
    m = rep.result.metrics
    return {"run": rep.run.name, "fit": fit, "rows": rows, "calibration": m["calibration"],
            "calibration_source": (m.get("calibration_values") or {}).get("source"),
            "model": m["model"], "tp": m["fleet"]["tensor_parallel"],
            "requests": len(rep.run.requests), "wall_s": time.perf_counter() - t0,
            "miscounted": int((~rep.requests["output_ok"]).sum())}


def _ape(pred: float, meas: float) -> float:
    if not (math.isfinite(pred) and math.isfinite(meas)) or meas == 0:
        return math.nan
    return abs(pred - meas) / abs(meas) * 100.0


def _short(name: str) -> str:
    parts = name.split("-", 2)  # drop the date-time prefix
    short = parts[2] if len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit() else name
    return short.replace("-v0-1", "").replace("-hf", "")


def _num(x: float, unit: str) -> str:
    if not math.isfinite(x):
        return "-"
    return f"{x:,.3f}" if unit == "s" else f"{x:,.1f}"


def operator_holdouts(console, folder: Path) -> None:
    """The operator-table fit per chip, refitted now, with whole models, TP 8 and long
    attention contexts held out in turn: median and worst error on the held-out rows."""
    from rich.table import Table

    from specsim.cost_models.calibrate.profiles import fit_profiles

    if not folder.is_dir():
        console.print(f"operator tables: {folder} is absent; hold-outs skipped")
        return
    tab = Table(title="operator tables (Vidur's measured kernels): held-out error per op group")
    for col in ("hardware", "held out", "op group", "rows", "median APE", "p90 APE",
                "worst APE", f"target <= {OP_TARGETS[0]:g}% / <= {OP_TARGETS[1]:g}%"):
        tab.add_column(col, justify="left" if col in ("hardware", "held out", "op group")
                       else "right")
    for hw in ("H100-SXM", "A100-SXM-80GB"):
        fit = fit_profiles(folder, hw)
        for h in fit.quality["holdouts"]:
            for group, q in h["test"].items():
                if not q.get("rows"):
                    continue
                met = q["median_ape_pct"] <= OP_TARGETS[0] and q["max_ape_pct"] <= OP_TARGETS[1]
                tab.add_row(hw, str(h["held_out"])[:60], group, f"{q['rows']:,}",
                            f"{q['median_ape_pct']:.1f}%", f"{q['p90_ape_pct']:.1f}%",
                            f"{q['max_ape_pct']:.1f}%", "yes" if met else "no")
    console.print(tab)


def stack_fits(files: list[Path], workdir: Path, console) -> tuple[dict, dict[str, str]]:
    """Refit the engine stack on the bundled profile's operator-table values: on every
    stage, and with each model and each workload left out. Writes one profile and one base
    scenario per fit into ``workdir``; returns {(fit, run name): scenario path} and the
    identifiability evidence."""
    from specsim.cost_models.calibrate.engine_fit import (
        STACK_PARAMS,
        fit_engine,
        fits_without,
        identifiability,
        leave_one_group_out,
        operator_tables_values,
        stage_step_s,
        unreachable,
        with_prompt_cache,
        workload_of,
    )
    from specsim.cost_models.calibration import profile_from_dict
    from specsim.simulator.validation.measured import load_vllm_run
    from specsim.simulator.validation.stage_samples import stage_samples

    runs = [load_vllm_run(f) for f in files]
    samples = [s for r in runs if r.hardware == FITTED_ON
               for s in with_prompt_cache(stage_samples(r), r)]
    path = BUNDLED / f"{FITTED_ON}.yaml"
    doc = yaml.safe_load(path.read_text())
    base = profile_from_dict({**doc, "fitted": operator_tables_values(doc)}, str(path))
    out = unreachable(samples, base, STACK_PARAMS)  # never fitted to (engine_fit.py says why)
    full, pred = fit_engine(samples, base, holdout=out, params=STACK_PARAMS)
    by = {"LOMO": [s.model for s in samples], "LOWO": [workload_of(s.label) for s in samples]}
    held = {k: fits_without(samples, base, g, params=STACK_PARAMS, exclude=out)
            for k, g in by.items()}
    cals = {("full", "all"): full, **{(k, g): c for k, d in held.items() for g, c in d.items()}}
    scen: dict[tuple[str, str], str] = {}
    for (fit, group), cal in cals.items():
        tag = f"{fit}-{group}".replace("/", "_")
        values = {**doc["fitted"], **operator_tables_values(doc),  # what the fit kept
                  **{k: float(getattr(cal, k)) for k in STACK_PARAMS}}
        prof = {**doc, "name": f"{FITTED_ON} stack refit ({fit}, without {group})"
                if fit != "full" else f"{FITTED_ON} stack refit (all stages)", "fitted": values}
        profile_from_dict(prof, tag)  # still a valid profile
        (workdir / f"{tag}.yaml").write_text(yaml.safe_dump(prof, sort_keys=False))
        (workdir / f"scenario-{tag}.yaml").write_text(
            yaml.safe_dump({"calibration": str(workdir / f"{tag}.yaml"),
                            # vLLM v1's default; the runs' repeated prompts hit it
                            "engine": {"enable_prefix_caching": True, "output_lag_steps": 0.0}}))
        scen[(fit, group)] = str(workdir / f"scenario-{tag}.yaml")
    plan = {}
    for f, r in zip(files, runs, strict=True):
        if r.hardware != FITTED_ON:
            console.print(f"{r.name}: on {r.hardware}, not {FITTED_ON}: not replayed")
            continue
        plan[("full", r.name)] = (f, scen[("full", "all")])
        plan[("LOMO", r.name)] = (f, scen.get(("LOMO", str(r.model)), scen[("full", "all")]))
        plan[("LOWO", r.name)] = (f, scen.get(("LOWO", workload_of(r.name)),
                                              scen[("full", "all")]))
    group = {(fit, r.name): ("all" if fit == "full" else str(r.model) if fit == "LOMO"
                             else workload_of(r.name))
             for f, r in zip(files, runs, strict=True) for fit in FITS}
    measured = np.array([s.step_s for s in samples])
    stage_err = {"operator tables only": np.array([stage_step_s(s, base) for s in samples]),
                 "full": pred,
                 **{k: leave_one_group_out(samples, base, g, params=STACK_PARAMS, exclude=out)
                    for k, g in by.items()}}
    evidence = {"params": STACK_PARAMS, "cals": cals, "doc": doc, "n": len(samples),
                "group": group,
                "ids": identifiability(samples, base, full, STACK_PARAMS, exclude=out),
                "unreachable": [s.label for s, o in zip(samples, out, strict=True) if o],
                "stage_ape": {k: np.abs(v[~out] / measured[~out] - 1.0) * 100.0
                              for k, v in stage_err.items()}}
    return plan, evidence


def print_identified(console, ev: dict) -> None:
    """Which stack parameters the stage data identify: computed from the fit."""
    from rich.table import Table

    if ev["unreachable"]:
        console.print(f"not fitted to ({len(ev['unreachable'])} of {ev['n']} stages): "
                      + ", ".join(ev["unreachable"]) + " -- priced with every engine-stack "
                      "parameter at its fastest bound, still slower than measured "
                      "(engine_fit.unreachable); every fit and the errors of the fit's own "
                      "equations below leave them out")
    n_fit = ev["n"] - len(ev["unreachable"])
    tab = Table(title=f"engine-stack parameters: what the {n_fit} load stages fitted identify "
                "(Jacobian of the relative step-time residuals at the full fit's optimum; "
                "range = the values over every held-out fit)")
    for col in ("parameter", "operator tables", "full fit", "95% interval", "range over "
                "LOMO / LOWO fits", "status", "confounded with"):
        tab.add_column(col, justify="left" if col in ("parameter", "status", "confounded with")
                       else "right")
    doc_ops = ev["doc"].get("operator_tables_fitted") or ev["doc"]["fitted"]

    def fmt(name: str, v: float | None) -> str:
        if v is None or not math.isfinite(v):
            return "-"
        return f"{v * 1e6:,.1f} us" if name.endswith("_s") else f"{v:.3g}"

    for i in ev["ids"]:
        vals = [getattr(c, i.name) for (fit, _g), c in ev["cals"].items() if fit != "full"]
        bound = f" ({i.at_bound} bound)" if i.at_bound else ""
        tab.add_row(i.name, fmt(i.name, doc_ops.get(i.name)), fmt(i.name, i.value),
                    f"{fmt(i.name, i.ci95[0])} - {fmt(i.name, i.ci95[1])}",
                    f"{fmt(i.name, min(vals))} - {fmt(i.name, max(vals))}", i.status + bound,
                    ", ".join(i.correlated_with) or "-")
    console.print(tab)
    counts = {st: [i.name for i in ev["ids"] if i.status == st]
              for st in ("identified", "poorly identified", "at a bound", "flat")}
    console.print("identified (95% interval within +-50%): " + (", ".join(counts["identified"])
                                                                or "none")
                  + "; poorly identified: " + (", ".join(counts["poorly identified"]) or "none")
                  + "; pushed to a bound (the data want a value past the physical range, or "
                  "the model lacks a term there): " + (", ".join(counts["at a bound"]) or "none")
                  + "; flat (no stage moves with it): " + (", ".join(counts["flat"]) or "none")
                  + ". On a bound the interval is the room the data would leave it were it "
                  "freed alone.")
    full, bundled = ev["cals"][("full", "all")], ev["doc"]["fitted"]
    moved = {k: (getattr(full, k), bundled.get(k)) for k in ev["params"]
             if not math.isclose(getattr(full, k), bundled.get(k) or 0.0, rel_tol=1e-4,
                                 abs_tol=1e-9)}
    console.print("the full refit " + ("equals the bundled profile's engine stack (within "
                                       "1e-4): the 'full' column is the shipped profile"
                                       if not moved else "differs from the bundled profile: "
                                       + ", ".join(f"{k} {a:g} (bundled {b})"
                                                   for k, (a, b) in moved.items())))
    line = ", ".join(f"{k} {np.mean(v):.1f}% mean / {np.max(v):.1f}% worst"
                     for k, v in ev["stage_ape"].items())
    console.print(f"per-stage step time (ms per output token, the fit's own equations): {line}")


def replay_all(plan: dict, limit: int | None, jobs: int) -> list[dict[str, Any]]:
    """Every (fit, run) of ``plan`` replayed, in ``jobs`` processes."""
    tasks = list(plan.items())
    call = ([str(f) for _k, (f, _s) in tasks], [limit] * len(tasks),
            [sc for _k, (_f, sc) in tasks], [k[0] for k, _v in tasks])
    if jobs == 1:
        return list(map(replay_one, *call))
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(replay_one, *call))


def _stage_cells(results: list[dict[str, Any]], subset: str = "all"):
    """(fit, run, TTFT (pred, meas), TPOT (pred, meas), stage) per replayed stage."""
    for r in results:
        for row in r["rows"]:
            if row["subset"] == subset:
                yield (r["fit"], r["run"], row["cells"]["TTFT mean"], row["cells"]["TPOT mean"],
                       row["stage"])


def rhythm_lags(results: list[dict[str, Any]], group: dict) -> dict[tuple[str, str], float]:
    """``engine.output_lag_steps`` per (fit, held-out group), from the lag-0 replays: the
    closed-form least squares of the relative TTFT mean error (``engine_fit.fit_output_lag``)
    over the stages of that fit's replays outside the group (every stage for the full fit),
    all requests, stages not overloaded (TTFT over 10x measured is queueing, not rhythm).
    The held-out group's measured TTFT is never used for its own lag."""
    from specsim.cost_models.calibrate.engine_fit import fit_output_lag

    cells = [(fit, run, tt, tp) for fit, run, tt, tp, _st in _stage_cells(results)
             if math.isfinite(tt[0]) and tt[0] <= OVERLOAD_X * tt[1]]
    lags = {}
    for fit, g in sorted({(k[0], v) for k, v in group.items()}):
        rows = [c for c in cells if c[0] == fit and (fit == "full" or group[(fit, c[1])] != g)]
        if not rows:
            lags[(fit, g)] = 0.0
            continue
        lags[(fit, g)] = fit_output_lag([c[2][0] for c in rows], [c[3][0] for c in rows],
                                        [c[2][1] for c in rows])
    return lags


def with_lag(scenario: str, lag: float) -> str:
    """A copy of a base scenario file with ``engine.output_lag_steps`` set (beside it)."""
    src = Path(scenario)
    data = yaml.safe_load(src.read_text()) or {}
    data.setdefault("engine", {})["output_lag_steps"] = float(lag)
    out = src.with_name(f"{src.stem}-lag{lag:.6f}.yaml")
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(out)


def print_rhythm_fit(console, before: list[dict[str, Any]], after: list[dict[str, Any]],
                     ev: dict) -> None:
    """The fitted lags and the mean APE per metric with the lag at 0 and at its fit (as
    shipped for the full fit) (each held-out fit's lag fitted without its group)."""
    from rich.table import Table

    lags = ev["lags"]
    console.print("engine.output_lag_steps fitted per fit (closed-form least squares of the "
                  "relative TTFT mean error on the lag-0 replays, stages not overloaded, "
                  "held-out group excluded): "
                  + "; ".join(f"{f} {g}: {v:.3f}" for (f, g), v in sorted(lags.items())))
    tab = Table(title="before / after the output lag: mean APE per metric over the stages "
                "(all stages | not overloaded in the lag-0 replay)")
    for col in ("fit", "subset", *[lab for *_x, lab in METRICS]):
        tab.add_column(col, justify="left" if col in ("fit", "subset") else "right")
    over = {(fit, run, st) for fit, run, tt, _tp, st in _stage_cells(before)
            if math.isfinite(tt[0]) and tt[0] > OVERLOAD_X * tt[1]}
    for fit in FITS:
        for subset in ("all", "consistent"):
            cells = []
            for *_x, label in METRICS:
                out = []
                for res in (before, after):
                    every, kept = [], []
                    for r in res:
                        if r["fit"] != fit:
                            continue
                        for row in r["rows"]:
                            if row["subset"] == subset:
                                a = _ape(*row["cells"][label])
                                every.append(a)
                                if (fit, r["run"], row["stage"]) not in over:
                                    kept.append(a)
                    out.append(f"{_pct(_mean(every))} | {_pct(_mean(kept))}")
                cells.append(" -> ".join(out))
            tab.add_row(FIT_LABEL[fit], subset, *cells)
    console.print(tab)


def _mean(v: list[float]) -> float:
    v = [x for x in v if math.isfinite(x)]
    return sum(v) / len(v) if v else math.nan


def _pct(x: float) -> str:
    return f"{x:,.1f}%" if math.isfinite(x) else "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA, help=f"vllm_runs folder (default {DATA})")
    ap.add_argument("--jobs", type=int, default=1, help="replays run in parallel processes")
    ap.add_argument("--limit", type=int, help="replay only each run's first N requests (quick)")
    ap.add_argument("--runs", help="only runs whose name contains this (the fits still use "
                    "every run)")
    ap.add_argument("--scenario", help="replay once with these base scenario keys (e.g. "
                    "calibration:) instead of the three engine-stack fits")
    ap.add_argument("--ops", type=Path, default=OPS,
                    help=f"operator tables folder for the hold-outs (default {OPS})")
    ap.add_argument("--no-ops", action="store_true", help="skip the operator-table hold-outs")
    ap.add_argument("--no-rhythm", action="store_true", help="skip the output-lag fit "
                    "(engine.output_lag_steps fitted per fit and every run replayed again "
                    "with it; without it the main tables are the lag at 0)")
    args = ap.parse_args(argv)
    if not args.data.is_dir():
        print(f"fidelity: {args.data} is absent (a fresh clone has no ../shared/data); nothing "
              "to replay, skipped")
        return 0
    sys.path.insert(0, str(REPO))
    from rich.console import Console

    from specsim.simulator.validation.measured import run_files

    every = list(run_files(args.data))
    files = [p for p in every if not args.runs or args.runs in p.name]
    if not files:
        print(f"fidelity: no <run>.json.gz with its ground truth in {args.data}; skipped")
        return 0
    console = Console(width=max(Console().width, 230))
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="specsim-fidelity-") as tmp:
        if args.scenario:
            fits, evidence = ("given",), None
            plan = {("given", p.name): (p, args.scenario) for p in files}
        else:
            fits = FITS
            plan, evidence = stack_fits(every, Path(tmp), console)
            names = {p.name for p in files}
            plan = {k: v for k, v in plan.items() if v[0].name in names}
        jobs = max(1, min(args.jobs, len(plan)))
        results = replay_all(plan, args.limit, jobs)  # the fits' scenarios: lag at 0
        lagged = None
        if evidence is not None and not args.no_rhythm:  # the lag fitted, then replayed
            lags = rhythm_lags(results, evidence["group"])
            evidence["lags"] = lags
            lagged = replay_all({k: (f, with_lag(sc, lags[(k[0], evidence["group"][k])]))
                                 for k, (f, sc) in plan.items()}, args.limit, jobs)
    wall = time.perf_counter() - t0
    report(console, lagged if lagged is not None else results, fits, evidence, args)
    if lagged is not None:
        print_rhythm_fit(console, results, lagged, evidence)
    if not args.no_ops:
        operator_holdouts(console, args.ops)
    per = ", ".join(f"{_short(r['run'])} {r['fit']} {r['wall_s']:.1f} s" for r in results)
    console.print(f"wall time {wall:.1f} s with --jobs {jobs} ({per})")
    return 0


def report(console, results: list[dict[str, Any]], fits: tuple[str, ...],
           evidence: dict | None, args) -> None:
    """Every table of the benchmark from the replays' results."""
    from rich.table import Table

    cals = sorted({f"{r['calibration']}" for r in results})
    console.print(f"fidelity benchmark, {dt.date.today().isoformat()}: "
                  f"{len({r['run'] for r in results})} measured vLLM runs from {args.data}"
                  + (f", first {args.limit} requests each" if args.limit else "")
                  + f"; fits: {', '.join(FIT_LABEL[f] for f in fits)}")
    console.print(f"calibration profile: {'; '.join(cals)}")
    # stage key -> fit -> subset -> row
    stages: dict[tuple[str, str], dict[str, dict[str, dict]]] = {}
    for r in results:
        for row in r["rows"]:
            stages.setdefault((r["run"], row["stage"]), {}).setdefault(r["fit"], {})[
                row["subset"]] = row
    ref = fits[0]

    def overloaded(key) -> bool:
        pred, meas = stages[key][ref]["all"]["cells"]["TTFT mean"]
        return math.isfinite(pred) and math.isfinite(meas) and pred > OVERLOAD_X * meas

    apes: dict[tuple[str, str, str], list[float]] = {}
    for key, per_fit in stages.items():
        for _metric, _stat, _unit, label in METRICS:
            for fit in fits:
                for subset in ("all", "consistent"):
                    ape = _ape(*per_fit[fit][subset]["cells"][label])
                    apes.setdefault((fit, subset, label), []).append(ape)
                    kept = apes.setdefault((fit, subset + " not overloaded", label), [])
                    if not overloaded(key):
                        kept.append(ape)
    for subset, what in (("consistent", "consistent requests (recorded output count agrees "
                          "with the measured decode time)"), ("all", "all requests")):
        tab = Table(title=f"per run and load stage, {what} -- each cell: measured: APE under "
                    + " / ".join(fits))
        tab.add_column("run", no_wrap=True)
        tab.add_column("stage", justify="right", no_wrap=True)
        for _metric, _stat, unit, label in METRICS:
            tab.add_column(f"{label} ({unit})", justify="right", no_wrap=True)
        for key, per_fit in stages.items():
            vals = []
            for _metric, _stat, unit, label in METRICS:
                meas = per_fit[ref][subset]["cells"][label][1]
                errs = " / ".join(_pct(_ape(per_fit[f][subset]["cells"][label][0], meas))
                                  for f in fits)
                vals.append(f"{_num(meas, unit)}: {errs}")
            row = per_fit[ref][subset]
            rate = f" ({row['rate']:g}/s)" if row["rate"] else ""
            tab.add_row(_short(key[0]), f"{key[1]}{rate}" + (" *" if overloaded(key) else ""),
                        *vals)
        console.print(tab)
    n_over = sum(overloaded(k) for k in stages)
    if n_over:
        console.print(f"* overloaded in the simulation: predicted TTFT mean over {OVERLOAD_X:g}x "
                      "the measured one (the simulated queue grows; the engine's did not)")
    summ = Table(title=f"mean APE over all runs and stages: all {len(stages)} stages (the "
                 f"targets' definition) and the {len(stages) - n_over} not overloaded in the "
                 "simulation "
                 f"(predicted TTFT mean > {OVERLOAD_X:g}x measured marks the other "
                 f"{n_over})")
    for col in ("fit", "metric", "all requests", "consistent", "all, not overloaded",
                "consistent, not overloaded", "target", "met (all requests, all stages)",
                "peers"):
        summ.add_column(col, justify="left" if col in ("fit", "metric") else "right")
    verdicts = []
    for fit in fits:
        for _metric, _stat, _unit, label in METRICS:
            m = {sub: _mean(apes[(fit, sub, label)]) for sub in
                 ("all", "consistent", "all not overloaded", "consistent not overloaded")}
            target = (HELD_OUT_TARGETS.get(label) if fit == "LOWO" else
                      TARGETS[label] if fit in ("full", "given") else None)
            met = "-" if target is None else "yes" if m["all"] <= target else "no"
            if target is not None:
                verdicts.append((fit, label, m["all"], target, met))
            summ.add_row(FIT_LABEL[fit], label, _pct(m["all"]), _pct(m["consistent"]),
                         _pct(m["all not overloaded"]), _pct(m["consistent not overloaded"]),
                         "-" if target is None else f"<= {target:g}%", met,
                         PEERS[label] if fit in ("full", "given") else "-")
    console.print(summ)
    console.print("targets: " + "; ".join(f"{FIT_LABEL[f]} {lab} {v:,.1f}% vs <= {t:g}%: "
                                          f"{'met' if m == 'yes' else 'NOT met'}"
                                          for f, lab, v, t, m in verdicts)
                  + ". LOMO has no target of its own (printed for transfer across models). "
                  "Issue 23's held-out '10 / 10 / 20%' is read as E2E mean / TPOT mean / TTFT "
                  "mean.")
    miscounted = {r["run"]: r["miscounted"] for r in results if r["miscounted"]}
    console.print("APE = |predicted - measured| / measured. Measured TPOT = (e2e_s - ttft_s) / "
                  "(output_tokens - 1) per request from the ground truth (inference-perf's TPOT "
                  "counts two stream events per token). 'consistent' leaves out requests whose "
                  "recorded output count disagrees with their measured decode time"
                  + ("" if not miscounted else " (" + ", ".join(
                      f"{_short(k)}: {v:,}" for k, v in miscounted.items()) + ")") + ".")
    console.print("peers: the best published simulator accuracy on similar real vLLM runs is "
                  "about 12% E2E and 23% TTFT mean error.")
    rhythm(console, stages, ref, overloaded)
    if evidence is not None:
        print_identified(console, evidence)


def rhythm(console, stages: dict, ref: str, overloaded) -> None:
    """TTFT in decode steps per stage: what the engine shows (measured TTFT / TPOT) and what
    the simulator prices (predicted TTFT / TPOT), consistent requests."""
    from rich.table import Table

    tab = Table(title=f"engine rhythm: TTFT in decode steps (TTFT mean / TPOT mean), consistent "
                f"requests, stages not overloaded, fit '{ref}'")
    for col in ("run", "stage", "mean prompt", "measured TTFT ms", "measured TPOT ms",
                "measured TTFT/TPOT", "predicted TTFT ms", "predicted TPOT ms",
                "predicted TTFT/TPOT"):
        tab.add_column(col, justify="left" if col == "run" else "right", no_wrap=True)
    meas_r, pred_r, now, three = [], [], [], []
    for key, per_fit in stages.items():
        if overloaded(key):
            continue
        row = per_fit[ref]["consistent"]
        (pt, mt), (pp, mp) = row["cells"]["TTFT mean"], row["cells"]["TPOT mean"]
        if not all(math.isfinite(x) and x > 0 for x in (pt, mt, pp, mp)):
            continue
        meas_r.append(mt / mp)
        pred_r.append(pt / pp)
        now.append(_ape(pt, mt))
        three.append(_ape(RHYTHM_STEPS * pp, mt))
        rate = f" ({row['rate']:g}/s)" if row["rate"] else ""
        tab.add_row(_short(key[0]), f"{key[1]}{rate}", f"{row['prompt']:,.0f}", f"{mt:,.1f}",
                    f"{mp:,.1f}", f"{mt / mp:.2f}", f"{pt:,.1f}", f"{pp:,.1f}", f"{pt / pp:.2f}")
    console.print(tab)
    if meas_r:
        console.print(f"measured TTFT/TPOT {min(meas_r):.2f}-{max(meas_r):.2f} (median "
                      f"{float(np.median(meas_r)):.2f}); predicted {min(pred_r):.2f}-"
                      f"{max(pred_r):.2f} (median {float(np.median(pred_r)):.2f}) over "
                      f"{len(meas_r)} stages. TTFT priced as {RHYTHM_STEPS:g} x the predicted "
                      f"TPOT (issue 23's ~3 decode steps, not fitted here) would err "
                      f"{_mean(three):.1f}% mean, {max(three):.1f}% worst; the simulator's "
                      f"TTFT errs {_mean(now):.1f}% mean, {max(now):.1f}% worst")


if __name__ == "__main__":
    sys.exit(main())
