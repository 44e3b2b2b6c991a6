"""What ``specsim plan --day`` writes: day.csv, day.json, report.md and day.png."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from specsim.simulator.planning.day import DayPlan, SwitchParams, totals, windows_frame
from specsim.simulator.planning.plan import config_label


def config_text(config: dict[str, Any]) -> str:
    """A configuration as one short cell: its space values, ``k=v`` joined (a mapping value,
    e.g. a ``speculation.per_class`` entry, by its leaves: ``per_class.code.method=none``)."""
    def flat(key: str, v: Any) -> list[str]:
        if isinstance(v, dict) and key != "disaggregation" and v:
            return [x for kk, vv in v.items() for x in flat(f"{key}.{kk}", vv)]
        return [f"{key.split('.', 1)[-1] if '.' in key else key}={config_label(key, v)}"]

    return ", ".join(x for k, v in config.items() for x in flat(k, v)) or "the scenario"


def day_json(plan: DayPlan, info: dict[str, Any], params: SwitchParams) -> dict[str, Any]:
    from specsim.simulator.api import finite_or_none

    caps = [{"config": plan.configs[i], "class_mix": None if k is None else dict(k),
             "feasible": r.feasible, "replica_rate_req_s": r.replica_rate,
             "fail_rate_req_s": r.fail_rate, "probes": r.probes, "why_rejected": r.why}
            for (i, k), r in plan.capacity.items()]
    return finite_or_none({**info, "switch_params": params.sources(), "totals": totals(plan),
                           "capacity": caps, "notes": plan.notes,
                           "windows": windows_frame(plan).to_dict(orient="records")})


def clock(hours: float) -> str:
    """Hours from the day's start as h:mm (rounded to the minute)."""
    minutes = round(hours * 60)
    return f"{minutes // 60}:{minutes % 60:02d}"


def met_text(w: Any) -> str:
    """A window's replay verdict: met or which SLO missed, and the replicas it added."""
    if w.replay is None:
        return "-"
    text = "yes" if w.replay.ok else f"no: {w.replay.why}"
    if w.added:
        text += f" (+{w.added} by the replay; as planned: {w.first.why or 'met'})"
    return text


def _cell(v: Any, fmt: str = "{:,.2f}") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return fmt.format(v) if isinstance(v, int | float) and not isinstance(v, bool) else str(v)


def report_md(plan: DayPlan, info: dict[str, Any], params: SwitchParams) -> str:
    from specsim.outputs import md_text

    df = windows_frame(plan)
    tot = totals(plan)
    slos = info["slos"]
    lines = [f"# Day plan: {md_text(info['scenario'])}", "",
             f"- day curve: {md_text(info['curve'])} ({tot['period_h']:g} h, "
             f"{tot['windows']} windows of {info['window_s']:g} s)",
             "- SLOs: " + ", ".join(f"{k} <= {v:g} s" for k, v in slos.items()),
             f"- configurations: {len(plan.configs)}; capacity searches: {len(plan.capacity)}",
             "- switches: " + "; ".join(f"{k} {md_text(v)}" for k, v in params.sources().items()),
             "", "## Per window", "",
             "| window | time (h:mm) | req/s | configuration | replicas | $ | switch | "
             + " | ".join(f"replay {k} (s)" for k in slos)
             + " | SLO met | static replicas | static SLO met |",
             "|---:|---|---:|---|---:|---:|---|" + "---:|" * len(slos) + "---|---:|---|"]
    static = {w.index: w for w in plan.static}
    for _, r in df.iterrows():
        cfg = config_text(plan.configs[plan.windows[int(r["window"])].config])
        stats = " | ".join(_cell(r.get(f"replay_{k}_s"), "{:.4g}") for k in slos)
        lines.append(f"| {int(r['window'])} | {clock(r['start_h'])}-{clock(r['end_h'])} | "
                     f"{r['rate_req_s']:.3g} | {md_text(cfg)} | {int(r['replicas'])} | "
                     f"{r['usd']:,.2f} | {md_text(r['switch']) or '-'} | {stats} | "
                     f"{md_text(met_text(plan.windows[int(r['window'])]))} | "
                     f"{_cell(r.get('static_replicas'), '{:d}')} | "
                     f"{md_text(met_text(static[int(r['window'])])) if static else '-'} |")
    lines += ["", "## Totals (the curve repeating daily)", "",
              "| fleet | $/day | kWh/day | SLO-minutes/day | as planned | replicas added by "
              "the replay | peak devices | device-hours | switches |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name in ("plan", "static"):
        b = tot.get(name)
        if b is None:
            continue
        what = "per window (plan)" if name == "plan" else (
            "static: " + md_text(config_text(plan.configs[plan.static[0].config])))
        lines.append(f"| {what} | {b['usd_per_day']:,.2f} | {_cell(b.get('kwh_per_day'))} | "
                     f"{_cell(b.get('slo_minutes_per_day'), '{:,.0f}')} | "
                     f"{_cell(b.get('slo_minutes_as_planned_per_day'), '{:,.0f}')} | "
                     f"{_cell(b.get('replicas_added_by_replay'), '{:d}')} | {b['devices_peak']} | "
                     f"{b['device_hours']:,.1f} | {b.get('switches', '-')} |")
    lines += ["", "## Capacity per replica (searched once per configuration and class mix)", "",
              "| configuration | class mix | req/s per replica | lowest failing | why rejected |",
              "|---|---|---:|---:|---|"]
    for (i, k), r in plan.capacity.items():
        mix = "-" if k is None else " ".join(f"{c}:{s:.2f}" for c, s in k)
        lines.append(f"| {md_text(config_text(plan.configs[i]))} | {mix} | "
                     f"{_cell(r.replica_rate, '{:.3g}')} | {_cell(r.fail_rate, '{:.3g}')} | "
                     f"{md_text(r.why) or '-'} |")
    lines += ["", "Energy per window: the replay's average fleet power x the window's length, "
              "plus switches at idle power. A window that misses an SLO in its replay counts "
              "its whole length as SLO-minutes. See docs/planning.md, \"A day of traffic\".", ""]
    return "\n".join(lines)


def day_png(plan: DayPlan, path: Path) -> None:
    """Rate, devices (plan vs static) and the configuration chosen, over the day."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    df = windows_frame(plan)
    x = list(df["start_h"]) + [float(df["end_h"].iloc[-1])]

    def steps(col: str) -> list[float]:
        v = list(df[col])
        return v + [v[-1]]

    fig, axes = plt.subplots(3, 1, figsize=(9, 7.5), sharex=True,
                             gridspec_kw={"height_ratios": [2, 2, 1.4]})
    axes[0].step(x, steps("rate_req_s"), where="post", color="tab:blue")
    axes[0].set_ylabel("arrival rate (req/s)")
    axes[0].set_ylim(bottom=0)
    axes[0].set_title("A day of traffic: the fleet per window")
    axes[1].step(x, steps("devices"), where="post", label="per-window plan", color="tab:green")
    if "static_devices" in df:
        axes[1].step(x, steps("static_devices"), where="post", linestyle="--",
                     label="static fleet (sized for the peak)", color="tab:red")
    if "slo_ok" in df:
        bad = df[~df["slo_ok"].astype(bool)]
        for _, r in bad.iterrows():
            axes[1].axvspan(r["start_h"], r["end_h"], color="tab:red", alpha=0.15)
    fixed = df[df["replicas_added"] > 0] if "replicas_added" in df else df.iloc[:0]
    if len(fixed):
        axes[1].plot((fixed["start_h"] + fixed["end_h"]) / 2, fixed["devices"], "x",
                     color="tab:orange", label="replica(s) added by the replay")
    axes[1].set_ylabel("devices (GPUs)")
    axes[1].set_ylim(0, max(df["devices"].max(), df.get("static_devices", df["devices"]).max())
                     * 1.25 + 0.5)
    axes[1].yaxis.set_major_locator(MaxNLocator(integer=True))
    axes[1].legend(loc="upper left", fontsize=8, ncols=3)
    used = sorted({w.config for w in plan.windows})
    pos = {c: j for j, c in enumerate(used)}
    axes[2].step(x, [pos[w.config] for w in plan.windows] + [pos[plan.windows[-1].config]],
                 where="post", color="tab:purple")
    axes[2].set_yticks(range(len(used)))
    axes[2].set_yticklabels([config_text(plan.configs[c])[:40] for c in used], fontsize=7)
    axes[2].set_ylim(-0.5, len(used) - 0.5)
    axes[2].set_ylabel("configuration")
    axes[2].set_xlabel("time from the curve's start (h)")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_day(folder: Path, plan: DayPlan, info: dict[str, Any], params: SwitchParams) -> None:
    """Fill an output folder (``outputs.write_folder``'s staging) with the four files."""
    from specsim.outputs import escape_frame

    escape_frame(windows_frame(plan)).to_csv(folder / "day.csv", index=False)
    (folder / "day.json").write_text(json.dumps(day_json(plan, info, params), indent=1) + "\n")
    (folder / "report.md").write_text(report_md(plan, info, params))
    day_png(plan, folder / "day.png")
