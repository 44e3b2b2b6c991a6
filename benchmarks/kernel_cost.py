"""What the one kernel costs: numba's first-run compile, the cached load, the pure-Python
kernel and the Python hooks of plug-ins.

1. Compile: each row runs a scenario in a fresh process with an empty numba cache
   (``NUMBA_CACHE_DIR`` in a temporary folder), then again with the cache it left: the
   first run compiles the kernel functions its path uses, the second loads them. The
   scenarios cover the kernel's paths: chat (the fcfs step 0 + priced plan in one call, the
   commit), the MoE scenario (plan, then the Python pricing hook), PD.
2. Paths: 1,000 chat requests, the simulated loop (``wall_time_s``) with the built-in
   kernel compiled, each kind of plug-in (a drafter's ``cost_steps``, a ledger's ``add``, an
   acceptance model's ``accepted`` patched from outside specsim, so that its hook runs),
   and ``simulation.compiled: false`` (the pure-Python versions of the same functions).

    python benchmarks/kernel_cost.py [--requests 1000] [--no-compile]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

RUN = r"""
import json, sys, time
t0 = time.perf_counter()
from specsim.simulator.cluster.engine import run_scenario
r = run_scenario(sys.argv[1], overrides=json.loads(sys.argv[2]))
print(json.dumps({"process_s": time.perf_counter() - t0, "loop_s": r.metrics["wall_time_s"]}))
"""

PLUG = r"""
import json, sys
from specsim.simulator.cluster.engine import run_scenario
from specsim.simulator.execution.ledger import Ledger
from specsim.simulator.speculation import drafters as dr
from specsim.simulator.speculation.acceptance import AcceptanceModel

kind, n = sys.argv[1], int(sys.argv[2])


def outside(fn):
    fn.__module__ = "a_plugin"  # defined outside specsim: the kernel calls it through a hook
    return fn


if kind == "drafter":
    own = dr.SequentialDrafter.cost_steps
    dr.SequentialDrafter.cost_steps = outside(lambda self, *a: own(self, *a))
elif kind == "ledger":
    add = Ledger.add
    Ledger.add = outside(lambda self, *a: add(self, *a))
elif kind == "acceptance":
    acc = AcceptanceModel.accepted
    AcceptanceModel.accepted = staticmethod(outside(lambda u, c, k: acc(u, c, k)))
over = {"workload.synthetic.requests": n, "simulation.progress": False}
if kind == "pure":
    over["simulation.compiled"] = False
r = run_scenario("scenarios/chat.yaml", overrides=over)
print(json.dumps({"loop_s": r.metrics["wall_time_s"], "iterations": r.metrics["iterations"],
                  "notes": [x[:40] for x in r.notes if x.startswith("plug-in")]}))
"""

COMPILE_CASES = [("chat", "scenarios/chat.yaml", {"workload.synthetic.requests": 200}),
                 ("moe_mtp_eagle3_dflash", "scenarios/moe_mtp_eagle3_dflash.yaml",
                  {"workload.max_requests": 100}),
                 ("pd_disaggregated", "scenarios/pd_disaggregated.yaml",
                  {"workload.max_requests": 200})]


def _child(code: str, *args: str, env=None) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         check=True, cwd=REPO, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--no-compile", action="store_true", help="skip the compile rows")
    args = ap.parse_args()
    if not args.no_compile:
        print("first run (empty numba cache) vs second run (cache loaded), whole process:")
        print(f"{'scenario':<24}{'first s':>10}{'second s':>10}{'compile s':>11}")
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "NUMBA_CACHE_DIR": cache}
            for name, path, over in COMPILE_CASES:
                over = {**over, "simulation.progress": False}
                first = _child(RUN, path, json.dumps(over), env=env)["process_s"]
                second = _child(RUN, path, json.dumps(over), env=env)["process_s"]
                print(f"{name:<24}{first:>10.1f}{second:>10.2f}{first - second:>11.1f}")
        print("(each row compiles only what the rows above have not: the cache is shared)")
    print(f"\nsimulated loop, chat at {args.requests} requests (wall_time_s):")
    base = None
    for kind in ("built-in", "drafter", "ledger", "acceptance", "pure"):
        t0 = time.perf_counter()
        r = _child(PLUG, kind, str(args.requests))
        base = base or r["loop_s"]
        print(f"{kind:<12}{r['loop_s']:>8.3f} s  {r['loop_s'] / base:>5.1f}x  "
              f"{r['iterations']} iterations  {r['notes']}  ({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
