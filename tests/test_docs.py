"""Docs that cannot drift: the site builds strictly, the README agrees with .ci/run and with a
fresh run, and the generated tables equal what their scripts print now."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


def _script(name: str):
    """A benchmarks/ script as a module (benchmarks is not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@cache
def _run(stem: str):
    from specsim import run_scenario

    return run_scenario(REPO / "scenarios" / f"{stem}.yaml")


def _readme_block(after: str) -> str:
    """The first fenced block of the README that follows the line starting with `after`."""
    text = README.read_text()
    start = text.index(after)
    return text[start:].split("```", 2)[1]


def test_mkdocs_build_is_strict_and_clean(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (it is in the dev extra: "
                        "pip install -e '.[dev]')")
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                          "-f", str(REPO / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                         capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (tmp_path / "site" / "scenario-reference" / "index.html").is_file()


def test_readme_is_short_and_its_test_command_is_what_ci_runs():
    assert len(README.read_text().splitlines()) <= 300
    block = _readme_block("## The two commands")
    lines = [ln for ln in block.splitlines() if ln and not ln.startswith(("#", "bash"))]
    assert lines[0] == "pip install -e . && specsim run scenarios/chat.yaml --out runs/chat"
    ci = REPO / ".ci" / "run"
    ci_lines = [ln.strip() for ln in ci.read_text().splitlines()]
    assert lines[1] in ci_lines, f".ci/run does not run the README's test command: {lines[1]}"
    assert os.access(ci, os.X_OK), ".ci/run is not executable (git update-index --chmod=+x)"


def test_readme_worked_example_matches_a_fresh_run():
    block = _readme_block("## A worked example")
    m = _run("chat").metrics
    rows = {"TTFT (ms)": ("ttft_s", 1e3), "TPOT (ms)": ("tpot_s", 1e3),
            "ITL (ms)": ("itl_s", 1e3), "E2E (s)": ("e2e_s", 1.0)}
    for label, (key, scale) in rows.items():
        line = next(ln for ln in block.splitlines() if label in ln)
        shown = [float(x) for x in re.findall(r"\d+\.\d+", line)]
        want = [round(m[key][q] * scale, 2) for q in ("mean", "p50", "p90", "p99")]
        assert shown == want, (label, shown, want)
    for label, value, digits in (("mean acceptance length", m["mean_acceptance_length"], 3),
                                 ("$ per million output tokens",
                                  m["cost_usd_per_million_output_tokens"], 3)):
        line = next(ln for ln in block.splitlines() if label in ln)
        assert float(re.findall(r"\d+\.\d+", line)[-1]) == round(value, digits), label


def test_bundled_table_lists_every_bundled_scenario():
    bt = _script("bundled_table")
    have = bt.page_rows(bt.PAGE.read_text())
    assert set(have) == {p.name for p in bt.scenario_paths()}


@pytest.mark.parametrize("stem", ["chat", "azure_conv_70b", "pd_disaggregated"])
def test_bundled_table_row_is_what_the_script_prints_now(stem):
    bt = _script("bundled_table")
    path = REPO / "scenarios" / f"{stem}.yaml"
    want = bt.page_rows(bt.PAGE.read_text())[path.name]
    assert bt.row(path, _run(stem)) == want, (
        "docs/scenarios.md is stale: run python benchmarks/bundled_table.py --write")


def test_scenario_reference_is_generated_from_the_schema():
    # in a fresh interpreter: this process also holds the policies and drafters that other
    # test files register (test_*), which the user's schema does not have
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "schema_reference.py"),
                           "--check"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, (
        "docs/scenario-reference.md is stale: run python benchmarks/schema_reference.py --write"
        f"\n{done.stderr[-2000:]}")


def test_moe_table_one_client_rows_are_what_the_script_prints_now():
    moe = _script("moe_drafters")
    have = [r for r in moe.page_rows(moe.PAGE.read_text()) if r.startswith("| 1 |")]
    assert moe.rows(1, 160) == have, (
        "docs/speculation.md's MoE table is stale: run python benchmarks/moe_drafters.py --write")
