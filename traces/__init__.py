"""Request traces for specsim: one schema, loaders for public traces, synthetic
generators, scenario transformations, statistics and generator fitting."""

from traces.errors import TraceError
from traces.fit import fit_synthetic
from traces.loaders import load_trace
from traces.schema import COLUMNS, empty_trace, validate_trace
from traces.stats import trace_stats
from traces.workload import build_workload, parse_workload

__all__ = [
    "COLUMNS",
    "TraceError",
    "build_workload",
    "empty_trace",
    "fit_synthetic",
    "load_trace",
    "parse_workload",
    "trace_stats",
    "validate_trace",
]
