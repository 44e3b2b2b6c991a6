"""specsim: a discrete-event serving simulator and capacity planner for LLM inference with
speculative decoding.

Three packages live under this one name, so nothing collides with other PyPI packages:
``specsim.simulator`` (the SimPy cluster model, CLI and reports), ``specsim.cost_models``
(catalogs, the roofline, calibration) and ``specsim.traces`` (request traces). In the
repository they are the top-level folders ``simulator/``, ``cost_models/`` and ``traces/``;
an installed wheel holds them inside this package.

    from specsim import run_scenario
    res = run_scenario("scenarios/chat.yaml", seed=3)
"""

from __future__ import annotations

__version__ = "0.1.0"  # the one place (pyproject.toml reads it: dynamic = ["version"])

from pathlib import Path  # noqa: E402
from typing import Any

_here = Path(__file__).resolve().parent
_tree = _here.parent
if not (_here / "simulator").is_dir() and all(
        (_tree / name / "__init__.py").is_file() for name in ("simulator", "cost_models", "traces")):
    # a source tree (editable install, or run from a clone): the folders beside this one
    __path__.append(str(_tree))  # type: ignore[name-defined]  # noqa: F821

__all__ = ["Result", "load_scenario", "run_scenario"]


def __getattr__(name: str) -> Any:
    """``specsim.run_scenario`` without paying for the simulator's imports until it is used."""
    if name in __all__:
        from specsim.simulator.cluster import engine

        return getattr(engine, name)
    raise AttributeError(f"module 'specsim' has no attribute {name!r}")
