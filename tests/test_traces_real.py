"""The public traces shipped in ../shared/data/traces load with the published shape."""

from __future__ import annotations

from pathlib import Path

import pytest

from specsim.traces.fit import fit_synthetic
from specsim.traces.loaders import load_trace
from specsim.traces.stats import trace_stats
from specsim.traces.workload import build_workload

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"
#: Traces the repository ships (scenarios/data): their tests never skip.
BUNDLED = Path(__file__).resolve().parents[1] / "scenarios" / "data"

# file, format, rows, mean prompt, mean output, mean rate (req/s)
EXPECTED = [
    ("AzureLLMInferenceTrace_conv.csv", "azure", 19_366, 1154.7, 211.13, 5.530),
    ("AzureLLMInferenceTrace_code.csv", "azure", 8_819, 2047.8, 27.88, 2.567),
    ("mooncake_conversation_trace.jsonl", "mooncake", 12_031, 12035.1, 342.62, 3.401),
    ("azure_conv_poisson_qps2_n1000.csv", "vidur", 1_000, 1165.2, 219.96, 2.032),
]


def _file(name: str) -> Path:
    if (BUNDLED / name).is_file():
        return BUNDLED / name
    path = DATA / name
    if not path.is_file():
        pytest.skip(
            f"real trace {path} is absent (a fresh clone has no ../shared/data; see README.md, "
            '"Public traces: where to download them")'
        )
    return path


def test_the_bundled_trace_is_read_from_the_repository():
    """scenarios/data's trace needs no ../shared: its tests run in a fresh clone too."""
    assert _file("azure_conv_poisson_qps2_n1000.csv") == (
        BUNDLED / "azure_conv_poisson_qps2_n1000.csv"
    )


@pytest.mark.parametrize(("name", "fmt", "rows", "prompt", "output", "rate"), EXPECTED)
def test_real_trace_loads_with_published_shape(name, fmt, rows, prompt, output, rate):
    df = load_trace(_file(name))
    assert df.attrs["format"] == fmt
    assert len(df) == rows
    assert df["prompt_tokens"].mean() == pytest.approx(prompt, rel=1e-3)
    assert df["output_tokens"].mean() == pytest.approx(output, rel=1e-3)
    stats = trace_stats(df)
    assert stats["mean_rate"] == pytest.approx(rate, rel=1e-2)
    assert (df["request_id"].to_numpy() == range(rows)).all()
    assert df["arrival_s"].is_monotonic_increasing


def test_azure_traces_span_one_hour_from_zero():
    for name in ("AzureLLMInferenceTrace_conv.csv", "AzureLLMInferenceTrace_code.csv"):
        df = load_trace(_file(name))
        assert df["arrival_s"].iloc[0] == 0.0
        assert 3400 < df["arrival_s"].iloc[-1] < 3600


def test_mooncake_prefix_reuse_matches_readme():
    df = load_trace(_file("mooncake_conversation_trace.jsonl"))
    stats = trace_stats(df)
    assert stats["prefix_reuse_fraction"] == pytest.approx(0.37, abs=0.01)
    # one hash id per 512-token block
    blocks = df["prefix_block_ids"].map(len)
    assert (blocks == (df["prompt_tokens"] + 511) // 512).all()


@pytest.mark.parametrize(
    "name",
    [
        "AzureLLMInferenceTrace_conv.csv",
        "AzureLLMInferenceTrace_code.csv",
        "mooncake_conversation_trace.jsonl",
    ],
)
@pytest.mark.parametrize("lengths", ["empirical", "lognormal"])
def test_fitted_generator_reproduces_rate_and_medians(name, lengths, tmp_path):
    df = load_trace(_file(name))
    want = trace_stats(df)
    section = fit_synthetic(df, lengths=lengths)
    for seed in (0, 1):
        got = trace_stats(build_workload(section, tmp_path, seed))
        assert got["requests"] == want["requests"]
        assert got["mean_rate"] == pytest.approx(want["mean_rate"], rel=0.05)
        for column in ("prompt_tokens", "output_tokens"):
            assert got[column]["p50"] == pytest.approx(want[column]["p50"], rel=0.05)


def test_fitted_curve_reproduces_rate_over_time(tmp_path):
    df = load_trace(_file("AzureLLMInferenceTrace_conv.csv"))
    want = trace_stats(df)
    section = fit_synthetic(df, arrival="curve")
    got = trace_stats(build_workload(section, tmp_path, 3))
    assert got["mean_rate"] == pytest.approx(want["mean_rate"], rel=0.05)
    assert got["interarrival_cv"] == pytest.approx(want["interarrival_cv"], rel=0.1)
    # the busy half hour stays busy
    assert got["peak_rate"] == pytest.approx(want["peak_rate"], rel=0.15)
