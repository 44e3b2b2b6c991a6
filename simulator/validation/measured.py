"""Measured serving runs, read into one shape: per-request arrivals, token counts, measured
TTFT and E2E, the load stage of each request, and the engine settings of the run.

Two input formats:

- **vllm_runs** (``../shared/data/README.md``, section "vllm_runs"): ``<run>.json.gz``
  (``config``: tensor_parallelism, max_num_seqs, max_num_batched_tokens, kv_blocks_total_gpu,
  block_size; ``model_config``; ``requests[]``: index, arrival_time_us, input_tokens,
  output_tokens, has_error), ``<run>_ground_truth.json.gz`` next to it (per request: index,
  has_error, e2e_s, ttft_s) and, optionally, ``measured.csv`` in the same folder (one row per
  load stage: its rate and duration; the stage boundary is where the arrival rate changes).
- **generic CSV**: one row per request, columns ``arrival_s, input_tokens, output_tokens,
  ttft_s, e2e_s`` and optionally ``stage`` (a label; consecutive requests with one label are
  one stage), ``request_id`` and ``has_error`` (true/false/1/0). Times in seconds, arrivals
  from any origin. The engine settings come from ``--scenario`` or flags.

A bad value is one line naming the file, the row and the column (``TraceError``).

Measured TPOT is computed per request from the ground truth, (e2e_s - ttft_s) /
(output_tokens - 1). inference-perf's own TPOT and ITL (``measured.csv``) count two stream
events per token, so they are about half the real per-token time: they are kept only to be
shown next to it.
"""

from __future__ import annotations

import csv
import difflib
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from specsim import safe_read
from specsim.messages import show
from specsim.traces.errors import TraceError

#: Hugging Face model ids in the runs -> catalog names
MODEL_NAMES = {
    "meta-llama/Llama-2-7b-hf": "Llama-2-7B",
    "meta-llama/Llama-2-70b-hf": "Llama-2-70B",
    "codellama/CodeLlama-34b-Instruct-hf": "CodeLlama-34B",
    "codellama/CodeLlama-34b-hf": "CodeLlama-34B",
    "mistralai/Mixtral-8x7B-v0.1": "Mixtral-8x7B",
}
#: GPU names in the runs -> catalog hardware
HARDWARE_NAMES = {"H100-80GB-SXM": "H100-SXM", "A100-80GB-SXM": "A100-SXM-80GB",
                  "H200-141GB-SXM": "H200-SXM"}

CSV_REQUIRED = ("arrival_s", "input_tokens", "output_tokens", "ttft_s", "e2e_s")
CSV_OPTIONAL = ("stage", "request_id", "has_error")

#: a request's recorded output count disagrees with its measured decode time when its time
#: per output token is this many times its neighbours' (see ``flag_miscounts``)
MISCOUNT_RATIO = 1.25
MISCOUNT_WINDOW = 101  # neighbours by arrival (running at about the same time)


@dataclass
class Stage:
    """A load stage: requests arriving in [start_s, end_s)."""

    name: str
    start_s: float
    end_s: float
    rate: float | None = None  # the stated arrival rate (req/s), when the run gives one


@dataclass
class MeasuredRun:
    """One measured run in the shape the replay needs.

    ``requests`` columns: index (the run's own id), arrival_s (from 0 at the first arrival),
    input_tokens, output_tokens (as recorded), ttft_s, e2e_s, tpot_s (from the ground truth),
    has_error, stage (a stage name), output_ok (False where the recorded output count
    disagrees with the measured decode time; see ``flag_miscounts``), decoded_tokens (the
    count the engine decoded: the recorded one, or for a miscounted request the one its
    decode time implies; see ``decoded_tokens``; the replay decodes this many). Sorted by
    arrival.
    """

    name: str
    path: Path
    fmt: str  # "vllm_runs" | "csv"
    requests: pd.DataFrame
    stages: list[Stage]
    model_id: str | None = None  # as the run names it
    model: str | None = None  # catalog name (None: give --model)
    gpu: str | None = None  # as the run names it
    hardware: str | None = None  # catalog name (None: give --hardware)
    tp: int | None = None
    engine: dict[str, Any] = field(default_factory=dict)  # vLLM flag names
    model_config: dict[str, Any] = field(default_factory=dict)
    reported: pd.DataFrame | None = None  # inference-perf's per-stage summary (measured.csv)
    notes: list[str] = field(default_factory=list)
    limited: bool = False  # only the first requests (``limit``): per-run summaries do not apply

    def limit(self, n: int) -> MeasuredRun:
        """The first ``n`` requests by arrival (stages without requests dropped)."""
        req = self.requests.iloc[:n].copy()
        names = set(req["stage"])
        stages = [s for s in self.stages if s.name in names]
        notes = [*self.notes, f"replaying only the first {len(req):,} of {len(self.requests):,} "
                              "requests (--limit)"]
        return MeasuredRun(**{**self.__dict__, "requests": req, "stages": stages,
                              "notes": notes, "limited": True})


# ------------------------------------------------------------------ reading files


def _read_bytes(path: Path, what: str) -> bytes:
    """The file's bytes (gzip inflated) through ``specsim.safe_read``'s caps."""
    return safe_read.read_bytes(path, what, safe_read.DATA_BYTES, inflate=True)


def _read_json(path: Path, what: str) -> Any:
    raw = _read_bytes(path, what)
    try:
        return safe_read.json_loads(raw.decode("utf-8"))
    except safe_read.DuplicateKeyError as exc:
        raise TraceError(f"{path}: key {show(exc.args[0])} appears twice in one object ({what} "
                         "was expected)") from None
    except UnicodeDecodeError:
        raise TraceError(f"{path}: not UTF-8 text ({what} was expected)") from None
    except (json.JSONDecodeError, RecursionError) as exc:
        where = f" line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise TraceError(f"{path}{where}: not valid JSON ({what} was expected)") from None


def _is_int(v: Any) -> bool:
    return (isinstance(v, int) and not isinstance(v, bool)) or (
        isinstance(v, float) and math.isfinite(v) and v.is_integer())


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


class _Rows:
    """Per-row value checks with one-line errors: ``FILE WHERE: column: expected ...``."""

    def __init__(self, origin: str, where) -> None:
        self.origin, self.where = origin, where  # where(i) -> "requests[3]" / "row 3 (line 4)"

    def fail(self, i: int, col: str, expected: str, value: Any) -> TraceError:
        return TraceError(f"{self.origin} {self.where(i)}: {col}: expected {expected}, "
                          f"got {show(value)}")

    def ints(self, values: list, col: str, lo: int, ok=None) -> np.ndarray:
        """Integers >= ``lo``; a failed request (``ok`` False) may record 0 (a failure
        before the engine saw its prompt)."""
        out = np.empty(len(values), np.int64)
        for i, v in enumerate(values):
            least = lo if ok is None or ok[i] else min(lo, 0)
            if not _is_int(v) or v < least or abs(v) > 2**53:
                raise self.fail(i, col, f"an integer >= {least}", v)
            out[i] = int(v)
        return out

    def floats(self, values: list, col: str, lo: float = 0.0, ok=None) -> np.ndarray:
        out = np.empty(len(values))
        for i, v in enumerate(values):
            if ok is not None and not ok[i]:  # an errored request: its times may be missing
                out[i] = float(v) if _is_num(v) else math.nan
                continue
            if not _is_num(v) or v < lo:
                raise self.fail(i, col, f"a finite number >= {lo:g}", v)
            out[i] = float(v)
        return out

    def bools(self, values: list, col: str) -> np.ndarray:
        out = np.zeros(len(values), bool)
        for i, v in enumerate(values):
            if v is None or v == "":
                continue
            if isinstance(v, bool):
                out[i] = v
            elif isinstance(v, str) and v.strip().lower() in ("true", "false", "1", "0"):
                out[i] = v.strip().lower() in ("true", "1")
            elif _is_int(v) and v in (0, 1):
                out[i] = bool(v)
            else:
                raise self.fail(i, col, "true or false", v)
        return out


# ------------------------------------------------------------------ vllm_runs


def ground_truth_path(path: Path) -> Path:
    """``<run>.json.gz`` -> ``<run>_ground_truth.json.gz`` (same folder)."""
    name = path.name
    for ext in (".json.gz", ".json"):
        if name.endswith(ext):
            return path.with_name(name[: -len(ext)] + "_ground_truth" + ext)
    return path.with_name(name + "_ground_truth.json.gz")


def run_name(path: Path) -> str:
    name = path.name
    for ext in (".json.gz", ".json", ".csv.gz", ".csv"):
        if name.endswith(ext):
            return name[: -len(ext)]
    return name


def run_files(folder: str | Path) -> list[Path]:
    """Every ``<run>.json.gz`` in ``folder`` with its ground truth next to it."""
    folder = Path(folder)
    return sorted(p for p in folder.glob("*.json.gz")
                  if not p.name.endswith("_ground_truth.json.gz")
                  and ground_truth_path(p).is_file())


def _field_list(doc: Any, origin: str, key: str) -> list[dict]:
    items = doc.get(key) if isinstance(doc, dict) else doc
    if not isinstance(items, list):
        raise TraceError(f"{origin}: expected {'a list' if key is None else repr(key) + ': a list'}"
                         f" of requests")
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise TraceError(f"{origin} {key or ''}[{i}]: expected a mapping, got {show(item)}")
    return items


def _column(items: list[dict], key: str, origin: str, where, required: Any = True) -> list:
    """``key`` of every item (None where absent); ``required``: True, False, or per item
    (a failed request may lack its times)."""
    out = []
    for i, item in enumerate(items):
        if key not in item:
            if required is True or (required is not False and required[i]):
                raise TraceError(f"{origin} {where(i)}: {key}: missing")
            out.append(None)
        else:
            out.append(item[key])
    return out


def load_vllm_run(path: str | Path) -> MeasuredRun:
    """A run in the vllm_runs format (``<run>.json.gz``; its ground truth next to it)."""
    path = Path(path)
    origin = str(path)
    doc = _read_json(path, "a vllm_runs <run>.json.gz")
    if not isinstance(doc, dict):
        raise TraceError(f"{origin}: expected a mapping with config, model_config and requests")
    name = str(doc.get("experiment") or run_name(path))
    config = doc.get("config")
    if not isinstance(config, dict):
        raise TraceError(f"{origin}: config: expected a mapping (tensor_parallelism, "
                         "max_num_seqs, max_num_batched_tokens, kv_blocks_total_gpu, block_size)")
    cfg_rows = _Rows(origin, lambda i: "config")
    settings: dict[str, int] = {}
    for key in ("tensor_parallelism", "max_num_seqs", "max_num_batched_tokens",
                "kv_blocks_total_gpu", "block_size"):
        if key not in config:
            raise TraceError(f"{origin}: config.{key}: missing")
        settings[key] = int(cfg_rows.ints([config[key]], f"config.{key}", 1)[0])
    items = _field_list(doc, origin, "requests")
    rq_where = (lambda i: f"requests[{i}]")  # noqa: E731
    rows = _Rows(origin, rq_where)
    index = rows.ints(_column(items, "index", origin, rq_where), "index", 0)
    arrival_us = rows.floats(_column(items, "arrival_time_us", origin, rq_where),
                             "arrival_time_us")
    err = rows.bools(_column(items, "has_error", origin, rq_where, required=False), "has_error")
    _unique(index, origin, "requests", "index")

    gt_path = ground_truth_path(path)
    if not gt_path.is_file():
        raise TraceError(f"{origin}: its ground truth {gt_path.name} is not next to it "
                         "(measured TTFT and E2E per request)")
    gt_origin = str(gt_path)
    gt = _read_json(gt_path, "a vllm_runs ground truth")
    key = "requests" if isinstance(gt, dict) else None
    gt_items = _field_list(gt, gt_origin, key)
    gt_where = (lambda i: f"[{i}]") if key is None else (lambda i: f"requests[{i}]")
    grows = _Rows(gt_origin, gt_where)
    gt_index = grows.ints(_column(gt_items, "index", gt_origin, gt_where), "index", 0)
    _unique(gt_index, gt_origin, key or "", "index")
    gt_err = grows.bools(_column(gt_items, "has_error", gt_origin, gt_where, required=False),
                         "has_error")
    pos = {int(k): i for i, k in enumerate(gt_index)}
    missing = [int(k) for k in index if int(k) not in pos]
    if missing:
        raise TraceError(f"{gt_origin}: no entry for request index {missing[0]} of {path.name} "
                         f"({len(missing):,} missing)")
    order = np.array([pos[int(k)] for k in index], np.int64)
    err = err | gt_err[order]
    ok = ~err  # a failed request may record 0 input tokens and no times
    inp = rows.ints(_column(items, "input_tokens", origin, rq_where), "input_tokens", 1, ok)
    out = rows.ints(_column(items, "output_tokens", origin, rq_where), "output_tokens", 0)
    gt_sorted = [gt_items[j] for j in order]
    where_gt = (lambda i: gt_where(int(order[i])))  # noqa: E731
    grows2 = _Rows(gt_origin, where_gt)
    ttft = grows2.floats(_column(gt_sorted, "ttft_s", gt_origin, where_gt, ok), "ttft_s", 0.0,
                         ok)
    e2e = grows2.floats(_column(gt_sorted, "e2e_s", gt_origin, where_gt, ok), "e2e_s", 0.0, ok)
    bad = np.flatnonzero(ok & (e2e < ttft))
    if len(bad):
        i = int(bad[0])
        raise grows2.fail(i, "e2e_s", f"a time >= ttft_s ({ttft[i]:g})", e2e[i])

    req = pd.DataFrame({"index": index, "arrival_s": arrival_us / 1e6, "input_tokens": inp,
                        "output_tokens": out, "ttft_s": ttft, "e2e_s": e2e, "has_error": err})
    req = _sorted(req)
    reported, stages, notes = _vllm_stages(path, name, req)
    model_id = doc.get("model_id") if isinstance(doc.get("model_id"), str) else None
    gpu = None
    if reported is not None and len(reported):
        model_id = model_id or str(reported["model"].iloc[0])
        gpu = str(reported["gpu"].iloc[0])
    engine = {"kind": "vllm", "max_num_seqs": settings["max_num_seqs"],
              "max_num_batched_tokens": settings["max_num_batched_tokens"],
              "enable_chunked_prefill": True, "block_size": settings["block_size"],
              "num_gpu_blocks_override": settings["kv_blocks_total_gpu"]}
    run = MeasuredRun(name, path, "vllm_runs", req, stages, model_id=model_id,
                      model=MODEL_NAMES.get(model_id or ""), gpu=gpu,
                      hardware=HARDWARE_NAMES.get(gpu or ""),
                      tp=settings["tensor_parallelism"], engine=engine,
                      model_config=doc.get("model_config") if isinstance(
                          doc.get("model_config"), dict) else {},
                      reported=reported, notes=notes)
    _finish(run)
    return run


def _unique(values: np.ndarray, origin: str, where: str, col: str) -> None:
    uniq, counts = np.unique(values, return_counts=True)
    if (counts > 1).any():
        raise TraceError(f"{origin} {where}: {col}: {int(uniq[counts > 1][0])} appears "
                         f"{int(counts[counts > 1][0])} times (expected each request once)")


def _sorted(req: pd.DataFrame) -> pd.DataFrame:
    order = np.argsort(req["arrival_s"].to_numpy(), kind="stable")
    req = req.iloc[order].reset_index(drop=True)
    req["arrival_s"] = req["arrival_s"] - float(req["arrival_s"].iloc[0]) if len(req) else 0.0
    return req


def _vllm_stages(path: Path, name: str, req: pd.DataFrame
                 ) -> tuple[pd.DataFrame | None, list[Stage], list[str]]:
    """Stages from ``measured.csv`` next to the run (its rows for this run), else one."""
    notes: list[str] = []
    meas = path.with_name("measured.csv")
    if not meas.is_file():
        notes.append("no measured.csv next to the run: the whole run is one stage")
        return None, _one_stage(req), notes
    text = _read_bytes(meas, "measured.csv (one row per run and load stage)")
    try:
        table = pd.read_csv(io.BytesIO(text), dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise TraceError(f"{meas}: not a readable CSV ({str(exc).splitlines()[0]})") from None
    need = ("experiment", "stage", "stage_duration_s", "rate_rps")
    for col in need:
        if col not in table.columns:
            raise TraceError(f"{meas}: missing column {col!r} (needed: {', '.join(need)})")
    mine = table[table["experiment"] == name]
    if not len(mine):
        notes.append(f"measured.csv has no rows for {name}: the whole run is one stage")
        return None, _one_stage(req), notes
    stage_rows = mine[mine["stage"] != "summary"]
    vals = [_num_or_str(v) for v in stage_rows["stage_duration_s"]]
    rows_st = _Rows(str(meas), lambda i: f"row {int(stage_rows.index[i]) + 1} (line "
                                         f"{int(stage_rows.index[i]) + 2})")
    dur = rows_st.floats(vals, "stage_duration_s", 0.0)
    rate = rows_st.floats([_num_or_str(v) for v in stage_rows["rate_rps"]], "rate_rps", 0.0)
    bounds = np.concatenate([[0.0], np.cumsum(dur)])
    stages = [Stage(str(s), float(bounds[i]), float(bounds[i + 1]), float(rate[i]))
              for i, s in enumerate(stage_rows["stage"])]
    if not stages:
        return mine.reset_index(drop=True), _one_stage(req), notes
    stages[-1].end_s = max(stages[-1].end_s, float(req["arrival_s"].max()) + 1e-9)
    cut = np.searchsorted(bounds[1:-1], req["arrival_s"].to_numpy(), side="right")
    req["stage"] = np.array([s.name for s in stages], object)[cut]
    if "request_count_success" in stage_rows.columns:
        for i, st in enumerate(stages):
            try:
                stated = sum(float(stage_rows[c].iloc[i] or 0) for c in
                             ("request_count_success", "request_count_failed")
                             if c in stage_rows.columns)
            except ValueError:
                continue
            got = int((req["stage"] == st.name).sum())
            if abs(stated - got) > 0.5:
                notes.append(f"stage {st.name}: measured.csv counts {stated:,.0f} requests, the "
                             f"arrivals in its window are {got:,}")
    return mine.reset_index(drop=True), stages, notes


def _num_or_str(v: str) -> Any:
    try:
        return float(v)
    except (TypeError, ValueError):
        return v


def _one_stage(req: pd.DataFrame) -> list[Stage]:
    req["stage"] = "all"
    end = float(req["arrival_s"].max()) if len(req) else 0.0
    return [Stage("all", 0.0, end + 1e-9, None)]


# ------------------------------------------------------------------ generic CSV


def load_csv(path: str | Path) -> MeasuredRun:
    """A generic measured CSV (columns in the module docstring)."""
    path = Path(path)
    origin = str(path)
    raw = _read_bytes(path, "a measured CSV")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise TraceError(f"{origin}: not UTF-8 text (a measured CSV was expected)") from None
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        raise TraceError(f"{origin}: empty file (expected a header: "
                         f"{', '.join(CSV_REQUIRED)})") from None
    except csv.Error as exc:
        raise TraceError(f"{origin} line 1: not a readable CSV ({exc})") from None
    header = [h.strip() for h in header]
    known = CSV_REQUIRED + CSV_OPTIONAL
    for h in header:
        if h not in known:
            hint = difflib.get_close_matches(h, known, n=1)
            tip = f"did you mean {hint[0]!r}? " if hint else ""
            raise TraceError(f"{origin} line 1: unknown column {show(h)} ({tip}expected "
                             f"{', '.join(CSV_REQUIRED)} and optionally {', '.join(CSV_OPTIONAL)})")
    if len(set(header)) != len(header):
        dup = next(h for h in header if header.count(h) > 1)
        raise TraceError(f"{origin} line 1: column {dup!r} appears twice")
    for col in CSV_REQUIRED:
        if col not in header:
            raise TraceError(f"{origin}: missing column {col!r} (required: "
                             f"{', '.join(CSV_REQUIRED)})")
    cols: dict[str, list] = {h: [] for h in header}
    lines: list[int] = []
    try:
        for row in reader:
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != len(header):
                raise TraceError(f"{origin} row {len(lines) + 1} (line {reader.line_num}): "
                                 f"expected {len(header)} fields, got {len(row)}")
            for h, c in zip(header, row, strict=True):
                cols[h].append(c.strip())
            lines.append(reader.line_num)
    except csv.Error as exc:
        raise TraceError(f"{origin} line {reader.line_num}: not a readable CSV ({exc})") from None
    if not lines:
        raise TraceError(f"{origin}: no requests (only a header)")
    rows = _Rows(origin, lambda i: f"row {i + 1} (line {lines[i]})")

    def parse(values: list[str]) -> list:
        out = []
        for v in values:
            try:
                out.append(float(v) if v else v)
            except ValueError:
                out.append(v)
        return out

    err = rows.bools(cols["has_error"], "has_error") if "has_error" in cols else np.zeros(
        len(lines), bool)
    ok = ~err
    arrival = rows.floats(parse(cols["arrival_s"]), "arrival_s", -math.inf)
    inp = rows.ints(parse(cols["input_tokens"]), "input_tokens", 1, ok)
    out = rows.ints(parse(cols["output_tokens"]), "output_tokens", 1, ok)
    ttft = rows.floats(parse(cols["ttft_s"]), "ttft_s", 0.0, ok)
    e2e = rows.floats(parse(cols["e2e_s"]), "e2e_s", 0.0, ok)
    bad = np.flatnonzero(ok & (e2e < ttft))
    if len(bad):
        i = int(bad[0])
        raise rows.fail(i, "e2e_s", f"a time >= ttft_s ({ttft[i]:g})", cols["e2e_s"][i])
    if "request_id" in cols:
        index = rows.ints(parse(cols["request_id"]), "request_id", 0)
        _unique(index, origin, "", "request_id")
    else:
        index = np.arange(len(lines), dtype=np.int64)
    req = pd.DataFrame({"index": index, "arrival_s": arrival, "input_tokens": inp,
                        "output_tokens": out, "ttft_s": ttft, "e2e_s": e2e, "has_error": err})
    notes: list[str] = []
    if "stage" in cols:
        labels = cols["stage"]
        for i, v in enumerate(labels):
            if not v:
                raise rows.fail(i, "stage", "a stage label", v)
        req["stage"] = np.array(labels, object)
    req = _sorted(req)
    if "stage" in cols:
        stages = _label_stages(req, origin)
    else:
        stages = _one_stage(req)
    run = MeasuredRun(run_name(path), path, "csv", req, stages, notes=notes)
    _finish(run)
    return run


def _label_stages(req: pd.DataFrame, origin: str) -> list[Stage]:
    """Stages from a ``stage`` column: each label's requests must be consecutive in time."""
    labels = req["stage"].to_numpy(object)
    change = np.flatnonzero(labels[1:] != labels[:-1]) + 1
    starts = np.concatenate([[0], change])
    seen: set[str] = set()
    t = req["arrival_s"].to_numpy()
    stages = []
    for j, s in enumerate(starts):
        label = str(labels[s])
        if label in seen:
            raise TraceError(f"{origin}: stage {label!r} comes back after another stage (in "
                             "arrival order a stage is one stretch of time)")
        seen.add(label)
        end_i = starts[j + 1] if j + 1 < len(starts) else len(t)
        end = float(t[end_i]) if end_i < len(t) else float(t[-1]) + 1e-9
        n = end_i - s
        span = float(t[end_i - 1] - t[s])
        stages.append(Stage(label, float(t[s]), end, (n - 1) / span if span > 0 else None))
    return stages


# ------------------------------------------------------------------ both


def _finish(run: MeasuredRun) -> None:
    req = run.requests
    with np.errstate(invalid="ignore", divide="ignore"):
        out = req["output_tokens"].to_numpy()
        req["tpot_s"] = np.where(out > 1, (req["e2e_s"] - req["ttft_s"]) / np.maximum(out - 1, 1),
                                 np.nan)
    step = _local_step(req)  # one rolling median for both columns
    req["output_ok"] = ok = _agrees(req, step)
    req["decoded_tokens"] = _decoded(req, ok, step)


def request_notes(run: MeasuredRun) -> list[str]:
    """What the requests themselves say about the data (errors, zero and miscounted outputs)."""
    req = run.requests
    notes: list[str] = []
    n_err = int(req["has_error"].sum())
    if n_err:
        notes.append(f"{n_err:,} requests have has_error: replayed, left out of the "
                         "comparison")
    no_prompt = int((req["input_tokens"] < 1).sum())
    if no_prompt:
        notes.append(f"{no_prompt:,} failed requests record 0 input tokens: replayed with a "
                     "1-token prompt")
    zero = int(((req["output_tokens"] < 1) & ~req["has_error"]).sum())
    if zero:
        notes.append(f"{zero:,} requests record 0 output tokens though they streamed a "
                         "first token: replayed with 1")
    bad_rows = ~req["output_ok"] & ~req["has_error"]
    bad = int(bad_rows.sum())
    if bad:
        notes.append(
            f"{bad:,} requests ({bad / max(len(req), 1):.1%}) record fewer output tokens than "
            f"their measured decode time implies (time per token over {MISCOUNT_RATIO:g}x that "
            "of the requests around them; recorded "
            f"{req['output_tokens'][bad_rows].mean():.0f} on average): replayed with the "
            f"count their decode time implies ({req['decoded_tokens'][bad_rows].mean():.0f} on "
            "average, so the simulated batch carries what the engine's did); the "
            "'consistent' rows leave them out")
    return notes


#: ``_local_step``'s answer: per request decode time, time per output token, neighbours' median
_Step = tuple[np.ndarray, np.ndarray, np.ndarray]


def _local_step(req: pd.DataFrame) -> _Step:
    """Per request: its measured decode time, its time per recorded output token (NaN
    where it records one token or none, or failed) and the median of that over the
    ``MISCOUNT_WINDOW`` requests around it in arrival order (they share its batch, so its
    step times)."""
    out = req["output_tokens"].to_numpy()
    dec = (req["e2e_s"] - req["ttft_s"]).to_numpy()
    ok_rows = ~req["has_error"].to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        per = np.where((out > 1) & ok_rows, dec / np.maximum(out - 1, 1), np.nan)
    local = (pd.Series(per).rolling(MISCOUNT_WINDOW, center=True, min_periods=1)
             .median().to_numpy())
    local = np.where(np.isfinite(local), local, np.nanmedian(per) if np.isfinite(per).any()
                     else np.inf)
    return dec, per, local


def flag_miscounts(req: pd.DataFrame) -> np.ndarray:
    """True where a request's recorded output count agrees with its measured decode time.

    Some runs record fewer output tokens than the server generated (with ignore_eos the
    text after an end-of-sequence token re-tokenizes short): such a request decodes for as
    long as its full-length neighbours. A request is flagged when its measured time per
    output token exceeds ``MISCOUNT_RATIO`` x the median of the ``MISCOUNT_WINDOW``
    requests around it in arrival order (they share its batch, so its step times); a request
    recording one token or none is flagged when it decoded longer than 2 such steps.
    """
    return _agrees(req, _local_step(req))


def _agrees(req: pd.DataFrame, step: _Step) -> np.ndarray:
    """``flag_miscounts`` given ``_local_step(req)`` (computed once by the caller)."""
    out = req["output_tokens"].to_numpy()
    ok_rows = ~req["has_error"].to_numpy()
    dec, per, local = step
    good = np.where(out > 1, per <= MISCOUNT_RATIO * local, dec <= 2 * local)
    return good | ~ok_rows


def decoded_tokens(req: pd.DataFrame) -> np.ndarray:
    """The output tokens the engine decoded for each request: the recorded count, except
    for a miscounted request (``flag_miscounts``), which decoded for as long as this many
    tokens at its neighbours' time per token: 1 + its decode time / their median step,
    at least its recorded count and at most the longest consistent output of the run (the
    load generator's bound). The replay decodes this many, so the simulated batch carries
    the load the engine carried (on the shared Llama-2-7B runs 23-31% of the requests
    record about 82 of their ~245 tokens: decoded as recorded, the replay carried a sixth
    fewer tokens, and at 20 req/s its decoding batch was a third short, 55 against 82, and
    its TPOT 21% short)."""
    step = _local_step(req)
    return _decoded(req, _agrees(req, step), step)


def _decoded(req: pd.DataFrame, ok: np.ndarray,
             step: _Step) -> np.ndarray:
    """``decoded_tokens`` given ``flag_miscounts``' answer and the ``_local_step`` it used
    (the rolling median is computed once)."""
    out = req["output_tokens"].to_numpy().astype(np.int64)
    bad = ~ok
    if not bad.any():
        return out.copy()
    dec, _per, local = step
    good = ~bad & ~req["has_error"].to_numpy()
    cap = int(out[good].max()) if good.any() else int(out.max())
    with np.errstate(invalid="ignore", divide="ignore"):
        steps = dec / local
    implied = np.where(np.isfinite(steps), np.round(steps) + 1, 0).astype(np.int64)
    return np.where(bad, np.maximum(np.minimum(implied, cap), out), out)
