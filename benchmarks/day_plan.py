"""A day of traffic from a real trace: ``specsim plan --day`` on the Azure 2023 conversation
trace (one hour, counted in 5-minute windows, scaled to a mean of 150 req/s), chat.yaml's
lengths, H100 or A100 with or without EAGLE-3, TPOT p99 <= 20 ms and TTFT p99 <= 1 s.

    python benchmarks/day_plan.py [--trace PATH] [--qps 150] [--window 300]

Prints the plan per window (as planned and after the replay's added replicas), the totals
against the best static fleet, and the check of rule 1 (a replica's capacity reused across
windows): per window, the load each replica carries over the capacity the search found.
The trace is read from ``../shared/data/traces`` (see docs/traffic.md for where to
download it); without it the script says so and exits 0.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO.parent / "shared" / "data" / "traces" / "AzureLLMInferenceTrace_conv.csv"
SPACE = {"hardware.accelerator": ["H100-SXM", "A100-SXM-80GB"],
         "speculation.method": ["none", "eagle3"]}
SLOS = {"tpot_p99": 0.02, "ttft_p99": 1.0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--qps", type=float, default=150.0)
    ap.add_argument("--window", type=float, default=300.0)
    args = ap.parse_args()
    if not args.trace.is_file():
        print(f"skipped: {args.trace} is not here (the Azure 2023 conversation trace; see "
              "docs/traffic.md for where to download it)")
        return 0
    from specsim.simulator.planning.day import DayPlanner, totals
    from specsim.simulator.planning.day_report import clock, config_text, met_text
    from specsim.simulator.planning.plan import space_points
    from specsim.traces.diurnal import read_day, scaled_to

    t0 = time.perf_counter()
    curve = scaled_to(read_day(args.trace, args.window), args.qps)
    planner = DayPlanner(str(REPO / "scenarios" / "chat.yaml"), SLOS, curve, args.window)
    plan = planner.plan(space_points(SPACE))
    planner.replay(plan)
    wall = time.perf_counter() - t0
    print(f"{curve.source}: {len(plan.windows)} windows, {wall:.0f} s of wall time\n")
    print("| window | time | req/s | configuration | replicas (as planned) | load / R | "
          "replay TTFT p99 (s) | SLO met | static replicas |")
    print("|---:|---|---:|---|---:|---:|---:|---|---:|")
    for w, s in zip(plan.windows, plan.static, strict=True):
        r = plan.capacity[(w.config, None)].replica_rate
        print(f"| {w.index} | {clock(w.start_s / 3600)}-{clock(w.end_s / 3600)} | {w.rate:.0f} | "
              f"{config_text(plan.configs[w.config])} | {w.replicas} ({w.replicas - w.added}) | "
              f"{w.rate / (w.replicas - w.added) / r:.2f} | {w.replay.stats['ttft_p99']:.3f} | "
              f"{met_text(w)} | {s.replicas} |")
    tot = totals(plan)
    print("\n| fleet | $/day | kWh/day | SLO-minutes/day (as planned) | replicas added by the "
          "replay | switches |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in ("plan", "static"):
        b = tot[name]
        label = "per window" if name == "plan" else \
            "static: " + config_text(plan.configs[plan.static[0].config])
        print(f"| {label} | {b['usd_per_day']:,.2f} | {b['kwh_per_day']:,.2f} | "
              f"{b['slo_minutes_per_day']:,.0f} ({b['slo_minutes_as_planned_per_day']:,.0f}) | "
              f"{b['replicas_added_by_replay']} | {b.get('switches', '-')} |")
    print("\n| configuration | req/s per replica (R) | lowest failing |")
    print("|---|---:|---:|")
    for (i, _), row in plan.capacity.items():
        print(f"| {config_text(plan.configs[i])} | {row.replica_rate:.3g} | "
              f"{row.fail_rate or float('nan'):.3g} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
