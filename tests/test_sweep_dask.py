"""specsim sweep --backend dask: the local backend's rows on a Dask cluster, no grid point lost
when a worker is killed mid-sweep, a one-line error without the extra, nothing dask on the
light paths."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from specsim.simulator.cli import main
from specsim.simulator.planning.sweep import JOURNAL, run_sweep
from tests.conftest import REPO

CHAT = str(REPO / "scenarios" / "chat.yaml")
GRID = {"speculation.k": [0, 2], "workload.synthetic.arrival.rate": [2, 6],
        "workload.synthetic.requests": [12]}
SETS = ["--set", "speculation.k=0,2", "--set", "workload.synthetic.arrival.rate=2,6",
        "--set", "workload.synthetic.requests=12"]
SEEDS = 2
RUNS = 4 * SEEDS
TABLES = ("sweep.csv", "summary.csv", "sweep.parquet")


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """The local backend's sweep of GRID: the reference every Dask sweep must equal."""
    out = tmp_path_factory.mktemp("local") / "sweep"
    run_sweep(CHAT, GRID, seeds=SEEDS, jobs=2, out=out, plots=False)
    return out


@pytest.fixture(scope="module")
def cluster():
    pytest.importorskip("distributed")
    from distributed import LocalCluster

    from specsim.simulator.planning.sweep_dask import LOCAL_CLUSTER_QUIET

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      **LOCAL_CLUSTER_QUIET) as c:
        yield c


def _same_tables(a, b) -> None:
    for name in TABLES:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def _journal_once(out) -> None:
    lines = [json.loads(x) for x in (out / JOURNAL).read_text().splitlines()]
    assert len(lines) == RUNS == len({(x["point"], x["seed"]) for x in lines})


def test_without_the_extra_backend_dask_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    for flags in (["--backend", "dask"], ["--scheduler", "tcp://127.0.0.1:8786"]):
        out = tmp_path / "o"
        rc = main(["sweep", CHAT, *SETS, *flags, "--out", str(out), "--quiet"])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1, err
        assert err.startswith("specsim: error: --backend dask:") and \
            "pip install 'specsim[dask]'" in err, err
        assert not out.exists()
    rc = main(["sweep", CHAT, *SETS, "--backend", "local", "--scheduler", "tcp://x:1",
               "--quiet"])
    assert rc == 2 and "--scheduler: only with --backend dask" in capsys.readouterr().err


def test_nothing_dask_on_the_help_or_a_local_sweep():
    code = ("import sys\nfrom specsim.simulator.cli import build_parser\nbuild_parser()\n"
            "assert not {'dask', 'distributed'} & set(sys.modules), 'help'\n"
            "from specsim.simulator.planning.sweep import run_sweep\n"
            f"run_sweep({CHAT!r}, {{'workload.synthetic.requests': [5]}}, jobs=1)\n"
            "print(sorted({'dask', 'distributed'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_cli_backend_dask_without_scheduler_starts_a_local_cluster(tmp_path, local, capsys):
    pytest.importorskip("distributed")
    out = tmp_path / "cli"
    rc = main(["sweep", CHAT, *SETS, "--seeds", str(SEEDS), "--backend", "dask", "--jobs", "2",
               "--no-plots", "--out", str(out)])
    err = " ".join(capsys.readouterr().err.split())  # the console wraps long lines
    assert rc == 0, err
    assert "on a local Dask cluster of 2 worker process(es)" in err
    _same_tables(out, local)


def test_dask_rows_are_the_local_rows_and_resume_runs_only_the_missing(tmp_path, local,
                                                                      cluster):
    out = tmp_path / "dask"
    table = run_sweep(CHAT, GRID, seeds=SEEDS, out=out, plots=False, backend="dask",
                      scheduler=cluster.scheduler_address)
    assert len(table) == RUNS
    _same_tables(out, local)
    _journal_once(out)
    # a sweep killed mid-way (three runs journaled, the fourth torn) resumes on Dask
    lines = (out / JOURNAL).read_bytes().splitlines(keepends=True)
    (out / JOURNAL).write_bytes(b"".join(lines[:3]) + lines[3][:10])  # killed mid-write
    for name in TABLES:
        (out / name).unlink()
    ran = []
    run_sweep(CHAT, GRID, seeds=SEEDS, out=out, plots=False, backend="dask", resume=True,
              scheduler=cluster.scheduler_address, progress=lambda n, t: ran.append(n))
    assert ran == list(range(4, RUNS + 1))  # three were done; five ran
    _same_tables(out, local)
    _journal_once(out)


def test_an_unreachable_scheduler_is_one_line_and_writes_nothing(tmp_path, capsys,
                                                                  monkeypatch):
    pytest.importorskip("distributed")
    import socket

    from specsim.simulator.planning import sweep_dask

    monkeypatch.setattr(sweep_dask, "CONNECT_TIMEOUT", "1s")
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = tmp_path / "o"
    rc = main(["sweep", CHAT, *SETS, "--scheduler", f"tcp://127.0.0.1:{port}", "--out",
               str(out), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    assert f"--scheduler tcp://127.0.0.1:{port}: cannot reach the Dask scheduler" in err
    assert not out.exists()


def test_a_worker_killed_mid_sweep_loses_no_grid_point(tmp_path, local, cluster):
    from distributed import Client

    from specsim.simulator.planning.sweep_dask import worker_pids

    watcher = Client(cluster.scheduler_address)
    pids = worker_pids(watcher)
    assert len(pids) == 2
    killed: dict[str, object] = {}

    def progress(done: int, total: int) -> None:
        if killed:
            return
        busy = {a: ks for a, ks in watcher.processing().items() if ks}
        if not busy:  # no task on any worker at this instant: try at the next run
            return
        addr = sorted(busy)[0]
        killed.update(addr=addr, tasks=list(busy[addr]), done=done)
        os.kill(pids[addr], signal.SIGKILL)  # as the OOM killer or a lost machine would

    out = tmp_path / "killed"
    try:
        table = run_sweep(CHAT, GRID, seeds=SEEDS, out=out, plots=False, backend="dask",
                          scheduler=cluster.scheduler_address, progress=progress)
    finally:
        watcher.close()
    assert killed and killed["tasks"] and killed["done"] < RUNS, killed  # mid-sweep, mid-task

    def rerun(key: str) -> bool:  # taken back from the dead worker, then run to the end again
        moves = [(ev[1], ev[2]) for ev in cluster.scheduler.story(key)]
        lost = [i for i, m in enumerate(moves) if m in (("processing", "released"),
                                                          ("memory", "released"))]
        return bool(lost) and ("processing", "memory") in moves[lost[0]:]

    assert any(rerun(key) for key in killed["tasks"]), killed
    assert len(table) == RUNS
    _same_tables(out, local)
    _journal_once(out)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the worker's pid is gone (its nanny starts another)
        try:
            os.kill(pids[killed["addr"]], 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the killed worker's process is still alive")
