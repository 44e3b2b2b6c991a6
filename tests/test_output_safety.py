"""Nothing lost, nothing half-written: --out, trace fit --out and trace stats --png."""

from __future__ import annotations

import json
import os
import stat

import pytest

import specsim.simulator.cluster.engine as engine
from specsim.simulator.cli import main
from specsim.simulator.report import output
from tests.conftest import REPO

CHAT = str(REPO / "scenarios" / "chat.yaml")
SMALL = ["--set", "workload.synthetic.requests=20", "--quiet", "--no-report"]
TRACE = str(REPO / "scenarios" / "data" / "azure_conv_poisson_qps2_n1000.csv")


def one_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specsim: error:"), err
    return lines[0]


@pytest.fixture
def no_simulation(monkeypatch):
    """Fail the test if a simulation starts: bad destinations are refused before that."""
    def boom(*a, **k):
        raise AssertionError("the simulation ran")

    monkeypatch.setattr(engine, "run_scenario", boom)


def snapshot(folder):
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir()}


def test_folder_with_a_users_file_is_refused_untouched(tmp_path, capsys, no_simulation):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_bytes(b"my thesis\x00\xff")
    before = snapshot(out)
    assert main(["run", CHAT, "--out", str(out), *SMALL]) == 2
    assert "did not write" in one_error(capsys)
    assert snapshot(out) == before
    assert main(["run", CHAT, "--out", str(out), "--force", *SMALL]) == 2
    assert snapshot(out) == before


def test_existing_file_is_refused_untouched(tmp_path, capsys, no_simulation):
    f = tmp_path / "results"
    f.write_text("keep me")
    st = f.stat()
    assert main(["run", CHAT, "--out", str(f), *SMALL]) == 2
    assert "is a file, not a folder" in one_error(capsys)
    assert f.read_text() == "keep me" and f.stat().st_mtime_ns == st.st_mtime_ns
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]


def test_parent_is_a_file(tmp_path, capsys, no_simulation):
    f = tmp_path / "afile"
    f.write_text("x")
    assert main(["run", CHAT, "--out", str(f / "out"), *SMALL]) == 2
    assert "cannot write there" in one_error(capsys)


def test_non_empty_cwd_is_refused_before_simulating(tmp_path, capsys, no_simulation,
                                                    monkeypatch):
    (tmp_path / "x.txt").write_text("x")
    monkeypatch.chdir(tmp_path)
    assert main(["run", CHAT, "--out", ".", *SMALL]) == 2
    one_error(capsys)


def test_new_empty_previous_and_forced(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", CHAT, "--out", str(out), *SMALL]) == 0
    marker = json.loads((out / output.MARKER).read_text())
    assert set(marker["files"]) == {"metrics.json", "scenario.json", "requests.csv",
                                    "iterations.parquet"}
    before = snapshot(out)
    capsys.readouterr()
    assert main(["run", CHAT, "--out", str(out), *SMALL]) == 2  # a previous output: --force
    assert "--force" in one_error(capsys)
    assert snapshot(out) == before
    assert main(["run", CHAT, "--out", str(out), "--force", *SMALL]) == 0
    assert "replaced the previous specsim output" in capsys.readouterr().err
    (out / "mine.txt").write_text("added by the user")
    assert main(["run", CHAT, "--out", str(out), "--force", *SMALL]) == 2
    assert "mine.txt" in one_error(capsys)
    assert (out / "mine.txt").read_text() == "added by the user"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["run", CHAT, "--out", str(empty), *SMALL]) == 0
    assert (empty / "metrics.json").is_file()
    assert not [p for p in tmp_path.iterdir() if "specsim-" in p.name]  # no temp left


def test_empty_cwd_works(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["run", CHAT, "--out", ".", *SMALL]) == 0
    assert (tmp_path / "metrics.json").is_file()


def dead_pid() -> int:
    dead = 2**22 + 12345  # above Linux's largest pid_max, so never running
    while True:
        try:
            os.kill(dead, 0)
            dead += 1
        except ProcessLookupError:
            return dead


def test_stale_temp_folders_are_cleaned(tmp_path):
    dead = dead_pid()
    stale = tmp_path / f".run.specsim-tmp-{dead}-abcd1234"
    live = tmp_path / f".run.specsim-tmp-{os.getpid()}-abcd1234"
    other = tmp_path / ".run.not-ours"
    for d in (stale, live, other):
        d.mkdir()
    assert main(["run", CHAT, "--out", str(tmp_path / "run"), *SMALL]) == 0
    assert not stale.exists() and live.exists() and other.exists()


def test_umask_is_followed(tmp_path):
    old = os.umask(0o022)
    try:
        assert main(["run", CHAT, "--out", str(tmp_path / "run"), *SMALL]) == 0
    finally:
        os.umask(old)
    out = tmp_path / "run"
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o644 for p in out.iterdir())


def test_trace_fit_out(tmp_path, capsys):
    f = tmp_path / "afile"
    f.write_text("x")
    assert main(["trace", "fit", TRACE, "--out", str(f / "w.yaml")]) == 2
    assert "cannot write there" in one_error(capsys)
    mine = tmp_path / "mine.yaml"
    mine.write_text("my own yaml")
    assert main(["trace", "fit", TRACE, "--out", str(mine)]) == 2
    assert "--force" in one_error(capsys)
    assert mine.read_text() == "my own yaml"
    assert main(["trace", "fit", TRACE, "--out", str(tmp_path)]) == 2
    assert "is a folder" in one_error(capsys)
    assert main(["trace", "fit", TRACE, "--out", str(mine), "--force"]) == 0
    assert "workload:" in mine.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "mine.yaml"]


def test_trace_stats_png(tmp_path, capsys):
    png = tmp_path / "s.png"
    png.write_bytes(b"not a png")
    assert main(["trace", "stats", TRACE, "--png", str(png)]) == 2
    assert "--force" in one_error(capsys)
    assert png.read_bytes() == b"not a png"
    assert main(["trace", "stats", TRACE, "--png", str(png), "--force"]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert main(["trace", "stats", TRACE, "--png", str(tmp_path / "f" / "x.png")]) == 0


def test_marker_names_version_and_cannot_be_forged(tmp_path, capsys, no_simulation):
    out = tmp_path / "run"
    out.mkdir()
    (out / "thesis.txt").write_text("mine")
    (out / output.MARKER).write_text(json.dumps({"files": ["thesis.txt"]}))
    before = snapshot(out)
    assert main(["run", CHAT, "--out", str(out), "--force", *SMALL]) == 2
    assert "thesis.txt" in one_error(capsys)
    assert snapshot(out) == before
    (out / "thesis.txt").unlink()
    (out / "report.md").mkdir()  # a folder under one of our names is not ours
    (out / "report.md" / "draft").write_text("mine")
    (out / output.MARKER).write_text(json.dumps({"files": ["report.md"]}))
    assert main(["run", CHAT, "--out", str(out), "--force", *SMALL]) == 2
    assert "report.md" in one_error(capsys)
    assert (out / "report.md" / "draft").read_text() == "mine"


def test_marker_content(tmp_path):
    out = tmp_path / "run"
    assert main(["run", CHAT, "--out", str(out), *SMALL]) == 0
    marker = json.loads((out / output.MARKER).read_text())
    assert {"version", "scenario", "utc", "files"} <= set(marker)


def test_unwritable_place_refused_before_simulating(tmp_path, capsys, no_simulation):
    assert main(["run", CHAT, "--out", "/proc/specsim-no-such/out", *SMALL]) == 2
    assert "cannot write there" in one_error(capsys)
    assert main(["run", CHAT, "--out", "/proc/specsim-out", *SMALL]) == 2
    assert "cannot write there" in one_error(capsys)


def test_bad_scenario_creates_no_parent(tmp_path, capsys):
    out = tmp_path / "a" / "b" / "out"
    assert main(["run", CHAT, "--out", str(out), "--set", "no_such_key=1", *SMALL]) == 2
    one_error(capsys)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("existing", [False, True])
def test_failed_write_leaves_nothing(tmp_path, capsys, monkeypatch, existing):
    def disk_full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(output, "metrics_json", disk_full)
    out = tmp_path / "run"
    if existing:
        out.mkdir()
    assert main(["run", CHAT, "--out", str(out), *SMALL]) == 2
    assert "No space left on device" in one_error(capsys)
    assert [p.name for p in tmp_path.iterdir()] == (["run"] if existing else [])
    if existing:
        assert list(out.iterdir()) == []


def test_empty_folder_with_a_stale_temp_inside(tmp_path, capsys):
    out = tmp_path / "run"
    stale = out / f".run.specsim-tmp-{dead_pid()}-abcd1234"
    stale.mkdir(parents=True)
    (stale / "metrics.json").write_text("{}")
    assert main(["run", CHAT, "--out", str(out), *SMALL]) == 0
    assert not stale.exists() and (out / "metrics.json").is_file()


def test_dotdot_names_the_folder_above(tmp_path, monkeypatch):
    sub = tmp_path / "work"
    sub.mkdir()
    monkeypatch.chdir(sub)
    assert main(["run", CHAT, "--out", "../out/..", *SMALL]) == 2  # tmp_path holds "work"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]


def test_trace_files_more(tmp_path, capsys, monkeypatch):
    assert main(["trace", "stats", TRACE, "--png", str(tmp_path)]) == 2
    assert "is a folder" in one_error(capsys)
    assert main(["trace", "fit", TRACE, "--out", "/proc/specsim-w.yaml"]) == 2
    assert "cannot write there" in one_error(capsys)
    # a bad trace: the check created nothing, not even the missing parent
    assert main(["trace", "fit", str(tmp_path / "nope.csv"), "--out",
                 str(tmp_path / "new" / "w.yaml")]) == 2
    one_error(capsys)
    assert not (tmp_path / "new").exists()
    stale = tmp_path / f".w.specsim-tmp-{dead_pid()}-abcd1234.yaml"
    live = tmp_path / f".w.specsim-tmp-{os.getpid()}-abcd1234.yaml"
    stale.write_text("half")
    live.write_text("busy")
    assert main(["trace", "fit", TRACE, "--out", str(tmp_path / "w.yaml")]) == 0
    assert not stale.exists() and live.exists()
    old = os.umask(0o022)
    try:
        assert main(["trace", "fit", TRACE, "--out", str(tmp_path / "w.yaml"), "--force"]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "w.yaml").stat().st_mode) == 0o644
