"""Calibration validation: held-out grid errors, end-to-end TPOT, and the measured-vs-fitted plot.

    python benchmarks/calibration_validation.py                 # from the committed profile
    python benchmarks/calibration_validation.py --run full      # re-measure this machine first
    python benchmarks/calibration_validation.py --profile my.yaml --plot out.png

Reads a profile written by ``specsim calibrate`` (its ``measurements`` and ``end_to_end``
sections), recomputes the fitted curves with ``ForwardCostModel``, prints the tables and
writes the plot. Only ``--run`` needs torch.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from specsim.cost_models.calibrate.fit import (  # noqa: E402
    hardware_from_profile,
    model_spec_from_shape,
    precision_for,
)
from specsim.cost_models.calibration import profile_from_dict  # noqa: E402
from specsim.cost_models.roofline import ForwardCostModel, attention_area  # noqa: E402
from specsim.simulator.calibration_replay import simulate_runs  # noqa: E402

DEFAULT_PROFILE = REPO / "cost_models" / "calibrations" / "cpu-example.yaml"
DEFAULT_PLOT = REPO / "docs" / "img" / "calibration_cpu.png"


def load(path: Path) -> tuple[dict, pd.DataFrame]:
    prof = yaml.safe_load(path.read_text())
    m = prof["measurements"]
    return prof, pd.DataFrame(m["rows"], columns=m["columns"])


def cost_model(prof: dict, n_layers: int | None = None) -> ForwardCostModel:
    spec = model_spec_from_shape(prof["model_shape"], "SmolLM2-135M")
    if n_layers is not None:
        spec = replace(spec, n_layers=int(n_layers))
    cal = profile_from_dict(prof, "profile")  # every fitted parameter (attention's too)
    return ForwardCostModel(spec, hardware_from_profile(prof), 1, precision_for(prof["dtype"]),
                            cal)


def print_tables(prof: dict, grid: pd.DataFrame) -> None:
    f, q = prof["fitted"], prof["fit_quality"]
    print(f"profile {prof['name']}: {prof['device']}, {prof['dtype']}, torch "
          f"{prof['torch_version']}, {prof['date']}")
    ms = prof["measured_ceilings"]
    print(f"measured ceilings: {ms['peak_tflops']} TFLOP/s matmul, {ms['bandwidth_gb_s']} GB/s copy")
    attn = (f", attention {f['eta_attn_prefill']:.3f} "
            f"({f['eta_attn_prefill'] / f['eta_compute']:.2f} x eta_compute)"
            if "eta_attn_prefill" in f else "")
    print(f"fitted: eta_compute {f['eta_compute']:.3f}, eta_memory {f['eta_memory']:.3f}, "
          f"{f['per_layer_overhead_s'] * 1e6:.0f} us/layer, {f['fixed_overhead_s'] * 1e6:.0f} "
          f"us/pass{attn}\n")
    print("grid fit error (|predicted / measured - 1|, %)")
    tab = pd.DataFrame([{"split": s, **q[s]} for s in ("train", "holdout")])
    print(tab.to_string(index=False))
    a = q.get("attention", {})
    other = a.get("four_parameter_fit") or a.get("five_parameter_fit")
    if other:
        label = ("without attention's own efficiency (4 parameters)" if a.get("fitted")
                 else "with attention's own efficiency (5 parameters, not kept)")
        print(f"(fit {label}: held-out median {other['holdout']['median_ape_pct']}%, worst "
              f"{other['holdout']['max_ape_pct']}%)")
    elif "reason" in a:
        print(f"(attention: {a['reason']})")
    d = q.get("diagnostic", {})  # profiles written before attention was a fitted parameter
    if "holdout" in d:
        print(f"(diagnostic, not in the profile: a separate attention efficiency "
              f"({d['attention_efficiency_vs_eta_compute']:.2f} x eta_compute) would give "
              f"held-out median {d['holdout']['median_ape_pct']}%, worst "
              f"{d['holdout']['max_ape_pct']}%)")
    grid = grid.assign(err_pct=100 * (grid.predicted_ms / grid.median_ms - 1))
    ho = grid[grid.split == "holdout"]
    print("\nheld-out error by batch size (median / worst |%|):")
    print(ho.groupby("batch")["err_pct"].agg(
        median=lambda s: round(float(np.median(np.abs(s))), 1),
        worst=lambda s: round(float(np.max(np.abs(s))), 1)).to_string())
    e2e = prof.get("end_to_end")
    if not e2e:
        return
    print("\nend to end: SmolLM2-135M greedy speculative decoding, TPOT measured vs predicted")
    cols = ["drafter", "kind", "prompts", "tau", "tpot_ms", "pred_tpot_ms", "err_pct"]
    summ = pd.DataFrame(e2e["summary"])
    if "sim_tpot_ms" in summ.columns:
        cols += ["sim_tau", "sim_tpot_ms", "sim_err_pct"]
    print(summ[cols].round(2).to_string(index=False))
    print(f"prediction: {e2e['prediction']}")
    print(f"simulator: {e2e.get('simulator', 'not run')}")
    si = prof.get("speed_index")
    if si:
        print("speed index (ms, decode pass timed around each phase): "
              + ", ".join(f"{k.replace('_ms', '')} {v}" for k, v in si.items() if k.endswith("_ms")))


def plot(prof: dict, grid: pd.DataFrame, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    deep = int(grid.n_layers.max())
    ctxs = sorted(grid.ctx.unique())
    fig, axes = plt.subplots(2, 2, figsize=(12, 9))
    cm = cost_model(prof, deep)
    qs = np.arange(1, int(grid.q.max()) + 1)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, ctx in zip(axes[0], (ctxs[0], ctxs[-1]), strict=True):
        for i, b in enumerate(sorted(grid.batch.unique())):
            col = colors[i % len(colors)]
            t = np.array([float(cm.time(b * q, b * attention_area(q, ctx), b * ctx, b * q))
                          for q in qs])
            ax.plot(qs, t * 1e3, "-", color=col, label=f"fitted, batch {b}")
            pts = grid[(grid.n_layers == deep) & (grid.ctx == ctx) & (grid.batch == b)]
            for split, mk in (("train", "o"), ("holdout", "s")):
                s = pts[pts.split == split]
                ax.plot(s.q, s.median_ms, mk, color=col,
                        mfc=col if split == "train" else "none", ms=6)
        ax.set_xlabel("query tokens per sequence q = k + 1")
        ax.set_ylabel("verification pass time (ms)")
        ax.set_title(f"{deep} layers, context {ctx} tokens")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8, title="circles: fitted on, squares: held out",
                      title_fontsize=8)
    ax = axes[1][0]
    for split, mk in (("train", "o"), ("holdout", "s")):
        s = grid[grid.split == split]
        ax.loglog(s.median_ms, s.predicted_ms, mk, ms=4, alpha=0.7, label=split)
    lo, hi = grid.median_ms.min() * 0.8, grid.median_ms.max() * 1.2
    x = np.array([lo, hi])
    ax.plot(x, x, "k-", lw=1)
    ax.fill_between(x, x * 0.9, x * 1.1, color="grey", alpha=0.2, label="+-10%")
    ho = prof["fit_quality"]["holdout"]
    ax.set_title(f"all grid points; held out: median {ho['median_ape_pct']}%, "
                 f"worst {ho['max_ape_pct']}%")
    ax.set_xlabel("measured pass time (ms)")
    ax.set_ylabel("roofline prediction (ms)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    ax = axes[1][1]
    e2e = prof.get("end_to_end")
    if e2e:
        summ = pd.DataFrame(e2e["summary"])
        labels = [f"{r.drafter}\n{r.kind}" for r in summ.itertuples()]
        xs = np.arange(len(summ))
        series = [("measured", summ.tpot_ms), ("roofline + measured tau", summ.pred_tpot_ms)]
        if "sim_tpot_ms" in summ.columns:
            series.append(("simulator", summ.sim_tpot_ms))
        w = 0.8 / len(series)
        for j, (lab, vals) in enumerate(series):
            ax.bar(xs + (j - (len(series) - 1) / 2) * w, vals, w, label=lab)
        ax.set_xticks(xs, labels, fontsize=8)
        ax.set_ylabel("time per output token (ms)")
        ax.set_title("SmolLM2-135M speculative decoding (greedy), mean over prompts")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3, axis="y")
    else:
        ax.axis("off")
    fig.suptitle(f"calibration {prof['name']}: {prof['device']}, {prof['dtype']}, torch "
                 f"{prof['torch_version']}")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"\nwrote {out}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", type=Path, default=DEFAULT_PROFILE)
    ap.add_argument("--plot", type=Path, default=DEFAULT_PLOT)
    ap.add_argument("--run", choices=("quick", "full"),
                    help="re-measure this machine and rewrite --profile first (needs torch)")
    ap.add_argument("--name", default="cpu-example")
    args = ap.parse_args(argv)
    if args.run:
        from specsim.cost_models.calibrate.run import calibrate

        calibrate(quick=args.run == "quick", out=args.profile, name=args.name,
                  simulate_runs=simulate_runs)
    prof, grid = load(args.profile)
    print_tables(prof, grid)
    plot(prof, grid, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
