"""The command line: outputs, determinism, overrides, and one-line errors for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specsim.simulator.cli import main
from tests.conftest import REPO

CHAT = REPO / "scenarios" / "chat.yaml"
SMALL = ["--set", "workload.synthetic.requests=80", "--quiet"]


def run_cli(*args: str) -> int:
    return main([str(a) for a in args])


def test_run_writes_all_outputs(tmp_path):
    out = tmp_path / "out"
    assert run_cli("run", CHAT, "--out", out, *SMALL) == 0
    m = json.loads((out / "metrics.json").read_text())
    for key in ("requests_arrived", "requests_completed", "requests_rejected", "output_tokens",
                "ttft_s", "tpot_s", "itl_s", "e2e_s", "throughput_output_tokens_per_s",
                "goodput_requests_per_s", "mean_acceptance_length", "acceptance_rate",
                "draft_time_fraction", "verify_time_fraction", "kv_peak_utilization",
                "cost_usd_per_million_output_tokens", "energy_j_per_output_token",
                "simulated_time_s", "wall_time_s", "calibration"):
        assert key in m, key
    for key in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        assert set(m[key]) >= {"mean", "p50", "p90", "p99"}
    assert m["calibration"] == "H100-SXM" and m["hardware_calibrated"]  # bundled profile
    assert m["requests_completed"] == 80
    import pandas as pd
    req = pd.read_csv(out / "requests.csv")
    assert len(req) == 80
    for col in ("arrival_s", "first_token_s", "finish_s", "output_tokens", "accepted_tokens",
                "steps", "ttft_s", "tpot_s", "worker"):
        assert col in req
    it = pd.read_parquet(out / "iterations.parquet")  # the default log format
    for col in ("time_s", "worker", "batch_size", "tokens", "draft_time_s", "verify_time_s",
                "compute_util", "memory_util", "kv_blocks_used"):
        assert col in it
    assert it["draft_time_s"].sum() > 0


def _metrics_without_wall(out: Path) -> dict:
    m = json.loads((out / "metrics.json").read_text())
    m.pop("wall_time_s")
    return m


def test_same_seed_same_bytes_other_seed_differs(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    assert run_cli("run", CHAT, "--out", a, "--seed", "3", *SMALL) == 0
    # the repeats write no report (not compared; drawing it is most of a small run's time):
    # the results must not depend on that either
    assert run_cli("run", CHAT, "--out", b, "--seed", "3", *SMALL, "--no-report") == 0
    assert run_cli("run", CHAT, "--out", c, "--seed", "4", *SMALL, "--no-report") == 0
    assert _metrics_without_wall(a) == _metrics_without_wall(b)
    text_a = (a / "metrics.json").read_text().splitlines()
    text_b = (b / "metrics.json").read_text().splitlines()
    assert [x for x in text_a if "wall_time_s" not in x] == [x for x in text_b if "wall_time_s" not in x]
    assert (a / "requests.csv").read_bytes() == (b / "requests.csv").read_bytes()
    assert (a / "iterations.parquet").read_bytes() == (b / "iterations.parquet").read_bytes()
    assert _metrics_without_wall(a) != _metrics_without_wall(c)


def test_set_overrides_apply_with_validation(tmp_path, capsys):
    out = tmp_path / "o"
    assert run_cli("run", CHAT, "--out", out, *SMALL, "--set", "speculation.method=none") == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["mean_acceptance_length"] == 1.0
    assert run_cli("run", CHAT, *SMALL, "--set", "speculation.k=lots") == 2
    assert "speculation.k: expected an integer" in capsys.readouterr().err


def test_validate_command(capsys):
    assert run_cli("validate", CHAT) == 0
    assert "ok" in capsys.readouterr().out


def _bad(tmp_path: Path, edit) -> tuple[Path, dict]:
    data = yaml.safe_load(CHAT.read_text())
    data["workload"]["synthetic"]["requests"] = 20
    edit(data)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, data


BAD_CASES = {
    "unknown key": (lambda d: d["speculation"].update({"kk": 4}), "speculation.kk: unknown key"),
    "unknown top key": (lambda d: d.update({"schedular": {}}), "schedular: unknown key"),
    "wrong type": (lambda d: d["scheduler"].update({"max_batch": "big"}),
                   "scheduler.max_batch: expected an integer"),
    "negative rate": (lambda d: d["workload"]["synthetic"]["arrival"].update({"rate": -2}),
                      "workload.synthetic.arrival.rate"),
    "unknown model": (lambda d: d.update({"model": "Llama-9-1T"}), "model: unknown model 'Llama-9-1T'"),
    "unknown accelerator": (lambda d: d["hardware"].update({"accelerator": "H900"}),
                            "hardware.accelerator: unknown accelerator 'H900'"),
    "model too large": (lambda d: d.update({"model": "Llama-3.1-405B"}), "GB of weights"),
    "missing trace": (lambda d: d.update({"workload": {"trace": {"path": "nope.csv"}}}), "nope.csv"),
    "bad quantization": (lambda d: d["quantization"].update({"weights": "fp7"}),
                         "quantization.weights: unknown quantization format 'fp7'"),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path, capsys, case):
    edit, needle = BAD_CASES[case]
    path, _ = _bad(tmp_path, edit)
    out = tmp_path / "out"
    assert run_cli("run", path, "--out", out, "--quiet") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("specsim: error: ")
    assert len(err.splitlines()) == 1, err
    assert needle in err
    assert str(path) in err
    assert not out.exists()
    assert not any(p.name.startswith(".out") for p in tmp_path.iterdir())
    assert run_cli("validate", path) == 2


def test_a_missing_file_deep_in_folders_is_named_in_full(tmp_path, capsys):
    deep = tmp_path.joinpath(*["a-rather-long-folder-name"] * 8)
    path, _ = _bad(tmp_path, lambda d: d.update(
        {"workload": {"trace": {"path": str(deep / "nope-trace.csv")}}}))
    assert run_cli("validate", path) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    # cut at the front, so the file's own name shows, however deep the folder
    assert "a-rather-long-folder-name/nope-trace.csv'" in err and "'..." in err


def test_model_too_large_names_both_sizes(tmp_path, capsys):
    path, _ = _bad(tmp_path, lambda d: d.update({"model": "Llama-3.1-70B",
                                                 "speculation": {"method": "none"}}))
    assert run_cli("run", path, "--quiet") == 2
    err = capsys.readouterr().err
    assert "141.1 GB of weights" in err and "72.0 GB usable" in err


def test_subprocess_error_has_no_traceback(tmp_path):
    path, _ = _bad(tmp_path, lambda d: d.update({"model": "nope"}))
    p = subprocess.run([sys.executable, "-m", "specsim.simulator.cli", "run", str(path), "--quiet"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr
    assert p.stderr.count("\n") == 1


def test_missing_scenario_file(capsys):
    assert run_cli("run", "no/such/file.yaml") == 2
    assert "no/such/file.yaml: no such scenario file" in capsys.readouterr().err


def test_run_with_baseline_adds_per_class_speedups(tmp_path):
    out = tmp_path / "out"
    assert run_cli("run", CHAT, "--out", out, "--baseline", *SMALL) == 0
    m = json.loads((out / "metrics.json").read_text())
    b = m["baseline"]
    assert set(b["per_class"]) == {"all", "chat"}
    row = b["per_class"]["chat"]
    assert row["tpot_speedup"] == pytest.approx(row["baseline"]["tpot_s"]
                                                / row["speculative"]["tpot_s"])
    assert row["tpot_speedup"] > 1.2  # EAGLE-3 at light load: clearly faster
    assert row["baseline"]["requests"] == row["speculative"]["requests"] == 80
    # the baseline is the same scenario with speculation off: its TPOT is the nospec run's
    plain = tmp_path / "plain"
    assert run_cli("run", CHAT, "--out", plain, *SMALL,
                   "--set", "speculation.method=none") == 0
    off = json.loads((plain / "metrics.json").read_text())
    assert row["baseline"]["tpot_s"] == pytest.approx(off["tpot_s"]["mean"], rel=1e-12)
