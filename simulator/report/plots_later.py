"""The report's PNGs drawn by a second process once the run's other outputs are in place.

Drawing the four report plots costs a `specsim run` 0.5-0.9 s on a 2-core machine (importing
matplotlib, then rendering), longer than a 1k-request simulation itself (issue 22). The
console script therefore writes metrics.json, requests.csv, the iteration log and report.md
(its Plots section saying they are being drawn), moves them into place, and hands the
plots to a forked copy of itself (no second import, no second simulation: the result is
already in its memory), then exits. The copy:

1. draws the plots, report.md and report.html into a temporary folder beside the output
   (``specsim.outputs.temp_name``: a killed copy's leftovers are cleaned like a killed run's);
2. moves each PNG into the output, then report.md and report.html (each an atomic rename,
   so nothing is ever half-written), and only while the output is still the one this run
   committed (its marker file unchanged: a later ``--force`` run into the same folder is
   never touched);
3. writes nothing to the terminal and ends with ``os._exit``.

The marker lists the PNGs' names when the output is committed, so a later ``--force`` may
replace them. Where ``os.fork`` does not exist (Windows) the plots are drawn before the
command returns, as ``--wait-plots`` asks everywhere.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from specsim.outputs import MARKER, _staging_parent, temp_name


def identity(out_dir: Path) -> tuple[int, int, int] | None:
    """What tells this run's committed output from a later one: its marker's device, inode
    and modification time (None: no marker, the folder is gone or replaced)."""
    try:
        st = os.stat(Path(out_dir) / MARKER)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns)


def with_log(result: Any, folder: Path) -> Any:
    """The result with its iteration log for the plots: a streamed log is read back from
    ``folder`` (only the plots use it: the plotted columns, sampled beyond REPORT_ROWS)."""
    if result.iterations is not None:
        return result
    import dataclasses

    from specsim.simulator.metrics.iteration_log import read_for_report

    return dataclasses.replace(result, iterations=read_for_report(folder))


def finish(result: Any, out_dir: Path, mode: str, ident: tuple[int, int, int] | None) -> bool:
    """Draw the plots and the final report.md / report.html, and move them into ``out_dir``
    if it still holds the output ``ident`` names. Returns whether they were moved in."""
    from specsim.simulator.report.report import write_report

    out_dir = Path(out_dir)
    tmp = temp_name(_staging_parent(out_dir, mode), out_dir.name or "out")
    os.mkdir(tmp, 0o777)
    try:
        write_report(with_log(result, out_dir), tmp, plots=True)
        if ident is None or identity(out_dir) != ident:
            return False
        names = sorted(p.name for p in tmp.iterdir() if p.suffix == ".png")
        for name in [*names, "report.md", "report.html"]:
            if (tmp / name).is_file():
                os.replace(tmp / name, out_dir / name)
        return True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def start(result: Any, out_dir: Path, mode: str) -> bool:
    """Hand the plots to a detached copy of this process (a double fork: nothing is left
    for this process to reap). Returns False where ``os.fork`` does not exist: the caller
    then draws them itself."""
    if not hasattr(os, "fork"):
        return False
    ident = identity(out_dir)
    with contextlib.suppress(OSError, ValueError):  # nothing buffered is written twice
        sys.stdout.flush()
        sys.stderr.flush()
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)  # the first child exits at once
        return True
    try:  # the first child: a new session, then the grandchild does the work
        os.setsid()
        if os.fork():
            os._exit(0)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        finish(result, out_dir, mode, ident)
    except BaseException:  # noqa: BLE001 - a plot must never reach the user's terminal
        pass
    os._exit(0)
