"""trace_stats, the PNG, the fitter and the `trace stats` / `trace fit` commands."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from specsim.traces.cli import add_trace_commands, main
from specsim.traces.errors import TraceError
from specsim.traces.fit import fit_synthetic
from specsim.traces.plot import plot_trace
from specsim.traces.schema import make_trace
from specsim.traces.stats import nice_window, prefix_reuse, rate_over_time, trace_stats
from specsim.traces.workload import build_workload

SOURCE = {
    "synthetic": {
        "arrival": {"process": "gamma", "rate": 4.0, "cv": 2.5},
        "requests": 20_000,
        "prompt_tokens": {"distribution": "lognormal", "median": 900, "sigma": 0.9},
        "output_tokens": {"distribution": "lognormal", "median": 150, "sigma": 0.7},
    }
}


@pytest.fixture(scope="module")
def source_trace() -> pd.DataFrame:
    return build_workload(SOURCE, Path("."), 21)


def write_generic(df: pd.DataFrame, path: Path) -> Path:
    df[["arrival_s", "prompt_tokens", "output_tokens"]].to_csv(path, index=False)
    return path


def test_stats_on_a_known_trace():
    df = make_trace(
        [0.0, 1.0, 2.0, 4.0],
        [10, 20, 30, 40],
        [1, 2, 3, 4],
        "mine",
        prefix_block_ids=np.array([(0, 1), (0, 2), (3,), ()] + [None], dtype=object)[:4],
    )
    stats = trace_stats(df, window_s=2.0)
    assert stats["requests"] == 4
    assert stats["duration_s"] == 4.0
    assert stats["mean_rate"] == pytest.approx(0.75)
    gaps = np.array([1.0, 1.0, 2.0])
    assert stats["interarrival_cv"] == pytest.approx(gaps.std() / gaps.mean())
    assert stats["prompt_tokens"]["p50"] == 25 and stats["prompt_tokens"]["mean"] == 25
    assert stats["output_tokens"]["max"] == 4
    assert stats["prefix_blocks"] == 5
    assert stats["prefix_reuse_fraction"] == pytest.approx(0.2)
    assert stats["rate_over_time"]["rate"] == [1.0, 1.0]
    json.dumps(stats)


def test_prefix_reuse_counts_repeats_of_earlier_blocks():
    df = make_trace(
        [0, 1, 2],
        [1, 1, 1],
        [1, 1, 1],
        "x",
        prefix_block_ids=np.array([(1, 2, 3), (1, 2, 4), (1, 5, 6)] + [()], dtype=object)[:3],
    )
    assert prefix_reuse(df) == (9, pytest.approx(3 / 9))


def test_rate_over_time_does_not_dilute_the_last_window():
    df = make_trace(np.linspace(0, 159.9, 1600), np.ones(1600), np.ones(1600), "x")
    rot = rate_over_time(df, window_s=100)
    assert rot["rate"].tolist() == pytest.approx([10.0, 10.0], rel=0.01)
    assert nice_window(3600) == 100 and nice_window(50) == 1


def test_plot_writes_a_png(source_trace, tmp_path):
    out = plot_trace(source_trace, trace_stats(source_trace), tmp_path / "t.png", title="synthetic")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.stat().st_size > 20_000


@pytest.mark.parametrize("lengths", ["empirical", "lognormal"])
@pytest.mark.parametrize("arrival", ["gamma", "curve"])
def test_fit_reproduces_rate_cv_and_quantiles(source_trace, lengths, arrival):
    want = trace_stats(source_trace)
    section = fit_synthetic(source_trace, arrival=arrival, lengths=lengths)
    got = trace_stats(build_workload(section, Path("."), 5))
    assert got["requests"] == want["requests"]
    assert got["mean_rate"] == pytest.approx(want["mean_rate"], rel=0.05)
    assert got["interarrival_cv"] == pytest.approx(want["interarrival_cv"], rel=0.1)
    for column in ("prompt_tokens", "output_tokens"):
        for q in ("p50", "p90"):
            assert got[column][q] == pytest.approx(want[column][q], rel=0.05)


def test_fit_of_a_poisson_trace_says_poisson():
    df = build_workload(
        {
            "synthetic": {
                "arrival": {"process": "poisson", "rate": 2},
                "requests": 20_000,
                "prompt_tokens": 5,
                "output_tokens": 5,
            }
        },
        Path("."),
        1,
    )
    assert fit_synthetic(df)["synthetic"]["arrival"]["process"] == "poisson"


def test_fit_errors(source_trace):
    with pytest.raises(TraceError, match="at least two requests"):
        fit_synthetic(source_trace.iloc[:1])
    with pytest.raises(TraceError, match="length model must be one of"):
        fit_synthetic(source_trace, lengths="normal")


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specsim")
    add_trace_commands(parser.add_subparsers(dest="command", required=True))
    return parser


def test_cli_stats_json_and_png(source_trace, tmp_path, capsys):
    path = write_generic(source_trace, tmp_path / "t.csv")
    args = make_parser().parse_args(
        ["trace", "stats", str(path), "--json", "--png", str(tmp_path / "p.png")]
    )
    assert args.func(args) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["requests"] == len(source_trace) and stats["format"] == "generic"
    assert (tmp_path / "p.png").stat().st_size > 0


def test_cli_stats_tables(source_trace, tmp_path, capsys):
    path = write_generic(source_trace, tmp_path / "t.csv")
    assert main(["trace", "stats", str(path)]) == 0
    out = capsys.readouterr().out
    assert "inter-arrival CV" in out and "p99" in out and "20,000" in out


def test_cli_fit_writes_a_section_build_workload_accepts(source_trace, tmp_path, capsys):
    path = write_generic(source_trace, tmp_path / "t.csv")
    out = tmp_path / "spec.yaml"
    assert main(["trace", "fit", str(path), "--out", str(out)]) == 0
    section = yaml.safe_load(out.read_text())["workload"]
    df = build_workload(section, tmp_path, 0)
    assert len(df) == len(source_trace)
    assert main(["trace", "fit", str(path), "--lengths", "lognormal", "--arrival", "curve"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["workload"]["synthetic"]["arrival"]["process"] == "diurnal"


def test_cli_reports_trace_errors_in_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("arrival_s,prompt_tokens,output_tokens\n0,5,oops\n")
    assert main(["trace", "stats", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == f"specsim: error: {bad} line 2: output_tokens: expected an integer, got 'oops'"
    )


def test_stats_of_a_single_request():
    stats = trace_stats(make_trace([0.0], [5], [5], "one"))
    assert stats["requests"] == 1 and stats["mean_rate"] == 0.0
    assert stats["rate_over_time"]["rate"] == [1.0]
