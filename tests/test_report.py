"""report.md and its plots: links resolve, edge cases (no speculation, nothing completed,
no iterations, empty trace) still give a readable report, and assumed defaults are flagged."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pandas as pd
import pytest

from specsim.simulator.cluster.engine import run_scenario
from specsim.simulator.report.report import UNCALIBRATED_LINE, write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ALL_PLOTS = {"latency_cdf.png", "timeline.png", "acceptance.png", "iteration_time.png"}


def _trace(n: int, classes=("chat",), qps: float = 20.0, seed: int = 0) -> pd.DataFrame:
    r = np.random.default_rng(seed)
    return pd.DataFrame({
        "arrival_s": np.cumsum(r.exponential(1 / qps, n)), "request_id": np.arange(n),
        "session_id": -1, "turn": 0, "prompt_tokens": r.integers(100, 400, n),
        "output_tokens": r.integers(20, 120, n), "workload_class": r.choice(list(classes), n),
        "prefix_block_ids": [()] * n, "temperature": 0.0, "slo_tier": "standard"})


def _run(n: int = 150, spec: bool = True, simulation: dict | None = None,
         calibration: str | None = None, **kw):
    sc = {"model": "Llama-3.1-8B", "hardware": {"accelerator": "H100-SXM", "count": 1},
          "speculation": ({"method": "eagle3", "k": 4,
                           "acceptance": {"profile": "qwen3-8b-eagle3"}} if spec
                          else {"method": "none"}),
          "workload": {}, "slo": {"ttft_s": 1.0, "tpot_s": 0.05},
          "simulation": {"progress": False, **(simulation or {})}}
    if calibration:
        sc["calibration"] = calibration
    return run_scenario(sc, trace=_trace(n, **kw))


def _check_links(out) -> str:
    """report.md exists, every linked PNG exists and is a PNG, every PNG is linked."""
    text = (out / "report.md").read_text()
    linked = set(re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", text))
    on_disk = {p.name for p in out.glob("*.png")}
    assert linked == on_disk
    for name in on_disk:
        assert (out / name).read_bytes()[:8] == PNG_MAGIC
        assert (out / name).stat().st_size > 5000
    assert "could not draw" not in text
    return text


@pytest.fixture(scope="module")
def spec_result():
    return _run(classes=("chat", "code"))


def test_report_with_speculation(spec_result, tmp_path):
    write_report(spec_result, tmp_path)
    text = _check_links(tmp_path)
    assert {p.name for p in tmp_path.glob("*.png")} == ALL_PLOTS
    assert text.startswith("# specsim report")
    m = spec_result.metrics
    assert m["calibration"] == "H100-SXM"  # the bundled profile
    assert UNCALIBRATED_LINE not in text and "calibration profile **H100-SXM**" in text
    for needle in ("Llama-3.1-8B", "H100-SXM", "eagle3", "qwen3-8b-eagle3", "150 requests",
                   "TTFT (ms)", "TPOT (ms)", "USD / 1M output tokens", "J / output token",
                   "Assumed defaults", "## SLO attainment", "## Notes", "code", "chat"):
        assert needle in text, needle
    assert m["fleet"]["price_date"] in text


def test_calibrated_run_is_not_flagged(spec_result, tmp_path):
    m = dict(spec_result.metrics, calibration="h100-fit", notes=["a note worth reading"])
    res = dataclasses.replace(spec_result, metrics=m)
    write_report(res, tmp_path)
    text = _check_links(tmp_path)
    assert UNCALIBRATED_LINE not in text
    assert "h100-fit" in text
    assert "- a note worth reading" in text


def test_report_without_speculation(tmp_path):
    write_report(_run(spec=False), tmp_path)
    text = _check_links(tmp_path)
    assert {p.name for p in tmp_path.glob("*.png")} == ALL_PLOTS - {"acceptance.png"}
    assert "no speculation" in text
    assert "speculation is off" in text


def test_report_with_zero_completed_requests(tmp_path):
    res = _run(simulation={"horizon_s": 0.001}, calibration="uncalibrated")
    assert res.metrics["requests_completed"] == 0
    write_report(res, tmp_path)
    text = _check_links(tmp_path)
    assert "latency_cdf.png" not in {p.name for p in tmp_path.glob("*.png")}
    assert "no request completed" in text
    assert UNCALIBRATED_LINE in text


def test_report_without_iterations(tmp_path):
    res = _run(simulation={"record_iterations": False})
    assert res.iterations.empty
    write_report(res, tmp_path)
    text = _check_links(tmp_path)
    names = {p.name for p in tmp_path.glob("*.png")}
    assert "iteration_time.png" not in names
    assert {"latency_cdf.png", "timeline.png", "acceptance.png"} <= names
    assert "record_iterations" in text


def test_report_with_empty_trace(tmp_path):
    res = _run(n=0)
    write_report(res, tmp_path)
    text = _check_links(tmp_path)
    assert not list(tmp_path.glob("*.png"))
    assert "empty trace" in text


def test_large_run_draws_every_plot(spec_result, tmp_path):
    """100k requests and 200k iterations (synthetic tables): plots are downsampled, all drawn.

    Speed is measured in benchmarks/, not asserted here."""
    n, k = 100_000, 200_000
    r = np.random.default_rng(1)
    arrival = np.cumsum(r.exponential(0.01, n))
    ttft = r.gamma(2, 0.05, n)
    steps = r.integers(20, 200, n)
    acc = r.binomial(steps * 4, 0.4)
    req = pd.DataFrame({
        "request_id": np.arange(n), "workload_class": r.choice(["chat", "code", "math"], n),
        "status": "completed", "worker": r.integers(0, 8, n), "arrival_s": arrival,
        "first_token_s": arrival + ttft, "finish_s": arrival + ttft + steps * 0.01,
        "prompt_tokens": r.integers(100, 2000, n), "output_tokens_requested": acc + steps + 1,
        "output_tokens": acc + steps + 1, "accepted_tokens": acc, "drafted_tokens": steps * 4,
        "bonus_tokens": steps + 1, "steps": steps, "preemptions": 0, "ttft_s": ttft,
        "tpot_s": r.gamma(5, 0.002, n), "e2e_s": ttft + steps * 0.01})
    t_end = float(req["finish_s"].max())
    it = pd.DataFrame({
        "time_s": np.sort(r.uniform(0, t_end, k)), "worker": r.integers(0, 8, k),
        "batch_size": r.integers(1, 64, k), "decode_seqs": r.integers(1, 64, k),
        "prefill_seqs": r.integers(0, 2, k), "tokens": r.integers(1, 4000, k).astype(float),
        "drafted_tokens": r.integers(0, 256, k), "draft_time_s": r.uniform(1e-3, 3e-3, k),
        "verify_time_s": r.uniform(5e-3, 2e-2, k), "compute_util": r.uniform(0, 1, k),
        "memory_util": r.uniform(0, 1, k), "kv_blocks_used": r.integers(0, 20000, k)})
    m = dict(spec_result.metrics, requests_arrived=n, requests_completed=n,
             simulated_time_s=t_end)
    res = dataclasses.replace(spec_result, metrics=m, requests=req, iterations=it)
    write_report(res, tmp_path)
    _check_links(tmp_path)
    assert {p.name for p in tmp_path.glob("*.png")} == ALL_PLOTS


def test_a_pd_fleets_workers_are_labelled_by_pool():
    from specsim.simulator.metrics.run_metrics import RunMetrics
    from specsim.simulator.report.report import _worker_label

    m = RunMetrics.from_summary({"disaggregation": {"pools": {
        "prefill": {"worker_ids": [0, 1]}, "decode": {"worker_ids": [2, 3]}}}})
    assert [_worker_label(m, w) for w in (0, 3)] == ["worker 0 (prefill)", "worker 3 (decode)"]
    assert _worker_label(RunMetrics.from_summary({}), 1) == "worker 1"


def test_class_order_and_quantiles_are_pandas_bit_for_bit():
    """The class table is computed without pandas: its classes in value_counts' order (ties
    by first appearance, missing classes left out) and its p50 / p99 by the grouped linear
    interpolation pandas' ``groupby().quantile()`` gave, bit for bit, NaNs skipped."""
    from specsim.simulator.report.report import _by_count, _quantile

    r = np.random.default_rng(3)
    for trial in range(200):
        n = int(r.integers(1, 400))
        cls = np.array([f"c{i}" for i in r.integers(0, int(r.integers(1, 40)), n)], object)
        if trial % 3 == 0:
            cls[r.random(n) < 0.1] = np.nan
        assert _by_count(cls) == list(pd.Series(cls).value_counts().index)
        x = r.gamma(2.0, 0.05, n) * 10.0 ** r.integers(-3, 3)
        x[r.random(n) < 0.2] = np.nan
        grouped = pd.DataFrame({"c": cls, "x": x}).groupby("c")["x"].quantile([0.5, 0.99])
        for c in _by_count(cls):
            for q in (0.5, 0.99):
                want, got = grouped.loc[(c, q)], _quantile(x[cls == c], q)
                assert got == want or (np.isnan(got) and np.isnan(want)), (c, q)
