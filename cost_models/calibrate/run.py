"""``specsim calibrate``: measure the device, time the grid, fit, validate end to end, write.

One function, ``calibrate``, so the CLI, the validation script and a notebook share it.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from ..catalog import hardware_from_dict
from ..errors import CatalogError
from ..roofline import ForwardCostModel
from . import require_torch
from .fit import FitResult, fit_grid, precision_for, profile_dict, write_profile
from .validate import by_drafter_and_kind, compare

# End-to-end settings: drafters and draft lengths measured on SmolLM2 (greedy).
SELF_SPEC_LAYERS = 26
SELF_SPEC_K = 3
LOOKUP_K = 4


def _say(progress: Callable[[str], None] | None, msg: str) -> None:
    if progress:
        progress(msg)


def measure_specdec(dtype: str, device: str, quick: bool, progress=None,
                    max_new: int | None = None, repeats: int | None = None,
                    reference: dict[str, float] | None = None,
                    budget_s: float | None = None,
                    skipped: list[str] | None = None) -> list[dict[str, Any]]:
    """Real speculative decoding on SmolLM2-135M: every drafter on every prompt (greedy).

    Each run is repeated and its step durations are per-step medians over the repeats.
    ``quick``: the short prompts of ``prompts.QUICK``, 24 new tokens, one repeat. With
    ``budget_s``, no prompt after the first starts once this phase has run that long; the
    prompts left out are appended to ``skipped``.
    """
    import torch

    from .bench import DTYPES, reference_time
    from .model import chat_prompt, load_smollm2, smollm2_tokenizer
    from .prompts import PROMPTS, QUICK
    from .specdec import PromptLookupDrafter, SelfSpecDrafter, generate, median_of_runs
    from .weights import fetch_smollm2

    t_start = time.perf_counter()
    fetch_smollm2()  # the GGUF alone, downloaded once into specsim's cache
    tk = smollm2_tokenizer()
    target = load_smollm2(DTYPES[dtype], device)
    stop = [tk.token_to_id("<|im_end|>"), tk.token_to_id("<|endoftext|>")]
    drafters = [(None, 0), (PromptLookupDrafter(), LOOKUP_K),
                (SelfSpecDrafter(target, SELF_SPEC_LAYERS), SELF_SPEC_K)]
    max_new = max_new or (24 if quick else 40)
    repeats = repeats or (1 if quick else 3)
    runs = []
    if reference is not None:
        reference["before"] = reference_time(target)
    todo = [(kind, name, text) for kind, prompts in (QUICK if quick else PROMPTS).items()
            for name, text in prompts.items()]
    for i, (kind, name, text) in enumerate(todo):
        if budget_s is not None and i > 0 and time.perf_counter() - t_start > budget_s:
            left = [f"{k}/{n}" for k, n, _ in todo[i:]]
            if skipped is not None:
                skipped.append(f"end to end: prompts {', '.join(left)} (time budget "
                               f"{budget_s:g} s spent)")
            _say(progress, f"time budget spent: skipping {', '.join(left)}")
            break
        ids = tk.encode(chat_prompt(text)).ids
        generate(target, ids[:8], 4)  # warm the allocator and kernels for this run
        for drafter, k in drafters:
            with torch.inference_mode():
                res = median_of_runs([generate(target, ids, max_new, drafter, k=k,
                                               stop_ids=stop) for _ in range(repeats)])
            res.prompt, res.kind = name, kind
            s = res.summary()
            runs.append(s)
            _say(progress, f"{kind}/{name} {s['drafter']}: tau {s['tau']:.2f}, "
                           f"TPOT {s['tpot_s'] * 1e3:.1f} ms")
    if reference is not None:
        reference["after"] = reference_time(target)
    return runs


def simulate_into(table: Any, profile: dict[str, Any], dtype: str,
                  simulate_runs: Callable[..., Any] | None) -> str:
    """Add the simulator's TPOT for each run to ``table`` (in place); returns a note.

    The profile is written to a temporary file because a scenario names its calibration by
    path. Any failure of the simulator leaves the table as is and says why.
    """
    import tempfile

    if simulate_runs is None:
        return "not run: no simulator was given (specsim calibrate passes it)"
    # Only what a scenario's calibration reads: every simulated run parses this file, and
    # the grid's measurement rows made that most of the simulator's time.
    slim = {k: profile[k] for k in ("name", "hardware", "source", "date", "fitted")
            if k in profile}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = write_profile(slim, Path(tmp) / "profile.yaml")
            sim = simulate_runs(table.to_dict(orient="records"), path, profile["hardware_spec"],
                                dtype)
    except Exception as exc:  # the simulator is optional here; the direct prediction stands
        return f"not run: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    table["sim_tpot_s"] = sim["sim_tpot_s"].to_numpy()
    table["sim_tau"] = sim["sim_tau"].to_numpy()
    table["sim_err_pct"] = 100.0 * (table["sim_tpot_s"] / table["tpot_s"] - 1.0)
    return ("simulator.run_scenario: one request per run (mean of 16 seeds), this profile and "
            "hardware_spec, measured accepted-length histogram at k (prompt lookup: measured "
            "match rate and lookup time)")


# --quick's time budgets (seconds of each phase after which optional work is skipped and
# reported): the grid's rounds after the second, the end-to-end prompts after the first.
QUICK_BUDGET_S = {"grid": 20.0, "end_to_end": 20.0}


def calibrate(device: str = "cpu", quick: bool = False, out: str | Path | None = None,
              dtype: str | None = None, threads: int | None = None, e2e: bool = True,
              name: str | None = None, progress: Callable[[str], None] | None = print,
              seed: int = 0, simulate_runs: Callable[..., Any] | None = None,
              budget_s: dict[str, float] | None = None, force: bool = False,
              ) -> tuple[dict[str, Any], FitResult]:
    """Run the benchmark and fit; returns (profile mapping, fit). Writes ``out`` if given.

    ``budget_s``: per-phase time budgets (keys ``grid``, ``end_to_end``; default
    ``QUICK_BUDGET_S`` with ``quick``, none otherwise). What a budget skips is printed and
    listed under the profile's ``skipped``; ``phases_s`` records where the time went.
    """
    require_torch()
    import torch

    from .bench import (
        FULL_GRID,
        QUICK_GRID,
        choose_threads,
        device_description,
        hardware_entry,
        load_average,
        measure_bandwidth,
        measure_peak_flops,
        run_grid,
    )
    from .model import SMOLLM2_135M

    if device not in ("cpu", "cuda"):
        raise CatalogError(f"--device: expected cpu or cuda, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise CatalogError("--device cuda: torch sees no CUDA device (this torch build is "
                           f"{torch.__version__})")
    dtype = dtype or "bf16"
    if dtype not in ("bf16", "float32", "fp16"):
        raise CatalogError(f"--dtype: expected bf16, float32 or fp16, got {dtype!r}")
    budget = dict(QUICK_BUDGET_S if quick else {}) if budget_s is None else dict(budget_s)
    t_start = time.perf_counter()
    phases: dict[str, float] = {}
    skipped: list[str] = []

    def phase(label: str, since: float) -> float:
        now = time.perf_counter()
        phases[label] = round(now - since, 1)
        return now

    load_before = load_average()
    thread_choice = None
    if device == "cpu":
        n_threads, thread_choice = choose_threads(threads, sample_s=0.5 if quick else 1.0)
        torch.set_num_threads(n_threads)
        if thread_choice["why"] != "--threads" and n_threads < min(2, os.cpu_count() or 1):
            _say(progress, f"busy machine: {thread_choice['why']}")
    _say(progress, f"device: {device_description(device)}; dtype {dtype}")
    t = time.perf_counter()
    readings = 1 if quick else 2  # the larger reading is the less disturbed one
    peak = max(measure_peak_flops(dtype, device) for _ in range(readings))
    bw = max(measure_bandwidth(device) for _ in range(readings))
    _say(progress, f"measured ceilings: {peak / 1e12:.3f} TFLOP/s ({dtype} matmul), "
                   f"{bw / 1e9:.1f} GB/s (copy)")
    hw_name = name or f"{device}-{platform.node() or 'local'}"
    hw_entry = hardware_entry(hw_name, peak, bw, dtype, device)
    hw = hardware_from_dict(hw_name, {k: v for k, v in hw_entry.items() if k != "name"},
                            "measured hardware")
    grid = QUICK_GRID if quick else FULL_GRID
    cfg = SMOLLM2_135M
    _say(progress, f"timing {len(grid.points())} verification passes "
                   f"(SmolLM2-135M shape, depths {list(grid.layers)})")
    t = phase("ceilings", t)
    table = run_grid(cfg, grid, dtype, device, seed=seed, progress=progress,
                     budget_s=budget.get("grid"))
    timing = table.attrs.get("timing", {})
    if timing.get("points_short_of_clean_samples"):
        skipped.append(f"grid: {timing['points_short_of_clean_samples']} of {len(table)} points "
                       f"kept contended samples (stopped: {timing['stopped']})")
        _say(progress, skipped[-1])
    t = phase("grid", t)
    # Ceilings again after the grid: the larger reading is the less disturbed one.
    peak = max(peak, measure_peak_flops(dtype, device))
    bw = max(bw, measure_bandwidth(device))
    hw_entry = hardware_entry(hw_name, peak, bw, dtype, device)
    hw = hardware_from_dict(hw_name, {k: v for k, v in hw_entry.items() if k != "name"},
                            "measured hardware")
    t = phase("ceilings_after_grid", t)
    spec = cfg.to_model_spec()
    prec = precision_for(dtype)
    fit = fit_grid(table, spec, hw, prec, holdout=0.25, seed=seed)
    cal = fit.calibration
    attn = (f", attention {cal.eta_attn_prefill:.3f}" if cal.eta_attn_prefill is not None
            else "")
    _say(progress, f"fit: eta_compute {cal.eta_compute:.3f}, eta_memory {cal.eta_memory:.3f}, "
                   f"{cal.per_layer_overhead_s * 1e6:.0f} us/layer, "
                   f"{cal.fixed_overhead_s * 1e6:.0f} us/pass{attn}; held-out median error "
                   f"{fit.holdout.get('median_ape_pct')}%, worst {fit.holdout.get('max_ape_pct')}%")
    t = phase("fit", t)
    extra: dict[str, Any] = {
        "device": device_description(device), "device_type": device,
        "torch_version": str(torch.__version__), "dtype": dtype,
        "threads": torch.get_num_threads() if device == "cpu" else None,
        "thread_choice": thread_choice,
        "load_average_per_core": {"before": load_before, "after_grid": load_average()},
        "measured_ceilings": {"peak_tflops": round(peak / 1e12, 6),
                              "bandwidth_gb_s": round(bw / 1e9, 3)},
        "hardware_spec": hw_entry,
        "model_shape": {k: v for k, v in asdict(cfg).items() if k != "name"} | {
            "name": "SmolLM2-135M (random weights for timing)"},
        "grid": {"batch": list(grid.batch), "q": list(grid.q), "ctx": list(grid.ctx),
                 "layers": list(grid.layers), "warmup": grid.warmup, "repeats": grid.repeats,
                 "settle": grid.settle,
                 "statistic": "median over rounds, contended samples set aside",
                 "timing": timing},
        "measurements": {
            "columns": ["n_layers", "batch", "q", "ctx", "median_ms", "predicted_ms", "split"],
            "rows": [[int(r.n_layers), int(r.batch), int(r.q), int(r.ctx),
                      round(r.measured_s * 1e3, 4), round(r.predicted_s * 1e3, 4), r.split]
                     for r in fit.table.itertuples()]},
    }
    grid_ref = table.attrs.get("reference_s", {})
    extra["speed_index"] = {
        "what": "median decode pass (batch 1, q 1, ctx 64) of the full-depth model, timed "
                "around each phase; drift between phases is machine noise the fit cannot see",
        "grid_before_ms": round(grid_ref.get("before", float("nan")) * 1e3, 3),
        "grid_after_ms": round(grid_ref.get("after", float("nan")) * 1e3, 3)}
    prof_name = name or f"{hw_name}-{dtype}"
    if e2e:
        _say(progress, "speculative decoding on SmolLM2-135M (greedy) ...")
        ref: dict[str, float] = {}
        runs = measure_specdec(dtype, device, quick, progress, reference=ref,
                               budget_s=budget.get("end_to_end"), skipped=skipped)
        t = phase("end_to_end", t)
        extra["speed_index"].update({"e2e_before_ms": round(ref["before"] * 1e3, 3),
                                     "e2e_after_ms": round(ref["after"] * 1e3, 3)})
        target = ForwardCostModel(spec, hw, 1, prec, cal)
        drafter = ForwardCostModel(replace(spec, n_layers=SELF_SPEC_LAYERS), hw, 1, prec, cal)
        table_e2e = compare(runs, target, {f"self-spec-{SELF_SPEC_LAYERS}L": drafter})
        sim_note = simulate_into(table_e2e, profile_dict(prof_name, hw_name, fit, "draft") | extra,
                                 dtype, simulate_runs)
        t = phase("simulator", t)
        summary = by_drafter_and_kind(table_e2e)
        extra["end_to_end"] = {
            "model": "SmolLM2-135M-Instruct (Q4_1 GGUF dequantised)", "temperature": 0.0,
            "settings": {"self_spec_layers": SELF_SPEC_LAYERS, "self_spec_k": SELF_SPEC_K,
                         "lookup_k": LOOKUP_K, "lookup_ngram": [3, 1]},
            "measured": "TPOT = (last token - first token) / (tokens - 1); per-step medians "
                        "over repeats of the (deterministic) greedy run",
            "prediction": "closed form with measured acceptance: (drafter passes x T_draft + "
                          "T_verify(mean q) + CPU draft time) / tau, at the mean context "
                          "(ForwardCostModel with this profile)",
            "simulator": sim_note,
            "summary": summary.to_dict(orient="records"),
            "runs": [{k: (round(v, 6) if isinstance(v, float) else v) for k, v in r.items()}
                     for r in table_e2e.to_dict(orient="records")],
        }
        for r in summary.itertuples():
            sim = (f", simulator {r.sim_tpot_ms:.1f} ms ({r.sim_err_pct:+.1f}%)"
                   if "sim_tpot_ms" in summary.columns else "")
            _say(progress, f"  {r.drafter:>16} {r.kind:>5}: tau {r.tau:.2f}, TPOT measured "
                           f"{r.tpot_ms:.1f} ms, predicted {r.pred_tpot_ms:.1f} ms "
                           f"({r.err_pct:+.1f}%){sim}")
    extra["runtime_s"] = round(time.perf_counter() - t_start, 1)
    extra["phases_s"] = phases
    extra["time_budget_s"] = budget or None
    extra["skipped"] = skipped
    _say(progress, f"done in {extra['runtime_s']:.0f} s ("
                   + ", ".join(f"{k.replace('_', ' ')} {v:.1f} s" for k, v in phases.items())
                   + (f"; skipped: {'; '.join(skipped)}" if skipped else "") + ")")
    profile = profile_dict(
        prof_name, hw_name, fit,
        source=(f"specsim calibrate{' --quick' if quick else ''} on {device_description(device)}"
                f", torch {torch.__version__}, {_dt.date.today().isoformat()}"),
        extra=extra)
    if out is not None:
        path = write_profile(profile, out, force=force)
        _say(progress, f"wrote {path}")
    return profile, fit
