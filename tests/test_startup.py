"""Start-up stays light (issue 13): `--help`, `validate` and a run without a report import
only what their path needs. Checked by module, not by clock, so a busy machine cannot fail it;
README "Benchmarks" has the measured times."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHAT = REPO / "scenarios" / "chat.yaml"
HEAVY = ("scipy", "pandas", "matplotlib", "pyarrow", "numba", "dask", "torch", "scipy.stats",
         "scipy.optimize", "scipy.linalg", "scipy.special")


def _loaded_after(argv: list[str]) -> list[str]:
    """Heavy modules in sys.modules after `specsim ARGV` ran in a fresh interpreter."""
    code = ("import sys\nfrom specsim.simulator.cli import main\n"
            f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
            f"print('HEAVY=' + ','.join(sorted(m for m in {HEAVY!r} if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, check=True).stdout
    line = [s for s in out.splitlines() if s.startswith("HEAVY=")][-1]
    return [m for m in line[len("HEAVY="):].split(",") if m]


def test_help_imports_none_of_the_heavy_libraries():
    assert _loaded_after(["--help"]) == []
    assert _loaded_after(["run", "--help"]) == []


@pytest.mark.parametrize("argv,kernel", [
    (["validate", str(CHAT)], False),
    # a run's kernel is compiled (numba, its cache loaded) whatever the run's length
    (["run", str(CHAT), "--quiet", "--no-report", "--out", "{tmp}"], True),
])
def test_validate_and_a_run_without_report_skip_plotting_and_fitting(argv, kernel, tmp_path):
    """scipy's fits and Beta draws, matplotlib (report plots), dask and torch these do not
    need, nor pandas (the trace is numpy columns, the outputs are written from them); numba
    only a run does (its kernel), never ``validate`` (numba's import checks scipy's version,
    which loads scipy's top package, a few milliseconds, and nothing under it)."""
    argv = [a.replace("{tmp}", str(tmp_path / "out")) for a in argv]
    loaded = set(_loaded_after(argv))
    heavy = {"scipy.stats", "scipy.optimize", "scipy.linalg", "scipy.special", "matplotlib",
             "dask", "torch", "pandas"} | ({"scipy"} if not kernel else set())
    assert not loaded & heavy, sorted(loaded)
    assert ("numba" in loaded) == kernel, sorted(loaded)


def test_a_report_without_plots_skips_matplotlib_and_report_draws_them_later(tmp_path):
    """`--no-plots`: report.md and report.html with every table, no PNG, no matplotlib and
    no pandas (issue 22: its import was a fifth of a 1k replay);
    `specsim report DIR` then draws the plots from the folder."""
    out = tmp_path / "out"
    loaded = set(_loaded_after(["run", str(CHAT), "--quiet", "--no-plots",
                                "--set", "workload.synthetic.requests=200", "--out", str(out)]))
    assert "matplotlib" not in loaded and "pandas" not in loaded, sorted(loaded)
    text = (out / "report.md").read_text()
    assert "## Latency" in text and "## Cost and energy" in text
    assert "Not drawn (`--no-plots`)" in text and not list(out.glob("*.png"))
    assert (out / "report.html").is_file()
    from specsim.simulator.cli import main

    assert main(["report", str(out)]) == 0
    assert {p.name for p in out.glob("*.png")} >= {"latency_cdf.png", "timeline.png"}
    assert "Not drawn" not in (out / "report.md").read_text()


def test_a_refused_out_folder_costs_no_heavy_import(tmp_path):
    """--out is checked before the engine (pandas, the catalogs) is imported, so a folder
    that would be refused answers at once; the folder is left as it was."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("a user's file")
    assert _loaded_after(["run", str(CHAT), "--quiet", "--out", str(out)]) == []
    assert [p.name for p in out.iterdir()] == ["mine.txt"]


def test_help_does_not_look_up_the_installed_version():
    """`--version` reads the distribution's metadata only when asked (importlib.metadata's
    import and the lookup were 25-65 ms of every command)."""
    code = ("import sys\nfrom specsim.simulator.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('META=' + str('importlib.metadata' in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, check=True).stdout
    assert out.splitlines()[-1] == "META=False"
