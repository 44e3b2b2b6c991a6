"""The import path older code uses for the engine and the API (re-exports only).

The engine is ``cluster/simulation.py`` (a ``Simulation`` runs a fleet), the fleet is built
by ``cluster/build.py`` (one ``Deployment`` per pool, ``cluster/deployment.py``), and the
Python API (``run_scenario``, ``load_scenario``, ``Result``) is ``simulator/api.py``.
"""

from specsim.simulator.api import (
    USER_ERRORS,
    Result,
    build_trace,
    finite_or_none,
    in_file,
    load_scenario,
    run_scenario,
    trace_for,
)
from specsim.simulator.cluster.deployment import ASSUMED_TIER_GB_S, Deployment
from specsim.simulator.cluster.simulation import Simulation, workload_key

__all__ = ["ASSUMED_TIER_GB_S", "USER_ERRORS", "Deployment", "Result", "Simulation",
           "build_trace", "finite_or_none", "in_file", "load_scenario", "run_scenario",
           "trace_for", "workload_key"]
