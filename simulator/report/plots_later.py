"""The report's PNGs drawn by a second process once the run's other outputs are in place.

Drawing the four report plots costs a `specsim run` 0.5-0.9 s on a 2-core machine (importing
matplotlib, then rendering), longer than a 1k-request simulation itself (issue 22). The
console script therefore writes metrics.json, requests.csv, the iteration log and report.md
(its Plots section saying they are being drawn), moves them into place, and hands the
plots to a forked copy of itself (no second import, no second simulation: the result is
already in its memory), then exits. The copy:

1. draws the plots, report.md and report.html into a temporary folder and moves them into
   the output, the PNGs first, each an atomic rename, only while the output is still the
   one this run committed (``specsim.outputs.amend_committed``, the output-folder
   protocol's one rule for adding to a committed output);
2. writes nothing to the terminal and ends with ``os._exit``.

The marker lists the PNGs' names when the output is committed, so a later ``--force`` may
replace them. Where ``os.fork`` does not exist (Windows) the caller knows before the commit
(``can_fork``) and draws the plots before the command returns, as ``--wait-plots`` asks
everywhere.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

from specsim.outputs import amend_committed, marker_identity

#: the report files that link the PNGs: moved in after them
REPORTS = ("report.md", "report.html")


def can_fork() -> bool:
    """Whether a second process can draw the plots (``os.fork``); decided before the commit,
    so report.md never says "being drawn" where nothing will draw them."""
    return hasattr(os, "fork")


def with_log(result: Any, folder: Path) -> Any:
    """The result with its iteration log for the plots: a streamed log is read back from
    ``folder`` (only the plots use it: the plotted columns, sampled beyond REPORT_ROWS)."""
    if result.iterations_columns() is not None:
        return result
    import dataclasses

    from specsim.simulator.metrics.iteration_log import read_for_report

    return dataclasses.replace(result, iterations=read_for_report(folder))


def finish(result: Any, out_dir: Path, mode: str, ident: tuple[int, int, int] | None) -> bool:
    """Draw the plots and the final report.md / report.html, and move them into ``out_dir``
    if it still holds the output ``ident`` names. Returns whether they were moved in."""
    from specsim.simulator.report.report import write_report

    def draw(tmp: Path) -> None:
        write_report(with_log(result, out_dir), tmp, plots=True)

    return amend_committed(Path(out_dir), mode, ident, draw, last=REPORTS)


def start(result: Any, out_dir: Path, mode: str) -> bool:
    """Hand the plots to a detached copy of this process (a double fork: nothing is left
    for this process to reap). Returns False where the fork fails (out of processes): the
    caller then draws them itself."""
    ident = marker_identity(out_dir)
    with contextlib.suppress(OSError, ValueError):  # nothing buffered is written twice
        sys.stdout.flush()
        sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError:
        return False
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
