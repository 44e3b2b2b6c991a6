"""The Python API (simulator/api.py) and the older import path that re-exports it."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


def test_the_api_module_validates_a_scenario_on_its_own():
    """In a fresh interpreter, ``specsim.simulator.api`` alone validates a scenario: the
    policies it names (routers, schedulers, ...) are registered without the engine having
    been imported first."""
    code = ("from specsim.simulator.api import load_scenario\n"
            "sc, _, _ = load_scenario('scenarios/pd_disaggregated.yaml')\n"
            "print(sc.router.policy, sc.disaggregation.decode_router)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["least_loaded", "least_loaded"]


def test_the_older_import_path_is_the_api():
    import specsim
    import specsim.simulator.api as api
    import specsim.simulator.cluster.engine as engine

    for name in ("run_scenario", "load_scenario", "Result", "finite_or_none", "in_file",
                 "build_trace", "USER_ERRORS"):
        assert getattr(engine, name) is getattr(api, name), name
    assert specsim.run_scenario is api.run_scenario
