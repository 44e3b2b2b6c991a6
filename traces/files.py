"""Write one output file safely: checked before any work, atomic, never over a user's file.

``trace fit --out`` and ``trace stats --png`` write through here: an existing file is
replaced only with ``--force``; a folder, a path under a file, or an unwritable place is a
one-line TraceError; the content goes to a hidden temporary file in the same folder that is
renamed over the target only when complete.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path

from traces.errors import TraceError


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
    parent = path.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        probe = parent / f".{path.name}.specsim-probe-{os.getpid()}-{secrets.token_hex(4)}"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise TraceError(f"{where}: cannot write there ({exc.strerror or exc})") from None
    return path


def write_atomically(path: Path, write: Callable[[Path], None], flag: str) -> None:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then rename it into place."""
    tmp = path.absolute().parent / (f".{path.stem}.specsim-tmp-{os.getpid()}-"
                                    f"{secrets.token_hex(4)}{path.suffix}")
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
