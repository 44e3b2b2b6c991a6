"""Engine-stack fit: what a serving engine's kernels and CPU add to the operator tables.

The bundled GPU profiles start from Vidur's per-operator kernel tables
(``benchmarks/operator_fit.py``). A serving engine runs those operators differently: vLLM
v1 replays CUDA graphs (no per-kernel launch gaps), fuses the residual add into RMSNorm and
the activation into one kernel (fewer elementwise bytes), uses its own all-reduce for small
messages on NVLink (microseconds, not NCCL's tens), and pays CPU work per iteration. Those
parameters (``STACK_PARAMS``) are fitted here to the load stages of the measured vLLM runs
(``specsim.simulator.validation.stage_samples``: one equation per stage, measured time per
output token vs the price of the stage's average iteration); the operator tables' values of
everything else are kept. Leave-one-model-out says how well they transfer.

    python benchmarks/engine_fit.py                  # print the fit, write nothing
    python benchmarks/engine_fit.py --write-bundled  # update cost_models/calibrations/*.yaml

Run ``operator_fit.py --write-bundled`` first when the operator tables change (it rewrites
the profiles; this script then adds the engine stack). Speculation's own costs (per step,
and each drafter pass's kernel floor) come from the public measurements in
cost_models/data/spec_step_costs.yaml (``spec_values``) and are written with their sources.
Reads ../shared/data/vllm_runs; where it is absent it says so and exits 0.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from specsim.cost_models.calibrate.engine_fit import (  # noqa: E402
    STACK_PARAMS,
    UNREACHABLE_SLACK,
    fit_engine,
    identifiability,
    leave_one_group_out,
    operator_tables_values,
    stage_step_s,
    unreachable,
    with_prompt_cache,
    workload_of,
)
from specsim.cost_models.calibrate.profiles import (  # noqa: E402
    CROSS_NODE,
    NIC_TRANSFERS,
    transferred_cross_node,
    write_profile,
)
from specsim.cost_models.calibration import EXTRA_PARAMS, profile_from_dict  # noqa: E402

DATA = REPO.parent / "shared" / "data" / "vllm_runs"
BUNDLED = REPO / "cost_models" / "calibrations"
FITTED_ON = "H100-SXM"  # the hardware of the measured runs
TRANSFER_TO = ("A100-SXM-80GB",)
# parameters a profile may take from a cited measurement or another chip instead of its own
# tables (the cross-node all-reduce, profiles.CROSS_NODE): a refit keeps their values and
# sources as they are, except those taken from another chip's profile (profiles.NIC_TRANSFERS),
# copied from it afresh
KEEP_SOURCE = CROSS_NODE
RUNS_SOURCE = ("8 measured vLLM v1 runs on H100-SXM (../shared/data/vllm_runs: Llama-2-7B TP1, "
               "Llama-2-70B TP4, Mixtral-8x7B TP2, CodeLlama-34B TP2; 16 load stages), "
               "benchmarks/engine_fit.py")
def spec_values() -> tuple[dict[str, float], dict[str, str]]:
    """Speculation's own costs, from the public measurements in
    cost_models/data/spec_step_costs.yaml (``cost_models.calibrate.spec_costs``):

    - per step with a speculator configured (drafting or idle): vLLM's V2 model runner
      measured 0.11 ms per step at K=0 with the drafter pass skipped (18.29 -> 18.40 ms at
      batch 8, vllm#49548), above the spec path's own fitted fixed cost (7 us, poorly
      identified) and under the rejection-sampling bound (0.16 ms at batch 1, H100);
    - per sequence and per drafted token: 0, since no measurement identifies either (the
      one per-sequence slope, A7's 84 us, is V1 dynamic SD's graph-mode downgrade plus a
      drafter pass at K=0, a configuration rather than speculation's work);
    - each drafter pass: a kernel floor per pass and per layer, fitted to vLLM draft passes
      (SpecDecode-Bench's H100 measurements, poorly identified: range 30-116 us per layer).
    """
    from specsim.cost_models.calibrate.spec_costs import fit_all, idle_at

    rep = fit_all()
    idle = rep.idle["vllm-mrv2-skip"]
    step, how = idle_at(idle, idle.points[0].rows)
    floor = rep.floors["engine_draft"]
    src = rep.sources
    idle_src = src[idle.points[0].source]
    values = {"spec_step_overhead_s": round(step, 9), "spec_seq_overhead_s": 0.0,
              "spec_token_overhead_s": 0.0,
              "draft_pass_overhead_s": round(floor.value("draft_pass_overhead_s"), 9),
              "draft_layer_overhead_s": round(floor.value("per_layer_overhead_s"), 9)}
    ids = sorted({r.source for r in floor.rows})
    sources = {
        "spec_step_overhead_s": (
            f"{idle_src.url} ({idle_src.date}): speculation configured and idle, vLLM V2 "
            f"model runner with skip_draft_when_k0, {idle_src.hardware}: "
            f"{step * 1e3:.2f} ms per step ({how}); charged on every step with a speculator, "
            "drafting or not (the spec path's own fixed cost fits 7 us, under it); "
            "cost_models/data/spec_step_costs.yaml, transferred to this chip"),
        "spec_seq_overhead_s": ("0: no public measurement identifies a per-sequence term "
                                "(cost_models/data/spec_step_costs.yaml; docs/"
                                "speculation-costs.md)"),
        "spec_token_overhead_s": ("0: under the rejection-sampling bound of 1.1 us per drafted "
                                  "token at batch 128 (SpecDecode-Bench, H100); not identified"),
        "draft_pass_overhead_s": (
            "kernel floor of a drafter pass, fitted to vLLM draft passes "
            f"({', '.join(ids)}; cost_models/data/spec_step_costs.yaml), poorly identified"),
        "draft_layer_overhead_s": (
            "kernel floor per drafter layer, fitted with draft_pass_overhead_s "
            f"({', '.join(ids)}; cost_models/data/spec_step_costs.yaml); range 30-116 us "
            "over the regimes, poorly identified"),
    }
    return values, sources


def transferred(hw: str) -> tuple[dict[str, float], dict[str, str]]:
    """The cross-node terms ``hw`` copies from another chip's bundled profile, with their
    source labels (``profiles.transferred_cross_node``); none for a chip that copies none."""
    if hw not in NIC_TRANSFERS:
        return {}, {}
    donor = yaml.safe_load((BUNDLED / f"{NIC_TRANSFERS[hw][0]}.yaml").read_text())
    return transferred_cross_node(hw, donor)


def _cal(doc: dict, values: dict, origin: str):
    return profile_from_dict({**doc, "fitted": values}, origin)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA, help=f"vllm_runs folder (default {DATA})")
    ap.add_argument("--write-bundled", action="store_true",
                    help="write the fitted engine stack into cost_models/calibrations/")
    args = ap.parse_args(argv)
    if not args.data.is_dir():
        print(f"engine_fit: {args.data} is absent (see shared/data/README.md, vllm_runs); "
              "nothing to fit")
        return 0
    from specsim.simulator.validation.measured import load_vllm_run, run_files
    from specsim.simulator.validation.stage_samples import stage_samples

    runs = [load_vllm_run(f) for f in run_files(args.data)]
    # the runs' prompts repeat (100 distinct ones each) and vLLM v1 caches them by default:
    # each stage's prefill is the tokens its prefix cache does not hold (engine_fit.
    # with_prompt_cache; docs/fidelity.md, "The engine's rhythm")
    samples = [s for r in runs for s in with_prompt_cache(stage_samples(r), r)
               if s.hardware == FITTED_ON]
    path = BUNDLED / f"{FITTED_ON}.yaml"
    doc = yaml.safe_load(path.read_text())
    op_values = operator_tables_values(doc)
    base = _cal(doc, op_values, str(path))
    measured = np.array([s.step_s for s in samples])
    before = np.array([stage_step_s(s, base) for s in samples])
    out = unreachable(samples, base, STACK_PARAMS)
    fitted, pred = fit_engine(samples, base, holdout=out, params=STACK_PARAMS)
    lomo = leave_one_group_out(samples, base, [s.model for s in samples], params=STACK_PARAMS,
                               exclude=out)
    lowo = leave_one_group_out(samples, base, [workload_of(s.label) for s in samples],
                               params=STACK_PARAMS, exclude=out)

    def ape(p: np.ndarray) -> np.ndarray:  # over the stages fitted to
        return np.abs(p[~out] / measured[~out] - 1.0) * 100.0

    print(f"engine-stack fit to {len(samples)} load stages of {len(set(s.label.split(':')[0] for s in samples))} "
          f"measured vLLM runs on {FITTED_ON}")
    print(f"{'run:stage':<48} {'rate':>5} {'rows':>6} {'measured':>9} {'op tables':>10} "
          f"{'refit':>7} {'LOMO':>7} {'LOWO':>7}   (ms per output token; LOMO / LOWO = "
          "fitted with the stage's model / workload left out)")
    for s, b, p, h, w, o in zip(samples, before, pred, lomo, lowo, out, strict=True):
        print(f"{s.label[16:]:<48} {s.rate:5.1f} {s.decode_rows:6.1f} {s.step_s * 1e3:9.2f} "
              f"{b * 1e3:10.2f} {p * 1e3:7.2f} {h * 1e3:7.2f} {w * 1e3:7.2f}"
              + ("  unreachable: not fitted to" if o else ""))
    print(f"{int(out.sum())} stage(s) left out of every fit: priced with every engine-stack "
          "parameter at its fastest bound, still over the measured step time by more than "
          f"{UNREACHABLE_SLACK:.0%} (engine_fit.unreachable); errors below are over the other "
          f"{int((~out).sum())}")
    quality = {name: {"mean_ape_pct": round(float(ape(v).mean()), 2),
                      "median_ape_pct": round(float(np.median(ape(v))), 2),
                      "max_ape_pct": round(float(ape(v).max()), 2)}
               for name, v in (("operator_tables_only", before), ("refit", pred),
                               ("leave_one_model_out", lomo),
                               ("leave_one_workload_out", lowo))}
    for name, q in quality.items():
        print(f"{name:<22} mean {q['mean_ape_pct']:5.1f}%  median {q['median_ape_pct']:5.1f}%  "
              f"worst {q['max_ape_pct']:5.1f}%")
    for i in identifiability(samples, base, fitted, STACK_PARAMS, exclude=out):
        print(f"  {i.name:<22} {i.status:<18} {i.at_bound or '':<6} 95% interval "
              f"{i.ci95[0]:.4g} - {i.ci95[1]:.4g}"
              + (f"; confounded with {', '.join(i.correlated_with)}" if i.correlated_with
                 else ""))
    stack = {k: round(float(getattr(fitted, k)), 9) for k in STACK_PARAMS}
    print("fitted: " + ", ".join(f"{k} {v:g} (tables {op_values.get(k)})"
                                 for k, v in stack.items()))
    spec, spec_sources = spec_values()
    print("speculation (public measurements, transferred): "
          + ", ".join(f"{k} {v * 1e6:.1f} us" for k, v in spec.items()))
    if not args.write_bundled:
        return 0
    today = dt.date.today().isoformat()
    n_fit = int((~out).sum())
    section = {"source": RUNS_SOURCE, "date": today, "parameters": list(STACK_PARAMS),
               "prompts_cached": ("each run sends 100 distinct prompts in turn (inference-perf "
                                  "shared_prefix: prompt data_index mod 100, engine_fit."
                                  "prompt_period) and vLLM v1 caches prefixes by default: each "
                                  "stage's prefill is priced without its cached full blocks "
                                  "(mean cached tokens per stage: "
                                  + ", ".join(f"{s.label[16:]} {s.cached_tokens:.0f}"
                                              for s in samples) + ")"),
               "not_fitted_to": {
                   "stages": [s.label for s, o in zip(samples, out, strict=True) if o],
                   "why": ("unreachable: priced with every engine-stack parameter at its "
                           f"fastest bound, over {1 + UNREACHABLE_SLACK:g}x the measured step "
                           "time (engine_fit.unreachable; a prefix cache is the likely "
                           "reason, the runs record no prompt content)")},
               "fit_error_ms_per_token": quality,
               "stages": [{"stage": s.label, "measured_ms": round(s.step_s * 1e3, 3),
                           "refit_ms": round(float(p) * 1e3, 3),
                           "held_out_ms": round(float(h) * 1e3, 3),
                           **({"not_fitted_to": True} if o else {})}
                          for s, p, h, o in zip(samples, pred, lomo, out, strict=True)]}
    for hw in (FITTED_ON, *TRANSFER_TO):
        p = BUNDLED / f"{hw}.yaml"
        d = yaml.safe_load(p.read_text())
        ops = operator_tables_values(d)
        moved, moved_sources = transferred(hw)
        have = {**d["fitted"], **moved}
        kept = {k: have[k] for k in KEEP_SOURCE if k in have and k not in ops}
        new = {**ops, **kept, **stack, **spec}
        own = hw == FITTED_ON
        d["fitted"] = new
        d["operator_tables_fitted"] = ops
        cited = {k: v for k, v in (d.get("parameter_sources") or {}).items()
                 if k in KEEP_SOURCE}  # set from a public measurement, not the tables
        cited.update(moved_sources)
        d["parameter_sources"] = {
            **{k: cited.get(k, "operator tables (fit_quality)") for k in ops if k not in stack},
            **{k: cited[k] for k in kept if k in cited},
            **{k: (f"vllm_runs refit (engine_fit: {n_fit} of {len(samples)} load stages; "
                   f"{len(samples) - n_fit} unreachable ones left out, see engine_fit."
                   "not_fitted_to)" if own else
                   f"TRANSFERRED from the {FITTED_ON} vllm_runs refit (no runs on {hw})")
               for k in stack},
            **spec_sources}
        for k, neutral in EXTRA_PARAMS.items():  # what no data here separates
            if k not in d["parameter_sources"]:
                d["parameter_sources"][k] = f"not fitted: the neutral default ({neutral})"
        d["engine_fit"] = section if own else {"transferred_from": FITTED_ON, **section}
        d["source"] = (d["source"].split(" + engine stack:")[0]
                       + f" + engine stack: {RUNS_SOURCE}"
                       + ("" if own else f" (fitted on {FITTED_ON}, transferred)"))
        profile_from_dict(d, str(p))  # still a valid profile
        write_profile(d, p, force=True)
        print(f"wrote {p.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
