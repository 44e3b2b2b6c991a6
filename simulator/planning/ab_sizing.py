"""How big an A/B must be to tell speculation from none, per class, and in what order to
roll it out.

The test: requests of a class are split 50/50 between arm A (no speculation) and arm B
(speculation); the metric is each request's TPOT; a two-sided two-sample test on the means
(Welch's, by its normal approximation) at confidence 1 - a and power 1 - b. With arm A's
mean mu, arm B's mu / g (g: the TPOT gain, baseline over speculative), and coefficients of
variation cv_A (TPOT across a class's requests without speculation) and cv_B, the requests
per arm are

    n = (z_{1-a/2} + z_{1-b})^2 (sigma_A^2 + sigma_B^2) / delta^2
      = (z_{1-a/2} + z_{1-b})^2 (cv_A^2 + cv_B^2 / g^2) / (1 - 1/g)^2,

mu cancelling. cv_B adds the spread of acceptance across requests (a request that drafts
badly gains less): (1 + cv_B^2) = (1 + cv_A^2)(1 + cv_g^2), cv_g the spread of 1 / tau_r
over requests from the posterior's heterogeneity (0 where none was found or there is no
posterior). The gain is uncertain: g has posterior draws (g = tau / step cost, the step
cost being a speculative step's time over a plain decode step at the load in question, or
draws of the gain itself), and the size is reported at the posterior median of g and at its
P10 (the pessimistic effect: if g at P10 is not above 1 no finite test is sure to see a
gain). Hours: 2 n requests at the class's arrival rate (both arms).

Rollout order: highest confidence first, by P(g > 1) under the posterior, ties by the
larger P10 gain, then by the smaller test.

Named assumptions: the normal approximation (fine for n in the tens and more; TPOT per
request is roughly normal within a class once requests have a few dozen tokens); requests
independent (two requests of one session are not); the step cost known (its uncertainty is
not in the band); the CV the same across the test's duration.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from specsim.errors import ScenarioError


@dataclass(frozen=True)
class ClassSize:
    """One class's A/B size and where it stands in the rollout order."""

    cls: str
    rank: int
    p_gain: float  # P(g > 1) under the posterior
    gain_p10: float
    gain_p50: float
    gain_p90: float
    tpot_cv: float  # arm A
    spec_cv: float  # arm B
    rate_per_s: float
    n_per_arm_p50: float  # math.inf: no finite size
    n_per_arm_p10: float
    hours_p50: float
    hours_p10: float
    reason: str


@dataclass(frozen=True)
class ABPlan:
    """Every class's size, in rollout order."""

    classes: list[ClassSize]
    confidence: float
    power: float
    assumptions: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        def clean(v: Any) -> Any:
            return None if isinstance(v, float) and not math.isfinite(v) else v

        return {"confidence": self.confidence, "power": self.power,
                "test": "two-sided two-sample on mean TPOT per request, 50/50 split",
                "assumptions": list(self.assumptions),
                "classes": [{k: clean(v) for k, v in asdict(c).items()} for c in self.classes]}

    def table(self) -> str:
        def n(x: float) -> str:
            return f"{x:,.0f}" if math.isfinite(x) else "-"

        def h(x: float) -> str:
            return _hours(x) if math.isfinite(x) else "-"

        head = (f"A/B size (two-sided {self.confidence:.0%}, power {self.power:.0%}, 50/50 "
                "split, metric TPOT per request); rollout order:")
        rows = [head, "rank  class            P(gain>1)  gain P10/P50/P90    n/arm @P50  "
                "@P10      hours @P50  @P10"]
        for c in self.classes:
            rows.append(f"{c.rank:<5} {c.cls[:16]:<16} {c.p_gain:>9.3f}  "
                        f"{c.gain_p10:.2f}/{c.gain_p50:.2f}/{c.gain_p90:.2f}      "
                        f"{n(c.n_per_arm_p50):>10} {n(c.n_per_arm_p10):>8}  "
                        f"{h(c.hours_p50):>10} {h(c.hours_p10):>7}")
        rows += [f"  {c.cls}: {c.reason}" for c in self.classes]
        return "\n".join(rows)


#: below this many requests per arm the normal approximation is rough
MIN_PER_ARM = 30


def _hours(x: float) -> str:
    return f"{x:.3g}"


def z_pair(confidence: float, power: float) -> tuple[float, float]:
    """z_{1-a/2} and z_{1-b} (the standard normal's quantiles)."""
    if not 0.5 <= confidence < 1.0:
        raise ScenarioError(f"--confidence: expected a number from 0.5 to below 1, got "
                            f"{confidence:g}")
    if not 0.5 <= power < 1.0:
        raise ScenarioError(f"--power: expected a number from 0.5 to below 1, got {power:g}")
    nd = NormalDist()
    return nd.inv_cdf(1 - (1 - confidence) / 2), nd.inv_cdf(power)


def spec_arm_cv(tpot_cv: float, gain_cv: float = 0.0) -> float:
    """Arm B's CV: the baseline spread times the spread of the per-request gain."""
    return math.sqrt((1 + tpot_cv ** 2) * (1 + gain_cv ** 2) - 1)


def requests_per_arm(gain: float, tpot_cv: float, spec_cv: float | None = None,
                     confidence: float = 0.95, power: float = 0.8) -> float:
    """n per arm to tell mean TPOT with a gain g from none (``math.inf`` at g = 1)."""
    za, zb = z_pair(confidence, power)
    cv_b = tpot_cv if spec_cv is None else spec_cv
    effect = abs(1.0 - 1.0 / gain) if gain > 0 else math.inf
    if effect <= 0:
        return math.inf
    return math.ceil((za + zb) ** 2 * (tpot_cv ** 2 + cv_b ** 2 / gain ** 2) / effect ** 2)


def gain_from_tau(tau: Any, step_cost: float) -> np.ndarray:
    """TPOT gain draws: tokens per step over a speculative step's cost in plain steps."""
    if not step_cost > 0:
        raise ScenarioError(f"--step-cost: expected a number above 0, got {step_cost:g}")
    return np.asarray(tau, float) / float(step_cost)


def per_class(value: float | Mapping[str, float], classes: list[str], what: str) -> dict[
        str, float]:
    if isinstance(value, Mapping):
        missing = [c for c in classes if c not in value]
        if missing:
            raise ScenarioError(f"{what}: no value for class {missing[0]!r} (give C=V for "
                                f"each of: {', '.join(classes)}, or one value for all)")
        return {c: float(value[c]) for c in classes}
    return dict.fromkeys(classes, float(value))


def parse_per_class(text: str, what: str, lo: float = 0.0, lo_open: bool = True
                    ) -> float | dict[str, float]:
    """``2.5`` (every class) or ``chat=2,code=0.5``: one-line errors naming ``what``."""
    def num(s: str) -> float:
        try:
            v = float(s)
        except ValueError:
            v = math.nan
        if not math.isfinite(v) or v < lo or (lo_open and v == lo):
            rel = "above" if lo_open else "at least"
            raise ScenarioError(f"{what}: expected a number {rel} {lo:g} (or C=V,C=V), got "
                                f"{s!r}")
        return v

    text = text.strip()
    if "=" not in text:
        return num(text)
    out: dict[str, float] = {}
    for part in text.split(","):
        c, eq, v = part.partition("=")
        if not eq or not c.strip():
            raise ScenarioError(f"{what}: expected C=V pairs separated by commas, got {part!r}")
        if c.strip() in out:
            raise ScenarioError(f"{what}: class {c.strip()!r} given twice")
        out[c.strip()] = num(v.strip())
    return out


def size_ab(gains: Mapping[str, Any], rate: float | Mapping[str, float],
            tpot_cv: float | Mapping[str, float], *, gain_cv: Mapping[str, float] | None = None,
            confidence: float = 0.95, power: float = 0.8,
            notes: Mapping[str, str] | None = None) -> ABPlan:
    """The A/B size per class from draws of its TPOT gain (or one value: a point estimate),
    the arrival rate per class (requests/s) and the baseline TPOT CV per class."""
    classes = list(gains)
    if not classes:
        raise ScenarioError("A/B sizing: no class to size")
    rates = per_class(rate, classes, "--rate")
    cvs = per_class(tpot_cv, classes, "--tpot-cv")
    z_pair(confidence, power)
    rows = []
    for c in classes:
        g = np.atleast_1d(np.asarray(gains[c], float))
        if not g.size or not np.all(np.isfinite(g)) or np.any(g <= 0):
            raise ScenarioError(f"A/B sizing: class {c}: expected positive finite gains")
        if not rates[c] > 0:
            raise ScenarioError(f"--rate: class {c}: expected a rate above 0")
        p10, p50, p90 = (float(x) for x in np.percentile(g, [10, 50, 90]))
        p_gain = float(np.mean(g > 1.0))
        cv_b = spec_arm_cv(cvs[c], (gain_cv or {}).get(c, 0.0))
        n50 = requests_per_arm(p50, cvs[c], cv_b, confidence, power)
        n10 = requests_per_arm(p10, cvs[c], cv_b, confidence, power) if p10 > 1 else math.inf
        hours = [2 * n / rates[c] / 3600 if math.isfinite(n) else math.inf for n in (n50, n10)]
        rows.append((c, p_gain, p10, p50, p90, cvs[c], cv_b, rates[c], n50, n10, *hours,
                     g.size == 1 or p10 == p90))
    rows.sort(key=lambda r: (-r[1], -r[2], r[8], r[0]))
    out = []
    for rank, (c, p_gain, p10, p50, p90, cv_a, cv_b, rt, n50, n10, h50, h10, point) in \
            enumerate(rows, 1):
        out.append(ClassSize(c, rank, p_gain, p10, p50, p90, cv_a, cv_b, rt, n50, n10, h50, h10,
                             _reason(c, rank, p_gain, p10, p50, cv_a, cv_b, rt, n50, n10, h50,
                                     h10, point, (notes or {}).get(c))))
    za, zb = z_pair(confidence, power)
    assumptions = (
        f"n per arm = (z {za:.3f} + z {zb:.3f})^2 (cv_A^2 + cv_B^2/g^2) / (1 - 1/g)^2: "
        "two-sided two-sample test on mean TPOT, normal approximation",
        "requests independent; 50/50 split; hours = 2 n / the class's arrival rate",
        "the step cost (or the gain's draws) taken as given: its own uncertainty is not in the "
        "band",
    )
    return ABPlan(out, confidence, power, assumptions)


def _reason(c: str, rank: int, p_gain: float, p10: float, p50: float, cv_a: float,
            cv_b: float, rate: float, n50: float, n10: float, h50: float, h10: float,
            point: bool, note: str | None) -> str:
    if point:
        head = (f"point value, no posterior: gain {p50:.2f} with no band (the effect's "
                "uncertainty is unknown; P10 = P50)")
    else:
        head = f"P(gain > 1) = {p_gain:.3f}; gain P10 {p10:.2f}, P50 {p50:.2f}"
    if p50 <= 1.0:
        verdict = "speculation loses at the median gain: no rollout"
        size = (f"an A/B telling the loss from none needs {n50:,.0f} requests per arm "
                f"({_hours(h50)} h at {rate:g} req/s)" if math.isfinite(n50) else
                "no A/B can tell a gain of exactly 1 from none")
    else:
        size = (f"{n50:,.0f} requests per arm at the median gain ({_hours(h50)} h at {rate:g} "
                "req/s)")
        if math.isfinite(n10):
            size += f", {n10:,.0f} at P10 ({_hours(h10)} h)"
            verdict = "roll out " + ("first" if rank == 1 else f"#{rank}")
        else:
            size += "; at P10 the gain is not above 1, so no size is sure to see it"
            verdict = f"roll out #{rank} only after the A/B"
    cv = f"TPOT CV {cv_a:.2f} without, {cv_b:.2f} with speculation"
    small = (f"below {MIN_PER_ARM} per arm the normal approximation is rough: run at least "
             f"{MIN_PER_ARM}" if n50 < MIN_PER_ARM else "")
    return "; ".join(x for x in (head, size, cv, small, verdict, note) if x)


def tpot_cv_from_requests(path: str | Path) -> dict[str, float]:
    """Each class's TPOT coefficient of variation over its completed requests in a run's
    requests.csv (columns workload_class, status, tpot_s)."""
    from specsim import safe_read

    path = Path(path)
    try:
        req = safe_read.read_csv(path, "a run's requests.csv")
    except ValueError as exc:
        raise ScenarioError(f"{path}: cannot read as CSV ({exc})") from None
    missing = [c for c in ("workload_class", "tpot_s") if c not in req.columns]
    if missing:
        raise ScenarioError(f"{path}: no column {missing[0]} (expected a run's requests.csv: "
                            "workload_class, status, tpot_s)")
    if "status" in req.columns:
        req = req[req["status"].astype(str) == "completed"]
    out: dict[str, float] = {}
    for cls, g in req.groupby(req["workload_class"].astype(str)):
        v = np.asarray(g["tpot_s"], float)
        v = v[np.isfinite(v) & (v > 0)]
        if v.size >= 2:
            out[str(cls)] = float(v.std(ddof=1) / v.mean())
    if not out:
        raise ScenarioError(f"{path}: no class with two completed requests and a TPOT")
    return out
