"""Synthetic workloads: an arrival process, length distributions, optional sessions.

Generation is vectorised (100k requests take a few tens of milliseconds) and
deterministic: the same section and seed give the same DataFrame.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from traces.arrivals import Arrivals, parse_arrivals
from traces.distributions import Distribution, parse_distribution
from traces.errors import TraceError
from traces.prefixes import prefix_blocks
from traces.schema import make_trace
from traces.seeding import stream
from traces.spec import Section


@dataclass(frozen=True)
class Sessions:
    """Multi-turn sessions: turns per session, think time between turns, new tokens per turn."""

    turns: Distribution
    think_time_s: Distribution
    followup_tokens: Distribution


@dataclass(frozen=True)
class SyntheticSpec:
    """A parsed ``synthetic:`` section."""

    arrivals: Arrivals
    prompt_tokens: Distribution
    output_tokens: Distribution
    requests: int | None
    duration_s: float | None
    sessions: Sessions | None
    shared_prefix_tokens: int


def parse_synthetic(sec: Section, base_dir: Path) -> SyntheticSpec:
    """Parse (and check) a ``synthetic:`` section; unknown keys are left for the caller."""
    arrivals = parse_arrivals(
        sec.require("arrival", "a mapping with process and rate"), sec.key("arrival")
    )
    requests = sec.integer("requests", None, positive=True)
    duration = sec.number("duration_s", None, positive=True)
    if requests is None and duration is None:
        raise TraceError(
            f"{sec.path}: set requests, duration_s, or both (exactly that many in that time)"
        )
    prompt = parse_distribution(
        sec.require("prompt_tokens", "a length distribution"), sec.key("prompt_tokens"), base_dir
    )
    output = parse_distribution(
        sec.require("output_tokens", "a length distribution"), sec.key("output_tokens"), base_dir
    )
    shared = sec.integer("shared_prefix_tokens", 0, minimum=0)
    sessions = None
    if sec.has("sessions"):
        s = sec.section("sessions")
        sessions = Sessions(
            turns=parse_distribution(
                s.require("turns", "turns per session"), s.key("turns"), base_dir
            ),
            think_time_s=parse_distribution(
                s.raw("think_time_s", 0.0), s.key("think_time_s"), base_dir, integer=False, low=0.0
            ),
            followup_tokens=parse_distribution(
                s.raw("followup_tokens"), s.key("followup_tokens"), base_dir
            )
            if s.has("followup_tokens")
            else prompt,
        )
        s.finish()
        if requests is not None and duration is not None:
            raise TraceError(f"{sec.path}: with sessions, set one of requests or duration_s")
    return SyntheticSpec(arrivals, prompt, output, requests, duration, sessions, shared)


def generate(
    spec: SyntheticSpec, seed: int, qps: float | None = None, origin: str = "workload.synthetic"
) -> pd.DataFrame:
    """Draw the trace; ``qps`` rescales the arrival rates so requests/s average ``qps``."""
    arrivals = spec.arrivals
    turns_mean = spec.sessions.turns.mean() if spec.sessions else 1.0
    if qps is not None:
        arrivals = arrivals.scaled(qps / (arrivals.mean_rate() * turns_mean))
    if spec.sessions is None:
        return _single_turn(spec, arrivals, seed, origin)
    return _multi_turn(spec, arrivals, seed, turns_mean, origin)


def _single_turn(spec: SyntheticSpec, arrivals: Arrivals, seed: int, origin: str) -> pd.DataFrame:
    times = arrivals.generate(stream(seed, "arrival"), spec.requests, spec.duration_s)
    n = len(times)
    prompt = spec.prompt_tokens.sample(stream(seed, "prompt"), n) + spec.shared_prefix_tokens
    output = spec.output_tokens.sample(stream(seed, "output"), n)
    blocks = None
    if spec.shared_prefix_tokens:
        blocks = prefix_blocks(prompt, np.full(n, -1), spec.shared_prefix_tokens)
    return make_trace(times, prompt, output, origin, prefix_block_ids=blocks)


def _grouped_cumsum(values: np.ndarray, starts: np.ndarray, group: np.ndarray) -> np.ndarray:
    total = np.cumsum(values)
    return total - (total[starts] - values[starts])[group]


def _sessions(spec: SyntheticSpec, starts_s: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """Expand session start times into their turns (all arrays are per request)."""
    sess = spec.sessions
    assert sess is not None
    n_sessions = len(starts_s)
    turns = sess.turns.sample(stream(seed, "turns"), n_sessions)
    total = int(turns.sum())
    group = np.repeat(np.arange(n_sessions), turns)
    first = np.cumsum(turns) - turns
    turn = np.arange(total) - first[group]
    first_prompt = (
        spec.prompt_tokens.sample(stream(seed, "prompt"), n_sessions) + spec.shared_prefix_tokens
    )
    output = spec.output_tokens.sample(stream(seed, "output"), total)
    followup = sess.followup_tokens.sample(stream(seed, "followup"), total)
    growth = np.empty(total, dtype=np.int64)
    growth[1:] = output[:-1] + followup[1:]
    growth[first] = first_prompt
    think = sess.think_time_s.sample(stream(seed, "think"), total)
    think[first] = 0.0
    arrival = starts_s[group] + _grouped_cumsum(think, first, group)
    return {
        "arrival_s": arrival,
        "prompt_tokens": _grouped_cumsum(growth, first, group),
        "output_tokens": output,
        "session_id": group.astype(np.int64),
        "turn": turn.astype(np.int64),
    }


def _multi_turn(
    spec: SyntheticSpec, arrivals: Arrivals, seed: int, turns_mean: float, origin: str
) -> pd.DataFrame:
    if spec.duration_s is not None:
        starts = arrivals.generate(stream(seed, "arrival"), None, spec.duration_s)
        cols = _sessions(spec, starts, seed)
        keep = cols["arrival_s"] < spec.duration_s
    else:
        want = int(spec.requests or 0)
        n_sessions = int(np.ceil(want / turns_mean * 1.2)) + 8
        while True:
            starts = arrivals.generate(stream(seed, "arrival"), n_sessions)
            cols = _sessions(spec, starts, seed)
            # Complete up to the last session start: no later session can arrive earlier.
            if np.count_nonzero(cols["arrival_s"] <= starts[-1]) >= want:
                break
            n_sessions *= 2
        order = np.argsort(cols["arrival_s"], kind="stable")[:want]
        keep = np.zeros(len(cols["arrival_s"]), dtype=bool)
        keep[order] = True
    cols = {k: v[keep] for k, v in cols.items()}
    cols["prefix_block_ids"] = prefix_blocks(
        cols["prompt_tokens"], cols["session_id"], spec.shared_prefix_tokens
    )
    order = np.lexsort((cols["turn"], cols["session_id"], cols["arrival_s"]))
    cols = {k: v[order] for k, v in cols.items()}
    arrival, prompt, output = (
        cols.pop("arrival_s"),
        cols.pop("prompt_tokens"),
        cols.pop("output_tokens"),
    )
    return make_trace(arrival, prompt, output, origin, **cols)
