"""The power curve an accelerator's phases are drawn on (cost_models/data/power.yaml), next to
the measurements it was fitted to and checked against, and the rule it replaced.

Prints the curve's watts at the fit's anchors and at chosen utilisations, and with
``--png PATH`` draws power against HBM utilisation for a few compute utilisations, the two
ML.ENERGY anchors (H100-SXM decode at batch 1 and 128), the H200 decode range Ma et al.
measured, and the former rule idle + (max - idle) x max(u_compute, u_memory).

    python benchmarks/power_curve.py [--accelerator H100-SXM] [--png docs/img/power_curve.png]
"""

from __future__ import annotations

import argparse

import numpy as np

from specsim.cost_models.catalog import get_hardware, power_curve

#: (label, u_compute, u_memory, measured W): power.yaml's anchors, H100-SXM
ANCHORS = (("ML.ENERGY v3.0, batch 1", 0.0025, 0.738, 300.0),
           ("ML.ENERGY v3.0, batch 128", 0.2286, 0.814, 600.0))
MA_H200_DECODE_W = (137.0, 300.0)  # Ma et al. 2026, arXiv 2605.11999


def watts(idle: float, mx: float, c, u_c, u_m):
    """power.yaml's rule (the kernel's ``_util``), vectorised for the table and the plot."""
    frac = np.minimum(1.0, c.host + c.compute * np.asarray(u_c) + c.memory * np.asarray(u_m))
    return idle + (mx - idle) * frac


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--accelerator", default="H100-SXM")
    ap.add_argument("--png", help="draw the curve into this PNG")
    args = ap.parse_args()
    hw, c = get_hardware(args.accelerator), power_curve(args.accelerator)
    idle, mx = hw.power_idle_w, hw.power_max_w
    print(f"{args.accelerator}: idle {idle:g} W, max {mx:g} W; curve {c.accelerator}: host "
          f"{c.host:g}, compute {c.compute:g}, memory {c.memory:g}\nsource: {c.source}\n")
    print(f"{'point':<34}{'u_compute':>10}{'u_memory':>10}{'curve W':>9}{'measured':>10}"
          f"{'max(u) W':>10}")
    rows = [*ANCHORS, ("host bookkeeping (no kernel)", 0.0, 0.0, None),
            ("compute-bound prefill", 0.6, 0.3, None)]
    for label, uc, um, meas in rows:
        old = idle + (mx - idle) * min(1.0, max(uc, um))
        print(f"{label:<34}{uc:>10.4f}{um:>10.3f}{float(watts(idle, mx, c, uc, um)):>9.0f}"
              f"{'' if meas is None else f'{meas:.0f}':>10}{old:>10.0f}")
    if args.png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        um = np.linspace(0.0, 1.0, 101)
        fig, ax = plt.subplots(figsize=(7.0, 4.5))
        for uc in (0.0, 0.1, 0.2, 0.3, 0.45):
            ax.plot(um, watts(idle, mx, c, uc, um), label=f"this curve, u_compute {uc:g}")
        ax.plot(um, idle + (mx - idle) * um, "k--", label="former rule, max(u) (u_compute small)")
        ax.axhspan(*MA_H200_DECODE_W, color="0.85", zorder=0,
                   label="decode measured on H200, 137-300 W (Ma et al. 2026)")
        for (label, uc, umem, meas), dy in zip(ANCHORS, (8, -16), strict=True):
            ax.plot([umem], [meas], "o", color="k", zorder=5)
            ax.annotate(f"{label} ({meas:.0f} W, u_compute {uc:g})", (umem, meas),
                        textcoords="offset points", xytext=(-230, dy), fontsize=8)
        ax.axhline(idle, color="0.5", lw=0.8, ls=":")
        ax.text(0.02, idle - 28, f"idle {idle:g} W (assumed)", fontsize=8, color="0.4")
        ax.set_xlabel("HBM bandwidth utilisation of the phase, u_memory (fraction of peak)")
        ax.set_ylabel(f"power per device (W), {args.accelerator}")
        ax.set_xlim(0.0, 1.0)
        ax.set_ylim(0.0, mx * 1.05)
        ax.set_title("Power by phase utilisation (cost_models/data/power.yaml)")
        ax.legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        fig.savefig(args.png, dpi=110)
        print(f"\nwrote {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
