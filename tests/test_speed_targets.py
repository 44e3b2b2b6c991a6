"""benchmarks/speed_targets.py ``--against DIR`` runs `specsim` from another checkout (issue 22
measures its targets as ratios against the code of its day, run beside it): the command it
builds must run DIR's code, not this checkout's, with this environment's packages."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _speed_targets():
    spec = importlib.util.spec_from_file_location("speed_targets",
                                                  REPO / "benchmarks" / "speed_targets.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["speed_targets"] = mod  # its dataclasses look their module up
    try:
        spec.loader.exec_module(mod)
    finally:
        del sys.modules["speed_targets"]
    return mod


def test_against_runs_the_other_checkouts_code(tmp_path):
    if not any(p.name.startswith("__editable__") for p in
               Path(sys.prefix).glob("lib/python*/site-packages/__editable__*")):
        pytest.skip("specsim is not installed editable (pip install -e .)")
    other = tmp_path / "checkout"
    cli = other / "specsim" / "simulator"
    cli.mkdir(parents=True)
    (other / "specsim" / "__init__.py").write_text("")
    (cli / "__init__.py").write_text("")
    (cli / "cli.py").write_text("import sys\nprint('the other checkout', sys.argv[1:])\n")
    cmd = _speed_targets().against(other)
    out = subprocess.run([*cmd, "run", "x.yaml"], cwd=REPO, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "the other checkout ['run', 'x.yaml']"
