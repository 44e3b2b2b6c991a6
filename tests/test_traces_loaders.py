"""Loaders on small files written here: every format, .gz, and one-line errors for bad rows."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specsim.traces.errors import TraceError
from specsim.traces.loaders import detect_format, load_trace
from specsim.traces.schema import COLUMNS, empty_trace, validate_trace

AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:51.0000000,1020,12
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def one_line_error(excinfo: pytest.ExceptionInfo[TraceError]) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    return message


def test_azure_2023(tmp_path):
    df = load_trace(write(tmp_path, "a.csv", AZURE))
    assert list(df.columns) == list(COLUMNS)
    assert df["arrival_s"].tolist() == pytest.approx([0.0, 4.314579, 4.3194100])
    assert df["prompt_tokens"].tolist() == [374, 396, 1020]
    assert df["output_tokens"].tolist() == [44, 109, 12]
    assert df["request_id"].tolist() == [0, 1, 2]
    assert (df["session_id"] == -1).all() and (df["turn"] == 0).all()
    assert (df["workload_class"] == "default").all() and (df["slo_tier"] == "standard").all()
    assert df["temperature"].isna().all()
    assert all(b == () for b in df["prefix_block_ids"])
    assert df.attrs["format"] == "azure"


def test_azure_2024_time_zones(tmp_path):
    text = """TIMESTAMP,ContextTokens,GeneratedTokens
2024-05-10 00:00:00.0096160+00:00,4808,10
2024-05-10 00:00:01.5096160+00:00,3180,8
2024-05-10 01:00:03.0096160+01:00,200,30
"""
    df = load_trace(write(tmp_path, "week.csv", text))
    assert df["arrival_s"].tolist() == pytest.approx([0.0, 1.5, 3.0])


def test_gzip_reads_directly(tmp_path):
    plain = load_trace(write(tmp_path, "a.csv", AZURE))
    packed = tmp_path / "a.csv.gz"
    with gzip.open(packed, "wt", encoding="utf-8") as fh:
        fh.write(AZURE)
    pd.testing.assert_frame_equal(load_trace(packed), plain)
    lines = tmp_path / "m.jsonl.gz"
    with gzip.open(lines, "wt", encoding="utf-8") as fh:
        fh.write('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [7, 8]}\n')
    assert load_trace(lines)["prefix_block_ids"].tolist() == [(7, 8)]


BURST = """Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type
5,s1,1.2,ChatGPT,472,18,490,Conversation log
45,s2,0.8,GPT-4,1087,0,1087,Conversation log
46,s1,2.0,ChatGPT,600,30,630,Conversation log
50,,1.0,GPT-4,300,20,320,API log
51,s3,1.0,ChatGPT,100,25,125,API failure log
"""


def test_burstgpt_filters_failures_and_numbers_turns(tmp_path):
    path = write(tmp_path, "burst.csv", BURST)
    assert detect_format(path) == ("burstgpt", False)
    df = load_trace(path)
    assert df["arrival_s"].tolist() == [5.0, 46.0, 50.0]
    assert df["prompt_tokens"].tolist() == [472, 600, 300]
    assert df.attrs["failed_requests"] == 2
    assert df["session_id"].iloc[0] == df["session_id"].iloc[1] >= 0
    assert df["turn"].tolist() == [0, 1, 0]
    assert df["session_id"].iloc[2] == -1


def test_burstgpt_keep_failed_replays_them_as_one_token(tmp_path):
    df = load_trace(write(tmp_path, "burst.csv", BURST), keep_failed=True)
    assert len(df) == 5
    assert df["output_tokens"].tolist() == [18, 1, 30, 20, 25]
    assert df.attrs["failed_requests"] == 2


def test_burstgpt_old_release_without_session_columns(tmp_path):
    text = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n0,ChatGPT,10,5,15,Conversation log\n3,GPT-4,20,6,26,API log\n"
    df = load_trace(write(tmp_path, "b1.csv", text))
    assert df["prompt_tokens"].tolist() == [10, 20]
    assert (df["session_id"] == -1).all()


def test_mooncake(tmp_path):
    rows = [
        {"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [0, 1]},
        {"timestamp": 1500, "input_length": 700, "output_length": 3, "hash_ids": [0, 2]},
    ]
    path = write(tmp_path, "m.jsonl", "".join(json.dumps(r) + "\n" for r in rows) + "\n")
    df = load_trace(path)
    assert df.attrs["format"] == "mooncake"
    assert df["arrival_s"].tolist() == [0.0, 1.5]
    assert df["prefix_block_ids"].tolist() == [(0, 1), (0, 2)]


def test_vidur(tmp_path):
    text = "arrived_at,num_prefill_tokens,num_decode_tokens\n0.51,395,112\n0.52,1030,403\n"
    df = load_trace(write(tmp_path, "v.csv", text))
    assert df.attrs["format"] == "vidur"
    assert df["arrival_s"].tolist() == [0.51, 0.52]
    assert df["output_tokens"].tolist() == [112, 403]


def test_generic_csv_all_columns(tmp_path):
    text = (
        "arrival_s,prompt_tokens,output_tokens,session_id,turn,workload_class,slo_tier,temperature,prefix_block_ids,request_id\n"
        "0.0,1000,20,4,0,code,premium,0.7,0 1,99\n"
        "0.5,1600,10,4,1,code,,,0 1 2 3,98\n"
        "0.7,10,10,,,,,,,97\n"
    )
    df = load_trace(write(tmp_path, "g.csv", text))
    assert df["request_id"].tolist() == [0, 1, 2]
    assert df["session_id"].tolist() == [4, 4, -1]
    assert df["turn"].tolist() == [0, 1, 0]
    assert df["workload_class"].tolist() == ["code", "code", "default"]
    assert df["slo_tier"].tolist() == ["premium", "standard", "standard"]
    assert df["temperature"].iloc[0] == 0.7 and df["temperature"].iloc[1:].isna().all()
    assert df["prefix_block_ids"].tolist() == [(0, 1), (0, 1, 2, 3), ()]


def test_generic_jsonl(tmp_path):
    rows = [
        {
            "arrival_s": 0.0,
            "prompt_tokens": 12,
            "output_tokens": 3,
            "workload_class": "math",
            "temperature": None,
        },
        {
            "arrival_s": 2.0,
            "prompt_tokens": 600,
            "output_tokens": 9,
            "prefix_block_ids": [5],
            "session_id": 1,
            "turn": 0,
        },
    ]
    path = write(tmp_path, "g.jsonl", "\n".join(json.dumps(r) for r in rows))
    df = load_trace(path)
    assert df.attrs["format"] == "generic"
    assert df["workload_class"].tolist() == ["math", "default"]
    assert df["prefix_block_ids"].tolist() == [(), (5,)]
    assert df["session_id"].tolist() == [-1, 1]
    assert df["temperature"].isna().all()


def test_sort_option_orders_an_unsorted_file(tmp_path):
    text = "arrival_s,prompt_tokens,output_tokens\n2.0,5,5\n1.0,6,6\n"
    df = load_trace(write(tmp_path, "u.csv", text), sort=True)
    assert df["arrival_s"].tolist() == [1.0, 2.0]
    assert df["prompt_tokens"].tolist() == [6, 5]


BAD_AZURE = [
    (
        "missing column",
        "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,10\n",
        1,
        "missing column 'GeneratedTokens'",
    ),
    (
        "negative tokens",
        AZURE + "2023-11-16 18:15:52,12,-5\n",
        5,
        "GeneratedTokens: expected an integer at least 0, got -5",
    ),
    (
        "non-numeric",
        AZURE + "2023-11-16 18:15:52,abc,5\n",
        5,
        "ContextTokens: expected an integer, got 'abc'",
    ),
    (
        "empty field",
        AZURE + "2023-11-16 18:15:52,10\n",
        5,
        "GeneratedTokens: expected an integer, got an empty field",
    ),
    (
        "unsorted",
        AZURE + "2023-11-16 18:15:47,12,5\n",
        5,
        "TIMESTAMP: timestamps go backwards (earlier than line 4)",
    ),
    ("unparsable time", AZURE + "yesterday,12,5\n", 5, "TIMESTAMP: expected a date-time"),
    ("extra field", AZURE + "2023-11-16 18:15:52,12,5,7\n", 5, "expected 3 fields, saw 4"),
    (
        "header only",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n",
        2,
        "no requests after the header line",
    ),
]


@pytest.mark.parametrize(
    ("case", "text", "line", "message"), BAD_AZURE, ids=[c[0] for c in BAD_AZURE]
)
def test_bad_csv_rows_name_file_and_line(tmp_path, case, text, line, message):
    path = write(tmp_path, "bad.csv", text)
    with pytest.raises(TraceError) as excinfo:
        load_trace(path, format="azure")
    got = one_line_error(excinfo)
    assert got.startswith(f"{path} line {line}: "), got
    assert message in got


def test_empty_file(tmp_path):
    path = write(tmp_path, "empty.csv", "")
    with pytest.raises(TraceError) as excinfo:
        load_trace(path)
    assert (
        one_line_error(excinfo)
        == f"{path} line 1: empty file: expected a header line or a JSON object"
    )


def test_blank_lines_are_skipped_but_counted(tmp_path):
    text = "arrival_s,prompt_tokens,output_tokens\n0,5,5\n\n1,x,5\n"
    with pytest.raises(TraceError, match=r"line 4: prompt_tokens"):
        load_trace(write(tmp_path, "b.csv", text))


def test_error_in_a_later_chunk_has_the_right_line(tmp_path, monkeypatch):
    import specsim.traces.reading as reading

    monkeypatch.setattr(reading, "CHUNK_ROWS", 7)
    rows = "".join(f"{i},10,10\n" for i in range(30))
    text = "arrival_s,prompt_tokens,output_tokens\n" + rows + "31,10,-1\n"
    with pytest.raises(TraceError, match=r"line 32: output_tokens"):
        load_trace(write(tmp_path, "long.csv", text))
    text = "arrival_s,prompt_tokens,output_tokens\n" + rows + "3,10,1\n"
    with pytest.raises(TraceError, match=r"line 32: arrival_s: timestamps go backwards"):
        load_trace(write(tmp_path, "long2.csv", text))


BAD_JSONL = [
    (
        "invalid json",
        '{"timestamp": 5, "input_length": 3, "output_length": 2}\n{"timestamp": 6,\n',
        2,
        "invalid JSON",
    ),
    (
        "missing field",
        '{"timestamp": 5, "input_length": 3, "output_length": 2}\n{"timestamp": 6, "input_length": 3}\n',
        2,
        "missing field 'output_length'",
    ),
    (
        "negative",
        '{"timestamp": 5, "input_length": 3, "output_length": 2}\n{"timestamp": 6, "input_length": -3, "output_length": 2}\n',
        2,
        "input_length: expected an integer at least 0, got -3",
    ),
    (
        "non-numeric",
        '{"timestamp": 5, "input_length": 3, "output_length": 2}\n\n{"timestamp": 6, "input_length": "3", "output_length": 2}\n',
        3,
        "input_length: expected an integer, got '3'",
    ),
    (
        "unsorted",
        '{"timestamp": 5, "input_length": 3, "output_length": 2}\n{"timestamp": 4, "input_length": 3, "output_length": 2}\n',
        2,
        "timestamps go backwards",
    ),
    (
        "bad hash ids",
        '{"timestamp": 5, "input_length": 3, "output_length": 2, "hash_ids": ["a"]}\n',
        1,
        "hash_ids: expected a list of integers",
    ),
]


@pytest.mark.parametrize(
    ("case", "text", "line", "message"), BAD_JSONL, ids=[c[0] for c in BAD_JSONL]
)
def test_bad_jsonl_rows_name_file_and_line(tmp_path, case, text, line, message):
    path = write(tmp_path, "bad.jsonl", text)
    with pytest.raises(TraceError) as excinfo:
        load_trace(path)
    got = one_line_error(excinfo)
    assert got.startswith(f"{path} line {line}: "), got
    assert message in got


def test_unknown_header_and_format(tmp_path):
    with pytest.raises(TraceError, match=r"line 1: unrecognised trace header \(a, b\)"):
        load_trace(write(tmp_path, "x.csv", "a,b\n1,2\n"))
    with pytest.raises(TraceError, match="unknown trace format 'splitwise'"):
        load_trace(write(tmp_path, "y.csv", AZURE), format="splitwise")
    with pytest.raises(TraceError, match="no such trace file"):
        load_trace(tmp_path / "missing.csv")
    with pytest.raises(TraceError, match="the mooncake format is JSON lines"):
        load_trace(write(tmp_path, "z.csv", AZURE), format="mooncake")


def test_validate_trace_checks_and_fills():
    df = pd.DataFrame(
        {"arrival_s": [0.0, 1.0], "prompt_tokens": [3, 4], "output_tokens": [1, 2], "extra": [1, 2]}
    )
    out = validate_trace(df, "mine")
    assert list(out.columns) == list(COLUMNS)
    assert out["request_id"].dtype == np.int64
    bad = df.assign(output_tokens=[1, 0])
    with pytest.raises(
        TraceError, match=re.escape("mine row 1: output_tokens: expected an integer at least 1, got 0")
    ):
        validate_trace(bad, "mine")
    with pytest.raises(TraceError, match="mine row 1: arrival_s: expected non-decreasing"):
        validate_trace(df.assign(arrival_s=[2.0, 1.0]), "mine")
    with pytest.raises(TraceError, match="mine: missing column 'prompt_tokens'"):
        validate_trace(df.drop(columns="prompt_tokens"), "mine")
    empty = empty_trace()
    assert list(empty.columns) == list(COLUMNS) and len(empty) == 0


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    gaps=st.lists(st.floats(min_value=0, max_value=1e4, allow_nan=False), min_size=1, max_size=40),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_generic_csv_round_trip(tmp_path, gaps, seed):
    rng = np.random.default_rng(seed)
    n = len(gaps)
    df = pd.DataFrame(
        {
            "arrival_s": np.cumsum(gaps),
            "prompt_tokens": rng.integers(1, 100_000, n),
            "output_tokens": rng.integers(1, 5_000, n),
            "session_id": rng.integers(-1, 5, n),
            "workload_class": rng.choice(["chat", "code"], n),
        }
    )
    path = tmp_path / f"rt{seed}.csv"
    df.to_csv(path, index=False, float_format="%.17g")
    back = load_trace(path)
    assert back["arrival_s"].tolist() == df["arrival_s"].tolist()
    for column in ("prompt_tokens", "output_tokens", "session_id", "workload_class"):
        assert back[column].tolist() == df[column].tolist()
