"""Shared test helpers: small traces built in memory, and where ../shared lives."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

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
    _start_kernel_warmup(config)


# ------------------------------------------------ the kernel compiled once per test run
# With numba's cache empty (a fresh clone, or kernel_jit.py edited), every pytest-xdist
# worker would compile the kernel at its first run, all at once (~25 s of CPU each). The
# controller compiles it once instead, in a background process started before the workers
# start and collect; each worker waits for it before its first test, then loads numba's
# cache like any later run. With the cache on disk the background run only loads it
# (about 2 s, hidden under the workers' collection). Nothing of this runs with -n 0.

_WARMUP_ENV = "SPECSIM_TEST_KERNEL_WARMED"
_WARMUP = f"""
import sys
from pathlib import Path
try:
    from specsim.simulator.execution.kernel import compiled_backend
    if compiled_backend("auto"):  # numba installed and loading
        from specsim.simulator import run_scenario
        run_scenario({str(REPO / "scenarios" / "chat.yaml")!r},
                     overrides={{"workload.synthetic.requests": 20, "simulation.progress": False,
                                "simulation.compiled": True}})
finally:
    Path(sys.argv[1]).touch()
"""


def _start_kernel_warmup(config) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER") or not config.getoption("numprocesses", 0):
        return  # a worker, or no workers: a process compiles at its first run, if need be
    if config.getoption("collectonly", False) or os.environ.get(_WARMUP_ENV):
        return
    done = Path(tempfile.mkdtemp(prefix="specsim-warmup-")) / "done"
    os.environ[_WARMUP_ENV] = str(done)  # the workers, started after this, inherit it
    config._specsim_warmup = subprocess.Popen(
        [sys.executable, "-c", _WARMUP, str(done)], cwd=REPO, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def pytest_unconfigure(config) -> None:
    proc = getattr(config, "_specsim_warmup", None)
    if proc is not None:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        done = Path(os.environ.pop(_WARMUP_ENV))
        done.unlink(missing_ok=True)
        done.parent.rmdir()


@pytest.fixture(scope="session", autouse=True)
def _kernel_compiled_once():
    """A worker waits for the controller's compile (at most 10 minutes; one that failed
    marks itself done too, and the tests then compile, or fail, on their own)."""
    done = os.environ.get(_WARMUP_ENV) if os.environ.get("PYTEST_XDIST_WORKER") else None
    deadline = time.monotonic() + 600
    while done and not Path(done).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
