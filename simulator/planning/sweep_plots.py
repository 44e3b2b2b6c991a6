"""The sweep's plots: only those the grid supports; the others are listed with the reason.

- tpot_vs_qps.png: TPOT P50 (solid) and P99 (dashed) vs the arrival rate, a line per k
  (needs a rate key and speculation.k in the grid);
- speedup_heatmap.png: TPOT P50 speedup over speculation off, k (or method) x rate (needs
  a rate key and k=0 or speculation.method=none in the grid);
- throughput_vs_tpot.png: output tokens/s per device vs TPOT P50, Pareto front marked
  (needs two points or more);
- cost_vs_qps.png: $ per million output tokens vs the arrival rate (needs a rate key).
Every value is the mean across seeds; every axis says its unit in parentheses.

Figures are drawn with matplotlib's object API (``matplotlib.figure.Figure`` on the Agg
canvas), not pyplot: nothing global is switched, so a notebook's backend keeps working.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

K_KEY = "speculation.k"
METHOD_KEY = "speculation.method"


def rate_key(keys: list[str]) -> str | None:
    """The swept key that is an arrival rate (``...rate`` or ``...qps``), if any."""
    return next((k for k in keys if k.split(".")[-1] in ("rate", "qps")), None)


def _means(table, keys: list[str]):
    """Per point: the swept values and the mean of every numeric metric across seeds."""
    import pandas as pd

    if table.attrs:  # run_sweep's frames in attrs would make pandas compare them (ambiguous)
        table = table.copy(deep=False)
        table.attrs = {}
    num = table.drop(columns=[c for c in ["seed", *keys] if c in table]).apply(
        pd.to_numeric, errors="coerce")
    m = num.groupby("point", sort=True).mean()
    first = table.groupby("point", sort=True)[keys].first() if keys else None
    return (pd.concat([first, m], axis=1) if first is not None else m).reset_index()


def _label(row, keys: list[str]) -> str:
    return ", ".join(f"{k.split('.')[-1]}={row[k]}" for k in keys)


def _groups(df, keys: list[str]):
    """(label, sub-frame) per combination of ``keys`` (one group when there are none)."""
    if not keys:
        yield "", df
        return
    for vals, g in df.groupby(keys, sort=True, dropna=False):
        vals = vals if isinstance(vals, tuple) else (vals,)
        yield ", ".join(f"{k.split('.')[-1]}={v}" for k, v in zip(keys, vals, strict=True)), g


def _is_off(row) -> bool:
    k = row.get(K_KEY)
    return (str(row.get(METHOD_KEY, "")).lower() == "none") or (
        k is not None and k == k and _num(k) == 0)


def _num(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def pareto(x, y) -> list[int]:
    """Indices of the points no other beats on both lower x and higher y."""
    idx = []
    for i in range(len(x)):
        if x[i] != x[i] or y[i] != y[i]:
            continue
        if not any((x[j] <= x[i] and y[j] >= y[i]) and (x[j] < x[i] or y[j] > y[i])
                   for j in range(len(x)) if j != i and x[j] == x[j] and y[j] == y[j]):
            idx.append(i)
    return sorted(idx, key=lambda i: x[i])


#: the plots in the order they are drawn, with the report's caption for each
PLOTS = (
    ("tpot_vs_qps.png", "TPOT vs load, per k",
     "TPOT P50 (solid) and P99 (dashed) against the arrival rate, a line per draft length."),
    ("speedup_heatmap.png", "Speedup over speculation off",
     "TPOT P50 of speculation off at the same load and settings / TPOT P50 with speculation "
     "(above 1: speculation helped)."),
    ("throughput_vs_tpot.png", "Throughput per device vs TPOT",
     "Output tokens/s per device against TPOT P50; the Pareto front (the points no other "
     "beats on both lower TPOT and more tokens/s per device) is marked and labelled."),
    ("cost_vs_qps.png", "Cost per million output tokens vs load",
     "$ per million output tokens against the arrival rate (the fleet's price over the "
     "run's output)."),
)


class _Plt:
    """The little of pyplot's interface the drawing code uses, on Agg Figures."""

    @staticmethod
    def subplots(figsize=None):
        from matplotlib.figure import Figure

        fig = Figure(figsize=figsize)
        return fig, fig.subplots()


def figures(table, keys: list[str]) -> tuple[list[tuple[str, object]], list[str]]:
    """The figures the grid supports, unsaved: ([(file name, Figure)], ["name: why
    skipped"]). ``write_plots`` saves them; tests read their axes."""
    made: list[tuple[str, object]] = []

    def keep(fig, name: str) -> None:
        made.append((name, fig))

    skipped = _draw(table, keys, keep)
    return made, skipped


def write_plots(table, keys: list[str], out: Path,
                atomic: Callable[[Path, Callable[[Path], None]], None]
                ) -> tuple[list[str], list[str]]:
    """Write the PNGs the grid supports; returns (names written, "name: why skipped")."""
    written: list[str] = []

    def save(fig, name: str) -> None:
        atomic(out / name, lambda p: fig.savefig(p, format="png", dpi=110))
        written.append(name)

    skipped = _draw(table, keys, save)
    return written, skipped


def _draw(table, keys: list[str], sink: Callable[[object, str], None]) -> list[str]:
    """Draw each plot the grid supports and hand it to ``sink(fig, name)``; returns the
    "name: why skipped" lines of the others."""
    plt = _Plt
    df = _means(table, keys)
    keys = [k for k in keys if df[k].astype(str).nunique() > 1]  # a key held fixed says nothing
    rate = rate_key(keys)
    skipped: list[str] = []

    def save(fig, name: str) -> None:
        fig.tight_layout()
        sink(fig, name)

    # 1. TPOT vs QPS per k
    if rate is None or K_KEY not in keys:
        skipped.append("tpot_vs_qps.png: needs a swept arrival rate (e.g. "
                       "workload.synthetic.arrival.rate) and speculation.k"
                       + ("" if rate is None else " (no speculation.k in the grid)"))
    else:
        others = [k for k in keys if k != rate]
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for i, (label, g) in enumerate(_groups(df, others)):
            g = g.sort_values(rate)
            color = f"C{i % 10}"
            ax.plot(g[rate], g["tpot_s.p50"] * 1e3, "o-", color=color, label=f"{label} P50")
            ax.plot(g[rate], g["tpot_s.p99"] * 1e3, "s--", color=color, label=f"{label} P99")
        ax.set_xlabel("arrival rate (req/s)")
        ax.set_ylabel("TPOT (ms)")
        ax.set_title("TPOT P50 (solid) and P99 (dashed) vs load, per k")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
        save(fig, "tpot_vs_qps.png")

    # 2. speedup heatmap over speculation off
    has_off = (K_KEY in keys and any(_num(v) == 0 for v in table[K_KEY])) or (
        METHOD_KEY in keys and any(str(v).lower() == "none" for v in table[METHOD_KEY]))
    if rate is None or not has_off:
        skipped.append("speedup_heatmap.png: needs a swept arrival rate and speculation off "
                       "in the grid (speculation.k=0 or speculation.method=none)")
    else:
        _speedup_heatmap(plt, df, keys, rate, save, skipped)

    # 3. throughput per device vs TPOT with the Pareto front
    if len(df) < 2:
        skipped.append("throughput_vs_tpot.png: needs two points or more")
    else:
        x = (df["tpot_s.p50"] * 1e3).to_numpy(dtype=float)
        devices = df["fleet.devices"] if "fleet.devices" in df else 1
        y = (df["throughput_output_tokens_per_s"] / devices).to_numpy(dtype=float)
        front = pareto(list(x), list(y))
        fig, ax = plt.subplots(figsize=(7, 4.5))
        ax.scatter(x, y, color="C0", alpha=0.6, label="sweep points")
        ax.plot(x[front], y[front], "o-", color="C3", label="Pareto front")
        records = df.to_dict("records")
        for i in front:
            ax.annotate(_label(records[i], keys), (x[i], y[i]), fontsize=6,
                        textcoords="offset points", xytext=(4, 4))
        ax.set_xlabel("TPOT P50 (ms)")
        ax.set_ylabel("throughput per device (output tok/s)")
        ax.set_title("throughput per device vs TPOT (up and left is better)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        save(fig, "throughput_vs_tpot.png")

    # 4. cost vs QPS
    col = "cost_usd_per_million_output_tokens"
    if rate is None:
        skipped.append("cost_vs_qps.png: needs a swept arrival rate (e.g. "
                       "workload.synthetic.arrival.rate)")
    elif col not in df or not df[col].notna().any():
        skipped.append("cost_vs_qps.png: no run produced output tokens (no cost per token)")
    else:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for i, (label, g) in enumerate(_groups(df, [k for k in keys if k != rate])):
            g = g.sort_values(rate)
            ax.plot(g[rate], g[col], "o-", color=f"C{i % 10}", label=label or None)
        ax.set_xlabel("arrival rate (req/s)")
        ax.set_ylabel("cost ($ per million output tokens)")
        ax.set_title("cost per million output tokens vs load")
        ax.grid(alpha=0.3)
        if len(keys) > 1:
            ax.legend(fontsize=7)
        save(fig, "cost_vs_qps.png")
    return skipped


def _speedup_heatmap(plt, df, keys: list[str], rate: str, save, skipped: list[str]) -> None:
    import numpy as np

    spec_keys = [k for k in (K_KEY, METHOD_KEY) if k in keys]
    others = [k for k in keys if k != rate and k not in spec_keys]
    match = [rate, *others]
    off = df[df.apply(_is_off, axis=1)]
    on = df[~df.apply(_is_off, axis=1)]
    if on.empty:
        skipped.append("speedup_heatmap.png: every point has speculation off")
        return
    base = {tuple(r[k] for k in match): r["tpot_s.p50"] for r in off.to_dict("records")}
    rows = []
    for r in on.to_dict("records"):
        b = base.get(tuple(r[k] for k in match))
        if b is not None and r["tpot_s.p50"] > 0:
            rows.append({"y": _label(r, spec_keys), "rate": r[rate],
                         "speedup": b / r["tpot_s.p50"]})
    if not rows:
        skipped.append("speedup_heatmap.png: no speculative point has a speculation-off "
                       "point at the same load and settings")
        return
    import pandas as pd

    piv = pd.DataFrame(rows).pivot_table(index="y", columns="rate", values="speedup",
                                         aggfunc="mean", sort=True)
    fig, ax = plt.subplots(figsize=(max(1.2 * piv.shape[1] + 3, 6.5),
                                    0.6 * piv.shape[0] + 2.2))
    vals = piv.to_numpy(dtype=float)
    lim = max(abs(np.nanmax(vals) - 1), abs(1 - np.nanmin(vals)), 0.05)
    im = ax.imshow(vals, cmap="RdYlGn", vmin=1 - lim, vmax=1 + lim, aspect="auto")
    for (i, j), v in np.ndenumerate(vals):
        if v == v:
            ax.text(j, i, f"{v:.2f}x", ha="center", va="center", fontsize=8)
    ax.set_xticks(range(piv.shape[1]), [f"{c:g}" if isinstance(c, float | int) else str(c)
                                        for c in piv.columns])
    ax.set_yticks(range(piv.shape[0]), list(piv.index))
    ax.set_xlabel("arrival rate (req/s)")
    ax.set_ylabel(" / ".join(("draft length k" if k == K_KEY else "method")
                             for k in spec_keys) + " (tokens)")
    ax.set_title("TPOT P50 speedup over speculation off"
                 + (f"\n(mean over {', '.join(others)})" if others else ""), fontsize=9)
    fig.colorbar(im, ax=ax, label="speedup (x, >1 is faster)")
    save(fig, "speedup_heatmap.png")
