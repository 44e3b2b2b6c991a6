"""Synthetic generators: each arrival process, length distributions, sessions, determinism."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsim.traces.errors import TraceError
from specsim.traces.schema import BLOCK_TOKENS
from specsim.traces.stats import interarrival_cv, rate_over_time, trace_stats
from specsim.traces.transforms import mean_rate
from specsim.traces.workload import build_workload


def synthetic(
    arrival: dict, n: int | None = 100_000, duration_s: float | None = None, **extra
) -> dict:
    section: dict = {"arrival": arrival, "prompt_tokens": 100, "output_tokens": 10, **extra}
    if n is not None:
        section["requests"] = n
    if duration_s is not None:
        section["duration_s"] = duration_s
    return {"synthetic": section}


def build(section: dict, seed: int = 7, base_dir: Path = Path(".")) -> pd.DataFrame:
    return build_workload(section, base_dir, seed)


def test_poisson_rate_and_cv():
    df = build(synthetic({"process": "poisson", "rate": 8.0}))
    assert len(df) == 100_000
    assert mean_rate(df) == pytest.approx(8.0, rel=0.02)
    assert interarrival_cv(df) == pytest.approx(1.0, rel=0.02)


@pytest.mark.parametrize("cv", [0.5, 2.0, 4.0])
def test_gamma_rate_and_cv(cv):
    df = build(synthetic({"process": "gamma", "rate": 3.0, "cv": cv}))
    assert mean_rate(df) == pytest.approx(3.0, rel=0.03 * max(cv, 1))
    assert interarrival_cv(df) == pytest.approx(cv, rel=0.05)


def test_duration_mode_counts_match_rate():
    df = build(synthetic({"process": "poisson", "rate": 20.0}, n=None, duration_s=2000))
    assert len(df) == pytest.approx(40_000, rel=0.03)
    assert df["arrival_s"].max() < 2000


def test_requests_and_duration_together_condition_the_count():
    df = build(synthetic({"process": "gamma", "rate": 2.0, "cv": 8.0}, n=5000, duration_s=2500))
    assert len(df) == 5000
    assert df["arrival_s"].max() < 2500
    assert mean_rate(df) == pytest.approx(2.0, rel=0.05)
    assert interarrival_cv(df) == pytest.approx(8.0, rel=0.25)


def test_diurnal_sine_follows_the_curve():
    period = 10_000.0
    df = build(
        synthetic(
            {
                "process": "diurnal",
                "rate": 10.0,
                "amplitude": 0.8,
                "period_s": period,
                "peak_s": 2500,
            },
            n=None,
            duration_s=period,
        )
    )
    assert len(df) == pytest.approx(100_000, rel=0.02)
    rot = rate_over_time(df, window_s=500)
    centre = rot["start_s"] + 250
    expected = 10.0 * (1 + 0.8 * np.cos(2 * np.pi * (centre - 2500) / period))
    assert np.allclose(rot["rate"], expected, rtol=0.1, atol=0.4)


def test_diurnal_curve_with_a_quiet_slice_and_rate_rescaling():
    df = build(
        synthetic(
            {"process": "diurnal", "curve": [2, 0, 6], "period_s": 300, "rate": 8.0}, n=60_000
        )
    )
    slot = (df["arrival_s"].to_numpy() % 300) // 100
    assert not np.any(slot == 1)
    share = np.bincount(slot.astype(int), minlength=3) / len(df)
    assert share[2] == pytest.approx(0.75, abs=0.01)
    assert mean_rate(df) == pytest.approx(8.0, rel=0.03)


def test_onoff_exponential_periods_are_bursty():
    df = build(synthetic({"process": "onoff", "rate": 20.0, "on_s": 5, "off_s": 15}, n=100_000))
    assert mean_rate(df) == pytest.approx(5.0, rel=0.05)
    assert interarrival_cv(df) > 2.0


def test_onoff_fixed_periods_are_silent_when_off():
    df = build(
        synthetic(
            {"process": "onoff", "rate": 10.0, "on_s": 2, "off_s": 8, "periods": "fixed"}, n=50_000
        )
    )
    phase = df["arrival_s"].to_numpy() % 10
    assert phase.max() < 2.0 + 1e-9
    assert mean_rate(df) == pytest.approx(2.0, rel=0.03)
    with_background = build(
        synthetic(
            {
                "process": "onoff",
                "rate": 10.0,
                "off_rate": 1.0,
                "on_s": 2,
                "off_s": 8,
                "periods": "fixed",
            },
            n=50_000,
        )
    )
    assert mean_rate(with_background) == pytest.approx(2.8, rel=0.03)


def test_hundred_thousand_requests_generate():
    """Vectorised generation of a large trace (its speed is a benchmark, not asserted)."""
    section = synthetic(
        {"process": "gamma", "rate": 50.0, "cv": 2.0},
        prompt_tokens={"distribution": "lognormal", "median": 1000, "sigma": 1.0},
        output_tokens={"distribution": "lognormal", "mean": 200, "sigma": 0.8},
    )
    df = build(section)
    assert len(df) == 100_000
    assert df["arrival_s"].is_monotonic_increasing


def lengths(spec, n=40_000, tmp_path: Path = Path(".")):
    section = synthetic({"process": "poisson", "rate": 1.0}, n=n, prompt_tokens=spec)
    return build_workload(section, tmp_path, 3)["prompt_tokens"].to_numpy()


def test_length_distributions():
    assert (lengths(512) == 512).all()
    assert (lengths({"distribution": "fixed", "value": 64}) == 64).all()
    median = np.median(lengths({"distribution": "lognormal", "median": 800, "sigma": 1.0}))
    assert median == pytest.approx(800, rel=0.03)
    mean = lengths({"distribution": "lognormal", "mean": 800, "sigma": 0.5}).mean()
    assert mean == pytest.approx(800, rel=0.03)
    clipped = lengths(
        {"distribution": "lognormal", "median": 800, "sigma": 2.0, "min": 50, "max": 4096}
    )
    assert clipped.min() >= 50 and clipped.max() <= 4096
    uniform = lengths({"distribution": "uniform", "low": 10, "high": 20})
    assert uniform.min() >= 10 and uniform.max() <= 20
    assert lengths({"distribution": "exponential", "mean": 300}).mean() == pytest.approx(
        300, rel=0.03
    )
    assert lengths({"distribution": "empirical", "values": [5, 7]}).tolist().count(
        5
    ) == pytest.approx(20_000, rel=0.05)
    quant = lengths({"distribution": "empirical", "quantiles": [10, 100, 1000]})
    assert np.median(quant) == pytest.approx(100, rel=0.05)


def test_empirical_lengths_from_a_trace_file(tmp_path):
    rows = "".join(f"{i * 0.1:.1f},{100 + i % 50},{1 + i % 7}\n" for i in range(500))
    (tmp_path / "lens.csv").write_text("arrival_s,prompt_tokens,output_tokens\n" + rows)
    section = synthetic(
        {"process": "poisson", "rate": 1.0},
        n=20_000,
        prompt_tokens={"distribution": "empirical", "trace": "lens.csv", "column": "prompt"},
        output_tokens={"distribution": "empirical", "trace": "lens.csv", "column": "output"},
    )
    df = build_workload(section, tmp_path, 1)
    assert set(df["prompt_tokens"].unique()) <= set(range(100, 150))
    assert df["output_tokens"].between(1, 7).all()
    assert np.median(df["prompt_tokens"]) == pytest.approx(124.5, abs=2)


def session_section(**extra) -> dict:
    return {
        "synthetic": {
            "arrival": {"process": "poisson", "rate": 1.0},
            "requests": 5000,
            "prompt_tokens": {"distribution": "lognormal", "median": 700, "sigma": 0.6},
            "output_tokens": {"distribution": "lognormal", "median": 300, "sigma": 0.5},
            "sessions": {
                "turns": {"distribution": "geometric", "mean": 4},
                "think_time_s": {"distribution": "exponential", "mean": 20},
                "followup_tokens": {"distribution": "lognormal", "median": 120, "sigma": 0.5},
            },
            **extra,
        }
    }


def test_sessions_grow_and_extend_the_previous_prefix():
    df = build(session_section())
    assert len(df) == 5000
    assert df["session_id"].min() >= 0
    checked = 0
    for _, turns in df.groupby("session_id"):
        turns = turns.sort_values("turn")
        assert turns["turn"].tolist() == list(range(len(turns)))
        assert turns["arrival_s"].is_monotonic_increasing
        rows = list(turns.itertuples())
        for prev, cur in zip(rows, rows[1:], strict=False):
            assert cur.prompt_tokens > prev.prompt_tokens + prev.output_tokens
            full = prev.prompt_tokens // BLOCK_TOKENS
            assert cur.prefix_block_ids[:full] == prev.prefix_block_ids[:full]
            assert len(cur.prefix_block_ids) == -(-cur.prompt_tokens // BLOCK_TOKENS)
            checked += 1
    assert checked > 1000
    assert trace_stats(df)["prefix_reuse_fraction"] > 0.3
    # sessions never share blocks with each other (no shared system prompt here)
    first_blocks = {b[0] for b in df.loc[df["turn"] == 0, "prefix_block_ids"] if b}
    assert len(first_blocks) == (df["turn"] == 0).sum()


def test_shared_system_prompt_blocks():
    section = synthetic({"process": "poisson", "rate": 1.0}, n=1000, shared_prefix_tokens=1100)
    df = build(section)
    assert (df["prompt_tokens"] == 1200).all()
    assert all(b[:2] == (0, 1) for b in df["prefix_block_ids"])
    assert len({b[2] for b in df["prefix_block_ids"]}) == 1000


def test_session_duration_mode_and_qps_targets_requests_per_second():
    section = session_section()
    del section["synthetic"]["requests"]
    section["synthetic"]["duration_s"] = 20_000
    section["qps"] = 3.0
    df = build(section)
    assert mean_rate(df) == pytest.approx(3.0, rel=0.08)
    assert df["arrival_s"].max() < 20_000


def test_same_seed_same_trace_other_seed_differs():
    for section in (
        session_section(),
        synthetic({"process": "onoff", "rate": 5, "on_s": 3, "off_s": 3}, n=3000),
    ):
        a, b = build(section, seed=11), build(section, seed=11)
        pd.testing.assert_frame_equal(a, b)
        c = build(section, seed=12)
        assert not a["arrival_s"].equals(c["arrival_s"])


def test_workload_seed_overrides_the_scenario_seed():
    section = synthetic({"process": "poisson", "rate": 1.0}, n=100, seed=5)
    pd.testing.assert_frame_equal(build(section, seed=1), build(section, seed=2))


@pytest.mark.parametrize(
    ("arrival", "message"),
    [
        (
            {"process": "poisson", "rate": -1},
            "workload.synthetic.arrival.rate: expected a number greater than 0, got -1",
        ),
        (
            {"process": "poisson", "rate": "fast"},
            "workload.synthetic.arrival.rate: expected a number, got 'fast'",
        ),
        (
            {"process": "gamma", "rate": 1},
            "workload.synthetic.arrival.cv: missing; expected a positive number",
        ),
        (
            {"process": "weibull", "rate": 1},
            "workload.synthetic.arrival.process: expected one of poisson, gamma, diurnal, onoff, got 'weibull'",
        ),
        ({"process": "poisson", "rate": 1, "cv": 2}, "workload.synthetic.arrival.cv: unknown key"),
        (
            {"process": "diurnal", "rate": 1, "amplitude": 2},
            "workload.synthetic.arrival.amplitude: expected a number at most 1, got 2",
        ),
        (
            {"process": "diurnal", "curve": [0, 0]},
            "workload.synthetic.arrival.curve: expected at least one positive rate",
        ),
        ({"process": "onoff", "rate": 1, "on_s": 1}, "workload.synthetic.arrival.off_s: missing"),
        (
            {"process": "poisson", "rate": True},
            "workload.synthetic.arrival.rate: expected a number, got True",
        ),
    ],
)
def test_arrival_spec_errors_name_the_key(arrival, message):
    with pytest.raises(TraceError) as excinfo:
        build(synthetic(arrival, n=10))
    assert str(excinfo.value).startswith(message)


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        (
            {"distribution": "lognormal", "sigma": 1},
            "workload.synthetic.prompt_tokens: lognormal needs exactly one of mean or median",
        ),
        (
            {"distribution": "lognormal", "median": 5, "sigma": 1, "mean": 3},
            "workload.synthetic.prompt_tokens: lognormal needs exactly one",
        ),
        (
            {"distribution": "fixed", "value": 0},
            "workload.synthetic.prompt_tokens.value: expected a number at least 1, got 0",
        ),
        (
            {"distribution": "fixed", "value": 5, "sigma": 1},
            "workload.synthetic.prompt_tokens.sigma: unknown key",
        ),
        (
            {"distribution": "empirical", "trace": "nope.csv", "column": "prompt"},
            "workload.synthetic.prompt_tokens.trace: no such file",
        ),
        (
            {"distribution": "uniform", "low": 10, "high": 5},
            "workload.synthetic.prompt_tokens.high: expected a number >= low",
        ),
        (-3, "workload.synthetic.prompt_tokens: expected a number >= 1, got -3"),
        ({"value": 3}, "workload.synthetic.prompt_tokens.distribution: missing"),
    ],
)
def test_length_spec_errors_name_the_key(prompt, message, tmp_path):
    section = synthetic({"process": "poisson", "rate": 1}, n=10, prompt_tokens=prompt)
    with pytest.raises(TraceError) as excinfo:
        build_workload(section, tmp_path, 0)
    assert str(excinfo.value).startswith(message), str(excinfo.value)


def test_synthetic_section_errors():
    with pytest.raises(TraceError, match="workload.synthetic: set requests, duration_s, or both"):
        build(
            {
                "synthetic": {
                    "arrival": {"process": "poisson", "rate": 1},
                    "prompt_tokens": 1,
                    "output_tokens": 1,
                }
            }
        )
    with pytest.raises(
        TraceError, match=r"workload.synthetic.arival: unknown key \(did you mean 'arrival'\?"
    ):
        build(
            {
                "synthetic": {
                    "arrival": {"process": "poisson", "rate": 1},
                    "arival": 1,
                    "requests": 1,
                    "prompt_tokens": 1,
                    "output_tokens": 1,
                }
            }
        )
    with pytest.raises(TraceError, match="workload.synthetic.sessions.turns: missing"):
        build(synthetic({"process": "poisson", "rate": 1}, n=10, sessions={"think_time_s": 3}))
