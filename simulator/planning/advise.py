"""``specsim advise``: should each traffic class speculate, with what, at this load, and how
sure is that.

For a scenario and a space of speculation choices (default: no speculation against the
scenario's drafter at k = 2, 4, 6 and the scenario's own k, static; a scenario whose policy
picks k per row is also a candidate as given), per workload class:

1. **Choice.** Every candidate runs once on the same trace and seed (common random
   numbers); a class's gain of a candidate is its mean TPOT without speculation over its
   mean TPOT with it. The class speculates with the candidate of the largest gain when that
   gain is above 1 and the class's goodput is not lower than without speculation (rule:
   faster and no fewer requests within the SLOs); otherwise it does not. Classes that pick
   different candidates give a per-class drafter mix (``speculation.per_class``). Every class
   ran every candidate in the same batch: a mix is not simulated as such (said on the page).
2. **Band.** P10-P90 of each class's gain in TPOT, goodput, $/M tokens and J/token over
   ``draws`` runs: run d uses seed + d (another trace and other acceptance draws) and every
   class's tau drawn from its posterior (a ``.posterior.yaml`` sidecar) or uniformly within
   +-15% of its point value (assumed, labelled), stratified (one draw per 1/draws of
   probability); the chosen candidate and no speculation run
   with the same seed and taus in each draw. $/M tokens and J/token are the fleet's (classes
   share every batch), so each class shows the run's.
3. **Load.** The chosen candidate against none at arrival rates from 1/4 to 16 times the
   scenario's (``workload.qps``; geometric grid; a synthetic workload runs at least 30 s of
   arrivals at each, as the planner's probes); the load where a class's gain crosses 1 is
   interpolated in log rate between the two grid points that bracket it, or none (the gain
   keeps its side of 1 over the grid).
4. **Drivers.** The tornado and break-evens of ``planning/sensitivity.py`` for the TPOT-mean
   gain of the most chosen speculating candidate over none.
5. **A/B.** ``planning/ab_sizing.py`` from the band's TPOT-gain draws, each class's rate in
   the trace, its TPOT coefficient of variation without speculation (arm A) and with the
   chosen candidate (arm B), both as simulated at the nominal inputs.
6. **Flags.** The chosen candidate as vLLM's ``--speculative-config`` JSON and SGLang's
   ``--speculative-*`` flags, the names from each drafter's registration (``vllm``,
   ``sglang``), checked by mapping them back (``speculation/engine_config.py``).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specsim.errors import ScenarioError

#: default k values tried with the scenario's drafter (plus the scenario's own k)
DEFAULT_KS = (2, 4, 6)
#: band draws (seeds), load grid (multiples of the scenario's rate)
DRAWS = 8
LOAD_FACTORS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
LOAD_KEY = "workload.qps"
#: seconds of arrivals at least per load point (rule 3), as the planner's probes (plan.py)
LOAD_SECONDS = 30.0
#: ... capped (a load 16 times a saturated scenario's only queues: a few seconds tell)
LOAD_MAX_REQUESTS = 3000
NONE = {"speculation.method": "none"}
METRICS = ("tpot", "goodput", "usd_per_mtok", "j_per_token")


def default_space(sc: Any) -> list[dict[str, Any]]:
    """No speculation, and the scenario's drafter at k = 2, 4, 6 and its own k."""
    method = sc.speculation.method
    if method == "none":
        raise ScenarioError("speculation.method: none, so advise has no drafter to try: give "
                            "--space with speculation.method (and k) values")
    ks = sorted({*DEFAULT_KS, int(sc.speculation.k)} - {0})
    if sc.speculation.policy == "static":
        return [dict(NONE)] + [{"speculation.method": method, "speculation.k": k} for k in ks]
    # a policy that picks k per row: the scenario as given, against static k values
    return [dict(NONE), {}] + [{"speculation.method": method, "speculation.policy": "static",
                                "speculation.policy_params": None, "speculation.k": k}
                               for k in ks]


def space_candidates(space: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """A --space file's points, with no speculation added if absent."""
    from specsim.simulator.planning.plan import space_points

    pts = space_points(space)
    if not any(_is_none(p) for p in pts):
        pts = [dict(NONE)] + pts
    return pts


def _is_none(cfg: dict[str, Any]) -> bool:
    return cfg.get("speculation.method") == "none" or cfg.get("speculation.k") == 0


def label(cfg: dict[str, Any]) -> str:
    if _is_none(cfg):
        return "no speculation"
    if not cfg:
        return "the scenario as given"
    return ", ".join(f"{k.removeprefix('speculation.')}={v}" for k, v in cfg.items()
                     if v is not None)


# ------------------------------------------------------------------ per-class figures


@dataclass
class ClassFigures:
    tpot_mean: float
    goodput: float
    completed: int
    tpot_cv: float


def class_figures(requests: Any, sc: Any, sim_time: float) -> dict[str, ClassFigures]:
    """Each class's mean TPOT, goodput (completed within the SLOs per simulated second),
    completed requests and TPOT CV, from a run's requests table."""
    out = {}
    ttft_slo, tpot_slo = sc.slo.ttft_s, sc.slo.tpot_s
    for cls, g in requests.groupby(requests["workload_class"].astype(str)):
        done = g[g["status"].astype(str) == "completed"]
        tp = np.asarray(done["tpot_s"], float)
        tp = tp[np.isfinite(tp) & (tp > 0)]
        ok = np.ones(len(done), bool)
        if tpot_slo is not None:
            ok &= np.nan_to_num(np.asarray(done["tpot_s"], float), nan=0.0) <= tpot_slo
        if ttft_slo is not None:
            ok &= np.asarray(done["ttft_s"], float) <= ttft_slo
        out[str(cls)] = ClassFigures(float(tp.mean()) if tp.size else math.nan,
                                     float(ok.sum()) / sim_time if sim_time > 0 else math.nan,
                                     len(done),
                                     float(tp.std(ddof=1) / tp.mean()) if tp.size > 1 else 0.0)
    return out


def gains(spec: tuple[Any, Any], base: tuple[Any, Any], sc: Any) -> dict[str, dict[str, float]]:
    """Per class: gains of the speculative run over the baseline (above 1: speculation
    better) in TPOT, goodput, $/M tokens and J/token (the last two the fleet's)."""
    (ms, rs), (mb, rb) = spec, base
    fs = class_figures(rs, sc, float(ms.simulated_time_s or 0))
    fb = class_figures(rb, sc, float(mb.simulated_time_s or 0))

    def ratio(a: float | None, b: float | None) -> float:
        if a is None or b is None or not (a > 0 and b > 0):
            return math.nan
        return float(a) / float(b)

    usd = ratio(mb.cost_usd_per_million_output_tokens, ms.cost_usd_per_million_output_tokens)
    joule = ratio(mb.energy_j_per_output_token, ms.energy_j_per_output_token)
    out = {}
    for c in fb:
        if c not in fs:
            continue
        out[c] = {"tpot": ratio(fb[c].tpot_mean, fs[c].tpot_mean),
                  "goodput": ratio(fs[c].goodput, fb[c].goodput)
                  if fb[c].goodput > 0 else (math.inf if fs[c].goodput > 0 else 1.0),
                  "usd_per_mtok": usd, "j_per_token": joule}
    return out


# ------------------------------------------------------------------ engine flags


def engine_flags(cfg: dict[str, Any], sc: Any) -> dict[str, Any]:
    """vLLM ``--speculative-config`` JSON and SGLang flags for a chain candidate."""
    from specsim.simulator.registry import DRAFTERS

    if _is_none(cfg):
        return {"vllm": "no --speculative-config", "sglang": "no --speculative-algorithm"}
    method = cfg.get("speculation.method", sc.speculation.method)
    k = int(cfg.get("speculation.k", sc.speculation.k))
    info = DRAFTERS.info(method)
    drafter = cfg.get("speculation.drafter", sc.speculation.drafter)
    out: dict[str, Any] = {}
    policy = cfg.get("speculation.policy", sc.speculation.policy)
    if policy != "static":
        out["note"] = (f"specsim's {policy} policy picks k per row up to {k}: the flags give "
                       "k; the engine's own dynamic speculation, if any, is configured apart")
    if info.vllm:
        name = method if method in info.vllm else info.vllm[0]
        conf: dict[str, Any] = {"method": name, "num_speculative_tokens": k}
        if info.draft_model:
            conf["model"] = str(drafter or "<draft model path>")
        elif info.has_weights:
            conf["model"] = f"<{method} head trained for {sc.model}>"
        out["vllm"] = "--speculative-config '" + json.dumps(conf) + "'"
        out["vllm_config"] = conf
    else:
        out["vllm"] = f"vLLM has no method for specsim's {method}"
    if info.sglang:
        algo = method.upper() if method.upper() in info.sglang else info.sglang[0]
        flags = [f"--speculative-algorithm {algo}", f"--speculative-num-steps {k}",
                 "--speculative-eagle-topk 1", f"--speculative-num-draft-tokens {k + 1}"]
        if info.draft_model or info.has_weights:
            flags.append("--speculative-draft-model-path "
                         + (str(drafter) if info.draft_model and drafter else
                            f"<{method} drafter for {sc.model}>"))
        out["sglang"] = " ".join(flags)
    else:
        out["sglang"] = f"SGLang has no algorithm for specsim's {method}"
    return out


# ------------------------------------------------------------------ the advice


@dataclass
class ClassAdvice:
    cls: str
    speculate: bool
    choice: str
    config: dict[str, Any]
    gain: dict[str, float]  # nominal, per metric
    band: dict[str, list[float]]  # metric -> [P10, P50, P90]
    p_gain: float  # share of the band's draws with a TPOT gain above 1
    tau: dict[str, Any]  # nominal, band, source
    crossing_qps: float | None
    crossing_note: str
    candidates: dict[str, float]  # candidate label -> TPOT gain
    why: str
    flags: dict[str, Any] = field(default_factory=dict)


@dataclass
class Advice:
    scenario: str
    seed: int
    rate_qps: float
    requests: int
    candidates: list[str]
    classes: list[ClassAdvice]
    per_class_yaml: dict[str, Any] | None
    ab: dict[str, Any] | None
    sensitivity: Any  # sensitivity.Analysis or None
    loads: dict[str, Any]
    runs: int
    wall_s: float
    notes: list[str]

    def to_dict(self) -> dict[str, Any]:
        from specsim.simulator.api import finite_or_none

        sens = None
        if self.sensitivity is not None:
            sens = {"output": self.sensitivity.label, "nominal": self.sensitivity.nominal,
                    "table": self.sensitivity.frame().to_dict(orient="records")}
        return finite_or_none({
            "scenario": self.scenario, "seed": self.seed, "rate_qps": self.rate_qps,
            "requests_per_run": self.requests, "candidates": self.candidates,
            "classes": [asdict(c) for c in self.classes], "per_class": self.per_class_yaml,
            "ab": self.ab, "sensitivity": sens, "loads": self.loads, "runs": self.runs,
            "wall_s": self.wall_s, "notes": self.notes})


def _trace_rate(trace: Any) -> float:
    t = np.sort(np.asarray(trace["arrival_s"], float))
    span = t[-1] - t[0] if t.size > 1 else 0.0
    return (t.size - 1) / span if span > 0 else math.nan


def _tau_draws(model: Any, draws: int, seed: int) -> tuple[dict[str, np.ndarray], dict]:
    """Per class: ``draws`` taus at the scenario's k, stratified (one per 1/draws of
    probability, shuffled: a Latin hypercube across classes) from the class's posterior, or
    uniform within its assumed band."""
    rng = np.random.default_rng(seed)
    out, info = {}, {}
    k = int(model.sc.speculation.k)
    for inp in model.inputs:
        if inp.kind != "tau":
            continue
        u = (rng.permutation(draws) + rng.uniform(size=draws)) / draws
        post = model.posteriors.get(inp.key)
        if post is not None:
            out[inp.key] = np.quantile(post.tau_draws(k, seed=seed), u)
        else:
            out[inp.key] = inp.low + u * (inp.high - inp.low)
        info[inp.key] = {"nominal": inp.nominal, "low": inp.low, "high": inp.high,
                         "source": inp.source, "assumed": inp.assumed}
    return out, info


def advise(scenario: str | Path, *, space: dict[str, list[Any]] | None = None,
           overrides: list[str] | dict[str, Any] | None = None, requests: int = 300,
           seed: int | None = None, draws: int = DRAWS,
           load_factors: tuple[float, ...] | None = LOAD_FACTORS, tornado: bool = True,
           confidence: float = 0.95, power: float = 0.8) -> Advice:
    """The advice for every class of a scenario (module docstring, rules 1-6)."""
    from specsim.simulator.api import USER_ERRORS
    from specsim.simulator.planning import ab_sizing
    from specsim.simulator.planning import sensitivity as sens

    t0 = time.perf_counter()
    notes: list[str] = []
    model = sens.Model(scenario, output="tpot_mean", versus=dict(NONE), overrides=overrides
                       or {}, requests=requests, seed=seed)
    try:
        sc = model.sc
        cands = space_candidates(space) if space else default_space(sc)
        runs: dict[str, tuple[Any, Any]] = {}
        for c in cands:
            try:
                runs[label(c)] = model.run(c)
            except USER_ERRORS as exc:
                where = "--space " if space else "candidate "
                raise ScenarioError(f"{where}{label(c)}: {exc}") from None
        base = runs[label(next(c for c in cands if _is_none(c)))]
        spec_cands = [c for c in cands if not _is_none(c)]
        if not spec_cands:
            raise ScenarioError("--space: no candidate speculates (every point has "
                                "speculation.method none or k 0)")
        per_cand = {label(c): gains(runs[label(c)], base, sc) for c in spec_cands}
        classes = model.classes
        chosen: dict[str, dict[str, Any] | None] = {}
        why: dict[str, str] = {}
        for cls in classes:
            best = max(spec_cands, key=lambda c, cls=cls: (
                np.nan_to_num(per_cand[label(c)].get(cls, {}).get("tpot", math.nan), nan=0.0),
                label(c)))
            g = per_cand[label(best)].get(cls, {})
            if g.get("tpot", 0) > 1.0 and g.get("goodput", 0) >= 0.99:
                chosen[cls] = best
                why[cls] = (f"{label(best)} gives the largest TPOT gain, {g['tpot']:.3f}x, "
                            f"and goodput x{g['goodput']:.3f} (not lower)")
            else:
                chosen[cls] = None
                reason = (f"TPOT gain {g.get('tpot', math.nan):.3f}x" if g.get("tpot", 0) <= 1
                          else f"goodput x{g.get('goodput', math.nan):.3f} (lower)")
                why[cls] = f"the best candidate, {label(best)}, loses: {reason}"
        # rule 2: the band, seed + d, taus drawn, chosen candidates and none with CRN
        distinct = {label(c): c for c in chosen.values() if c is not None}
        if not distinct:  # nothing speculates: the band of the best candidate still shows
            best_any = max(spec_cands, key=lambda c: np.nanmean(
                [v["tpot"] for v in per_cand[label(c)].values()]))
            distinct = {label(best_any): best_any}
        tau_s, tau_info = _tau_draws(model, draws, int(sc.seed))
        band_draws: dict[str, dict[str, dict[str, list[float]]]] = {
            lb: {cls: {m: [] for m in METRICS} for cls in classes} for lb in distinct}
        k0 = int(sc.speculation.k)
        for d in range(draws):
            s = int(sc.seed) + 1 + d
            taus = {f"tau.{c}": float(v[d]) for c, v in tau_s.items()}
            for lb, cfg in distinct.items():
                k = int(cfg.get("speculation.k", k0))
                over = model.settings_overrides(taus)
                for key in list(over):  # a tau is stated at the scenario's k: re-state it
                    if key.startswith("speculation.acceptance.by_class."):
                        over[key] = {**over[key], "at_k": k0} if k == k0 else \
                            _tau_at_other_k(over[key], k0, k)
                over["seed"] = s
                sp = _run_seeded(model, {**cfg, **over})
                bs = _run_seeded(model, {**NONE, "seed": s})
                for cls, gm in gains(sp, bs, sc).items():
                    for m in METRICS:
                        band_draws[lb][cls][m].append(gm[m])
        # rule 3: the load where the gain crosses 1
        rate = _trace_rate(model.trace)
        loads: dict[str, Any] = {}
        crossing: dict[str, tuple[float | None, str]] = {}
        if load_factors and math.isfinite(rate):
            for lb, cfg in distinct.items():
                grid = [rate * f for f in load_factors]
                per_load = []
                for q in grid:
                    at = {LOAD_KEY: q, **_load_requests(sc, q, requests)}
                    g = gains(model.run({**cfg, **at}), model.run({**NONE, **at}), sc)
                    per_load.append({c: g.get(c, {}).get("tpot", math.nan) for c in classes})
                loads[lb] = {"qps": grid, "tpot_gain": per_load}
        else:
            notes.append("the load crossing was not computed (no load grid, or the trace has "
                         "no measurable rate)")
        # rule 4: the drivers
        analysis = None
        main = max(distinct, key=lambda lb: sum(1 for c in chosen.values()
                                               if c is not None and label(c) == lb))
        for cls in classes:  # each class on its own choice's grid (main: it does not draft)
            lb = label(chosen[cls]) if chosen[cls] is not None else main
            if lb in loads:
                crossing[cls] = _crossing(loads[lb]["qps"],
                                          [p[cls] for p in loads[lb]["tpot_gain"]])
        if tornado:
            m2 = sens.Model(scenario, output="tpot_mean", versus=dict(NONE),
                            overrides={**model.base, **distinct[main]}, requests=requests,
                            seed=seed)
            try:
                analysis = sens.analyse(m2, "oat")
                extra_runs = m2.runs
            finally:
                m2.close()
        else:
            extra_runs = 0
        # rule 5: A/B size per class, from the band's TPOT-gain draws
        ab = None
        try:
            base_fig = class_figures(base[1], sc, float(base[0].simulated_time_s or 0))
            tr = model.trace
            span = float(tr["arrival_s"].max() - tr["arrival_s"].min()) or 1.0
            rates = {c: float((tr["workload_class"].astype(str) == c).sum()) / span
                     for c in classes}
            g_ab, g_cv = {}, {}
            for cls in classes:
                lb = label(chosen[cls]) if chosen[cls] is not None else main
                v = np.asarray(band_draws[lb][cls]["tpot"], float)
                v = v[np.isfinite(v) & (v > 0)]
                if v.size:
                    g_ab[cls] = v
                    # arm B's spread as simulated: (1 + cv_B^2) = (1 + cv_A^2)(1 + cv_g^2)
                    spec_fig = class_figures(runs[lb][1], sc,
                                             float(runs[lb][0].simulated_time_s or 0))
                    cv_a = base_fig[cls].tpot_cv
                    cv_b = spec_fig[cls].tpot_cv if cls in spec_fig else cv_a
                    g_cv[cls] = math.sqrt(max((1 + cv_b ** 2) / (1 + cv_a ** 2) - 1, 0.0))
            if g_ab:
                plan = ab_sizing.size_ab(g_ab, {c: rates[c] for c in g_ab},
                                         {c: base_fig[c].tpot_cv for c in g_ab},
                                         gain_cv=g_cv, confidence=confidence, power=power)
                ab = plan.to_dict()
                ab["table"] = plan.table()
        except ScenarioError as exc:
            notes.append(f"A/B size not computed: {exc}")
        # assemble
        out_classes = []
        for cls in classes:
            cfg = chosen[cls]
            lb = label(cfg) if cfg is not None else main
            band = {}
            for m in METRICS:
                v = np.asarray(band_draws[lb][cls][m], float)
                v = v[np.isfinite(v)]
                band[m] = [float(x) for x in np.percentile(v, [10, 50, 90])] if v.size else []
            tp = np.asarray(band_draws[lb][cls]["tpot"], float)
            cq, cn = crossing.get(cls, (None, "not computed"))
            out_classes.append(ClassAdvice(
                cls, cfg is not None, label(cfg) if cfg is not None else "no speculation",
                dict(cfg or NONE), {m: per_cand[lb].get(cls, {}).get(m, math.nan)
                                    for m in METRICS},
                band, float(np.mean(tp > 1.0)) if tp.size else math.nan, tau_info.get(cls, {}),
                cq, cn, {lab: per_cand[lab].get(cls, {}).get("tpot", math.nan)
                         for lab in per_cand}, why[cls],
                engine_flags(cfg or NONE, sc)))
        mix = _per_class_yaml(chosen, sc)
        if mix is not None:
            notes.append("classes choose different candidates: the per_class mix below is "
                         "what to deploy in specsim; it was not simulated as a mix (each "
                         "class's figures come from runs where every class used its choice). "
                         "vLLM and SGLang take one speculative config per server: serve the "
                         "groups on separate deployments or route by class")
        notes.append(f"band: {draws} runs at seeds {int(sc.seed) + 1}..{int(sc.seed) + draws}"
                     ", taus drawn per class, stratified (posterior where a sidecar exists, "
                     "else uniform "
                     f"within +-{sens.TAU_BAND:.0%}: assumed); the chosen candidate and no "
                     "speculation share each draw's seed and taus")
        notes.append("$/M tokens and J/token are the fleet's: classes share every batch")
        total_runs = model.runs + extra_runs
        return Advice(str(scenario), int(sc.seed), rate, requests,
                      [label(c) for c in cands], out_classes, mix, ab, analysis, loads,
                      total_runs, time.perf_counter() - t0, notes)
    finally:
        model.close()


def _load_requests(sc: Any, qps: float, requests: int) -> dict[str, Any]:
    """A synthetic workload runs at least LOAD_SECONDS of arrivals at each load (a queue
    has time to build, as the planner's probes); a trace keeps its requests."""
    wl = sc.workload or {}
    if not isinstance(wl, dict) or not isinstance(wl.get("synthetic"), dict):
        return {}
    n = max(int(requests), min(math.ceil(qps * LOAD_SECONDS), LOAD_MAX_REQUESTS))
    return {"workload.synthetic.requests": n, "workload.max_requests": n}


def _tau_at_other_k(spec: dict[str, Any], k0: int, k: int) -> dict[str, Any]:
    """A tau stated at the scenario's k, as the i.i.d. alpha it implies (usable at any k)."""
    from specsim.simulator.speculation.acceptance import alpha_from_tau

    return {"alpha": alpha_from_tau(float(spec["tau"]), k0), "source": spec.get("source", "")}


def _run_seeded(model: Any, over: dict[str, Any]) -> tuple[Any, Any]:
    """A run at another seed: its own trace (the workload is seeded), built by the run."""
    from specsim.simulator.api import run_scenario
    from specsim.simulator.metrics.run_metrics import RunMetrics

    res = run_scenario(model.scenario, overrides={**model.base, **over})
    model.runs += 1
    return RunMetrics.from_summary(res.metrics), res.requests


def _crossing(grid: list[float], g: list[float]) -> tuple[float | None, str]:
    """Where g crosses 1 on the grid, interpolated in log rate; None with the reason."""
    pts = [(q, v) for q, v in zip(grid, g, strict=True) if math.isfinite(v)]
    for (q0, v0), (q1, v1) in zip(pts, pts[1:], strict=False):
        if (v0 - 1) * (v1 - 1) < 0:
            t = (1 - v0) / (v1 - v0)
            q = math.exp(math.log(q0) + t * (math.log(q1) - math.log(q0)))
            return q, (f"gain {v0:.3f} at {q0:.3g} req/s, {v1:.3f} at {q1:.3g} req/s: crosses "
                       f"1 near {q:.3g} req/s (log-linear between grid points)")
        if v1 == 1.0:
            return q1, f"gain exactly 1 at {q1:.3g} req/s"
    if not pts:
        return None, "no load gave a gain"
    side = "above" if pts[0][1] > 1 else "below"
    return None, (f"the gain stays {side} 1 from {pts[0][0]:.3g} to {pts[-1][0]:.3g} req/s "
                  f"({min(v for _, v in pts):.3f} to {max(v for _, v in pts):.3f})")


def _per_class_yaml(chosen: dict[str, dict[str, Any] | None], sc: Any) -> dict[str, Any] | None:
    """``speculation.per_class`` for classes that chose differently (rule 1)."""
    labels = {label(c) if c is not None else "none" for c in chosen.values()}
    if len(labels) <= 1:
        return None
    spec = [c for c in chosen.values() if c is not None]
    k_top = max(int(c.get("speculation.k", sc.speculation.k)) for c in spec)
    top = max(spec, key=lambda c: int(c.get("speculation.k", sc.speculation.k)))
    per = {}
    for cls, c in chosen.items():
        if c is None:
            per[cls] = {"method": "none"}
        elif c is not top:
            per[cls] = {k.removeprefix("speculation."): v for k, v in c.items()}
    return {"method": top.get("speculation.method", sc.speculation.method), "k": k_top,
            "per_class": per}


# ------------------------------------------------------------------ one decision, for notebooks


@dataclass
class Decision:
    """One choice against its alternative: the gain, its P10-P50-P90 band and the inputs
    whose break-even would flip it (the largest swings first)."""

    gain: float
    band: tuple[float, float, float]
    flips: list[dict[str, Any]]
    draws: int

    def text(self) -> str:
        """``1.52x (P10-P90 1.38-1.66); flips at tau.chat = 1.61 (outside its band)``."""
        head = f"{self.gain:.2f}x (P10-P90 {self.band[0]:.2f}-{self.band[2]:.2f})"
        parts = []
        for f in self.flips:
            if f["break_even"] is None:
                parts.append(f"{f['input']}: no flip in its range")
            else:
                where = "inside" if f["within_band"] else "outside"
                parts.append(f"{f['input']} = {f['shown']} ({where} its band)")
        return head + ("; break-even: " + ", ".join(parts) if parts else "")


#: inputs that cannot move a latency (they price or power the same steps)
_COST_ONLY = ("price_usd_per_hour", "power_max_w")


def decision(model: Any, draws: int = DRAWS, top: int = 2) -> Decision:
    """The model's gain (its scenario over its ``versus``) with a band over ``draws`` seeds
    and stratified tau draws (rule 2), and the break-evens of the ``top`` inputs of its
    tornado (rule 4); price and power are left out of a latency's tornado."""
    from specsim.simulator.planning import sensitivity as sens

    if not model.is_gain:
        raise ScenarioError("decision: the model needs a second choice (versus)")
    nominal = model.evaluate({})
    seed = int(model.sc.seed)
    taus, _ = _tau_draws(model, draws, seed)
    g = [model.evaluate({f"tau.{c}": float(v[d]) for c, v in taus.items()},
                        extra={"seed": seed + 1 + d}) for d in range(draws)]
    p10, p50, p90 = (float(x) for x in np.percentile(np.asarray(g, float), [10, 50, 90]))
    latency = model.output.startswith(("tpot", "ttft", "e2e"))
    keep = [i for i in model.inputs if not (latency and i.name in _COST_ONLY)]
    _, bars = sens.tornado(model, inputs=keep, top=top)
    flips = []
    for b in bars[:top]:
        be = b.break_even
        flips.append({"input": b.input.name, "break_even": be.value,
                      "shown": None if be.value is None else sens.fmt_value(b.input, be.value),
                      "within_band": be.within_band, "note": be.reason,
                      "band": (b.input.low, b.input.high)})
    return Decision(nominal, (p10, p50, p90), flips, draws)
