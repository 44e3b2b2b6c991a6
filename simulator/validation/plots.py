"""replay.png: predicted vs measured E2E per request (with y = x), and the TTFT and E2E CDFs
of both. matplotlib's object API on an Agg canvas, as in ``report.report`` (nothing global
is switched)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

MAX_POINTS = 6000  # scatter points (a seeded sample beyond this)
CDF_POINTS = 400


def _cdf(ax, values: np.ndarray, label: str, color: str, style: str = "-") -> None:
    v = np.sort(values[np.isfinite(values)])
    if not v.size:
        return
    q = np.linspace(0, 1, min(CDF_POINTS, v.size))
    ax.plot(np.quantile(v, q), q, style, color=color, label=label, lw=1.6)


def replay_figure(rep: Any, path: Path) -> None:
    """Write the three-panel comparison of one replay to ``path``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    p = rep.requests
    ok = (p["predicted_done"] & ~p["has_error"]).to_numpy()
    good = ok & p["output_ok"].to_numpy()
    fig = Figure(figsize=(16, 5.0), dpi=110)
    FigureCanvasAgg(fig)
    axs = fig.subplots(1, 3)
    # 1. per-request E2E, predicted vs measured
    ax = axs[0]
    meas = p["measured_e2e_s"].to_numpy()
    pred = p["predicted_e2e_s"].to_numpy()
    rng = np.random.default_rng(0)
    stages = list(dict.fromkeys(p["stage"]))
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]
    for i, st in enumerate(stages):
        idx = np.flatnonzero(good & (p["stage"].to_numpy() == st))
        if len(idx) > MAX_POINTS // max(len(stages), 1):
            idx = np.sort(rng.choice(idx, MAX_POINTS // max(len(stages), 1), replace=False))
        label = f"stage {st}" if st != "all" else "requests"
        ax.scatter(meas[idx], pred[idx], s=4, alpha=0.35, color=colors[i % len(colors)],
                   label=label, rasterized=True)
    bad = np.flatnonzero(ok & ~good)
    if len(bad):
        if len(bad) > MAX_POINTS // 4:
            bad = np.sort(rng.choice(bad, MAX_POINTS // 4, replace=False))
        ax.scatter(meas[bad], pred[bad], s=6, marker="x", color="0.55", alpha=0.5,
                   label="output count disagrees with decode time", rasterized=True)
    both = np.concatenate([meas[ok], pred[ok]])
    both = both[np.isfinite(both)]
    if both.size:
        lo, hi = 0.0, float(both.max()) * 1.05
        ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="y = x")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
    ax.set_xlabel("measured E2E latency (s)")
    ax.set_ylabel("predicted E2E latency (s)")
    ax.set_title("E2E per request")
    ax.legend(loc="upper left", fontsize=8, markerscale=3)
    ax.grid(alpha=0.3)
    # 2. TTFT CDF
    ax = axs[1]
    _cdf(ax, p.loc[ok, "measured_ttft_s"].to_numpy() * 1e3, "measured", "black")
    _cdf(ax, p.loc[ok, "predicted_ttft_s"].to_numpy() * 1e3, "predicted", "tab:red", "--")
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("time to first token (ms, log scale)")
    ax.set_ylabel("fraction of requests")
    ax.set_title("TTFT CDF")
    ax.legend(loc="lower right", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    # 3. E2E CDF
    ax = axs[2]
    _cdf(ax, meas[ok], "measured", "black")
    _cdf(ax, pred[ok], "predicted", "tab:red", "--")
    ax.set_xlabel("E2E latency (s)")
    ax.set_ylabel("fraction of requests")
    ax.set_title("E2E CDF")
    ax.legend(loc="lower right", fontsize=9)
    ax.grid(alpha=0.3)
    fig.suptitle(f"replay {rep.run.name}: predicted vs measured ({int(ok.sum()):,} requests; "
                 f"cost model: {rep.calibration})", fontsize=11)
    fig.tight_layout()
    fig.savefig(path)
