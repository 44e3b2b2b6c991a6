"""Bounds before work (issue 24): grids, flags, tensor parallelism, arrivals, the report.

The grid cases run ``specsim`` in a subprocess whose address space is capped at 500 MB
(``resource.setrlimit``): a grid that were listed, validated or journalled before being
refused would die of a MemoryError there (a traceback, not the one line asserted).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specsim import flags, limits
from specsim.errors import ScenarioError
from specsim.simulator.cli import main
from specsim.simulator.planning import bounds

REPO = Path(__file__).resolve().parents[1]
CHAT = REPO / "scenarios" / "chat.yaml"
CAP_BYTES = 500 * 1024**2


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CAP_BYTES, CAP_BYTES))


def _specsim_capped(*argv: str, cwd: Path | None = None) -> tuple[int, str]:
    env = {**os.environ, "SPECSIM_MEMORY_LIMIT_GB": "4"}
    r = subprocess.run([sys.executable, "-m", "specsim.simulator.cli", *argv], cwd=cwd,
                       env=env, preexec_fn=_capped, capture_output=True, text=True,
                       timeout=120)
    return r.returncode, r.stderr


def _one_error(rc: int, err: str) -> str:
    lines = err.splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("specsim: error: "), (rc, err)
    assert "Traceback" not in err
    return lines[0]


def _run_main(argv: list[str]) -> tuple[int, str]:
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            rc = main(argv)
        except SystemExit as exc:  # argparse refusing a flag
            rc = exc.code
    return rc, err.getvalue()


def _values(n: int, start: int = 1) -> str:
    return ",".join(str(i) for i in range(start, start + n))


# ---------------------------------------------------------------------------- grids
def test_sweep_of_a_hundred_million_seeds_is_refused_before_listing_them():
    line = _one_error(*_specsim_capped("sweep", str(CHAT), "--seeds", "100000000"))
    assert "1 point x 100,000,000 seed(s) = 100,000,000 runs" in line
    assert "GB of memory (~32 KB per run's row" in line and "SPECSIM_MEMORY_LIMIT_GB" in line


def test_sweep_of_five_million_runs_is_refused_before_validating_them():
    line = _one_error(*_specsim_capped(
        "sweep", str(CHAT), "--set", f"speculation.k={_values(5, 0)}",
        "--set", f"workload.synthetic.arrival.rate={_values(10_000)}", "--seeds", "100"))
    assert "5 x 10,000 x 100 seed(s) = 5,000,000 runs" in line
    assert "60,005 validations" in line  # the per-value and per-point checks were counted


def test_plan_space_of_five_million_configurations_is_refused(tmp_path):
    space = {"speculation.k": list(range(5)), "scheduler.max_batch": list(range(1, 10_001)),
             "workload.seed": list(range(100))}
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(space))
    line = _one_error(*_specsim_capped("plan", str(CHAT), "--qps", "1", "--slo",
                                       "tpot_p99=0.1", "--space", "space.yaml", cwd=tmp_path))
    assert "5,000,000 configuration(s) x up to 11 probes = 55,000,000 runs" in line
    assert "--yes" in line


def test_plan_at_an_absurd_load_is_refused_for_memory():
    line = _one_error(*_specsim_capped("plan", str(CHAT), "--qps", "1e9", "--slo",
                                       "tpot_p99=0.1"))
    assert "a probe at --qps 1e+09 simulates 30,000,000,000" in line
    assert "more than the 4 GB allowed by SPECSIM_MEMORY_LIMIT_GB" in line


def _small_chat() -> dict:
    data = yaml.safe_load(CHAT.read_text())
    data["workload"]["synthetic"]["requests"] = 20
    return data


def test_a_grid_just_under_the_cap_is_estimated_and_accepted(monkeypatch):
    from specsim.simulator.planning.sweep import check_size

    monkeypatch.setenv(limits.ENV, "8")
    grid = {"workload.synthetic.arrival.rate": list(range(1, 1001)),
            "speculation.k": list(range(10))}
    check_size(_small_chat(), grid, False, seeds=10, jobs=2)  # 100,000 runs: accepted
    with pytest.raises(ScenarioError, match=r"110,000 runs, .* more than the 100,000 runs "
                                            r"allowed without --yes"):
        check_size(_small_chat(), grid, False, seeds=11, jobs=2)
    check_size(_small_chat(), grid, False, seeds=11, jobs=2, yes=True)


def test_estimates_say_what_they_counted():
    est = bounds.sweep_estimate([3, 4], False, seeds=2, jobs=2, requests_per_run=100)
    assert (est.runs, est.counted) == (24, "3 x 4 x 2 seed(s)")
    text = est.describe()
    assert "19 validations" in text and "100 requests" in text and "2 process(es)" in text
    zipped = bounds.sweep_estimate([5, 5], True, seeds=3, jobs=1, requests_per_run=10)
    assert (zipped.runs, zipped.counted) == (15, "5 zipped points x 3 seed(s)")
    plan = bounds.plan_estimate(2, qps=10.0, requests=300, duration_s=30.0, rel_tol=0.1)
    assert plan.runs == 2 * 11  # 7 growth probes, 3 bisection probes, the operating point
    assert "a probe at --qps 10 simulates 300" in plan.describe()


def test_sweep_memory_counts_point_zeros_workers(monkeypatch):
    from specsim.simulator.planning.sweep import check_size

    plain = bounds.sweep_estimate([1], False, seeds=1, jobs=2, requests_per_run=10)
    fleet = bounds.sweep_estimate([1], False, seeds=1, jobs=2, requests_per_run=10,
                                  fleet_bytes=10**9)
    assert fleet.bytes - plain.bytes == 10**9  # one fleet per process running (1 run here)
    monkeypatch.setenv(limits.ENV, "1.5")  # 100,000 workers: ~1 GB each of two processes
    with pytest.raises(ScenarioError, match="requests and workers"):
        check_size(_small_chat(), {"hardware.count": [100_000]}, False, seeds=2, jobs=2)


def test_time_past_the_limit_needs_yes(monkeypatch):
    monkeypatch.setenv(limits.ENV, "100")
    est = bounds.sweep_estimate([100], False, seeds=100, jobs=1, requests_per_run=10**5)
    with pytest.raises(ScenarioError, match=r"longer than the 24 h allowed without --yes"):
        bounds.check(est)
    bounds.check(est, yes=True)


def test_memory_past_the_budget_is_refused_even_with_yes(monkeypatch):
    monkeypatch.setenv(limits.ENV, "1")
    est = bounds.sweep_estimate([1000], False, seeds=100, jobs=1, requests_per_run=10)
    with pytest.raises(ScenarioError, match="more than the 1 GB allowed by"):
        bounds.check(est, yes=True)


# ---------------------------------------------------------------------------- flags
BAD = ["0", "-1", "nan", "inf", "-inf", "abc", "", "1e400"]
FLAG_CASES = [
    (["plan", "x.yaml", "--slo", "tpot_p99=1", "--qps", "1", "--tolerance"], "--tolerance"),
    (["plan", "x.yaml", "--slo", "tpot_p99=1", "--qps"], "--qps"),
    (["plan", "x.yaml", "--qps", "1", "--requests"], "--requests"),
    (["plan", "x.yaml", "--qps", "1", "--duration"], "--duration"),
    (["sweep", "x.yaml", "--seeds"], "--seeds"),
    (["sweep", "x.yaml", "--jobs"], "--jobs"),
    (["calibrate", "--quick", "--threads"], "--threads"),
    (["replay", "x.csv", "--tp"], "--tp"),
    (["replay", "x.csv", "--limit"], "--limit"),
    (["acceptance", "import", "x.txt", "--from", "prometheus", "--out", "p.yaml", "--k"],
     "--k"),
    (["trace", "stats", "x.csv", "--window"], "--window"),
    (["trace", "fit", "x.csv", "--window"], "--window"),
]


@pytest.mark.parametrize("argv,flag", FLAG_CASES, ids=[f"{a[0]} {f}" for a, f in FLAG_CASES])
def test_every_numeric_flag_refuses_nonsense_on_one_line(argv, flag):
    for bad in BAD:
        line = _one_error(*_run_main([*argv, bad]))
        assert f"argument {flag}: expected " in line, line


def test_run_seed_is_checked_like_the_scenario_key():
    line = _one_error(*_run_main(["run", "x.yaml", "--seed", "-1"]))
    assert "argument --seed: expected a seed (an integer) from 0" in line


def test_plan_tolerance_range_and_good_values():
    assert flags.tolerance("0.05") == 0.05
    for bad in ("0", "nan", "-1", "1.5", "0.0001"):
        with pytest.raises(Exception, match="expected a ratio from 0.001 to 1"):
            flags.tolerance(bad)
    assert flags.positive_int("1_000") == 1000


def test_calibrate_threads_minus_one_is_one_line_not_a_traceback():
    line = _one_error(*_run_main(["calibrate", "--quick", "--threads", "-1"]))
    assert "argument --threads: expected an integer from 1 to 1,024, got '-1'" in line


# ---------------------------------------------------------------------------- plan space
def _plan(tmp_path: Path, space_text: str | bytes) -> str:
    path = tmp_path / "space.yaml"
    if isinstance(space_text, bytes):
        path.write_bytes(space_text)
    else:
        path.write_text(space_text)
    return _one_error(*_run_main(["plan", str(CHAT), "--qps", "1", "--slo", "tpot_p99=0.1",
                                  "--space", str(path), "--quiet"]))


@pytest.mark.parametrize("text,expected", [
    ("a: [1\n", "not valid YAML (line 2)"),
    (b"\xff\xfe\x00", "not valid YAML"),
    ("[1, 2]\n", "expected a mapping of scenario keys to lists of values, got [1, 2]"),
    ("speculation.k: 3\n", "--space speculation.k: expected a non-empty list of values, got 3"),
    ("speculation.k: []\n", "expected a non-empty list"),
    ("hardware.bogus: [1, 2]\n", "--space hardware.bogus=1: hardware.bogus: unknown key"),
    ("speculation.k: [2, x]\n", "--space speculation.k='x': speculation.k: expected an integer"),
])
def test_plan_space_refused_before_any_probe(tmp_path, text, expected):
    assert expected in _plan(tmp_path, text)


def test_plan_space_file_missing(tmp_path):
    line = _one_error(*_run_main(["plan", str(CHAT), "--qps", "1", "--slo", "tpot_p99=0.1",
                                  "--space", str(tmp_path / "nope.yaml")]))
    assert "cannot be read" in line


# ---------------------------------------------------------------------------- shapes
def test_tensor_parallel_must_split_the_heads():
    limits.check_tensor_parallel(8, 32, 8, "m")
    limits.check_tensor_parallel(16, 32, 8, "m")  # each KV head copied to 2 devices
    limits.check_tensor_parallel(1, 7, 1, "m")
    with pytest.raises(ScenarioError, match=r"hardware.tensor_parallel: m has 32 attention "
                                            r"heads, which 3 devices cannot split evenly; "
                                            r"expected a divisor of 32 \(1, 2, 4, 8, 16, 32\)"):
        limits.check_tensor_parallel(3, 32, 8, "m")
    with pytest.raises(ScenarioError, match="12 KV heads, which 8 devices"):
        limits.check_tensor_parallel(8, 96, 12, "m")


@pytest.mark.parametrize("tp", ["3", "1000000"])
def test_validate_refuses_a_tensor_parallel_the_model_cannot_use(tp):
    line = _one_error(*_run_main(["validate", str(CHAT), "--set", f"hardware.count={tp}",
                                  "--set", f"hardware.tensor_parallel={tp}"]))
    assert "hardware.tensor_parallel: Qwen3-8B has 32 attention heads" in line


def test_worker_estimate_counts_prefix_cache_and_tiers(monkeypatch):
    assert limits.worker_bytes() == limits.WORKER_BYTES
    assert limits.worker_bytes(prefix_cache=True, tiers=2) == (
        limits.WORKER_BYTES + limits.PREFIX_CACHE_BYTES + 2 * limits.TIER_BYTES)
    monkeypatch.setenv(limits.ENV, "1")
    limits.check_workers(50_000)  # ~0.5 GB
    with pytest.raises(ScenarioError, match=r"1,000,000 workers need ~1[0-9.]+ GB of memory "
                                            r"\(~10 KB each \+ ~4 KB of prefix cache \+ ~1 KB "
                                            r"per KV tier x 2\)"):
        limits.check_workers(1_000_000, prefix_cache=True, tiers=2)


# ---------------------------------------------------------------------------- arrivals
def test_arrival_beyond_the_bound_is_refused_naming_the_row(tmp_path):
    path = tmp_path / "far.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,10\n1e300,10,10\n")
    line = _one_error(*_run_main(["trace", "stats", str(path)]))
    assert "row 1: arrival_s: expected a number at most 1e+08" in line
    assert "got 1e+300" in line


def test_arrival_at_the_bound_is_accepted():
    from specsim.traces.schema import make_trace

    df = make_trace([0.0, limits.MAX_ARRIVAL_S], [10, 10], [10, 10], "far")
    assert df["arrival_s"].iloc[-1] == limits.MAX_ARRIVAL_S


# ---------------------------------------------------------------------------- report
@pytest.mark.parametrize("emptied", ["{}", '{"scenario": "x"}', "[]"])
def test_report_on_an_emptied_metrics_json_leaves_the_report(tmp_path, emptied):
    out = tmp_path / "run"
    rc, err = _run_main(["run", str(CHAT), "--set", "workload.synthetic.requests=20",
                         "--quiet", "--no-plots", "--out", str(out)])
    assert rc == 0, err
    before = (out / "report.md").read_bytes()
    (out / "metrics.json").write_text(emptied)
    line = _one_error(*_run_main(["report", str(out)]))
    assert "metrics.json" in line
    assert (out / "report.md").read_bytes() == before
    assert json.loads((out / "metrics.json").read_text()) == json.loads(emptied)


# ---------------------------------------------------------------------------- workers
def test_a_million_workers_is_refused_by_the_count_even_when_memory_fits(monkeypatch):
    monkeypatch.setenv(limits.ENV, "1000")  # 1 TB: the memory estimate lets it through
    monkeypatch.delenv(limits.WORKERS_ENV, raising=False)
    limits.check_workers(limits.MAX_WORKERS)  # at the cap: allowed
    with pytest.raises(ScenarioError, match=r"^hardware.count: 1,000,000 devices -> 1,000,000 "
                                            r"workers, more than the 100,000 one run simulates "
                                            r"\(the default, assumed\).*set "
                                            r"SPECSIM_MAX_WORKERS higher"):
        limits.check_workers(1_000_000, devices=1_000_000)
    monkeypatch.setenv(limits.WORKERS_ENV, "2_000_000")
    limits.check_workers(1_000_000)
    monkeypatch.setenv(limits.WORKERS_ENV, "-1")
    with pytest.raises(ScenarioError, match="SPECSIM_MAX_WORKERS: expected a positive whole"):
        limits.check_workers(1)


def test_a_worker_count_past_the_cap_is_one_line_before_building_anything():
    # 200,000 workers: ~2 GB, inside the 4 GB budget, so the count is what refuses it
    rc, err = _specsim_capped("validate", str(CHAT), "--set", "hardware.count=200000",
                              "--set", "hardware.tensor_parallel=1")
    line = _one_error(rc, err)
    assert "hardware.count" in line and "SPECSIM_MAX_WORKERS" in line


def test_tensor_parallel_must_split_linear_attention_heads():
    limits.check_tensor_parallel(4, 32, 4, "m", linear_heads=(16, 32))
    with pytest.raises(ScenarioError, match="linear-attention layers have 6 key and 12 value"):
        limits.check_tensor_parallel(4, 32, 4, "m", linear_heads=(6, 12))
