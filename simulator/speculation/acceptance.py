"""Acceptance models: how many of k drafted tokens the target accepts in one step.

All forms reduce to a survival curve S_j = P(accepted >= j) over draft positions:
- i.i.d. alpha: S_j = alpha^j;
- position-dependent alpha_j: S_j = alpha_1 * ... * alpha_j;
- an empirical histogram of accepted lengths at a stated k;
- tau (mean tokens per step, bonus included) at a stated k, the form papers report:
  solved for the i.i.d. alpha with (1 - alpha^(k+1)) / (1 - alpha) = tau.
One uniform u per (request, step) gives accepted = #{j <= k : u <= S_j}. Per-request variation
draws each request's alpha from a Beta around the profile's; temperature lowers alpha.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np
import yaml
from scipy.optimize import brentq
from scipy.stats import beta as beta_dist

from specsim.errors import ScenarioError
from specsim.simulator import rng

MAX_K = 64


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """Closed form E[tokens/step] for i.i.d. alpha (Leviathan et al. 2023)."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def alpha_from_tau(tau: float, k: int, where: str = "acceptance") -> float:
    """The i.i.d. alpha whose E[tokens/step] at draft length k equals tau."""
    if not 1.0 <= tau <= k + 1:
        raise ScenarioError(f"{where}.tau: expected a value in [1, k+1] = [1, {k + 1}] for "
                            f"at_k={k}, got {tau}")
    if tau == 1.0:
        return 0.0
    if tau >= k + 1 - 1e-12:
        return 1.0
    return float(brentq(lambda a: expected_tokens_per_step(a, k) - tau, 0.0, 1.0 - 1e-15,
                        xtol=1e-14))


@dataclass(frozen=True)
class ClassAcceptance:
    """Acceptance of one workload class: per-position conditional alphas (length MAX_K)."""

    position_alpha: np.ndarray  # alpha_j: P(accept draft j | accepted all before it)
    iid: bool
    source: str

    @property
    def mean_alpha(self) -> float:
        return float(self.position_alpha[0]) if self.iid else float(
            np.exp(np.mean(np.log(np.clip(self.position_alpha[:8], 1e-12, 1.0)))))

    def survival(self, k: int) -> np.ndarray:
        return np.cumprod(self.position_alpha[:k])


_SPEC_KEYS = {"alpha", "alpha_by_position", "tau", "at_k", "histogram", "source"}


def _number(where: str, v: Any, lo: float, hi: float) -> float:
    if not isinstance(v, int | float) or isinstance(v, bool) or not lo <= v <= hi:
        raise ScenarioError(f"{where}: expected a number in [{lo}, {hi}], got {v!r}")
    return float(v)


def class_acceptance(spec: Any, where: str) -> ClassAcceptance:
    """Parse one class's acceptance: alpha | alpha_by_position | tau+at_k | histogram+at_k."""
    if not isinstance(spec, dict):
        raise ScenarioError(f"{where}: expected a mapping with alpha, alpha_by_position, tau or "
                            f"histogram, got {spec!r}")
    unknown = sorted(set(spec) - _SPEC_KEYS, key=str)
    if unknown:
        raise ScenarioError(f"{where}.{unknown[0]}: unknown key (expected one of: "
                            f"{', '.join(sorted(_SPEC_KEYS))})")
    forms = [f for f in ("alpha", "alpha_by_position", "tau", "histogram") if f in spec]
    if len(forms) != 1:
        raise ScenarioError(f"{where}: expected exactly one of alpha, alpha_by_position, tau, "
                            f"histogram, got {forms or 'none'}")
    source = str(spec.get("source", ""))
    form = forms[0]
    if form == "alpha":
        a = _number(f"{where}.alpha", spec["alpha"], 0.0, 1.0)
        return ClassAcceptance(np.full(MAX_K, a), True, source)
    if form == "tau":
        if "at_k" not in spec:
            raise ScenarioError(f"{where}.at_k: required with tau (the draft length the tau was "
                                "measured at)")
        k = int(_number(f"{where}.at_k", spec["at_k"], 1, MAX_K))
        a = alpha_from_tau(_number(f"{where}.tau", spec["tau"], 1.0, MAX_K + 1), k, where)
        return ClassAcceptance(np.full(MAX_K, a), True, source)
    if form == "alpha_by_position":
        vals = spec["alpha_by_position"]
        if not isinstance(vals, list) or not vals:
            raise ScenarioError(f"{where}.alpha_by_position: expected a non-empty list of numbers")
        if len(vals) > MAX_K:
            raise ScenarioError(f"{where}.alpha_by_position: expected at most {MAX_K} entries, "
                                f"got {len(vals)}")
        arr = np.array([_number(f"{where}.alpha_by_position[{i}]", v, 0.0, 1.0)
                        for i, v in enumerate(vals)])
        # beyond the last given position the last alpha holds
        return ClassAcceptance(np.concatenate([arr, np.full(MAX_K - len(arr), arr[-1])]),
                               False, source)
    hist = spec["histogram"]
    if not isinstance(hist, list) or len(hist) < 2:
        raise ScenarioError(f"{where}.histogram: expected a list of counts or probabilities of "
                            "accepting 0, 1, ..., k drafts")
    if len(hist) > MAX_K + 1:
        raise ScenarioError(f"{where}.histogram: expected at most {MAX_K + 1} entries (0..{MAX_K} "
                            f"accepted drafts), got {len(hist)}")
    h = np.array([_number(f"{where}.histogram[{i}]", v, 0.0, 1e18) for i, v in enumerate(hist)])
    if "at_k" in spec:
        at_k = int(_number(f"{where}.at_k", spec["at_k"], 1, MAX_K))
        if at_k != len(h) - 1:
            raise ScenarioError(f"{where}.histogram: expected at_k + 1 = {at_k + 1} entries, got "
                                f"{len(h)}")
    if h.sum() <= 0:
        raise ScenarioError(f"{where}.histogram: expected a positive total")
    surv = h[::-1].cumsum()[::-1] / h.sum()  # S_0 = 1, S_j = P(accepted >= j)
    cond = np.where(surv[:-1] > 0, surv[1:] / np.maximum(surv[:-1], 1e-300), 0.0)
    return ClassAcceptance(np.concatenate([cond, np.full(MAX_K - len(cond), cond[-1])]),
                           False, source)


def profile_catalog() -> dict[str, Any]:
    text = resources.files(__package__).joinpath("data", "acceptance.yaml").read_text()
    return yaml.safe_load(text) or {}


class AcceptanceModel:
    """Per-class acceptance with optional per-request variation and temperature shift.

    ``sample`` is the hot path: one keyed uniform per (request, step) and a comparison with the
    survival curve; no Python loop over requests.
    """

    def __init__(self, classes: dict[str, ClassAcceptance], default: ClassAcceptance | None,
                 concentration: float | None, temperature_sensitivity: float, seed: int,
                 name: str) -> None:
        self.classes, self.default = classes, default
        self.concentration = concentration
        self.temperature_sensitivity = temperature_sensitivity
        self.seed, self.name = seed, name

    def for_class(self, cls: str) -> ClassAcceptance:
        if cls in self.classes:
            return self.classes[cls]
        if self.default is not None:
            return self.default
        raise ScenarioError(f"speculation.acceptance: no acceptance given for workload class "
                            f"{cls!r} (have: {', '.join(sorted(self.classes))}); add it or a "
                            "'default'")

    def request_scale(self, request_ids: np.ndarray, classes: np.ndarray,
                      temperatures: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per request: a class index and a multiplier on every position's alpha.

        The multiplier is the Beta-drawn alpha over the class mean (1 without variation),
        times (1 - sensitivity * temperature).
        """
        names = sorted(set(classes.tolist()))
        idx = np.searchsorted(np.array(names, dtype=object), classes)
        mean = np.array([self.for_class(n).mean_alpha for n in names])[idx]
        scale = np.ones(len(request_ids))
        if self.concentration is not None:
            u = rng.uniform(rng.request_keys(self.seed, rng.STREAM_ALPHA, request_ids),
                            np.zeros(len(request_ids), dtype=np.uint64))
            m = np.clip(mean, 1e-6, 1 - 1e-6)
            drawn = beta_dist.ppf(np.clip(u, 1e-12, 1 - 1e-12), m * self.concentration,
                                  (1 - m) * self.concentration)
            scale = np.where(mean > 0, drawn / np.maximum(mean, 1e-12), 0.0)
        temps = np.nan_to_num(np.asarray(temperatures, dtype=np.float64), nan=0.0)
        scale = scale * np.clip(1.0 - self.temperature_sensitivity * temps, 0.0, None)
        self._names = names
        return idx.astype(np.int64), scale

    def survival_table(self) -> np.ndarray:
        """Per class (in ``request_scale``'s order), conditional alphas over positions."""
        return np.stack([self.for_class(n).position_alpha for n in self._names])

    @staticmethod
    def accepted(u: np.ndarray, cond_alpha: np.ndarray, k: np.ndarray) -> np.ndarray:
        """Accepted drafts per row: #{j < k_i : u_i <= prod_{l<=j} alpha_il}.

        The one survival-curve sampler. cond_alpha: the rows' conditional alphas
        (n x kmax), already scaled per request; u and k: one per row (n,), or per step and
        row (steps x n) for a segment planned at once.
        """
        surv = np.cumprod(cond_alpha, axis=1)
        # survival is non-increasing, so the successes are the leading positions: count
        # them all, then cap at k (cheaper than masking positions >= k)
        return np.minimum((u[..., None] <= surv).sum(axis=-1), k)


_ACCEPT_KEYS = {"profile", "by_class", "default", "per_request", "temperature_sensitivity",
                "alpha", "alpha_by_position", "tau", "at_k", "histogram", "source"}

# Leviathan et al. 2023 (arXiv 2211.17192): T5-XXL/T5-small EnDe alpha .75 at T=0, .62 at T=1
# (and CNNDM .65 -> .53): alpha falls by about 17% from temperature 0 to 1.
DEFAULT_TEMPERATURE_SENSITIVITY = 0.17


def build_acceptance(section: Any, seed: int, where: str = "speculation.acceptance"
                     ) -> AcceptanceModel:
    """From the scenario: a bundled profile by name, inline forms, or per-class forms."""
    if not isinstance(section, dict):
        raise ScenarioError(f"{where}: expected a mapping, got {section!r}")
    unknown = sorted(set(section) - _ACCEPT_KEYS, key=str)
    if unknown:
        raise ScenarioError(f"{where}.{unknown[0]}: unknown key (expected one of: "
                            f"{', '.join(sorted(_ACCEPT_KEYS))})")
    classes: dict[str, ClassAcceptance] = {}
    default: ClassAcceptance | None = None
    name = "inline"
    if "profile" in section:
        cat = profile_catalog()
        pname = section["profile"]
        if not isinstance(pname, str) or pname not in cat:
            raise ScenarioError(f"{where}.profile: unknown acceptance profile {pname!r} "
                                f"(bundled: {', '.join(sorted(cat))})")
        entry = cat[pname]
        name = pname
        src = str(entry.get("source", ""))
        for cls, spec in (entry.get("classes") or {}).items():
            spec = {**spec, "source": spec.get("source", src)}
            parsed = class_acceptance(spec, f"acceptance profile {pname}.classes.{cls}")
            if cls == "default":
                default = parsed
            else:
                classes[cls] = parsed
    inline = {k: section[k] for k in ("alpha", "alpha_by_position", "tau", "at_k", "histogram",
                                      "source") if k in section}
    if set(inline) - {"source"}:
        default = class_acceptance(inline, where)
    if "default" in section:
        default = class_acceptance(section["default"], f"{where}.default")
    by_class = section.get("by_class") or {}
    if not isinstance(by_class, dict):
        raise ScenarioError(f"{where}.by_class: expected a mapping of class -> acceptance")
    for cls, spec in by_class.items():
        classes[str(cls)] = class_acceptance(spec, f"{where}.by_class.{cls}")
    if not classes and default is None:
        raise ScenarioError(f"{where}: expected a profile, an inline alpha/tau/alpha_by_position/"
                            "histogram, or by_class")
    conc = None
    pr = section.get("per_request")
    if pr is not None:
        if not isinstance(pr, dict) or set(pr) - {"distribution", "concentration"}:
            raise ScenarioError(f"{where}.per_request: expected {{distribution: beta, "
                                "concentration: N}}")
        if pr.get("distribution", "beta") != "beta":
            raise ScenarioError(f"{where}.per_request.distribution: expected 'beta', got "
                                f"{pr.get('distribution')!r}")
        conc = _number(f"{where}.per_request.concentration", pr.get("concentration"), 1e-3, 1e9)
    sens = _number(f"{where}.temperature_sensitivity",
                   section.get("temperature_sensitivity", DEFAULT_TEMPERATURE_SENSITIVITY), 0, 1)
    return AcceptanceModel(classes, default, conc, sens, seed, name)
