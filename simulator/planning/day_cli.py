"""``specsim plan --day``: the flags and the command (planning.day; imports stay lazy)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from specsim.simulator.planning.day_defaults import SCALE_UP_DELAY_S, WARMUP_S

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def window_seconds(text: str) -> float:
    """``--window``: ``1h``, ``15m``, ``300s`` or ``300`` (seconds)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(s|m|min|h)?\s*", text)
    value = float(m.group(1)) * _UNITS[m.group(2) or ""] if m else 0.0
    if not value > 0 or value == float("inf"):
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise argparse.ArgumentTypeError(f"expected a window length like 1h, 15m or 300s, "
                                         f"got {shown!r}")
    return value


def add_day_flags(p: argparse.ArgumentParser) -> None:
    from specsim import flags
    g = p.add_argument_group("a day of traffic (--day; docs/planning.md)")
    g.add_argument("--day", nargs="?", const="", metavar="CURVE.yaml|TRACE",
                   help="plan per window over a day: a curve file (rates: [24 values] or "
                        "{hour: rate}, or classes: {NAME: ...}), a trace file (rates counted "
                        "per window and class), or nothing: the scenario's diurnal arrival")
    g.add_argument("--window", type=window_seconds, default=3600.0,
                   help="window length: 1h (default), 15m, 300s")
    g.add_argument("--scale-up-delay", type=flags.number(0.0, what="a number of seconds"),
                   default=SCALE_UP_DELAY_S,
                   help=f"seconds before an added replica starts loading (assumed "
                        f"{SCALE_UP_DELAY_S:g})")
    g.add_argument("--warmup", type=flags.number(0.0, what="a number of seconds"),
                   default=WARMUP_S, help=f"engine warm-up after loading, seconds (assumed "
                                          f"{WARMUP_S:g})")
    g.add_argument("--host-gb-s", type=flags.positive_rate, default=None,
                   help="host-to-device copy rate per device, GB/s (default: the "
                        "accelerator's catalogued host link)")


def cmd_day(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from specsim.errors import ScenarioError
    from specsim.outputs import check_folder, write_folder
    from specsim.simulator.api import load_scenario
    from specsim.simulator.planning import bounds
    from specsim.simulator.planning.day import DayPlanner, SwitchParams, totals, windows_frame
    from specsim.simulator.planning.day_report import clock, config_text, met_text, write_day
    from specsim.simulator.planning.plan import (
        Planner,
        parse_slos,
        read_space,
        space_points,
        space_size,
    )
    from specsim.traces.arrivals import parse_arrivals
    from specsim.traces.diurnal import curve_from_arrivals, read_day, scaled_to

    slos = parse_slos(args.slo)
    sc, _, _ = load_scenario(args.scenario)
    wl = sc.workload
    if not (isinstance(wl, dict) or hasattr(wl, "get")) or not wl.get("synthetic"):
        raise ScenarioError(f"{args.scenario}: workload: plan --day needs a synthetic workload "
                            "(its rate and classes are what each window sets)")
    if args.day:
        curve = read_day(args.day, args.window)
    else:
        curve = curve_from_arrivals(parse_arrivals(wl["synthetic"]["arrival"],
                                                   "workload.synthetic.arrival"),
                                    f"{args.scenario}: workload.synthetic.arrival")
    if args.qps is not None:  # the curve's shape at another volume
        curve = scaled_to(curve, args.qps)
    window = curve.window_s or args.window  # a trace's curve: its counting windows
    params = SwitchParams(args.scale_up_delay, args.warmup, args.host_gb_s)
    planner = DayPlanner(args.scenario, slos, curve, window, requests=args.requests,
                         rel_tol=args.tolerance, duration_s=args.duration, params=params)
    space = read_space(args.space)
    mixes = len({str(m) for m in planner.mixes})
    est = bounds.plan_estimate(space_size(space) * mixes, float(planner.rates.max()),
                               args.requests, args.duration, args.tolerance)
    bounds.check(est, args.yes)
    out = Path(args.out) if args.out else None
    if out is not None:
        check_folder(out, args.force)
    Planner(args.scenario, slos, float(planner.rates.max())).check_space(space)
    configs = space_points(space) if space else [{}]
    console = Console(width=max(Console().width, 160))
    say = (lambda text: None) if args.quiet else console.print
    say(f"planning {len(planner.rates)} windows of {window:g} s, {len(configs)} "
        f"configuration(s) x {mixes} class mix(es), under "
        + ", ".join(f"{k} <= {v:g} s" for k, v in slos.items()))
    plan = planner.plan(configs, lambda i, n: say(f"  capacity {i}/{n}"))
    say("replaying the day (the plan, then the static fleet)")
    planner.replay(plan, lambda i, n: say(f"  {i} windows replayed") if i % 6 == 0 else None)
    df = windows_frame(plan)
    tab = Table(title="the fleet per window (replayed)")
    cols = ["window", "time (h:mm)", "req/s", "configuration", "replicas", "$", "switch",
            *[f"replay {k} (s)" for k in slos], "SLO met", "static replicas"]
    for c in cols:
        tab.add_column(c, overflow="fold")
    for w, (_, r) in zip(plan.windows, df.iterrows(), strict=True):
        tab.add_row(str(w.index), f"{clock(r['start_h'])}-{clock(r['end_h'])}", f"{w.rate:.3g}",
                    config_text(plan.configs[w.config]), str(w.replicas), f"{r['usd']:,.2f}",
                    w.switch or "-",
                    *[f"{w.replay.stats.get(k, float('nan')):.4g}" for k in slos],
                    met_text(w),
                    str(r.get("static_replicas", "-")))
    console.print(tab)
    tot = totals(plan)
    tt = Table(title=f"per day (the {tot['period_h']:g} h curve repeating)")
    for c in ("fleet", "$/day", "kWh/day", "SLO-minutes/day", "as planned", "replicas added "
              "by the replay", "peak devices", "switches"):
        tt.add_column(c)
    for name in ("plan", "static"):
        b = tot.get(name)
        if b is not None:
            tt.add_row("per window" if name == "plan" else
                       "static: " + config_text(plan.configs[plan.static[0].config]),
                       f"{b['usd_per_day']:,.2f}", f"{b['kwh_per_day']:,.2f}",
                       f"{b['slo_minutes_per_day']:,.0f}",
                       f"{b['slo_minutes_as_planned_per_day']:,.0f}",
                       str(b["replicas_added_by_replay"]), str(b["devices_peak"]),
                       str(b.get("switches", "-")))
    console.print(tt)
    if out is not None:
        info = {"scenario": str(args.scenario), "curve": curve.source,
                "window_s": window, "slos": slos, "space": space,
                "requests": args.requests, "duration_s": args.duration,
                "tolerance": args.tolerance}
        mode = write_folder(out, lambda tmp: write_day(tmp, plan, info, params), args.force,
                            written_by="specsim plan --day", scenario=str(args.scenario))
        how = " (replaced the previous specsim output there)" if mode == "replace" else ""
        console.print(f"wrote {out}/day.csv, day.json, report.md, day.png{how}")
    return 0
