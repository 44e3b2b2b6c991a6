"""`specsim trace fit` output pasted into a bundled scenario runs (issue 7).

The bundled acceptance profiles have per-class figures (chat, code, math, ...) and no
``default`` class, so a fitted section must carry ``class:`` (``--class NAME``) or say
how to add it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from specsim.errors import ScenarioError
from specsim.simulator.cluster.engine import run_scenario
from specsim.traces.cli import main
from specsim.traces.fit import CLASS_HINT, fit_synthetic
from specsim.traces.schema import make_trace

REPO = Path(__file__).resolve().parents[1]
N = 12  # requests in the synthesised trace: the pasted section replays this many


@pytest.fixture
def trace_csv(tmp_path) -> Path:
    rng = np.random.default_rng(5)
    df = make_trace(
        np.cumsum(rng.exponential(0.2, N)),
        rng.integers(20, 300, N),
        rng.integers(5, 60, N),
        "fuzz",
    )
    path = tmp_path / "trace.csv"
    df[["arrival_s", "prompt_tokens", "output_tokens"]].to_csv(path, index=False)
    return path


def _fit(path: Path, capsys, *extra: str) -> str:
    assert main(["trace", "fit", str(path), *extra]) == 0
    return capsys.readouterr().out


def _paste(text: str) -> dict:
    """scenarios/chat.yaml with its workload: replaced by the fitted one."""
    scenario = yaml.safe_load((REPO / "scenarios" / "chat.yaml").read_text())
    scenario["workload"] = yaml.safe_load(text)["workload"]
    return scenario


@pytest.mark.parametrize("arrival", ["gamma", "curve"])
def test_fit_with_class_pastes_into_chat_and_runs(trace_csv, capsys, arrival):
    text = _fit(trace_csv, capsys, "--class", "chat", "--arrival", arrival)
    assert "class: chat" in text and CLASS_HINT not in text
    result = run_scenario(_paste(text))
    assert result.metrics["requests_completed"] == N
    assert set(result.requests["status"]) == {"completed"}


def test_fit_without_class_says_what_to_add(trace_csv, capsys):
    text = _fit(trace_csv, capsys)
    assert text.endswith(CLASS_HINT)
    assert "# add `class: chat` (or code, math, ...)" in text
    scenario = _paste(text)
    # As the comment says: without a class, the profile has nothing for `default` ...
    with pytest.raises(ScenarioError, match="no acceptance given for workload class 'default'"):
        run_scenario(scenario)
    # ... and with the line it suggests (at the workload level, where the comment is) it runs.
    pasted = text.replace(CLASS_HINT, "  class: chat\n")
    assert run_scenario(_paste(pasted)).metrics["requests_completed"] == N


def test_fit_class_is_checked(trace_csv, capsys):
    assert main(["trace", "fit", str(trace_csv), "--class", " "]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "specsim: error: --class: expected a workload class name, e.g. chat"


def test_fit_synthetic_class_argument():
    df = make_trace([0.0, 1.0, 3.0], [5, 6, 7], [1, 2, 3], "t")
    assert fit_synthetic(df, workload_class="code")["class"] == "code"
    assert "class" not in fit_synthetic(df)


def test_fitted_cv_of_a_regular_trace_builds(tmp_path):
    """Equal gaps have CV 0, which the generator refuses: the fit writes a tiny one."""
    from specsim.traces.workload import build_workload

    df = make_trace(np.arange(10.0), [5] * 10, [5] * 10, "regular")
    for arrival in ("gamma", "curve"):
        section = fit_synthetic(df, arrival)
        assert len(build_workload(section, tmp_path, 0)) == 10


@pytest.mark.parametrize("window", ["0", "-1", "nan", "1e-9"])
def test_fit_and_stats_refuse_unusable_windows(trace_csv, capsys, window):
    for command in (["fit", "--arrival", "curve"], ["stats"]):
        argv = ["trace", command[0], str(trace_csv), *command[1:], "--window", window]
        try:  # 0, -1, nan: refused as the command line is read (argparse exits)
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
        assert code == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and err.startswith("specsim: error: ") \
            and "--window" in err, err
