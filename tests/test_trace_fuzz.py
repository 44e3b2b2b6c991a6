"""Fuzz the trace readers and the ``workload:`` section: a trace, or one error line.

Trace files in every supported format (generic CSV and JSON lines, Azure, Vidur,
BurstGPT, Mooncake) get random rows: column subsets, missing and extra columns, empty
cells, negative, huge, NaN, infinite and non-numeric values, random unicode and bytes,
decreasing timestamps, gzip or not. ``workload:`` sections get random keys and values
of every YAML type. Each case must either give a trace that satisfies the schema or
raise TraceError (or ScenarioError from the memory limits) with a one-line message;
never another exception, a MemoryError, a numpy repr in the message, or a hang.

A fitted section (``fit_synthetic``) of any trace that loads must build, with the
trace's request count.

Deterministic by default (``derandomize``); ``SPECSIM_FUZZ_EXAMPLES=5000
SPECSIM_FUZZ_RANDOM=1 pytest tests/test_trace_fuzz.py --hypothesis-show-statistics``
explores further and shows the share of cases that load / build or are refused.
"""

from __future__ import annotations

import copy
import gzip
import json
import math
import os
import signal
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from specsim.errors import ScenarioError
from specsim.limits import MAX_ARRIVAL_S
from specsim.traces.errors import TraceError
from specsim.traces.fit import ARRIVAL_MODELS, LENGTH_MODELS, fit_synthetic
from specsim.traces.loaders import FORMATS, load_trace
from specsim.traces.schema import COLUMNS, make_trace
from specsim.traces.workload import build_workload

HANG_S = 10
EXAMPLES = int(os.environ.get("SPECSIM_FUZZ_EXAMPLES", "80"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=not os.environ.get("SPECSIM_FUZZ_RANDOM"),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# Columns of each format: required first, then optional ones the reader knows.
CSV_FORMATS = {
    "generic": (
        ["arrival_s", "prompt_tokens", "output_tokens"],
        ["session_id", "turn", "workload_class", "slo_tier", "temperature", "prefix_block_ids",
         "request_id"],
    ),
    "azure": (["TIMESTAMP", "ContextTokens", "GeneratedTokens"], []),
    "vidur": (["arrived_at", "num_prefill_tokens", "num_decode_tokens"], []),
    "burstgpt": (
        ["Timestamp", "Request tokens", "Response tokens"],
        ["Session ID", "Log Type", "Model", "Total tokens", "Elapsed time"],
    ),
}
JSON_FORMATS = {
    "generic": CSV_FORMATS["generic"],
    "mooncake": (["timestamp", "input_length", "output_length"], ["hash_ids"]),
}
TIME_COLUMNS = {"arrival_s", "arrived_at", "Timestamp", "timestamp"}

WEIRD_TEXT = ["", " ", "nan", "NaN", "inf", "-inf", "Infinity", "1e300", "-1e300", "1e400",
              "-5", "-5.0", "2.5", "0", "0.0", "00012", "0x10", "1_000", "abc", "null", "None",
              "true", "1,5", '"', "''", "\u2028", "\x85", "\x00", "a\rb", "é", "日本", "💥",
              "9" * 40, "9" * 5000, "9007199254740993", "1 2 3", "[1, 2]", "(3 4)", "-1",
              "2023-11-16 18:15:46.68", "2024-05-10T00:00:00+02:00", "2023-13-45 99:99:99"]
JSON_WEIRD = [None, True, False, 0, -1, -5.0, 2.5, 1e300, -1e300, 10**30, 2**53 + 1, 2**63,
              10**400, math.nan, math.inf, -math.inf, "", "5", "abc", [], [1, 2], [1.5],
              [10**30], [True], {}, {"a": 1}, "\u2028", "x" * 300]


def _valid_cell(column: str, i: int, t: float) -> str:
    if column in TIME_COLUMNS:
        return f"{t:.3f}"
    if column == "TIMESTAMP":
        return str(pd.Timestamp("2023-11-16 18:00:00") + pd.Timedelta(seconds=t))
    if column in ("workload_class", "Model"):
        return ["chat", "code", "ChatGPT", ""][i % 4]
    if column == "slo_tier":
        return ["standard", "premium", ""][i % 3]
    if column == "temperature":
        return ["0.7", "", "0"][i % 3]
    if column == "prefix_block_ids":
        return ["0 1 2", "", "3"][i % 3]
    if column in ("session_id", "Session ID"):
        return str(i % 3 - 1)
    if column == "turn":
        return str(i % 2)
    if column == "Log Type":
        return ["Conversation log", "Conversation failed", ""][i % 3]
    return str(1 + (i * 37) % 500)


@st.composite
def csv_text(draw) -> tuple[str, str]:
    """(format, CSV text) with a mostly well-formed header and some bad cells."""
    fmt = draw(st.sampled_from(sorted(CSV_FORMATS)))
    required, optional = CSV_FORMATS[fmt]
    columns = list(required) + [c for c in optional if draw(st.booleans())]
    if draw(st.integers(0, 9)) == 0:  # drop a required column
        columns.remove(draw(st.sampled_from(required)))
    if draw(st.integers(0, 3)) == 0:  # an extra column, maybe odd
        columns.insert(draw(st.integers(0, len(columns))),
                       draw(st.sampled_from(["extra", "note", "é", " ", "x,y", "Model"])))
    if draw(st.integers(0, 5)) == 0:
        columns = draw(st.permutations(columns))
    n = draw(st.integers(0, 12))
    gaps = draw(st.lists(st.floats(-2, 5, allow_nan=False), min_size=n, max_size=n))
    if draw(st.integers(0, 4)):  # mostly in order
        gaps = [abs(g) for g in gaps]
    times = np.cumsum(gaps).tolist() if gaps else []
    rows = []
    odd = draw(st.booleans())  # half the files have odd cells, in about a quarter of rows
    for i in range(n):
        cells = [_valid_cell(c, i, times[i]) for c in columns]
        if cells and odd and draw(st.integers(0, 3)) == 0:
            for _ in range(draw(st.integers(1, 2))):
                j = draw(st.integers(0, len(cells) - 1))
                cells[j] = draw(st.one_of(st.sampled_from(WEIRD_TEXT), st.text(max_size=6)))
        if draw(st.integers(0, 30)) == 0:  # too many or too few fields
            cells = cells + ["1"] if draw(st.booleans()) else cells[:-1]
        rows.append(",".join(cells))
    if n and draw(st.integers(0, 8)) == 0:
        rows.insert(draw(st.integers(0, len(rows))), "")
    text = ",".join(columns) + "\n" + "\n".join(rows) + ("\n" if draw(st.booleans()) else "")
    return fmt, text


@st.composite
def json_text(draw) -> tuple[str, str]:
    """(format, JSON lines text)."""
    fmt = draw(st.sampled_from(sorted(JSON_FORMATS)))
    required, optional = JSON_FORMATS[fmt]
    keys = list(required) + [c for c in optional if draw(st.booleans())]
    if draw(st.integers(0, 9)) == 0:
        keys.remove(draw(st.sampled_from(required)))
    n = draw(st.integers(0, 10))
    t = 0.0
    lines = []
    odd = draw(st.booleans())
    backwards = draw(st.integers(0, 4)) == 0  # some files go back in time
    for i in range(n):
        step = draw(st.floats(-1 if backwards else 0, 5, allow_nan=False))
        t += step
        obj: dict[str, Any] = {}
        for k in keys:
            if k in TIME_COLUMNS:
                obj[k] = round(t * (1000 if fmt == "mooncake" else 1), 3)
            elif k in ("hash_ids", "prefix_block_ids"):
                obj[k] = list(range(i % 3))
            elif k in ("workload_class", "slo_tier"):
                obj[k] = ["chat", None, "x"][i % 3]
            elif k == "temperature":
                obj[k] = [0.5, None, 0][i % 3]
            else:
                obj[k] = 1 + (i * 37) % 500
        if keys and odd and draw(st.integers(0, 3)) == 0:
            for _ in range(draw(st.integers(1, 2))):
                obj[draw(st.sampled_from(keys))] = draw(st.sampled_from(JSON_WEIRD))
        if draw(st.integers(0, 10)) == 0:
            obj[draw(st.text(max_size=5))] = draw(st.sampled_from(JSON_WEIRD))
        if draw(st.integers(0, 40)) == 0:
            lines.append(draw(st.sampled_from(["[1, 2]", "3", "{", "nul", '"x"', "{}"])))
        else:
            lines.append(json.dumps(obj))
    if n and draw(st.integers(0, 8)) == 0:
        lines.insert(draw(st.integers(0, len(lines))), "   ")
    return fmt, "\n".join(lines) + "\n"


@st.composite
def trace_file(draw) -> tuple[str, bytes, bool, dict[str, Any]]:
    """(expected format, file bytes, gzip: None, "ok" or a damage, load_trace options)."""
    pick = draw(st.integers(0, 9))
    if pick == 0:
        fmt, data = "generic", draw(st.binary(max_size=200))
    elif pick == 1:
        fmt, text = draw(csv_text())
        data = bytearray(text.encode("utf-8"))
        for _ in range(draw(st.integers(1, 3))):  # random bytes spliced in
            at = draw(st.integers(0, len(data)))
            data[at:at] = draw(st.binary(min_size=1, max_size=4))
        data = bytes(data)
    else:
        fmt, text = draw(csv_text() if pick < 6 else json_text())
        data = text.encode("utf-8")
        if draw(st.integers(0, 10)) == 0:
            data = b"\xef\xbb\xbf" + data  # a byte order mark
    options = {
        "format": draw(st.sampled_from(["auto"] * 4 + [fmt] * 2 + list(FORMATS))),
        "keep_failed": draw(st.booleans()),
        "sort": draw(st.booleans()),
    }
    if draw(st.integers(0, 7)) == 0:
        options["keep_columns"] = [draw(st.sampled_from(["Model", "workload_class", "nope"]))]
    gz = draw(st.sampled_from([None, None, "ok", "ok", "flip", "truncate", "append"]))
    return fmt, data, gz, options


class Hang(Exception):
    pass


def _on_alarm(signum, frame):  # noqa: ARG001
    raise Hang(f"no answer within {HANG_S} s")


def _guarded(fn) -> Any:
    """``fn()``: its result, or None when it raised a one-line user error."""
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(HANG_S)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # overflow / invalid value
            return fn()
    except (TraceError, ScenarioError) as exc:
        message = str(exc)
        assert message and len(message.splitlines()) == 1, repr(message)
        assert "\n" not in message and "\r" not in message, repr(message)
        assert "np.float" not in message and "np.int" not in message, message
        assert "Traceback" not in message, message
        return None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def check_schema(df: pd.DataFrame) -> None:
    """What every trace promises, however it was made."""
    assert list(df.columns[: len(COLUMNS)]) == list(COLUMNS)
    for name, dtype in COLUMNS.items():
        if name in ("workload_class", "slo_tier"):  # pandas 3 stores text as its str dtype
            assert pd.api.types.is_string_dtype(df[name].dtype), (name, df[name].dtype)
        else:
            assert str(df[name].dtype) == dtype, (name, df[name].dtype)
    n = len(df)
    assert n >= 1
    t = df["arrival_s"].to_numpy()
    assert np.isfinite(t).all() and (t >= 0).all() and (np.diff(t) >= 0).all()
    assert (df["request_id"].to_numpy() == np.arange(n)).all()
    assert (df["prompt_tokens"].to_numpy() >= 1).all()
    assert (df["output_tokens"].to_numpy() >= 1).all()
    assert (df["session_id"].to_numpy() >= -1).all()
    assert (df["turn"].to_numpy() >= 0).all()
    temp = df["temperature"].to_numpy()
    assert (np.isnan(temp) | (temp >= 0)).all()
    for column in ("workload_class", "slo_tier"):
        assert all(isinstance(v, str) and v for v in df[column]), column
    for blocks in df["prefix_block_ids"]:
        assert isinstance(blocks, tuple) and all(isinstance(b, int) for b in blocks)


@pytest.fixture(autouse=True)
def _small_memory_budget(monkeypatch):
    # a random request count is refused above ~50k requests instead of taking minutes
    monkeypatch.setenv("SPECSIM_MEMORY_LIMIT_GB", "0.05")


def check_fit(df: pd.DataFrame, arrival: str, lengths: str) -> None:
    """A trace that can be fitted gives a section that builds, with the trace's count."""
    section = _guarded(lambda: fit_synthetic(df, arrival, lengths))
    if section is None:  # refused in one line (too few distinct times, an absurd span)
        return
    with tempfile.TemporaryDirectory() as tmp:
        try:
            built = build_workload(section, Path(tmp), 0)
        except TraceError as exc:  # a trace near the latest arrival a run holds can be
            # fitted by a generator whose draws pass it: refused in one line, naming the row
            assert "arrival_s: expected a number at most 1e+08" \
                in str(exc) and "\n" not in str(exc), exc
            return
    check_schema(built)
    assert len(built) == len(df)


@SETTINGS
@given(
    case=trace_file(),
    arrival=st.sampled_from(ARRIVAL_MODELS),
    lengths=st.sampled_from(LENGTH_MODELS),
)
def test_trace_file_fuzz(case, arrival, lengths):
    _fmt, data, gz, options = case
    if gz is not None:
        packed = bytearray(gzip.compress(data))
        at = len(packed) * 2 // 3
        if gz == "flip":
            packed[at] ^= 0xFF
        elif gz == "truncate":
            del packed[at:]
        elif gz == "append":
            packed += b"not gzip"
        data = bytes(packed)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("trace.gz" if gz else "trace")
        path.write_bytes(data)
        df = _guarded(lambda: load_trace(path, **options))
        event("loaded" if df is not None else "refused")
        if df is not None:
            check_schema(df)
            assert df.attrs["format"] in FORMATS
            if len(df) >= 2:
                check_fit(df, arrival, lengths)


# --- workload sections --------------------------------------------------------------

SPECIAL = [math.nan, math.inf, -math.inf, 1e18, 1e300, 10**30, 10**400, -(10**30), -1, -5.0,
           0, 0.0, 1e-300, 5e-324, 2.5, 3, 1e3, 1e9, "1e3", "", "abc", True, False, None, [],
           [1, 2], [0, 0], [math.nan], [1e300, 1], {}, {"a": 1}, 2**53 + 1, 2**63, "\x00",
           "a\nb"]
EXTREME = [5e-324, 1e-300, 1e-9, 1e-6, 0.999, 1e6, 1e9, 1e15, 2**53, 1e18, 1e300, 1000, 1e4]
values = st.one_of(
    st.sampled_from(SPECIAL).map(copy.deepcopy),  # a fresh copy: cases mutate what they get
    st.integers(-100, 10_000),
    st.floats(-1e4, 1e4, allow_nan=False),
    st.text(max_size=6),
    st.lists(st.one_of(st.integers(-5, 100), st.floats(allow_nan=True)), max_size=4),
)

DISTRIBUTIONS = [
    100,
    {"distribution": "fixed", "value": 50},
    {"distribution": "uniform", "low": 1, "high": 300},
    {"distribution": "lognormal", "median": 200, "sigma": 1.0, "max": 4000},
    {"distribution": "lognormal", "mean": 200, "sigma": 0.5},
    {"distribution": "exponential", "mean": 80},
    {"distribution": "geometric", "mean": 3},
    {"distribution": "empirical", "values": [1, 5, 9]},
    {"distribution": "empirical", "quantiles": [1, 10, 100]},
    {"distribution": "empirical", "trace": "t.csv", "column": "prompt"},
]
ARRIVALS = [
    {"process": "poisson", "rate": 5.0},
    {"process": "gamma", "rate": 5.0, "cv": 2.0},
    {"process": "diurnal", "rate": 5.0, "amplitude": 0.5, "period_s": 60, "peak_s": 10},
    {"process": "diurnal", "curve": [1, 0, 8], "period_s": 30, "cv": 1.5},
    {"process": "onoff", "rate": 10, "off_rate": 1, "on_s": 2, "off_s": 3},
    {"process": "onoff", "rate": 10, "on_s": 2, "off_s": 3, "periods": "fixed"},
]
SOURCE_TRACE = "arrival_s,prompt_tokens,output_tokens,workload_class\n" + "".join(
    f"{i * 0.5},{10 + i},{5 + i % 4},{['chat', 'code'][i % 2]}\n" for i in range(30)
)
TRANSFORMS = {
    "start_s": 1.0, "end_s": 50.0, "speedup": 2.0, "qps": 3.0, "sample": {"fraction": 0.5},
    "max_requests": 40, "max_context": 600, "context_overflow": "drop", "class": "chat",
    "class_mix": {"chat": 1, "code": 2}, "temperature": 0.5, "slo_tier": "premium", "seed": 3,
}


def _base_synthetic(draw) -> dict[str, Any]:
    syn: dict[str, Any] = {
        "arrival": copy.deepcopy(draw(st.sampled_from(ARRIVALS))),
        "prompt_tokens": copy.deepcopy(draw(st.sampled_from(DISTRIBUTIONS))),
        "output_tokens": copy.deepcopy(draw(st.sampled_from(DISTRIBUTIONS))),
    }
    source = draw(st.integers(0, 2))
    if source != 1:
        syn["requests"] = draw(st.integers(1, 60))
    if source != 0:
        syn["duration_s"] = draw(st.floats(1, 30))
    if draw(st.booleans()):
        syn["shared_prefix_tokens"] = draw(st.sampled_from([0, 100, 600, 2000]))
    if draw(st.integers(0, 2)) == 0:
        if "requests" in syn and "duration_s" in syn:
            del syn["duration_s"]  # sessions take one of the two
        syn["sessions"] = {
            "turns": copy.deepcopy(draw(st.sampled_from(DISTRIBUTIONS[:7]))),
            "think_time_s": copy.deepcopy(draw(st.sampled_from(
                [0, 2.5, {"distribution": "exponential", "mean": 3},
                 {"distribution": "lognormal", "median": 2, "sigma": 1.5}]))),
        }
    return syn


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    return out


@st.composite
def workload(draw) -> tuple[dict[str, Any], int | None]:
    """(a workload section, the model's max context or None)."""
    if draw(st.integers(0, 3)) == 0:
        section: dict[str, Any] = {"trace": {"path": "t.csv"}}
        if draw(st.booleans()):
            section["trace"]["class_column"] = "workload_class"
    else:
        section = {"synthetic": _base_synthetic(draw)}
    for key in draw(st.lists(st.sampled_from(sorted(TRANSFORMS)), max_size=3, unique=True)):
        section[key] = copy.deepcopy(TRANSFORMS[key])
    for _ in range(draw(st.integers(0, 3))):
        paths = _paths(section)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        node = section
        for part in path[:-1]:
            node = node[part]
        if not isinstance(node, dict):
            continue
        pick = draw(st.integers(0, 9))
        if pick == 0:
            node.pop(path[-1], None)
        elif pick == 1:
            node[draw(st.sampled_from(["rate", "cv", "typo", "requests", "min", "max",
                                       "on_s", "period_s", "amplitude", "n"]))] = draw(values)
        elif pick < 5 and isinstance(node.get(path[-1]), int | float):
            node[path[-1]] = draw(st.sampled_from(EXTREME))  # valid, but far out
        else:
            node[path[-1]] = draw(values)
    max_context = draw(st.sampled_from([None, 8192, 2, 100]))
    return section, max_context


@SETTINGS
@given(case=workload(), seed=st.integers(0, 2**32))
def test_workload_section_fuzz(case, seed):
    section, max_context = case
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "t.csv").write_text(SOURCE_TRACE)
        df = _guarded(lambda: build_workload(section, Path(tmp), seed, max_context))
        event("built" if df is not None else "refused")
        if df is not None:
            check_schema(df)
            if max_context is not None:
                total = df["prompt_tokens"] + df["output_tokens"]
                assert (total <= max_context).all()


def test_a_fuzzed_trace_error_is_one_plain_line(tmp_path):
    """The numpy repr that once leaked: a negative time is shown as -5.0."""
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n-5,3,4\n")
    with pytest.raises(TraceError) as info:
        load_trace(path)
    assert str(info.value) == f"{path} line 2: arrival_s: expected a time >= 0, got -5.0"


@SETTINGS
@given(
    times=st.lists(
        st.one_of(st.floats(0, 1e3), st.floats(0, MAX_ARRIVAL_S),  # the latest a trace holds
                  st.sampled_from([0.0, 1e-9, 5e-324, MAX_ARRIVAL_S])),
        min_size=2,
        max_size=40,
    ),
    lengths=st.lists(
        st.one_of(st.integers(1, 2000), st.integers(1, 2**53)), min_size=2, max_size=40
    ),
    arrival=st.sampled_from(ARRIVAL_MODELS),
    model=st.sampled_from(LENGTH_MODELS),
)
def test_fit_roundtrip_fuzz(times, lengths, arrival, model):
    """Any trace's fitted section builds: odd spans, ties, regular gaps, huge lengths."""
    n = min(len(times), len(lengths))
    df = make_trace(sorted(times[:n]), lengths[:n], lengths[:n][::-1], "fuzz")
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(HANG_S)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            check_fit(df, arrival, model)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
