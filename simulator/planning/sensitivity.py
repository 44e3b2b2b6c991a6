"""Sensitivity and break-even: which uncertain input decides a run's answer, and where it flips.

A run's verdict ("speculate: TPOT 1.4x better") rests on inputs that are not known exactly:
the cost model's fitted parameters, speculation's own costs, each class's acceptance, the
price and the power. ``inputs`` lists them for a scenario, each with its nominal value, a
low/high band and where the band comes from (``assumed`` where nothing measured backs it);
``Model`` re-simulates the scenario with any of them moved (through scenario keys, or a
calibration profile written with the parameter changed) and reads one output from the run.

Rules:
1. The output is a metric of the scenario (``--absolute``), or by default the *gain* of the
   scenario over a second choice (``versus``: speculation off unless given): the versus
   metric over the scenario's for a lower-is-better metric (TPOT, TTFT, $/M tokens,
   J/token), the scenario's over the versus one for a higher-is-better one (goodput,
   throughput); above 1 the scenario's choice is better.
2. Common random numbers: every run uses the scenario's seed and one trace built once, so
   two runs differ only by the input moved (acceptance draws are keyed per request and step).
3. One at a time (tornado): each input at its low and its high, the others nominal (the
   scenario as given); ranked by the swing |out(high) - out(low)|.
4. Joint: Morris elementary effects (mu*, sigma) or Sobol first-order / total indices
   (SALib), every input drawn inside its band. Small samples by default (``samples``: Morris
   trajectories, Sobol's base N): seconds for one scenario on two cores, with SALib's
   bootstrap confidence printed beside each index because they are rough.
5. Break-even (a gain only): the input's value at which the gain is 1, by bisection with
   re-simulation between the ends of the input's search range (wider than its band: the
   physically possible values); ``None`` with the reason when the gain keeps its side of 1
   over the whole range. ``within_band`` says whether the flip lies inside the band, i.e.
   whether the input's own uncertainty can flip the decision.
6. An acceptance input replaces its class's curve by the i.i.d. curve with that tau at the
   scenario's k (``speculation.acceptance.by_class``); its nominal is the class's tau at k
   under the scenario's profile, and its band the posterior's P10-P90 where the profile has a
   ``.posterior.yaml`` sidecar (``speculation/evidence.py``), else +-15% (assumed).
7. A plan's answer (``output="capacity"`` with ``slos``): the largest arrival rate one
   replica sustains within the SLOs, found by the planner's own bisection
   (``plan.Planner.plan_one``, tolerance ``CAPACITY_TOL``) from a quarter of the scenario's
   rate up to 16 times it, with the inputs moved; its gain is the scenario's capacity over
   the versus choice's (above 1: the scenario's choice serves more per replica). This is
   the number a fleet is sized by: "32.4 against 42.0 req/s per H100" and which input flips
   it.
"""

from __future__ import annotations

import hashlib
import math
import re
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from specsim.errors import ScenarioError

#: output name -> (label, unit, higher is better, RunMetrics reader)
OUTPUTS: dict[str, tuple[str, str, bool, Any]] = {
    "tpot_mean": ("TPOT mean", "s", False, lambda m: m.tpot_s.mean),
    "tpot_p50": ("TPOT P50", "s", False, lambda m: m.tpot_s.p50),
    "tpot_p99": ("TPOT P99", "s", False, lambda m: m.tpot_s.p99),
    "ttft_p99": ("TTFT P99", "s", False, lambda m: m.ttft_s.p99),
    "e2e_p99": ("E2E P99", "s", False, lambda m: m.e2e_s.p99),
    "goodput": ("goodput", "req/s", True, lambda m: m.goodput_requests_per_s),
    "throughput": ("throughput", "output tok/s", True,
                   lambda m: m.throughput_output_tokens_per_s),
    "usd_per_mtok": ("$/M output tokens", "$", False,
                     lambda m: m.cost_usd_per_million_output_tokens),
    "j_per_token": ("energy per output token", "J", False,
                    lambda m: m.energy_j_per_output_token),
    # rule 7: not a run's metric but the planner's answer, read by ``Model.capacity``
    "capacity": ("capacity per replica within the SLOs", "req/s", True, None),
}
#: capacity (rule 7): the planner's bisection tolerance (finer than plan's 10%: a
#: break-even on a step function needs it), and the rate range it searches, as multiples
#: of the scenario's own arrival rate
CAPACITY_TOL = 0.02
CAPACITY_RANGE = (0.25, 16.0)
#: seconds of arrivals per capacity probe at least (the planner's steady-state default)
CAPACITY_DURATION_S = 30.0
#: break-even bisection steps for a capacity (each step is a bisection of its own; a gain
#: within CAPACITY_TOL of 1 is as close as the capacity resolves)
CAPACITY_BISECT_STEPS = 10
METHODS = ("oat", "morris", "sobol")
#: default sample sizes (rule 4): Morris trajectories, Sobol base N (a power of two)
SAMPLES = {"morris": 8, "sobol": 8}
#: requests per run unless given: the percentiles settle, a run takes ~0.03 s compiled
REQUESTS = 300
#: acceptance band where no posterior exists (rule 6): assumed
TAU_BAND = 0.15
#: break-even bisection: steps at most, and the gain's distance from 1 that ends it early
BISECT_STEPS = 24
BISECT_TOL = 1e-4


@dataclass(frozen=True)
class Input:
    """One uncertain input: how it is applied, its nominal value, band and search range."""

    name: str
    kind: str  # "calibration" (a profile parameter) | "set" (a scenario key) | "tau" (a class)
    key: str  # the parameter, the dotted scenario key, or the class
    unit: str
    nominal: float
    low: float
    high: float
    lo_bound: float  # the break-even search range (rule 5)
    hi_bound: float
    source: str
    assumed: bool = False

    def row(self) -> dict[str, Any]:
        how = {"calibration": f"calibration parameter {self.key}",
               "set": f"--set {self.key}=V",
               "tau": f"speculation.acceptance.by_class.{self.key}: tau at k"}[self.kind]
        return {"input": self.name, "unit": self.unit, "applied_as": how,
                "nominal": self.nominal, "low": self.low, "high": self.high,
                "search_low": self.lo_bound, "search_high": self.hi_bound,
                "band_source": self.source, "assumed": self.assumed}


# ------------------------------------------------------------------ the inputs of a scenario

#: calibration parameters varied, with the band's source. ``rel``: a relative half-width;
#: ``holdout``: the profile's own held-out median error of that op group (fit_quality);
#: ``ratio``: (low, high) as multiples of the nominal.
_CAL_BANDS: dict[str, dict[str, Any]] = {
    "eta_compute": {"holdout": "linear", "unit": "share of peak",
                    "source": "the profile's held-out median error of linear layers "
                              "(fit_quality.holdouts, test)"},
    "eta_memory": {"holdout": "layer", "unit": "share of bandwidth",
                   "source": "the profile's held-out median error of one layer "
                             "(fit_quality.holdouts, test)"},
    # docs/fidelity.md: 40 us, 95% interval 0-0.40 ms (benchmarks/fidelity.py, 2026-12-06:
    # the refit with the runs' prompt cache and vLLM's output lag)
    "engine_fixed_s": {"abs": (0.0, 0.40e-3), "unit": "s",
                       "source": "the H100-SXM engine fit's 95% interval 0-0.40 ms around "
                                 "40 us (docs/fidelity.md, benchmarks/fidelity.py)"},
    "engine_per_seq_s": {"abs": (0.0, 23e-6), "unit": "s",
                         "source": "the H100-SXM engine fit's 95% interval 0-23 us per "
                                   "sequence around 11.4 us (docs/fidelity.md)"},
    # cost_models/data/spec_step_costs.yaml: vllm_49548_mrv2_skip_k0 0.11 ms (the nominal),
    # the spec path's own fixed cost fits 7 us (low), vllm_49548_dsd_k0_h100nvl 0.94 ms at
    # concurrency 2 (vLLM V1 dynamic SD at K=0: drafter pass and graph downgrade; high)
    "spec_step_overhead_s": {"abs": (7e-6, 0.94e-3), "unit": "s",
                             "source": "spec_step_costs.yaml: the spec path's own fixed cost "
                                       "7 us (low) to vLLM V1 idle speculation 0.94 ms "
                                       "(vllm#49548, H100 NVL, concurrency 2; high)"},
    # H100-SXM parameter_sources: "poorly identified"; no range published: assumed
    "draft_pass_overhead_s": {"ratio": (0.5, 1.5), "unit": "s",
                              "source": "assumed +-50% (fitted to SpecDecode-Bench draft "
                                        "passes, poorly identified)", "assumed": True},
    # H100-SXM parameter_sources: "range 30-116 us over the regimes"
    "draft_layer_overhead_s": {"abs": (30e-6, 116e-6), "unit": "s",
                               "source": "the fit's range over regimes, 30-116 us per layer "
                                         "(SpecDecode-Bench; spec_step_costs.yaml)"},
}
#: price band where the catalog's source gives no range, power band: assumed
PRICE_BAND = 0.25
POWER_BAND = 0.15


def _holdout_error(cal: Any, group: str) -> float | None:
    """The largest held-out median error (a fraction) of an op group in the profile."""
    fq = (cal.details or {}).get("fit_quality") or {}
    errs = []
    for h in fq.get("holdouts") or []:
        try:
            errs.append(float(h["test"][group]["median_ape_pct"]) / 100.0)
        except (KeyError, TypeError, ValueError):
            continue
    return max(errs) if errs else None


def calibration_inputs(cal: Any, speculating: bool) -> list[Input]:
    """The calibration parameters with a stated band (rule: only those the profile gives a
    value for; speculation's own costs only when the scenario speculates)."""
    vals = cal.values()
    out = []
    for name, spec in _CAL_BANDS.items():
        nominal = vals.get(name)
        if nominal is None:  # falls back to another parameter: not varied on its own
            continue
        if name.startswith(("spec_", "draft_")) and not speculating:
            continue
        assumed = bool(spec.get("assumed"))
        source = spec["source"]
        if "holdout" in spec:
            err = _holdout_error(cal, spec["holdout"])
            if err is None:
                err, source, assumed = 0.10, "assumed +-10% (the profile has no held-out " \
                    "errors)", True
            low, high = nominal * (1 - err), min(nominal * (1 + err), 1.5)
            lo_b, hi_b = nominal * 0.5, min(nominal * 1.5, 1.5)
        elif "ratio" in spec:
            a, b = spec["ratio"]
            low, high = nominal * a, nominal * b
            lo_b, hi_b = 0.0, max(high * 4, 1e-6)
        else:
            low, high = spec["abs"]
            low, high = min(low, nominal), max(high, nominal)
            lo_b, hi_b = 0.0, high * 4
        if high <= low:  # a parameter at 0 with a ratio band: nothing to vary
            continue
        out.append(Input(name, "calibration", name, spec["unit"], float(nominal), float(low),
                         float(high), float(lo_b), float(hi_b), source, assumed))
    return out


_RANGE = re.compile(r"range \$([0-9.]+)\s*-\s*\$?([0-9.]+)")


def cost_inputs(dep: Any) -> list[Input]:
    """Price (the catalog's range where its source gives one, with its date) and power."""
    hw, price = dep.hw, float(dep.price)
    m = _RANGE.search(getattr(hw, "source", "") or "")
    if m and dep.sc.cost.price_usd_per_hour is None:
        low, high = float(m.group(1)), float(m.group(2))
        src, assumed = f"{hw.name} catalog price range ${m.group(1)}-{m.group(2)} per " \
            f"device-hour ({hw.price_date})", False
    else:
        low, high = price * (1 - PRICE_BAND), price * (1 + PRICE_BAND)
        src, assumed = f"assumed +-{PRICE_BAND:.0%} around ${price:g} ({hw.price_date})", True
    out = [Input("price_usd_per_hour", "set", "cost.price_usd_per_hour", "$/device-hour",
                 price, low, high, price / 4, price * 4, src, assumed)]
    pmax, pidle = float(dep.power_max), float(dep.power_idle)
    lo_p = max(pmax * (1 - POWER_BAND), pidle)
    out.append(Input("power_max_w", "set", "cost.power_max_w", "W", pmax, lo_p,
                     pmax * (1 + POWER_BAND), max(pidle, pmax / 2), pmax * 2,
                     f"assumed +-{POWER_BAND:.0%} around {hw.name}'s {pmax:g} W (a board "
                     "limit, not a measured draw)", True))
    return out


def tau_inputs(dep: Any, classes: list[str], base_dir: Path,
               posteriors: dict[str, Any] | None = None) -> list[Input]:
    """Each class's tau at the scenario's k (rule 6); ``posteriors`` gets each class's
    posterior where the profile has one (for drawing from it)."""
    k = int(dep.sc.speculation.k)
    if not dep.speculating or k < 1:
        return []
    beliefs: dict[str, Any] = {}
    acc = dep.sc.speculation.acceptance or {}
    ref = acc.get("profile") if isinstance(acc, dict) else None
    if isinstance(ref, str):
        from specsim.simulator.speculation.evidence import load_profile_beliefs

        try:
            beliefs = {b.key.cls: b for b in load_profile_beliefs(ref, base_dir=base_dir)}
        except ScenarioError:
            beliefs = {}
    out = []
    for c in classes:
        try:
            tau = float(dep.acceptance.for_class(c).tau_at(k))
        except ScenarioError:
            continue
        b = beliefs.get(c)
        if b is not None and getattr(b, "kind", "") == "posterior":  # not a point value
            lo, _, hi = b.tau_band(k, seed=int(dep.seed))
            src, assumed = f"posterior P10-P90 at k={k} (the profile's sidecar)", False
            if posteriors is not None:
                posteriors[c] = b
        else:
            lo, hi = tau * (1 - TAU_BAND), tau * (1 + TAU_BAND)
            src, assumed = f"assumed +-{TAU_BAND:.0%} (point value, no posterior)", True
        lo, hi = max(1.0, min(lo, tau)), min(float(k + 1), max(hi, tau))
        out.append(Input(f"tau.{c}", "tau", c, "tokens/step", tau, lo, hi, 1.0,
                         float(k + 1), src, assumed))
    return out


# ------------------------------------------------------------------ re-simulation


@dataclass
class Model:
    """A scenario that can be re-run with inputs moved; the output of each run (rule 1)."""

    scenario: Any  # path or dict
    output: str = "tpot_p99"
    versus: dict[str, Any] | None = field(default_factory=lambda: {"speculation.method": "none"})
    overrides: dict[str, Any] | list[str] = field(default_factory=dict)  # as --set gives
    requests: int | None = REQUESTS
    seed: int | None = None
    slos: dict[str, float] | None = None  # rule 7: the SLOs a capacity is measured within

    def __post_init__(self) -> None:
        from specsim.simulator.api import build_trace, in_file, load_scenario
        from specsim.simulator.cluster.deployment import Deployment
        from specsim.simulator.execution.kernel import prefer_compiled

        if self.output not in OUTPUTS:
            raise ScenarioError(f"--output {self.output}: expected one of "
                                f"{', '.join(OUTPUTS)}")
        if (self.output == "capacity") != bool(self.slos):
            raise ScenarioError("--slo: a capacity (--output capacity) is measured within SLOs "
                                "(e.g. --slo tpot_p99=0.02), and only a capacity is")
        prefer_compiled()  # many runs in one process: the compile pays for itself
        from specsim.simulator.scenario.config import parse_override

        base = (dict(self.overrides) if isinstance(self.overrides, dict)
                else {".".join(map(str, k)): v
                      for k, v in map(parse_override, self.overrides or ())})
        if self.requests is not None:
            base["workload.max_requests"] = int(self.requests)
        base.update({"simulation.record_iterations": False, "simulation.progress": False})
        self.base = base
        sc, self.base_dir, origin = load_scenario(self.scenario, base, self.seed)
        if sc.disaggregation is not None:
            raise ScenarioError(f"{origin}: disaggregation: sensitivity and advise take a "
                                "mixed fleet (one pool) for now")
        with in_file(origin):
            self.dep = Deployment(sc, self.base_dir)
            self.trace = build_trace(sc, self.base_dir, self.dep.model.max_context)
        self.sc, self.origin = sc, origin
        if self.output == "capacity" and not (sc.workload or {}).get("synthetic"):
            raise ScenarioError(f"{origin}: workload: a capacity is found by varying the "
                                "synthetic arrival rate (workload.synthetic); this scenario "
                                "replays a trace")
        if self.versus is not None and not self.dep.speculating \
                and self.versus.get("speculation.method") == "none":
            self.versus = None  # nothing to compare: the scenario does not speculate
        self.classes = sorted(map(str, self.trace["workload_class"].unique()))
        self.posteriors: dict[str, Any] = {}  # class -> acceptance posterior (rule 6)
        self.inputs = (calibration_inputs(self.dep.calibration, self.dep.speculating)
                       + tau_inputs(self.dep, self.classes, self.base_dir, self.posteriors)
                       + cost_inputs(self.dep))
        self._tmp = Path(tempfile.mkdtemp(prefix="specsim-sensitivity-"))
        self._cache: dict[Any, Any] = {}
        self.runs = 0

    def close(self) -> None:
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def is_gain(self) -> bool:
        return self.versus is not None

    def label(self) -> str:
        name, unit, _, _ = OUTPUTS[self.output]
        if self.is_gain:
            what = ", ".join(f"{k}={v}" for k, v in self.versus.items())
            return f"{name} gain over {what} (x, above 1: the scenario's choice is better)"
        return f"{name} ({unit})"

    def input(self, name: str) -> Input:
        for i in self.inputs:
            if i.name == name:
                return i
        raise ScenarioError(f"--input {name}: no such input (have: "
                            f"{', '.join(i.name for i in self.inputs)})")

    # -- applying inputs

    def _profile(self, changes: dict[str, float]) -> str:
        """A calibration profile file: the scenario's, with ``changes`` to its parameters."""
        import yaml

        cal = self.dep.calibration
        fitted = {k: v for k, v in cal.values().items() if v is not None}
        fitted.update(changes)
        doc = {"name": cal.name, "hardware": cal.hardware or self.dep.hw.name,
               "source": f"{cal.source} (sensitivity: {', '.join(sorted(changes))} moved)",
               "fitted": {k: float(v) for k, v in fitted.items()}}
        text = yaml.safe_dump(doc, sort_keys=True)
        path = self._tmp / f"cal-{hashlib.sha1(text.encode()).hexdigest()[:16]}.yaml"
        if not path.exists():
            path.write_text(text)
        return str(path)

    def settings_overrides(self, settings: dict[str, float], speculating: bool = True
                           ) -> dict[str, Any]:
        """Scenario overrides that put ``settings`` (input name -> value) in place."""
        over: dict[str, Any] = {}
        cal: dict[str, float] = {}
        k = int(self.sc.speculation.k)
        for name, v in settings.items():
            inp = self.input(name)
            if inp.kind == "calibration":
                if speculating or not inp.key.startswith(("spec_", "draft_")):
                    cal[inp.key] = float(v)  # speculation's own costs: none without it
            elif inp.kind == "set":
                over[inp.key] = float(v)
            elif speculating:
                over[f"speculation.acceptance.by_class.{inp.key}"] = {
                    "tau": float(min(max(v, 1.0), k + 1)), "at_k": k,
                    "source": "sensitivity: tau moved"}
        if cal:
            over["calibration"] = self._profile(cal)
        return over

    def run(self, extra: dict[str, Any]) -> Any:
        """One run's RunMetrics and requests (cached by its overrides)."""
        from specsim.simulator.api import run_scenario
        from specsim.simulator.metrics.run_metrics import RunMetrics

        over = {**self.base, **extra}
        key = repr(sorted(over.items(), key=lambda kv: kv[0]))
        if key not in self._cache:
            same = not any(k == "seed" or k.startswith("workload.") for k in extra)
            res = run_scenario(self.scenario, overrides=over, seed=self.seed,
                               trace=self.trace if same else None)  # rule 2
            self.runs += 1
            self._cache[key] = (RunMetrics.from_summary(res.metrics), res.requests)
        return self._cache[key]

    def capacity(self, extra: dict[str, Any]) -> float:
        """Rule 7: the planner's capacity per replica with ``extra`` applied (cached by its
        overrides; NaN where even the lowest rate misses an SLO)."""
        from specsim.simulator.planning.plan import Planner

        over = {k: v for k, v in {**self.base, **extra}.items()
                if k != "workload.max_requests"}  # the planner sizes each probe itself
        key = ("capacity", repr(sorted(over.items(), key=lambda kv: kv[0])))
        if key not in self._cache:
            rate = float(self.sc.workload["synthetic"]["arrival"]["rate"])
            lo, hi = CAPACITY_RANGE
            planner = Planner(self.scenario, self.slos, qps=hi * rate,
                              requests=int(self.requests or REQUESTS),
                              rel_tol=CAPACITY_TOL, seed=self.seed, first_rate=lo * rate,
                              duration_s=CAPACITY_DURATION_S)
            row = planner.plan_one(over)
            self.runs += row.probes
            self._cache[key] = (float(row.replica_rate) if row.replica_rate is not None
                                else math.nan)
        return self._cache[key]

    def metric(self, m: Any) -> float:
        v = OUTPUTS[self.output][3](m)
        return math.nan if v is None else float(v)

    def evaluate(self, settings: dict[str, float] | None = None,
                 extra: dict[str, Any] | None = None) -> float:
        """The output with ``settings`` applied (rule 1)."""
        settings = settings or {}
        extra = extra or {}
        one = self.capacity if self.output == "capacity" else (
            lambda over: self.metric(self.run(over)[0]))
        a = one({**extra, **self.settings_overrides(settings)})
        if not self.is_gain:
            return a
        spec_v = self.versus.get("speculation.method", "x") != "none"
        b = one({**extra, **self.settings_overrides(settings, spec_v), **self.versus})
        higher = OUTPUTS[self.output][2]
        num, den = (a, b) if higher else (b, a)
        return num / den if den > 0 else math.nan


# ------------------------------------------------------------------ one at a time


@dataclass
class BreakEven:
    """Where the gain crosses 1 for one input (rule 5); ``value`` None with ``reason``."""

    value: float | None
    gain: float | None = None
    within_band: bool = False
    reason: str = ""
    runs: int = 0


@dataclass
class Bar:
    """One input's tornado bar."""

    input: Input
    at_low: float
    at_high: float
    break_even: BreakEven | None = None
    joint: dict[str, float] = field(default_factory=dict)

    @property
    def swing(self) -> float:
        return abs(self.at_high - self.at_low)


def fmt_value(inp: Input, v: float) -> str:
    """A value of an input in its unit (times in ms)."""
    if inp.unit == "s":
        return f"{v * 1e3:.4g} ms"
    return f"{v:.4g} {inp.unit}" if inp.unit in ("W", "tokens/step") else f"{v:.4g}"


def break_even(model: Model, inp: Input, steps: int | None = None) -> BreakEven:
    """The input's value where the gain is 1, by bisection with re-simulation (rule 5;
    fewer steps for a capacity, whose own resolution is ``CAPACITY_TOL``)."""
    if steps is None:
        steps = CAPACITY_BISECT_STEPS if model.output == "capacity" else BISECT_STEPS
    if not model.is_gain:
        return BreakEven(None, reason="no second choice to break even with (--absolute)")
    before = model.runs
    lo, hi = inp.lo_bound, inp.hi_bound
    f_lo = model.evaluate({inp.name: lo}) - 1.0
    f_hi = model.evaluate({inp.name: hi}) - 1.0
    if not (math.isfinite(f_lo) and math.isfinite(f_hi)):
        return BreakEven(None, reason="the output is undefined at an end of the range",
                         runs=model.runs - before)
    if f_lo == f_hi:
        return BreakEven(None, reason=f"does not move the output from {fmt_value(inp, lo)} to "
                         f"{fmt_value(inp, hi)}", runs=model.runs - before)
    if (f_lo > 0) == (f_hi > 0):
        side = "above" if f_lo > 0 else "below"
        return BreakEven(None, reason=f"the gain stays {side} 1 ({f_lo + 1:.3f} to "
                         f"{f_hi + 1:.3f}) from {fmt_value(inp, lo)} to {fmt_value(inp, hi)}",
                         runs=model.runs - before)
    for _ in range(steps):
        if min(abs(f_lo), abs(f_hi)) < BISECT_TOL:
            break
        mid = 0.5 * (lo + hi)
        f_mid = model.evaluate({inp.name: mid}) - 1.0
        if not math.isfinite(f_mid):
            break
        if (f_mid > 0) == (f_lo > 0):
            lo, f_lo = mid, f_mid
        else:
            hi, f_hi = mid, f_mid
    v, f = (lo, f_lo) if abs(f_lo) <= abs(f_hi) else (hi, f_hi)
    return BreakEven(v, f + 1.0, inp.low <= v <= inp.high,
                     f"the gain is {f + 1:.4f} at {fmt_value(inp, v)} (bracket {fmt_value(inp, lo)} to "
                     f"{fmt_value(inp, hi)})", model.runs - before)


def tornado(model: Model, with_break_even: bool = True, inputs: list[Input] | None = None,
            top: int | None = None) -> tuple[float, list[Bar]]:
    """The nominal output and one bar per input (``inputs``, default all), largest swing
    first (rule 3); break-evens for the ``top`` largest (default all)."""
    nominal = model.evaluate({})
    bars = [Bar(i, model.evaluate({i.name: i.low}), model.evaluate({i.name: i.high}))
            for i in (model.inputs if inputs is None else inputs)]
    bars.sort(key=lambda b: (-(b.swing if math.isfinite(b.swing) else -1), b.input.name))
    if with_break_even and model.is_gain:
        for b in bars[:top]:
            b.break_even = break_even(model, b.input)
    return nominal, bars


# ------------------------------------------------------------------ joint (SALib)


def joint(model: Model, method: str, samples: int | None = None, seed: int = 0
          ) -> dict[str, dict[str, float]]:
    """Morris (mu*, sigma) or Sobol (S1, ST with their confidence) per input (rule 4)."""
    if method not in ("morris", "sobol"):
        raise ScenarioError(f"--method {method}: expected one of {', '.join(METHODS)}")
    n = samples or SAMPLES[method]
    names = [i.name for i in model.inputs]
    problem = {"num_vars": len(names), "names": names,
               "bounds": [[i.low, i.high] for i in model.inputs]}
    if method == "morris":
        from SALib.analyze import morris as ma
        from SALib.sample import morris as ms

        x = ms.sample(problem, n, num_levels=4, seed=seed)
    else:
        from SALib.analyze import sobol as sa
        from SALib.sample import sobol as ss

        if n & (n - 1):
            raise ScenarioError(f"--samples {n}: Sobol needs a power of two")
        x = ss.sample(problem, n, calc_second_order=False, seed=seed)
    y = np.array([model.evaluate(dict(zip(names, map(float, row), strict=True))) for row in x])
    if not np.all(np.isfinite(y)):
        raise ScenarioError(f"{model.origin}: the output is undefined in some runs (e.g. no "
                            "request completed): choose another --output")
    if method == "morris":
        r = ma.analyze(problem, x, y, num_levels=4, seed=seed)
        return {nm: {"mu_star": float(r["mu_star"][i]), "sigma": float(r["sigma"][i]),
                     "mu_star_conf": float(r["mu_star_conf"][i])}
                for i, nm in enumerate(names)}
    r = sa.analyze(problem, y, calc_second_order=False, seed=seed)
    return {nm: {"S1": float(r["S1"][i]), "S1_conf": float(r["S1_conf"][i]),
                 "ST": float(r["ST"][i]), "ST_conf": float(r["ST_conf"][i])}
            for i, nm in enumerate(names)}


# ------------------------------------------------------------------ the analysis


@dataclass
class Analysis:
    """A tornado (with break-evens for a gain) and, optionally, joint indices."""

    label: str
    output: str
    nominal: float
    bars: list[Bar]
    method: str
    runs: int
    samples: int | None = None
    is_gain: bool = False

    def frame(self) -> Any:
        import pandas as pd

        rows = []
        for rank, b in enumerate(self.bars, 1):
            be = b.break_even
            rows.append({"rank": rank, **b.input.row(), "output": self.output,
                         "output_nominal": self.nominal, "output_at_low": b.at_low,
                         "output_at_high": b.at_high, "swing": b.swing,
                         "break_even": None if be is None else be.value,
                         "break_even_gain": None if be is None else be.gain,
                         "break_even_within_band": None if be is None or be.value is None
                         else be.within_band,
                         "break_even_note": "" if be is None else be.reason, **b.joint})
        return pd.DataFrame(rows)

    def flips(self) -> list[Bar]:
        """Inputs whose own band holds a break-even: their uncertainty can flip the verdict."""
        return [b for b in self.bars if b.break_even is not None
                and b.break_even.value is not None and b.break_even.within_band]


def analyse(model: Model, method: str = "oat", samples: int | None = None,
            break_evens: bool = True) -> Analysis:
    if method not in METHODS:
        raise ScenarioError(f"--method {method}: expected one of {', '.join(METHODS)}")
    nominal, bars = tornado(model, break_evens)
    if method != "oat":
        idx = joint(model, method, samples, seed=int(model.sc.seed))
        bars = [replace(b, joint=idx[b.input.name]) for b in bars]
    return Analysis(model.label(), model.output, nominal, bars, method, model.runs,
                    samples or SAMPLES.get(method), model.is_gain)


def tornado_png(an: Analysis, path: Path, title: str = "") -> None:
    """Bars from the output at each input's low to its high, around the nominal output."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = list(reversed(an.bars))  # largest on top
    fig, ax = plt.subplots(figsize=(8.5, 0.45 * len(bars) + 1.8))
    for y, b in enumerate(bars):
        lo, hi = b.at_low, b.at_high
        ax.barh(y, lo - an.nominal, left=an.nominal, color="#4c72b0", height=0.6,
                label="input at its low" if y == 0 else None)
        ax.barh(y, hi - an.nominal, left=an.nominal, color="#dd8452", height=0.6,
                label="input at its high" if y == 0 else None)
    ax.set_yticks(range(len(bars)))
    ax.set_yticklabels([f"{b.input.name} [{fmt_value(b.input, b.input.low)} .. "
                        f"{fmt_value(b.input, b.input.high)}]" for b in bars], fontsize=8)
    ax.axvline(an.nominal, color="black", linewidth=1, label=f"nominal {an.nominal:.4g}")
    if an.is_gain:
        ax.axvline(1.0, color="red", linestyle="--", linewidth=1, label="gain 1 (break-even)")
    import textwrap

    ax.set_xlabel("\n".join(textwrap.wrap(an.label, 70)), fontsize=9)
    ax.set_title(title or "one at a time: output at each input's low and high")
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def text_table(an: Analysis) -> str:
    """The tornado as a plain table (stdout, report.md)."""
    head = ("| rank | input | nominal | low .. high | output at low | at high | break-even | "
            "band source |")
    rows = [head, "|---:|---|---:|---|---:|---:|---|---|"]
    for r, b in enumerate(an.bars, 1):
        i, be = b.input, b.break_even
        if be is None:
            bev = "-"
        elif be.value is None:
            bev = f"none: {be.reason}"
        else:
            bev = f"{fmt_value(i, be.value)}" + (" (inside the band)" if be.within_band else
                                              " (outside the band)")
        rows.append(f"| {r} | {i.name} | {fmt_value(i, i.nominal)} | {fmt_value(i, i.low)} .. "
                    f"{fmt_value(i, i.high)} | {b.at_low:.4g} | {b.at_high:.4g} | {bev} | "
                    f"{i.source} |")
    return "\n".join(rows)
