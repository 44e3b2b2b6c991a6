"""Fit a GPU's roofline parameters to timed whole forward passes (``calibrate --from-steps``).

The table is JSON lines, as ``shared/data/gpu_steps/gpu_steps.py`` writes them: an optional
``{"kind": "info", "device": ...}`` line, then one line per timed pass:

- ``{"kind": "decode", "model", "batch", "q", "context", "seconds"}``: ``batch`` rows of
  ``q`` new tokens each over ``context`` cached ones (decode at q = 1, verify above), the LM
  head over every new token;
- ``{"kind": "prefill", "model", "batch", "tokens", "seconds"}``: ``batch`` causal
  sequences of ``tokens / batch`` tokens each, the LM head once per sequence; an optional
  ``context`` (default 0) makes each a chunk over that many cached tokens (chunked prefill).

Lines with an ``error`` (a pass that ran out of memory) are skipped and counted. Models are
catalog names (case-insensitive). Each pass is priced by ``ForwardCostModel.time`` with the
parameters being fitted (the simulator's own formulas; none is changed here), the residual is
log(predicted / measured), minimised by ``scipy.optimize.least_squares`` from several starts
(the roofline's max() makes the loss piecewise). Held-out errors: each model left out in
turn (fit on the others) and a 5-fold split of the rows; the written profile is refitted on
every row.
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from ..catalog import ModelSpec, get_hardware, model_catalog, model_from_dict
from ..errors import CatalogError
from ..roofline import ForwardCostModel, attention_area
from .profiles import _plain, _precision, _sig, ape_stats, calibration_from, resolve_hardware

# (name, lower bound, upper bound, starts); per_layer and fixed overheads in seconds.
PARAMS: tuple[tuple[str, float, float, tuple[float, ...]], ...] = (
    ("eta_compute", 0.05, 1.0, (0.4, 0.8)),
    ("matmul_half_tokens", 0.0, 4096.0, (16.0, 256.0)),
    ("eta_memory", 0.05, 1.0, (0.5, 0.9)),
    ("eta_elementwise", 0.01, 1.0, (0.3,)),
    ("eta_attn_prefill", 0.01, 1.0, (0.3,)),
    ("eta_attn_decode", 0.05, 1.0, (0.7,)),
    ("per_layer_overhead_s", 0.0, 1e-3, (5e-6, 50e-6)),
    ("fixed_overhead_s", 0.0, 50e-3, (0.0, 500e-6)),
)
FOLDS = 5
TARGETS = {"decode": 10.0, "prefill": 15.0}  # median % error the issue (#23) asks for


@dataclass(frozen=True)
class Step:
    """One timed pass of the table (``line``: its 1-based line number)."""

    line: int
    kind: str
    model: str
    batch: int
    q: int
    context: int
    tokens: int
    seconds: float


def _fail(path: Path, line: int, msg: str) -> CatalogError:
    return CatalogError(f"{path}: line {line}: {msg}")


MAX_COUNT = 10**9  # batch, q, context, tokens: far above any pass, far below float overflow


def _int(rec: dict, key: str, path: Path, line: int, low: int) -> int:
    v = rec.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= MAX_COUNT:
        raise _fail(path, line, f"{key}: expected an integer from {low} to {MAX_COUNT:.0e}, "
                                f"got {v!r}")
    return v


def read_steps(path: str | Path) -> tuple[list[Step], dict[str, Any], int]:
    """(passes, the info line or {}, lines skipped for an ``error``); bad input is one
    CatalogError naming the file, the line and the key."""
    from specsim import safe_read

    path = Path(path)
    text = safe_read.read_text(path, "a JSON-lines table of timed passes", safe_read.DATA_BYTES)
    steps: list[Step] = []
    info: dict[str, Any] = {}
    skipped = 0
    for i, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            rec = safe_read.json_loads(raw)
        except ValueError as exc:
            raise _fail(path, i, f"not a JSON object ({exc})") from None
        if not isinstance(rec, dict):
            raise _fail(path, i, f"expected a JSON object, got {type(rec).__name__}")
        kind = rec.get("kind")
        if kind == "info":
            info = rec
            continue
        if kind not in ("decode", "prefill"):
            raise _fail(path, i, f"kind: expected 'info', 'decode' or 'prefill', got {kind!r}")
        if "error" in rec:
            skipped += 1
            continue
        model = rec.get("model")
        if not isinstance(model, str) or not model:
            raise _fail(path, i, f"model: expected a model name, got {model!r}")
        s = rec.get("seconds")
        if isinstance(s, bool) or not isinstance(s, int | float) or not math.isfinite(s) or s <= 0:
            raise _fail(path, i, f"seconds: expected a positive number, got {s!r}")
        batch = _int(rec, "batch", path, i, 1)
        if kind == "decode":
            q, ctx = _int(rec, "q", path, i, 1), _int(rec, "context", path, i, 0)
            tokens = batch * q
        else:
            tokens = _int(rec, "tokens", path, i, batch)
            if tokens % batch:
                raise _fail(path, i, f"tokens: expected a multiple of batch {batch}, got {tokens}")
            q = tokens // batch
            ctx = _int(rec, "context", path, i, 0) if rec.get("context") is not None else 0
        steps.append(Step(i, kind, model, batch, q, ctx, tokens, float(s)))
    if not steps:
        raise CatalogError(f"{path}: no decode or prefill passes (expected JSON lines with "
                           "kind, model, batch, q, context / tokens, seconds)")
    return steps, info, skipped


def catalog_model(name: str, path: Path, line: int):
    """The catalog model a table names (case-insensitive)."""
    cat = model_catalog()
    match = {k.lower(): k for k in cat}.get(name.lower())
    if match is None:
        raise _fail(path, line, f"model: {name!r} is not a catalog model (known: "
                                f"{', '.join(sorted(cat))})")
    return model_from_dict(match, cat[match], f"model {match}")


def hardware_of(info: dict[str, Any], given: str | None) -> str:
    """The catalog chip: ``--hardware`` or the info line's device (``NVIDIA H200`` -> h200)."""
    if given:
        return resolve_hardware(given)[0]
    device = str(info.get("device") or "")
    words = [w for w in device.split() if w.upper() not in ("NVIDIA", "AMD", "GOOGLE")]
    if not words:
        raise CatalogError("--from-steps: the table names no device; give --hardware NAME")
    return resolve_hardware(words[0])[0]


def aggregates(steps: list[Step]) -> dict[str, np.ndarray]:
    """Batch aggregates of each pass (``BatchShape``'s fields, as arrays)."""
    b = np.array([s.batch for s in steps], dtype=np.float64)
    q = np.array([s.q for s in steps], dtype=np.float64)
    c = np.array([s.context for s in steps], dtype=np.float64)
    decode = np.array([s.kind == "decode" for s in steps])
    return {"tokens": b * q, "qc": b * attention_area(q, c), "ctx": b * c,
            "logits": np.where(decode, b * q, b)}


class StepsData:
    """A table's passes grouped per model, ready to price for any parameter values."""

    def __init__(self, steps: list[Step], hardware: str | Any, path: Path,
                 info: dict[str, Any] | None = None,
                 models: dict[str, ModelSpec] | None = None) -> None:
        # a catalog chip's name, or a HardwareSpec (a CPU measured by calibrate --model)
        self.hw = get_hardware(hardware, "--hardware") if isinstance(hardware, str) else hardware
        self.steps, self.hardware = steps, self.hw.name
        self.caps = ceilings(info or {}, self.hw)
        floors = {name: low for name, low, _, _ in PARAMS}
        for name, cap in self.caps.items():  # a ceiling under the fit's own lower bound
            if cap < floors[name]:
                raise CatalogError(
                    f"{path}: info line: the measured ceiling gives {name} at most {cap:.3g} "
                    f"of {self.hw.name}'s datasheet, below the fit's lower bound "
                    f"{floors[name]:g}: check matmul_tflops / copy_gb_s (or --hardware)")
        known = {k.lower(): v for k, v in (models or {}).items()}
        self.models = {}
        for s in steps:
            if s.model not in self.models:
                self.models[s.model] = (known.get(s.model.lower())
                                        or catalog_model(s.model, path, s.line))
        self.agg = aggregates(steps)
        self.measured = np.array([s.seconds for s in steps])
        self.model_of = np.array([s.model for s in steps])
        self.kind = np.array([s.kind for s in steps])

    def predict(self, values: dict[str, float], rows: np.ndarray | None = None) -> np.ndarray:
        """Seconds the roofline prices the passes ``rows`` (a mask; all when None) at."""
        rows = np.ones(len(self.steps), bool) if rows is None else rows
        cal = calibration_from(values, "steps-fit")
        out = np.zeros(len(self.steps))
        for name, spec in self.models.items():
            m = rows & (self.model_of == name)
            if m.any():
                fcm = ForwardCostModel(spec, self.hw, 1, _precision(), cal)
                a = {k: v[m] for k, v in self.agg.items()}
                out[m] = fcm.time(a["tokens"], a["qc"], a["ctx"], a["logits"])
        return out[rows]


def ceilings(info: dict[str, Any], hw) -> dict[str, float]:
    """Upper bounds of the efficiencies from the device's measured ceilings (the info line's
    ``matmul_tflops`` and ``copy_gb_s``, as shares of the datasheet): no op group can run
    faster than the chip was measured to."""
    caps: dict[str, float] = {}
    tflops, gbs = info.get("matmul_tflops"), info.get("copy_gb_s")
    if isinstance(tflops, int | float) and tflops > 0:
        share = min(1.0, tflops * 1e12 / hw.peak("bf16")[0])
        caps.update(eta_compute=share, eta_attn_prefill=share)
    if isinstance(gbs, int | float) and gbs > 0:
        share = min(1.0, gbs * 1e9 / hw.hbm_bw)
        caps.update(eta_memory=share, eta_attn_decode=share, eta_elementwise=share)
    return caps


def fit(data: StepsData, rows: np.ndarray) -> dict[str, float]:
    """Parameters minimising log(predicted / measured) over ``rows``, best of several starts."""
    names = [p[0] for p in PARAMS]
    lo = np.array([p[1] for p in PARAMS])
    hi = np.array([min(p[2], data.caps.get(p[0], p[2])) for p in PARAMS])
    meas = np.log(data.measured[rows])

    def resid(x: np.ndarray) -> np.ndarray:
        return np.log(data.predict(dict(zip(names, x, strict=True)), rows)) - meas

    scale = np.maximum(hi - lo, 1e-12)
    best = None
    for pick in (0, -1):  # the low and the high corner of the starting values
        x0 = np.clip(np.array([p[3][pick] for p in PARAMS]), lo, hi)
        r = least_squares(resid, x0, bounds=(lo, hi), x_scale=scale, method="trf",
                          xtol=1e-12, ftol=1e-12, gtol=1e-12, max_nfev=4000)
        if best is None or r.cost < best.cost:
            best = r
    return dict(zip(names, (float(v) for v in best.x), strict=True))


def errors(data: StepsData, values: dict[str, float], rows: np.ndarray) -> dict[str, Any]:
    """Error statistics of ``rows`` per kind of pass (decode/verify, prefill)."""
    pred = data.predict(values, rows)
    meas, kind = data.measured[rows], data.kind[rows]
    out = {}
    for k in ("decode", "prefill"):
        if (kind == k).any():
            out[k] = ape_stats(pred[kind == k], meas[kind == k])
    return out


@dataclass
class StepsFit:
    values: dict[str, float]
    train: dict[str, Any]
    holdouts: list[dict[str, Any]]
    hardware: str
    name: str
    source: str
    skipped: int
    rows: int


def fit_steps(path: str | Path, hardware: str | None = None, name: str | None = None
              ) -> StepsFit:
    """Read, fit on each training split, report held-out errors, refit on every row."""
    path = Path(path)
    steps, info, skipped = read_steps(path)
    hw = hardware_of(info, hardware)
    return fit_table(StepsData(steps, hw, path, info), info, skipped, path.name, name)


def fit_table(data: StepsData, info: dict[str, Any], skipped: int, label: str,
              name: str | None = None, how: str = "specsim calibrate --from-steps"
              ) -> StepsFit:
    """Fit ``data`` on each training split (each model left out; 5 folds of rows), report
    the held-out errors, and refit on every row for the profile."""
    n = len(data.steps)
    everything = np.ones(n, bool)
    holdouts = []
    for model in data.models:
        test = data.model_of == model
        if test.all():
            continue
        vals = fit(data, ~test)
        holdouts.append({"held_out": f"model {model}", "train_rows": int((~test).sum()),
                         "test": errors(data, vals, test)})
    if n >= 2 * FOLDS:  # every FOLDS-th row held out in turn, errors pooled
        pred = np.zeros(n)
        for f in range(FOLDS):
            test = np.arange(n) % FOLDS == f
            pred[test] = data.predict(fit(data, ~test), test)
        holdouts.append({"held_out": f"{FOLDS}-fold rows (every {FOLDS}th row in turn)",
                         "train_rows": n - n // FOLDS,
                         "test": {k: ape_stats(pred[data.kind == k], data.measured[data.kind == k])
                                  for k in ("decode", "prefill") if (data.kind == k).any()}})
    values = fit(data, everything)
    device = info.get("device", "unknown device")
    source = (f"{label}: {n} timed forward passes on {device} "
              f"({', '.join(data.models)}), {how}")
    return StepsFit(values, errors(data, values, everything), holdouts, data.hardware,
                    name or f"{data.hardware}-steps", source, skipped, n)


def profile(f: StepsFit, notes: list[str] | None = None) -> dict[str, Any]:
    """The YAML mapping (``fitted:`` holds the fitted parameters only)."""
    return {
        "name": f.name, "hardware": f.hardware, "source": f.source,
        "date": _dt.date.today().isoformat(),
        "fitted": {k: _sig(v) for k, v in f.values.items()},
        "fit_quality": _plain({
            "residual": "log(predicted / measured) per pass, every pass weighted the same; "
                        "errors are |predicted / measured - 1|",
            "optimizer": "scipy.optimize.least_squares (trf, bounded), multi-start",
            "passes": f.rows, "skipped_error_lines": f.skipped,
            "targets_median_ape_pct": dict(TARGETS),
            "train_all_rows": f.train, "holdouts": f.holdouts}),
        "notes": list(notes or []) + [
            "engine_* and spec_* parameters are not in a table of forward passes: not fitted "
            "(neutral defaults)"],
    }


def summary_lines(f: StepsFit) -> list[str]:
    """Parameters, in-sample and held-out errors against the targets, for the terminal."""
    v = f.values
    lines = [f"{f.hardware}: {f.rows} passes" + (f" ({f.skipped} error lines skipped)"
                                                 if f.skipped else ""),
             "  " + ", ".join(f"{k} {v[k]:.3g}" for k in ("eta_compute", "matmul_half_tokens",
                                                           "eta_memory", "eta_elementwise",
                                                           "eta_attn_prefill", "eta_attn_decode")),
             f"  per_layer_overhead {v['per_layer_overhead_s'] * 1e6:.1f} us, fixed_overhead "
             f"{v['fixed_overhead_s'] * 1e6:.1f} us"]

    def fmt(errs: dict[str, Any]) -> str:
        parts = []
        for k, s in errs.items():
            ok = "met" if s["median_ape_pct"] <= TARGETS[k] else "NOT met"
            parts.append(f"{k} median {s['median_ape_pct']:.1f}% worst {s['max_ape_pct']:.1f}% "
                         f"({s['rows']} passes; target <= {TARGETS[k]:.0f}%: {ok})")
        return "; ".join(parts)

    lines.append("  fitted on every pass: " + fmt(f.train))
    if not f.holdouts:
        lines.append(f"  no held-out errors: one model and fewer than {2 * FOLDS} passes")
    for h in f.holdouts:
        lines.append(f"  held out {h['held_out']} (fit on {h['train_rows']}): " + fmt(h["test"]))
    return lines
