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
import yaml

from specsim.traces.arrivals import MAX_CV, MIN_PERIOD_S
from specsim.traces.errors import TraceError, names
from specsim.traces.names import ARRIVAL_MODELS, LENGTH_MODELS  # noqa: E402,F401
from specsim.traces.stats import check_window, interarrival_cv
from specsim.traces.transforms import mean_rate

_QUANTILE_POINTS = 101
#: The CV written for a perfectly regular trace (the generator needs a positive one).
MIN_FIT_CV = 0.001


def _sig(x: float, digits: int = 5) -> float:
    return float(f"{x:.{digits}g}")


def _check_rate(rate: float) -> None:
    if rate <= 0:
        raise TraceError("fit: the trace needs at least two distinct arrival times")
    if not np.isfinite(rate) or _sig(rate) <= 0:
        raise TraceError(
            f"fit: the trace's arrivals span too short or too long a time to fit a rate "
            f"({rate:.3g} req/s)"
        )


def _usable_cv(cv: float) -> float:
    """A CV the generator takes: 1 when unknown, regular or extreme ones at the limits."""
    if not np.isfinite(cv):
        return 1.0
    return float(min(max(cv, MIN_FIT_CV), MAX_CV))


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
    if span < MIN_PERIOD_S:
        raise TraceError(
            f"fit: the trace spans {span:g} s; --arrival curve needs at least "
            f"{MIN_PERIOD_S:g} s (use --arrival gamma)"
        )
    # Equal slices that end at the last arrival: a part-empty last slice would drag the
    # rate down where the generator runs past the curve's end.
    slices = max(int(round(span / check_window(window_s, span, "--window"))), 1)
    window = span / slices
    counts = np.bincount(np.minimum((t / window).astype(np.int64), slices - 1), minlength=slices)
    rates = counts / window
    # CV of gaps inside windows, each gap measured in units of its window's mean gap.
    slot = np.minimum((t / window).astype(np.int64), slices - 1)
    same = slot[1:] == slot[:-1]
    gaps = np.diff(t)[same] * rates[slot[1:][same]]
    cv = _usable_cv(float(gaps.std() / gaps.mean()) if gaps.size > 1 and gaps.mean() > 0 else 1.0)
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
    _check_rate(rate)
    cv = _usable_cv(interarrival_cv(df))
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
    workload_class: str | None = None,
) -> dict[str, Any]:
    """A ``workload:`` mapping (``{"synthetic": {...}}``) that build_workload accepts.

    ``workload_class`` adds ``class: NAME`` (every request's class, which picks the
    acceptance of the scenario's speculation profile).
    """
    if workload_class is not None and (not workload_class or not workload_class.strip()):
        raise TraceError("--class: expected a workload class name, e.g. chat")
    if lengths not in LENGTH_MODELS:
        raise TraceError(
            f"fit: length model must be one of {', '.join(LENGTH_MODELS)}, got {lengths!r}"
        )
    if len(df) < 2:
        raise TraceError("fit: the trace needs at least two requests")
    t = df["arrival_s"].to_numpy()
    rate = mean_rate(df)
    _check_rate(rate)
    section: dict[str, Any] = {
        "synthetic": {
            "arrival": fit_arrivals(df, arrival, window_s),
            "requests": int(len(df)),
            "duration_s": _sig(float(t[-1]) + 1.0 / rate, 9),
            "prompt_tokens": fit_lengths(df["prompt_tokens"].to_numpy(), lengths),
            "output_tokens": fit_lengths(df["output_tokens"].to_numpy(), lengths),
        }
    }
    if workload_class is not None:
        section["class"] = workload_class.strip()
    return section


#: The comment a fitted section carries when no class was given: without one, every
#: request is class ``default``, which the bundled acceptance profiles do not have.
CLASS_HINT = (
    "  # add `class: chat` (or code, math, ...) so the scenario's acceptance profile "
    "applies\n  # (specsim trace fit --class NAME writes it)\n"
)


def fitted_yaml(section: dict[str, Any], source: str, requests: int) -> str:
    """The text ``specsim trace fit`` prints: a comment header and the ``workload:`` YAML.

    Pasted as a scenario's ``workload:`` section it runs; without a ``class`` it ends
    with a comment saying to add one (see ``CLASS_HINT``).
    """
    text = f"# specsim workload fitted to {names([source])} ({requests:,} requests)\n"
    text += yaml.safe_dump(
        {"workload": section}, sort_keys=False, default_flow_style=None, width=100
    )
    if "class" not in section:
        text += CLASS_HINT
    return text
