"""Write one output file safely: checked before any work, atomic, never over a user's file.

``trace fit --out`` and ``trace stats --png`` write through here: an existing file is
replaced only with ``--force``; a folder, a path under a file, or an unwritable place is a
one-line TraceError; the content goes to a hidden temporary file in the same folder that is
renamed over the target only when complete. Such a file left by a killed run
(``.NAME.specsim-tmp-<pid>-<hex>[.ext]``, its pid gone) is removed by the next write there.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Callable
from pathlib import Path

from specsim.traces.errors import TraceError

_TEMP = re.compile(r"^\..*\.specsim-tmp-(\d+)-[0-9a-f]{8}(?:\.[^.]+)?$")


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid runs (a pid too large to exist counts as running:
    the cautious answer when deciding whether a temporary file is stale)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _clean_stale(folder: Path) -> None:
    """Remove temporary files that killed specsim runs left in ``folder`` (exact pattern)."""
    try:
        entries = list(folder.iterdir())
    except OSError:
        return
    for entry in entries:
        m = _TEMP.match(entry.name)
        if m and entry.is_file() and not entry.is_symlink() and not pid_alive(int(m.group(1))):
            entry.unlink(missing_ok=True)


def _temp_name(path: Path) -> Path:
    return path.absolute().parent / (f".{path.stem}.specsim-tmp-{os.getpid()}-"
                                     f"{secrets.token_hex(4)}{path.suffix}")


def check_file_destination(path: str | Path, force: bool, flag: str) -> Path:
    """The target path, or a one-line TraceError saying why it cannot be written."""
    path = Path(path)
    where = f"{flag} {path}"
    if path.is_dir():
        raise TraceError(f"{where}: is a folder; give a file name")
    if path.exists() or path.is_symlink():
        if not force:
            raise TraceError(f"{where}: already exists; pass --force to replace it")
        if not path.is_file():
            raise TraceError(f"{where}: is not a regular file; not replacing it")
    try:  # probe the nearest existing folder; nothing is created that stays
        existing = path.absolute().parent
        while not os.path.lexists(existing):
            existing = existing.parent
        if not existing.is_dir():
            raise NotADirectoryError(20, f"{existing} is a file, not a folder")
        probe = _temp_name(existing / path.name)
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise TraceError(f"{where}: cannot write there ({exc.strerror or exc})") from None
    return path


def write_atomically(path: Path, write: Callable[[Path], None], flag: str) -> None:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then rename it into place."""
    parent = path.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TraceError(f"{flag} {path}: cannot write there ({exc.strerror or exc})") from None
    _clean_stale(parent)
    tmp = _temp_name(path)
    try:
        write(tmp)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise TraceError(f"{flag} {path}: could not write it ({exc.strerror or exc})") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
