"""Simulator speed and memory: simulated requests per wall second and peak RSS.

Runs one scenario (default: scenarios/chat.yaml, speculation on) at 1k, 10k and 100k
requests, each in a fresh subprocess so peak memory is that run's alone, and prints a table;
then a Mooncake multi-turn row with the radix prefix cache (scenarios/mooncake_cache_aware.yaml,
its first --mooncake requests; skipped when ../shared/data has no Mooncake trace), and a PD
row (scenarios/pd_disaggregated.yaml at --pd requests).
A benchmark figure, not a test: the target is 100k chat requests in under 60 s on one core.
``--targets [ARGS...]`` prints issue 13's table instead (every case as a whole ``specsim``
command against its target, simulated / real time, peak RSS, a profile summary and the
scaling; benchmarks/speed_targets.py, which takes ARGS).

    python benchmarks/sim_speed.py [--scenario FILE] [--sizes 1000 10000 100000] [--no-fast-path]
        [--mooncake 1000] [--pd 5000] [--set KEY=VALUE ...]
    python benchmarks/sim_speed.py --targets [--million] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, resource, sys, time
from specsim.simulator.cluster.engine import run_scenario
scenario, n, fast, key = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
extra = json.loads(sys.argv[5])
t0 = time.perf_counter()
r = run_scenario(scenario, overrides={key: n, "simulation.fast_path": fast, **extra})
wall = time.perf_counter() - t0
m = r.metrics
print(json.dumps({"wall_s": wall, "sim_wall_s": m["wall_time_s"], "iterations": m["iterations"],
                  "completed": m["requests_completed"], "simulated_s": m["simulated_time_s"],
                  "tokens": m["output_tokens"],
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def main() -> int:
    if "--targets" in sys.argv[1:]:  # issue 13's table: speed_targets.py with the other args
        sys.argv = [str(REPO / "benchmarks" / "speed_targets.py"),
                    *(a for a in sys.argv[1:] if a != "--targets")]
        sys.path.insert(0, str(REPO / "benchmarks"))
        import speed_targets

        return speed_targets.main()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default=str(REPO / "scenarios" / "chat.yaml"))
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--no-fast-path", action="store_true")
    ap.add_argument("--mooncake", type=int, default=1000,
                    help="requests of the Mooncake radix-cache row (0: none)")
    ap.add_argument("--pd", type=int, default=5000,
                    help="requests of the PD row (scenarios/pd_disaggregated.yaml; 0: none)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="extra overrides for the main scenario (e.g. kv_cache.prefix_cache=true)")
    args = ap.parse_args()
    fast = "0" if args.no_fast_path else "1"
    extra = {}
    for item in args.set:
        k, _, v = item.partition("=")
        try:
            extra[k] = json.loads(v)
        except ValueError:
            extra[k] = v

    def child(scenario, n, key, over):
        out = subprocess.run([sys.executable, "-c", CHILD, scenario, str(n), fast, key,
                              json.dumps(over)],
                             capture_output=True, text=True, check=True, cwd=REPO)
        return json.loads(out.stdout.strip().splitlines()[-1])

    rows = [(n, child(args.scenario, n, "workload.synthetic.requests", extra))
            for n in args.sizes]
    mooncake = REPO.parent / "shared" / "data" / "traces" / "mooncake_conversation_trace.jsonl"
    moon = None
    if args.mooncake and mooncake.is_file():
        moon = (args.mooncake, child(str(REPO / "scenarios" / "mooncake_cache_aware.yaml"),
                                     args.mooncake, "workload.max_requests", {}))
    print(f"scenario: {args.scenario}  fast path: {not args.no_fast_path}"
          + (f"  overrides: {extra}" if extra else ""))
    head = (f"{'requests':>9} {'wall s':>8} {'sim loop s':>10} {'req/wall s':>11} "
            f"{'iterations':>11} {'us/iter':>8} {'simulated s':>12} {'peak RSS MB':>12}")
    print(head)
    print("-" * len(head))
    for n, r in rows:
        print(f"{n:>9} {r['wall_s']:>8.2f} {r['sim_wall_s']:>10.2f} {n / r['wall_s']:>11.0f} "
              f"{r['iterations']:>11} {1e6 * r['sim_wall_s'] / max(r['iterations'], 1):>8.1f} "
              f"{r['simulated_s']:>12.0f} {r['peak_rss_mb']:>12.0f}")
    if moon is not None:
        n, r = moon
        print(f"\nMooncake multi-turn, radix prefix cache + host DRAM, cache-aware routing "
              f"(scenarios/mooncake_cache_aware.yaml, first {n} requests):")
        print(f"{n:>9} {r['wall_s']:>8.2f} {r['sim_wall_s']:>10.2f} {n / r['wall_s']:>11.0f} "
              f"{r['iterations']:>11} {1e6 * r['sim_wall_s'] / max(r['iterations'], 1):>8.1f} "
              f"{r['simulated_s']:>12.0f} {r['peak_rss_mb']:>12.0f}")
    elif args.mooncake:
        print(f"\n(no Mooncake row: {mooncake} is absent)")
    if args.pd:
        n = args.pd
        r = child(str(REPO / "scenarios" / "pd_disaggregated.yaml"), n,
                  "workload.synthetic.requests", {})
        print(f"\nPD disaggregation, 2 prefill + 2 decode H100s, KV over a shared link "
              f"(scenarios/pd_disaggregated.yaml, {n} requests):")
        print(f"{n:>9} {r['wall_s']:>8.2f} {r['sim_wall_s']:>10.2f} {n / r['wall_s']:>11.0f} "
              f"{r['iterations']:>11} {1e6 * r['sim_wall_s'] / max(r['iterations'], 1):>8.1f} "
              f"{r['simulated_s']:>12.0f} {r['peak_rss_mb']:>12.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
