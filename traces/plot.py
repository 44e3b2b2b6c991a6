"""A one-page PNG of a trace: rate over time and the prompt / output length histograms."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd


def _time_unit(span_s: float) -> tuple[str, float]:
    if span_s <= 900:
        return "s", 1.0
    if span_s <= 36 * 3600:
        return "min", 60.0
    return "h", 3600.0


def _histogram(ax: Any, values: np.ndarray, title: str, color: str) -> None:
    values = values[values > 0]
    lo, hi = max(values.min(), 1), max(values.max(), 2)
    bins = np.logspace(np.log10(lo), np.log10(hi) + 1e-9, 50) if hi / lo > 20 else 50
    ax.hist(values, bins=bins, color=color, alpha=0.85)
    if hi / lo > 20:
        ax.set_xscale("log")
    median = float(np.median(values))
    ax.axvline(median, color="black", linestyle="--", linewidth=1, label=f"median {median:,.0f}")
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("tokens per request")
    ax.set_ylabel("requests")


def plot_trace(df: pd.DataFrame, stats: dict[str, Any], path: str | Path, title: str = "") -> Path:
    """Write the trace overview PNG to ``path`` (matplotlib Agg; no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rot = stats["rate_over_time"]
    unit, scale = _time_unit(stats["duration_s"])
    fig = plt.figure(figsize=(11, 7), layout="constrained")
    grid = fig.add_gridspec(2, 2)
    ax = fig.add_subplot(grid[0, :])
    starts = np.asarray(rot["start_s"]) / scale
    rates = np.asarray(rot["rate"])
    if starts.size:
        edges = np.append(starts, rot["end_s"][-1] / scale)
        ax.stairs(rates, edges, fill=True, alpha=0.35, color="tab:blue")
        ax.stairs(rates, edges, color="tab:blue", linewidth=1)
    ax.axhline(
        stats["mean_rate"],
        color="black",
        linestyle="--",
        linewidth=1,
        label=f"mean {stats['mean_rate']:.3g} req/s",
    )
    ax.set_xlabel(f"time since trace start ({unit})")
    ax.set_ylabel(f"arrival rate (req/s, {rot['window_s']:g} s windows)")
    ax.set_title(
        f"{stats['requests']:,} requests over {stats['duration_s']:,.0f} s, "
        f"inter-arrival CV {stats['interarrival_cv']:.2f}, "
        f"prefix reuse {stats['prefix_reuse_fraction']:.0%}",
        fontsize=10,
    )
    ax.legend(loc="upper right", fontsize=8)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    _histogram(
        fig.add_subplot(grid[1, 0]), df["prompt_tokens"].to_numpy(), "prompt length", "tab:green"
    )
    _histogram(
        fig.add_subplot(grid[1, 1]), df["output_tokens"].to_numpy(), "output length", "tab:orange"
    )
    if title:
        fig.suptitle(title, fontsize=12)
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
