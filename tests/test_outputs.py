"""Every command writes through specsim.outputs: never over (or through a link onto) a file
specsim did not write, a bad place or a full disk is one line (exit 2) and leaves nothing,
CSV text cells cannot run as formulas, user text cannot inject HTML, SIGTERM cleans up."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys

import pandas as pd
import pytest

from specsim import outputs
from specsim.simulator.cli import main
from tests.conftest import REPO

CHAT = str(REPO / "scenarios" / "chat_nospec.yaml")
SMALL = ["--set", "workload.synthetic.requests=20", "--quiet", "--no-report"]
TRACE = str(REPO / "scenarios" / "data" / "azure_conv_poisson_qps2_n1000.csv")
MEASURED = ("arrival_s,input_tokens,output_tokens,ttft_s,e2e_s\n0.0,120,30,0.04,0.6\n"
            "0.5,100,20,0.03,0.4\n")
ENGINE = "engine: {kind: vllm, max_num_seqs: 4, max_num_batched_tokens: 256}\n"


def one_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specsim: error:"), err
    return lines[0]


def the_error(capsys) -> str:
    """After a command that printed its notes and tables: exactly one error line, last."""
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("specsim: error:")]
    assert len(errors) == 1 and err.strip().endswith(errors[0]) and "Traceback" not in err, err
    return errors[0]


def snapshot(folder) -> dict:
    return {p.name: (p.is_symlink(), p.read_bytes() if p.is_file() else None,
                     p.lstat().st_mtime_ns) for p in folder.iterdir()}


@pytest.fixture
def inputs(tmp_path_factory):
    """The commands' inputs, in a folder of their own (the tests look at tmp_path only)."""
    from tests.test_calibration_fit import _write_csv

    d = tmp_path_factory.mktemp("inputs")
    (d / "acc.csv").write_text("position,rate\n0,0.8\n1,0.6\n")
    (d / "measured.csv").write_text(MEASURED)
    (d / "engine.yaml").write_text(ENGINE)
    _write_csv(d / "engine_steps.csv")
    return d


# one output file each: argv for an --out/--png path
FILE_COMMANDS = {
    "trace fit": lambda d, out: ["trace", "fit", TRACE, "--out", out],
    "trace stats": lambda d, out: ["trace", "stats", TRACE, "--png", out, "--json"],
    "schema": lambda d, out: ["schema", "--out", out],
    "acceptance import": lambda d, out: ["acceptance", "import", "--from", "csv",
                                         str(d / "acc.csv"), "--out", out],
    "calibrate": lambda d, out: ["calibrate", "--from-measurements",
                                 str(d / "engine_steps.csv"), "--out", out],
}
# an output folder each
FOLDER_COMMANDS = {
    "run": lambda d, out: ["run", CHAT, "--out", out, *SMALL],
    "plan": lambda d, out: ["plan", CHAT, "--slo", "tpot_p99=0.05", "--qps", "2",
                            "--requests", "20", "--duration", "5", "--quiet", "--out", out],
    "replay": lambda d, out: ["replay", str(d / "measured.csv"), "--scenario",
                              str(d / "engine.yaml"), "--model", "Llama-2-7B", "--hardware",
                              "H100-SXM", "--quiet", "--no-report", "--out", out],
}


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if a simulation, a plan or a fit starts: bad places are refused first."""
    import specsim.cost_models.calibrate.fit as fit
    import specsim.simulator.cluster.engine as engine
    import specsim.simulator.planning.plan as plan
    import specsim.simulator.validation.replay as replay
    import specsim.traces.loaders as loaders

    def boom(*a, **k):
        raise AssertionError("the work started before the destination was checked")

    for mod, name in ((engine, "run_scenario"), (plan.Planner, "run"), (replay, "load_measured"),
                      (fit, "fit_from_measurements"), (loaders, "load_trace")):
        monkeypatch.setattr(mod, name, boom)


def _ext(cmd: str) -> str:
    return {"trace stats": ".png", "schema": ".json"}.get(cmd, ".yaml")


# ------------------------------------------------------------------ output files
@pytest.mark.parametrize("cmd", FILE_COMMANDS)
def test_a_users_file_is_never_replaced_without_force(cmd, tmp_path, inputs, capsys, no_work):
    mine = tmp_path / f"mine{_ext(cmd)}"
    mine.write_bytes(b"my own work\x00")
    before = snapshot(tmp_path)
    assert main(FILE_COMMANDS[cmd](inputs, str(mine))) == 2
    assert "already exists; pass --force" in one_error(capsys)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("cmd", FILE_COMMANDS)
def test_no_file_is_written_through_a_link(cmd, tmp_path, inputs, capsys, no_work):
    target = tmp_path / "thesis.txt"
    target.write_text("mine")
    link = tmp_path / f"out{_ext(cmd)}"
    link.symlink_to(target)
    dangling = tmp_path / f"gone{_ext(cmd)}"
    dangling.symlink_to(tmp_path / "nowhere" / "x")
    before = snapshot(tmp_path)
    for path in (link, dangling):
        for force in ([], ["--force"]):
            assert main([*FILE_COMMANDS[cmd](inputs, str(path)), *force]) == 2
            assert "symbolic link" in one_error(capsys)
    assert snapshot(tmp_path) == before and not (tmp_path / "nowhere").exists()


def _deny(monkeypatch, under, err=errno.EACCES):
    """A read-only (EACCES) or full (ENOSPC) folder where the OS would not refuse (root)."""
    real = os.mkdir

    def mkdir(path, *a, **k):
        if str(path).startswith(str(under)):
            raise OSError(err, os.strerror(err), str(path))
        return real(path, *a, **k)

    monkeypatch.setattr(os, "mkdir", mkdir)


def _all_refused(argv, cases, ro, capsys, monkeypatch) -> None:
    """Each (out, needle) refused with one line; ``ro`` a read-only folder (simulated) that
    stays empty and is removed after."""
    ro.mkdir()
    _deny(monkeypatch, ro)
    for out, needle in cases:
        assert main(argv(out)) == 2, out
        assert needle in one_error(capsys)
    assert list(ro.iterdir()) == []
    ro.rmdir()


@pytest.mark.parametrize("cmd", FILE_COMMANDS)
def test_bad_places_for_a_file_are_one_line(cmd, tmp_path, inputs, capsys, no_work,
                                             monkeypatch):
    afile = tmp_path / "afile"
    afile.write_text("x")
    (tmp_path / "folder").mkdir()
    before = snapshot(tmp_path)
    cases = [(str(tmp_path / "folder"), "is a folder"),
             (str(afile / f"x{_ext(cmd)}"), "cannot write there"),
             (f"/proc/specsim-x{_ext(cmd)}", "cannot write there"),
             (f"/proc/specsim-no/x{_ext(cmd)}", "cannot write there"),
             ("", "expected a path")]
    ro = tmp_path / "ro"
    cases += [(str(out), "Permission denied")
              for out in (ro / f"x{_ext(cmd)}", ro / "sub" / f"x{_ext(cmd)}")]
    _all_refused(lambda out: FILE_COMMANDS[cmd](inputs, out), cases, ro, capsys, monkeypatch)
    assert snapshot(tmp_path) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder anyway "
                    "(the simulated EACCES above stands in for it)")
@pytest.mark.parametrize("cmd", FILE_COMMANDS)
def test_a_real_read_only_folder(cmd, tmp_path, inputs, capsys, no_work):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    assert main(FILE_COMMANDS[cmd](inputs, str(ro / f"x{_ext(cmd)}"))) == 2
    assert "cannot write there" in one_error(capsys)
    assert list(ro.iterdir()) == []


def _full_disk(monkeypatch):
    def fsync(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.parametrize("cmd", FILE_COMMANDS)
def test_a_full_disk_leaves_nothing_and_keeps_the_old_file(cmd, tmp_path, inputs, capsys,
                                                            monkeypatch):
    _full_disk(monkeypatch)
    new = tmp_path / "sub" / f"new{_ext(cmd)}"
    assert main(FILE_COMMANDS[cmd](inputs, str(new))) == 2
    assert "No space left on device" in one_error(capsys)
    assert list(tmp_path.iterdir()) == []  # not the file, not its temp, not the folder made
    old = tmp_path / f"old{_ext(cmd)}"
    old.write_text("previous")
    assert main([*FILE_COMMANDS[cmd](inputs, str(old)), "--force"]) == 2
    assert "No space left on device" in one_error(capsys)
    assert [p.name for p in tmp_path.iterdir()] == [old.name] and old.read_text() == "previous"


@pytest.mark.parametrize("cmd", ["schema", "acceptance import", "calibrate"])
def test_force_replaces_a_file_and_leaves_no_temp(cmd, tmp_path, inputs, capsys):
    out = tmp_path / f"out{_ext(cmd)}"
    out.write_text("previous")
    assert main([*FILE_COMMANDS[cmd](inputs, str(out)), "--force"]) == 0
    assert out.read_text() != "previous" and [p.name for p in tmp_path.iterdir()] == [out.name]


# ------------------------------------------------------------------ output folders
@pytest.mark.parametrize("cmd", FOLDER_COMMANDS)
def test_a_folder_with_a_users_file_or_link_is_refused(cmd, tmp_path, inputs, capsys, no_work):
    out = tmp_path / "out"
    out.mkdir()
    (out / "plan.csv").write_text("the user's own plan")  # one of specsim's names, not ours
    before = snapshot(out)
    for force in ([], ["--force"]):
        assert main([*FOLDER_COMMANDS[cmd](inputs, str(out)), *force]) == 2
        assert "did not write" in one_error(capsys)
    assert snapshot(out) == before
    # a previous specsim output with a link someone put in: the link is not ours
    (out / "plan.csv").unlink()
    (out / outputs.MARKER).write_text(json.dumps({"files": ["metrics.json"]}))
    (tmp_path / "thesis.txt").write_text("mine")
    (out / "metrics.json").symlink_to(tmp_path / "thesis.txt")
    assert main([*FOLDER_COMMANDS[cmd](inputs, str(out)), "--force"]) == 2
    one_error(capsys)
    assert (out / "metrics.json").is_symlink() and (tmp_path / "thesis.txt").read_text() == "mine"
    # --out itself a link to a folder
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert main([*FOLDER_COMMANDS[cmd](inputs, str(tmp_path / "link")), "--force"]) == 2
    assert "symbolic link" in one_error(capsys)
    assert list((tmp_path / "real").iterdir()) == []


@pytest.mark.parametrize("cmd", FOLDER_COMMANDS)
def test_bad_places_for_a_folder_are_one_line(cmd, tmp_path, inputs, capsys, no_work,
                                               monkeypatch):
    afile = tmp_path / "afile"
    afile.write_text("x")
    before = snapshot(tmp_path)
    cases = [(str(afile), "is a file, not a folder"), (str(afile / "out"), "cannot write there"),
             ("/proc", "did not write"), ("/proc/specsim-out", "cannot write there"),
             ("", "expected a path")]
    ro = tmp_path / "ro"
    cases += [(str(out), "Permission denied") for out in (ro, ro / "out", ro / "a" / "out")]
    _all_refused(lambda out: FOLDER_COMMANDS[cmd](inputs, out), cases, ro, capsys, monkeypatch)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("cmd", FOLDER_COMMANDS)
def test_a_full_disk_leaves_no_folder_behind(cmd, tmp_path, inputs, capsys, monkeypatch):
    def full(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(outputs, "_move_into_place", full)  # the last step: all was staged
    assert main(FOLDER_COMMANDS[cmd](inputs, str(tmp_path / "a" / "out"))) == 2
    assert "No space left on device" in the_error(capsys)
    assert list(tmp_path.iterdir()) == []  # nor the folder "a" made for it


def test_plan_writes_a_marked_folder_and_replaces_it_only_with_force(tmp_path, inputs, capsys,
                                                                      monkeypatch):
    import specsim.simulator.planning.plan as plan

    monkeypatch.setattr(plan.Planner, "run", lambda self, configs, progress=None: [])
    out = tmp_path / "plan"
    argv = FOLDER_COMMANDS["plan"](inputs, str(out))
    assert main(argv) == 0
    assert json.loads((out / outputs.MARKER).read_text())["files"] == ["plan.csv"]
    capsys.readouterr()
    assert main(argv) == 2 and "--force" in one_error(capsys)
    assert main([*argv, "--force"]) == 0
    assert "replaced the previous specsim output" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan"]


# ------------------------------------------------------------------ specsim report DIR
def test_report_never_replaces_a_users_report_or_follows_a_link(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", CHAT, "--out", str(out), *SMALL]) == 0
    (out / "report.md").write_text("my notes")  # not listed by the marker: the user's
    capsys.readouterr()
    assert main(["report", str(out)]) == 2
    assert "report.md was not written by specsim" in one_error(capsys)
    assert (out / "report.md").read_text() == "my notes"
    (out / "report.md").unlink()
    assert main(["report", str(out), ]) == 0  # draws it; now it is ours
    (tmp_path / "thesis.txt").write_text("mine")
    (out / "report.md").unlink()
    (out / "report.md").symlink_to(tmp_path / "thesis.txt")  # listed, but a link now
    assert main(["report", str(out)]) == 0  # the link is replaced, never written through
    assert (tmp_path / "thesis.txt").read_text() == "mine"
    assert not (out / "report.md").is_symlink()
    assert not [p for p in out.iterdir() if outputs._TEMP.match(p.name)]


# ------------------------------------------------------------------ CSV and Markdown
def test_csv_text_cells_are_escaped_and_come_back_exactly():
    cells = ["=HYPERLINK(\"http://x\")", "+1", "-x", "@SUM(A1)", "\tx", "'=x", "'plain",
             "plain", "", "'", "-"]
    df = pd.DataFrame({"text": cells, "n": range(len(cells)), "x": [-1.5] * len(cells)})
    esc = outputs.escape_frame(df)
    assert [str(v)[0] for v in esc["text"] if v and v[0] in "=+-@\t"] == []
    assert esc["n"].tolist() == df["n"].tolist() and esc["x"].tolist() == [-1.5] * len(cells)
    assert [outputs.unescape_cell(v) for v in esc["text"]] == cells
    plain = pd.DataFrame({"a": ["x", "y"], "b": [1, 2]})
    assert outputs.escape_frame(plain) is plain
    cat = pd.DataFrame({"c": pd.Categorical(["=1", "ok", "=1"])})
    assert outputs.escape_frame(cat)["c"].tolist() == ["'=1", "ok", "'=1"]


def test_formulas_and_html_from_user_names_are_escaped(tmp_path):
    out = tmp_path / "run"
    name = "<script>alert(1)</script>"
    assert main(["run", CHAT, "--out", str(out), "--set", "workload.synthetic.requests=20",
                 "--set", 'workload.class==HYPERLINK("http://x")', "--set", f"name={name}",
                 "--quiet", "--no-plots"]) == 0
    req = pd.read_csv(out / "requests.csv")
    assert set(req["workload_class"]) == {"'=HYPERLINK(\"http://x\")"}
    assert req["arrival_s"].dtype.kind == "f"  # numbers stay numbers
    md = (out / "report.md").read_text()
    assert "<script>" not in md and "# specsim report: &lt;script&gt;" in md
    page = (out / "report.html").read_text()
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&amp;lt;" not in page  # escaped once, not twice
    shown = [line for line in md.splitlines() if "HYPERLINK" in line]
    assert main(["report", str(out)]) == 0  # drawn again from requests.csv: the same names
    assert [line for line in (out / "report.md").read_text().splitlines()
            if "HYPERLINK" in line] == shown and shown


# ------------------------------------------------------------------ standard output, SIGTERM
class _Full:
    def write(self, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def flush(self):
        pass


class _Closed(_Full):
    def write(self, text):
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))


def test_standard_output_full_or_closed(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdout", _Full())
    assert main(["schema"]) == 2
    assert "standard output: could not write (No space left on device)" in one_error(capsys)
    monkeypatch.setattr(sys, "stdout", _Closed())
    assert main(["schema"]) == 141
    assert capsys.readouterr().err == ""


def test_schema_to_dev_full_is_one_line():
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "specsim.simulator.cli", "schema"],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "specsim: error: standard output: could not write (No space left on device)"]


def test_sigterm_cleans_the_staging_folder_like_ctrl_c(tmp_path, capsys, monkeypatch):
    import specsim.simulator.cluster.engine as engine

    def killed(*a, **k):  # the signal arrives mid-run
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("SIGTERM did not stop the run")

    monkeypatch.setattr(engine, "run_scenario", killed)
    before = signal.getsignal(signal.SIGTERM)
    assert main(["run", CHAT, "--out", str(tmp_path / "out"), *SMALL]) == 143
    assert capsys.readouterr().err.strip() == "specsim: terminated"
    assert list(tmp_path.iterdir()) == []  # the staging folder went
    assert signal.getsignal(signal.SIGTERM) == before  # restored for whoever called main


def test_a_full_disk_while_the_iteration_log_streams(tmp_path, capsys, monkeypatch):
    from specsim.simulator.metrics import iteration_log

    def full(self, frame):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(iteration_log.ParquetLog, "write", full)
    assert main(["run", CHAT, "--out", str(tmp_path / "a" / "out"), *SMALL]) == 2
    assert "No space left on device" in one_error(capsys)
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ specsim sweep
SWEEP = ["sweep", CHAT, "--set", "workload.synthetic.requests=20", "--jobs", "1", "--quiet",
         "--no-plots"]


def test_sweep_refuses_users_files_links_and_bad_places(tmp_path, capsys, no_work,
                                                        monkeypatch):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "sweep.csv").write_text("the user's own table")
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    afile = tmp_path / "afile"
    afile.write_text("x")
    before = snapshot(tmp_path)
    cases = [(mine, "did not write"), (tmp_path / "link", "symbolic link"),
             (afile, "is a file"), (afile / "out", "cannot write there"),
             ("/proc/specsim-out", "cannot write there"), ("", "expected a path")]
    for out, needle in cases:
        for force in ([], ["--force"]):
            assert main([*SWEEP, "--out", str(out), *force]) == 2, out
            assert needle in one_error(capsys)
    ro = tmp_path / "ro"
    ro.mkdir()
    _deny(monkeypatch, ro)
    assert main([*SWEEP, "--out", str(ro / "out")]) == 2
    assert "Permission denied" in one_error(capsys)
    ro.rmdir()
    assert snapshot(tmp_path) == before and list((tmp_path / "real").iterdir()) == []


def test_sweep_full_disk_leaves_no_half_written_folder(tmp_path, capsys, monkeypatch):
    _full_disk(monkeypatch)  # the journal's first fsync fails
    assert main([*SWEEP, "--out", str(tmp_path / "a" / "sweep")]) == 2
    assert "No space left on device" in one_error(capsys)
    assert list(tmp_path.iterdir()) == []


def test_sweep_tables_escape_formulas_and_the_report_escapes_html(tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main([*SWEEP, "--set", 'name==HYPERLINK("x")', "--out", str(out)]) == 0
    table = pd.read_csv(out / "sweep.csv")
    assert table["name"].tolist() == ["'=HYPERLINK(\"x\")"]  # a spreadsheet shows text
    assert pd.read_csv(out / "summary.csv")["name"].tolist() == ["'=HYPERLINK(\"x\")"]
    assert table["requests_completed"].dtype.kind == "i"  # numbers stay numbers
    from specsim.simulator.planning.sweep_report import load

    assert load(out)[1]["name"].tolist() == ["=HYPERLINK(\"x\")"]  # read back exactly
    assert not [p for p in out.iterdir() if outputs.is_temp(p.name)]
