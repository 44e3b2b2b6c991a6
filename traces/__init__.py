"""Request traces for specsim: one schema, loaders for public traces, synthetic
generators, scenario transformations, statistics and generator fitting.

The names below are imported on first use, so importing a light submodule (the errors,
the CLI's names) does not pull in pandas.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_WHERE = {
    "TraceError": "errors", "fit_synthetic": "fit", "load_trace": "loaders",
    "COLUMNS": "schema", "empty_trace": "schema", "validate_trace": "schema",
    "trace_stats": "stats", "build_workload": "workload", "parse_workload": "workload",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
