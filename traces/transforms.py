"""Trace transformations a scenario applies: window, speed, sampling, limits, context
capping, workload classes and per-request defaults. Each takes and returns a trace
(``schema.Trace``: numpy columns)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from specsim.traces.errors import TraceError, show
from specsim.traces.schema import BLOCK_TOKENS, Trace, checked

CONTEXT_POLICIES = ("truncate", "drop", "error")


def mean_rate(df: Trace | Any) -> float:
    """Requests per second as 1 / mean inter-arrival gap (0 when undefined); a trace or its
    DataFrame (``trace stats`` and ``trace fit`` read the latter)."""
    if len(df) < 2:
        return 0.0
    t = np.asarray(df["arrival_s"])
    span = float(t[-1] - t[0])
    return (len(df) - 1) / span if span > 0 else 0.0




def window(df: Trace, start_s: float, end_s: float | None) -> Trace:
    """Keep arrivals in ``[start_s, end_s)`` and move ``start_s`` to time 0."""
    t = df["arrival_s"]
    mask = t >= start_s
    if end_s is not None:
        mask &= t < end_s
    out = df.rows(mask)
    out["arrival_s"] = out["arrival_s"] - start_s
    return out


def scale_time(df: Trace, speedup: float) -> Trace:
    """Replay ``speedup`` times faster (every gap divided by ``speedup``)."""
    out = df.copy()
    out["arrival_s"] = out["arrival_s"] / speedup
    return out


def _units(df: Trace) -> np.ndarray:
    """Sampling/class unit per request: its session, or itself when it has none."""
    session = df["session_id"]
    unit = session.copy()
    lone = session < 0
    unit[lone] = session.max(initial=-1) + 1 + np.arange(int(lone.sum()))
    return unit


def sample(
    df: Trace, rng: np.random.Generator, fraction: float | None, n: int | None
) -> Trace:
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
    return df.rows(chosen[inverse])


def limit(df: Trace, max_requests: int) -> Trace:
    """The first ``max_requests`` requests in arrival order."""
    return df.rows(slice(0, max_requests))


def cap_context(
    df: Trace, max_context: int, policy: str, path: str
) -> tuple[Trace, int]:
    """Make prompt + output fit ``max_context``; returns the trace and how many were over.

    ``truncate`` shortens the output to at most max_context - 1, then keeps the head of
    the prompt (its prefix blocks stay valid; a cut block gets a fresh id). ``drop``
    removes those requests; ``error`` refuses the workload.
    """
    prompt = df["prompt_tokens"]
    output = df["output_tokens"]
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
        return df.rows(~over), count
    new_output = np.where(over, np.minimum(output, max_context - 1), output)
    new_prompt = np.where(over, np.minimum(prompt, max_context - new_output), prompt)
    out = df.copy()
    out["prompt_tokens"] = new_prompt
    out["output_tokens"] = new_output
    blocks = out["prefix_block_ids"].copy()
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


def fixed_class(df: Trace, name: str) -> Trace:
    """Every request gets workload class ``name``."""
    out = df.copy()
    out["workload_class"] = name
    return out


def class_mix(df: Trace, mix: Mapping[str, float], rng: np.random.Generator) -> Trace:
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
    df: Trace, column: str, mapping: Mapping[str, str] | None, path: str
) -> Trace:
    """Take the class from a source column, optionally renamed through ``mapping``."""
    values = [str(v).strip() for v in df[column]]
    if mapping:
        unknown = sorted(set(values) - set(mapping))
        if unknown:
            raise TraceError(
                f"{path}: value {show(unknown[0])} of column {show(column)} is not in class_map "
                f"(it maps {', '.join(sorted(mapping))})"
            )
        values = [mapping[v] for v in values]
    out = df.copy()
    named = np.empty(len(values), dtype=object)
    named[:] = [v if v != "" else "default" for v in values]
    out["workload_class"] = named
    return out


def fill_defaults(
    df: Trace, temperature: float | None, slo_tier: str | dict[str, str] | None,
    origin: str
) -> Trace:
    """Set missing (NaN) temperatures and, when given, every request's SLO tier (one name,
    or per workload class: a mapping that must name every class of the workload)."""
    out = df.copy()
    if temperature is not None:
        temp = out["temperature"]
        out["temperature"] = np.where(np.isnan(temp), temperature, temp)
    if isinstance(slo_tier, dict):
        classes = [str(c) for c in out["workload_class"]]
        missing = sorted(set(classes) - set(slo_tier))
        if missing:
            raise TraceError(f"workload.slo_tier: no tier for workload class "
                             f"{show(missing[0])} (it maps {', '.join(sorted(slo_tier))})")
        tiers = np.empty(len(classes), dtype=object)
        tiers[:] = [slo_tier[c] for c in classes]
        out["slo_tier"] = tiers
    elif slo_tier is not None:
        out["slo_tier"] = slo_tier
    return checked(out, origin)
