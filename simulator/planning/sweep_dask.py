"""``specsim sweep --backend dask [--scheduler ADDRESS]``: the sweep's runs on a Dask cluster.

dask.distributed is an optional extra (``pip install 'specsim[dask]'``) and is imported
here only, when this backend is asked for: ``specsim --help`` and a local sweep never load
it.

Rules:
1. The tasks are the local backend's (``sweep._task``: one summary-only run), so a point
   gives the same row on either backend; the client (this process) appends each finished
   run to the sweep's journal as it arrives, so the table, ``--resume`` and the bytes
   written are the local backend's.
2. A worker that dies (killed, out of memory, its machine gone) loses no grid point: the
   scheduler runs its tasks again on another worker. A task that has killed
   ``distributed.scheduler.allowed-failures`` workers (3 by default) is a one-line error
   naming the point; the runs finished before it stay in the journal for ``--resume``.
3. With ``--scheduler ADDRESS`` the workers must import the same specsim and read the
   scenario file (and any file it names) at the same absolute path, e.g. on a shared
   filesystem; this is checked on every worker before the first task. Without it a
   LocalCluster of ``--jobs`` single-threaded worker processes is started on this machine
   and closed at the end.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable, Iterator
from typing import Any

from specsim.errors import ScenarioError

INSTALL_HINT = "--backend dask: dask.distributed is not installed; pip install 'specsim[dask]'"
#: how long to try reaching --scheduler before a one-line error
CONNECT_TIMEOUT = "15s"


#: a LocalCluster that serves no dashboard, binds only this machine's loopback for its
#: HTTP endpoint (a free port: never "port 8787 is already in use") and logs only errors
LOCAL_CLUSTER_QUIET = {"dashboard_address": None, "silence_logs": 40,  # logging.ERROR
                       "scheduler_kwargs": {"dashboard": False,
                                            "dashboard_address": "127.0.0.1:0"}}


def require() -> None:
    """A one-line ScenarioError (exit 2) unless dask.distributed can be imported."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise ScenarioError(INSTALL_HINT) from None


def _probe(scenario: Any) -> dict[str, Any]:
    """Run on every worker: which specsim it imports (``outputs.version``, the one lookup,
    as the client's own), and whether it sees the scenario."""
    from specsim.outputs import version

    sees = True if isinstance(scenario, dict) else os.path.isfile(scenario)
    return {"version": version(), "sees_scenario": sees}


def _check_workers(client, scenario: Any, where: str) -> int:
    """Every worker imports specsim (our version) and reads the scenario; returns how many
    workers there are (at the time of the check: workers may join or leave later)."""
    from specsim.outputs import version as _version

    try:
        info = client.run(_probe, scenario)
    except Exception as exc:  # a worker without specsim cannot unpickle _probe
        raise ScenarioError(f"{where}: the workers cannot run specsim ({type(exc).__name__}: "
                            f"{_first_line(exc)}); install the same specsim on every "
                            "worker") from None
    if not info:
        raise ScenarioError(f"{where}: the cluster has no workers")
    ours = _version()
    for addr, got in sorted(info.items()):
        if not got["sees_scenario"]:
            raise ScenarioError(f"{where}: worker {addr} cannot read the scenario {scenario}; "
                                "the workers need it (and every file it names) at the same "
                                "absolute path, e.g. on a shared filesystem")
        if got["version"] != ours:
            raise ScenarioError(f"{where}: worker {addr} runs specsim {got['version']}, this "
                                f"machine {ours}; install the same version everywhere")
    return len(info)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def _absolute(scenario: Any) -> Any:
    """A scenario path as the workers must see it (their working folder may differ)."""
    return scenario if isinstance(scenario, dict) else os.path.abspath(str(scenario))


class DaskRunner:
    """A connected client (and the LocalCluster it started, if any)."""

    def __init__(self, client, where: str, scenario: Any) -> None:
        self.client, self.where, self.scenario = client, where, scenario

    def run(self, task: Callable[[tuple[Any, int, dict[str, Any], int, bool]],
                                tuple[int, int, dict[str, Any]]],
            todo: list[tuple[Any, int, dict[str, Any], int, bool]],
            finished: Callable[[int, int, dict[str, Any]], None],
            describe: Callable[[int], str]) -> None:
        """Run ``task`` (the local backend's: passed in, so this module does not import
        sweep.py back) on each of ``todo`` (its argument tuples), calling ``finished(point, seed,
        row)`` in this process for each run as it completes; ``describe(point)`` names a
        point in messages."""
        from distributed import KilledWorker, as_completed
        from distributed.client import FutureCancelledError

        if not todo:
            return
        client, where = self.client, self.where
        token = secrets.token_hex(4)  # our keys cannot meet another client's on the scheduler
        keys = [f"specsim-sweep-{token}-p{i}-s{s}" for _, i, _, s in todo]
        tasks = [(self.scenario, i, p, s) for _, i, p, s in todo]
        futures = client.map(task, tasks, key=keys, pure=False)
        by_key = {f.key: t for f, t in zip(futures, tasks, strict=True)}
        seen: set[tuple[int, int]] = set()
        try:
            for fut in as_completed(futures):
                _, i, _, s = by_key[fut.key]
                try:
                    point, seed, row = fut.result()
                except KilledWorker:
                    raise ScenarioError(
                        f"{where}: point {i} ({describe(i)}), seed {s}: its workers died "
                        "each time it ran (out of memory?); the finished runs are in the "
                        "journal, finish with --resume") from None
                except FutureCancelledError:
                    raise ScenarioError(f"{where}: the scheduler cancelled the sweep's tasks "
                                        "(was it restarted?); finish with --resume") from None
                except ScenarioError as exc:  # e.g. a worker that cannot read a file named
                    raise ScenarioError(f"point {i} ({describe(i)}), seed {s}, on a Dask "
                                        f"worker: {exc}") from None
                fut.release()
                if (point, seed) in seen:
                    continue
                seen.add((point, seed))
                finished(point, seed, row)
        except BaseException:
            client.cancel(futures)
            raise


@contextlib.contextmanager
def connect(scheduler: str | None, jobs: int, scenario: Any, runs: int
            ) -> Iterator[DaskRunner]:
    """Connect to the scheduler at ``scheduler`` (or start a LocalCluster of ``jobs``
    single-threaded worker processes, at most ``runs``), check the workers, and yield a
    runner; the client (and the LocalCluster) are closed on leaving. One-line errors."""
    require()
    from distributed import Client, LocalCluster

    cluster = None
    where = f"--scheduler {scheduler}" if scheduler else "--backend dask"
    try:
        if scheduler is None:
            cluster = LocalCluster(n_workers=max(1, min(jobs, runs)), threads_per_worker=1,
                                   processes=True, **LOCAL_CLUSTER_QUIET)
            client = Client(cluster)
        else:
            client = Client(scheduler, timeout=CONNECT_TIMEOUT)
    except (OSError, TimeoutError, ValueError) as exc:
        if cluster is not None:
            cluster.close()
        raise ScenarioError(f"{where}: cannot reach the Dask scheduler "
                            f"({type(exc).__name__}: {_first_line(exc)})") from None
    try:
        scenario = _absolute(scenario)
        _check_workers(client, scenario, where)
        yield DaskRunner(client, where, scenario)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def worker_pids(client) -> dict[str, int]:
    """{worker address: its process id} (for tests and operators)."""
    return client.run(os.getpid)
