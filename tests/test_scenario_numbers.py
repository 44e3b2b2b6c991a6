"""Bad numbers and silent changes (issue 7, scenario side): one-line errors naming the key,
YAML 1.2 number forms, memory bounds, and counts that used to go unreported."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from specsim import limits, yamlio
from specsim.errors import ScenarioError
from specsim.simulator.cli import main, summary_table
from specsim.simulator.cluster.engine import run_scenario
from specsim.simulator.scenario import config as cfg
from specsim.simulator.scenario import schema
from tests.conftest import REPO

CHAT = REPO / "scenarios" / "chat.yaml"
SMALL = ["--set", "workload.synthetic.requests=20", "--quiet"]


def _one_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("specsim: error: "), err
    assert "Traceback" not in err
    return lines[0]


# the keys of specsim's own policies and drafters (other test files register plug-ins named
# test_*, whose keys belong to them and are tested there)
FLOAT_KEYS = [k for k in schema.number_keys("float") if ".test_" not in k]
INT_KEYS = [k for k in schema.number_keys("int") if ".test_" not in k]


# ---------------------------------------------------------------- 1. unreadable files

@pytest.mark.parametrize("command", ["run", "validate"])
def test_binary_scenario_is_one_line(tmp_path, capsys, command):
    path = tmp_path / "s.yaml"
    path.write_bytes(bytes(range(256)) * 4)
    assert main([command, str(path)]) == 2
    assert _one_error(capsys).endswith(
        f"{path}: not a UTF-8 text file (a YAML scenario was expected)")


@pytest.mark.parametrize("command", ["run", "validate"])
def test_folder_as_scenario(tmp_path, capsys, command):
    assert main([command, str(tmp_path)]) == 2
    assert _one_error(capsys).endswith(f"{tmp_path}: is a folder, not a scenario file")


def test_unreadable_scenario(tmp_path, capsys, monkeypatch):
    path = tmp_path / "s.yaml"
    path.write_text(CHAT.read_text())

    def denied(self):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_bytes", denied)
    assert main(["validate", str(path)]) == 2
    assert _one_error(capsys).endswith(f"{path}: cannot be read (Permission denied)")


def test_nul_and_deep_yaml(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text("name: a\x00b\n")
    assert main(["validate", str(path)]) == 2
    assert "not valid YAML" in _one_error(capsys)
    path.write_text("[" * 5000 + "]" * 5000)
    assert main(["validate", str(path)]) == 2
    assert "not valid YAML" in _one_error(capsys)


# ---------------------------------------------------------------- 2. NaN, infinities, ints

@pytest.mark.parametrize("key", FLOAT_KEYS)
@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_float_keys_reject_non_finite(key, value, capsys):
    own = next((m for m in ("ngram", "suffix") if key.startswith(f"speculation.{m}.")), None)
    method = (["--set", f"speculation.method={own}", "--set", "speculation.drafter=null"]
              if own else [])  # ngram / suffix keys belong to their method
    assert main(["validate", str(CHAT), *method, "--set", f"{key}={value}"]) == 2
    line = _one_error(capsys)
    shown = {".nan": "nan", ".inf": "inf", "-.inf": "-inf"}[value]
    assert line.endswith(f"{key}: expected a finite number, got {shown}"), line


def test_non_finite_in_the_file_too(tmp_path, capsys):
    data = yaml.safe_load(CHAT.read_text())
    data["simulation"] = {"horizon_s": math.nan}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["run", str(path), "--quiet"]) == 2
    assert "simulation.horizon_s: expected a finite number, got nan" in _one_error(capsys)


@pytest.mark.parametrize("key", INT_KEYS)
@pytest.mark.parametrize("value", ["1e18", str(10**30), "1e300", ".inf", "2.5", "'3'"])
def test_int_keys_bounded(key, value, capsys):
    if key == "seed" and value == "1e18":  # a valid seed (at most 2**63 - 1)
        assert main(["validate", str(CHAT), "--set", f"{key}={value}", *SMALL[:2]]) == 0
        return
    assert main(["validate", str(CHAT), "--set", f"{key}={value}"]) == 2
    line = _one_error(capsys)
    assert f"{key}: expected " in line, line


def test_int_keys_take_integral_floats():
    sc = cfg.validate({"hardware": {"count": 2.0}, "speculation": {"k": 4e0}, "workload": {}})
    assert sc.hardware.count == 2 and isinstance(sc.hardware.count, int)
    assert sc.speculation.k == 4 and isinstance(sc.speculation.k, int)
    with pytest.raises(ScenarioError, match=r"hardware.count: expected an integer at most "
                                            r"1000000, got 1e\+18"):
        cfg.validate({"hardware": {"count": 1e18}, "workload": {}})


def test_show_prints_numpy_scalars_plainly():
    assert cfg.show(np.float64(-5.0)) == "-5.0"
    assert cfg.show(np.int64(3)) == "3"
    assert cfg.show("x" * 500).endswith("...") and len(cfg.show("x" * 500)) == 60


def test_power_idle_above_max(capsys):
    assert main(["validate", str(CHAT), "--set", "cost.power_idle_w=2000"]) == 2
    assert "cost.power_idle_w: expected idle power (2000 W) at most the maximum power " \
        "(700 W)" in _one_error(capsys)


# ---------------------------------------------------------------- 3. YAML 1.2 numbers

@pytest.mark.parametrize("text,value", [("1e3", 1000.0), ("1E-5", 1e-5), ("-2e+3", -2000.0),
                                        (".5e1", 5.0), ("-.5", -0.5), ("+.5", 0.5),
                                        ("1.5", 1.5), ("1.", 1.0)])
def test_yaml_loader_reads_exponent_floats(text, value):
    got = yamlio.load(text)
    assert isinstance(got, float) and got == value


@pytest.mark.parametrize("text,value", [("10", 10), ("-3", -3), ("1_000", 1000), ("0x10", 16),
                                        ("abc", "abc"), ("1e", "1e"), ("e3", "e3"),
                                        ("1.2.3", "1.2.3"), ("true", True), ("~", None)])
def test_yaml_loader_keeps_other_scalars(text, value):
    got = yamlio.load(text)
    assert got == value and type(got) is type(value)


def test_yaml_loader_keeps_nan_inf_and_leaves_pyyaml_alone():
    assert math.isnan(yamlio.load(".nan")) and yamlio.load("-.inf") == -math.inf
    assert yaml.safe_load("1e3") == "1e3"  # the stock SafeLoader is not modified


def test_a_reread_document_is_the_same_value_and_the_callers_own_copy():
    """Sweeps and plans parse the same scenario and catalogs per point; the remembered
    parse gives equal values, each caller its own copy, and errors are never remembered."""
    text = CHAT.read_text()
    first = yamlio.load(text)
    first["speculation"]["k"] = 99  # a caller changing what it got
    second = yamlio.load(text)
    assert second == yaml.load(text, Loader=yamlio.Loader)  # noqa: S506
    assert second["speculation"]["k"] != 99 and second is not first
    bundled = (REPO / "cost_models" / "data" / "models.yaml").read_text()
    assert yamlio.load_bundled(bundled, yaml12=False) == yaml.safe_load(bundled)
    assert yamlio.load_bundled(bundled) == yamlio.load(bundled)  # the YAML 1.2 loaders agree
    for _ in range(2):
        with pytest.raises(yaml.YAMLError):
            yamlio.load("a: [1, 2")
    for i in range(yamlio._PARSED_MAX + 5):  # bounded
        yamlio.load(f"n: {i}")
    assert len(yamlio._PARSED) == yamlio._PARSED_MAX


def test_rate_1e3_in_a_synthetic_workload(tmp_path, capsys):
    text = CHAT.read_text().replace("rate: 5.5", "rate: 1e3").replace("requests: 1000",
                                                                      "requests: 20")
    assert "rate: 1e3" in text
    path = tmp_path / "s.yaml"
    path.write_text(text)
    assert main(["validate", str(path)]) == 0
    assert "ok (20 requests" in capsys.readouterr().out


def test_set_accepts_exponent_floats(tmp_path):
    out = tmp_path / "out"
    assert main(["run", str(CHAT), "--out", str(out), "--no-report", "--set", "slo.ttft_s=1e-1",
                 *SMALL]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["slo"]["ttft_s"] == 0.1


# ---------------------------------------------------------------- 4. memory bounds

def test_check_requests_and_workers(monkeypatch):
    monkeypatch.setenv(limits.ENV, "1")
    limits.check_requests(1000, "workload.synthetic")
    limits.check_workers(1000)
    with pytest.raises(ScenarioError, match=r"^workload.synthetic: 100,000,000 requests need "
                                            r"~819 GB .* more than the 1 GB allowed by "
                                            r"SPECSIM_MEMORY_LIMIT_GB"):
        limits.check_requests(10**8, "workload.synthetic")
    with pytest.raises(ScenarioError, match="record_iterations: false"):
        limits.check_requests(500_000, "workload.synthetic")
    limits.check_requests(500_000, "workload.synthetic", record_iterations=False)
    with pytest.raises(ScenarioError, match=r"^hardware.count: 1,000,000 devices -> 500,000 "
                                            r"workers need ~5.12 GB"):
        limits.check_workers(500_000, devices=1_000_000)
    monkeypatch.setenv(limits.ENV, "lots")
    with pytest.raises(ScenarioError, match="SPECSIM_MEMORY_LIMIT_GB: expected a positive"):
        limits.check_workers(1)


def test_memory_budget_without_env(monkeypatch):
    monkeypatch.delenv(limits.ENV, raising=False)
    budget, where = limits.memory_budget()
    assert budget > 0 and where


def test_fleet_too_large_for_memory(capsys, monkeypatch):
    monkeypatch.setenv(limits.ENV, "0.01")  # 10 MB: 1,000 workers need ~10 MB
    assert main(["validate", str(CHAT), "--set", "hardware.count=4000", *SMALL[:2]]) == 2
    line = _one_error(capsys)
    assert "hardware.count: 4,000 devices -> 4,000 workers need ~0.041 GB of memory (~10 KB each)" \
        in line


def test_fleet_sanity_bound(capsys):
    assert main(["validate", str(CHAT), "--set", "hardware.count=10000000"]) == 2
    assert "hardware.count: expected an integer at most 1000000, got 10000000" in \
        _one_error(capsys)


def test_too_many_requests_for_memory(capsys, monkeypatch):
    # 4 MB: room for generating 1,000 requests (~1 KB each), not for running them with the
    # iteration log (~8 KB each): the engine's check, after the trace, names the workload
    monkeypatch.setenv(limits.ENV, "0.004")
    assert main(["run", str(CHAT), "--quiet"]) == 2
    line = _one_error(capsys)
    assert "workload.synthetic: 1,000 requests need ~0.00819 GB of memory" in line
    assert "simulation.record_iterations: false" in line and "SPECSIM_MEMORY_LIMIT_GB" in line


# ---------------------------------------------------------------- 5. context truncation

def _context_scenario(tmp_path: Path, overflow: str) -> Path:
    path = tmp_path / f"ctx_{overflow}.yaml"
    path.write_text(f"""
model: Qwen3-8B
workload:
  synthetic:
    arrival: {{process: poisson, rate: 1e1}}
    requests: 30
    prompt_tokens: {{distribution: uniform, low: 2000, high: 4000}}
    output_tokens: {{distribution: fixed, value: 50}}
  max_context: 3000
  context_overflow: {overflow}
""")
    return path


@pytest.mark.parametrize("overflow", ["truncate", "drop"])
def test_context_counts_are_reported(tmp_path, capsys, overflow):
    out = tmp_path / "out"
    assert main(["run", str(_context_scenario(tmp_path, overflow)), "--quiet",
                 "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    cut, dropped = m["requests_truncated_to_context"], m["requests_dropped_for_context"]
    assert (cut > 0 and dropped == 0) if overflow == "truncate" else (cut == 0 and dropped > 0)
    assert cut + dropped + m["requests_arrived"] == 30 + cut
    word = "truncated" if overflow == "truncate" else "dropped"
    assert any(f"{cut or dropped} requests were longer than the context limit and were {word}"
               in n for n in m["notes"])
    streams = capsys.readouterr()
    assert f"{cut} / {dropped}" in streams.out  # the summary table's row
    assert f"note: {cut or dropped} requests were longer" in streams.err
    report = (out / "report.md").read_text()
    assert f"longer than the context: truncated / dropped by the workload | {cut} / {dropped}" \
        in report


def test_context_counts_default_to_zero_for_a_trace_passed_in(tmp_path):
    from tests.conftest import make_trace

    res = run_scenario(CHAT, trace=make_trace(10, rate=5.0))
    assert res.metrics["requests_truncated_to_context"] == 0
    assert res.metrics["requests_dropped_for_context"] == 0
    table = summary_table(res.metrics)  # renders with the new row
    assert table is not None


# ---------------------------------------------------------------- 6. token budget vs k

def test_token_budget_below_k_plus_one(capsys):
    assert main(["validate", str(CHAT), "--set", "scheduler.token_budget=4"]) == 2
    line = _one_error(capsys)
    assert "scheduler.token_budget: expected at least speculation.k + 1 = 5" in line
    assert main(["validate", str(CHAT), "--set", "scheduler.token_budget=4",
                 "--set", "speculation.k=3", *SMALL[:2]]) == 0
    assert main(["validate", str(CHAT), "--set", "scheduler.token_budget=4",
                 "--set", "speculation.method=none", *SMALL[:2]]) == 0


# ---------------------------------------------------------------- 8. iterations.csv header

def test_iterations_csv_keeps_its_header(tmp_path):
    from specsim.simulator.execution.kernel import SPEC_ITER_COLUMNS
    from specsim.simulator.metrics.collector import ITER_COLUMNS

    out = tmp_path / "out"
    assert main(["run", str(CHAT), "--out", str(out), "--no-report",
                 "--set", "simulation.record_iterations=false",
                 "--set", "simulation.iteration_log=csv", *SMALL]) == 0
    it = pd.read_csv(out / "iterations.csv")
    # chat.yaml drafts (EAGLE-3): the speculative KV columns follow
    assert list(it.columns) == [*ITER_COLUMNS, *SPEC_ITER_COLUMNS] and len(it) == 0


# ---------------------------------------------------------------- acceptance and catalog

@pytest.mark.parametrize("acc,expect", [
    ("{histogram: [1, 2], at_k: .nan}", "speculation.acceptance.at_k: expected a finite number"),
    ("{histogram: [1, 2], at_k: abc}", "speculation.acceptance.at_k: expected an integer, got"),
    ("{histogram: [" + ", ".join(["1"] * 80) + "]}",
     "speculation.acceptance.histogram: expected at most 65 entries"),
    ("{alpha_by_position: [" + ", ".join(["0.5"] * 80) + "]}",
     "speculation.acceptance.alpha_by_position: expected at most 64 entries"),
    ("{profile: [a]}", "speculation.acceptance.profile: unknown acceptance profile"),
])
def test_acceptance_forms_fail_in_one_line(acc, expect, capsys):
    assert main(["validate", str(CHAT), "--set", f"speculation.acceptance={acc}"]) == 2
    assert expect in _one_error(capsys)


@pytest.mark.parametrize("field,value,expect", [
    ("hbm_gb", math.nan, "hardware.accelerator.hbm_gb: expected a finite number, got nan"),
    ("hbm_gb", 1e300, "hardware.accelerator.hbm_gb: expected a number at most 1e+15"),
    ("hbm_bw_gb_s", 1e-300, "hardware.accelerator.hbm_bw_gb_s: expected a number at least"),
])
def test_inline_accelerator_numbers(tmp_path, capsys, field, value, expect):
    from specsim.cost_models.catalog import hardware_catalog

    data = yaml.safe_load(CHAT.read_text())
    data["hardware"]["accelerator"] = {**hardware_catalog()["H100-SXM"], field: value}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["validate", str(path)]) == 2
    assert expect in _one_error(capsys)


def test_inline_dense_model_needs_an_mlp(tmp_path, capsys):
    from specsim.cost_models.catalog import model_catalog

    data = yaml.safe_load(CHAT.read_text())
    data["model"] = {**model_catalog()["Qwen3-8B"], "intermediate_size": 0}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["validate", str(path)]) == 2
    assert "model.intermediate_size: expected an integer at least 1, got 0" in _one_error(capsys)
