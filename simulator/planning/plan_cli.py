"""``specsim plan``: the command-line face of ``planning.plan`` (imports stay lazy)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_plan_command(sub) -> None:
    from specsim import flags
    from specsim.simulator.planning.bounds import MAX_HOURS, MAX_RUNS

    p = sub.add_parser(
        "plan", help="cheapest fleet that meets SLOs at a load",
        description="For each configuration of the search space, find by bisection the "
                    "largest load one replica sustains within the SLOs, size the fleet for "
                    "--qps, and rank the feasible configurations by $/hour; rejected ones "
                    "say which SLO failed at what load.")
    p.add_argument("scenario", help="base scenario YAML (its workload must be synthetic)")
    p.add_argument("--slo", action="append", default=[], metavar="NAME=SECONDS",
                   help="ttft_p99=0.5, tpot_p99=0.05, e2e_p99=..., ... (repeatable)")
    p.add_argument("--qps", type=flags.positive_rate, help="target load, requests per second "
                   "(with --day: the day's mean rate, the curve scaled to it)")
    p.add_argument("--space", metavar="FILE",
                   help="YAML mapping of scenario keys to lists of values (crossed), e.g. "
                        "{hardware.accelerator: [H100-SXM, A100-SXM-80GB], speculation.k: "
                        "[0, 2, 4]}; default: the scenario as it is")
    p.add_argument("--requests", default=300, type=flags.integer(
                       20, what="a number of requests (percentiles need 20)"),
                   help="requests simulated per probe (default 300)")
    p.add_argument("--duration", type=flags.positive_seconds, default=30.0,
                   help="seconds of arrivals per probe, at least (default 30: a steady state)")
    p.add_argument("--tolerance", type=flags.tolerance, default=0.1,
                   help="bisection stops when the bracket is within this ratio, "
                        f"{flags.TOLERANCE_RANGE[0]:g} to {flags.TOLERANCE_RANGE[1]:g} "
                        "(default 0.1)")
    p.add_argument("--out", help="folder for plan.csv: new or empty (a previous specsim "
                   "plan only with --force); checked before planning")
    p.add_argument("--force", action="store_true",
                   help="replace a previous specsim output in --out (never other files)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--yes", action="store_true",
                   help=f"plan a space of more than {MAX_RUNS:,} probes or an estimated "
                        f"{MAX_HOURS:g} h (never one past the memory budget)")
    from specsim.simulator.planning.day_cli import add_day_flags

    add_day_flags(p)
    p.set_defaults(func=cmd_plan)


def cmd_plan(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from specsim.errors import ScenarioError
    from specsim.outputs import check_folder, escape_frame, write_folder
    from specsim.simulator.cluster.engine import load_scenario
    from specsim.simulator.planning import bounds
    from specsim.simulator.planning.plan import (
        RATE_KEY,
        Planner,
        config_label,
        parse_slos,
        read_space,
        rows_frame,
        space_points,
        space_size,
    )

    if args.day is not None:  # a day of traffic: planning.day_cli
        from specsim.simulator.planning.day_cli import cmd_day

        return cmd_day(args)
    if args.qps is None:
        raise ScenarioError("--qps: required (the target load, req/s), or --day for a day "
                            "of traffic")
    slos = parse_slos(args.slo)  # the numeric flags were checked as they were read (flags)
    sc, _, _ = load_scenario(args.scenario)
    wl = sc.workload
    if not (isinstance(wl, dict) or hasattr(wl, "get")) or not wl.get("synthetic"):
        raise ScenarioError(f"{args.scenario}: workload: plan needs a synthetic workload (its "
                            f"{RATE_KEY} is what the bisection moves)")
    space = read_space(args.space)
    bounds.check(bounds.plan_estimate(space_size(space), args.qps, args.requests,
                                      args.duration, args.tolerance), args.yes)
    out = Path(args.out) if args.out else None
    if out is not None:  # refused before any planning: a bad place costs nothing
        check_folder(out, args.force)
    planner = Planner(args.scenario, slos, args.qps, requests=args.requests,
                      rel_tol=args.tolerance, duration_s=args.duration)
    planner.check_space(space)  # an unknown key or a mistyped value: before any probe
    configs = space_points(space) if space else [{}]
    console = Console(width=max(Console().width, 160))
    if not args.quiet:
        console.print(f"planning {len(configs)} configuration(s) for {args.qps:g} req/s under "
                      + ", ".join(f"{k} <= {v:g} s" for k, v in slos.items()))

    def progress(i: int, n: int) -> None:
        if not args.quiet:
            console.print(f"  {i}/{n} configurations done")

    rows = planner.run(configs, progress)
    df = rows_frame(rows)
    tab = Table(title=f"fleets for {args.qps:g} req/s, cheapest first")
    keys = list(configs[0])
    for col in ["rank", *keys, "replicas", "devices", "req/s per replica", "$/hour",
                "$/M tokens", "J/token", "SLO margins", "why rejected"]:
        tab.add_column(col, overflow="fold")
    for r in rows:
        tab.add_row(str(rows.index(r) + 1) if r.feasible else "-",
                    *[str(config_label(k, r.config.get(k))) for k in keys],
                    str(r.replicas or "-"), str(r.devices or "-"),
                    f"{r.replica_rate:.3g}" if r.replica_rate else "-",
                    f"{r.usd_per_hour:,.2f}" if r.usd_per_hour is not None else "-",
                    f"{r.usd_per_million_tokens:,.3f}" if r.usd_per_million_tokens else "-",
                    f"{r.j_per_token:.3g}" if r.j_per_token else "-",
                    ", ".join(f"{k} {v:.2f}x" for k, v in r.margins.items()) or "-",
                    r.why or "")
    console.print(tab)
    if out is not None:
        mode = write_folder(out, lambda tmp: escape_frame(df).to_csv(tmp / "plan.csv",
                                                                     index=False),
                            args.force, written_by="specsim plan",
                            scenario=str(args.scenario))
        how = " (replaced the previous specsim output there)" if mode == "replace" else ""
        console.print(f"wrote {out / 'plan.csv'}{how}")
    return 0
