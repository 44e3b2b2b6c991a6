"""Everything specsim writes goes through here: checked before any work, atomic, never over
a file specsim did not write, and a failure is one line that leaves nothing behind.

Two protocols, one naming rule for temporary entries:

- an output *folder* (``run``, ``replay``, ``plan``): a new folder, an existing empty
  one, or a previous specsim output (its ``.specsim-output`` marker lists the files specsim
  wrote, nothing else is there) -- the last replaced only with ``--force``, and only once
  the new output is complete. Outputs are written into a hidden staging folder
  ``.DIR.specsim-tmp-<pid>-<hex>`` beside it and moved into place when complete;
- an output *file* (``trace fit --out``, ``trace stats --png``, ``calibrate --out``,
  ``acceptance import --out``, ``schema --out``): written to a hidden temporary file
  ``.NAME.specsim-tmp-<pid>-<hex>.EXT`` in the same folder, then renamed over the target;
  an existing file only with ``--force``, never a folder or a symbolic link.

Temporary entries a killed run left (their pid is gone) are removed by the next write into
the same folder. Files and folders follow the user's umask. Anything that goes wrong while
writing (a full disk, a read-only folder, /proc) is a one-line ScenarioError naming the
flag and the path; the caller prints it and exits 2.

CSV cells: a text cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage
return would run as a formula in a spreadsheet, so it is written with a leading ``'``
(OWASP's advice); numbers stay numbers (only text cells are touched), and a text cell that
already starts with ``'`` and one of those characters gets one more, so ``unescape_cell``
gives every cell back exactly.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import html
import json
import os
import re
import secrets
import shutil
import signal
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from specsim.errors import ScenarioError

MARKER = ".specsim-output"
#: a temporary entry: ``.NAME.specsim-tmp-<pid>-<hex>[.ext]`` (or ``-old-`` while replacing)
_TEMP = re.compile(r"^\..*\.specsim-(?:tmp|old)-(\d+)-[0-9a-f]{8}(?:\.[^.]+)?$")
#: what specsim writes into an output folder; nothing else is ever replaced
_OURS = re.compile(r"^(?:metrics\.json|scenario\.json|requests\.csv|iterations\.(?:csv|parquet)"
                   r"|report\.(?:md|html)|replay\.(?:csv|json)|plan\.csv|day\.(?:csv|json)"
                   r"|sensitivity\.csv|advise\.json"
                   r"|[\w.-]+\.png)$")


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid runs (a pid too large to exist counts as running:
    the cautious answer when deciding whether a temporary entry is stale)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def is_temp(name: str) -> bool:
    """Whether ``name`` is one of specsim's temporary entries (a killed run's, or a live one)."""
    return bool(_TEMP.match(name))


def _stale(entry: Path) -> bool:
    m = _TEMP.match(entry.name)
    return bool(m) and not entry.is_symlink() and not pid_alive(int(m.group(1)))


def clean_stale(parent: Path) -> list[Path]:
    """Remove the temporary files and folders killed specsim runs left in ``parent``."""
    removed: list[Path] = []
    try:
        entries = list(Path(parent).iterdir())
    except OSError:
        return removed
    for entry in entries:
        if _stale(entry):
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    entry.unlink()
            removed.append(entry)
    return removed


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def cannot_write(flag: str, path: Any, exc: OSError) -> ScenarioError:
    """The one line for a place specsim cannot write into."""
    return ScenarioError(f"{flag} {path}: cannot write there ({_why(exc)})")


def write_failed(flag: str, path: Any, exc: OSError) -> ScenarioError:
    """The one line for a write that failed midway (a full disk): nothing was left."""
    return ScenarioError(f"{flag} {path}: could not write it ({_why(exc)}); "
                         "nothing was left there")


def absolute(path: Path) -> Path:
    """The absolute path with ``.`` and ``..`` resolved (so ``--out ..`` names the folder
    above, not one called ``..``); the last name itself is not resolved (a link stays one)."""
    path = Path(path)
    if path.name in ("", ".", ".."):
        return Path(os.path.realpath(path))
    return Path(os.path.realpath(path.parent)) / path.name


def temp_name(parent: Path, name: str, suffix: str = "", kind: str = "tmp") -> Path:
    """A fresh temporary name in ``parent`` that ``clean_stale`` recognises."""
    return Path(parent) / (f".{name or 'out'}.specsim-{kind}-{os.getpid()}-"
                           f"{secrets.token_hex(4)}{suffix}")


def probe(folder: Path) -> None:
    """Raise OSError unless ``folder`` could be created (or exists) and written into;
    nothing stays: the check runs in the nearest existing ancestor."""
    existing = absolute(folder)
    while not os.path.lexists(existing):
        existing = existing.parent
    if not existing.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, f"{existing} is a file, not a folder")
    path = temp_name(existing, "probe")
    os.mkdir(path)
    os.rmdir(path)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _refuse_empty(flag: str, path: Any) -> None:
    if not str(path):
        raise ScenarioError(f"{flag}: expected a path, got an empty one")


# ------------------------------------------------------------------ one output file
def check_file(path: str | Path, force: bool = False, flag: str = "--out") -> Path:
    """The target file, or a one-line ScenarioError saying why it cannot be written: a
    folder, a symbolic link or anything but a regular file, an existing file without
    ``force``, or a place that cannot be written. Creates nothing."""
    _refuse_empty(flag, path)
    path = Path(path)
    where = f"{flag} {path}"
    if path.is_symlink():
        raise ScenarioError(f"{where}: is a symbolic link; not writing through it")
    if path.is_dir():
        raise ScenarioError(f"{where}: is a folder; give a file name")
    if os.path.lexists(path):
        if not path.is_file():
            raise ScenarioError(f"{where}: is not a regular file; not replacing it")
        if not force:
            raise ScenarioError(f"{where}: already exists; pass --force to replace it")
    try:
        probe(absolute(path).parent)
    except OSError as exc:
        raise cannot_write(flag, path, exc) from None
    return path


def atomic_write(path: Path, write: Callable[[Path], None] | str | bytes,
                 replace: bool = True) -> None:
    """Write ``path`` through a temporary file beside it renamed into place when complete.

    ``write`` is text, bytes, or a function that writes the file it is given. With
    ``replace=False`` an entry that appeared at ``path`` meanwhile is never replaced
    (FileExistsError). Raises OSError; the temporary file is gone whatever happens."""
    path = absolute(Path(path))
    tmp = temp_name(path.parent, path.stem, path.suffix)
    try:
        if isinstance(write, str | bytes):
            data = write.encode("utf-8") if isinstance(write, str) else write
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
        else:
            write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            _publish_new(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _publish_new(tmp: Path, path: Path) -> None:
    """Rename ``tmp`` to ``path`` unless something is there: a hard link fails if the name
    exists (no window in which a file made meanwhile is replaced); where the file system
    has no hard links, the check and the rename are as close together as they can be."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK):
            raise
        if os.path.lexists(path):
            raise FileExistsError(errno.EEXIST, f"{path} appeared meanwhile") from None
        os.replace(tmp, path)
        return
    os.unlink(tmp)


def write_file(path: str | Path, write: Callable[[Path], None] | str | bytes,
               force: bool = False, flag: str = "--out") -> Path:
    """Check ``path`` (``check_file``), then write it atomically, making missing folders.

    A failure is a one-line ScenarioError and leaves neither the file nor a folder it made."""
    path = check_file(path, force, flag)
    target = absolute(path)
    made = missing_folders(target.parent)
    try:
        for folder in reversed(made):
            os.mkdir(folder, 0o777)
        clean_stale(target.parent)
        atomic_write(target, write, replace=force)
    except OSError as exc:
        remove_empty_folders(made)
        if isinstance(exc, FileExistsError):
            raise ScenarioError(f"{flag} {path}: appeared while writing; pass --force to "
                                "replace it") from None
        raise write_failed(flag, path, exc) from None
    except BaseException:
        remove_empty_folders(made)
        raise
    return path


def missing_folders(folder: Path) -> list[Path]:
    """``folder`` and those of its ancestors that do not exist yet, deepest first."""
    made = []
    folder = absolute(folder)
    while not os.path.lexists(folder):
        made.append(folder)
        folder = folder.parent
    return made


def remove_empty_folders(folders: list[Path]) -> None:
    """Remove the folders specsim made (deepest first) as long as they are empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


# ------------------------------------------------------------------ an output folder
def _ours_in(folder: Path) -> tuple[bool, str | None]:
    """(has our marker, the first entry in it that specsim did not write).

    An entry is ours only if the marker lists it, it is a name specsim writes, and it is
    a plain file (not a folder, not a link): a hand-edited marker cannot make specsim
    delete anything else."""
    entries = sorted((p for p in folder.iterdir() if not (_stale(p) and p.is_dir())),
                     key=lambda p: p.name)
    marker = folder / MARKER
    ours: set[str] = set()
    if marker.is_file() and not marker.is_symlink():
        try:
            from specsim import safe_read  # a hand-made marker is read under the caps

            listed = safe_read.load_json(marker, "specsim's output marker")["files"]
            ours = {n for n in listed if isinstance(n, str) and _OURS.match(n)} | {MARKER}
        except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError):
            ours = set()
    foreign = next((p.name for p in entries  # specsim writes no links and no sub-folders
                    if p.name not in ours or p.is_symlink() or p.is_dir()), None)
    return bool(ours), foreign


def check_folder(out_dir: str | Path, force: bool = False, flag: str = "--out") -> str:
    """Refuse (one line) an output folder that is not safe to write; returns what will
    happen: "new", "empty" or "replace". Run it before the work so a bad path costs nothing."""
    _refuse_empty(flag, out_dir)
    out_dir = Path(out_dir)
    where = f"{flag} {out_dir}"
    if out_dir.is_symlink():
        raise ScenarioError(f"{where}: is a symbolic link; give a real folder")
    if os.path.lexists(out_dir) and not out_dir.is_dir():
        raise ScenarioError(f"{where}: is a file, not a folder; nothing was written")
    mode = "new"
    if out_dir.is_dir():
        try:
            has_marker, foreign = _ours_in(out_dir)
        except OSError as exc:
            raise ScenarioError(f"{where}: cannot be read ({_why(exc)})") from None
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
        probe(_staging_parent(out_dir, mode))
    except OSError as exc:
        raise cannot_write(flag, out_dir, exc) from None
    return mode


def _staging_parent(out_dir: Path, mode: str) -> Path:
    """Where the staging folder goes: beside ``out_dir``, or inside an existing empty one
    (so ``--out .`` works where the folder above cannot be written)."""
    return absolute(out_dir) if mode == "empty" else absolute(out_dir).parent


def version() -> str:
    """specsim's version (``specsim --version``, output folders' markers, sweep folders):
    ``specsim.__version__``, the one place it is written (pyproject.toml reads it), so no
    distribution-metadata lookup (importlib.metadata's import and the lookup cost 25-65 ms
    of a run)."""
    from specsim import __version__

    return __version__


class Staging:
    """The hidden folder an output is written into before it moves to ``out_dir``.

    Opened after ``check_folder`` (it checks again: the folder may have changed since);
    ``commit`` writes the marker and moves everything into place; ``discard`` removes it.
    Used as a context manager, any failure inside discards it, and an OSError becomes the
    one-line ScenarioError."""

    def __init__(self, out_dir: str | Path, force: bool = False, flag: str = "--out") -> None:
        self.out_dir = Path(out_dir)
        self.flag = flag
        self.mode = check_folder(self.out_dir, force, flag)
        self.parent = absolute(self.out_dir).parent
        staging = _staging_parent(self.out_dir, self.mode)
        self._made = missing_folders(staging)  # removed again if the output is never committed
        try:
            for folder in reversed(self._made):
                os.mkdir(folder, 0o777)
            for folder in {self.parent, staging}:  # what killed runs left there
                clean_stale(folder)
            self.tmp = temp_name(staging, absolute(self.out_dir).name)
            os.mkdir(self.tmp, 0o777)  # the umask applies, as for any folder the user makes
        except OSError as exc:
            remove_empty_folders(self._made)
            raise cannot_write(flag, out_dir, exc) from None

    def discard(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)
        remove_empty_folders(self._made)

    def commit(self, written_by: str = "specsim", later: tuple[str, ...] = (),
               **info: Any) -> str:
        """Write the marker (listing every file staged, and ``later``: files a second
        process will move in, so a later ``--force`` may replace them) and move the output
        into place; returns the mode ("new", "empty" or "replace")."""
        files = sorted({p.name for p in self.tmp.iterdir()} | set(later))
        (self.tmp / MARKER).write_text(json.dumps({
            "written_by": written_by, "version": version(), **info,
            "utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "files": files}, indent=1) + "\n")
        _move_into_place(self.tmp, self.out_dir, self.mode, self.parent)
        return self.mode

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None:
            return
        self.discard()
        if isinstance(exc, OSError):
            raise write_failed(self.flag, self.out_dir, exc) from None


def write_folder(out_dir: str | Path, fill: Callable[[Path], None], force: bool = False,
                 flag: str = "--out", written_by: str = "specsim", **info: Any) -> str:
    """Check ``out_dir``, let ``fill`` write the files into the staging folder it is given,
    then commit; returns "new", "empty" or "replace"."""
    with Staging(out_dir, force, flag) as staging:
        fill(staging.tmp)
        return staging.commit(written_by, **info)


def marker_identity(out_dir: Path) -> tuple[int, int, int] | None:
    """What tells a committed output from a later one in the same folder: its marker's
    device, inode and modification time (None: no marker, the folder gone or replaced)."""
    try:
        st = os.stat(Path(out_dir) / MARKER)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns)


def amend_committed(out_dir: Path, mode: str, ident: tuple[int, int, int] | None,
                    fill: Callable[[Path], None], last: tuple[str, ...] = ()) -> bool:
    """Add files to an output after its commit (the report's plots, drawn by a second
    process): ``fill`` writes them into a temporary folder where the output was staged
    (``mode``, as ``check_folder`` said), then each file the marker names moves in, one
    atomic rename each (``last`` after the others: a report after the PNGs it links), only
    while ``out_dir`` still holds the output ``ident`` names (``marker_identity`` at the
    commit): a later ``--force`` run's folder is never touched. Returns whether they moved
    in; the temporary folder always goes."""
    out_dir = Path(out_dir)
    tmp = temp_name(_staging_parent(out_dir, mode), out_dir.name or "out")
    os.mkdir(tmp, 0o777)
    try:
        fill(tmp)
        if ident is None or marker_identity(out_dir) != ident:
            return False
        listed = set(json.loads((out_dir / MARKER).read_text())["files"])
        names = sorted(p.name for p in tmp.iterdir() if p.name not in last)
        for name in [*names, *last]:
            if name in listed and (tmp / name).is_file():
                os.replace(tmp / name, out_dir / name)
        return True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _move_into_place(tmp: Path, out_dir: Path, mode: str, parent: Path) -> None:
    if mode == "new":
        if os.path.lexists(out_dir):  # made meanwhile: not ours to replace
            raise FileExistsError(errno.EEXIST, f"{out_dir} appeared meanwhile")
        os.replace(tmp, out_dir)
    elif mode == "empty":  # the folder stays the user's; our files move in, marker last
        names = sorted(p.name for p in tmp.iterdir() if p.name != MARKER) + [MARKER]
        moved = []
        try:
            for name in names:
                if os.path.lexists(out_dir / name):  # someone wrote there meanwhile
                    raise FileExistsError(errno.EEXIST,
                                          f"{name} appeared in the folder meanwhile")
                os.replace(tmp / name, out_dir / name)
                moved.append(name)
        except BaseException:
            for name in moved:  # leave the folder empty, as it was
                (out_dir / name).unlink(missing_ok=True)
            raise
        tmp.rmdir()
    else:  # replace a previous specsim output once the new one is complete
        old = temp_name(parent, absolute(out_dir).name, kind="old")
        os.replace(out_dir, old)
        try:
            os.replace(tmp, out_dir)
        except BaseException:
            os.replace(old, out_dir)  # put the previous output back
            raise
        shutil.rmtree(old, ignore_errors=True)


# ------------------------------------------------------------------ CSV and Markdown cells
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _needs_quote(v: str) -> bool:
    return v.startswith(_FORMULA) or (v.startswith("'") and v[1:2] != "" and
                                      v[1:].startswith(_FORMULA))


def escape_cell(v: Any) -> Any:
    """A text cell a spreadsheet would run as a formula, with a leading ``'``; anything
    else (numbers included) as it is."""
    return "'" + v if isinstance(v, str) and _needs_quote(v) else v


def unescape_cell(v: Any) -> Any:
    """``escape_cell`` undone (for reading specsim's own CSVs back)."""
    return v[1:] if isinstance(v, str) and v.startswith("'") and _needs_quote(v[1:]) else v


def escape_frame(frame: Any) -> Any:
    """The frame with every text cell escaped (``escape_cell``); the same object when no
    cell needs it (the common case costs one pass over each text column's distinct values).
    ``frame`` may be a block's columns by name (numpy arrays): escaped without pandas."""
    if isinstance(frame, Mapping):
        return _escape_columns(frame)
    import pandas as pd

    changed = {}
    for name in frame.columns:
        s = frame[name]
        if isinstance(s.dtype, pd.CategoricalDtype):
            cats = list(s.cat.categories)
            if any(isinstance(c, str) and _needs_quote(c) for c in cats):
                changed[name] = s.cat.rename_categories([escape_cell(c) for c in cats])
        elif _is_text(s.dtype):
            if any(isinstance(v, str) and _needs_quote(v) for v in pd.unique(s.to_numpy())):
                changed[name] = s.map(escape_cell)
    if not changed:
        return frame
    out = frame.copy()
    for name, s in changed.items():
        out[name] = s
    return out


def _escape_columns(cols: Mapping[str, Any]) -> Mapping[str, Any]:
    """``escape_frame`` of a block's columns: its object (text) arrays escaped, the others
    as they are; the same mapping when no cell needs it."""
    changed = {}
    for name, col in cols.items():
        if col.dtype.kind != "O":
            continue
        values = col.tolist()
        if any(isinstance(v, str) and _needs_quote(v) for v in set(values)):
            out = col.copy()
            out[:] = [escape_cell(v) for v in values]
            changed[name] = out
    return {**cols, **changed} if changed else cols


def unescape_frame(frame: Any) -> Any:
    """``escape_frame`` undone, for a CSV specsim wrote and reads back."""

    for name in frame.columns:
        if _is_text(frame[name].dtype):
            frame[name] = frame[name].map(unescape_cell)
    return frame


def _is_text(dtype: Any) -> bool:
    import pandas as pd

    return pd.api.types.is_object_dtype(dtype) or isinstance(dtype, pd.StringDtype)


def md_text(text: Any) -> str:
    """User text (a scenario, class or tier name) as Markdown shows it: ``&``, ``<`` and
    ``>`` as character references, so no raw HTML reaches a Markdown viewer."""
    return html.escape(str(text), quote=False)


# ------------------------------------------------------------------ standard output
class StdoutClosed(Exception):
    """Whoever read specsim's standard output stopped (a closed pipe: ``| head``)."""


class _GuardedStdout:
    """sys.stdout that turns a write error into StdoutClosed (a closed pipe) or a one-line
    ScenarioError (a full disk: ``> /dev/full``), for every print and rich Console."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def _guard(self, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except BrokenPipeError:
            _silence_stdout(self._stream)
            raise StdoutClosed() from None
        except OSError as exc:
            _silence_stdout(self._stream)
            raise ScenarioError(f"standard output: could not write ({_why(exc)})") from None

    def write(self, text: str) -> int:
        return self._guard(lambda: self._stream.write(text))

    def flush(self) -> None:
        self._guard(self._stream.flush)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _silence_stdout(stream: Any) -> None:
    """Point the real standard output at /dev/null so the interpreter's own last flush does
    not fail again with a traceback (only for the process's own fd 1)."""
    try:
        if stream.fileno() != 1:
            return
    except (OSError, ValueError, AttributeError):
        return
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so every cleanup that runs for Ctrl-C runs for it."""


@contextlib.contextmanager
def guarded_process() -> Iterator[None]:
    """While a command runs: SIGTERM raises Terminated in this process (a forked worker
    keeps the default: it just ends), and standard output is guarded. Both are restored
    afterwards; the buffered output is flushed inside, so its errors are caught too."""
    owner = os.getpid()

    def on_term(signum: int, frame: Any) -> None:
        if os.getpid() != owner:  # a worker forked from here: die as SIGTERM says
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        raise Terminated()

    try:
        previous = signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main thread: leave signals alone
        previous = None
    real = sys.stdout
    sys.stdout = _GuardedStdout(real)  # type: ignore[assignment]
    try:
        yield
        sys.stdout.flush()
    finally:
        sys.stdout = real
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
