"""Size bounds before allocating, plain numbers in messages, and the bugs the trace fuzz
found (issue 7): each refusal is one line, within a second, naming the key."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import numpy as np
import pytest

from specsim.errors import ScenarioError
from specsim.traces.errors import TraceError, show
from specsim.traces.loaders import load_trace
from specsim.traces.workload import build_workload

LENGTHS = {"prompt_tokens": 100, "output_tokens": 50}


@pytest.fixture(autouse=True)
def _one_gb(monkeypatch):
    monkeypatch.setenv("SPECSIM_MEMORY_LIMIT_GB", "1")


def _refused(section: dict, match: str, error: type = ScenarioError) -> str:
    t0 = time.perf_counter()
    with pytest.raises(error) as info:
        build_workload(section, Path("."), 0)
    assert time.perf_counter() - t0 < 1.0
    message = str(info.value)
    assert match in message, message
    assert len(message.splitlines()) == 1
    return message


def _synthetic(arrival: dict, **keys) -> dict:
    return {"synthetic": {"arrival": arrival, **LENGTHS, **keys}}


def test_a_huge_rate_is_refused_before_drawing():
    message = _refused(
        _synthetic({"process": "poisson", "rate": 1e9}, duration_s=3600),
        "workload.synthetic.duration_s (1e+09 req/s at peak from workload.synthetic.arrival "
        "x 3600 s): 3,600,000,000,000 requests need",
    )
    assert "SPECSIM_MEMORY_LIMIT_GB" in message


def test_a_huge_request_count_is_refused_at_once():
    _refused(
        _synthetic({"process": "poisson", "rate": 5}, requests=100_000_000),
        "workload.synthetic.requests: 100,000,000 requests need",
    )


@pytest.mark.parametrize(
    ("arrival", "peak"),
    [
        ({"process": "gamma", "rate": 1e6, "cv": 3}, "1e+06"),
        ({"process": "diurnal", "rate": 1e6, "amplitude": 1.0}, "2e+06"),  # peak, not mean
        ({"process": "diurnal", "curve": [1, 1e6], "period_s": 60}, "1e+06"),
        ({"process": "onoff", "rate": 1e6, "on_s": 1, "off_s": 1000}, "1e+06"),
        ({"process": "onoff", "rate": 1e6, "on_s": 1, "off_s": 9, "periods": "fixed"}, "1e+06"),
    ],
)
def test_every_process_is_bounded_by_its_peak_rate(arrival, peak):
    _refused(_synthetic(arrival, duration_s=3600), f"({peak} req/s at peak from")


def test_qps_scales_the_estimate():
    _refused(
        {**_synthetic({"process": "poisson", "rate": 1}, duration_s=3600), "qps": 1e7},
        "from workload.qps x 3600 s",
    )


def test_sessions_multiply_the_count():
    _refused(
        _synthetic(
            {"process": "poisson", "rate": 100},
            duration_s=3600,
            sessions={"turns": 1e6},
        ),
        "x 1e+06 mean turns from workload.synthetic.sessions.turns",
    )


def test_a_few_sessions_of_very_many_turns_keep_only_what_is_needed():
    section = _synthetic({"process": "poisson", "rate": 1}, requests=5, sessions={"turns": 1e12})
    df = build_workload(section, Path("."), 0)
    assert len(df) == 5 and (df["session_id"] == 0).all()


def test_prompts_growing_past_any_size_are_refused():
    section = _synthetic(
        {"process": "poisson", "rate": 1}, requests=100, sessions={"turns": 1e9}
    )
    section["synthetic"]["prompt_tokens"] = 1e15
    _refused(section, "workload.synthetic.sessions: prompts grow to", TraceError)


def test_think_times_that_overflow_are_refused():
    # (the requests-mode loop once doubled its sessions forever on NaN arrival times)
    section = _synthetic(
        {"process": "poisson", "rate": 1},
        requests=50,
        sessions={"turns": 5, "think_time_s": {"distribution": "lognormal", "median": 1e300,
                                               "sigma": 10}},
    )
    _refused(section, "workload.synthetic.sessions.think_time_s: the draws overflow", TraceError)


def test_prefix_blocks_are_bounded():
    section = _synthetic(
        {"process": "poisson", "rate": 10}, requests=100_000, shared_prefix_tokens=10**8
    )
    _refused(section, "prefix block ids", TraceError)


def test_too_many_random_periods_are_refused():
    _refused(
        _synthetic({"process": "onoff", "rate": 1, "on_s": 1e-9, "off_s": 1e-9}, duration_s=3600),
        "workload.synthetic.arrival: on_s + off_s = 2e-09 s makes ~1.8e+12 random on/off",
        TraceError,
    )


def test_max_requests_stops_the_generator():
    section = {**_synthetic({"process": "poisson", "rate": 1e9}, duration_s=3600),
               "max_requests": 1000}
    t0 = time.perf_counter()
    df = build_workload(section, Path("."), 0)
    assert len(df) == 1000 and time.perf_counter() - t0 < 2.0
    assert df.attrs["workload_log"][0].endswith("(the first 1000: max_requests)")


def _canonical(blocks) -> list[tuple[int, ...]]:
    ids: dict[int, int] = {}
    return [tuple(ids.setdefault(b, len(ids)) for b in row) for row in blocks]


@pytest.mark.parametrize(
    "arrival",
    [
        {"process": "gamma", "rate": 50, "cv": 3},
        {"process": "onoff", "rate": 80, "on_s": 2, "off_s": 3, "off_rate": 5},
        {"process": "diurnal", "curve": [1, 0, 100], "period_s": 30},
    ],
)
@pytest.mark.parametrize("source", [{"duration_s": 60}, {"requests": 2000}])
@pytest.mark.parametrize("sessions", [False, True])
def test_max_requests_keeps_the_same_requests_as_drawing_all(arrival, source, sessions):
    syn = {
        "arrival": arrival,
        **source,
        "prompt_tokens": {"distribution": "lognormal", "median": 300, "sigma": 1},
        "output_tokens": {"distribution": "lognormal", "median": 100, "sigma": 1},
        "shared_prefix_tokens": 600,
    }
    if sessions:
        syn["sessions"] = {"turns": {"distribution": "geometric", "mean": 4},
                           "think_time_s": {"distribution": "exponential", "mean": 5}}
    full = build_workload({"synthetic": syn}, Path("."), 3)
    for limit in (1, 7, 500):
        capped = build_workload({"synthetic": syn, "max_requests": limit}, Path("."), 3)
        head = full.iloc[:limit].reset_index(drop=True)
        columns = [c for c in head.columns if c != "prefix_block_ids"]
        assert capped[columns].equals(head[columns])
        # block ids are labels: the same sharing, possibly other numbers
        assert _canonical(capped["prefix_block_ids"]) == _canonical(head["prefix_block_ids"])


# --- plain numbers in messages ------------------------------------------------------


def test_show_prints_numbers_plainly():
    assert show(np.float64(-5.0)) == "-5.0"
    assert show(np.int64(-5)) == "-5"
    assert show(-5) == "-5"
    assert show(float("nan")) == "nan"
    assert show("a\u2028b") == "'a\\u2028b'"
    assert show(10**5000) == "~1e5000"
    assert len(show("x" * 1000)) == 80


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("arrival_s,prompt_tokens,output_tokens\n-5,3,4\n",
         "line 2: arrival_s: expected a time >= 0, got -5.0"),
        ("arrived_at,num_prefill_tokens,num_decode_tokens\n-5,3,4\n",
         "line 2: arrived_at: expected a time >= 0, got -5.0"),
        ("Timestamp,Request tokens,Response tokens\n-0.5,3,4\n",
         "line 2: Timestamp: expected a time >= 0, got -0.5"),
        ('{"timestamp": -5000, "input_length": 3, "output_length": 4}\n',
         "line 1: timestamp: expected a time >= 0, got -5.0"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:05,3,4\n"
         "2023-11-16 18:00:00,3,4\n",
         "line 3: TIMESTAMP: timestamps go backwards (earlier than line 2)"),
    ],
)
def test_negative_times_are_plain_numbers(tmp_path, text, message):
    path = tmp_path / "t.txt"
    path.write_text(text)
    with pytest.raises(TraceError) as info:
        load_trace(path)
    assert str(info.value).startswith(f"{path} {message}"), str(info.value)
    assert "np." not in str(info.value)


# --- found by tests/test_trace_fuzz.py ----------------------------------------------


def _error(tmp_path: Path, data: bytes | str, name: str = "t.csv", **kw) -> str:
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    with pytest.raises(TraceError) as info:
        load_trace(path, **kw)
    message = str(info.value)
    assert len(message.splitlines()) == 1
    return message.removeprefix(f"{path} ")


def test_a_first_row_with_one_field_too_many_is_an_error(tmp_path):
    # pandas took its first field as the row's index and shifted every column
    text = "arrival_s,prompt_tokens,output_tokens\n1,2,3,4\n5,6,7\n"
    assert _error(tmp_path, text) == "line 2: expected 3 fields, saw 4"


def test_blank_lines_above_the_header(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("\n\narrival_s,prompt_tokens,output_tokens\n5,6,7\n\n8,x,1\n")
    with pytest.raises(TraceError, match="line 6: prompt_tokens"):
        load_trace(path)


def test_json_lines_with_a_byte_order_mark_load(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(
        {"timestamp": 0, "input_length": 3, "output_length": 4}).encode() + b"\n")
    assert len(load_trace(path)) == 1


@pytest.mark.parametrize(
    "line",
    [
        {"timestamp": 10**400, "input_length": 3, "output_length": 4},
        {"timestamp": 0, "input_length": 10**30, "output_length": 4},
        {"timestamp": 0, "input_length": 3, "output_length": 2**63},
        {"timestamp": 0, "input_length": 3, "output_length": 4, "hash_ids": [2**64]},
    ],
)
def test_huge_json_integers_are_errors(tmp_path, line):
    text = json.dumps({"timestamp": 0, "input_length": 3, "output_length": 4}) + "\n"
    message = _error(tmp_path, text + json.dumps(line) + "\n", "t.jsonl")
    assert message.startswith("line 2: ") and "expected" in message, message


def test_huge_csv_integers_are_errors(tmp_path):
    message = _error(tmp_path, "arrival_s,prompt_tokens,output_tokens\n0,1e300,4\n")
    assert message == "line 2: prompt_tokens: expected an integer at most 9007199254740992, got 1e+300"


def test_azure_dates_outside_the_nanosecond_range_are_errors(tmp_path):
    text = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,1,1\n-1,1,1\n"
    assert _error(tmp_path, text).startswith("line 3: TIMESTAMP: expected a date-time")


def test_keeping_a_schema_column_keeps_it_parsed(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens,workload_class\n0,1,1,\n1,1,1,code\n")
    df = load_trace(path, keep_columns=["workload_class"])
    assert df["workload_class"].tolist() == ["default", "code"]


def test_gzip_json_lines_with_a_byte_order_mark(tmp_path):
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(gzip.compress(b"\xef\xbb\xbf" + json.dumps(
        {"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 4}).encode() + b"\n"))
    assert len(load_trace(path)) == 1


@pytest.mark.parametrize(
    ("keys", "match"),
    [
        ({"prompt_tokens": float("nan")}, "workload.synthetic.prompt_tokens: expected a number"),
        ({"shared_prefix_tokens": 1e300}, "at most 9007199254740992, got 1e+300"),
        ({"requests": 10**400}, "workload.synthetic.requests: expected an integer at most 9007199254740992"),
        ({"output_tokens": {"distribution": "lognormal", "mean": 200, "sigma": 1e300}},
         "workload.synthetic.output_tokens.sigma: expected a number at most 50, got 1e+300"),
    ],
)
def test_odd_numbers_in_a_synthetic_section(keys, match):
    section = _synthetic({"process": "poisson", "rate": 1}, requests=5)
    section["synthetic"].update(keys)
    _refused(section, match, TraceError)


@pytest.mark.parametrize(
    ("arrival", "match"),
    [
        ({"process": "gamma", "rate": 5, "cv": 1e-300}, None),  # regular gaps
        ({"process": "gamma", "rate": 5, "cv": 1e4}, "expected a number at most 1000"),
        ({"process": "poisson", "rate": 5e-324}, "the arrival times overflow"),
        ({"process": "diurnal", "rate": 1, "period_s": 1e-310}, "at least 1e-06 s"),
    ],
)
def test_odd_arrival_numbers(arrival, match):
    section = _synthetic(arrival, requests=5)
    if match is None:
        assert len(build_workload(section, Path("."), 0)) == 5
    else:
        _refused(section, match, TraceError)


def test_class_mix_weights_near_the_float_limit():
    section = {**_synthetic({"process": "poisson", "rate": 1}, requests=50),
               "class_mix": {"chat": 1e308, "code": 1e308}}
    assert set(build_workload(section, Path("."), 0)["workload_class"]) == {"chat", "code"}
    section["class_mix"] = {"chat": float("nan")}
    _refused(section, "workload.class_mix.chat: expected a weight >= 0, got nan", TraceError)
