"""Summary statistics of a trace: what a capacity planner looks at before simulating."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pandas as pd

from specsim.traces.errors import TraceError, show
from specsim.traces.transforms import mean_rate

QUANTILES = (0.5, 0.9, 0.99)
_NICE = (1, 2, 5)


def nice_window(span_s: float, target: int = 60) -> float:
    """A round window length (1, 2, 5 x 10^k s) giving about ``target`` windows."""
    if span_s <= 0:
        return 1.0
    raw = span_s / target
    exp = 10.0 ** np.floor(np.log10(raw))
    for step in _NICE:
        if raw <= step * exp:
            return float(step * exp)
    return float(10 * exp)


#: The most rate windows a trace is cut into (``--window`` far below the span).
MAX_WINDOWS = 100_000


def check_window(window_s: float | None, span_s: float, key: str) -> float:
    """``window_s`` (or a nice default for ``span_s``), refused when not a usable length."""
    if window_s is None:
        return nice_window(span_s)
    if not (np.isfinite(window_s) and window_s > 0):
        raise TraceError(f"{key}: expected a positive number of seconds, got {show(window_s)}")
    if span_s / window_s > MAX_WINDOWS:
        raise TraceError(
            f"{key}: {window_s:g} s windows over the trace's {span_s:g} s make "
            f"{span_s / window_s:,.0f} windows (at most {MAX_WINDOWS:,}); use longer ones"
        )
    return float(window_s)


def interarrival_cv(df: pd.DataFrame) -> float:
    """Coefficient of variation of the gaps between arrivals (1 for Poisson)."""
    gaps = np.diff(df["arrival_s"].to_numpy())
    if gaps.size < 2 or gaps.mean() <= 0:
        return float("nan")
    return float(gaps.std() / gaps.mean())


def rate_over_time(df: pd.DataFrame, window_s: float | None = None) -> pd.DataFrame:
    """Arrivals per second in consecutive windows from time 0 to the last arrival.

    Columns ``start_s``, ``end_s``, ``requests``, ``rate``. The last window ends at the
    last arrival (merged into the one before when shorter than half a window), so the
    tail is not diluted by time after the trace ended.
    """
    t = df["arrival_s"].to_numpy()
    span = float(t[-1]) if t.size else 0.0
    window = check_window(window_s, span, "--window")
    edges = np.arange(0.0, span, window)
    if edges.size == 0:
        edges = np.array([0.0])
    if edges.size > 1 and span - edges[-1] < window / 2:
        edges = edges[:-1]
    edges = np.append(edges, span if span > edges[-1] else edges[-1] + window)
    counts, _ = np.histogram(t, bins=edges)
    widths = np.diff(edges)
    return pd.DataFrame(
        {"start_s": edges[:-1], "end_s": edges[1:], "requests": counts, "rate": counts / widths}
    )


def length_summary(values: np.ndarray) -> dict[str, float]:
    """Mean, p50, p90, p99 and max of a token-length column."""
    if values.size == 0:
        return {
            "mean": float("nan"),
            "p50": float("nan"),
            "p90": float("nan"),
            "p99": float("nan"),
            "max": 0,
        }
    qs = np.quantile(values, QUANTILES)
    out = {"mean": float(values.mean())}
    out.update({f"p{round(q * 100)}": float(v) for q, v in zip(QUANTILES, qs, strict=True)})
    out["max"] = int(values.max())
    return out


def prefix_reuse(df: pd.DataFrame) -> tuple[int, float]:
    """Total prefix blocks and the share of them that repeat a block seen earlier."""
    blocks = df["prefix_block_ids"].to_numpy(dtype=object)
    total = int(sum(len(b) for b in blocks))
    if total == 0:
        return 0, 0.0
    flat = np.fromiter(itertools.chain.from_iterable(blocks), dtype=np.int64, count=total)
    unique = np.unique(flat).size
    return total, float(1.0 - unique / total)


def trace_stats(df: pd.DataFrame, window_s: float | None = None) -> dict[str, Any]:
    """Everything ``specsim trace stats`` shows, as plain JSON-ready values."""
    t = df["arrival_s"].to_numpy()
    blocks, reuse = prefix_reuse(df)
    rot = (
        rate_over_time(df, window_s)
        if len(df)
        else pd.DataFrame(columns=["start_s", "end_s", "requests", "rate"])
    )
    sessions = df["session_id"].to_numpy()
    window = check_window(window_s, float(t[-1]) if t.size else 0.0, "--window")
    return {
        "requests": int(len(df)),
        "duration_s": float(t[-1] - t[0]) if t.size else 0.0,
        "mean_rate": mean_rate(df),
        "peak_rate": float(rot["rate"].max()) if len(rot) else 0.0,
        "interarrival_cv": interarrival_cv(df),
        "prompt_tokens": length_summary(df["prompt_tokens"].to_numpy()),
        "output_tokens": length_summary(df["output_tokens"].to_numpy()),
        "sessions": int(np.unique(sessions[sessions >= 0]).size),
        "classes": {str(k): int(v) for k, v in df["workload_class"].value_counts().items()},
        "prefix_blocks": blocks,
        "prefix_reuse_fraction": reuse,
        "rate_over_time": {
            "window_s": window,
            "start_s": [float(x) for x in rot["start_s"]],
            "end_s": [float(x) for x in rot["end_s"]],
            "rate": [float(x) for x in rot["rate"]],
        },
    }
