"""Nothing lost, nothing half-written: --out, trace fit --out and trace stats --png."""

from __future__ import annotations

import json
import os
import stat

import pytest

import simulator.engine as engine
from simulator import output
from simulator.cli import main
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
    monkeypatch.setattr("simulator.cli.run_scenario", boom)


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
    assert set(marker["files"]) == {"metrics.json", "requests.csv", "iterations.csv"}
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


def test_stale_temp_folders_are_cleaned(tmp_path):
    dead = 2**22 + 12345
    while True:
        try:
            os.kill(dead, 0)
            dead += 1
        except ProcessLookupError:
            break
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
