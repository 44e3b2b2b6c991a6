"""Write a run's outputs without ever losing a user's file, and never half-written.

Rules (``specsim run --out DIR``):
- a new folder, or an existing empty one, is written;
- a folder holding a previous specsim output (its ``.specsim-output`` marker lists the
  files specsim wrote, and nothing else is there) is replaced only with ``--force``, and
  only once the new output is complete;
- any other folder, a file, or an unwritable place is refused with one line, before the
  simulation starts; nothing is touched.
Outputs are written into a hidden sibling folder ``.DIR.specsim-tmp-<pid>-<random>`` and
moved into place when complete; such folders left by a killed run (their pid is gone) are
removed by the next run into the same parent. Folders and files follow the user's umask.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import secrets
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from specsim.errors import ScenarioError
from specsim.traces.files import pid_alive

if TYPE_CHECKING:  # the engine (pandas, the catalogs) is not needed to refuse a bad --out
    from specsim.simulator.cluster.engine import Result

MARKER = ".specsim-output"
_TEMP = re.compile(r"^\..*\.specsim-(?:tmp|old)-(\d+)-[0-9a-f]{8}$")
# what specsim writes into an output folder; nothing else is ever replaced
_OURS = re.compile(r"^(?:metrics\.json|scenario\.json|requests\.csv|iterations\.(?:csv|parquet)"
                   r"|report\.(?:md|html)"
                   r"|replay\.(?:csv|json)"
                   r"|[\w.-]+\.png)$")


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


def _stale(entry: Path) -> bool:
    """A ``.NAME.specsim-tmp-<pid>-<hex>`` folder whose run is gone (killed mid-write)."""
    m = _TEMP.match(entry.name)
    return bool(m) and entry.is_dir() and not entry.is_symlink() and not pid_alive(int(m.group(1)))


def clean_stale(parent: Path) -> list[Path]:
    """Remove temporary folders that killed specsim runs left in ``parent``."""
    removed = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return removed
    for entry in entries:
        if _stale(entry):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _written_by_specsim(folder: Path) -> tuple[bool, str | None]:
    """(has our marker, the first entry in it that specsim did not write).

    An entry is ours only if the marker lists it, it is a name specsim writes, and it is
    not a folder: a hand-edited marker cannot make specsim delete anything else."""
    # a killed run's temporary folder is not the user's: it is removed before writing
    entries = sorted((p for p in folder.iterdir() if not _stale(p)), key=lambda p: p.name)
    marker = folder / MARKER
    ours: set[str] = set()
    if marker.is_file() and not marker.is_symlink():
        try:
            listed = json.loads(marker.read_text())["files"]
            ours = {n for n in listed if isinstance(n, str) and _OURS.match(n)} | {MARKER}
        except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError):
            ours = set()
    foreign = next((p.name for p in entries
                    if p.name not in ours or (p.is_dir() and not p.is_symlink())), None)
    return bool(ours), foreign


def _abs(out_dir: Path) -> Path:
    """The absolute path with ``.`` and ``..`` resolved (so ``--out ..`` names the folder
    above, not one called ``..``)."""
    return Path(os.path.realpath(out_dir.parent)) / out_dir.name if out_dir.name not in (
        "", ".", "..") else Path(os.path.realpath(out_dir))


def _probe_ancestor(folder: Path) -> None:
    """Raise OSError unless ``folder`` could be created (or exists) and written into; creates
    nothing that stays: the check runs in the nearest existing ancestor."""
    existing = folder
    while not os.path.lexists(existing):
        existing = existing.parent
    if not existing.is_dir():
        raise NotADirectoryError(20, f"{existing} is a file, not a folder")
    probe = existing / f".probe.specsim-tmp-{os.getpid()}-{secrets.token_hex(4)}"
    os.mkdir(probe)
    os.rmdir(probe)


def check_destination(out_dir: Path, force: bool = False) -> str:
    """Refuse (one line) any ``--out`` that is not safe to write; returns what will happen:
    "new", "empty" or "replace". Run before the simulation so a bad path costs nothing."""
    out_dir = Path(out_dir)
    where = f"--out {out_dir}"
    if out_dir.is_symlink():
        raise ScenarioError(f"{where}: is a symbolic link; give a real folder")
    if out_dir.exists() and not out_dir.is_dir():
        raise ScenarioError(f"{where}: is a file, not a folder; nothing was written")
    mode = "new"
    if out_dir.is_dir():
        try:
            has_marker, foreign = _written_by_specsim(out_dir)
        except OSError as exc:
            raise ScenarioError(f"{where}: cannot be read ({exc.strerror or exc})") from None
        if not has_marker and foreign is None:
            mode = "empty"
        elif not has_marker:
            raise ScenarioError(f"{where}: holds files specsim did not write (e.g. {foreign!r}); "
                                "choose an empty or new folder")
        elif foreign is not None:
            raise ScenarioError(f"{where}: holds a previous specsim output and {foreign!r}, which "
                                "specsim did not write; not replacing it")
        elif not force:
            raise ScenarioError(f"{where}: holds a previous specsim output; pass --force to "
                                "replace it, or choose another folder")
        else:
            mode = "replace"
    try:
        _probe_ancestor(_staging(out_dir, mode))
    except OSError as exc:
        raise ScenarioError(f"{where}: cannot write there ({exc.strerror or exc})") from None
    return mode


def _staging(out_dir: Path, mode: str) -> Path:
    """Where the temporary folder goes: beside ``out_dir``, or inside an existing empty one
    (so ``--out .`` works where the folder above cannot be written)."""
    return _abs(out_dir) if mode == "empty" else _abs(out_dir).parent


def _temp_dir(parent: Path, out_dir: Path, kind: str = "tmp") -> Path:
    name = _abs(out_dir).name or "out"
    path = parent / f".{name}.specsim-{kind}-{os.getpid()}-{secrets.token_hex(4)}"
    os.mkdir(path, 0o777)  # the umask applies, as for any folder the user creates
    return path


class Staging:
    """The hidden folder a run's outputs are written into before they move to ``--out``
    (opened before the simulation when the iteration log is streamed into it)."""

    def __init__(self, out_dir: Path, force: bool = False) -> None:
        self.out_dir = Path(out_dir)
        self.mode = check_destination(self.out_dir, force)
        self.parent = _abs(self.out_dir).parent
        staging = _staging(self.out_dir, self.mode)
        try:
            staging.mkdir(parents=True, exist_ok=True)
            for folder in {self.parent, staging}:  # what killed runs left there
                clean_stale(folder)
            self.tmp = _temp_dir(staging, self.out_dir)
        except OSError as exc:
            raise ScenarioError(f"--out {out_dir}: cannot write there "
                                f"({exc.strerror or exc})") from None

    def discard(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def write_outputs(result: Result, out_dir: Path, report: bool = True,
                  force: bool = False, staging: Staging | None = None,
                  plots: bool = True) -> str:
    """metrics.json, requests.csv, the iteration log, report.md (+ PNGs) into ``out_dir``.

    ``staging``: the folder the run already streamed its iteration log into (then
    ``result.iterations`` is None). Returns "new", "empty" or "replace" (what was done).
    Raises a one-line ScenarioError when the destination is not safe or a write fails;
    nothing is then left behind.
    """
    from specsim.simulator.metrics.iteration_log import FILES, open_log, read_for_report, write_csv

    if staging is None:
        staging = Staging(out_dir, force)
    tmp, mode = staging.tmp, staging.mode
    fmt = (result.scenario.get("simulation") or {}).get("iteration_log", "csv")
    try:
        (tmp / "metrics.json").write_text(metrics_json(result))
        (tmp / "scenario.json").write_text(scenario_json(result))
        # at the end (the request table is in memory anyway), in request order, fast
        with open(tmp / "requests.csv", "w", newline="") as f:
            write_csv(result.requests, f)
        if result.iterations is not None:
            log = open_log(fmt, tmp)
            log.write(result.iterations)
            log.close()
        elif not (tmp / FILES[fmt]).is_file():
            raise OSError(2, f"the streamed {FILES[fmt]} is missing")
        if report:
            import dataclasses

            from specsim.simulator.report.report import write_report

            # a streamed log is read back for the plots (only they use it): the plotted
            # columns, sampled beyond REPORT_ROWS
            shown = result if result.iterations is not None or not plots else \
                dataclasses.replace(result, iterations=read_for_report(tmp))
            write_report(shown, tmp, plots=plots)
        files = sorted(p.name for p in tmp.iterdir())
        (tmp / MARKER).write_text(json.dumps({
            "written_by": "specsim", "version": _version(),
            "scenario": result.metrics.get("scenario"),
            "utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "files": files}, indent=1) + "\n")
        _move_into_place(tmp, Path(out_dir), mode, staging.parent)
    except OSError as exc:
        staging.discard()
        raise ScenarioError(f"--out {out_dir}: could not write the outputs "
                            f"({exc.strerror or exc}); nothing was left there") from None
    except BaseException:
        staging.discard()
        raise
    return mode


def _move_into_place(tmp: Path, out_dir: Path, mode: str, parent: Path) -> None:
    if mode == "new":
        os.replace(tmp, out_dir)
    elif mode == "empty":  # the folder stays the user's; our files move in, marker last
        names = sorted(p.name for p in tmp.iterdir() if p.name != MARKER) + [MARKER]
        moved = []
        try:
            for name in names:
                if os.path.lexists(out_dir / name):  # someone wrote there meanwhile
                    raise FileExistsError(17, f"{name} appeared in the folder meanwhile")
                os.replace(tmp / name, out_dir / name)
                moved.append(name)
        except BaseException:
            for name in moved:  # leave the folder empty, as it was
                (out_dir / name).unlink(missing_ok=True)
            raise
        tmp.rmdir()
    else:  # replace a previous specsim output once the new one is complete
        old = parent / f".{_abs(out_dir).name}.specsim-old-{os.getpid()}-" \
                       f"{secrets.token_hex(4)}"
        os.replace(out_dir, old)
        try:
            os.replace(tmp, out_dir)
        except BaseException:
            os.replace(old, out_dir)  # put the previous output back
            raise
        shutil.rmtree(old, ignore_errors=True)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("specsim")
    except PackageNotFoundError:
        return "unknown"
