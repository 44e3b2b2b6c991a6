"""Fit the roofline's calibration numbers to measured passes, and write the profile.

The parameters are eta_compute, eta_memory, per_layer_overhead_s and fixed_overhead_s of
``ForwardCostModel``, and for the torch grid (``fit_grid``) attention's own compute
efficiency ``eta_attn_prefill`` when the grid has attention-heavy points
(``fit_with_attention`` says when). Residuals are relative errors (a 1 ms decode step and a
200 ms prefill matter equally), minimised with ``scipy.optimize.least_squares`` from a few
starting points because the roofline's max(compute, memory) makes the loss piecewise. Part
of the points is held out of the fit and the profile reports the error on them: that, not
the training error, says how far to trust the profile.

This module needs numpy, scipy, pandas and yaml only (no torch), so users can fit their own
engine's measurements (``fit_from_measurements``) without the calibrate extra.
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from scipy.optimize import least_squares

from specsim import values

from ..calibration import Calibration
from ..catalog import (
    HardwareSpec,
    ModelSpec,
    Precision,
    QuantFormat,
    get_hardware,
    get_model,
    get_precision,
    get_quant,
)
from ..errors import CatalogError
from ..roofline import ForwardCostModel, attention_area

PARAMS = ("eta_compute", "eta_memory", "per_layer_overhead_s", "fixed_overhead_s")
# Attention's compute-side efficiency (FLOPs over the causal area vs the bf16 peak): fitted as a
# fifth parameter by ``fit_grid`` when the grid has attention-heavy points (``fit_with_attention``).
ATTENTION = "eta_attn_prefill"
# Optimiser unit, lower and upper bound of each parameter: overheads in milliseconds keep the
# unknowns of order one.
_BOUNDS = {"eta_compute": (1.0, 1e-3, 1.5), "eta_memory": (1.0, 1e-3, 1.5),
           "per_layer_overhead_s": (1e-3, 0.0, 1e3), "fixed_overhead_s": (1e-3, 0.0, 1e4),
           ATTENTION: (1.0, 1e-3, 1.5)}
# Attention-heavy: at the four-parameter fit, pricing attention's FLOPs at ATTN_PROBE x
# eta_compute (CPU attention measured ~0.25x) slows the pass by at least ATTN_HEAVY_SHARE ...
ATTN_PROBE = 0.25
ATTN_HEAVY_SHARE = 0.10
# ... on at least this many training points (and this share of them).
ATTN_HEAVY_POINTS = 3
ATTN_HEAVY_FRACTION = 0.10


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


def calibration_of(x: Sequence[float], name: str = "fit",
                   params: Sequence[str] = PARAMS) -> Calibration:
    """A Calibration from fitted numbers (SI units): the four of ``PARAMS``, then any extra
    parameters named in ``params`` (the others keep their neutral values)."""
    vals = dict(zip(params, (float(v) for v in x), strict=True))
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
    params: tuple[str, ...] = PARAMS  # the fitted parameters (the profile's ``fitted:``)

    @property
    def values(self) -> dict[str, float]:
        return {k: float(getattr(self.calibration, k)) for k in self.params}

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


def _default_starts(measured: np.ndarray) -> list[np.ndarray]:
    """Four-parameter starting points (optimiser units): efficiency pairs x overhead shares."""
    starts = []
    for ec, em in ((0.5, 0.5), (0.2, 0.8), (0.8, 0.2), (0.1, 0.1)):
        for frac in (0.1, 0.5):
            # Start the overheads at a share of the smallest measured pass.
            small = float(measured.min()) * frac
            starts.append(np.array([ec, em, 0.5 * small / 60 * 1e3, 0.5 * small * 1e3]))
    return starts


def fit_cases(cases: Sequence[Case], measured: np.ndarray, holdout: np.ndarray,
              table: pd.DataFrame, x0: Sequence[float] | None = None,
              params: Sequence[str] = PARAMS,
              starts: Sequence[Sequence[float]] | None = None) -> FitResult:
    """Least squares of the relative error on the rows not held out.

    ``params``: the four of ``PARAMS`` then optional extras (``ATTENTION``). ``starts``
    (SI units, one value per parameter) replace the default starting points, which exist
    for the four only; ``x0`` adds one more start.
    """
    params = tuple(params)
    if params[:len(PARAMS)] != PARAMS:
        raise ValueError(f"params must start with {PARAMS}, got {params}")
    units = np.array([_BOUNDS[k][0] for k in params])
    lower = np.array([_BOUNDS[k][1] for k in params])
    upper = np.array([_BOUNDS[k][2] for k in params])
    n = measured.size
    train = ~holdout
    if train.sum() < len(params):
        raise CatalogError(f"calibration fit: need at least {len(params)} measured points to fit "
                           f"{len(params)} parameters, got {int(train.sum())}")

    def resid(z: np.ndarray) -> np.ndarray:
        pred = predict(cases, calibration_of(z * units, params=params), n)
        return (pred[train] / measured[train]) - 1.0

    if starts is None:
        if len(params) != len(PARAMS):
            raise ValueError("starting points are needed to fit parameters beyond the four")
        z_starts = _default_starts(measured)
    else:
        z_starts = [np.asarray(x, dtype=float) / units for x in starts]
    if x0 is not None:
        z_starts.insert(0, np.asarray(x0, dtype=float) / units)
    best = None
    for z0 in z_starts:
        z0 = np.clip(z0, lower + 1e-9, upper - 1e-9)
        sol = least_squares(resid, z0, bounds=(lower, upper), x_scale="jac", method="trf")
        if best is None or sol.cost < best.cost:
            best = sol
    assert best is not None
    cal = calibration_of(best.x * units, params=params)
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
                   "starts": len(z_starts), "cost": float(best.cost), "status": int(best.status)},
        params=params,
    )


def attention_sensitivity(result: FitResult, cases: Sequence[Case],
                          factor: float = ATTN_PROBE) -> np.ndarray:
    """Relative change of each point's predicted time when attention's FLOPs are priced at
    ``factor`` x eta_compute instead of eta_compute, at ``result``'s calibration.

    Zero where attention is bound by its KV reads (or negligible) even then: there its
    compute efficiency cannot be told from the data. Public API only (no internals).
    """
    from dataclasses import replace

    n = len(result.table)
    cal = result.calibration
    base = predict(cases, cal, n)
    probe = predict(cases, replace(cal, eta_attn_prefill=cal.eta_compute * factor), n)
    return np.maximum(probe / base - 1.0, 0.0)


def _relative_rss(result: FitResult) -> tuple[float, int]:
    t = result.table[result.table["split"] == "train"]
    r = t["predicted_s"].to_numpy(float) / t["measured_s"].to_numpy(float) - 1.0
    return float(np.sum(r * r)), int(r.size)


def fit_with_attention(cases: Sequence[Case], measured: np.ndarray, holdout: np.ndarray,
                       table: pd.DataFrame) -> FitResult:
    """The four-parameter fit, then attention's own efficiency as a fifth when it is called for.

    Fitted when (1) the grid is attention-heavy: at the four-parameter fit, pricing
    attention's FLOPs at ``ATTN_PROBE`` x eta_compute slows the pass by at least
    ``ATTN_HEAVY_SHARE`` on at least ``ATTN_HEAVY_POINTS`` training points (and
    ``ATTN_HEAVY_FRACTION`` of them), else the parameter is not identified (attention
    negligible, or bound by its KV reads, as verification passes on a GPU are); and
    (2) the fifth parameter pays for itself on the training points (Akaike: n ln(RSS4 /
    RSS5) > 2). Held-out points play no part in the choice, so their error stays honest.
    Otherwise attention keeps eta_compute (the profile has no eta_attn_prefill). The
    ``attention`` section of fit_quality says which happened and what the other fit gave.
    """
    four = fit_cases(cases, measured, holdout, table)
    share = attention_sensitivity(four, cases)
    train = ~holdout
    heavy = int((share[train] >= ATTN_HEAVY_SHARE).sum())
    need = max(ATTN_HEAVY_POINTS, int(np.ceil(ATTN_HEAVY_FRACTION * int(train.sum()))))
    info: dict[str, Any] = {
        "parameter": ATTENTION,
        "what": "attention FLOPs over the causal area vs the bf16 peak, its own efficiency "
                "instead of eta_compute (CPU attention runs far below the matmul ceiling)",
        "attention_heavy_points": heavy, "needed": need,
        "criterion": f"at the 4-parameter fit, attention FLOPs priced at {ATTN_PROBE:g} x "
                     f"eta_compute slow >= {need} training points by >= {ATTN_HEAVY_SHARE:.0%}; "
                     "and Akaike n ln(RSS4/RSS5) > 2 on the training points"}
    if heavy < need:
        four.optimizer["attention"] = info | {
            "fitted": False, "reason": f"only {heavy} attention-heavy training points "
                                       f"(need {need}): not identified, attention uses eta_compute"}
        return four
    x = four.values
    base = [x[k] for k in PARAMS]
    starts = [base + [x["eta_compute"] * f] for f in (1.0, 0.3, 0.1)]
    five = fit_cases(cases, measured, holdout, table, params=PARAMS + (ATTENTION,), starts=starts)
    rss4, n = _relative_rss(four)
    rss5, _ = _relative_rss(five)
    gain = n * float(np.log(rss4 / rss5)) if rss5 > 0 else float("inf")
    other = {"values": {k: float(f"{v:.6g}") for k, v in four.values.items()},
             "train": four.train, "holdout": four.holdout}
    if gain <= 2.0:
        four.optimizer["attention"] = info | {
            "fitted": False, "akaike_gain": round(gain, 3),
            "reason": "a separate attention efficiency does not explain the training points "
                      "better (Akaike gain <= 2): attention uses eta_compute",
            "five_parameter_fit": {"values": {k: float(f"{v:.6g}") for k, v in
                                              five.values.items()},
                                   "train": five.train, "holdout": five.holdout}}
        return four
    five.optimizer["attention"] = info | {
        "fitted": True, "akaike_gain": round(gain, 3),
        "ratio_to_eta_compute": round(five.values[ATTENTION] / five.values["eta_compute"], 4),
        "four_parameter_fit": other}
    return five


# ---------------------------------------------------------------- the torch grid


def fit_grid(grid: pd.DataFrame, model: ModelSpec, hardware: HardwareSpec, precision: Precision,
             holdout: float = 0.25, seed: int = 0, attention: bool = True) -> FitResult:
    """Fit to ``bench.run_grid`` output (one depth per ``n_layers`` value).

    ``attention``: also consider attention's own efficiency (``fit_with_attention``).
    """
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
    measured = df["median_s"].to_numpy(float)
    if attention:
        return fit_with_attention(cases, measured, mask, df)
    return fit_cases(cases, measured, mask, df)


# ---------------------------------------------------------------- users' own measurements

CSV_COLUMNS = ("model", "hardware", "tensor_parallel", "batch_size", "prompt_len", "prefill_ms",
               "decode_ms_per_token")
_OPTIONAL = ("output_len", "weights", "activations", "kv_cache")
_MAX_INT = 2 ** 53  # integers above this are not exact as floats: surely a typo


def _columns_hint() -> str:
    return f"expected columns: {', '.join(CSV_COLUMNS)}; optional: {', '.join(_OPTIONAL)}"


def _number(path: str, line: int, col: str, value: str, *, integer: bool = False,
            zero: bool = False, blank_ok: bool = False) -> float | None:
    """A cell as a positive (``zero``: non-negative) finite number by the shared rule
    (``specsim.values.number``), or None when blank and ``blank_ok``; otherwise a one-line
    CatalogError naming the file, line and column."""
    text = value.strip()
    if not text and blank_ok:
        return None
    try:
        if not text:
            word = "an integer" if integer else "a number"
            raise values.ValueRuleError(f"expected {word}, got a blank cell")
        try:
            cell: Any = float(text)
        except ValueError:
            cell = value  # quoted as written: expected a number, got '2x'
        if isinstance(cell, float) and cell.is_integer() and abs(cell) <= _MAX_INT:
            cell = int(cell)
        v = values.number(cell, integer=integer, lo=0, exclusive_lo=not zero)
    except values.ValueRuleError as exc:
        hint = ""
        if blank_ok and text.lower() in ("nan", "na", "n/a", "null", "none", "-"):
            hint = " (leave the cell blank to skip it)"
        raise CatalogError(f"{path}: line {line}: {col}: {exc}{hint}") from None
    return float(v)


def _positive(path: str, line: int, col: str, value: Any, integer: bool = False,
              allow_blank: bool = False) -> float | None:
    """``_number`` for any cell value (kept for callers that pass non-strings)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        value = ""
    return _number(path, line, col, str(value), integer=integer, blank_ok=allow_blank)


def _records(p: Path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """The header and the (line, cells) records of a CSV file; blank records dropped.

    UTF-8 with or without a byte-order mark; any line ending. A record's line is the line it
    starts on. Records whose cells are all blank (an empty line, a line of spaces, a row of
    only commas as spreadsheets export) are skipped.
    """
    from specsim import safe_read

    try:  # under the size cap
        text = safe_read.read_bytes(p, "a measurement CSV").decode("utf-8-sig")
    except OSError as exc:
        raise CatalogError(f"{p}: cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise CatalogError(f"{p}: not a UTF-8 text file (byte {exc.start}: "
                           f"{exc.reason}); save the CSV as UTF-8") from None
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    records: list[tuple[int, list[str]]] = []
    start = 1
    try:
        for cells in reader:
            if any(c.strip() for c in cells):
                records.append((start, cells))
            start = reader.line_num + 1
    except csv.Error as exc:
        raise CatalogError(f"{p}: line {start}: not valid CSV ({exc})") from None
    if not records:
        raise CatalogError(f"{p}: empty file: expected a header line, then one row per "
                           f"measurement ({_columns_hint()})")
    return [c.strip() for c in records[0][1]], records[1:]


def read_measurements(path: str | Path) -> pd.DataFrame:
    """Validated rows of a measurement CSV (one-line CatalogError naming the line otherwise).

    Every cell is stripped of surrounding spaces. Skipped, by design: blank lines and rows
    whose cells are all blank; a blank ``prefill_ms`` or ``decode_ms_per_token`` (the row
    gives only the other pass); blank optional cells (``output_len`` 0, formats bf16);
    columns with no header name whose cells are all blank (a spreadsheet's trailing commas).
    Anything else that is not what a column expects is an error naming the file, the line
    and the column.
    """
    p = Path(path)
    if p.is_dir():
        raise CatalogError(f"{p}: is a directory, not a measurement file")
    if not p.is_file():
        raise CatalogError(f"{p}: no such measurement file")
    header, records = _records(p)
    if len(header) == 1 and header[0] and (";" in header[0] or "\t" in header[0]):
        sep = "';'" if ";" in header[0] else "tabs"
        raise CatalogError(f"{p}: line 1: the header is separated by {sep}; expected "
                           f"comma-separated columns ({_columns_hint()})")
    named = [c for c in header if c]
    missing = [c for c in CSV_COLUMNS if c not in header]
    if missing:
        raise CatalogError(f"{p}: missing column {missing[0]!r} (the first line must be the "
                           f"header; {_columns_hint()})")
    dup = next((c for c in named if named.count(c) > 1), None)
    if dup:
        raise CatalogError(f"{p}: line 1: column {dup!r} appears twice")
    unknown = [c for c in named if c not in CSV_COLUMNS + _OPTIONAL]
    if unknown:
        raise CatalogError(f"{p}: unknown column {unknown[0]!r} ({_columns_hint()})")
    if not records:
        raise CatalogError(f"{p}: no measurement rows (only a header)")
    where = str(p)
    rows = []
    known: set[tuple[str, str]] = set()
    for line, cells in records:
        if len(cells) < len(header):
            raise CatalogError(
                f"{where}: line {line}: {header[len(cells)] or f'column {len(cells) + 1}'}: "
                f"missing (the row has {len(cells)} cells, the header {len(header)}; a blank "
                "cell still needs its comma)")
        extra = [c for c in cells[len(header):] if c.strip()]
        if extra:
            raise CatalogError(f"{where}: line {line}: {len(cells)} cells, but the header has "
                               f"{len(header)} columns (extra value {extra[0].strip()!r})")
        cell = {}
        for i, name in enumerate(header):
            if name:
                cell[name] = cells[i]
            elif cells[i].strip():
                raise CatalogError(f"{where}: line {line}: column {i + 1}: value "
                                   f"{cells[i].strip()!r} under a column with no header name")
        row: dict[str, Any] = {"line": line}
        for col, what in (("model", "model"), ("hardware", "accelerator")):
            text = cell[col].strip()
            if not text:
                raise CatalogError(f"{where}: line {line}: {col}: expected a catalog {what} "
                                   "name, got a blank cell")
            row[col] = text
        if ("model", row["model"]) not in known:
            get_model(row["model"], f"{where}: line {line}: model")
            known.add(("model", row["model"]))
        if ("hardware", row["hardware"]) not in known:
            get_hardware(row["hardware"], f"{where}: line {line}: hardware")
            known.add(("hardware", row["hardware"]))
        for col in ("tensor_parallel", "batch_size", "prompt_len"):
            row[col] = int(_number(where, line, col, cell[col], integer=True))
        for col in ("prefill_ms", "decode_ms_per_token"):
            v = _number(where, line, col, cell[col], blank_ok=True)
            row[col] = math.nan if v is None else v
        if math.isnan(row["prefill_ms"]) and math.isnan(row["decode_ms_per_token"]):
            raise CatalogError(f"{where}: line {line}: expected prefill_ms or "
                               "decode_ms_per_token, both are blank")
        out_len = _number(where, line, "output_len", cell.get("output_len", ""), integer=True,
                          zero=True, blank_ok=True)
        row["output_len"] = int(out_len or 0)
        for col in ("weights", "activations", "kv_cache"):
            row[col] = cell.get(col, "").strip() or "bf16"
            get_quant(row[col], f"{where}: line {line}: {col}")
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
        if not math.isnan(r["prefill_ms"]):  # a blank cell: this row has no prefill pass
            passes.append({"row": i, "phase": "prefill", "tokens": b * plen,
                           "qc": b * attention_area(plen, 0), "ctx_sum": 0.0, "logits": float(b),
                           "measured_s": r["prefill_ms"] / 1e3})
        if not math.isnan(r["decode_ms_per_token"]):  # ... no decode pass
            c = plen + r["output_len"] / 2
            passes.append({"row": i, "phase": "decode", "tokens": float(b), "qc": b * (c + 1),
                           "ctx_sum": b * c, "logits": float(b),
                           "measured_s": r["decode_ms_per_token"] / 1e3})
    pt = pd.DataFrame(passes)
    for col in ("line", "model", "tensor_parallel", "batch_size", "prompt_len", "weights",
                "activations", "kv_cache"):
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
               "rows": len(df), "rows_with_one_pass": int(
                   df["prefill_ms"].isna().sum() + df["decode_ms_per_token"].isna().sum()),
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


def write_profile(profile: dict[str, Any], path: str | Path, force: bool = False) -> Path:
    """Write the profile YAML (creating folders) by ``specsim.outputs``' rules: atomic, an
    existing file only with ``force``; returns the path."""
    from specsim.outputs import write_file

    return write_file(path, yaml.safe_dump(profile, sort_keys=False, width=100), force)


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
