"""build_workload on trace files: each transformation, classes, and key-path errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsim.traces.errors import TraceError
from specsim.traces.transforms import mean_rate
from specsim.traces.workload import build_workload, parse_workload


@pytest.fixture()
def trace_dir(tmp_path: Path) -> Path:
    """A 100-request generic trace (1 req/s) and a small BurstGPT file."""
    rows = [
        {
            "arrival_s": float(i),
            "prompt_tokens": 100 + 10 * i,
            "output_tokens": 50,
            "session_id": i // 4,
            "turn": i % 4,
            "prefix_block_ids": [i, i + 1],
        }
        for i in range(100)
    ]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    burst = "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    burst += "".join(
        f"{i},s{i % 3},1.0,{'GPT-4' if i % 2 else 'ChatGPT'},{100 + i},{20 + i},0,Conversation log\n"
        for i in range(20)
    )
    (tmp_path / "burst.csv").write_text(burst)
    return tmp_path


def build(section: dict, base: Path, seed: int = 0, max_context: int | None = None) -> pd.DataFrame:
    return build_workload(section, base, seed, max_context=max_context)


def test_plain_trace(trace_dir):
    df = build({"trace": {"path": "t.jsonl"}}, trace_dir)
    assert len(df) == 100
    assert df.attrs["format"] == "generic"
    assert df.attrs["capped_requests"] == 0
    assert df.attrs["workload_log"][0].startswith("trace ")


def test_window_keeps_and_rebases(trace_dir):
    df = build({"trace": {"path": "t.jsonl"}, "start_s": 10, "end_s": 20}, trace_dir)
    assert df["arrival_s"].tolist() == [float(i) for i in range(10)]
    assert df["prompt_tokens"].iloc[0] == 200
    assert df["request_id"].tolist() == list(range(10))


def test_transform_keys_may_sit_inside_the_trace_mapping(trace_dir):
    inside = build({"trace": {"path": "t.jsonl", "start_s": 10, "end_s": 20}}, trace_dir)
    outside = build({"trace": {"path": "t.jsonl"}, "start_s": 10, "end_s": 20}, trace_dir)
    pd.testing.assert_frame_equal(inside, outside)
    with pytest.raises(
        TraceError, match="workload.trace.start_s: also set as workload.start_s; set it once"
    ):
        build({"trace": {"path": "t.jsonl", "start_s": 1}, "start_s": 2}, trace_dir)


def test_speedup_and_qps(trace_dir):
    fast = build({"trace": {"path": "t.jsonl"}, "speedup": 4}, trace_dir)
    assert fast["arrival_s"].iloc[-1] == pytest.approx(99 / 4)
    target = build({"trace": {"path": "t.jsonl"}, "qps": 2.5}, trace_dir)
    assert mean_rate(target) == pytest.approx(2.5)
    with pytest.raises(TraceError, match="set either speedup or qps"):
        build({"trace": {"path": "t.jsonl"}, "speedup": 2, "qps": 1}, trace_dir)


def test_sampling_keeps_whole_sessions_and_is_seeded(trace_dir):
    section = {"trace": {"path": "t.jsonl"}, "sample": {"fraction": 0.5}}
    a = build(section, trace_dir, seed=1)
    assert len(a) == 52  # 13 of 25 sessions, 4 turns each
    assert (a.groupby("session_id").size() == 4).all()
    pd.testing.assert_frame_equal(a, build(section, trace_dir, seed=1))
    assert not a["session_id"].equals(build(section, trace_dir, seed=2)["session_id"])
    n = build({"trace": {"path": "t.jsonl"}, "sample": {"n": 5}}, trace_dir)
    assert n["session_id"].nunique() == 5
    assert n["arrival_s"].is_monotonic_increasing


def test_max_requests(trace_dir):
    df = build({"trace": {"path": "t.jsonl"}, "max_requests": 7}, trace_dir)
    assert df["arrival_s"].tolist() == [float(i) for i in range(7)]


def test_context_cap_truncates_and_counts(trace_dir):
    df = build({"trace": {"path": "t.jsonl"}}, trace_dir, max_context=600)
    over = 100 + 10 * np.arange(100) + 50 > 600
    assert df.attrs["capped_requests"] == int(over.sum())
    assert (df["prompt_tokens"] + df["output_tokens"] <= 600).all()
    assert df["prompt_tokens"].iloc[-1] == 550 and df["output_tokens"].iloc[-1] == 50
    # a cut prompt keeps its full leading blocks and gets a fresh id for the cut one
    blocks = df["prefix_block_ids"].iloc[-1]
    assert blocks[0] == 99 and len(blocks) == 2 and blocks[1] > 100
    lower = build({"trace": {"path": "t.jsonl"}, "max_context": 300}, trace_dir, max_context=600)
    assert (lower["prompt_tokens"] + lower["output_tokens"] <= 300).all()


def test_context_cap_drop_and_error(trace_dir):
    df = build(
        {"trace": {"path": "t.jsonl"}, "context_overflow": "drop"}, trace_dir, max_context=600
    )
    assert len(df) == 46 and df.attrs["dropped_requests"] == 54
    with pytest.raises(
        TraceError, match=r"workload.max_context: 54 requests have prompt \+ output above 600"
    ):
        build(
            {"trace": {"path": "t.jsonl"}, "context_overflow": "error"}, trace_dir, max_context=600
        )


def test_context_cap_output_longer_than_context(trace_dir):
    df = build({"trace": {"path": "t.jsonl"}}, trace_dir, max_context=40)
    assert (df["output_tokens"] == 39).all() and (df["prompt_tokens"] == 1).all()


def test_fixed_class_and_class_mix(trace_dir):
    df = build({"trace": {"path": "t.jsonl"}, "class": "code"}, trace_dir)
    assert (df["workload_class"] == "code").all()
    mixed = build(
        {"trace": {"path": "t.jsonl"}, "class_mix": {"code": 1, "chat": 3}}, trace_dir, seed=4
    )
    assert set(mixed["workload_class"]) == {"code", "chat"}
    assert (mixed.groupby("session_id")["workload_class"].nunique() == 1).all()


def test_class_mix_proportions_on_a_large_synthetic_trace():
    section = {
        "synthetic": {
            "arrival": {"process": "poisson", "rate": 5},
            "requests": 20_000,
            "prompt_tokens": 10,
            "output_tokens": 10,
        },
        "class_mix": {"code": 0.3, "chat": 0.7},
    }
    share = build(section, Path("."))["workload_class"].value_counts(normalize=True)
    assert share["code"] == pytest.approx(0.3, abs=0.015)


def test_class_column_with_and_without_map(trace_dir):
    raw = build({"trace": {"path": "burst.csv", "class_column": "Model"}}, trace_dir)
    assert raw["workload_class"].tolist()[:2] == ["ChatGPT", "GPT-4"]
    assert "Model" not in raw.columns
    mapped = build(
        {
            "trace": {
                "path": "burst.csv",
                "class_column": "Model",
                "class_map": {"ChatGPT": "chat", "GPT-4": "code"},
            }
        },
        trace_dir,
    )
    assert set(mapped["workload_class"]) == {"chat", "code"}
    with pytest.raises(TraceError, match="value 'GPT-4' of column 'Model' is not in class_map"):
        build(
            {
                "trace": {
                    "path": "burst.csv",
                    "class_column": "Model",
                    "class_map": {"ChatGPT": "chat"},
                }
            },
            trace_dir,
        )
    with pytest.raises(
        TraceError, match="burst.csv line 1: no column 'Tier' to take workload classes from"
    ):
        build({"trace": {"path": "burst.csv", "class_column": "Tier"}}, trace_dir)
    with pytest.raises(TraceError, match="set only one of class, class_mix, class_column"):
        build({"trace": {"path": "burst.csv", "class_column": "Model"}, "class": "x"}, trace_dir)


def test_temperature_and_slo_tier_defaults(trace_dir):
    df = build({"trace": {"path": "t.jsonl"}, "temperature": 0.7, "slo_tier": "batch"}, trace_dir)
    assert (df["temperature"] == 0.7).all() and (df["slo_tier"] == "batch").all()
    assert build({"trace": {"path": "t.jsonl"}}, trace_dir)["temperature"].isna().all()


def test_burstgpt_keep_failed_from_the_scenario(trace_dir):
    text = "Timestamp,Request tokens,Response tokens,Log Type\n0,10,0,Conversation log\n1,10,5,Conversation log\n"
    (trace_dir / "f.csv").write_text(text)
    assert len(build({"trace": {"path": "f.csv"}}, trace_dir)) == 1
    kept = build({"trace": {"path": "f.csv", "keep_failed": True, "format": "burstgpt"}}, trace_dir)
    assert kept["output_tokens"].tolist() == [1, 5]


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({}, "workload: expected exactly one of trace or synthetic, got neither"),
        (
            {"trace": {"path": "t.jsonl"}, "synthetic": {}},
            "workload: expected exactly one of trace or synthetic, got trace and synthetic",
        ),
        ({"trace": {"path": "missing.csv"}}, "workload.trace.path: no such file"),
        ({"trace": {}}, "workload.trace.path: missing; expected a file path"),
        (
            {"trace": {"path": "t.jsonl", "format": "csv"}},
            "workload.trace.format: expected one of auto, azure",
        ),
        (
            {"trace": {"path": "t.jsonl"}, "speedup": -2},
            "workload.speedup: expected a number greater than 0, got -2",
        ),
        (
            {"trace": {"path": "t.jsonl"}, "speedup": "2x"},
            "workload.speedup: expected a number, got '2x'",
        ),
        (
            {"trace": {"path": "t.jsonl"}, "sped_up": 2},
            "workload.sped_up: unknown key (did you mean 'speedup'?",
        ),
        (
            {"trace": {"path": "t.jsonl", "keep_failed": "yes"}},
            "workload.trace.keep_failed: expected true or false, got 'yes'",
        ),
        (
            {"trace": {"path": "t.jsonl"}, "sample": {"fraction": 1.5}},
            "workload.sample.fraction: expected a number at most 1, got 1.5",
        ),
        (
            {"trace": {"path": "t.jsonl"}, "sample": {}},
            "workload.sample: set exactly one of fraction or n",
        ),
        (
            {"trace": {"path": "t.jsonl"}, "max_requests": 2.5},
            "workload.max_requests: expected an integer, got 2.5",
        ),
        (
            {"trace": {"path": "t.jsonl"}, "start_s": 5, "end_s": 2},
            "workload.end_s: expected a time after start_s (5), got 2",
        ),
        (
            {"trace": {"path": "t.jsonl"}, "class_mix": {"code": -1}},
            "workload.class_mix.code: expected a weight >= 0, got -1",
        ),
        (
            {"trace": {"path": "t.jsonl"}, "context_overflow": "wrap"},
            "workload.context_overflow: expected one of truncate, drop, error, got 'wrap'",
        ),
        ({"trace": {"path": "t.jsonl"}, "start_s": 1000}, "workload: no requests left"),
        (
            {"trace": {"path": "t.jsonl"}, "seed": -1},
            "workload.seed: expected an integer at least 0, got -1",
        ),
        ({"trace": "t.jsonl"}, "workload.trace: expected a mapping of keys, got 't.jsonl'"),
    ],
)
def test_section_errors_name_the_key_path(trace_dir, section, message):
    with pytest.raises(TraceError) as excinfo:
        build(section, trace_dir)
    text = str(excinfo.value)
    assert "\n" not in text
    assert text.startswith(message), text


def test_parse_workload_checks_without_loading(trace_dir):
    plan = parse_workload({"trace": {"path": "t.jsonl"}, "speedup": 2}, trace_dir, 3)
    assert plan.kind == "trace" and plan.speedup == 2 and plan.seed == 3
