"""The Python API: validate a scenario, build and run it, hand back its tables.

``run_scenario`` is what ``specsim run``, sweeps, plans and notebooks call; ``Result`` is
what it returns. ``specsim.simulator.cluster.engine`` re-exports these names (the import
path older code uses).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from specsim import gc_policy
from specsim.cost_models.errors import CatalogError
from specsim.errors import ScenarioError
from specsim.simulator.metrics.iteration_log import Columns, columns_of
from specsim.traces.errors import TraceError

if TYPE_CHECKING:  # pragma: no cover  (a run's outputs are written without pandas)
    import pandas as pd

    from specsim.simulator.cluster.simulation import RequestRows
    from specsim.traces.schema import Trace

USER_ERRORS = (ScenarioError, CatalogError, TraceError)


@dataclass
class Result:
    """What a run produced: the metrics dict and the per-request / per-iteration tables.

    ``requests`` (requests.csv's table) may be handed over as what builds its columns
    (``simulation.RequestRows``: a slice -> that part of the table's columns by name,
    ``n`` rows in all): the frame is built when first read (pandas imported then), and
    ``specsim run --out`` writes the columns a block at a time instead
    (``requests_blocks``), so a million-request run never holds it whole (issue 22's memory
    target) and its outputs are written without pandas. ``iterations`` likewise may be
    handed over as its columns by name: the frame is built when first read."""

    metrics: dict[str, Any]
    requests: pd.DataFrame | RequestRows
    iterations: pd.DataFrame | Columns | None  # None: streamed to the --out folder
    scenario: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    def __getattribute__(self, name: str) -> Any:
        value = object.__getattribute__(self, name)
        if name == "requests" and callable(value):  # built once; the builder let go
            import pandas as pd

            value = pd.DataFrame(value(slice(None)))
            object.__setattr__(self, "requests", value)
        elif name == "iterations" and isinstance(value, dict):  # built once
            import pandas as pd

            value = pd.DataFrame(value)
            object.__setattr__(self, "iterations", value)
        return value

    def iterations_columns(self) -> Columns | None:
        """The iteration log held (None: streamed to the --out folder) as columns by name,
        without building its frame where it has not been built yet."""
        log = object.__getattribute__(self, "iterations")
        return log if log is None or isinstance(log, dict) else columns_of(log)

    def iterations_attrs(self) -> dict[str, Any]:
        """The held log's attrs (a log read back for the plots says how it was sampled)."""
        return dict(getattr(object.__getattribute__(self, "iterations"), "attrs", {}))

    def requests_blocks(self, rows: int) -> Iterator[Columns | pd.DataFrame]:
        """The requests table ``rows`` at a time, in order (at least one, maybe empty), as
        columns by name without building the frame where it has not been built yet (else
        the frame's slices)."""
        build = object.__getattribute__(self, "requests")
        if not callable(build):
            for i in range(0, max(len(build), 1), rows):
                yield build.iloc[i:i + rows]
            return
        n = build.n
        for i in range(0, max(n, 1), rows):
            yield build(slice(i, min(i + rows, n)))

    def requests_columns(self) -> Columns:
        """The whole requests table as columns by name (numpy arrays), from the frame where
        it is built, else from its builder without building the frame (the report)."""
        build = object.__getattribute__(self, "requests")
        if build is None:
            return {}
        return build(slice(None)) if callable(build) else columns_of(build)


def load_scenario(source: str | Path | dict[str, Any], overrides: Any = None,
                  seed: int | None = None) -> tuple[Any, Path, str]:
    """Raw YAML/dict -> validated scenario, the folder paths resolve from, and its origin."""
    from specsim.simulator.cluster import build  # noqa: F401  (registers the built-in policies)
    from specsim.simulator.scenario import config as cfg

    if isinstance(source, dict):
        raw, base, origin = source, Path.cwd(), "scenario"
    else:
        path = Path(source)
        raw, base, origin = cfg.read_yaml(path), path.resolve().parent, str(path)
    with in_file(origin):
        raw = cfg.apply_overrides(raw, overrides)
        if seed is not None:
            raw["seed"] = seed
        sc = cfg.validate(raw)
        cfg.check_consistency(sc)
        if sc.workload is None:
            raise ScenarioError("workload: required (a trace file or a synthetic generator)")
    return sc, base, origin


@contextlib.contextmanager
def in_file(origin: str):
    """Re-raise user errors with the scenario file named first (once)."""
    try:
        yield
    except USER_ERRORS as exc:
        msg = str(exc)
        if origin != "scenario" and not msg.startswith(origin):
            msg = f"{origin}: {msg}"
        raise type(exc)(msg) from None


def build_trace(sc: Any, base: Path, max_context: int) -> pd.DataFrame:
    """The scenario's workload as a DataFrame (``trace_for``'s)."""
    return trace_for(sc, base, max_context).frame()


def trace_for(sc: Any, base: Path, max_context: int) -> Trace:
    """The scenario's workload as the trace a run reads (``traces.schema.Trace``: numpy
    columns, no pandas)."""
    from specsim.traces.workload import workload_trace

    return workload_trace(sc.workload, base, int(sc.seed), max_context)


def run_scenario(source: str | Path | dict[str, Any], *, seed: int | None = None,
                 overrides: Any = None, trace: pd.DataFrame | Trace | None = None,
                 progress: Any = None, check: bool = True,
                 stream_to: str | Path | None = None) -> Result:
    """Validate, build and run a scenario; the Python API behind ``specsim run``.

    Errors in the input raise ScenarioError / CatalogError / TraceError with one-line
    messages naming the file and key. ``trace`` bypasses the scenario's workload section.
    ``stream_to``: a folder the iteration log is streamed into as the run goes
    (``simulation.iteration_log`` says the format); the result then holds no iterations
    frame (``iterations`` is None) and memory stays flat.
    """
    from specsim.cost_models.catalog import get_model
    from specsim.simulator.cluster.simulation import Simulation

    origin = str(source) if not isinstance(source, dict) else "scenario"
    with in_file(origin):
        sc, base, origin = load_scenario(source, overrides, seed)
        if trace is None:
            model = get_model(sc.model, "model")
            trace = trace_for(sc, base, model.max_context)
        sim = Simulation(sc, trace, base, progress)
    trace = None  # the request table holds what the run needs (a big trace is let go)
    log = None
    if stream_to is not None:
        from specsim.simulator.metrics.iteration_log import CHUNK_ROWS, open_log

        log = open_log(sc.simulation.iteration_log, Path(stream_to))
        sim.metrics.stream_to(log, CHUNK_ROWS)
    try:
        gc_policy.release()  # the console script's start-up ends here
        t0 = time.perf_counter()
        sim.run()
        wall = time.perf_counter() - t0
    except BaseException:
        if log is not None:
            log.close()
        raise
    if check:
        sim.check_invariants()
    metrics = sim.summary(wall)
    if log is not None:
        if not sim.record_iterations:
            sim.metrics._n = 0  # no rows, but the columns
        sim.metrics.finish_stream()
        iters = None
    else:
        iters = sim.metrics.iterations_columns()  # the frame: when first read
        if not sim.record_iterations:  # no rows, but the columns (the log keeps its header)
            iters = {k: v[:0] for k, v in iters.items()}
    return Result(metrics, sim.requests_builder(), iters, sc.dump(), sim.notes)


def finite_or_none(x: Any) -> Any:
    """JSON has no NaN: turn non-finite floats into null, recursively."""
    if isinstance(x, dict):
        return {k: finite_or_none(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [finite_or_none(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return finite_or_none(float(x))
    return x
