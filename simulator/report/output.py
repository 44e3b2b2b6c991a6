"""A run's outputs (``specsim run --out DIR``): metrics.json, scenario.json, requests.csv,
the iteration log, report.md and its plots, written by the output-folder protocol of
``specsim.outputs`` (checked before the simulation, staged, moved into place when complete,
never over a file specsim did not write; a failure is one line and leaves nothing).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from specsim.outputs import (
    MARKER,
    Staging,
    check_folder,
    clean_stale,
    escape_frame,
    marker_identity,
)

if TYPE_CHECKING:  # the engine (pandas, the catalogs) is not needed to refuse a bad --out
    from specsim.simulator.cluster.engine import Result

__all__ = ["MARKER", "Staging", "check_destination", "clean_stale", "metrics_json",
           "scenario_json", "write_outputs"]
#: ``specsim run --out``'s check, before the simulation
check_destination = check_folder


def metrics_json(result: Result, include_wall_time: bool = True) -> str:
    from specsim.simulator.cluster.engine import finite_or_none

    m = dict(result.metrics)
    if not include_wall_time:
        m.pop("wall_time_s", None)
    return json.dumps(finite_or_none(m), indent=2, sort_keys=False) + "\n"


def scenario_json(result: Result) -> str:
    """The scenario as it ran (every default filled in): what ``specsim report`` and anyone
    reproducing the run read."""
    from specsim.simulator.cluster.engine import finite_or_none

    return json.dumps(finite_or_none(result.scenario), indent=2, default=str) + "\n"


#: requests.csv's rows built and written at a time
REQUEST_BLOCK = 16_384


def write_outputs(result: Result, out_dir: Path, report: bool = True,
                  force: bool = False, staging: Staging | None = None,
                  plots: bool | str = True) -> str:
    """metrics.json, requests.csv, the iteration log, report.md (+ PNGs) into ``out_dir``.

    ``staging``: the folder the run already streamed its iteration log into (then
    ``result.iterations`` is None). ``plots="later"``: everything else is moved into place,
    then a second process draws the PNGs (``plots_later``; where there can be none,
    ``plots_later.can_fork``, they are drawn here before the commit).
    Returns "new", "empty" or "replace" (what was done).
    Raises a one-line ScenarioError when the destination is not safe or a write fails;
    nothing is then left behind.
    """
    from specsim.simulator.metrics.iteration_log import FILES, open_log, write_csv
    from specsim.simulator.report import plots_later

    if plots == "later" and not plots_later.can_fork():
        plots = True
    if staging is None:
        staging = Staging(out_dir, force)
    tmp = staging.tmp
    fmt = (result.scenario.get("simulation") or {}).get("iteration_log", "csv")
    with staging:  # any failure: the staging folder goes; an OSError is one line
        (tmp / "metrics.json").write_text(metrics_json(result))
        (tmp / "scenario.json").write_text(scenario_json(result))
        # at the end, in request order, fast, a block at a time (a million-request run
        # never holds the whole table); text cells a spreadsheet would run as formulas are
        # escaped
        with open(tmp / "requests.csv", "w", newline="") as f:
            for i, block in enumerate(result.requests_blocks(REQUEST_BLOCK)):
                write_csv(escape_frame(block), f, header=i == 0)
        log_columns = result.iterations_columns()
        if log_columns is not None:
            log = open_log(fmt, tmp)
            log.write(log_columns)
            log.close()
        elif not (tmp / FILES[fmt]).is_file():
            raise OSError(2, f"the streamed {FILES[fmt]} is missing")
        later = None  # the mode, once committed with the plots still to draw
        if report and plots == "later":
            from specsim.simulator.report.report import PLOTS, write_report

            write_report(result, tmp, plots="later")
            later = staging.commit("specsim", later=tuple(n for n, *_ in PLOTS),
                                   scenario=result.metrics.get("scenario"))
        elif report:
            from specsim.simulator.report.report import write_report

            write_report(plots_later.with_log(result, tmp) if plots else result, tmp,
                         plots=plots)
        if later is None:
            return staging.commit("specsim", scenario=result.metrics.get("scenario"))
    # committed: the plots now, by a second process (here if the fork fails)
    if not plots_later.start(result, out_dir, later):
        plots_later.finish(result, out_dir, later, marker_identity(out_dir))
    return later
