"""Speculation's step cost as measured parts, fitted to public measurements.

``cost_models/data/spec_step_costs.yaml`` holds every public number found that separates
speculation's costs in a real engine (and the torch reference in ../shared/data/gpu_steps),
copied as published, each with its source, conditions and what it identifies. This module
reads that file and fits, from it, only what it identifies:

- the speculative path's own per-step work (drafter and verify passes excluded), as
  ``spec_step_overhead_s`` (per step), ``spec_token_overhead_s`` (per drafted token),
  ``spec_draft_step_overhead_s`` (per sequential draft step: the sampling and glue between
  a drafter's passes) and, only on request, ``spec_seq_overhead_s`` (per sequence); the
  ``ForwardCostModel.speculation_overhead`` form plus the draft-step term;
- a drafter pass's kernel floor: ``draft_pass_overhead_s`` (per pass) and
  ``per_layer_overhead_s`` (per layer) on top of weight and KV streaming and compute, one fit
  per execution regime (torch reference in CUDA graphs, an engine's draft passes, an
  engine's graphed target pass), since the three differ by up to 4x;
- what an engine pays with speculation configured but drafting nothing (idle), per engine
  mode, as measured points (no fit pretends to more than two points give);
- n-gram proposal CPU time per scanned context token.

Every least-squares fit is non-negative, weighs rows by relative error (with a 0.1 ms floor
on the scale so a near-zero row does not dominate), and is repeated leaving each source out
in turn: the held-out error of each row and each parameter's held-out range say whether
the data identify it. A parameter informed by one source only is reported as such.

Nothing here changes the simulator's pricing or its profiles (``benchmarks/spec_costs.py``
prints the table; docs/speculation-costs.md states what is measured and what is not).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CatalogError

FILE_NAME = "spec_step_costs.yaml"
COMPONENTS = ("idle", "spec_path", "drafter_pass", "ngram_proposal", "context")
REGIMES = ("torch_graph", "engine_draft", "engine_target")

_ENTRY_REQUIRED = ("url", "date", "engine", "engine_version", "model", "hardware",
                   "conditions", "published", "component", "identifies", "fit")
_ENTRY_OPTIONAL = ("where", "derivation", "rows", "excluded_because", "engine_mode",
                   "drafter_forward", "graph_mode_change", "regime", "bandwidth_Bps",
                   "peak_flops")
_ROW_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # component: (required keys, optional keys); every value a number
    "idle": (("rows", "nospec_step_s", "idle_step_s"), ()),
    "spec_path": (("rows", "drafted", "draft_passes"), ("overhead_s", "max_overhead_s")),
    "drafter_pass": (("tokens", "layers", "weight_bytes", "kv_bytes", "flops", "measured_s"),
                     ()),
    "ngram_proposal": (("rows", "scanned_tokens", "threads", "seconds"), ()),
}
# quantities that are signed (a measured difference can come out below zero)
_SIGNED = {"overhead_s"}

SPEC_PATH_PARAMS = ("spec_step_overhead_s", "spec_token_overhead_s",
                    "spec_draft_step_overhead_s")
SPEC_SEQ_PARAM = "spec_seq_overhead_s"
FLOOR_PARAMS = ("draft_pass_overhead_s", "per_layer_overhead_s")
# drafter rows above this many tokens leave the launch/bandwidth-bound regime (per-token
# elementwise work and compute overlap take over); they are predicted, not fitted
FLOOR_MAX_TOKENS = 64
SCALE_FLOOR_S = 1e-4  # relative errors, with this floor on the scale (seconds)
IDENTIFIED_RATIO = 2.0  # held-out estimates within this factor of each other
# the bundled H100-SXM profile's speculation terms (fit_spec_overheads to vLLM#49548)
TODAY_STEP_S = 0.000774947
TODAY_SEQ_S = 8.4027e-05


# ---------------------------------------------------------------------- the data file

@dataclass(frozen=True)
class Source:
    """One entry of the data file: a published measurement and what the fits use of it."""

    id: str
    url: str
    date: str
    engine: str
    engine_version: str
    model: str
    hardware: str
    conditions: str
    published: dict[str, Any]
    component: str
    identifies: str
    fit: bool
    rows: tuple[dict[str, float], ...] = ()
    where: str = ""
    derivation: str = ""
    excluded_because: str = ""
    engine_mode: str = ""
    drafter_forward: bool = False
    graph_mode_change: bool = False
    regime: str = ""
    bandwidth_Bps: float = 0.0
    peak_flops: float = 0.0


def bundled_path() -> Path:
    """The bundled data file."""
    return Path(str(resources.files("specsim.cost_models").joinpath("data", FILE_NAME)))


def load_sources(path: str | Path | None = None) -> dict[str, Source]:
    """The data file's entries by id (the bundled file when ``path`` is None). A file that
    is not what is expected raises one line naming the file and the key."""
    from specsim import yamlio  # lazy: specsim.safe_read imports the catalogs' errors

    p = bundled_path() if path is None else Path(path)
    origin = str(path) if path is not None else f"bundled {FILE_NAME}"
    data = yamlio.load_file(p, "a YAML table of speculation step costs", origin=origin)
    return sources_from_dict(data, origin)


def _err(origin: str, key: str, msg: str) -> CatalogError:
    return CatalogError(f"{origin}: {key}: {msg}")


def _text(value: Any, origin: str, key: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float) or not str(value).strip():
        raise _err(origin, key, f"expected a non-empty text, got {value!r}")
    return str(value)


def _num(value: Any, origin: str, key: str, signed: bool = False) -> float:
    from specsim import values

    try:
        return float(values.number(value, lo=None if signed else 0.0))
    except values.ValueRuleError as exc:
        raise _err(origin, key, str(exc)) from None


def sources_from_dict(data: Any, origin: str) -> dict[str, Source]:
    """Validate a parsed data file: ``{schema: 1, sources: {id: entry}}``."""
    if not isinstance(data, dict):
        raise CatalogError(f"{origin}: expected a mapping with 'schema' and 'sources', got "
                           f"{type(data).__name__}")
    for key in data:
        if key not in ("schema", "sources"):
            raise _err(origin, str(key), "unknown key (expected schema, sources)")
    if data.get("schema") != 1:
        raise _err(origin, "schema", f"expected 1, got {data.get('schema')!r}")
    entries = data.get("sources")
    if not isinstance(entries, dict) or not entries:
        raise _err(origin, "sources", "expected a non-empty mapping of id -> entry")
    return {str(sid): _source(str(sid), entry, origin) for sid, entry in entries.items()}


def _source(sid: str, entry: Any, origin: str) -> Source:
    where = f"sources.{sid}"
    if not isinstance(entry, dict):
        raise _err(origin, where, f"expected a mapping, got {entry!r}")
    for key in entry:
        if key not in _ENTRY_REQUIRED + _ENTRY_OPTIONAL:
            raise _err(origin, f"{where}.{key}", "unknown key (expected one of: "
                       f"{', '.join(_ENTRY_REQUIRED + _ENTRY_OPTIONAL)})")
    for key in _ENTRY_REQUIRED:
        if key not in entry:
            raise _err(origin, f"{where}.{key}", "missing (every entry names its source)")
    kw: dict[str, Any] = {}
    for key in ("url", "date", "engine", "engine_version", "model", "hardware", "conditions",
                "identifies"):
        kw[key] = _text(entry[key], origin, f"{where}.{key}")
    url = kw["url"]
    if not url.startswith(("https://", "http://", "../shared/")):
        raise _err(origin, f"{where}.url", f"expected an http(s) address or a ../shared/ "
                   f"path, got {url!r}")
    comp = entry["component"]
    if comp not in COMPONENTS:
        raise _err(origin, f"{where}.component", f"expected one of {', '.join(COMPONENTS)}, "
                   f"got {comp!r}")
    published = entry["published"]
    if not isinstance(published, dict) or not published:
        raise _err(origin, f"{where}.published", "expected a non-empty mapping of the "
                   "numbers as published")
    if not isinstance(entry["fit"], bool):
        raise _err(origin, f"{where}.fit", f"expected true or false, got {entry['fit']!r}")
    for key in ("where", "derivation", "excluded_because", "engine_mode"):
        if key in entry:
            kw[key] = _text(entry[key], origin, f"{where}.{key}")
    for key in ("drafter_forward", "graph_mode_change"):
        if key in entry:
            if not isinstance(entry[key], bool):
                raise _err(origin, f"{where}.{key}", f"expected true or false, got {entry[key]!r}")
            kw[key] = entry[key]
    for key in ("bandwidth_Bps", "peak_flops"):
        if key in entry:
            kw[key] = _num(entry[key], origin, f"{where}.{key}")
    if not entry["fit"] and "excluded_because" not in entry:
        raise _err(origin, f"{where}.excluded_because", "missing (an entry kept out of the "
                   "fits says why)")
    rows = _rows(entry.get("rows"), comp, origin, where)
    if comp in _ROW_KEYS and entry["fit"] and not rows:
        raise _err(origin, f"{where}.rows", f"a {comp} entry used by the fits needs rows")
    if comp == "drafter_pass" and rows:
        regime = entry.get("regime")
        if regime not in REGIMES:
            raise _err(origin, f"{where}.regime", f"expected one of {', '.join(REGIMES)}, "
                       f"got {regime!r}")
        kw["regime"] = regime
        for key in ("bandwidth_Bps", "peak_flops"):
            if kw.get(key, 0.0) <= 0:
                raise _err(origin, f"{where}.{key}", "expected a number greater than 0 (the "
                           "ceiling streaming and compute are priced at)")
    if comp == "idle" and rows and not kw.get("engine_mode"):
        raise _err(origin, f"{where}.engine_mode", "missing (idle costs are kept per engine "
                   "mode)")
    return Source(id=sid, published=dict(published), component=comp, fit=entry["fit"],
                  rows=rows, **kw)


def _rows(raw: Any, comp: str, origin: str, where: str) -> tuple[dict[str, float], ...]:
    if raw is None:
        return ()
    if comp not in _ROW_KEYS:
        raise _err(origin, f"{where}.rows", f"a {comp} entry has no rows (its numbers stay "
                   "in 'published')")
    if not isinstance(raw, list):
        raise _err(origin, f"{where}.rows", f"expected a list of mappings, got {raw!r}")
    need, optional = _ROW_KEYS[comp]
    out = []
    for i, row in enumerate(raw):
        key = f"{where}.rows[{i}]"
        if not isinstance(row, dict):
            raise _err(origin, key, f"expected a mapping, got {row!r}")
        for k in row:
            if k not in need + optional:
                raise _err(origin, f"{key}.{k}", "unknown key (expected "
                           f"{', '.join(need + optional)})")
        for k in need:
            if k not in row:
                raise _err(origin, f"{key}.{k}", "missing")
        if optional and sum(k in row for k in optional) != 1:
            raise _err(origin, key, f"expected exactly one of {', '.join(optional)}")
        out.append({k: _num(v, origin, f"{key}.{k}", signed=k in _SIGNED)
                    for k, v in row.items()})
    return tuple(out)


# ---------------------------------------------------------------------- fitting machinery

@dataclass(frozen=True)
class Param:
    """One fitted parameter: its value (seconds), whether the data identify it, and the
    values the fit takes with each informing source left out."""

    name: str
    value: float
    status: str
    sources: tuple[str, ...]
    held_out: dict[str, float] = field(default_factory=dict)
    # the tightest upper bound the bound rows give, if any (the bundled bound rows bound
    # rejection sampling's share of the step, a part of the spec path, not all of it)
    bound: float | None = None

    @property
    def identified(self) -> bool:
        return self.status.startswith("identified")


@dataclass(frozen=True)
class RowError:
    """A fitted row: measured, the full fit and the fit without its own source."""

    source: str
    label: str
    measured_s: float
    fitted_s: float
    held_out_s: float

    @property
    def held_out_pct(self) -> float:
        return _pct(self.held_out_s, self.measured_s)

    @property
    def fitted_pct(self) -> float:
        return _pct(self.fitted_s, self.measured_s)


@dataclass(frozen=True)
class LinearFit:
    """``measured = offset + X . params`` (params >= 0) over one set of rows."""

    params: dict[str, Param]
    rows: tuple[RowError, ...]
    bounds: tuple[tuple[str, str, float, float], ...] = ()  # source, label, bound, fitted

    def value(self, name: str) -> float:
        return self.params[name].value

    def held_out_errors(self) -> dict[str, float]:
        """Mean |held-out error| (%) per source."""
        by: dict[str, list[float]] = {}
        for r in self.rows:
            by.setdefault(r.source, []).append(abs(r.held_out_pct))
        return {s: float(np.mean(v)) for s, v in by.items()}


def _pct(x: float, ref: float) -> float:
    if ref == 0:
        return 0.0 if x == 0 else math.copysign(math.inf, x)
    return 100.0 * (x / ref - 1.0) if ref > 0 else 100.0 * (x - ref) / abs(ref)


def _nnls(x: np.ndarray, y: np.ndarray, scale: np.ndarray) -> np.ndarray:
    from scipy.optimize import nnls

    if len(y) == 0:
        return np.zeros(x.shape[1])
    theta, _ = nnls(x / scale[:, None], y / scale)
    return theta


def fit_linear(x: np.ndarray, y: np.ndarray, offset: np.ndarray, groups: Sequence[str],
               labels: Sequence[str], names: Sequence[str],
               bound_x: np.ndarray | None = None, bound_y: np.ndarray | None = None,
               bound_groups: Sequence[str] = (), bound_labels: Sequence[str] = ()
               ) -> LinearFit:
    """Non-negative least squares of ``y - offset`` on ``x`` (relative errors), with each
    group (source) left out in turn. Upper-bound rows (``bound_x . params <= bound_y``) are
    not fitted; they are checked, and give each parameter its tightest bound."""
    x, y, offset = (np.asarray(a, float) for a in (x, y, offset))
    groups = list(groups)
    scale = np.maximum(np.abs(y), SCALE_FLOOR_S)
    full = _nnls(x, y - offset, scale)
    gset = list(dict.fromkeys(groups))
    held: dict[str, np.ndarray] = {}
    pred_out = np.zeros_like(y)
    for g in gset:
        test = np.array([h == g for h in groups])
        train = ~test
        xt = x[train]
        # columns the remaining rows cannot see stay at zero; a set of rows that sees a
        # column only in a fixed ratio with another (one layer count) cannot separate them,
        # so the held-out fit then keeps the last of them only (per layer over per pass)
        cols = [j for j in range(x.shape[1]) if np.any(xt[:, j])]
        if len(cols) > 1 and np.linalg.matrix_rank(xt[:, cols]) < len(cols):
            cols = cols[-1:]
        theta = np.zeros(x.shape[1])
        if cols:
            theta[cols] = _nnls(xt[:, cols], y[train] - offset[train], scale[train])
        held[g] = theta
        pred_out[test] = offset[test] + x[test] @ theta
    fitted = offset + x @ full
    rows = tuple(RowError(g, lab, float(m), float(f), float(h))
                 for g, lab, m, f, h in zip(groups, labels, y, fitted, pred_out, strict=True))
    bounds: list[tuple[str, str, float, float]] = []
    bmax: dict[int, float] = {}
    if bound_x is not None and bound_y is not None and len(bound_y):
        bx, by = np.asarray(bound_x, float), np.asarray(bound_y, float)
        for i in range(len(by)):
            bounds.append((bound_groups[i], bound_labels[i], float(by[i]),
                           float(bx[i] @ full)))
            for j in range(bx.shape[1]):
                if bx[i, j] > 0:
                    bmax[j] = min(bmax.get(j, math.inf), float(by[i] / bx[i, j]))
    params = {}
    for j, name in enumerate(names):
        informing = tuple(g for g in gset
                          if np.any(x[[h == g for h in groups], j]))
        loo = {g: float(held[g][j]) for g in informing
               if any(np.any(x[[h == k for h in groups], j]) for k in informing if k != g)}
        params[name] = Param(name, float(full[j]), _status(float(full[j]), informing, loo),
                             informing, loo, bmax.get(j))
    return LinearFit(params, rows, tuple(bounds))


def _status(value: float, informing: tuple[str, ...], loo: dict[str, float]) -> str:
    if not informing:
        return "not identified: no fitted row informs it"
    if len(informing) == 1:
        return f"not identified: one source ({informing[0]})"
    vals = [value, *loo.values()]
    lo, hi = min(vals), max(vals)
    if hi <= 1e-12:
        return "identified: 0"
    if lo > 0 and hi / lo <= IDENTIFIED_RATIO:
        return "identified"
    return (f"poorly identified: held-out range {lo * 1e6:.3g}-{hi * 1e6:.3g} us "
            f"(a factor over {IDENTIFIED_RATIO:g})")


# ---------------------------------------------------------------------- the four fits

def _used(sources: Iterable[Source], component: str) -> list[Source]:
    return [s for s in sources if s.fit and s.component == component and s.rows]


def spec_path_rows(sources: Iterable[Source]) -> list[tuple[str, str, dict[str, float]]]:
    """(source, label, row) for the speculative path: spec_path rows, and idle rows where the
    engine runs no drafter pass and keeps its graphs (then the idle cost is the spec path's
    own fixed work at zero drafts)."""
    srcs = list(sources)
    out = []
    for s in _used(srcs, "spec_path"):
        for r in s.rows:
            out.append((s.id, f"b={r['rows']:g} drafted={r['drafted']:g}", r))
    for s in _used(srcs, "idle"):
        if s.drafter_forward or s.graph_mode_change:
            continue
        for r in s.rows:
            out.append((s.id, f"b={r['rows']:g} idle", {
                "rows": r["rows"], "drafted": 0.0, "draft_passes": 0.0,
                "overhead_s": r["idle_step_s"] - r["nospec_step_s"]}))
    return out


def fit_spec_path(sources: Iterable[Source], with_seq: bool = False) -> LinearFit:
    """``overhead = step + token x drafted + draft_step x draft_passes (+ seq x rows)``."""
    names = list(SPEC_PATH_PARAMS) + ([SPEC_SEQ_PARAM] if with_seq else [])

    def cols(r: dict[str, float]) -> list[float]:
        c = [1.0, r["drafted"], r["draft_passes"]]
        return c + [r["rows"]] if with_seq else c

    rows = spec_path_rows(sources)
    fit = [(g, lab, r) for g, lab, r in rows if "overhead_s" in r]
    bnd = [(g, lab, r) for g, lab, r in rows if "max_overhead_s" in r]
    x = np.array([cols(r) for _, _, r in fit]).reshape(len(fit), len(names))
    y = np.array([r["overhead_s"] for _, _, r in fit])
    bx = np.array([cols(r) for _, _, r in bnd]).reshape(len(bnd), len(names))
    by = np.array([r["max_overhead_s"] for _, _, r in bnd])
    return fit_linear(x, y, np.zeros(len(y)), [g for g, _, _ in fit], [lab for _, lab, _ in fit],
                      names, bx, by, [g for g, _, _ in bnd], [lab for _, lab, _ in bnd])


def roofline_s(source: Source, row: dict[str, float]) -> float:
    """Streaming (weights + KV at the entry's bandwidth) plus compute (at its peak)."""
    return ((row["weight_bytes"] + row["kv_bytes"]) / source.bandwidth_Bps
            + row["flops"] / source.peak_flops)


def fit_drafter_floor(sources: Iterable[Source], regime: str,
                      max_tokens: float = FLOOR_MAX_TOKENS) -> LinearFit:
    """``measured = roofline + pass + layers x per_layer`` over one regime's rows with at
    most ``max_tokens`` tokens. With a single layer count the two are not separable, and
    only the per-layer floor is fitted."""
    rows = [(s, r) for s in _used(sources, "drafter_pass") if s.regime == regime
            for r in s.rows if r["tokens"] <= max_tokens]
    x = np.array([[1.0, r["layers"]] for _, r in rows]).reshape(len(rows), 2)
    if len({r["layers"] for _, r in rows}) < 2:
        x[:, 0] = 0.0
    y = np.array([r["measured_s"] for _, r in rows])
    off = np.array([roofline_s(s, r) for s, r in rows])
    return fit_linear(x, y, off, [s.id for s, _ in rows],
                      [f"tokens={r['tokens']:g} layers={r['layers']:g}" for _, r in rows],
                      FLOOR_PARAMS)


def drafter_pass_s(fit: LinearFit, layers: float, stream_s: float) -> float:
    """A drafter pass priced with a floor fit: streaming/compute time plus the floor."""
    return (stream_s + fit.value("draft_pass_overhead_s")
            + layers * fit.value("per_layer_overhead_s"))


@dataclass(frozen=True)
class IdlePoint:
    source: str
    rows: float
    nospec_step_s: float
    idle_step_s: float

    @property
    def overhead_s(self) -> float:
        return self.idle_step_s - self.nospec_step_s

    @property
    def pct(self) -> float:
        return 100.0 * self.overhead_s / self.nospec_step_s


@dataclass(frozen=True)
class IdleMode:
    """What one engine mode pays per step with speculation configured and idle."""

    mode: str
    points: tuple[IdlePoint, ...]
    drafter_forward: bool
    graph_mode_change: bool
    line: tuple[float, float] | None  # (fixed s, per sequence s) through the points, if >= 2
    note: str


def idle_costs(sources: Iterable[Source]) -> dict[str, IdleMode]:
    """Idle points per engine mode, and a non-negative line through them where there are
    two or more batch sizes (two points fix it exactly: there is nothing held out)."""
    by: dict[str, list[Source]] = {}
    for s in _used(sources, "idle"):
        by.setdefault(s.engine_mode, []).append(s)
    out = {}
    for mode, srcs in by.items():
        pts = tuple(IdlePoint(s.id, r["rows"], r["nospec_step_s"], r["idle_step_s"])
                    for s in srcs for r in s.rows)
        line = None
        note = "one batch size: a constant"
        if len({p.rows for p in pts}) >= 2:
            x = np.array([[1.0, p.rows] for p in pts])
            y = np.array([p.overhead_s for p in pts])
            scale = np.maximum(np.abs(y), SCALE_FLOOR_S)
            theta = _nnls(x, y, scale)
            line = (float(theta[0]), float(theta[1]))
            worst = float(np.max(np.abs(x @ theta - y) / scale))
            note = (f"{len(pts)} points, non-negative least squares (worst residual "
                    f"{100 * worst:.0f}%)")
            if len(pts) == 2:
                note = ("two batch sizes, two parameters: exact, nothing held out"
                        if worst < 0.01 else "two batch sizes; the non-negative line misses "
                        f"one by {100 * worst:.0f}% (its intercept would be negative)")
        out[mode] = IdleMode(mode, pts, any(s.drafter_forward for s in srcs),
                             any(s.graph_mode_change for s in srcs), line, note)
    return out


def idle_at(mode: IdleMode, rows: float) -> tuple[float, str] | None:
    """The idle cost at ``rows`` sequences and how it was read: on the line between the
    measured batch sizes, or the one measured point as a constant ('measured at b=N');
    None outside the measured range of a mode with a line (no extrapolation)."""
    measured = sorted({p.rows for p in mode.points})
    if mode.line is not None:
        if measured[0] <= rows <= measured[-1]:
            return mode.line[0] + mode.line[1] * rows, "interpolated"
        return None
    return (float(np.mean([p.overhead_s for p in mode.points])),
            f"measured at b={measured[0]:g}")


def ngram_scan_costs(sources: Iterable[Source]) -> list[tuple[str, float, float]]:
    """(source, threads, seconds per scanned context token) for each n-gram row."""
    return [(s.id, r["threads"], r["seconds"] / r["scanned_tokens"])
            for s in _used(sources, "ngram_proposal") for r in s.rows]


# ---------------------------------------------------------------------- the whole report

@dataclass(frozen=True)
class Report:
    sources: dict[str, Source]
    spec_path: LinearFit
    spec_path_with_seq: LinearFit
    floors: dict[str, LinearFit]
    idle: dict[str, IdleMode]
    ngram: list[tuple[str, float, float]]


def fit_all(sources: dict[str, Source] | None = None) -> Report:
    """Every fit over the data file (the bundled one by default)."""
    srcs = load_sources() if sources is None else sources
    vals = list(srcs.values())
    floors = {r: fit_drafter_floor(vals, r) for r in REGIMES
              if any(s.regime == r for s in _used(vals, "drafter_pass"))}
    return Report(srcs, fit_spec_path(vals), fit_spec_path(vals, with_seq=True), floors,
                  idle_costs(vals), ngram_scan_costs(vals))


def implied_step_overhead(report: Report, rows: float, k: int
                          ) -> dict[str, tuple[float | None, str]]:
    """Speculation's per-step overhead (seconds, drafter and verify passes excluded) at
    ``rows`` sequences drafting ``k`` tokens each: today's H100 profile, the recommended
    spec path, and the idle cost per engine mode (k = 0), each with how it was read."""
    rec = recommendation(report)
    step = rec["spec_step_overhead_s"]["value"]
    token = rec["spec_token_overhead_s"]["value"]
    seq = rec["spec_seq_overhead_s"]["value"]
    out: dict[str, tuple[float | None, str]] = {
        "today (0.77 ms + 84 us x batch)": (TODAY_STEP_S + TODAY_SEQ_S * rows, "profile"),
        f"recommended spec path (k={k})": (step + token * k * rows + seq * rows,
                                           "step + token x drafted"),
    }
    for mode in report.idle.values():
        got = idle_at(mode, rows)
        out[f"idle: {mode.mode}"] = got if got is not None else (None, "not measured there")
    return out


def recommendation(report: Report) -> dict[str, dict[str, Any]]:
    """What the data support for the simulator, by explicit rules (seconds):

    - ``spec_step_overhead_s``: the spec path's fixed cost measured directly, i.e. the mean
      of the fitted spec-path rows with nothing drafted and no draft step (an idle step
      with no drafter pass); the least-squares value is kept beside it;
    - ``spec_token_overhead_s`` and ``spec_seq_overhead_s``: their fitted value where the
      data identify them, else 0 with the tightest published bound;
    - the drafter floor: the engine-draft regime's fit (per pass and per layer), with the
      engine-target and torch-reference per-layer floors as the range around it;
    - idle: per engine mode, the measured points (and the line through two of them).
    """
    sp, seq_fit = report.spec_path, report.spec_path_with_seq
    pure = [row["overhead_s"] for _, _, row in spec_path_rows(report.sources.values())
            if "overhead_s" in row and row["drafted"] == 0 and row["draft_passes"] == 0]
    out: dict[str, dict[str, Any]] = {}
    p = sp.params["spec_step_overhead_s"]
    out["spec_step_overhead_s"] = {
        "value": float(np.mean(pure)) if pure else p.value, "fitted": p.value,
        "status": ("measured directly" if pure else p.status), "bound": p.bound,
        "evidence": "idle steps with no drafter pass" if pure else p.status}
    for name, fit in (("spec_token_overhead_s", sp), (SPEC_SEQ_PARAM, seq_fit)):
        q = fit.params[name]
        out[name] = {"value": q.value if q.identified else 0.0, "fitted": q.value,
                     "status": q.status, "bound": q.bound,
                     "evidence": "fitted" if q.identified else "not identified: 0"}
    q = sp.params["spec_draft_step_overhead_s"]
    out["spec_draft_step_overhead_s"] = {
        "value": q.value if q.identified else 0.0, "fitted": q.value, "status": q.status,
        "bound": q.bound, "evidence": "not identified: left to the drafter's per-pass floor"
        if not q.identified else "fitted"}
    for regime, fit in report.floors.items():
        for name in FLOOR_PARAMS:
            q = fit.params[name]
            out[f"{regime}.{name}"] = {"value": q.value, "fitted": q.value,
                                       "status": q.status, "bound": None,
                                       "evidence": f"{regime} fit"}
    return out
