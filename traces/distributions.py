"""Distributions for token lengths, turns per session and think times.

A scenario writes ``{distribution: lognormal, median: 1000, sigma: 1.0, min: 1, max: 8192}``
or just a number (a fixed value). Sampling is vectorised; integers are rounded, then
clipped to ``[min, max]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specsim.traces.errors import TraceError, show
from specsim.traces.spec import Section, is_finite, is_real

KINDS = ("fixed", "uniform", "lognormal", "exponential", "geometric", "empirical")
_EMPIRICAL_COLUMNS = {"prompt": "prompt_tokens", "output": "output_tokens"}
#: Integer draws are clipped here (2^53): larger counts are not exact in float64.
MAX_INT = float(2**53)


@dataclass(frozen=True)
class Distribution:
    """A parsed distribution: ``kind``, its parameters, and clip bounds."""

    kind: str
    params: dict[str, Any] = field(default_factory=dict)
    low: float = 0.0
    high: float = float("inf")
    integer: bool = True

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Draw ``n`` values (int64 when ``integer``, float64 otherwise)."""
        p = self.params
        if self.kind == "fixed":
            x = np.full(n, float(p["value"]))
        elif self.kind == "uniform":
            x = rng.uniform(p["low"], p["high"], n)
        elif self.kind == "lognormal":
            x = rng.lognormal(p["mu"], p["sigma"], n)
        elif self.kind == "exponential":
            x = rng.exponential(p["mean"], n)
        elif self.kind == "geometric":
            x = rng.geometric(1.0 / p["mean"], n).astype(np.float64)
        elif "quantiles" in p:
            q = p["quantiles"]
            x = np.interp(rng.uniform(0.0, len(q) - 1, n), np.arange(len(q)), q)
        else:
            x = rng.choice(p["values"], n).astype(np.float64)
        if self.integer:
            # Rounded, and kept where int64 (and float64) still hold integers exactly.
            x = np.clip(np.rint(x), self.low, min(self.high, MAX_INT))
            return x.astype(np.int64)
        return np.clip(x, self.low, self.high)

    def mean(self) -> float:
        """The mean after clipping and rounding (estimated from fixed-seed draws)."""
        if self.kind == "fixed":
            return float(self.sample(np.random.default_rng(0), 1)[0])
        return float(self.sample(np.random.default_rng(0), 20_000).mean())


def _lognormal(sec: Section) -> dict[str, float]:
    # (exp(50) is already ~5e21: a larger sigma is a typo, and its sigma^2 overflows)
    sigma = sec.number("sigma", required=True, minimum=0.0, maximum=50.0)
    has_mean, has_median = sec.has("mean"), sec.has("median")
    if has_mean == has_median:
        raise TraceError(f"{sec.path}: lognormal needs exactly one of mean or median (and sigma)")
    if has_median:
        mu = float(np.log(sec.number("median", positive=True)))
    else:
        mu = float(np.log(sec.number("mean", positive=True)) - sigma**2 / 2)
    return {"mu": mu, "sigma": sigma}


def _empirical(sec: Section, base_dir: Path, integer: bool) -> dict[str, Any]:
    sources = [k for k in ("trace", "values", "quantiles") if sec.has(k)]
    if len(sources) != 1:
        raise TraceError(f"{sec.path}: empirical needs exactly one of trace, values or quantiles")
    source = sources[0]
    if source == "trace":
        from specsim.traces.loaders import FORMATS, load_trace

        path = sec.file("trace", base_dir)
        column = sec.string("column", choices=tuple(_EMPIRICAL_COLUMNS))
        if column is None:
            raise TraceError(f"{sec.key('column')}: missing; expected prompt or output")
        fmt = sec.string("format", "auto", choices=FORMATS)
        trace = load_trace(path, fmt, origin=str(path))
        values = trace[_EMPIRICAL_COLUMNS[column]].to_numpy(dtype=np.float64)
        return {"values": values}
    raw = sec.raw(source)
    if not isinstance(raw, list) or not raw or not all(is_real(v) and v >= 0 for v in raw):
        raise sec.error(source, "a non-empty list of numbers >= 0", raw)
    values = np.asarray(raw, dtype=np.float64)
    if source == "quantiles":
        if len(values) < 2 or np.any(np.diff(values) < 0):
            raise sec.error(
                source,
                "at least two non-decreasing values (quantiles at evenly spaced probabilities 0..1)",
                raw,
            )
        return {"quantiles": values}
    return {"values": values}


def parse_distribution(
    value: Any,
    path: str,
    base_dir: Path,
    *,
    integer: bool = True,
    low: float = 1.0,
) -> Distribution:
    """Parse a distribution spec at key ``path``; ``low`` is the floor (1 token, 0 s)."""
    if is_real(value):
        if not is_finite(value) or value < low:
            raise TraceError(f"{path}: expected a number >= {low:g}, got {show(value)}")
        return Distribution("fixed", {"value": float(value)}, low, float("inf"), integer)
    sec = Section(value, path)
    kind = sec.string("distribution", choices=KINDS)
    if kind is None:
        raise TraceError(f"{sec.key('distribution')}: missing; expected one of {', '.join(KINDS)}")
    if kind == "fixed":
        params: dict[str, Any] = {"value": sec.number("value", required=True, minimum=low)}
    elif kind == "uniform":
        lo = sec.number("low", required=True, minimum=low)
        hi = sec.number("high", required=True, minimum=low)
        if hi < lo:
            raise sec.error("high", f"a number >= low ({lo:g})", hi)
        params = {"low": lo, "high": hi}
    elif kind == "lognormal":
        params = _lognormal(sec)
    elif kind in ("exponential", "geometric"):
        params = {"mean": sec.number("mean", required=True, positive=True)}
        if kind == "geometric" and params["mean"] < 1:
            raise sec.error("mean", "a number >= 1", params["mean"])
    else:
        params = _empirical(sec, base_dir, integer)
    clip_lo = sec.number("min", low, minimum=low)
    clip_hi = sec.number("max", float("inf"), positive=True)
    if clip_hi < clip_lo:
        raise sec.error("max", f"a number >= min ({clip_lo:g})", clip_hi)
    sec.finish()
    return Distribution(kind, params, clip_lo, clip_hi, integer)
