"""``specsim replay``: a measured run's exact arrivals and token counts through the simulator
with its engine settings, predicted vs measured per stage; one-line errors for bad input;
and the fidelity benchmark over the real runs (skipped when ../shared/data is absent)."""

from __future__ import annotations

import gzip
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsim.simulator.cli import main
from specsim.simulator.validation.measured import (
    decoded_tokens,
    flag_miscounts,
    load_csv,
    load_vllm_run,
)
from specsim.simulator.validation.replay import load_measured, replay
from specsim.traces.errors import TraceError
from tests.conftest import REPO

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
RUNS = DATA / "vllm_runs"
REAL = RUNS / "20260217-155451-llama-2-7b-tp1-codegen.json.gz"

LLAMA2_7B = {"num_layers": 32, "hidden_dim": 4096, "num_heads": 32, "num_kv_heads": 32,
             "intermediate_dim": 11008, "num_local_experts": 0, "num_experts_per_tok": 0,
             "vocab_size": 32000}


def _one_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("specsim: error: "), err
    assert "Traceback" not in err
    return lines[0]


def _real_data() -> None:
    if not REAL.is_file():
        pytest.skip(f"{RUNS} is absent (a fresh clone has no ../shared/data): real-run replay "
                    "skipped")


# ------------------------------------------------------------------ a synthetic run


def write_run(folder: Path, name: str = "20260101-000000-tiny-tp1-test", n: int = 40,
              seed: int = 0, miscount: int | None = None, stages: bool = True,
              period: int | None = None) -> Path:
    """A tiny run in the vllm_runs format: two stages (2 then 4 req/s, 10 s each);
    ``period``: the load generator cycles through that many prompts (request i and i + N
    send the same prompt, as inference-perf's shared_prefix generator does)."""
    rng = np.random.default_rng(seed)
    n0 = n // 2
    arrivals = np.concatenate([np.sort(rng.uniform(0, 10, n0)),
                               np.sort(rng.uniform(10, 20, n - n0))])
    arrivals -= arrivals[0]
    us = np.round(arrivals * 1e6).astype(int)
    inp = rng.integers(50, 400, n)
    if period is not None:
        inp = inp[np.arange(n) % period]
    out = rng.integers(20, 120, n)
    ttft = rng.uniform(0.02, 0.06, n)
    e2e = ttft + (out - 1) * 0.008
    if miscount is not None:  # recorded far shorter than what was decoded
        out[miscount] = 3
    reqs = [{"index": i, "arrival_time_us": int(us[i]), "input_tokens": int(inp[i]),
             "output_tokens": int(out[i]), "prefix_group": "", "has_error": False}
            for i in range(n)]
    doc = {"experiment": name, "model_id": "meta-llama/Llama-2-7b-hf", "model_short": "tiny",
           "config": {"tensor_parallelism": 1, "max_num_seqs": 8, "max_num_batched_tokens": 512,
                      "kv_blocks_total_gpu": 3000, "block_size": 16},
           "model_config": LLAMA2_7B, "requests": reqs}
    gt = [{"index": i, "has_error": False, "e2e_s": float(e2e[i]), "ttft_s": float(ttft[i])}
          for i in range(n)]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh)
    with gzip.open(folder / f"{name}_ground_truth.json.gz", "wt") as fh:
        json.dump(gt, fh)
    if stages:
        rows = [{"experiment": name, "stage": "0", "model": "meta-llama/Llama-2-7b-hf",
                 "gpu": "H100-80GB-SXM", "rate_rps": 2, "stage_duration_s": 10,
                 "request_count_success": n0, "request_count_failed": 0, "tpot_mean_ms": 4.0,
                 "itl_p50_ms": 0.03},
                {"experiment": name, "stage": "1", "model": "meta-llama/Llama-2-7b-hf",
                 "gpu": "H100-80GB-SXM", "rate_rps": 4, "stage_duration_s": 10,
                 "request_count_success": n - n0, "request_count_failed": 0,
                 "tpot_mean_ms": 4.0, "itl_p50_ms": 0.03}]
        pd.DataFrame(rows).to_csv(folder / "measured.csv", index=False)
    return path


def test_synthetic_run_replays_exact_arrivals_and_tokens(tmp_path):
    path = write_run(tmp_path)
    doc = json.loads(gzip.open(path, "rt").read())
    rep = replay(load_measured(path))
    sim = rep.result.requests
    want_arrival = np.array([r["arrival_time_us"] for r in doc["requests"]]) / 1e6
    assert np.array_equal(sim["arrival_s"].to_numpy(), want_arrival)
    assert np.array_equal(sim["prompt_tokens"].to_numpy(),
                          [r["input_tokens"] for r in doc["requests"]])
    assert np.array_equal(sim["output_tokens_requested"].to_numpy(),
                          [r["output_tokens"] for r in doc["requests"]])
    assert (sim["status"] == "completed").all()
    assert np.array_equal(sim["output_tokens"].to_numpy(), sim["output_tokens_requested"])
    # the run's engine settings, speculation off, its KV block count
    m = rep.result.metrics
    assert m["kv_blocks_per_worker"] == 3000
    assert m["speculation"]["method"] == "none"
    sched = rep.scenario["scheduler"]
    assert (sched["max_batch"], sched["token_budget"], sched["chunked_prefill"],
            sched["block_size"]) == (8, 512, True, 16)
    assert m["model"] == "Llama-2-7B" and m["fleet"]["accelerator"] == "H100-SXM"
    # stages from measured.csv: the boundary at 10 s
    assert [s.name for s in rep.run.stages] == ["0", "1"]
    assert (rep.requests["stage"] == "0").sum() == 20
    comp = rep.comparison
    assert set(comp["scope"]) == {"0", "1", "all"}
    assert set(comp["metric"]) == {"TTFT", "TPOT", "E2E", "throughput", "ITL"}
    # measured TPOT is the ground truth's (e2e - ttft) / (output - 1)
    gt = json.loads(gzip.open(tmp_path / (path.name[:-8] + "_ground_truth.json.gz"), "rt").read())
    tpot = [(g["e2e_s"] - g["ttft_s"]) / (r["output_tokens"] - 1)
            for g, r in zip(gt, doc["requests"], strict=True)]
    row = comp[(comp.scope == "all") & (comp.subset == "all") & (comp.metric == "TPOT")
               & (comp.stat == "mean")]
    assert float(row.measured.iloc[0]) == pytest.approx(np.mean(tpot) * 1e3, rel=1e-9)
    pred = comp[(comp.metric == "E2E") & (comp.stat == "mean") & (comp.scope == "all")
                & (comp.subset == "all")]
    assert float(pred.predicted.iloc[0]) == pytest.approx(sim["e2e_s"].mean(), rel=1e-9)


def test_repeated_prompts_are_served_from_the_prefix_cache(tmp_path):
    """A run whose prompts repeat every N requests is replayed with vLLM v1's default prefix
    caching and prompt i mod N's keys: each repeat finds its prompt's full blocks cached (a
    first sending finds none), TTFT falls, and the note says so; a base scenario that turns
    prefix caching off prices every prompt again."""
    path = write_run(tmp_path, n=80, period=10)
    run = load_measured(path)
    from specsim.simulator.validation.replay import prompt_repeats, replay_trace

    assert prompt_repeats(run) == 10
    keys = replay_trace(run)["prefix_block_ids"]
    assert keys[3] == keys[13] == (7, 8) and keys[3] != keys[4]
    rep = replay(run)
    assert rep.scenario["kv_cache"]["prefix_cache"] is True
    assert any("repeat every 10 requests" in n for n in rep.notes)
    hits = rep.result.requests["prefix_hit_tokens"].to_numpy()
    assert (hits[:10] == 0).all() and (hits[10:] > 0).all()
    off = tmp_path / "off.yaml"
    off.write_text("engine: {enable_prefix_caching: false}\n")
    plain = replay(run, off)
    assert "prefix_hit_tokens" not in plain.result.requests  # no prefix cache at all
    assert plain.result.requests["ttft_s"].mean() > rep.result.requests["ttft_s"].mean()
    assert prompt_repeats(load_measured(write_run(tmp_path / "b"))) is None  # random prompts


def test_replay_command_writes_its_outputs(tmp_path, capsys):
    path = write_run(tmp_path / "data")
    out = tmp_path / "out"
    assert main(["replay", str(path), "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr()
    assert "TPOT (ms)" in printed.out and "measured" in printed.out
    assert "inference-perf" in printed.err  # the two-events-per-token note
    for name in ("replay.csv", "replay.json", "replay.png", "metrics.json", "requests.csv",
                 "iterations.parquet", "report.md", ".specsim-output"):
        assert (out / name).is_file(), name
    table = pd.read_csv(out / "replay.csv")
    assert list(table.columns) == ["scope", "subset", "metric", "stat", "unit", "n",
                                   "predicted", "measured", "error_pct"]
    doc = json.loads((out / "replay.json").read_text())
    assert doc["engine"]["num_gpu_blocks_override"] == 3000
    assert doc["kv_blocks_per_worker"] == 3000
    assert [s["name"] for s in doc["stages"]] == ["0", "1"]
    assert "two stream events per token" in doc["definitions"]["tpot"]
    assert (out / "replay.png").read_bytes()[:4] == b"\x89PNG"
    # an occupied folder is refused before anything is simulated; nothing is touched
    before = sorted(p.name for p in out.iterdir())
    assert main(["replay", str(path), "--out", str(out), "--quiet"]) == 2
    assert "previous specsim output" in _one_error(capsys)
    assert sorted(p.name for p in out.iterdir()) == before


def test_force_replaces_a_previous_replay(tmp_path):

    path = write_run(tmp_path / "data")
    out = tmp_path / "out"
    assert main(["replay", str(path), "--out", str(out), "--quiet", "--no-report"]) == 0
    assert main(["replay", str(path), "--out", str(out), "--quiet", "--no-report",
                 "--force"]) == 0
    assert (out / "replay.json").is_file()


def test_replay_flags_and_base_scenario(tmp_path):
    path = write_run(tmp_path)
    base = tmp_path / "base.yaml"
    base.write_text("engine: {max_num_seqs: 4}\nworkload: {synthetic: {requests: 3}}\n")
    rep = replay(load_measured(path), base, tp=2)
    assert rep.scenario["scheduler"]["max_batch"] == 4  # the base's, not the run's 8
    assert rep.result.metrics["fleet"]["tensor_parallel"] == 2
    assert rep.result.metrics["kv_blocks_per_worker"] != 3000  # TP differs: sized from memory
    assert any("KV block count" in n for n in rep.notes)
    assert any("workload is ignored" in n for n in rep.notes)
    assert len(rep.result.requests) == 40


def test_limit_and_miscount_flag(tmp_path):
    path = write_run(tmp_path, miscount=5)
    run = load_vllm_run(path)
    assert not run.requests["output_ok"].iloc[5]
    assert run.requests["output_ok"].drop(index=5).all()
    rep = replay(run, limit=12)
    assert len(rep.result.requests) == 12
    assert [s.name for s in rep.run.stages] == ["0"]
    assert any("first 12 of 40" in n for n in rep.notes)
    assert any("record fewer output tokens" in n for n in rep.notes)
    n_all = rep.comparison.query("subset == 'all' and metric == 'E2E' and stat == 'mean'").n
    n_ok = rep.comparison.query("subset == 'consistent' and metric == 'E2E' and stat == 'mean'").n
    assert int(n_all.iloc[0]) == 12 and int(n_ok.iloc[0]) == 11


def test_run_without_measured_csv_keeps_its_kv_blocks_with_hardware(tmp_path, capsys):
    """No measured.csv: the run names no GPU, so --hardware names the run's own and its KV
    block count is kept (a TP other than the run's still drops it)."""
    path = write_run(tmp_path / "data", stages=False)
    run = load_measured(path)
    assert run.hardware is None and [s.name for s in run.stages] == ["all"]
    rep = replay(run, hardware="H100-SXM")
    assert rep.result.metrics["kv_blocks_per_worker"] == 3000
    assert any("KV block count (3,000) is kept" in n and "H100-SXM" in n for n in rep.notes)
    assert (rep.result.requests["status"] == "completed").all()
    assert replay(run, hardware="H100-SXM", tp=2).result.metrics["kv_blocks_per_worker"] != 3000
    out = tmp_path / "out"
    assert main(["replay", str(path), "--hardware", "H100-SXM", "--out", str(out), "--quiet",
                 "--no-report"]) == 0
    doc = json.loads((out / "replay.json").read_text())
    assert doc["kv_blocks_per_worker"] == 3000 and doc["engine"]["num_gpu_blocks_override"] == 3000
    capsys.readouterr()
    assert main(["replay", str(path), "--quiet"]) == 2  # no GPU named anywhere: say so
    assert "pass --hardware NAME" in _one_error(capsys)


def _fail_requests(path: Path, rows: dict[int, dict]) -> None:
    """Give requests of a written run 0 tokens: ``rows``: index -> its ground truth entry
    (``has_error`` is set in both files)."""
    doc = json.loads(gzip.open(path, "rt").read())
    for i, entry in rows.items():
        doc["requests"][i].update(input_tokens=0, output_tokens=0, has_error=entry["has_error"])
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh)
    gt_path = path.with_name(path.name[:-8] + "_ground_truth.json.gz")
    gt = json.loads(gzip.open(gt_path, "rt").read())
    for i, entry in rows.items():
        gt[i] = {"index": i, **entry}
    with gzip.open(gt_path, "wt") as fh:
        json.dump(gt, fh)


def test_run_with_failed_requests_replays_them_and_leaves_them_out(tmp_path, capsys):
    """Failed requests (input_tokens 0, no TTFT or E2E) are replayed (0 tokens as 1), left
    out of the comparison, counted and reported; a request that did not fail still needs a
    prompt."""
    path = write_run(tmp_path / "data")
    _fail_requests(path, {3: {"has_error": True}, 30: {"has_error": True, "ttft_s": None,
                                                       "e2e_s": None}})
    run = load_measured(path)
    assert run.requests["has_error"].sum() == 2 and math.isnan(run.requests["ttft_s"].iloc[3])
    rep = replay(run)
    sim = rep.result.requests
    assert len(sim) == 40 and (sim["status"] == "completed").all()
    assert sim["prompt_tokens"].iloc[3] == 1 and sim["output_tokens_requested"].iloc[30] == 1
    for subset in ("all", "consistent"):
        n = rep.comparison.query(f"subset == '{subset}' and scope == 'all' and metric == 'E2E' "
                                 "and stat == 'mean'").n
        assert int(n.iloc[0]) == 38
    assert any(n.startswith("2 requests have has_error") for n in rep.notes)
    assert any("2 failed requests record 0 input tokens" in n for n in rep.notes)
    assert not any("record 0 output tokens" in n for n in rep.notes)
    out = tmp_path / "out"
    assert main(["replay", str(path), "--out", str(out), "--quiet", "--no-report"]) == 0
    doc = json.loads((out / "replay.json").read_text())
    assert doc["requests"] == 40 and doc["failed_requests"] == 2
    # a request that did not fail: 0 input tokens, or a missing TTFT, is still refused
    path = write_run(tmp_path / "data2")
    _fail_requests(path, {5: {"has_error": False}})
    capsys.readouterr()
    assert main(["replay", str(path), "--quiet"]) == 2
    assert "requests[5]: input_tokens: expected an integer >= 1, got 0" in _one_error(capsys)


def test_flag_miscounts_uses_neighbours():
    n = 200
    req = pd.DataFrame({"output_tokens": np.full(n, 250), "ttft_s": 0.05,
                        "e2e_s": 0.05 + 249 * 0.01, "has_error": False})
    req.loc[7, "output_tokens"] = 40  # decoded as long as the others: a miscount
    req.loc[9, "output_tokens"] = 1
    req.loc[11, "output_tokens"] = 1
    req.loc[11, "e2e_s"] = 0.05  # one token, no decode: consistent
    ok = flag_miscounts(req)
    assert not ok[7] and not ok[9] and ok[11] and ok.sum() == n - 2


def test_decoded_tokens_from_decode_time():
    """A miscounted request decodes the count its decode time implies at its neighbours'
    time per token (at least its recorded count, at most the run's longest consistent
    output); a consistent one keeps its recorded count."""
    n = 200
    req = pd.DataFrame({"output_tokens": np.full(n, 250), "ttft_s": 0.05,
                        "e2e_s": 0.05 + 249 * 0.01, "has_error": False})
    req.loc[7, "output_tokens"] = 40  # decoded as long as the others: 250 tokens
    req.loc[9, "output_tokens"] = 1
    req.loc[20, "output_tokens"] = 60
    req.loc[20, "e2e_s"] = 0.05 + 199 * 0.01  # decoded 200 tokens
    req.loc[30, "output_tokens"] = 100
    req.loc[30, "e2e_s"] = 0.05 + 999 * 0.01  # 1,000 implied: capped at the longest, 250
    req.loc[40, "has_error"] = True
    req.loc[40, "output_tokens"] = 0  # failed: kept as recorded
    dec = decoded_tokens(req)
    assert dec[7] == 250 and dec[9] == 250 and dec[20] == 200 and dec[30] == 250
    assert dec[40] == 0
    rest = np.setdiff1d(np.arange(n), [7, 9, 20, 30, 40])
    assert (dec[rest] == 250).all()


def test_miscounted_requests_decode_what_the_engine_decoded(tmp_path):
    """The replay decodes a miscounted request for the tokens its decode time implies (the
    engine's load), not its short recorded count; the comparison still measures its TPOT on
    the recorded count and leaves it out of the consistent rows."""
    path = write_run(tmp_path, miscount=5)
    run = load_vllm_run(path)
    req = run.requests
    assert req["output_tokens"].iloc[5] == 3 and not req["output_ok"].iloc[5]
    implied = int(round((req["e2e_s"].iloc[5] - req["ttft_s"].iloc[5]) / 0.008)) + 1
    assert implied > 3 and req["decoded_tokens"].iloc[5] == min(
        implied, int(req["output_tokens"][req["output_ok"]].max()))
    assert (req["decoded_tokens"].drop(index=5) == req["output_tokens"].drop(index=5)).all()
    rep = replay(run)
    assert rep.requests["predicted_output_tokens"].iloc[5] == req["decoded_tokens"].iloc[5]
    assert rep.requests["output_tokens"].iloc[5] == 3  # the comparison's recorded count
    assert any("replayed with the count their decode time implies" in n for n in rep.notes)


# ------------------------------------------------------------------ the generic CSV


def _csv(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "measured.csv"
    path.write_text(text)
    return path


GOOD = ("arrival_s,input_tokens,output_tokens,ttft_s,e2e_s,stage\n"
        "0.5,100,20,0.03,0.4,low\n"
        "0.0,120,30,0.04,0.6,low\n"
        "2.0,90,25,0.05,0.5,high\n"
        "2.25,300,40,0.06,0.9,high\n")


def test_generic_csv_replays_exactly(tmp_path, capsys):
    path = _csv(tmp_path, GOOD)
    base = tmp_path / "engine.yaml"
    base.write_text("engine: {kind: vllm, max_num_seqs: 4, max_num_batched_tokens: 256, "
                    "num_gpu_blocks_override: 500}\n")
    rep = replay(load_measured(path), base, model="Llama-2-7B", hardware="H100-SXM", tp=1)
    sim = rep.result.requests
    # sorted by arrival (stable), from 0 at the first arrival
    assert sim["arrival_s"].tolist() == [0.0, 0.5, 2.0, 2.25]
    assert sim["prompt_tokens"].tolist() == [120, 100, 90, 300]
    assert sim["output_tokens"].tolist() == [30, 20, 25, 40]
    assert rep.requests["index"].tolist() == [1, 0, 2, 3]
    assert [s.name for s in rep.run.stages] == ["low", "high"]
    assert rep.result.metrics["kv_blocks_per_worker"] == 500
    assert rep.scenario["scheduler"]["max_batch"] == 4
    out = tmp_path / "out"
    assert main(["replay", str(path), "--scenario", str(base), "--model", "Llama-2-7B",
                 "--hardware", "H100-SXM", "--out", str(out), "--quiet", "--no-report"]) == 0
    assert (out / "replay.csv").is_file() and not (out / "report.md").exists()
    capsys.readouterr()
    assert main(["replay", str(path), "--quiet"]) == 2  # no model, no hardware
    assert "pass --model NAME" in _one_error(capsys)


@pytest.mark.parametrize("text,expected", [
    (GOOD.replace("2.0,90,25", "2.0,90,abc"),
     "row 3 (line 4): output_tokens: expected an integer >= 1, got 'abc'"),
    (GOOD.replace("0.0,120,30,0.04,0.6", "0.0,120,30,0.04,0.01"),
     "row 2 (line 3): e2e_s: expected a time >= ttft_s (0.04), got '0.01'"),
    (GOOD.replace("0.5,100", "nan,100"), "row 1 (line 2): arrival_s: expected a finite number"),
    (GOOD.replace("2.25,300,40,0.06", "2.25,300,40,-1"),
     "row 4 (line 5): ttft_s: expected a finite number >= 0, got -1.0"),
    (GOOD.replace(",low\n", ",\n", 1), "row 1 (line 2): stage: expected a stage label, got ''"),
    (GOOD.replace("0.5,100,20,0.03,0.4,low", "0.5,100,20,0.03,0.4"),
     "row 1 (line 2): expected 6 fields, got 5"),
    (GOOD.replace("stage\n", "stgae\n"),
     "line 1: unknown column 'stgae' (did you mean 'stage'?"),
    (GOOD.replace("ttft_s,", ""), "missing column 'ttft_s'"),
    ("arrival_s,input_tokens,output_tokens,ttft_s,e2e_s\n", "no requests (only a header)"),
    ("", "empty file"),
    (GOOD.replace("0.0,120,30,0.04,0.6,low", "0.0,120,30,0.04,0.6,high"),
     "stage 'high' comes back after another stage"),
])
def test_bad_csv_rows_are_one_line(tmp_path, capsys, text, expected):
    path = _csv(tmp_path, text)
    assert main(["replay", str(path), "--model", "Llama-2-7B", "--hardware", "H100-SXM",
                 "--quiet"]) == 2
    line = _one_error(capsys)
    assert f"{path}" in line and expected in line, line


def test_bad_vllm_run_files_are_one_line(tmp_path, capsys):
    path = write_run(tmp_path)
    doc = json.loads(gzip.open(path, "rt").read())
    doc["requests"][2]["input_tokens"] = -4
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh)
    assert main(["replay", str(path), "--quiet"]) == 2
    line = _one_error(capsys)
    assert f"{path} requests[2]: input_tokens: expected an integer >= 1, got -4" in line
    gt_path = tmp_path / (path.name[:-8] + "_ground_truth.json.gz")
    path = write_run(tmp_path)
    gt = json.loads(gzip.open(gt_path, "rt").read())
    gt[3]["e2e_s"] = "soon"
    with gzip.open(gt_path, "wt") as fh:
        json.dump(gt, fh)
    assert main(["replay", str(path), "--quiet"]) == 2
    assert f"{gt_path} [3]: e2e_s: expected a finite number >= 0, got 'soon'" in _one_error(capsys)
    gt_path.unlink()
    assert main(["replay", str(path), "--quiet"]) == 2
    assert "its ground truth" in (line := _one_error(capsys)) and "is not next to it" in line
    (tmp_path / "x.txt").write_text("hello")
    assert main(["replay", str(tmp_path / "x.txt")]) == 2
    assert "expected a vllm_runs <run>.json.gz" in _one_error(capsys)
    assert main(["replay", str(tmp_path / "missing.json.gz")]) == 2
    assert "no such file" in _one_error(capsys)
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(b"\x1f\x8b not really gzip")
    assert main(["replay", str(bad)]) == 2
    assert "not a readable gzip file" in _one_error(capsys)


def test_generic_csv_loader_keeps_errors_out_of_the_comparison(tmp_path):
    text = ("arrival_s,input_tokens,output_tokens,ttft_s,e2e_s,has_error\n"
            "0,100,20,0.03,0.4,false\n1,100,20,,,true\n2,100,20,0.03,0.5,0\n")
    run = load_csv(_csv(tmp_path, text))
    assert run.requests["has_error"].tolist() == [False, True, False]
    assert math.isnan(run.requests["e2e_s"].iloc[1])
    rep = replay(run, model="Llama-2-7B", hardware="H100-SXM")
    n = rep.comparison.query("subset == 'all' and metric == 'E2E' and stat == 'mean'").n
    assert int(n.iloc[0]) == 2 and len(rep.result.requests) == 3
    with pytest.raises(TraceError, match="unknown column"):
        load_csv(_csv(tmp_path, "arrival,input_tokens\n"))


# ------------------------------------------------------------------ the real runs


def test_real_run_replays_exact_arrivals_and_tokens():
    _real_data()
    doc = json.loads(gzip.open(REAL, "rt").read())
    rep = replay(load_measured(REAL), limit=300)
    sim = rep.result.requests
    reqs = sorted(doc["requests"], key=lambda r: r["arrival_time_us"])[:300]
    t0 = reqs[0]["arrival_time_us"]
    assert np.array_equal(sim["arrival_s"].to_numpy(),
                          np.array([r["arrival_time_us"] - t0 for r in reqs]) / 1e6)
    assert np.array_equal(sim["prompt_tokens"].to_numpy(), [r["input_tokens"] for r in reqs])
    # a recorded 0 (the request did stream a first token) replays as 1; a miscounted one
    # (recorded short of its decode time) replays the count its decode time implies
    run = rep.run.requests
    ok = run["output_ok"].to_numpy()
    asked = sim["output_tokens_requested"].to_numpy()
    assert np.array_equal(asked[ok], [max(r["output_tokens"], 1)
                                      for r, good in zip(reqs, ok, strict=True) if good])
    assert (~ok).any() and (asked[~ok] > run["output_tokens"].to_numpy()[~ok]).all()
    m = rep.result.metrics
    assert m["kv_blocks_per_worker"] == doc["config"]["kv_blocks_total_gpu"] == 7462
    sched = rep.scenario["scheduler"]
    assert (sched["max_batch"], sched["token_budget"], sched["chunked_prefill"],
            sched["block_size"]) == (128, 2048, True, 16)
    assert m["speculation"]["method"] == "none"
    assert m["model"] == "Llama-2-7B" and m["fleet"]["tensor_parallel"] == 1
    assert (sim["status"] == "completed").all()
    assert not any("model_config differs" in n for n in rep.notes)


def test_real_stages_and_inference_perf_tpot():
    """The stage boundary is where the rate changes (measured.csv's durations), and
    inference-perf's TPOT is about half the ground truth's on consistent requests."""
    _real_data()
    run = load_measured(RUNS / "20260218-150304-codellama-34b-tp2-general.json.gz")
    assert [(s.name, s.start_s, s.end_s > 1200, s.rate) for s in run.stages] == [
        ("0", 0.0, False, 8.0), ("1", 600.0, True, 20.0)]
    counts = run.requests["stage"].value_counts()
    assert counts["0"] == 4800 and counts["1"] == 12000  # measured.csv's request counts
    rep_tpot = float(run.reported.query("stage == '0'")["tpot_mean_ms"].iloc[0])
    gt_tpot = run.requests.query("stage == '0'")["tpot_s"].mean() * 1e3
    assert gt_tpot / rep_tpot == pytest.approx(2.0, rel=0.05)


def test_fidelity_benchmark_runs_and_skips_without_data(tmp_path):
    script = REPO / "benchmarks" / "fidelity.py"
    out = subprocess.run([sys.executable, str(script), "--data", str(tmp_path / "none")],
                         capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0 and "is absent" in out.stdout
    _real_data()
    out = subprocess.run([sys.executable, str(script), "--limit", "100", "--runs",
                          "codellama-34b-tp2", "--jobs", "2"],
                         capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr
    for text in ("calibration profile:", "mean APE over all runs and stages", "E2E mean",
                 "TPOT mean", "TTFT mean", "E2E p99", "<= 8%", "<= 15%", "~12%", "~23%",
                 "codellama-34b-tp2-general", "codellama-34b-tp2-codegen", "wall time"):
        assert text in out.stdout, text
