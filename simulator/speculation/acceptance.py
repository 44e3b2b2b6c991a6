"""Acceptance models: how many of k drafted tokens the target accepts in one step.

All forms reduce to a survival curve S_j = P(accepted >= j) over draft positions:
- i.i.d. alpha: S_j = alpha^j;
- position-dependent alpha_j (conditional): S_j = alpha_1 * ... * alpha_j;
- per-position acceptance rates (vLLM's "per-position acceptance rate", unconditional):
  S_j = rate_j;
- an empirical histogram of accepted lengths at a stated k;
- tau (mean tokens per step, bonus included) at a stated k, the form papers report:
  solved for the i.i.d. alpha with (1 - alpha^(k+1)) / (1 - alpha) = tau;
- tau measured at several k (``tau_by_k``): tau(k) - tau(k') = S_{k'+1} + ... + S_k, solved
  for one conditional alpha per gap between measured k (consecutive k give S_k exactly).
One uniform u per (request, step) gives accepted = #{j <= k : u <= S_j}. Per-request variation
draws each request's alpha from a Beta around the profile's; temperature lowers alpha: by the
class's own figures where a source gives acceptance at temperature 0 and 1 (linear between
them), else by the assumed ``temperature_sensitivity``. A quantized drafter multiplies every
position's alpha by a per-precision factor (``data/drafter_quantization.yaml``).

A profile measured at one draft length and used at another is *derived*; every such use is
stated in the run's notes (metrics.json ``notes``), e.g. "tau 3.36 measured at k=7, applied
at k=4: derived".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from specsim import values
from specsim.errors import ScenarioError
from specsim.simulator import rng
from specsim.simulator.registry import DRAFTERS
from specsim.yamlio import load_bundled

MAX_K = 64


def brentq(f, a: float, b: float, xtol: float = 2e-12, rtol: float = 4 * 2.220446049250313e-16,
           maxiter: int = 100) -> float:
    """``scipy.optimize.brentq``, the same steps in the same float operations (scipy's
    brentq.c), so roots agree bit for bit (tests/test_kernel_compiled.py checks) without
    importing scipy on the path of every run (its import costs a quarter of a second)."""
    xpre, xcur = float(a), float(b)
    xblk = fblk = spre = scur = 0.0
    fpre, fcur = float(f(xpre)), float(f(xcur))
    if fpre != fpre or fcur != fcur:
        raise ValueError("brentq: the function returned NaN")
    if fpre == 0:
        return xpre
    if fcur == 0:
        return xcur
    if math.copysign(1.0, fpre) == math.copysign(1.0, fcur):
        raise ValueError("f(a) and f(b) must have different signs")
    for _ in range(maxiter):
        if fpre != 0 and fcur != 0 and math.copysign(1.0, fpre) != math.copysign(1.0, fcur):
            xblk, fblk = xpre, fpre
            spre = scur = xcur - xpre
        if abs(fblk) < abs(fcur):
            xpre, xcur, xblk = xcur, xblk, xcur
            fpre, fcur, fblk = fcur, fblk, fcur
        delta = (xtol + rtol * abs(xcur)) / 2
        sbis = (xblk - xcur) / 2
        if fcur == 0 or abs(sbis) < delta:
            return xcur
        if abs(spre) > delta and abs(fcur) < abs(fpre):
            if xpre == xblk:  # interpolate
                stry = -fcur * (xcur - xpre) / (fcur - fpre)
            else:  # extrapolate
                dpre = (fpre - fcur) / (xpre - xcur)
                dblk = (fblk - fcur) / (xblk - xcur)
                stry = -fcur * (fblk * dblk - fpre * dpre) / (dblk * dpre * (fblk - fpre))
            if 2 * abs(stry) < min(abs(spre), 3 * abs(sbis) - delta):  # good short step
                spre, scur = scur, stry
            else:  # bisect
                spre = scur = sbis
        else:  # bisect
            spre = scur = sbis
        xpre, fpre = xcur, fcur
        xcur += scur if abs(scur) > delta else (delta if sbis > 0 else -delta)
        fcur = float(f(xcur))
        if fcur != fcur:
            raise ValueError("brentq: the function returned NaN")
    raise RuntimeError(f"brentq: failed to converge after {maxiter} iterations, value is {xcur}")


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


def _segment_alpha(s_prev: float, m: int, gain: float) -> float:
    """The constant conditional alpha a with s_prev * (a + a^2 + ... + a^m) = gain."""
    if s_prev <= 0.0 or gain <= 0.0:
        return 0.0
    if gain >= s_prev * m * (1 - 1e-12):
        return 1.0
    powers = np.arange(1, m + 1)
    return float(brentq(lambda a: s_prev * np.sum(a ** powers) - gain, 0.0, 1.0, xtol=1e-14))


@dataclass(frozen=True)
class ClassAcceptance:
    """Acceptance of one workload class: per-position conditional alphas (length MAX_K).

    ``at_k``: the draft length the figures were measured at (None: the form holds at any k,
    e.g. a bare alpha). ``measured_ks``: for ``tau_by_k``, every measured k. ``temperature``:
    the sampling temperature of the measurement. ``t1_ratio``: where the source also gives
    acceptance at temperature 1, the mean alpha at 1 over the mean alpha at 0.
    """

    position_alpha: np.ndarray  # alpha_j: P(accept draft j | accepted all before it)
    iid: bool
    source: str
    form: str = "alpha"
    summary: str = ""
    at_k: int | None = None
    measured_ks: tuple[int, ...] = ()
    temperature: float = 0.0
    t1_ratio: float | None = None
    t1_summary: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def mean_alpha(self) -> float:
        return float(self.position_alpha[0]) if self.iid else float(
            np.exp(np.mean(np.log(np.clip(self.position_alpha[:8], 1e-12, 1.0)))))

    def survival(self, k: int) -> np.ndarray:
        return np.cumprod(self.position_alpha[:k])

    def tau_at(self, k: int) -> float:
        """Expected tokens per step at draft length k (bonus included)."""
        return 1.0 + float(self.survival(k).sum())

    def derivation(self, k: int) -> tuple[str, bool]:
        """What this class's figures are and how they apply at draft length k.

        Returns the text and whether the use is derived (True) or the measurement itself.
        """
        tau_k = f"tau {self.tau_at(k):.2f} expected at k={k}"
        if self.form == "tau_by_k":
            ks = self.measured_ks
            got = f"{self.summary} measured at k={', '.join(map(str, ks))}"
            if k in ks:
                return f"{got}, applied at k={k}: measured", False
            how = (f"below the smallest measured k={ks[0]}, its segment's constant alpha"
                   if k < ks[0] else "interpolated between measured k" if k < ks[-1] else
                   f"beyond the largest measured k={ks[-1]}, its last alpha held")
            return f"{got}, applied at k={k}: derived ({how}; {tau_k})", True
        if self.at_k is None:
            return f"{self.summary} (i.i.d., any k): {tau_k}", False
        got = f"{self.summary} measured at k={self.at_k}"
        if k == self.at_k:
            return f"{got}, applied at k={k}: measured", False
        if self.form == "tau":
            how = f"i.i.d. alpha {self.position_alpha[0]:.3f} solved at k={self.at_k}"
        elif self.form == "alpha":
            how = "the i.i.d. alpha taken as independent of k"
        elif k < self.at_k:
            how = f"the first {k} positions of the k={self.at_k} measurement"
        else:
            span = f"{self.at_k + 1}..{k}" if k > self.at_k + 1 else f"{k}"
            how = f"position {span} holds the last measured alpha"
        return f"{got}, applied at k={k}: derived ({how}; {tau_k})", True


_FORMS = ("alpha", "alpha_by_position", "rate_by_position", "tau", "tau_by_k", "histogram")
_SPEC_KEYS = {*_FORMS, "at_k", "source", "notes", "temperature", "temperature_1"}


def _number(where: str, v: Any, lo: float, hi: float, integer: bool = False) -> Any:
    """``v`` by the shared number rule (``specsim.values.number``), errors naming ``where``."""
    try:
        return values.number(v, integer=integer, lo=lo, hi=hi)
    except values.ValueRuleError as exc:
        raise ScenarioError(f"{where}: {exc}") from None


def _int(where: str, v: Any, lo: int, hi: int) -> int:
    return _number(where, v, lo, hi, integer=True)


def _pad(cond: np.ndarray) -> np.ndarray:
    """Beyond the last given position the last conditional alpha holds."""
    return np.concatenate([cond, np.full(MAX_K - len(cond), cond[-1])])


def _fmt_list(vals: Any) -> str:
    return "[" + ", ".join(f"{float(v):.3g}" for v in vals) + "]"


def class_acceptance(spec: Any, where: str, temperature: float = 0.0) -> ClassAcceptance:
    """Parse one class's acceptance: alpha | alpha_by_position | rate_by_position | tau+at_k |
    tau_by_k | histogram(+at_k), optionally with ``temperature`` (of the measurement) and
    ``temperature_1`` (the same class's acceptance at temperature 1, any one form)."""
    if not isinstance(spec, dict):
        raise ScenarioError(f"{where}: expected a mapping with alpha, alpha_by_position, "
                            f"rate_by_position, tau, tau_by_k or histogram, got {spec!r}")
    unknown = sorted(set(spec) - _SPEC_KEYS, key=str)
    if unknown:
        raise ScenarioError(f"{where}.{unknown[0]}: unknown key (expected one of: "
                            f"{', '.join(sorted(_SPEC_KEYS))})")
    forms = [f for f in _FORMS if f in spec]
    if len(forms) != 1:
        raise ScenarioError(f"{where}: expected exactly one of {', '.join(_FORMS)}, got "
                            f"{forms or 'none'}")
    source = str(spec.get("source", ""))
    notes = (str(spec["notes"]),) if spec.get("notes") else ()
    if "temperature" in spec:
        temperature = _number(f"{where}.temperature", spec["temperature"], 0.0, 10.0)
    at_k = _int(f"{where}.at_k", spec["at_k"], 1, MAX_K) if "at_k" in spec else None
    form = forms[0]
    common = dict(source=source, form=form, temperature=temperature, notes=notes)
    if form == "alpha":
        a = _number(f"{where}.alpha", spec["alpha"], 0.0, 1.0)
        out = ClassAcceptance(np.full(MAX_K, a), True, summary=f"alpha {a:.3g}", at_k=at_k,
                              **common)
    elif form == "tau":
        if at_k is None:
            raise ScenarioError(f"{where}.at_k: required with tau (the draft length the tau was "
                                "measured at)")
        tau = _number(f"{where}.tau", spec["tau"], 1.0, MAX_K + 1)
        a = alpha_from_tau(tau, at_k, where)
        out = ClassAcceptance(np.full(MAX_K, a), True, summary=f"tau {tau:g}", at_k=at_k,
                              **common)
    elif form == "tau_by_k":
        out = _tau_by_k(spec["tau_by_k"], f"{where}.tau_by_k", common)
    elif form in ("alpha_by_position", "rate_by_position"):
        vals = spec[form]
        if not isinstance(vals, list) or not vals:
            raise ScenarioError(f"{where}.{form}: expected a non-empty list of numbers")
        if len(vals) > MAX_K:
            raise ScenarioError(f"{where}.{form}: expected at most {MAX_K} entries, "
                                f"got {len(vals)}")
        arr = np.array([_number(f"{where}.{form}[{i}]", v, 0.0, 1.0)
                        for i, v in enumerate(vals)])
        if at_k is not None and at_k != len(arr):
            raise ScenarioError(f"{where}.{form}: expected at_k = {at_k} entries, got "
                                f"{len(arr)}")
        if form == "rate_by_position":
            bad = np.flatnonzero(np.diff(arr) > 1e-9)
            if bad.size:
                i = int(bad[0]) + 1
                raise ScenarioError(f"{where}.rate_by_position[{i}]: expected rates that do not "
                                    f"increase with position (P(accepted >= j)), got {arr[i]:g} "
                                    f"after {arr[i - 1]:g}")
            prev = np.concatenate([[1.0], arr[:-1]])
            cond = np.where(prev > 0, arr / np.maximum(prev, 1e-300), 0.0)
            summary = f"per-position rates {_fmt_list(arr)}"
        else:
            cond = arr
            summary = f"per-position alphas {_fmt_list(arr)}"
        out = ClassAcceptance(_pad(cond), False, summary=summary,
                              at_k=at_k if at_k is not None else len(arr), **common)
    else:
        out = _histogram(spec["histogram"], at_k, where, common)
    if "temperature_1" in spec:
        out = _with_t1(out, spec["temperature_1"], where)
    return out


def _tau_by_k(table: Any, where: str, common: dict[str, Any]) -> ClassAcceptance:
    if not isinstance(table, dict) or not table:
        raise ScenarioError(f"{where}: expected a mapping of draft length -> tau, e.g. "
                            "{1: 1.8, 2: 2.3, 4: 2.9}")
    pairs = sorted((_int(f"{where} key", k, 1, MAX_K), k) for k in table)
    cond = np.zeros(MAX_K)
    s_prev, k_prev, reached = 1.0, 0, 1.0
    skipped: list[int] = []
    capped: list[int] = []
    for k, key in pairs:
        tau = _number(f"{where}.{key}", table[key], 1.0, k + 1)
        if k_prev and tau <= reached + 1e-12:  # noise: no gain over a shorter draft; skip it
            skipped.append(k)
            continue
        m = k - k_prev
        gain = tau - reached
        if gain > s_prev * m * (1 + 1e-9):  # more than positions k_prev+1..k can add
            capped.append(k)
        a = _segment_alpha(s_prev, m, gain)
        cond[k_prev:k] = a
        reached += s_prev * float(np.sum(a ** np.arange(1, m + 1)))
        s_prev *= a ** m
        k_prev = k
    cond[k_prev:] = cond[k_prev - 1]
    ks = tuple(k for k, _ in pairs)
    notes = tuple(common.pop("notes"))
    if skipped:
        notes += (f"tau at k={', '.join(map(str, skipped))} is no higher than at a shorter draft: "
                  "left out as noise (the fitted curve runs through the other points)",)
    if capped:
        notes += (f"tau at k={', '.join(map(str, capped))} grew more than the earlier positions' "
                  "acceptance allows (a position cannot accept more often than the one before "
                  "it): those positions accept whenever reached, and tau there comes out lower "
                  "than measured",)
    summary = "tau " + "/".join(f"{float(table[key]):g}" for _, key in pairs)
    return ClassAcceptance(cond, False, summary=summary, at_k=ks[-1], measured_ks=ks,
                           notes=notes, **common)


def _histogram(hist: Any, at_k: int | None, where: str,
               common: dict[str, Any]) -> ClassAcceptance:
    if not isinstance(hist, list) or len(hist) < 2:
        raise ScenarioError(f"{where}.histogram: expected a list of counts or probabilities of "
                            "accepting 0, 1, ..., k drafts")
    if len(hist) > MAX_K + 1:
        raise ScenarioError(f"{where}.histogram: expected at most {MAX_K + 1} entries (0..{MAX_K} "
                            f"accepted drafts), got {len(hist)}")
    h = np.array([_number(f"{where}.histogram[{i}]", v, 0.0, 1e18) for i, v in enumerate(hist)])
    if at_k is not None and at_k != len(h) - 1:
        raise ScenarioError(f"{where}.histogram: expected at_k + 1 = {at_k + 1} entries, got "
                            f"{len(h)}")
    if h.sum() <= 0:
        raise ScenarioError(f"{where}.histogram: expected a positive total")
    surv = h[::-1].cumsum()[::-1] / h.sum()  # S_0 = 1, S_j = P(accepted >= j)
    cond = np.where(surv[:-1] > 0, surv[1:] / np.maximum(surv[:-1], 1e-300), 0.0)
    tau = 1.0 + float(surv[1:].sum())
    return ClassAcceptance(_pad(cond), False, summary=f"accepted-length histogram (tau {tau:.2f})",
                           at_k=len(h) - 1, **common)


def _with_t1(base: ClassAcceptance, spec: Any, where: str) -> ClassAcceptance:
    """Attach the class's acceptance at temperature 1 (same at_k unless it says otherwise)."""
    w = f"{where}.temperature_1"
    if base.temperature != 0.0:
        raise ScenarioError(f"{w}: the class's main figures must be at temperature 0 when "
                            f"temperature_1 is given, got temperature {base.temperature:g}")
    if isinstance(spec, dict) and "at_k" not in spec and base.at_k is not None and (
            "tau" in spec or "histogram" in spec):
        spec = {**spec, "at_k": base.at_k}
    if isinstance(spec, dict) and ("temperature" in spec or "temperature_1" in spec):
        raise ScenarioError(f"{w}: expected one acceptance form (it is at temperature 1)")
    hot = class_acceptance(spec, w, temperature=1.0)
    cold = base.mean_alpha
    ratio = hot.mean_alpha / cold if cold > 0 else 1.0
    return ClassAcceptance(base.position_alpha, base.iid, base.source, base.form, base.summary,
                           base.at_k, base.measured_ks, 0.0, float(ratio), hot.summary,
                           base.notes)


# ---------------------------------------------------------------- catalogs and profile files

_ENTRY_KEYS = {"method", "target", "drafter", "temperature", "source", "notes", "classes"}


def profile_catalog() -> dict[str, Any]:
    text = resources.files(__package__).joinpath("data", "acceptance.yaml").read_text()
    return load_bundled(text, yaml12=False) or {}


def drafter_quantization_table() -> dict[str, Any]:
    """Alpha multipliers per drafter weight precision (``data/drafter_quantization.yaml``)."""
    text = resources.files(__package__).joinpath("data", "drafter_quantization.yaml").read_text()
    return load_bundled(text, yaml12=False) or {}


def _is_path(ref: str) -> bool:
    return ref.split("#")[0].endswith((".yaml", ".yml")) or "/" in ref


def load_profile_file(ref: str, base_dir: Path | None, where: str) -> tuple[str, dict[str, Any]]:
    """``path.yaml`` (one profile) or ``path.yaml#name``: (name, entry). Relative paths resolve
    from the scenario's folder, like ``calibration:``."""
    path_s, _, pick = ref.partition("#")
    path = Path(path_s)
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    if not path.is_file():
        raise ScenarioError(f"{where}.profile: no acceptance profile file {path_s!r}"
                            + (f" (looked in {base_dir})" if base_dir is not None else ""))
    from specsim import yamlio  # size cap, alias budget, no duplicate keys

    cat = yamlio.load_file(path, "a YAML acceptance profile", origin=path_s)
    if not isinstance(cat, dict) or not cat or not all(isinstance(v, dict) for v in cat.values()):
        raise ScenarioError(f"{path_s}: expected a mapping of profile name -> {{method, source, "
                            "classes}} (as written by `specsim acceptance import`)")
    if pick:
        if pick not in cat:
            raise ScenarioError(f"{where}.profile: {path_s} has no profile {pick!r} (has: "
                                f"{', '.join(sorted(map(str, cat)))})")
        return pick, cat[pick]
    if len(cat) != 1:
        raise ScenarioError(f"{where}.profile: {path_s} holds {len(cat)} profiles; name one as "
                            f"{path_s}#NAME (one of: {', '.join(sorted(map(str, cat)))})")
    name = next(iter(cat))
    return str(name), cat[name]


def parse_profile(name: str, entry: Any, where: str
                  ) -> tuple[dict[str, ClassAcceptance], ClassAcceptance | None]:
    """A catalog entry's classes (and its ``default`` class, if any)."""
    if not isinstance(entry, dict):
        raise ScenarioError(f"{where}: expected a mapping with classes, got {entry!r}")
    unknown = sorted(set(entry) - _ENTRY_KEYS, key=str)
    if unknown:
        raise ScenarioError(f"{where}.{unknown[0]}: unknown key (expected one of: "
                            f"{', '.join(sorted(_ENTRY_KEYS))})")
    src = str(entry.get("source", ""))
    temp = _number(f"{where}.temperature", entry.get("temperature", 0.0), 0.0, 10.0)
    cls_map = entry.get("classes")
    if not isinstance(cls_map, dict) or not cls_map:
        raise ScenarioError(f"{where}.classes: expected a mapping of workload class -> acceptance")
    classes: dict[str, ClassAcceptance] = {}
    default = None
    for cls, spec in cls_map.items():
        if isinstance(spec, dict):
            spec = {**spec, "source": spec.get("source", src)}
        parsed = class_acceptance(spec, f"{where}.classes.{cls}", temperature=temp)
        if cls == "default":
            default = parsed
        else:
            classes[str(cls)] = parsed
    return classes, default


# ---------------------------------------------------------------- the model


class AcceptanceModel:
    """Per-class acceptance with optional per-request variation and temperature shift.

    ``sample`` is the hot path: one keyed uniform per (request, step) and a comparison with the
    survival curve; no Python loop over requests.
    """

    def __init__(self, classes: dict[str, ClassAcceptance], default: ClassAcceptance | None,
                 concentration: float | None, temperature_sensitivity: float, seed: int,
                 name: str, drafter_multiplier: float = 1.0,
                 notes: list[str] | None = None) -> None:
        self.classes, self.default = classes, default
        self.concentration = concentration
        self.temperature_sensitivity = temperature_sensitivity
        self.seed, self.name = seed, name
        self.drafter_multiplier = drafter_multiplier
        self.notes: list[str] = list(notes or [])

    def for_class(self, cls: str) -> ClassAcceptance:
        if cls in self.classes:
            return self.classes[cls]
        if self.default is not None:
            return self.default
        raise ScenarioError(f"speculation.acceptance: no acceptance given for workload class "
                            f"{cls!r} (have: {', '.join(sorted(self.classes))}); add it or a "
                            "'default'")

    def sensitivity(self, acc: ClassAcceptance) -> float:
        """Fractional alpha drop from temperature 0 to 1: measured where the class has both."""
        return 1.0 - acc.t1_ratio if acc.t1_ratio is not None else self.temperature_sensitivity

    def request_scale(self, request_ids: np.ndarray, classes: np.ndarray,
                      temperatures: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per request: a class index and a multiplier on every position's alpha.

        The multiplier is the Beta-drawn alpha over the class mean (1 without variation),
        times (1 - s * T) / (1 - s * T_measured) with s the class's temperature sensitivity
        (measured, or the assumed default) and T_measured the temperature of its figures (a
        request without a temperature, NaN, is taken at T_measured), times the drafter
        precision's multiplier.
        """
        names = sorted(set(classes.tolist()))
        idx = np.searchsorted(np.array(names, dtype=object), classes)
        accs = [self.for_class(n) for n in names]
        mean = np.array([a.mean_alpha for a in accs])[idx]
        sens = np.array([self.sensitivity(a) for a in accs])[idx]
        t_meas = np.array([a.temperature for a in accs])[idx]
        scale = np.ones(len(request_ids))
        if self.concentration is not None:
            u = rng.uniform(rng.request_keys(self.seed, rng.STREAM_ALPHA, request_ids),
                            np.zeros(len(request_ids), dtype=np.uint64))
            m = np.clip(mean, 1e-6, 1 - 1e-6)
            from scipy.stats import beta as beta_dist  # only here: a quarter second to import

            drawn = beta_dist.ppf(np.clip(u, 1e-12, 1 - 1e-12), m * self.concentration,
                                  (1 - m) * self.concentration)
            scale = np.where(mean > 0, drawn / np.maximum(mean, 1e-12), 0.0)
        temps = np.asarray(temperatures, dtype=np.float64)
        temps = np.where(np.isnan(temps), t_meas, temps)
        scale = scale * (np.clip(1.0 - sens * temps, 0.0, None)
                         / np.maximum(1.0 - sens * t_meas, 1e-12))
        self._names = names
        return idx.astype(np.int64), scale * self.drafter_multiplier

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
                "drafter_alpha_multiplier", *_SPEC_KEYS}

# Leviathan et al. 2023 (arXiv 2211.17192): T5-XXL/T5-small EnDe alpha .75 at T=0, .62 at T=1
# (and CNNDM .65 -> .53): alpha falls by about 17% from temperature 0 to 1.
DEFAULT_TEMPERATURE_SENSITIVITY = 0.17

def drafter_multiplier(weights: str, where: str) -> tuple[float, str]:
    """(alpha multiplier, its source) for a drafter weight precision."""
    table = drafter_quantization_table()
    entry = table.get(weights)
    seen = set()
    while isinstance(entry, dict) and "alias" in entry and entry["alias"] not in seen:
        seen.add(entry["alias"])
        entry = table.get(entry["alias"])
    if not isinstance(entry, dict):
        return 1.0, (f"no drafter-precision multiplier is known for {weights!r} (table: "
                     f"{', '.join(sorted(table))}): 1.0 assumed")
    m = _number(f"{where} {weights}.alpha_multiplier", entry.get("alpha_multiplier"), 0.0, 1.0)
    return m, str(entry.get("source", "assumed"))


def build_acceptance(section: Any, seed: int, where: str = "speculation.acceptance", *,
                     speculation: Any = None, base_dir: Path | None = None,
                     notes: list[str] | None = None) -> AcceptanceModel:
    """From the scenario: a bundled profile by name, a profile file (``profile: x.yaml``),
    inline forms, or per-class forms.

    ``speculation`` (the scenario's speculation section) gives the draft length k, the method
    and the drafter precision: with it, uses of a profile at a k other than its measured one,
    a method other than the profile's, and the drafter-precision multiplier are stated in
    ``model.notes`` (and appended to ``notes``, the run's notes, when given).
    """
    if not isinstance(section, dict):
        raise ScenarioError(f"{where}: expected a mapping, got {section!r}")
    unknown = sorted(set(section) - _ACCEPT_KEYS, key=str)
    if unknown:
        raise ScenarioError(f"{where}.{unknown[0]}: unknown key (expected one of: "
                            f"{', '.join(sorted(_ACCEPT_KEYS))})")
    classes: dict[str, ClassAcceptance] = {}
    default: ClassAcceptance | None = None
    name = "inline"
    entry: dict[str, Any] = {}
    if "profile" in section:
        pname = section["profile"]
        if isinstance(pname, str) and _is_path(pname):
            name, entry = load_profile_file(pname, base_dir, where)
            label = f"acceptance profile {pname.partition('#')[0]}:{name}"
        else:
            cat = profile_catalog()
            if not isinstance(pname, str) or pname not in cat:
                raise ScenarioError(f"{where}.profile: unknown acceptance profile {pname!r} "
                                    f"(bundled: {', '.join(sorted(cat))}; or a YAML path "
                                    "written by `specsim acceptance import`)")
            name, entry = pname, cat[pname]
            label = f"acceptance profile {pname}"
        classes, default = parse_profile(name, entry, label)
    inline = {k: section[k] for k in _SPEC_KEYS if k in section}
    if set(inline) & set(_FORMS):
        default = class_acceptance(inline, where)
    elif set(inline) - {"source", "notes"}:
        raise ScenarioError(f"{where}.{sorted(set(inline) - {'source', 'notes'})[0]}: given "
                            "without an acceptance form (alpha, tau, ...)")
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
    all_classes = {**classes, **({"default": default} if default is not None else {})}
    for cls, acc in all_classes.items():
        if acc.t1_ratio is None and sens * acc.temperature >= 1.0:
            raise ScenarioError(f"{where}: class {cls} was measured at temperature "
                                f"{acc.temperature:g}, where temperature_sensitivity {sens:g} "
                                "leaves no acceptance to scale from")
    mult, run_notes = 1.0, []
    method = speculation.method if speculation is not None else None
    if speculation is not None and method != "none":
        k = int(speculation.k or 0)
        pmethod = entry.get("method")
        if pmethod and pmethod != method:
            run_notes.append(f"acceptance profile {name} was measured with {pmethod}; applied "
                             f"here to method {method}")
        for cls, acc in all_classes.items():
            if k > 0:
                text, derived = acc.derivation(k)
                if derived:
                    run_notes.append(f"acceptance {name}.{cls}: {text}")
            if acc.t1_ratio is not None:
                run_notes.append(f"acceptance {name}.{cls}: measured at temperature 0 "
                                 f"({acc.summary}) and 1 ({acc.t1_summary}): alpha x "
                                 f"{acc.t1_ratio:.3f} at temperature 1, linear in between")
            elif acc.temperature:
                run_notes.append(f"acceptance {name}.{cls}: measured at temperature "
                                 f"{acc.temperature:g}; other temperatures scale alpha by "
                                 f"(1 - {sens:g} T) / (1 - {sens:g} x {acc.temperature:g}) "
                                 "(temperature_sensitivity, assumed)")
        weights = str(speculation.drafter_quantization.weights)
        if "drafter_alpha_multiplier" in section:
            mult = _number(f"{where}.drafter_alpha_multiplier",
                           section["drafter_alpha_multiplier"], 0.0, 1.0)
            run_notes.append(f"drafter weights {weights}: alpha x {mult:g} on every position "
                             f"({where}.drafter_alpha_multiplier, given)")
        elif method in DRAFTERS and DRAFTERS.info(method).has_weights and weights != "bf16":
            # a network drafter (its registration says so); a lookup has no weights
            mult, src = drafter_multiplier(weights, "drafter_quantization.yaml")
            run_notes.append(f"drafter weights {weights}: alpha x {mult:g} on every position "
                             f"({src})")
    elif "drafter_alpha_multiplier" in section:
        mult = _number(f"{where}.drafter_alpha_multiplier", section["drafter_alpha_multiplier"],
                       0.0, 1.0)
    if notes is not None:
        notes.extend(run_notes)
    return AcceptanceModel(classes, default, conc, sens, seed, name, mult, run_notes)
