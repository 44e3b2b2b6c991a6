"""Shared test helpers: small traces built in memory, and where ../shared lives."""

from __future__ import annotations

import os

if os.environ.get("PYTEST_XDIST_WORKER"):
    # One pytest-xdist worker per core: torch's and OpenBLAS's own thread pools would make
    # each worker's threads spin against the other workers' (SmolLM2's checks took ~10x
    # the CPU time with 2 threads per worker on 2 cores). Set before numpy and torch load.
    os.environ.setdefault("OMP_NUM_THREADS", "1")

from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def make_trace(n: int, *, rate: float | None = None, gap: float | None = None, prompt=128,
               output=128, cls: str = "chat", seed: int = 0) -> pd.DataFrame:
    """A trace in the schema: Poisson arrivals at ``rate`` or fixed ``gap`` seconds apart."""
    r = np.random.default_rng(seed)
    if gap is not None:
        arrival = np.arange(n) * float(gap)
    else:
        arrival = np.cumsum(r.exponential(1.0 / (rate or 1.0), n))
    def lengths(x):
        if isinstance(x, tuple):
            return r.integers(x[0], x[1] + 1, n)
        return np.full(n, int(x))
    return pd.DataFrame({
        "arrival_s": arrival, "request_id": np.arange(n), "session_id": -1, "turn": 0,
        "prompt_tokens": lengths(prompt), "output_tokens": lengths(output),
        "workload_class": cls, "prefix_block_ids": [()] * n, "temperature": 0.0,
        "slo_tier": "standard",
    })


@pytest.fixture
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} is absent (a fresh clone has no ../shared): real-data test skipped")
    return SHARED


def skip_without_shared_trace(path: Path) -> None:
    """A bundled scenario on a public trace in ../shared/data (not shipped) skips where the
    trace is absent."""
    import yaml

    wl = (yaml.safe_load(Path(path).read_text()) or {}).get("workload") or {}
    trace = (wl.get("trace") or {}).get("path") if isinstance(wl, dict) else None
    if trace and "shared/data" in trace and not (Path(path).parent / trace).is_file():
        pytest.skip(f"{Path(path).name}: its trace {trace} is absent (a fresh clone has no "
                    '../shared/data; see README.md, "Public traces: where to download them")')


def pytest_configure(config) -> None:
    """The suite runs many scenarios per process: compile the kernel as sweeps and the
    planner do (``simulation.compiled: auto`` would run short runs as Python source until
    numba's cache is on disk)."""
    from specsim.simulator.execution.kernel import prefer_compiled

    prefer_compiled()
