"""specsim's simulator: the SimPy cluster model, CLI and reports.

``run_scenario`` is the Python API the CLI and notebooks use.
"""

from .engine import Result, load_scenario, run_scenario

__all__ = ["Result", "load_scenario", "run_scenario"]
