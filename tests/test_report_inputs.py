"""`specsim report DIR` on a hostile folder (issue 24): every file it reads back goes
through safe_read's caps, and a sweep's marker lists the files specsim wrote.

The bomb cases run `specsim report` in a subprocess whose address space is capped at
500 MB: a file read whole before its cap is checked would die of a MemoryError there (a
traceback, not the one line asserted).
"""

from __future__ import annotations

import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specsim.simulator.cli import main
from specsim.simulator.planning.sweep import run_sweep
from tests.conftest import REPO

CHAT = str(REPO / "scenarios" / "chat.yaml")
CAP_BYTES = 500 * 1024**2
SMALL = {"workload.synthetic.requests": [5]}


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CAP_BYTES, CAP_BYTES))


def _report_capped(folder: Path, **env: str) -> str:
    """`specsim report folder` under 500 MB; its one stderr line (exit 2 asserted)."""
    r = subprocess.run([sys.executable, "-m", "specsim.simulator.cli", "report", str(folder)],
                       env={**os.environ, **env}, preexec_fn=_capped, capture_output=True,
                       text=True, timeout=60)
    lines = r.stderr.splitlines()
    assert r.returncode == 2 and len(lines) == 1, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr
    return lines[0]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run") / "run"
    assert main(["run", CHAT, "--out", str(out), "--quiet", "--no-report",
                 "--set", "workload.synthetic.requests=20",
                 "--set", "simulation.iteration_log=csv"]) == 0
    return out


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sweep") / "s"
    run_sweep(CHAT, SMALL, out=out, plots=False)
    return out


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    return dst


def _huge_line(path: Path, mib: int = 64) -> None:
    """``path`` with a first line of ``mib`` MiB (written in blocks: this test stays light)."""
    with open(path, "wb") as fh:
        for _ in range(mib):
            fh.write(b"x" * 1024**2)
        fh.write(b"\n")


@pytest.mark.parametrize("name", ["requests.csv", "iterations.csv"])
def test_a_huge_line_in_a_runs_csv_is_one_line(run_dir, tmp_path, name):
    folder = _copy(run_dir, tmp_path)
    _huge_line(folder / name)
    before = _snapshot(folder)
    line = _report_capped(folder)
    assert name in line and "SPECSIM_MAX_LINE_BYTES" in line
    assert _snapshot(folder) == before  # nothing written, nothing left


def test_a_json_bomb_as_metrics_is_refused_by_size(run_dir, tmp_path):
    folder = _copy(run_dir, tmp_path)
    with open(folder / "metrics.json", "wb") as fh:  # 40 MiB of [[[[...: over the 16 MiB cap
        fh.write(b"[" * (40 * 1024**2))
    line = _report_capped(folder)
    assert "metrics.json" in line and "SPECSIM_MAX_JSON_BYTES" in line


def test_a_gzip_bomb_as_requests_is_refused_by_its_ratio(run_dir, tmp_path):
    folder = _copy(run_dir, tmp_path)
    header = (folder / "requests.csv").read_bytes().split(b"\n", 1)[0] + b"\n"
    with gzip.open(folder / "requests.csv", "wb", compresslevel=9) as fh:
        fh.write(header)
        for _ in range(64):
            fh.write(b"\n" * 1024**2)
    line = _report_capped(folder)
    assert "requests.csv" in line and "SPECSIM_MAX_INFLATE_RATIO" in line


def test_a_huge_iteration_parquet_is_refused_by_size(run_dir, tmp_path):
    folder = _copy(run_dir, tmp_path)
    (folder / "iterations.csv").unlink()
    (folder / "iterations.parquet").write_bytes(b"PAR1" + b"\0" * 64 * 1024)
    limit = str(32 * 1024)  # above this run's requests.csv, below the parquet
    assert (folder / "requests.csv").stat().st_size < int(limit)
    line = _report_capped(folder, SPECSIM_MAX_DATA_BYTES=limit)
    assert "iterations.parquet" in line and "SPECSIM_MAX_DATA_BYTES" in line


def test_a_duplicate_key_in_metrics_is_one_line(run_dir, tmp_path, capsys):
    folder = _copy(run_dir, tmp_path)
    text = (folder / "metrics.json").read_text()
    (folder / "metrics.json").write_text('{"scenario": "x",' + text.lstrip()[1:])
    assert main(["report", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "appears twice" in err and "metrics.json" in err


def test_the_run_still_rerenders(run_dir, tmp_path, capsys):
    folder = _copy(run_dir, tmp_path)
    assert main(["report", str(folder)]) == 0
    assert (folder / "report.md").is_file()


# ---------------------------------------------------------------------------- sweeps
def test_a_sweeps_marker_lists_the_files_it_wrote(sweep_dir):
    listed = set(json.loads((sweep_dir / ".specsim-sweep").read_text())["files"])
    on_disk = {p.name for p in sweep_dir.iterdir()}
    assert listed == on_disk  # every file, and nothing it did not write


def test_a_users_report_in_a_sweep_folder_is_refused(sweep_dir, tmp_path, capsys):
    folder = _copy(sweep_dir, tmp_path)
    (folder / "report.md").write_text("my notes\n")  # the user's, over specsim's
    marker = json.loads((folder / ".specsim-sweep").read_text())
    marker["files"].remove("report.md")
    (folder / ".specsim-sweep").write_text(json.dumps(marker))
    assert main(["report", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "report.md was not written by specsim" in err
    assert (folder / "report.md").read_text() == "my notes\n"


def test_a_users_png_dropped_into_a_sweep_folder_is_refused(sweep_dir, tmp_path, capsys):
    folder = _copy(sweep_dir, tmp_path)
    (folder / "cost_vs_qps.png").write_bytes(b"mine")
    assert main(["report", str(folder)]) == 2
    assert "cost_vs_qps.png was not written by specsim" in capsys.readouterr().err
    assert (folder / "cost_vs_qps.png").read_bytes() == b"mine"
    # and `sweep --force` does not delete it either
    assert main(["sweep", CHAT, "--set", "workload.synthetic.requests=5", "--out",
                 str(folder), "--force", "--quiet", "--no-plots"]) == 2
    assert "cost_vs_qps.png" in capsys.readouterr().err
    assert (folder / "cost_vs_qps.png").read_bytes() == b"mine"


def test_a_sweep_rerenders_and_resumes_with_its_list(sweep_dir, tmp_path, capsys):
    folder = _copy(sweep_dir, tmp_path)
    assert main(["report", str(folder)]) == 0
    listed = set(json.loads((folder / ".specsim-sweep").read_text())["files"])
    assert listed == {p.name for p in folder.iterdir()}  # the plots drawn now listed too
    assert main(["sweep", CHAT, "--set", "workload.synthetic.requests=5", "--out",
                 str(folder), "--resume", "--quiet"]) == 0


def test_a_huge_line_in_the_sweep_journal_is_one_line(sweep_dir, tmp_path, capsys):
    folder = _copy(sweep_dir, tmp_path)
    _huge_line(folder / ".sweep-journal.jsonl", mib=8)
    assert main(["sweep", CHAT, "--set", "workload.synthetic.requests=5", "--out",
                 str(folder), "--resume", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ".sweep-journal.jsonl line 1" in err


def test_a_huge_line_in_sweep_csv_is_one_line(sweep_dir, tmp_path):
    folder = _copy(sweep_dir, tmp_path)
    _huge_line(folder / "sweep.csv")
    line = _report_capped(folder)
    assert "sweep.csv" in line and "SPECSIM_MAX_LINE_BYTES" in line


def test_a_torn_journal_line_is_cut_without_reading_the_journal_whole(tmp_path):
    from specsim.simulator.planning.sweep import Journal, _last_line_end

    path = tmp_path / "j.jsonl"
    path.write_bytes(b'{"a": 1}\n' + b"x" * 200_000)  # a torn line longer than one block
    with open(path, "rb") as fh:
        assert _last_line_end(fh) == 9
    Journal(path).close()
    assert path.read_bytes() == b'{"a": 1}\n'
    path.write_bytes(b"torn")
    Journal(path).close()
    assert path.read_bytes() == b""


def test_a_bomb_sweep_definition_is_refused_on_resume(sweep_dir, tmp_path, capsys):
    folder = _copy(sweep_dir, tmp_path)
    (folder / "sweep.json").write_bytes(b"[" * (17 * 1024**2))
    assert main(["sweep", CHAT, "--set", "workload.synthetic.requests=5", "--out",
                 str(folder), "--resume", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "SPECSIM_MAX_JSON_BYTES" in err and "sweep.json" in err


def test_a_bomb_run_marker_makes_the_folder_foreign(run_dir, tmp_path, capsys):
    folder = _copy(run_dir, tmp_path)
    (folder / ".specsim-output").write_bytes(b"[" * (17 * 1024**2))
    before = _snapshot(folder)
    assert main(["run", CHAT, "--out", str(folder), "--force", "--quiet",
                 "--set", "workload.synthetic.requests=5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did not write" in err
    assert _snapshot(folder) == before


def test_a_huge_line_in_a_profile_csv_is_one_line(tmp_path, capsys):
    from specsim.cost_models.calibrate.profiles import _read_csv
    from specsim.safe_read import InputLimitError

    path = tmp_path / "mlp.csv"
    _huge_line(path, mib=5)
    with pytest.raises(InputLimitError, match=r"mlp.csv line 1: a line longer than allowed"):
        _read_csv(path)
