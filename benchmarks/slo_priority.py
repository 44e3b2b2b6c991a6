"""SLO tiers under overload: schedulers, speculation that yields, and what they cost to run.

Runs ``scenarios/slo_priority.yaml`` (two tiers, ~1.7x what one H100 completes) and prints
three Markdown tables for docs/user-guide.md ("SLO tiers"):

1. per scheduler (fcfs, priority, edf, and edf shedding or limiting the batch tier): per
   tier TTFT p50 / p99 and the share of arrivals that met every target, for the scenario
   and for the same overload twice as long (4,000 requests);
2. per speculation choice (static k for all, ``tier_yield`` with the batch tier yielding,
   the reverse with premium yielding, no speculation): per tier TPOT p50 / p99, the
   premium tier's share within a tight TPOT target, and output throughput;
3. wall time of a 1,000-request run, fcfs vs priority, compiled kernel and Python source
   (best of ``--repeat``).

    python benchmarks/slo_priority.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from specsim.simulator.cluster.engine import run_scenario

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "slo_priority.yaml"
BASE = {"simulation.progress": False}
TIGHT_TPOT_S = 0.008  # the premium tier's tight TPOT target of table 2 (assumed)


def run(**overrides):
    return run_scenario(SCENARIO, overrides={**BASE, **overrides})


def ms(x: float | None) -> str:
    return "n/a" if x is None or not np.isfinite(x) else f"{1e3 * x:,.0f}" if x >= 1 else \
        f"{1e3 * x:.1f}"


def schedulers(requests: int | None = None) -> None:
    more = {} if requests is None else {"workload.synthetic.requests": requests}
    print(f"{requests:,} requests (the same overload, twice as long):\n" if requests else
          "The scenario (2,000 requests):\n")
    print("| scheduler | premium TTFT p50 / p99 (ms) | premium met every target | "
          "batch TTFT p50 / p99 (ms) | batch met every target | batch rejected |")
    print("|---|---:|---:|---:|---:|---:|")
    runs = [("fcfs", {"scheduler.policy": "fcfs", "scheduler.params": None}),
            ("priority", {}),
            ("edf", {"scheduler.policy": "edf"}),
            ("edf + shed_at_risk 0.5", {"scheduler.policy": "edf",
                                        "scheduler.params.shed_at_risk": 0.5}),
            ("edf + queue_limit batch 300", {"scheduler.policy": "edf",
                                             "scheduler.params.queue_limit": {"batch": 300}})]
    for label, ov in runs:
        tiers = run(**ov, **more).metrics["slo_by_tier"]
        p, b = tiers["premium"], tiers["batch"]
        print(f"| {label} | {ms(p['ttft_s']['p50'])} / {ms(p['ttft_s']['p99'])} | "
              f"{p['attainment']:.1%} | {ms(b['ttft_s']['p50'])} / {ms(b['ttft_s']['p99'])} | "
              f"{b['attainment']:.1%} | {b['rejected']:,} |")


def speculation() -> None:
    print(f"| speculation | premium TPOT p50 / p99 (ms) | premium TPOT <= "
          f"{TIGHT_TPOT_S * 1e3:g} ms | batch TPOT p50 / p99 (ms) | output tokens/s | "
          "simulated s |")
    print("|---|---:|---:|---:|---:|---:|")
    runs = [("static k=4, every row", {}),
            ("tier_yield: batch tier k=0 from 64 rows", {"speculation.policy": "tier_yield"}),
            ("reverse: premium k=0 from 64 rows",
             {"speculation.policy": "tier_yield", "speculation.policy_params.keep": ["batch"]}),
            ("no speculation", {"speculation.method": "none"})]
    for label, ov in runs:
        res = run(**ov)
        m, req = res.metrics, res.requests
        p, b = m["slo_by_tier"]["premium"], m["slo_by_tier"]["batch"]
        done = req[(req.slo_tier == "premium") & (req.status == "completed")]
        tight = float((~(done.tpot_s > TIGHT_TPOT_S)).mean())
        print(f"| {label} | {ms(p['tpot_s']['p50'])} / {ms(p['tpot_s']['p99'])} | "
              f"{tight:.1%} | {ms(b['tpot_s']['p50'])} / {ms(b['tpot_s']['p99'])} | "
              f"{m['throughput_output_tokens_per_s']:,.0f} | {m['simulated_time_s']:.1f} |")


def wall(repeat: int) -> None:
    print("| scheduler | kernel | wall s (1,000 requests, best of "
          f"{repeat}) | vs fcfs |")
    print("|---|---|---:|---:|")
    for compiled in (True, False):
        base = None
        for label, ov in (("fcfs", {"scheduler.policy": "fcfs", "scheduler.params": None}),
                          ("priority", {})):
            best = float("inf")
            for _ in range(repeat):
                t0 = time.perf_counter()
                run(**ov, **{"workload.synthetic.requests": 1000,
                             "simulation.compiled": compiled})
                best = min(best, time.perf_counter() - t0)
            base = base or best
            print(f"| {label} | {'compiled' if compiled else 'Python source'} | {best:.2f} | "
                  f"{best / base:.2f}x |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    run(**{"workload.synthetic.requests": 20, "simulation.compiled": True})  # compile first
    print(f"{SCENARIO.name}, {time.strftime('%Y-%m-%d')}\n")
    schedulers()
    print()
    schedulers(4000)  # the same overload twice as long
    print()
    speculation()
    print()
    wall(args.repeat)


if __name__ == "__main__":
    main()
