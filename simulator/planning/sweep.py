"""Parameter sweeps: a grid over any scenario keys, run in parallel, one tidy table.

``specsim sweep SCENARIO --set key=v1,v2 [--set ...] [--zip] [--seeds N] [--jobs N] --out DIR``

Rules:
1. The grid is crossed (every combination) by default; ``--zip`` pairs the i-th values
   (equal lengths). Values are parsed as YAML, like ``specsim run --set``.
2. Every point is validated (schema, catalogs, workload) before any is run; a bad value is
   a one-line error naming the key and the value.
3. Each run is summary-only: the worker returns the flat metrics row (nested keys joined
   with '.', non-scalar values left out, ``wall_time_s`` dropped: it is not a result), never
   the per-request tables.
4. Every finished run is appended to ``.sweep-journal.jsonl`` in ``--out`` (one JSON line,
   flushed and fsynced); the tables are built from the journal at the end, rows sorted by
   point index then seed, so a killed sweep resumed with ``--resume`` gives the same bytes
   as an uninterrupted one.
5. ``--backend dask [--scheduler ADDRESS]`` runs the same tasks on a Dask cluster
   (sweep_dask.py; the ``specsim[dask]`` extra, imported only then); the journal, the
   table and its bytes are the local backend's.
6. ``--out`` must be new or empty; a previous sweep there is continued with ``--resume`` or
   replaced with ``--force`` (only its own files are removed); anything else is refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from specsim.errors import ScenarioError
from specsim.simulator.planning.sweep_folder import (  # shared with sweep_report.py and
    _OUR_PNGS,  # sweep_dask.py without an import cycle
    DEFINITION,
    JOURNAL,
    MARKER,
    SUMMARY_CSV,
    TABLE_CSV,
    TABLE_PARQUET,
    _atomic_write,
    _version,
    listed_files,
    marker_text,
    note_files,
    summarize,
)

#: what a sweep writes into its --out; --force removes only these
_OURS = {JOURNAL, MARKER, DEFINITION, TABLE_CSV, TABLE_PARQUET, SUMMARY_CSV, "report.md",
         "report.html"}
#: where the runs go: processes on this machine, or a Dask cluster (the specsim[dask] extra)
BACKENDS = ("local", "dask")
#: metrics left out of the table: not results of the simulated system
_DROPPED = {"wall_time_s"}




def show(value: Any, limit: int = 80) -> str:
    """specsim.messages.show, imported when a message needs it (it pulls in pydantic)."""
    from specsim.messages import show as _show

    return _show(value, limit)


# ---------------------------------------------------------------------------- the grid
def _split_values(raw: str) -> list[str]:
    """``a,b,[1, 2],{x: 1, y: 2},'c,d'`` -> the top-level comma-separated items."""
    items, depth, quote, cur = [], 0, None, []
    for ch in raw:
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    items.append("".join(cur))
    return items


def parse_set(texts: Iterable[str]) -> dict[str, list[Any]]:
    """``["speculation.k=0,2,4", "workload.synthetic.arrival.rate=2,4"]`` -> the grid.

    Each value is parsed as YAML (as ``specsim run --set``); a key given twice, an empty
    list or an empty item is a one-line ScenarioError."""
    import yaml

    from specsim import yamlio

    grid: dict[str, list[Any]] = {}
    for text in texts:
        shown = text if text.isprintable() and len(text) <= 80 else show(text, 80)
        if "=" not in text:
            raise ScenarioError(f"--set {shown}: expected key.path=v1,v2,...")
        key, raw = text.split("=", 1)
        key = key.strip()
        if not key or not all(key.split(".")):
            raise ScenarioError(f"--set {shown}: expected a dotted key path like speculation.k")
        if key in grid:
            raise ScenarioError(f"--set {key}: given twice; list its values once, "
                                "comma-separated")
        values = []
        for item in _split_values(raw):
            if not item.strip():
                raise ScenarioError(f"--set {shown}: an empty value (expected v1,v2,...)")
            try:
                values.append(yamlio.load(item, f"--set {key}"))
            except yaml.YAMLError:
                values.append(item.strip())
        grid[key] = values
    return grid


def check_grid(grid: dict[str, list[Any]], zipped: bool = False) -> None:
    """The grid's shape (no seed key, non-empty lists, equal lengths when zipped), checked
    without listing its points."""
    keys = list(grid)
    for k in keys:
        if k == "seed":
            raise ScenarioError("--set seed: the seed is not swept as a key; use --seeds N "
                                "(seeds = the scenario's seed + 0..N-1)")
        if not isinstance(grid[k], list | tuple) or not grid[k]:
            raise ScenarioError(f"--set {k}: expected a non-empty list of values")
    if zipped:
        lengths = {k: len(grid[k]) for k in keys}
        if len(set(lengths.values())) > 1:
            raise ScenarioError("--zip: every --set needs as many values; got "
                                + ", ".join(f"{k} {n}" for k, n in lengths.items()))


def grid_points(grid: dict[str, list[Any]], zipped: bool = False) -> list[dict[str, Any]]:
    """The points of the grid, in order: crossed (last key fastest) or zipped."""
    if not grid:
        return [{}]
    check_grid(grid, zipped)
    keys = list(grid)
    if zipped:
        return [dict(zip(keys, vals, strict=True))
                for vals in zip(*(grid[k] for k in keys), strict=True)]
    return [dict(zip(keys, vals, strict=True))
            for vals in itertools.product(*(grid[k] for k in keys))]


def _describe(point: dict[str, Any]) -> str:
    return ", ".join(f"{k}={show(v, 40)}" for k, v in point.items())


def _validate_one(scenario: Any, overrides: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """Schema, catalogs and workload of one point (no simulation), as ``specsim validate``;
    returns the validated scenario and its number of requests."""
    from specsim import limits
    from specsim.simulator.cluster.build import deploy
    from specsim.simulator.cluster.engine import (
        in_file,
        load_scenario,
        trace_for,
        workload_key,
    )

    sc, base, origin = load_scenario(scenario, overrides)
    with in_file(origin):
        deployment = deploy(sc, base)  # every pool
        trace = trace_for(sc, base, deployment.model.max_context)
        limits.check_requests(len(trace), workload_key(sc), record_iterations=False)
    return sc, len(trace)


def validate_points(scenario: Any, grid: dict[str, list[Any]],
                    points: list[dict[str, Any]]) -> list[int]:
    """Check every value alone, then every point; returns each point's scenario seed.

    Errors are one line: ``--set KEY=VALUE: <why>`` for a value that is wrong on its own,
    ``point N (k=v, ...): <why>`` for a combination that is."""
    from specsim.simulator.cluster.engine import USER_ERRORS

    for key, values in grid.items():
        for v in values:
            try:
                _validate_one(scenario, {key: v})
            except USER_ERRORS as exc:
                raise ScenarioError(f"--set {key}={show(v, 60)}: {exc}") from None
    seeds = []
    for i, p in enumerate(points):
        try:
            sc = _validate_one(scenario, p)[0] if len(p) > 1 else None
        except USER_ERRORS as exc:
            raise ScenarioError(f"point {i} ({_describe(p)}): {exc}") from None
        if sc is None:
            from specsim.simulator.cluster.engine import load_scenario

            sc, _, _ = load_scenario(scenario, p)
        seeds.append(int(sc.seed))
    return seeds


def check_size(scenario: Any, grid: dict[str, list[Any]], zipped: bool, seeds: int,
               jobs: int, yes: bool = False) -> None:
    """The grid's runs, time and memory (planning.bounds), before any point is listed or
    validated but point 0, whose requests and workers are the estimate's unit."""
    from specsim import limits
    from specsim.simulator.cluster.engine import USER_ERRORS
    from specsim.simulator.planning import bounds

    check_grid(grid, zipped)
    first = {k: v[0] for k, v in grid.items()}
    try:
        sc, n_requests = _validate_one(scenario, first)
    except USER_ERRORS as exc:
        raise ScenarioError(f"point 0 ({_describe(first)}): {exc}" if first else str(exc)
                            ) from None
    hw, kv = sc.hardware, sc.kv_cache
    fleet = limits.worker_bytes(prefix_cache=bool(kv.prefix_cache),
                                tiers=len(kv.tiers or ())) * (
        hw.count // hw.tensor_parallel)
    lengths = [len(v) for v in grid.values()]
    bounds.check(bounds.sweep_estimate(lengths, zipped, seeds, jobs, n_requests, fleet), yes)


# ---------------------------------------------------------------------------- one run
def flatten(metrics: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Scalars of a nested metrics dict, keys joined with '.'; lists are left out."""
    out: dict[str, Any] = {}
    for k, v in metrics.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, name + "."))
        elif v is None or isinstance(v, bool | int | float | str):
            if name not in _DROPPED:
                out[name] = v
        elif type(v).__module__ == "numpy" and hasattr(v, "item"):
            out[name] = v.item()
    return out


def _json_safe(v: Any) -> Any:
    """A swept value as a table cell: scalars as they are, anything else as JSON text."""
    if v is None or isinstance(v, bool | int | float | str):
        return v
    return json.dumps(v, sort_keys=True, default=str)


def run_point(scenario: Any, point: dict[str, Any], seed: int) -> dict[str, Any]:
    """One summary-only run: the flat metrics row (the per-request tables are dropped)."""
    from specsim.simulator.cluster.engine import run_scenario

    overrides = {"simulation.progress": False, **point}
    if not any(k.startswith("simulation.record_iterations") or k == "simulation"
               for k in point):
        overrides["simulation.record_iterations"] = False  # nothing in the row needs them
    res = run_scenario(scenario, seed=seed, overrides=overrides)
    return flatten(res.metrics)


def _task(args: tuple[Any, int, dict[str, Any], int]) -> tuple[int, int, dict[str, Any]]:
    """One run: (point index, seed, its flattened metrics). A sweep's process runs many:
    the compiled kernel pays for itself whatever the runs' length."""
    from specsim.simulator.execution.kernel import prefer_compiled

    prefer_compiled()
    scenario, index, point, seed = args
    return index, seed, run_point(scenario, point, seed)


def _watch_parent() -> None:
    """Pool initializer: a worker whose parent was killed (SIGKILL) exits instead of
    lingering on its queue."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


# ---------------------------------------------------------------------------- the folder
def _ours(name: str) -> bool:
    return name in _OURS or name in _OUR_PNGS or _temp(name)


def _temp(name: str) -> bool:
    from specsim.outputs import is_temp

    return is_temp(name) or (name.startswith(".") and ".sweep-tmp-" in name)


def _kept_files(out: Path) -> set[str]:
    """The files a resumed sweep keeps as its own: its marker's list, or (an older marker
    without one, already judged by names) every name a sweep writes."""
    listed = listed_files(out)
    if listed is not None:
        return listed
    return {p.name for p in out.iterdir() if _ours(p.name) and not _temp(p.name)}


def _writable(out: Path, mode: str) -> str:
    """``mode``, once a new or empty ``out`` is known to be writable (before any run)."""
    from specsim.outputs import cannot_write, probe

    try:
        probe(out)
    except OSError as exc:
        raise cannot_write("--out", out, exc) from None
    return mode


def check_out(out: Path, resume: bool, force: bool) -> str:
    """What to do with ``--out``: "new", "empty", "resume" or "replace"; refuses (one line)
    a file, a link, a folder with anyone else's files, or a previous sweep without
    --resume/--force."""
    where = f"--out {out}"
    if out.is_symlink():
        raise ScenarioError(f"{where}: is a symbolic link; give a real folder")
    if out.exists() and not out.is_dir():
        raise ScenarioError(f"{where}: is a file, not a folder; nothing was written")
    if not out.exists():
        return _writable(out, "new")
    try:
        entries = sorted(out.iterdir(), key=lambda p: p.name)
    except OSError as exc:
        raise ScenarioError(f"{where}: cannot be read ({exc.strerror or exc})") from None
    if not entries:
        return _writable(out, "empty")
    ours = (out / MARKER).is_file() and not (out / MARKER).is_symlink()
    listed = listed_files(out) if ours else None  # None: an older marker, judged by names
    foreign = next((p.name for p in entries
                    if not _ours(p.name) or p.is_symlink() or p.is_dir()
                    or (listed is not None and p.name not in listed and not _temp(p.name))),
                   None)
    if not ours:
        raise ScenarioError(f"{where}: holds files specsim did not write (e.g. "
                            f"{(foreign or entries[0].name)!r}); choose an empty or new folder")
    if foreign is not None:
        raise ScenarioError(f"{where}: holds a previous specsim sweep and {foreign!r}, which "
                            "specsim did not write; not touching it")
    if resume:
        return "resume"
    if force:
        return "replace"
    raise ScenarioError(f"{where}: holds a previous specsim sweep; pass --resume to finish it, "
                        "--force to replace it, or choose another folder")


def _write_text(path: Path, text: str) -> None:
    _atomic_write(path, lambda p: p.write_text(text))


def _scenario_digest(scenario: Any) -> str:
    if isinstance(scenario, dict):
        text = json.dumps(scenario, sort_keys=True, default=str)
    else:
        try:
            text = Path(scenario).read_text()
        except OSError:
            text = str(scenario)
    return hashlib.sha256(text.encode()).hexdigest()


def definition(scenario: Any, grid: dict[str, list[Any]], zipped: bool,
               points: list[dict[str, Any]], seeds: list[list[int]]) -> dict[str, Any]:
    """sweep.json: what was swept, with which seeds, on which scenario, by which specsim."""
    return {
        "written_by": "specsim sweep",
        "specsim_version": _version(),
        "scenario": scenario if isinstance(scenario, dict) else str(scenario),
        "scenario_sha256": _scenario_digest(scenario),
        "grid": {k: [_json_safe(v) if not isinstance(v, dict | list) else v for v in vals]
                 for k, vals in grid.items()},
        "mode": "zip" if zipped else "cross",
        "points": [{"point": i, **p} for i, p in enumerate(points)],
        "seeds_per_point": len(seeds[0]) if seeds else 0,
        "seeds": [{"point": i, "seeds": s} for i, s in enumerate(seeds)],
    }


def _same_grid(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """Why a journal cannot be resumed with this grid (None: it can)."""
    for key, what in (("scenario_sha256", "the scenario file changed"),
                      ("grid", "the --set values differ"), ("mode", "--zip differs")):
        if json.dumps(old.get(key), sort_keys=True) != json.dumps(new.get(key), sort_keys=True):
            return what
    return None


def read_journal(path: Path) -> dict[tuple[int, int], dict[str, Any]]:
    """Finished runs by (point, seed). A torn last line (killed mid-write) is ignored; a
    line or a file past safe_read's caps is one line, exit 2."""
    from specsim import safe_read

    done: dict[tuple[int, int], dict[str, Any]] = {}
    try:
        fh = safe_read.open_binary(path, str(path))
    except FileNotFoundError:
        return done
    with fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                done[(int(rec["point"]), int(rec["seed"]))] = rec["row"]
            except (ValueError, KeyError, TypeError):
                continue
    return done


def _last_line_end(fh: Any) -> int:
    """The offset just past the last newline of the open file ``fh`` (0: none), read a
    block at a time from the end: a journal is never read whole to find it."""
    pos = fh.seek(0, os.SEEK_END)
    while pos > 0:
        step = min(1 << 16, pos)
        pos -= step
        fh.seek(pos)
        i = fh.read(step).rfind(b"\n")
        if i >= 0:
            return pos + i + 1
    return 0


class Journal:
    """Append-only: one JSON line per finished run, flushed and fsynced."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # a line torn by a kill is cut off, so the next one starts on a line of its own
        if path.exists():
            with open(path, "r+b") as fh:
                fh.truncate(_last_line_end(fh))
        self.fh = open(path, "ab")  # noqa: SIM115 (closed by close())

    def add(self, point: int, seed: int, row: dict[str, Any]) -> None:
        line = json.dumps({"point": point, "seed": seed, "row": row}, allow_nan=True)
        self.fh.write(line.encode() + b"\n")
        self.fh.flush()
        os.fsync(self.fh.fileno())

    def close(self) -> None:
        self.fh.close()


# ---------------------------------------------------------------------------- tables
def build_table(points: list[dict[str, Any]], seeds: list[list[int]],
                done: dict[tuple[int, int], dict[str, Any]]):
    """The tidy table: a row per (point, seed), sorted by point then seed; columns: point,
    the swept keys, seed, then every scalar metric (in first-seen order)."""
    import pandas as pd

    keys = list(points[0]) if points else []
    rows, metric_cols = [], {}
    for i, p in enumerate(points):
        for s in sorted(seeds[i]):
            row = done.get((i, s))
            if row is None:
                continue
            metrics = {k: v for k, v in row.items() if k not in keys and k not in (
                "point", "seed")}
            for k in metrics:
                metric_cols.setdefault(k, None)
            rows.append({"point": i, **{k: _json_safe(p[k]) for k in keys}, "seed": s,
                         **metrics})
    cols = ["point", *keys, "seed", *metric_cols]
    return pd.DataFrame.from_records(rows, columns=cols)


def _parquet_safe(df):
    """Columns pyarrow can store: an object column mixing types becomes text."""
    df = df.copy()
    for c in df.columns:
        if df[c].dtype == object:
            types = {type(v) for v in df[c] if v is not None and v == v}
            if len(types) > 1:
                df[c] = [None if v is None or v != v else str(v) for v in df[c]]
    return df


# ---------------------------------------------------------------------------- the sweep
def run_sweep(scenario: Any, grid: dict[str, list[Any]], seeds: int = 1, jobs: int = 1,
              out: str | Path | None = None, resume: bool = False, *, zipped: bool = False,
              force: bool = False, plots: bool = True, backend: str = "local",
              scheduler: str | None = None,
              progress: Callable[[int, int], None] | None = None,
              on_start: Callable[[dict[str, Any]], None] | None = None, yes: bool = False):
    """Run every (point, seed) of the grid and return the tidy table (a DataFrame).

    ``scenario``: a YAML path or a scenario dict; ``grid``: {dotted key: [values]};
    ``seeds``: runs per point (seeds = the point's scenario seed + 0..seeds-1); ``jobs``:
    worker processes (1: in this process); ``out``: folder for sweep.csv, sweep.parquet,
    summary.csv, sweep.json and the plots (None: nothing written); ``resume``: finish the
    sweep in ``out``, running only the (point, seed) pairs its journal lacks.
    ``backend``: "local" (``jobs`` processes on this machine) or "dask" (a Dask cluster:
    the scheduler at ``scheduler``, or a LocalCluster of ``jobs`` worker processes when it
    is None; needs the ``specsim[dask]`` extra); both give the same rows, journal and bytes.
    ``progress(done, total)`` is called after each run; ``on_start(info)`` once before.
    ``yes``: run a grid past planning.bounds' count and time limits (never its memory).
    The table's ``attrs`` hold "summary" (summary.csv's frame), "written" and "skipped".
    """
    if backend not in BACKENDS:
        raise ScenarioError(f"--backend: expected one of {', '.join(BACKENDS)}, got "
                            f"{show(backend)}")
    if scheduler is not None and backend != "dask":
        raise ScenarioError("--scheduler: only with --backend dask")
    if backend == "dask":  # before anything is validated or written
        from specsim.simulator.planning.sweep_dask import require

        require()
    if not isinstance(seeds, int) or isinstance(seeds, bool) or seeds < 1:
        raise ScenarioError(f"--seeds: expected an integer at least 1, got {show(seeds)}")
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ScenarioError(f"--jobs: expected an integer at least 1, got {show(jobs)}")
    grid = {k: list(v) for k, v in grid.items()}
    check_size(scenario, grid, zipped, seeds, jobs, yes)
    points = grid_points(grid, zipped)
    out_path = Path(out) if out is not None else None
    mode = check_out(out_path, resume, force) if out_path is not None else None
    base_seeds = validate_points(scenario, grid, points)
    point_seeds = [[b + j for j in range(seeds)] for b in base_seeds]
    spec = definition(scenario, grid, zipped, points, point_seeds)

    done: dict[tuple[int, int], dict[str, Any]] = {}
    if out_path is not None and mode == "resume":
        from specsim import safe_read

        try:
            old = safe_read.load_json(out_path / DEFINITION, "a sweep's definition")
        except safe_read.InputLimitError:
            raise
        except (OSError, ValueError):
            old = None
        why = _same_grid(old, spec) if isinstance(old, dict) else None
        if why:
            raise ScenarioError(f"--resume: {out_path} holds a different sweep ({why}); "
                                "give the same scenario and --set values, or use --force")
        done = read_journal(out_path / JOURNAL)
    wanted = {(i, s) for i, ss in enumerate(point_seeds) for s in ss}
    done = {k: v for k, v in done.items() if k in wanted}
    todo = [(i, s) for i, ss in enumerate(point_seeds) for s in ss if (i, s) not in done]
    todo = [(scenario, i, points[i], s) for i, s in todo]
    total = len(wanted)

    with contextlib.ExitStack() as stack:
        cluster = None
        if backend == "dask" and todo:  # an unreachable scheduler is said before any write
            from specsim.simulator.planning.sweep_dask import connect

            cluster = stack.enter_context(connect(scheduler, jobs, scenario, len(todo)))
        undo = stack.enter_context(_UndoOnFailure(out_path, mode))  # a full disk: nothing
        journal = _open_folder(out_path, mode, spec) if out_path is not None else None
        if on_start:
            on_start({"points": len(points), "seeds": seeds, "runs": total,
                      "already_done": total - len(todo), "jobs": jobs, "backend": backend,
                      "scheduler": scheduler})

        def finished(i: int, s: int, row: dict[str, Any]) -> None:
            row = json.loads(json.dumps(row, allow_nan=True))  # as the journal gives it back
            done[(i, s)] = row
            if journal is not None:
                journal.add(i, s, row)
            if progress:
                progress(len(done), total)

        try:
            if cluster is not None:
                cluster.run(_task, todo, finished, lambda i: _describe(points[i]))
            elif jobs == 1 or len(todo) <= 1:
                for t in todo:
                    finished(*_task(t))
            else:
                _run_pool(todo, jobs, finished)
        finally:
            if journal is not None:
                journal.close()

    if out_path is not None:  # the table is what the journal holds, however it got there
        done = {k: v for k, v in read_journal(out_path / JOURNAL).items() if k in wanted}
    table = build_table(points, point_seeds, done)
    summary = summarize(table, list(grid))
    written, skipped = [], []
    if out_path is not None:
        with undo:
            written, skipped = write_tables(out_path, table, summary, list(grid), plots)
    table.attrs.update(summary=summary, written=written, skipped=skipped)
    return table


class _UndoOnFailure:
    """A sweep into a new or empty folder that cannot be written (a full disk) leaves
    nothing: its own files go, and the folders it made; one line says why. A resumed or
    replaced sweep keeps its journal (``--resume`` goes on from it); Ctrl-C keeps it too.
    Made before the folder is (it notes which folders are missing); used as a context
    around each step that writes."""

    def __init__(self, out: Path | None, mode: str | None) -> None:
        from specsim.outputs import missing_folders

        self.out, self.mode = out, mode
        self.made = missing_folders(out) if out is not None and mode == "new" else []

    def __enter__(self) -> _UndoOnFailure:
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        from specsim.outputs import remove_empty_folders, write_failed

        if not isinstance(exc, OSError | ScenarioError) or self.out is None:
            return
        if self.mode in ("new", "empty") and self.out.is_dir():
            for p in self.out.iterdir():
                if _ours(p.name) and p.is_file() and not p.is_symlink():
                    p.unlink(missing_ok=True)
            remove_empty_folders(self.made)
        if isinstance(exc, OSError):
            raise write_failed("--out", self.out, exc) from None


def _open_folder(out: Path, mode: str | None, spec: dict[str, Any]) -> Journal:
    """Make ``out`` the sweep's folder (a replaced sweep's files go first): the marker,
    sweep.json, and the journal, opened for appending."""
    if mode == "replace":
        for p in out.iterdir():
            if _ours(p.name) and p.name != MARKER:
                p.unlink()
    try:
        out.mkdir(parents=True, exist_ok=True)
        kept = _kept_files(out) if mode == "resume" else set()
        _write_text(out / MARKER, marker_text(kept | {DEFINITION, JOURNAL}))
        _write_text(out / DEFINITION, json.dumps(spec, indent=1, default=str) + "\n")
        return Journal(out / JOURNAL)
    except OSError as exc:
        raise ScenarioError(f"--out {out}: cannot write there "
                            f"({exc.strerror or exc})") from None


def _run_pool(todo: list, jobs: int, finished: Callable[..., None]) -> None:
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    with ProcessPoolExecutor(max_workers=min(jobs, len(todo)),
                             initializer=_watch_parent) as pool:
        pending = set()
        it = iter(todo)
        try:
            for t in itertools.islice(it, jobs * 4):  # a bounded queue: 1,000 points stay light
                pending.add(pool.submit(_task, t))
            while pending:
                ready, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in ready:
                    finished(*f.result())
                    nxt = next(it, None)
                    if nxt is not None:
                        pending.add(pool.submit(_task, nxt))
        except BaseException:
            for f in pending:
                f.cancel()
            raise


def write_tables(out: Path, table, summary, keys: list[str],
                 plots: bool = True) -> tuple[list[str], list[str]]:
    """sweep.csv, sweep.parquet, summary.csv (atomically), then the plots the grid supports
    and report.md / report.html, drawn from the folder's own files as ``specsim report``
    draws them; returns (files written, "plot: why skipped" lines)."""
    from specsim.outputs import escape_frame  # text cells that would run as formulas

    try:
        note_files(out, [TABLE_CSV, TABLE_PARQUET, SUMMARY_CSV])
        _atomic_write(out / TABLE_CSV, lambda p: escape_frame(table).to_csv(p, index=False))
        _atomic_write(out / TABLE_PARQUET,
                      lambda p: _parquet_safe(table).to_parquet(p, index=False))
        _atomic_write(out / SUMMARY_CSV,
                      lambda p: escape_frame(summary).to_csv(p, index=False))
        written = [TABLE_CSV, TABLE_PARQUET, SUMMARY_CSV, DEFINITION]
        from specsim.simulator.planning.sweep_report import render

        more, skipped = render(out, plots)
        written += more
    except OSError as exc:
        raise ScenarioError(f"--out {out}: could not write the tables "
                            f"({exc.strerror or exc})") from None
    return written, skipped


# ---------------------------------------------------------------------------- the CLI
def add_sweep_command(sub) -> None:
    import argparse

    from specsim import flags
    from specsim.simulator.planning.bounds import MAX_HOURS, MAX_RUNS

    p = sub.add_parser(
        "sweep", help="run a grid of scenario variants in parallel into one table",
        description="Run the scenario at every point of a grid over any scenario keys\n"
                    "(crossed, or zipped with --zip), each with --seeds seeds, in parallel\n"
                    "processes; write one tidy table (sweep.csv, sweep.parquet: a row per\n"
                    "point and seed, every scalar metric), summary.csv (mean and 95%\n"
                    "t-interval across seeds), sweep.json and the plots the grid supports.\n"
                    "A killed sweep continues with --resume (only missing runs are run).\n"
                    "--backend dask --scheduler ADDRESS runs the grid on a Dask cluster\n"
                    "(without --scheduler: a LocalCluster of --jobs processes); a worker\n"
                    "lost mid-sweep loses no run, and the table is the local backend's.",
        epilog="example: specsim sweep scenarios/chat.yaml --set speculation.k=0,2,4 "
               "--set workload.synthetic.arrival.rate=2,4,8 --seeds 3 --out runs/sweep",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scenario", help="base scenario YAML (e.g. scenarios/chat.yaml)")
    p.add_argument("--set", action="append", default=[], metavar="KEY.PATH=V1,V2,...",
                   help="a swept key and its values, parsed as YAML (repeatable)")
    p.add_argument("--zip", action="store_true",
                   help="pair the i-th values of every --set (equal lengths) instead of "
                        "crossing them")
    p.add_argument("--seeds", type=flags.positive_int, default=1, metavar="N",
                   help="runs per point, seeds = the scenario's seed + 0..N-1 (default 1)")
    p.add_argument("--jobs", type=flags.positive_int, default=None, metavar="N",
                   help="worker processes (default min(2, CPU cores)); with --backend dask "
                        "and no --scheduler, the local Dask cluster's workers")
    p.add_argument("--backend", choices=BACKENDS, default=None,
                   help="where the runs go: local processes (default) or a Dask distributed "
                        "cluster (needs pip install 'specsim[dask]'); same rows either way")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="the Dask scheduler, e.g. tcp://10.0.0.5:8786 (implies --backend "
                        "dask; workers need the same specsim and the scenario at the same "
                        "path); --backend dask without it starts a LocalCluster of --jobs "
                        "worker processes here")
    p.add_argument("--out", help="folder for the tables and plots: new or empty (a previous "
                   "sweep only with --resume or --force)")
    p.add_argument("--resume", action="store_true",
                   help="finish the sweep in --out: run only the runs its journal lacks")
    p.add_argument("--force", action="store_true",
                   help="replace a previous sweep in --out (never other files)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--yes", action="store_true",
                   help=f"run a grid of more than {MAX_RUNS:,} runs or an estimated "
                        f"{MAX_HOURS:g} h (never one past the memory budget)")
    p.set_defaults(func=cmd_sweep)


def cmd_sweep(args) -> int:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    err = Console(stderr=True)
    if args.resume and not args.out:
        raise ScenarioError("--resume: needs --out (the folder of the sweep to finish)")
    if args.resume and args.force:
        raise ScenarioError("--resume and --force: give one (finish the sweep, or replace it)")
    backend = args.backend or ("dask" if args.scheduler else "local")
    if backend == "local" and args.scheduler:
        raise ScenarioError("--scheduler: only with --backend dask")
    if backend == "dask":  # a missing extra is said before anything else
        from specsim.simulator.planning.sweep_dask import require

        require()
    grid = parse_set(args.set)
    jobs = args.jobs if args.jobs is not None else max(1, min(2, os.cpu_count() or 1))
    prog = None if args.quiet else Progress(
        TextColumn("sweeping"), BarColumn(), MofNCompleteColumn(), TextColumn("runs"),
        TimeElapsedColumn(), TimeRemainingColumn(), console=err, transient=True)
    task = None
    t0 = time.perf_counter()

    def on_start(info: dict[str, Any]) -> None:
        nonlocal task
        if info["backend"] == "dask":
            where = (f"the Dask cluster at {info['scheduler']}" if info["scheduler"] else
                     f"a local Dask cluster of {info['jobs']} worker process(es)")
        else:
            where = f"{info['jobs']} process(es)"
        if not args.quiet:
            err.print(f"sweep: {info['points']} point(s) x {info['seeds']} seed(s) = "
                      f"{info['runs']} run(s) on {where}"
                      + (f", {info['already_done']} already done" if info["already_done"]
                         else ""))
        if prog is not None:
            task = prog.add_task("sweep", total=info["runs"], completed=info["already_done"])
            prog.start()

    def progress(n: int, total: int) -> None:
        if prog is not None and task is not None:
            prog.update(task, completed=n)

    try:
        table = run_sweep(args.scenario, grid, seeds=args.seeds, jobs=jobs, out=args.out,
                          resume=args.resume, zipped=args.zip, force=args.force,
                          plots=not args.no_plots, backend=backend, scheduler=args.scheduler,
                          progress=progress, on_start=on_start, yes=args.yes)
    finally:
        if prog is not None and task is not None:  # started: a refusal prints no blank line
            prog.stop()
    wall = time.perf_counter() - t0
    summary = table.attrs["summary"]
    _print_summary(Console(width=max(Console().width, 150)), summary, list(grid))
    err.print(f"{len(table)} run(s) in {wall:.1f} s")
    if args.out:
        err.print(f"wrote {args.out}/" + ", ".join(table.attrs["written"]))
        for line in table.attrs["skipped"]:
            err.print(f"skipped plot {line}")
    return 0


def _print_summary(console, summary, keys: list[str], limit: int = 40) -> None:
    from rich.table import Table

    tab = Table(title="sweep: mean across seeds (95% CI half-width)")
    for c in ["point", *keys, "seeds", "TPOT p50 (ms)", "TPOT p99 (ms)", "TTFT p99 (ms)",
              "tok/s", "$/M tok"]:
        tab.add_column(c, justify="right")

    def cell(row, m: str, scale: float = 1.0, digits: int = 2) -> str:
        mean, half = row[f"{m}.mean"], row[f"{m}.ci95_half_width"]
        if mean != mean:
            return "-"
        s = f"{mean * scale:,.{digits}f}"
        return s + (f" ±{half * scale:,.{digits}f}" if half == half else "")

    for r in summary.head(limit).to_dict("records"):
        tab.add_row(str(r["point"]), *[str(r[k]) for k in keys], str(r["seeds"]),
                    cell(r, "tpot_s.p50", 1e3), cell(r, "tpot_s.p99", 1e3),
                    cell(r, "ttft_s.p99", 1e3), cell(r, "throughput_output_tokens_per_s", 1, 1),
                    cell(r, "cost_usd_per_million_output_tokens", 1, 3))
    console.print(tab)
    if len(summary) > limit:
        console.print(f"... {len(summary) - limit} more point(s): see summary.csv")
