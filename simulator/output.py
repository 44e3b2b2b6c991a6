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

from .engine import Result, finite_or_none
from .errors import ScenarioError

MARKER = ".specsim-output"
_TEMP = re.compile(r"^\..*\.specsim-(?:tmp|old)-(\d+)-[0-9a-f]+$")


def metrics_json(result: Result, include_wall_time: bool = True) -> str:
    m = dict(result.metrics)
    if not include_wall_time:
        m.pop("wall_time_s", None)
    return json.dumps(finite_or_none(m), indent=2, sort_keys=False) + "\n"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def clean_stale(parent: Path) -> list[Path]:
    """Remove temporary folders that killed specsim runs left in ``parent``."""
    removed = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return removed
    for entry in entries:
        m = _TEMP.match(entry.name)
        if m and entry.is_dir() and not entry.is_symlink() and not _alive(int(m.group(1))):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _written_by_specsim(folder: Path) -> tuple[bool, str | None]:
    """(has our marker, the first file in it that specsim did not write)."""
    names = sorted(p.name for p in folder.iterdir())
    marker = folder / MARKER
    ours: set[str] = set()
    if marker.is_file():
        try:
            ours = set(json.loads(marker.read_text())["files"]) | {MARKER}
        except (OSError, ValueError, KeyError, TypeError):
            ours = set()
    foreign = next((n for n in names if n not in ours), None)
    return bool(ours), foreign


def check_destination(out_dir: Path, force: bool = False) -> str:
    """Refuse (one line) any ``--out`` that is not safe to write; returns what will happen:
    "new", "empty" or "replace". Run before the simulation so a bad path costs nothing."""
    out_dir = Path(out_dir)
    where = f"--out {out_dir}"
    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
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
    parent = out_dir.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        probe = _temp_dir(parent, out_dir)
        probe.rmdir()
    except OSError as exc:
        raise ScenarioError(f"{where}: cannot write there ({exc.strerror or exc})") from None
    return mode


def _temp_dir(parent: Path, out_dir: Path, kind: str = "tmp") -> Path:
    name = out_dir.absolute().name or "out"
    path = parent / f".{name}.specsim-{kind}-{os.getpid()}-{secrets.token_hex(4)}"
    os.mkdir(path, 0o777)  # the umask applies, as for any folder the user creates
    return path


def write_outputs(result: Result, out_dir: Path, report: bool = True,
                  force: bool = False) -> str:
    """metrics.json, requests.csv, iterations.csv, report.md (+ PNGs) into ``out_dir``.

    Returns "new", "empty" or "replace" (what was done). Raises a one-line ScenarioError
    when the destination is not safe or a write fails; nothing is then left behind.
    """
    out_dir = Path(out_dir)
    mode = check_destination(out_dir, force)
    parent = out_dir.absolute().parent
    clean_stale(parent)
    tmp = _temp_dir(parent, out_dir)
    try:
        (tmp / "metrics.json").write_text(metrics_json(result))
        result.requests.to_csv(tmp / "requests.csv", index=False, float_format="%.9g")
        result.iterations.to_csv(tmp / "iterations.csv", index=False, float_format="%.9g")
        if report:
            from .report import write_report

            write_report(result, tmp)
        files = sorted(p.name for p in tmp.iterdir())
        (tmp / MARKER).write_text(json.dumps({
            "written_by": "specsim", "scenario": result.metrics.get("scenario"),
            "utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "files": files}, indent=1) + "\n")
        _move_into_place(tmp, out_dir, mode, parent)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ScenarioError(f"--out {out_dir}: could not write the outputs "
                            f"({exc.strerror or exc}); nothing was left there") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return mode


def _move_into_place(tmp: Path, out_dir: Path, mode: str, parent: Path) -> None:
    if mode == "new":
        os.replace(tmp, out_dir)
    elif mode == "empty":  # the folder stays the user's; our files move in, marker last
        names = sorted(p.name for p in tmp.iterdir() if p.name != MARKER) + [MARKER]
        for name in names:
            os.replace(tmp / name, out_dir / name)
        tmp.rmdir()
    else:  # replace a previous specsim output once the new one is complete
        old = parent / f".{out_dir.absolute().name}.specsim-old-{os.getpid()}-" \
                       f"{secrets.token_hex(4)}"
        os.replace(out_dir, old)
        try:
            os.replace(tmp, out_dir)
        except OSError:
            os.replace(old, out_dir)  # put the previous output back
            raise
        shutil.rmtree(old, ignore_errors=True)
