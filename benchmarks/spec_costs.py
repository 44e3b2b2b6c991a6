"""Speculation's step cost as measured parts: the sources, the fits, the held-out errors.

Reads ``cost_models/data/spec_step_costs.yaml`` (every public measurement found that
separates speculation's costs in vLLM, SGLang or TensorRT-LLM, plus the torch reference in
../shared/data/gpu_steps) and prints:

1. the sources, one line each (what was measured, engine, hardware, date, URL);
2. the speculative path's own per-step work fitted as fixed + per drafted token + per draft
   step (and, separately, with a per-sequence term), each parameter's status and its value
   with each source held out, every row's held-out error, and the published bounds;
3. the drafter pass's kernel floor (per pass, per layer) in each execution regime, with the
   rows' held-out errors, and the Llama-3.2-1B pass of the torch reference against weight
   streaming batch by batch;
4. what an engine pays with speculation configured and idle, per engine mode;
5. the recommendation, and the verdict comparison the issue quotes: per-step overhead at
   batch 1, 32 and 128 against today's 0.77 ms + 84 us x batch (H100 profile), and what a
   drafter pass costs with and without a floor.

    python benchmarks/spec_costs.py [--file PATH] [--k 4]

Nothing is written; the simulator's pricing and profiles are untouched.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from specsim.cost_models.calibrate import spec_costs as sc  # noqa: E402

GPU_STEPS = REPO.parent / "shared" / "data" / "gpu_steps" / "h200_torch_steps.jsonl"
H100_BW = 3350e9 * 0.909385  # the bundled H100-SXM profile's streaming rate
H200_BW = 4800e9 * 0.909385


def _us(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e6:9.1f}"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:8.3f}"


def _first_numbers(published: dict, limit: int = 3) -> str:
    parts = []
    for k, v in list(published.items())[:limit]:
        if isinstance(v, str):
            v = v if len(v) < 40 else v[:37] + "..."
        parts.append(f"{k}={v}")
    return "; ".join(parts)


def print_sources(sources: dict[str, sc.Source]) -> None:
    print("== Sources (cost_models/data/spec_step_costs.yaml)")
    for s in sources.values():
        used = "fit" if s.fit else "not fitted: " + s.excluded_because
        print(f"- {s.id} [{s.component}] {s.engine} {s.engine_version}; {s.hardware}; "
              f"{s.date}")
        print(textwrap.indent(textwrap.fill(f"published: {_first_numbers(s.published)}",
                                            96), "    "))
        print(f"    {used}\n    {s.url}")
    print()


def print_fit(title: str, fit: sc.LinearFit) -> None:
    print(f"== {title}")
    print(f"{'parameter':30} {'value us':>9} {'bound us':>9}  status; held out (us)")
    for p in fit.params.values():
        held = ", ".join(f"-{g}: {v * 1e6:.3g}" for g, v in p.held_out.items())
        print(f"{p.name:30} {_us(p.value)} {_us(p.bound)}  {p.status}"
              + (f"; {held}" if held else ""))
    print(f"{'source':36} {'row':26} {'measured ms':>11} {'fitted ms':>9} {'held-out ms':>11}"
          f" {'held-out err':>12}")
    for r in fit.rows:
        print(f"{r.source:36} {r.label:26} {_ms(r.measured_s):>11} {_ms(r.fitted_s):>9} "
              f"{_ms(r.held_out_s):>11} {r.held_out_pct:11.1f}%")
    for g, lab, bound, fitted in fit.bounds:
        rel = "within" if fitted <= bound else "ABOVE"
        print(f"bound {g} {lab} (rejection sampling's share only): fitted spec path "
              f"{fitted * 1e3:.3f} ms, {rel} the {bound * 1e3:.3f} ms bound")
    errs = fit.held_out_errors()
    if errs:
        print("mean |held-out error| per source: "
              + ", ".join(f"{g} {e:.1f}%" for g, e in errs.items()))
    print()


def print_floor_rows(report: sc.Report) -> None:
    sources = report.sources
    for regime, fit in report.floors.items():
        print_fit(f"Drafter pass floor, regime {regime} (rows with <= {sc.FLOOR_MAX_TOKENS} "
                  "tokens fitted)", fit)
        big = [(s, r) for s in sources.values() if s.fit and s.regime == regime
               for r in s.rows if r["tokens"] > sc.FLOOR_MAX_TOKENS]
        for s, r in big:
            pred = sc.drafter_pass_s(fit, r["layers"], sc.roofline_s(s, r))
            print(f"  outside the fitted range: {s.id} tokens={r['tokens']:g}: measured "
                  f"{r['measured_s'] * 1e3:.3f} ms, predicted {pred * 1e3:.3f} ms "
                  f"({100 * (pred / r['measured_s'] - 1):+.1f}%)")
        if big:
            print()


def print_gpu_steps_1b(sources: dict[str, sc.Source]) -> None:
    src = sources.get("gpu_steps_h200_llama32_1b")
    if src is None:
        return
    print("== Llama-3.2-1B pass on H200 (torch reference, CUDA graphs; not an engine)")
    print(f"{'batch':>5} {'measured ms':>11} {'weights ms':>10} {'KV ms':>7} {'compute ms':>10}"
          f" {'x streaming':>11} {'above roofline per layer us':>28}")
    for r in src.rows:
        w = r["weight_bytes"] / src.bandwidth_Bps
        kv = r["kv_bytes"] / src.bandwidth_Bps
        c = r["flops"] / src.peak_flops
        per_layer = (r["measured_s"] - w - kv - c) / r["layers"]
        print(f"{r['tokens']:5g} {r['measured_s'] * 1e3:11.3f} {w * 1e3:10.3f} {kv * 1e3:7.3f} "
              f"{c * 1e3:10.3f} {r['measured_s'] / (w + kv):11.2f} {per_layer * 1e6:28.1f}")
    if GPU_STEPS.is_file():
        table = {(d["model"], d["batch"]): d["seconds"] for d in map(json.loads, GPU_STEPS.open())
                 if d.get("kind") == "decode" and d.get("q") == 1}
        worst = max(abs(r["measured_s"] / table[("llama-3.2-1b", r["tokens"])] - 1)
                    for r in src.rows)
        print(f"(rows checked against {GPU_STEPS}: largest difference {100 * worst:.4f}%)")
    print()


def print_idle(report: sc.Report) -> None:
    print("== Speculation configured but idle (K=0), per engine mode")
    for m in report.idle.values():
        parts = []
        if m.drafter_forward:
            parts.append("a drafter pass still runs")
        if m.graph_mode_change:
            parts.append("the target's CUDA-graph mode changes")
        print(f"{m.mode}: {'; '.join(parts) or 'no drafter pass, graphs kept'}")
        for p in m.points:
            print(f"  b={p.rows:g}: {p.overhead_s * 1e3:.3f} ms per step ({p.pct:+.2f}%)  "
                  f"[{p.source}]")
        if m.line is not None:
            print(f"  line: {m.line[0] * 1e3:.3f} ms + {m.line[1] * 1e6:.1f} us x batch "
                  f"({m.note})")
    print()


def print_recommendation(report: sc.Report, k: int) -> None:
    rec = sc.recommendation(report)
    print("== Recommendation (seconds; values the data support, by the rules in "
          "spec_costs.recommendation)")
    for name, d in rec.items():
        bound = "" if d.get("bound") is None else f", bound {d['bound'] * 1e6:.3g} us"
        print(f"{name:38} {d['value'] * 1e6:9.2f} us  ({d['evidence']}; fitted "
              f"{d['fitted'] * 1e6:.3g} us; {d['status']}{bound})")
    print()
    print(f"== Verdict comparison: speculation's per-step overhead, drafter and verify passes "
          f"excluded (k={k} when drafting)")
    for b in (1, 32, 128):
        cells = sc.implied_step_overhead(report, b, k)
        print(f"batch {b}:")
        for name, (value, how) in cells.items():
            shown = "n/a" if value is None else f"{value * 1e3:.3f} ms"
            print(f"  {name:34} {shown:>10}  ({how})")
    fl = report.floors.get("engine_draft")
    torch = report.floors.get("torch_graph")
    target = report.floors.get("engine_target")
    print()
    print("== A drafter pass at batch 1 (streaming at the bundled profiles' eta_memory)")
    cases = [("Llama-3.2-1B on H100", 16, 2.4715e9 / H100_BW),
             ("Llama-3.2-1B on H200", 16, 2.4715e9 / H200_BW),
             ("EAGLE-3 head (Llama-3.1-8B) on H100", 1, 0.8493e9 / H100_BW)]
    for label, layers, stream in cases:
        row = f"  {label:38} streaming only {stream * 1e3:.3f} ms"
        for name, fit in (("engine_target", target), ("engine_draft", fl),
                          ("torch_graph", torch)):
            if fit is not None:
                row += f"; +{name} floor {sc.drafter_pass_s(fit, layers, stream) * 1e3:.3f} ms"
        print(row)
    print()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", help="a data file in the same form (default: the bundled one)")
    ap.add_argument("--k", type=int, default=4, help="draft tokens per sequence when drafting")
    args = ap.parse_args(argv)
    sources = sc.load_sources(args.file)
    report = sc.fit_all(sources)
    print_sources(sources)
    print_fit("Speculative path (fixed + per drafted token + per draft step)", report.spec_path)
    print_fit("Speculative path with a per-sequence term", report.spec_path_with_seq)
    print_floor_rows(report)
    print_gpu_steps_1b(sources)
    print_idle(report)
    ngram = report.ngram
    if ngram:
        print("== n-gram proposal (CPU) per scanned context token")
        for g, threads, s in ngram:
            print(f"  {g}: {threads:g} thread(s): {s * 1e9:.3f} ns per token")
        print()
    print_recommendation(report, args.k)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
