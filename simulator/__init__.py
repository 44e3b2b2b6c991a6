"""specsim's simulator: the SimPy cluster model, CLI and reports.

``run_scenario`` is the Python API the CLI and notebooks use.
"""

from typing import Any

__all__ = ["Result", "load_scenario", "run_scenario"]


def __getattr__(name: str) -> Any:
    """The API without importing the simulator until it is used (``specsim --help`` is fast)."""
    if name in __all__:
        from specsim.simulator.cluster import engine

        return getattr(engine, name)
    raise AttributeError(f"module 'specsim.simulator' has no attribute {name!r}")
