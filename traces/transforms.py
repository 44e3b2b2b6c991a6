"""Trace transformations a scenario applies: window, speed, sampling, limits, context
capping, workload classes and per-request defaults. Each takes and returns a trace."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from specsim.traces.errors import TraceError, show
from specsim.traces.schema import BLOCK_TOKENS, validate_trace

CONTEXT_POLICIES = ("truncate", "drop", "error")


def mean_rate(df: pd.DataFrame) -> float:
    """Requests per second as 1 / mean inter-arrival gap (0 when undefined)."""
    if len(df) < 2:
        return 0.0
    span = float(df["arrival_s"].iloc[-1] - df["arrival_s"].iloc[0])
    return (len(df) - 1) / span if span > 0 else 0.0


def _rows(df: pd.DataFrame, mask: np.ndarray) -> pd.DataFrame:
    return df.loc[mask].reset_index(drop=True)


def window(df: pd.DataFrame, start_s: float, end_s: float | None) -> pd.DataFrame:
    """Keep arrivals in ``[start_s, end_s)`` and move ``start_s`` to time 0."""
    t = df["arrival_s"].to_numpy()
    mask = t >= start_s
    if end_s is not None:
        mask &= t < end_s
    out = _rows(df, mask)
    out["arrival_s"] = out["arrival_s"] - start_s
    return out


def scale_time(df: pd.DataFrame, speedup: float) -> pd.DataFrame:
    """Replay ``speedup`` times faster (every gap divided by ``speedup``)."""
    out = df.copy()
    out["arrival_s"] = out["arrival_s"] / speedup
    return out


def _units(df: pd.DataFrame) -> np.ndarray:
    """Sampling/class unit per request: its session, or itself when it has none."""
    session = df["session_id"].to_numpy()
    unit = session.copy()
    lone = session < 0
    unit[lone] = session.max(initial=-1) + 1 + np.arange(int(lone.sum()))
    return unit


def sample(
    df: pd.DataFrame, rng: np.random.Generator, fraction: float | None, n: int | None
) -> pd.DataFrame:
    """Keep a random share of sessions (or requests, when sessionless), times unchanged.

    Thinning keeps the time span, so the rate drops with the share; whole sessions are
    kept so multi-turn prefixes stay intact. ``n`` counts units, and is capped at all.
    """
    unit = _units(df)
    codes, inverse = np.unique(unit, return_inverse=True)
    count = len(codes)
    k = min(count, n) if n is not None else int(np.floor(count * float(fraction or 0.0) + 0.5))
    chosen = np.zeros(count, dtype=bool)
    chosen[rng.choice(count, size=k, replace=False)] = True
    return _rows(df, chosen[inverse])


def limit(df: pd.DataFrame, max_requests: int) -> pd.DataFrame:
    """The first ``max_requests`` requests in arrival order."""
    return df.iloc[:max_requests].reset_index(drop=True)


def cap_context(
    df: pd.DataFrame, max_context: int, policy: str, path: str
) -> tuple[pd.DataFrame, int]:
    """Make prompt + output fit ``max_context``; returns the trace and how many were over.

    ``truncate`` shortens the output to at most max_context - 1, then keeps the head of
    the prompt (its prefix blocks stay valid; a cut block gets a fresh id). ``drop``
    removes those requests; ``error`` refuses the workload.
    """
    prompt = df["prompt_tokens"].to_numpy()
    output = df["output_tokens"].to_numpy()
    over = prompt + output > max_context
    count = int(over.sum())
    if not count:
        return df, 0
    if policy == "error":
        first = int(np.flatnonzero(over)[0])
        raise TraceError(
            f"{path}: {count} requests have prompt + output above {max_context} tokens "
            f"(first: request {first}, {prompt[first]} + {output[first]}); "
            "set workload.context_overflow: truncate or drop"
        )
    if policy == "drop":
        return _rows(df, ~over), count
    new_output = np.where(over, np.minimum(output, max_context - 1), output)
    new_prompt = np.where(over, np.minimum(prompt, max_context - new_output), prompt)
    out = df.copy()
    out["prompt_tokens"] = new_prompt
    out["output_tokens"] = new_output
    blocks = out["prefix_block_ids"].to_numpy(dtype=object).copy()
    fresh = 1 + max((max(b) for b in blocks if b), default=-1)
    for i in np.flatnonzero(over & (new_prompt < prompt)):
        ids = blocks[i]
        if not ids:
            continue
        keep = int(new_prompt[i]) // BLOCK_TOKENS
        cut = ids[:keep]
        if int(new_prompt[i]) % BLOCK_TOKENS:
            cut = (*cut, fresh)
            fresh += 1
        blocks[i] = cut
    out["prefix_block_ids"] = blocks
    return out, count


def fixed_class(df: pd.DataFrame, name: str) -> pd.DataFrame:
    """Every request gets workload class ``name``."""
    out = df.copy()
    out["workload_class"] = name
    return out


def class_mix(df: pd.DataFrame, mix: Mapping[str, float], rng: np.random.Generator) -> pd.DataFrame:
    """Draw a class per session (or request) with the given weights."""
    names = list(mix)
    weights = np.asarray([mix[k] for k in names], dtype=np.float64)
    with np.errstate(over="ignore"):
        if not np.isfinite(weights.sum()):  # weights near the float limit: scale them down
            weights = weights / weights.max()
    unit = _units(df)
    codes, inverse = np.unique(unit, return_inverse=True)
    picks = rng.choice(len(names), size=len(codes), p=weights / weights.sum())
    out = df.copy()
    out["workload_class"] = np.asarray(names, dtype=object)[picks][inverse]
    return out


def class_from_column(
    df: pd.DataFrame, column: str, mapping: Mapping[str, str] | None, path: str
) -> pd.DataFrame:
    """Take the class from a source column, optionally renamed through ``mapping``."""
    values = df[column].astype(str).str.strip()
    if mapping:
        unknown = sorted(set(values.unique()) - set(mapping))
        if unknown:
            raise TraceError(
                f"{path}: value {show(unknown[0])} of column {show(column)} is not in class_map "
                f"(it maps {', '.join(sorted(mapping))})"
            )
        values = values.map(mapping)
    out = df.copy()
    out["workload_class"] = values.replace("", "default").to_numpy(dtype=object)
    return out


def fill_defaults(
    df: pd.DataFrame, temperature: float | None, slo_tier: str | dict[str, str] | None,
    origin: str
) -> pd.DataFrame:
    """Set missing (NaN) temperatures and, when given, every request's SLO tier (one name,
    or per workload class: a mapping that must name every class of the workload)."""
    out = df.copy()
    if temperature is not None:
        out["temperature"] = out["temperature"].fillna(temperature)
    if isinstance(slo_tier, dict):
        missing = sorted(set(out["workload_class"].astype(str)) - set(slo_tier))
        if missing:
            raise TraceError(f"workload.slo_tier: no tier for workload class "
                             f"{show(missing[0])} (it maps {', '.join(sorted(slo_tier))})")
        out["slo_tier"] = out["workload_class"].astype(str).map(slo_tier).to_numpy(object)
    elif slo_tier is not None:
        out["slo_tier"] = slo_tier
    return validate_trace(out, origin)
