"""Fit the roofline's four calibration numbers to measured passes, and write the profile.

The parameters are eta_compute, eta_memory, per_layer_overhead_s and fixed_overhead_s of
``ForwardCostModel``. Residuals are relative errors (a 1 ms decode step and a 200 ms prefill
matter equally), minimised with ``scipy.optimize.least_squares`` from a few starting points
because the roofline's max(compute, memory) makes the loss piecewise. Part of the points is
held out of the fit and the profile reports the error on them: that, not the training error,
says how far to trust the profile.

This module needs numpy, scipy, pandas and yaml only (no torch), so users can fit their own
engine's measurements (``fit_from_measurements``) without the calibrate extra.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from scipy.optimize import least_squares

from ..calibration import Calibration
from ..catalog import (
    HardwareSpec,
    ModelSpec,
    Precision,
    QuantFormat,
    get_hardware,
    get_model,
    get_precision,
)
from ..errors import CatalogError
from ..roofline import ForwardCostModel, attention_area

PARAMS = ("eta_compute", "eta_memory", "per_layer_overhead_s", "fixed_overhead_s")
# Optimiser units: overheads in milliseconds keep all four unknowns of order one.
_UNITS = np.array([1.0, 1.0, 1e-3, 1e-3])
_LOWER = np.array([1e-3, 1e-3, 0.0, 0.0])
_UPPER = np.array([1.5, 1.5, 1e3, 1e4])


def precision_for(dtype: str) -> Precision:
    """Weights/activations/KV format of a benchmark run in ``dtype``.

    The catalog has no float32 format (serving never uses it); a float32 CPU run gets a
    32-bit format built here, priced against the peak stored under the hardware's bf16 key.
    """
    if dtype in ("float32", "fp32"):
        f = QuantFormat(name="fp32", bits=32, scale_bits_per_element=0.0, compute_dtype="bf16",
                        weight_only=False, dequant_overhead=0.0,
                        source="IEEE 754 binary32 (calibration run dtype)")
        return Precision(weights=f, activations=f, kv_cache=f)
    return get_precision({"weights": dtype, "activations": dtype, "kv_cache": dtype},
                         "calibration dtype")


def calibration_of(x: Sequence[float], name: str = "fit") -> Calibration:
    """A Calibration from the four fitted numbers (SI units)."""
    vals = dict(zip(PARAMS, (float(v) for v in x), strict=True))
    return Calibration(name=name, calibrated=True, source="fit", **vals)


@dataclass
class Case:
    """Passes of one (model, hardware, tp, precision): priced by one ForwardCostModel."""

    model: ModelSpec
    hardware: HardwareSpec
    tp: int
    precision: Precision
    tokens: np.ndarray
    qc: np.ndarray
    ctx: np.ndarray
    logits: np.ndarray
    index: np.ndarray  # rows of the measurement table

    def predict(self, cal: Calibration) -> np.ndarray:
        cm = ForwardCostModel(self.model, self.hardware, self.tp, self.precision, cal)
        return np.asarray(cm.time(self.tokens, self.qc, self.ctx, self.logits), dtype=float)


def predict(cases: Sequence[Case], cal: Calibration, n: int) -> np.ndarray:
    out = np.empty(n)
    for c in cases:
        out[c.index] = c.predict(cal)
    return out


@dataclass
class FitResult:
    """Fitted values, their errors (train and held out) and every prediction."""

    calibration: Calibration
    table: pd.DataFrame  # inputs plus measured_s, predicted_s, ape, split
    train: dict[str, float]
    holdout: dict[str, float]
    optimizer: dict[str, Any] = field(default_factory=dict)

    @property
    def values(self) -> dict[str, float]:
        return {k: float(getattr(self.calibration, k)) for k in PARAMS}

    def quality(self) -> dict[str, Any]:
        """The ``fit_quality`` section of a profile (percentages)."""
        return {"residual": "relative error (predicted / measured - 1)",
                "train": self.train, "holdout": self.holdout, **self.optimizer}


def error_summary(ape: np.ndarray) -> dict[str, float]:
    """Median / mean / worst absolute percentage error (and the count)."""
    if ape.size == 0:
        return {"points": 0}
    return {"points": int(ape.size), "median_ape_pct": round(float(np.median(ape)), 2),
            "mean_ape_pct": round(float(np.mean(ape)), 2),
            "max_ape_pct": round(float(np.max(ape)), 2)}


def holdout_mask(n: int, fraction: float, seed: int) -> np.ndarray:
    """True for rows held out of the fit (a seeded random share, at least one if any)."""
    mask = np.zeros(n, dtype=bool)
    k = int(round(n * fraction))
    if fraction > 0 and n >= 8:
        mask[np.random.default_rng(seed).choice(n, size=max(k, 1), replace=False)] = True
    return mask


def fit_cases(cases: Sequence[Case], measured: np.ndarray, holdout: np.ndarray,
              table: pd.DataFrame, x0: Sequence[float] | None = None) -> FitResult:
    """Least squares of the relative error on the rows not held out."""
    n = measured.size
    train = ~holdout
    if train.sum() < len(PARAMS):
        raise CatalogError(f"calibration fit: need at least {len(PARAMS)} measured points to fit "
                           f"{len(PARAMS)} parameters, got {int(train.sum())}")

    def resid(z: np.ndarray) -> np.ndarray:
        pred = predict(cases, calibration_of(z * _UNITS), n)
        return (pred[train] / measured[train]) - 1.0

    starts = [np.asarray(x0, dtype=float) / _UNITS] if x0 is not None else []
    for ec, em in ((0.5, 0.5), (0.2, 0.8), (0.8, 0.2), (0.1, 0.1)):
        for frac in (0.1, 0.5):
            # Start the overheads at a share of the smallest measured pass.
            small = float(measured.min()) * frac
            starts.append(np.array([ec, em, 0.5 * small / 60 * 1e3, 0.5 * small * 1e3]))
    best = None
    for z0 in starts:
        z0 = np.clip(z0, _LOWER + 1e-9, _UPPER - 1e-9)
        sol = least_squares(resid, z0, bounds=(_LOWER, _UPPER), x_scale="jac", method="trf")
        if best is None or sol.cost < best.cost:
            best = sol
    assert best is not None
    cal = calibration_of(best.x * _UNITS)
    pred = predict(cases, cal, n)
    ape = np.abs(pred / measured - 1.0) * 100.0
    out = table.copy()
    out["measured_s"] = measured
    out["predicted_s"] = pred
    out["ape_pct"] = ape
    out["split"] = np.where(holdout, "holdout", "train")
    return FitResult(
        calibration=cal, table=out, train=error_summary(ape[train]),
        holdout=error_summary(ape[holdout]),
        optimizer={"optimizer": "scipy.optimize.least_squares (trf, bounded)",
                   "starts": len(starts), "cost": float(best.cost), "status": int(best.status)},
    )


def diagnose_attention(result: FitResult, cases: Sequence[Case]) -> dict[str, Any]:
    """How much a separate attention efficiency would help (a diagnostic, not the profile).

    Refits with attention's compute and memory time divided by its own efficiency instead
    of eta_compute / eta_memory. On CPUs the small attention matmuls and softmax run far
    below the large-matmul ceiling, which one shared eta cannot express; this measures it.
    Uses ForwardCostModel's per-group times, so it is skipped if those change shape.
    """
    measured = result.table["measured_s"].to_numpy(float)
    train = (result.table["split"] == "train").to_numpy()
    one = calibration_of([1.0, 1.0, 0.0, 0.0])
    try:
        parts = []
        for c in cases:
            cm = ForwardCostModel(c.model, c.hardware, c.tp, c.precision, one)
            parts.append((c.index, c.model.n_layers,
                          cm._parts(c.tokens, c.qc, c.ctx, c.logits)))  # noqa: SLF001
    except (AttributeError, TypeError, ValueError):
        return {"skipped": "ForwardCostModel internals changed"}

    def pred(z: np.ndarray) -> np.ndarray:
        ec, em, ea, o, f = z
        out = np.empty(measured.size)
        for idx, n_layers, (cl, ml, ca, ma, ew) in parts:
            out[idx] = (np.maximum(cl / ec, ml / em) + np.maximum(ca / ea, ma / (em * ea))
                        + ew / em + (o * n_layers + f) * 1e-3)
        return out

    x = result.values
    z0 = np.array([x["eta_compute"], x["eta_memory"], x["eta_compute"],
                   x["per_layer_overhead_s"] * 1e3, x["fixed_overhead_s"] * 1e3])
    lo, hi = np.array([1e-3] * 3 + [0.0, 0.0]), np.array([1.5] * 3 + [1e3, 1e4])
    sol = least_squares(lambda z: pred(z)[train] / measured[train] - 1.0,
                        np.clip(z0, lo + 1e-9, hi - 1e-9), bounds=(lo, hi), x_scale="jac")
    ape = np.abs(pred(sol.x) / measured - 1.0) * 100.0
    return {"model": "roofline with a separate attention efficiency (5 parameters)",
            "attention_efficiency_vs_eta_compute": round(float(sol.x[2] / sol.x[0]), 4),
            "train": error_summary(ape[train]), "holdout": error_summary(ape[~train])}


# ---------------------------------------------------------------- the torch grid


def fit_grid(grid: pd.DataFrame, model: ModelSpec, hardware: HardwareSpec, precision: Precision,
             holdout: float = 0.25, seed: int = 0) -> FitResult:
    """Fit to ``bench.run_grid`` output (one depth per ``n_layers`` value)."""
    from dataclasses import replace

    df = grid.reset_index(drop=True)
    cases = []
    for layers, rows in df.groupby("n_layers"):
        spec = replace(model, n_layers=int(layers))
        idx = rows.index.to_numpy()
        cases.append(Case(spec, hardware, 1, precision, rows["tokens"].to_numpy(float),
                          rows["qc"].to_numpy(float), rows["ctx_sum"].to_numpy(float),
                          rows["logits"].to_numpy(float), idx))
    mask = holdout_mask(len(df), holdout, seed)
    result = fit_cases(cases, df["median_s"].to_numpy(float), mask, df)
    result.optimizer["diagnostic"] = diagnose_attention(result, cases)
    return result


# ---------------------------------------------------------------- users' own measurements

CSV_COLUMNS = ("model", "hardware", "tensor_parallel", "batch_size", "prompt_len", "prefill_ms",
               "decode_ms_per_token")
_OPTIONAL = ("output_len", "weights", "activations", "kv_cache")


def _positive(path: str, line: int, col: str, value: Any, integer: bool = False,
              allow_blank: bool = False) -> float | None:
    if allow_blank and (value is None or (isinstance(value, float) and math.isnan(value))
                        or (isinstance(value, str) and not value.strip())):
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = math.nan
    if not math.isfinite(v) or v <= 0 or (integer and v != int(v)):
        kind = "a positive integer" if integer else "a positive number"
        raise CatalogError(f"{path}: line {line}: {col}: expected {kind}, got {value!r}")
    return v


def read_measurements(path: str | Path) -> pd.DataFrame:
    """Validated rows of a measurement CSV (one-line CatalogError naming the line otherwise)."""
    p = Path(path)
    if not p.is_file():
        raise CatalogError(f"{p}: no such measurement file")
    try:
        df = pd.read_csv(p, dtype=str, keep_default_na=False, skipinitialspace=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise CatalogError(f"{p}: not a readable CSV ({str(exc).splitlines()[0]})") from None
    df.columns = [c.strip() for c in df.columns]
    missing = [c for c in CSV_COLUMNS if c not in df.columns]
    if missing:
        raise CatalogError(f"{p}: missing column {missing[0]!r} (expected columns: "
                           f"{', '.join(CSV_COLUMNS)}; optional: {', '.join(_OPTIONAL)})")
    unknown = [c for c in df.columns if c not in CSV_COLUMNS + _OPTIONAL]
    if unknown:
        raise CatalogError(f"{p}: unknown column {unknown[0]!r} (expected columns: "
                           f"{', '.join(CSV_COLUMNS)}; optional: {', '.join(_OPTIONAL)})")
    if df.empty:
        raise CatalogError(f"{p}: no measurement rows")
    rows = []
    for i, r in df.iterrows():
        line = int(i) + 2  # header is line 1
        row = {"model": r["model"].strip(), "hardware": r["hardware"].strip()}
        for col in ("tensor_parallel", "batch_size", "prompt_len"):
            row[col] = int(_positive(str(p), line, col, r[col], integer=True))
        for col in ("prefill_ms", "decode_ms_per_token"):
            row[col] = _positive(str(p), line, col, r[col], allow_blank=True)
        if row["prefill_ms"] is None and row["decode_ms_per_token"] is None:
            raise CatalogError(f"{p}: line {line}: expected prefill_ms or decode_ms_per_token, "
                               "both are blank")
        out_len = r.get("output_len", "")
        row["output_len"] = _positive(str(p), line, "output_len", out_len, integer=True,
                                      allow_blank=True) or 0
        for col in ("weights", "activations", "kv_cache"):
            row[col] = (r.get(col, "") or "bf16").strip()
        rows.append(row)
    return pd.DataFrame(rows)


def fit_from_measurements(path: str | Path, holdout: float = 0.0, seed: int = 0,
                          name: str | None = None) -> tuple[FitResult, dict[str, Any]]:
    """Fit the four numbers to a user's engine measurements; returns the fit and the profile.

    Each row gives up to two passes: a prefill of ``batch_size`` prompts of ``prompt_len``
    tokens (one logit per sequence), and a decode step of ``batch_size`` sequences of one
    token at context ``prompt_len + output_len / 2`` (``output_len`` optional, else 0).
    ``model`` and ``hardware`` are catalog names; one hardware per file.
    """
    p = Path(path)
    df = read_measurements(p)
    hw_names = sorted(set(df["hardware"]))
    if len(hw_names) != 1:
        raise CatalogError(f"{p}: hardware: expected one accelerator per file (a profile is "
                           f"per device), got {', '.join(hw_names)}")
    hw = get_hardware(hw_names[0], f"{p}: hardware")
    passes = []
    for i, r in df.iterrows():
        b, plen = r["batch_size"], r["prompt_len"]
        if r["prefill_ms"] is not None:
            passes.append({"row": i, "phase": "prefill", "tokens": b * plen,
                           "qc": b * attention_area(plen, 0), "ctx_sum": 0.0, "logits": float(b),
                           "measured_s": r["prefill_ms"] / 1e3})
        if r["decode_ms_per_token"] is not None:
            c = plen + r["output_len"] / 2
            passes.append({"row": i, "phase": "decode", "tokens": float(b), "qc": b * (c + 1),
                           "ctx_sum": b * c, "logits": float(b),
                           "measured_s": r["decode_ms_per_token"] / 1e3})
    pt = pd.DataFrame(passes)
    for col in ("model", "tensor_parallel", "batch_size", "prompt_len", "weights", "activations",
                "kv_cache"):
        pt[col] = df.loc[pt["row"], col].to_numpy()
    cases = []
    keys = ["model", "tensor_parallel", "weights", "activations", "kv_cache"]
    for key, rows in pt.groupby(keys):
        model_name, tp, w, a, kv = key
        model = get_model(model_name, f"{p}: model")
        prec = get_precision({"weights": w, "activations": a, "kv_cache": kv}, f"{p}: precision")
        cases.append(Case(model, hw, int(tp), prec, rows["tokens"].to_numpy(float),
                          rows["qc"].to_numpy(float), rows["ctx_sum"].to_numpy(float),
                          rows["logits"].to_numpy(float), rows.index.to_numpy()))
    if len(pt) < len(PARAMS):
        raise CatalogError(f"{p}: need at least {len(PARAMS)} measured times (prefill or decode "
                           f"cells) to fit {len(PARAMS)} parameters, got {len(pt)}")
    mask = holdout_mask(len(pt), holdout, seed)
    result = fit_cases(cases, pt["measured_s"].to_numpy(float), mask,
                       pt.drop(columns=["measured_s"]))
    profile = profile_dict(
        name=name or f"{hw.name}-measured", hardware=hw.name, result=result,
        source=f"specsim calibrate --from-measurements {p.name}",
        extra={"measurements_file": str(p), "models": sorted(set(df["model"])),
               "passes": {"prefill": int((pt["phase"] == "prefill").sum()),
                          "decode": int((pt["phase"] == "decode").sum())}})
    return result, profile


# ---------------------------------------------------------------- the profile


def profile_dict(name: str, hardware: str, result: FitResult, source: str,
                 extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The YAML mapping ``cost_models.calibration.load_profile`` reads (plus provenance)."""
    fitted = {k: float(f"{v:.6g}") for k, v in result.values.items()}
    prof: dict[str, Any] = {
        "name": name, "hardware": hardware, "source": source,
        "date": _dt.date.today().isoformat(), "fitted": fitted,
        "fit_quality": result.quality(),
    }
    prof.update(extra or {})
    return prof


def write_profile(profile: dict[str, Any], path: str | Path) -> Path:
    """Write the profile YAML (creating folders); returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(yaml.safe_dump(profile, sort_keys=False, width=100))
    return p


def hardware_from_profile(details: dict[str, Any], where: str = "profile") -> HardwareSpec:
    """The measured device of a bench profile (its ``hardware_spec``), as a HardwareSpec.

    Lets a scenario price the very machine a CPU profile was fitted on.
    """
    from ..catalog import hardware_from_dict

    entry = details.get("hardware_spec")
    if not isinstance(entry, dict):
        raise CatalogError(f"{where}: no hardware_spec section (only bench profiles have one)")
    entry = dict(entry)
    name = str(entry.pop("name", details.get("hardware") or "measured-device"))
    return hardware_from_dict(name, entry, f"{where}: hardware_spec")


def model_spec_from_shape(shape: dict[str, Any], name: str = "calibration-model") -> ModelSpec:
    """The ModelSpec of a bench profile's ``model_shape`` (no torch needed)."""
    from ..catalog import model_from_dict

    keys = ("n_layers", "hidden_size", "n_heads", "n_kv_heads", "head_dim", "intermediate_size",
            "vocab_size", "tied_embeddings", "max_context")
    entry = {k: shape[k] for k in keys if k in shape}
    entry["source"] = "specsim calibration model shape"
    return model_from_dict(name, entry, "model_shape")
