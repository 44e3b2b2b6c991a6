"""A run reads its trace as numpy columns (``traces.schema.Trace``), without pandas: the CSV
reader, the number rule on text cells and the schema give what pandas gave, and the public
functions still hand back the same DataFrames."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim import values
from specsim.traces.errors import TraceError
from specsim.traces.loaders import load_trace, read_trace
from specsim.traces.schema import COLUMNS, Trace, as_trace, make_trace, trace_from

REPO = Path(__file__).resolve().parents[1]

#: text cells pandas' to_numeric reads, and some it refuses (NaN)
CELLS = [" 3", "3 ", "+3", "1e3", "1E3", ".5", "5.", "inf", "-inf", "nan", "NaN", "Infinity",
         "1_000", "0x10", "", "1,000", "\u0663", "3\t", "1e400", "00012", "  ", "3.0.0", "1e",
         "e3", "- 3", "True", "None", "12345678901234567890", "1e-400", "+.5e+2", "1 000"]


def _pandas_reads(cells: list[str]) -> np.ndarray:
    return pd.to_numeric(pd.Series(cells, dtype=object), errors="coerce").to_numpy(
        np.float64, na_value=np.nan)


@pytest.mark.parametrize("cell", CELLS)
def test_a_text_cell_reads_as_pandas_reads_it(cell):
    """Accepted or refused alike; an accepted cell has pandas' value."""
    want = _pandas_reads([cell])[0]
    try:
        got = values.column(np.array([cell], dtype=object), text_ok=True, blank_ok=True)[0]
    except values.ValueRuleError:
        got = np.nan  # refused: pandas gave NaN (or inf, which the rule refuses too)
        assert not np.isfinite(want)
        return
    assert got == want or (np.isnan(got) and np.isnan(want))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=-1e300, max_value=1e300, width=64), min_size=1,
                max_size=20), st.sampled_from(["r", ".17g", ".6f", ".3e"]))
def test_decimal_text_reads_to_the_same_bits_as_pandas(xs, fmt):
    cells = [repr(x) if fmt == "r" else format(x, fmt) for x in xs]
    got = values.column(np.array(cells, dtype=object), text_ok=True)
    assert np.array_equal(got, _pandas_reads(cells))


def _csv(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "t.csv"
    p.write_bytes(text.encode("utf-8"))
    return p


def test_the_csv_reader_keeps_pandas_rows_and_lines(tmp_path):
    """BOM, blank lines above and between rows, CRLF, a short row's empty field, a quoted
    field over two lines, spaces after commas."""
    text = ("\ufeff\narrival_s,prompt_tokens,output_tokens,workload_class\r\n"
            "0.5, 10,2,chat\r\n\r\n1.25,20,3,\"co\nde\"\r\n2,30,4\r\n")
    t = read_trace(_csv(tmp_path, text))
    assert list(t["arrival_s"]) == [0.5, 1.25, 2.0]
    assert list(t["prompt_tokens"]) == [10, 20, 30]
    assert list(t["workload_class"]) == ["chat", "co\nde", "default"]


@pytest.mark.parametrize("text,line,says", [
    ("arrival_s,prompt_tokens,output_tokens\n0,1,1\n\n1,2,2,9\n", 4, "expected 3 fields, saw 4"),
    ("arrival_s,prompt_tokens,output_tokens\n0,1,1\n1,x,2\n", 3,
     "prompt_tokens: expected an integer, got 'x'"),
    ("arrival_s,prompt_tokens,output_tokens\n0,1,1\n1,,2\n", 3,
     "prompt_tokens: expected an integer, got an empty field"),
    ("arrival_s,prompt_tokens,output_tokens\n0,1,1\n1,1_0,2\n", 3, "prompt_tokens: expected"),
])
def test_a_bad_row_names_its_line(tmp_path, text, line, says):
    with pytest.raises(TraceError) as exc:
        read_trace(_csv(tmp_path, text))
    assert f"line {line}: " in str(exc.value) and says in str(exc.value)


def test_a_field_as_long_as_a_line_may_be_reads(tmp_path):
    """csv's own field limit (128 KiB) is lifted to the line cap."""
    text = "arrival_s,prompt_tokens,output_tokens,note\n0,1,1," + "x" * 200_000 + "\n"
    assert len(read_trace(_csv(tmp_path, text))) == 1


def test_frames_keep_the_schema_and_round_trip():
    df = make_trace([0.0, 1.0, 1.0], [5, 6, 7], [1, 2, 3], "t",
                    workload_class=["a", "b", "a"], prefix_block_ids=[(1, 2), (), (1,)],
                    temperature=[0.5, None, 1.0])
    assert list(df.columns) == list(COLUMNS)
    assert df["prefix_block_ids"].tolist() == [(1, 2), (), (1,)]
    assert df["temperature"].isna().tolist() == [False, True, False]
    back = as_trace(df)
    assert isinstance(back, Trace) and back.frame().equals(df)
    t = trace_from([0.0], [1], [1], "t")
    assert t.frame().dtypes.to_dict() == make_trace([0.0], [1], [1], "t").dtypes.to_dict()


def test_load_trace_is_read_traces_frame():
    path = REPO / "scenarios" / "data" / "azure_conv_poisson_qps2_n1000.csv"
    df = load_trace(path)
    assert isinstance(df, pd.DataFrame) and len(df) == 1000
    assert df.equals(read_trace(path).frame()) and df.attrs["format"] == "vidur"


def test_a_runs_trace_needs_no_pandas():
    """Reading a CSV trace and building the scenario's workload, in a fresh interpreter,
    leaves pandas unimported."""
    code = ("import sys\nfrom specsim.traces.workload import workload_trace\n"
            "t = workload_trace({'trace': {'path': 'scenarios/data/"
            "azure_conv_poisson_qps2_n1000.csv'}, 'class': 'chat'}, '.', 1, 4096)\n"
            "print(len(t), 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, check=True).stdout.split()
    assert out == ["1000", "False"]
