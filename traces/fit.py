"""Fit a ``synthetic:`` generator to a trace, so users can scale and vary what they saw.

Arrivals: a Gamma renewal process with the trace's mean rate and inter-arrival CV
(Poisson when the CV is about 1), or the trace's own rate curve per window with the CV
measured inside the windows (keeps the shape of rate over time). The spec asks for the
trace's request count within its duration, so the generator conditions on both and a
bursty trace's mean rate is reproduced, not just expected. Lengths: the empirical
quantiles (default) or a lognormal matched on the median.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from traces.errors import TraceError
from traces.stats import interarrival_cv, nice_window
from traces.transforms import mean_rate

ARRIVAL_MODELS = ("gamma", "curve")
LENGTH_MODELS = ("empirical", "lognormal")
_QUANTILE_POINTS = 101


def _sig(x: float, digits: int = 5) -> float:
    return float(f"{x:.{digits}g}")


def fit_lengths(values: np.ndarray, model: str) -> dict[str, Any]:
    """A length distribution spec for one token column."""
    values = np.asarray(values, dtype=np.float64)
    if model == "lognormal":
        logs = np.log(values)
        return {
            "distribution": "lognormal",
            "median": _sig(float(np.median(values))),
            "sigma": _sig(float(logs.std())),
            "min": int(values.min()),
            "max": int(values.max()),
        }
    qs = np.quantile(values, np.linspace(0.0, 1.0, _QUANTILE_POINTS))
    return {"distribution": "empirical", "quantiles": [int(round(q)) for q in qs]}


def _curve(df: pd.DataFrame, window_s: float | None) -> dict[str, Any]:
    t = df["arrival_s"].to_numpy()
    span = float(t[-1])
    # Equal slices that end at the last arrival: a part-empty last slice would drag the
    # rate down where the generator runs past the curve's end.
    slices = max(int(round(span / (window_s or nice_window(span)))), 1)
    window = span / slices
    counts = np.bincount(np.minimum((t / window).astype(np.int64), slices - 1), minlength=slices)
    rates = counts / window
    # CV of gaps inside windows, each gap measured in units of its window's mean gap.
    slot = np.minimum((t / window).astype(np.int64), slices - 1)
    same = slot[1:] == slot[:-1]
    gaps = np.diff(t)[same] * rates[slot[1:][same]]
    cv = float(gaps.std() / gaps.mean()) if gaps.size > 1 and gaps.mean() > 0 else 1.0
    return {
        "process": "diurnal",
        "curve": [_sig(r) for r in rates],
        "period_s": _sig(slices * window, 8),
        "cv": _sig(cv, 4),
    }


def fit_arrivals(
    df: pd.DataFrame, model: str = "gamma", window_s: float | None = None
) -> dict[str, Any]:
    """An ``arrival:`` spec reproducing the trace's mean rate (and CV or rate curve)."""
    if model not in ARRIVAL_MODELS:
        raise TraceError(
            f"fit: arrival model must be one of {', '.join(ARRIVAL_MODELS)}, got {model!r}"
        )
    rate = mean_rate(df)
    if rate <= 0:
        raise TraceError("fit: the trace needs at least two distinct arrival times")
    cv = interarrival_cv(df)
    if model == "curve":
        return _curve(df, window_s)
    if abs(cv - 1.0) < 0.05:
        return {"process": "poisson", "rate": _sig(rate)}
    return {"process": "gamma", "rate": _sig(rate), "cv": _sig(cv, 4)}


def fit_synthetic(
    df: pd.DataFrame,
    arrival: str = "gamma",
    lengths: str = "empirical",
    window_s: float | None = None,
) -> dict[str, Any]:
    """A ``workload:`` mapping (``{"synthetic": {...}}``) that build_workload accepts."""
    if lengths not in LENGTH_MODELS:
        raise TraceError(
            f"fit: length model must be one of {', '.join(LENGTH_MODELS)}, got {lengths!r}"
        )
    if len(df) < 2:
        raise TraceError("fit: the trace needs at least two requests")
    t = df["arrival_s"].to_numpy()
    rate = mean_rate(df)
    if rate <= 0:
        raise TraceError("fit: the trace needs at least two distinct arrival times")
    return {
        "synthetic": {
            "arrival": fit_arrivals(df, arrival, window_s),
            "requests": int(len(df)),
            "duration_s": _sig(float(t[-1]) + 1.0 / rate, 9),
            "prompt_tokens": fit_lengths(df["prompt_tokens"].to_numpy(), lengths),
            "output_tokens": fit_lengths(df["output_tokens"].to_numpy(), lengths),
        }
    }
