"""Synthetic workloads: an arrival process, length distributions, optional sessions.

Generation is vectorised (100k requests take a few tens of milliseconds) and
deterministic: the same section and seed give the same trace.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specsim.traces.arrivals import Arrivals, parse_arrivals
from specsim.traces.distributions import Distribution, parse_distribution
from specsim.traces.errors import TraceError
from specsim.traces.prefixes import prefix_blocks
from specsim.traces.schema import BLOCK_TOKENS, Trace, trace_from
from specsim.traces.seeding import stream
from specsim.traces.spec import Section


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
    spec: SyntheticSpec,
    seed: int,
    qps: float | None = None,
    origin: str = "workload.synthetic",
    limit: int | None = None,
) -> Trace:
    """Draw the trace; ``qps`` rescales the arrival rates so requests/s average ``qps``.

    ``limit`` (``workload.max_requests`` when nothing before it drops requests) keeps the
    first ``limit`` requests by arrival, without drawing the rest where the spec allows
    (not with both ``requests`` and ``duration_s``): the same requests as drawing all.
    Before drawing anything, a spec that would not fit in memory is refused in one line
    (``simulator.limits.check_requests``), naming the key and the estimated count.
    """
    # Extreme (valid) numbers overflow to inf: no numpy warning on stderr; the times are
    # checked instead, and the trace is validated like any other.
    with np.errstate(all="ignore"):
        arrivals = spec.arrivals
        turns_mean = spec.sessions.turns.mean() if spec.sessions else 1.0
        if qps is not None:
            mean = arrivals.mean_rate() * turns_mean  # (0 when a tiny rate underflows)
            arrivals = arrivals.scaled(qps / mean if mean > 0 else float("inf"))
            if not np.isfinite(arrivals.rates).all():
                raise TraceError(
                    f"workload.qps: {_num(qps)} req/s is too far from the arrival rates "
                    f"(mean {_num(spec.arrivals.mean_rate())} req/s) to rescale them"
                )
        check_size(spec, arrivals, turns_mean, limit, scaled=qps is not None)
        if spec.sessions is None:
            return _single_turn(spec, arrivals, seed, origin, limit)
        return _multi_turn(spec, arrivals, seed, turns_mean, origin, limit)


def _times(
    arrivals: Arrivals,
    seed: int,
    n: int | None = None,
    duration_s: float | None = None,
    limit: int | None = None,
) -> np.ndarray:
    """The arrival (or session start) times; TraceError when they overflow a float."""
    times = arrivals.generate(stream(seed, "arrival"), n, duration_s, limit)
    if not np.isfinite(times).all():
        raise TraceError(
            "workload.synthetic.arrival: the arrival times overflow (a rate or a period "
            "too close to 0, or a workload.qps too far from the rates); use ordinary sizes"
        )
    return times


def _check_requests(count: float, key: str) -> None:
    """``simulator.limits.check_requests`` for an estimated ``count`` of request rows."""
    from specsim.limits import check_requests  # lazily: traces does not need simulator

    # The trace alone (no iteration log): the engine checks the full run once it is built.
    check_requests(int(count) if count < 1e18 else 10**18, key, record_iterations=False)


def _capped(want: int | None, limit: int | None) -> int | None:
    return want if limit is None or want is None else min(want, limit)


def check_size(
    spec: SyntheticSpec,
    arrivals: Arrivals,
    turns_mean: float,
    limit: int | None = None,
    *,
    scaled: bool = False,
    path: str = "workload.synthetic",
) -> None:
    """Refuse a spec whose request rows would not fit in memory, before drawing them.

    The count is ``requests`` when given, else the peak arrival rate times
    ``duration_s`` (times the mean turns per session with sessions), at most ``limit``.
    """
    peak = arrivals.peak_rate()
    rate_key = "workload.qps" if scaled else f"{path}.arrival"
    both = spec.requests is not None and spec.duration_s is not None
    sess = spec.sessions
    if sess is None:
        arrivals.check_periods(spec.requests, spec.duration_s, f"{path}.arrival")
        if spec.requests is not None:
            count = float(spec.requests if both else _capped(spec.requests, limit) or 0)
            _check_requests(count, f"{path}.requests")
            return
        count = arrivals.expected_count(None, spec.duration_s)
        if limit is not None:
            count = min(count, limit)
        _check_requests(
            count,
            f"{path}.duration_s ({_num(peak)} req/s at peak from {rate_key} "
            f"x {_num(spec.duration_s)} s)",
        )
        return
    if spec.requests is not None:
        want = int(_capped(spec.requests, limit) or 0)
        sessions = _initial_sessions(want, turns_mean)
        arrivals.check_periods(sessions, None, f"{path}.arrival")
        count = max(float(want), sessions * min(turns_mean, float(want)))
        _check_requests(count, f"{path}.requests")
        return
    sessions = arrivals.expected_count(None, spec.duration_s)
    arrivals.check_periods(None, spec.duration_s, f"{path}.arrival")
    if limit is not None:
        sessions = min(sessions, limit)
    turns = turns_mean if limit is None else min(turns_mean, float(limit))
    _check_requests(
        sessions * turns,
        f"{path}.duration_s ({_num(peak)} sessions/s at peak from {rate_key} "
        f"x {_num(spec.duration_s)} s x {_num(turns_mean)} mean turns from "
        f"{path}.sessions.turns)",
    )


def _num(x: float | None) -> str:
    """A number as a user wrote it: 5, 0.25, 1e+09 (never a numpy repr)."""
    return f"{float(x or 0.0):.4g}"


def _initial_sessions(want: int, turns_mean: float) -> int:
    """Sessions drawn first to find ``want`` requests (doubled until enough)."""
    return int(np.ceil(want / turns_mean * 1.2)) + 8


#: Bytes a prefix block id takes in a request's tuple (a pointer and an int object).
_BLOCK_BYTES = 48


def _check_blocks(prompt: np.ndarray, path: str) -> None:
    """Refuse prompts whose prefix block ids (one per 512 tokens) would not fit in memory."""
    blocks = float(np.ceil(np.asarray(prompt, dtype=np.float64) / BLOCK_TOKENS).sum())
    if blocks * _BLOCK_BYTES < 2**28:  # a quarter GB: not worth asking
        return
    from specsim.limits import memory_budget  # lazily: traces does not need simulator

    budget, where = memory_budget()
    need = blocks * _BLOCK_BYTES
    if need > budget:
        raise TraceError(
            f"{path}: {len(prompt):,} prompts of {_num(float(np.mean(prompt)))} tokens on "
            f"average make {blocks:,.0f} prefix block ids (one per {BLOCK_TOKENS} tokens), "
            f"~{need / 1e9:,.3g} GB, more than the {budget / 1e9:,.3g} GB {where}; "
            "lower the prompt lengths (a max: clip) or the request count"
        )


def _single_turn(
    spec: SyntheticSpec, arrivals: Arrivals, seed: int, origin: str, limit: int | None
) -> Trace:
    if spec.duration_s is None:
        times = _times(arrivals, seed, _capped(spec.requests, limit))
    elif spec.requests is None:
        times = _times(arrivals, seed, None, spec.duration_s, limit)
    else:
        times = _times(arrivals, seed, spec.requests, spec.duration_s)
    n = len(times)
    prompt = spec.prompt_tokens.sample(stream(seed, "prompt"), n) + spec.shared_prefix_tokens
    output = spec.output_tokens.sample(stream(seed, "output"), n)
    blocks = None
    if spec.shared_prefix_tokens:
        _check_blocks(prompt, "workload.synthetic.prompt_tokens")
        blocks = prefix_blocks(prompt, np.full(n, -1), spec.shared_prefix_tokens)
    return trace_from(times, prompt, output, origin, prefix_block_ids=blocks)


def _grouped_cumsum(values: np.ndarray, starts: np.ndarray, group: np.ndarray) -> np.ndarray:
    total = np.cumsum(values)
    return total - (total[starts] - values[starts])[group]


def _sessions(
    spec: SyntheticSpec, starts_s: np.ndarray, seed: int, most: int | None = None
) -> dict[str, np.ndarray]:
    """Expand session start times into their turns (all arrays are per request).

    When only the first ``most`` requests are kept and the drawn turns are far more than
    that, each session's turns are capped at ``most``: a turn past a session's
    ``most``-th comes after ``most`` requests, so it could never be kept. (Only then:
    capping shifts the later draws, and an ordinary spec gives the same requests as
    drawing them all.)
    """
    sess = spec.sessions
    assert sess is not None
    n_sessions = len(starts_s)
    turns = sess.turns.sample(stream(seed, "turns"), n_sessions)
    if most is not None and turns.sum(dtype=np.float64) > 8 * most + 1_000_000:
        turns = np.minimum(turns, most)
    # The drawn turns, checked before the per-request arrays exist (a heavy-tailed turns
    # distribution can make far more than its sampled mean suggested).
    _check_requests(float(turns.sum(dtype=np.float64)), "workload.synthetic.sessions.turns")
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
    longest = float(_grouped_cumsum(growth.astype(np.float64), first, group).max(initial=0.0))
    if longest >= 2**53:
        raise TraceError(
            f"workload.synthetic.sessions: prompts grow to ~{longest:.3g} tokens over a "
            "session's turns; lower the token lengths (a max: clip) or the turns"
        )
    think = sess.think_time_s.sample(stream(seed, "think"), total)
    if not np.isfinite(think).all():  # a lognormal with a huge sigma overflows
        raise TraceError(
            "workload.synthetic.sessions.think_time_s: the draws overflow; set a max: clip"
        )
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
    spec: SyntheticSpec,
    arrivals: Arrivals,
    seed: int,
    turns_mean: float,
    origin: str,
    limit: int | None = None,
) -> Trace:
    if spec.duration_s is not None:
        # With a limit, the first `limit` sessions hold the first `limit` requests.
        starts = _times(arrivals, seed, None, spec.duration_s, limit)
        cols = _sessions(spec, starts, seed, limit)
        keep = cols["arrival_s"] < spec.duration_s
    else:
        want = int(_capped(spec.requests, limit) or 0)
        n_sessions = _initial_sessions(want, turns_mean)
        while True:
            starts = _times(arrivals, seed, n_sessions)
            cols = _sessions(spec, starts, seed, want)
            # Complete up to the last session start: no later session can arrive earlier.
            if np.count_nonzero(cols["arrival_s"] <= starts[-1]) >= want:
                break
            n_sessions *= 2
        order = np.argsort(cols["arrival_s"], kind="stable")[:want]
        keep = np.zeros(len(cols["arrival_s"]), dtype=bool)
        keep[order] = True
    cols = {k: v[keep] for k, v in cols.items()}
    _check_blocks(cols["prompt_tokens"], "workload.synthetic.sessions")
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
    return trace_from(arrival, prompt, output, origin, **cols)
