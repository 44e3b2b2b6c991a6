"""The console script holds Python's cyclic collector off while a run starts and hands it
back, with start-up's objects frozen, when the simulation loop starts
(``specsim/gc_policy.py``); a library caller's collector is never touched."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

from specsim import gc_policy

REPO = Path(__file__).resolve().parents[1]
CHAT = REPO / "scenarios" / "chat.yaml"

#: a console-script run that records the collector's state when the loop starts and at its end
PROBE = r"""
import gc, json, sys
from specsim.simulator.cluster import simulation
states = {}
run = simulation.Simulation.run
def probed(self, *a, **k):
    states["loop"] = [gc.isenabled(), gc.get_freeze_count()]
    return run(self, *a, **k)
simulation.Simulation.run = probed
import specsim.simulator.cli as cli
sys.argv = ["specsim", "run", sys.argv[1], "--quiet", "--no-report",
            "--set", "workload.synthetic.requests=30", "--out", sys.argv[2]]
def start():
    states["start"] = [gc.isenabled()]
cli.main, main = (lambda: (start(), main())[1]), cli.main
import os
real_exit = os._exit
def leave(code):
    print(json.dumps(states), flush=True)
    real_exit(code)
os._exit = leave
cli.entry()
"""


def test_the_console_script_holds_the_collector_until_the_loop(tmp_path):
    import json

    p = subprocess.run([sys.executable, "-c", PROBE, str(CHAT), str(tmp_path / "o")],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    states = json.loads(p.stdout.strip().splitlines()[-1])
    assert states["start"] == [False]  # held from the console script's first line
    enabled, frozen = states["loop"]
    assert enabled and frozen > 10_000  # back on at the loop, start-up's objects frozen


def test_a_library_run_leaves_the_collector_alone(tmp_path):
    from specsim.simulator.api import run_scenario

    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    run_scenario(str(CHAT), overrides=["workload.synthetic.requests=20"])
    assert gc.isenabled() and gc.get_freeze_count() == frozen


def test_hold_and_release_pair_and_release_alone_does_nothing():
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    gc_policy.release()  # nothing held: nothing changes
    assert gc.isenabled() and gc.get_freeze_count() == frozen
    gc_policy.hold()
    try:
        assert not gc.isenabled()
    finally:
        gc_policy.release()
        gc.unfreeze()
    assert gc.isenabled()
    gc.disable()  # a caller that turned it off itself keeps it off
    try:
        gc_policy.hold()
        gc_policy.release()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_paused_restores_the_collectors_state():
    with gc_policy.paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_policy.paused():
            pass
        assert not gc.isenabled()  # off before: still off
    finally:
        gc.enable()
