"""One reader for every file specsim reads, each read bounded before it can grow.

A user file can be small on disk and huge in memory: a YAML alias bomb (a few anchors that
expand to gigabytes), a ``.csv.gz`` that inflates a thousandfold, a trace that is one
endless line, a header repeating one name 300,000 times. Every file therefore goes
through here, under caps checked before (size) or while (inflated bytes, ratio, line
length) it is read:

- ``read_text`` / ``read_bytes``: a whole settings file (scenario, space, catalog, profile,
  acceptance file; ``yamlio.load_file`` reads a YAML one through here) or measurement file,
  its size checked before reading;
- ``open_binary`` / ``open_text``: a stream over a trace, inflated when gzip, that counts
  what it yields (inflated bytes, inflation ratio, line length) and stops at a cap;
- ``check_columns`` / ``csv_header``: a header's names, at most ``COLUMNS`` and each once;
- ``json_loads``: JSON whose objects may not repeat a key.

A cap that trips is one ``InputLimitError`` line naming the file, what was found, the
limit and the ``SPECSIM_MAX_*`` variable that raises it. Other problems (no such file, not
UTF-8) are an ``InputError``; both are a ScenarioError, a CatalogError and a TraceError at
once, so each package's own handlers (and the CLI's exit 2) take them as theirs.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import stat
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from specsim.cost_models.errors import CatalogError
from specsim.errors import ScenarioError
from specsim.messages import show
from specsim.traces.errors import TraceError

GZIP_MAGIC = b"\x1f\x8b"


class InputError(ScenarioError, CatalogError, TraceError):
    """A file that cannot be read as what was expected, in one line naming it."""


class InputLimitError(InputError):
    """A file over one of the caps below; the message says how to raise it."""


@dataclass(frozen=True)
class Cap:
    """One limit: the variable that sets it, its default and what it bounds (for docs)."""

    env: str
    default: int
    unit: str  # "bytes", "nodes", "columns" or "x" (a ratio)
    bounds: str


YAML_BYTES = Cap("SPECSIM_MAX_YAML_BYTES", 1024**2, "bytes",
                 "size of a YAML file: a scenario, a `plan --space` file, a calibration or "
                 "acceptance profile")
YAML_ALIAS_NODES = Cap("SPECSIM_MAX_YAML_ALIAS_NODES", 10_000, "nodes",
                       "nodes that YAML aliases (*name, <<: *name) add to a document once "
                       "expanded; a scalar counts one node per started KiB")
DATA_BYTES = Cap("SPECSIM_MAX_DATA_BYTES", 4 * 1024**3, "bytes",
                 "size of a trace, a measured run, an acceptance or calibration measurement "
                 "file, on disk and once decompressed")
INFLATE_RATIO = Cap("SPECSIM_MAX_INFLATE_RATIO", 100, "x",
                    "decompressed / compressed size of a .gz file (checked after its first "
                    "MiB)")
LINE_BYTES = Cap("SPECSIM_MAX_LINE_BYTES", 4 * 1024**2, "bytes",
                 "length of one line of a CSV or JSON-lines file")
COLUMNS = Cap("SPECSIM_MAX_COLUMNS", 1000, "columns", "columns in a CSV header")
JSON_BYTES = Cap("SPECSIM_MAX_JSON_BYTES", 16 * 1024**2, "bytes",
                 "size of a JSON file specsim reads back from an output folder (a run's "
                 "metrics.json and scenario.json, a sweep's sweep.json); a run's are KiBs")
CAPS = (YAML_BYTES, YAML_ALIAS_NODES, DATA_BYTES, INFLATE_RATIO, LINE_BYTES, COLUMNS,
        JSON_BYTES)

#: inflated bytes before the ratio is judged (a file's first block can compress very well)
RATIO_GRACE = 1024**2


def limit(cap: Cap) -> int:
    """The cap in force: its variable when set (a positive integer), else its default."""
    raw = os.environ.get(cap.env, "").strip()
    if not raw:
        return cap.default
    try:
        value = float(raw.replace("_", ""))
    except ValueError:
        value = float("nan")
    if not (value >= 1 and value < 2**63 and value == int(value)):
        raise InputError(f"{cap.env}: expected a positive whole number of {cap.unit}, got "
                         f"{show(raw)}")
    return int(value)


def amount(n: float, unit: str) -> str:
    """``n`` as a message shows it: bytes in KiB/MiB/GiB, other units with separators."""
    if unit == "bytes":
        for size, name in ((1024**3, "GiB"), (1024**2, "MiB"), (1024, "KiB")):
            if n >= size:
                return f"{n / size:,.3g} {name}"
        return f"{int(n):,} bytes"
    if unit == "x":
        return f"{n:,.0f}x"
    return f"{int(n):,} {unit}"


def too_much(origin: str, found: str, cap: Cap) -> InputLimitError:
    """The one-line error for a tripped cap: file, what was found, the limit, the way out."""
    value = limit(cap)
    default = ", the default" if value == cap.default else f", set by {cap.env}"
    return InputLimitError(f"{origin}: {found} (limit {amount(value, cap.unit)}{default}; "
                           f"if it is meant, set {cap.env} higher)")


# ------------------------------------------------------------------ whole files


def check_file(path: Path, what: str, cap: Cap, noun: str = "file") -> int:
    """``path``'s size after checking it is a regular file under ``cap`` (one-line errors)."""
    try:
        st = path.stat()
    except (FileNotFoundError, NotADirectoryError, ValueError):  # ValueError: a NUL in the name
        raise InputError(f"{path}: no such {noun}"
                         + ("" if noun != "file" else f" ({what} was expected)")) from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{path}: is a folder, not a {noun}"
                         + ("" if noun != "file" else f" ({what} was expected)"))
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{path}: not a regular file ({what} was expected)")
    return check_size(path, what, cap, st.st_size)


def check_size(path: Path, what: str, cap: Cap = YAML_BYTES, size: int | None = None) -> int:
    """The size cap alone: an InputLimitError when ``path`` is larger than ``cap``, else its
    size (0 when it cannot be stat'ed: for a caller whose own read words that problem)."""
    if size is None:
        try:
            size = Path(path).stat().st_size
        except (OSError, ValueError):
            return 0
    if size > limit(cap):
        raise too_much(str(path), f"{size:,} bytes, too large for {what}", cap)
    return size


def read_bytes(path: str | Path, what: str, cap: Cap = DATA_BYTES, *, noun: str = "file",
               inflate: bool = False) -> bytes:
    """The bytes of ``path`` (at most ``cap``; gzip inflated under the same caps when
    ``inflate``), or a one-line InputError."""
    path = Path(path)
    check_file(path, what, cap, noun)
    if inflate:
        try:
            with open_binary(path, str(path), cap=cap, line_cap=False) as fh:
                return fh.read()
        except (gzip.BadGzipFile, zlib.error, EOFError) as exc:
            raise InputError(f"{path}: not a readable gzip file ({exc or 'truncated'})"
                             ) from None
        except OSError as exc:
            raise InputError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        raw = path.read_bytes()  # its size was checked just above
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if len(raw) > limit(cap):
        raise too_much(str(path), f"too large for {what}", cap)
    return raw


def decode(raw: bytes, origin: str, what: str) -> str:
    """UTF-8 text (a byte order mark dropped), or a one-line InputError."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(f"{origin}: not a UTF-8 text file ({what} was expected)") from None


def read_text(path: str | Path, what: str, cap: Cap = YAML_BYTES, *, noun: str = "file",
              inflate: bool = False) -> str:
    """The UTF-8 text of ``path`` under ``cap``, or a one-line InputError."""
    return decode(read_bytes(path, what, cap, noun=noun, inflate=inflate), str(path), what)


# ------------------------------------------------------------------ streams


class _Guarded(io.RawIOBase):
    """A file's bytes (inflated when gzip), counted as they pass: inflated size, ratio and
    line length each stop at their cap with a one-line InputLimitError."""

    def __init__(self, path: Path, origin: str, cap: Cap, line_cap: bool) -> None:
        super().__init__()
        self.origin = origin
        self._file = open(path, "rb")  # noqa: SIM115 (closed by close())
        self.gzipped = self._file.read(2) == GZIP_MAGIC
        self._file.seek(0)
        self._inner: IO[bytes] = (gzip.GzipFile(fileobj=self._file, mode="rb")
                                  if self.gzipped else self._file)
        self._cap, self._max = cap, limit(cap)
        self._ratio = limit(INFLATE_RATIO) if self.gzipped else 0
        self._line_max = limit(LINE_BYTES) if line_cap else 0
        self._total = self._line = 0
        self._lines = 1

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._inner.read(len(buffer))
        n = len(data)
        if n:
            self._count(data)
            buffer[:n] = data
        return n

    def _count(self, data: bytes) -> None:
        self._total += len(data)
        if self._total > self._max:
            what = "decompresses to" if self.gzipped else "holds"
            raise too_much(self.origin, f"{what} more bytes than allowed", self._cap)
        if self._ratio and self._total > RATIO_GRACE:
            packed = max(self._file.tell(), 1)
            if self._total > self._ratio * packed:
                raise too_much(self.origin, f"gzip inflates it {self._total / packed:,.0f}x "
                                            f"({amount(packed, 'bytes')} to "
                                            f"{amount(self._total, 'bytes')} so far)",
                               INFLATE_RATIO)
        if self._line_max:
            self._lines_of(data)

    def _lines_of(self, data: bytes) -> None:
        first = data.find(b"\n")
        if first < 0:
            self._line += len(data)
            self._check_line(self._line)
            return
        self._check_line(self._line + first)
        if len(data) > self._line_max:  # a line wholly inside this block may be too long
            start = first + 1
            while (end := data.find(b"\n", start)) >= 0:
                self._lines += 1
                self._check_line(end - start)
                start = end + 1
            self._lines += 1
        else:
            self._lines += data.count(b"\n")
        self._line = len(data) - data.rfind(b"\n") - 1
        self._check_line(self._line)

    def _check_line(self, length: int) -> None:
        if length > self._line_max:
            raise too_much(f"{self.origin} line {self._lines:,}", "a line longer than allowed",
                           LINE_BYTES)

    def close(self) -> None:
        if not self.closed:
            try:
                if self._inner is not self._file:
                    self._inner.close()
            finally:
                self._file.close()
        super().close()


def open_binary(path: str | Path, origin: str, *, cap: Cap = DATA_BYTES,
                line_cap: bool = True) -> io.BufferedReader:
    """``path``'s bytes, gzip inflated transparently, under ``cap``, the inflation ratio and
    (``line_cap``) the line length. Opening errors are the caller's OSError."""
    return io.BufferedReader(_Guarded(Path(path), origin, cap, line_cap))


def open_text(path: str | Path, origin: str, *, cap: Cap = DATA_BYTES) -> IO[str]:
    """``open_binary`` as UTF-8 text (a byte order mark skipped, newlines kept as written)."""
    return io.TextIOWrapper(open_binary(path, origin, cap=cap), encoding="utf-8-sig",
                            newline="")


def is_gzip(path: str | Path) -> bool:
    """True when ``path`` is gzip-compressed, judged by its magic bytes, not its name."""
    with open(path, "rb") as fh:
        return fh.read(2) == GZIP_MAGIC


# ------------------------------------------------------------------ columns and keys


def check_columns(names: Iterable[str], origin: str) -> list[str]:
    """A header's names as a list: at most ``COLUMNS`` of them, none twice (which one would
    win is a guess), else a one-line InputError."""
    names = list(names)
    most = limit(COLUMNS)
    if len(names) > most:
        raise too_much(origin, f"a header of {len(names):,} columns", COLUMNS)
    seen: dict[str, int] = {}
    for i, name in enumerate(names, start=1):
        first = seen.setdefault(name, i)
        if first != i:
            raise InputError(f"{origin}: column {show(name)} appears twice (columns {first} "
                             f"and {i}); give each column one distinct name")
    return names


def csv_header(path: str | Path, origin: str) -> list[str]:
    """A CSV file's first record as column names (quotes honoured, blank names dropped),
    read under the stream caps and checked by ``check_columns``."""
    with open_text(path, origin) as fh:
        try:
            first = next(csv.reader(fh), [])
        except csv.Error:
            first = []  # the caller's CSV parser words this one
    return check_columns([c.strip() for c in first if c.strip()], f"{origin} line 1")


class DuplicateKeyError(ValueError):
    """A JSON object naming one key twice (``json_loads`` turns it into a message)."""


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(key)
            seen.add(key)
    return obj


def json_loads(text: str | bytes) -> Any:
    """``json.loads`` refusing an object that repeats a key (``DuplicateKeyError``)."""
    return json.loads(text, object_pairs_hook=_unique_pairs)


def load_json(path: str | Path, what: str) -> Any:
    """A JSON file under ``JSON_BYTES``, parsed by ``json_loads``; a one-line InputError for
    a file over the cap, not UTF-8, not JSON or repeating a key."""
    text = read_text(path, what, JSON_BYTES)
    try:
        return json_loads(text)
    except DuplicateKeyError as exc:
        raise InputError(f"{path}: key {show(str(exc))} appears twice in one object ({what} "
                         "was expected)") from None
    except ValueError as exc:
        raise InputError(f"{path}: not JSON ({exc}; {what} was expected)") from None


def read_csv(path: str | Path, what: str, **kwargs: Any) -> Any:
    """A pandas DataFrame of the CSV ``path``, read through ``open_text`` (the size, line
    length and gzip caps hold while pandas parses) with its header checked by
    ``check_columns``; other pandas problems are the caller's ValueError."""
    import pandas as pd

    path = Path(path)
    check_file(path, what, DATA_BYTES)
    csv_header(path, str(path))
    try:
        with open_text(path, str(path)) as fh:
            return pd.read_csv(fh, **kwargs)
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def docs_table() -> str:
    """The "Input limits" table (markdown) from ``CAPS``: one row per cap."""
    rows = ["| Variable | Default | Bounds |", "|---|---|---|"]
    rows += [f"| `{c.env}` | {amount(c.default, c.unit)} | {c.bounds} |" for c in CAPS]
    return "\n".join(rows)
