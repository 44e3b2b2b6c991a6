"""Fit the engine's CPU work per iteration to measured serving runs (stage averages).

The operator tables price a pass's GPU kernels; what a serving engine adds per iteration
(scheduler, input preparation, sampling, output streaming) is only visible in real runs.
Each load stage of a measured run gives one equation: its measured time per output token
(E2E minus TTFT over the tokens after the first, averaged over requests) against the price
of its average iteration: ``decode_rows`` sequences decoding at their mean context, plus
the prompts that arrive during the step (``rate`` x step prompts of ``prompt_tokens``)
prefilled alongside, plus ``iteration_overhead``. Little's law gives ``decode_rows`` from
the measured rate and decode time, so nothing here is simulated; the full replay
(``specsim replay``) then checks the fit end to end.

The parameters are physical (seconds of CPU work per iteration and per sequence), shared by
every run of one engine on one hardware kind; they are never fitted per run, and the
leave-one-model-out error says how well they transfer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import least_squares

from ..calibration import Calibration
from ..catalog import get_hardware, get_model, get_precision
from ..roofline import ForwardCostModel, attention_area

ENGINE_PARAMS = ("engine_fixed_s", "engine_per_seq_s")
# what the bundled profiles refit to the measured vLLM runs (benchmarks/engine_fit.py) on top
# of the operator tables: the engine's CPU work and how its kernels differ from the tables'
# (the per-layer kernel floor keeps the operator tables' value: fitted with the runs' prompts
# served from the prefix cache, the runs put it at 57 us, the tables' 54 us, and refitting it
# only worsens the held-out fits: docs/fidelity.md, "The engine's rhythm")
STACK_PARAMS = ("engine_fixed_s", "engine_per_seq_s", "allreduce_latency_s",
                "eta_attn_decode", "matmul_half_tokens", "eta_elementwise")


@dataclass(frozen=True)
class StageSample:
    """One load stage of a measured run, reduced to what an average iteration needs."""

    label: str
    model: str  # catalog name
    hardware: str  # catalog name
    tp: int
    rate: float  # arrivals per second
    prompt_tokens: float  # mean prompt length
    decode_rows: float  # mean sequences in their decode phase (Little's law)
    context: float  # mean context of a decoding sequence
    step_s: float  # measured mean time per output token after the first
    precision: str = "bf16"
    cached_tokens: float = 0.0  # mean prompt tokens the engine's prefix cache served


def stage_step_s(sample: StageSample, cal: Calibration) -> float:
    """The modelled mean time of one iteration at this stage's load."""
    cm = ForwardCostModel(get_model(sample.model), get_hardware(sample.hardware), sample.tp,
                          get_precision({"weights": sample.precision,
                                         "activations": sample.precision,
                                         "kv_cache": sample.precision}, "precision"), cal)
    b, c, h = sample.decode_rows, sample.context, sample.cached_tokens
    p = sample.prompt_tokens - h  # prefilled; the cached tokens are only read by attention
    decode = float(cm.time(b, b * (c + 1.0), b * c, b))
    mixed = float(cm.time(b + p, b * (c + 1.0) + attention_area(p, h), b * c + h, b + 1.0))
    # prompts prefilled per iteration at this rate (one chunk each: they fit the budget)
    per_step = min(sample.rate * sample.step_s, 1.0)
    gpu = decode + per_step * (mixed - decode)
    cpu = float(cm.iteration_overhead(b + per_step, per_step))
    return gpu + cpu


def _scale(name: str) -> float:
    """Optimiser units: seconds in milliseconds, efficiencies as they are."""
    return 1e-3 if name.endswith("_s") else 1.0


def _with(cal: Calibration, params: Sequence[str], z: Sequence[float]) -> Calibration:
    return replace(cal, **{k: float(v) * _scale(k) for k, v in zip(params, z, strict=True)})


def _start(cal: Calibration, name: str) -> float:
    v = getattr(cal, name)
    if v is None:  # an optional efficiency or latency: start from what the model uses now
        v = {"eta_elementwise": cal.eta_memory, "allreduce_latency_s": 10e-6}.get(name, 0.5)
    return float(v) / _scale(name)


def _bounds(params: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Physical bounds in optimiser units: seconds >= 0 (at most 50 ms), efficiencies in
    (0.05, 1], the small-matmul half-point up to 10k tokens, other factors up to 1.5."""
    lo = np.array([0.05 if not p.endswith("_s") else 0.0 for p in params])
    hi = np.array([1.0 if p.startswith("eta") else 1e4 if p == "matmul_half_tokens" else 1.5
                   if not p.endswith("_s") else 50.0 for p in params])
    return lo, hi


def _residuals(samples: Sequence[StageSample], cal: Calibration, params: Sequence[str],
               z: np.ndarray, train: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """Relative step-time error of the training samples at optimiser values ``z``."""
    c = _with(cal, params, z)
    pred = np.array([stage_step_s(s, c) for s, t in zip(samples, train, strict=True) if t])
    return pred / measured[train] - 1.0


def fit_engine(samples: Sequence[StageSample], cal: Calibration,
               holdout: Sequence[bool] | None = None,
               params: Sequence[str] = ENGINE_PARAMS,
               loss: str = "linear") -> tuple[Calibration, np.ndarray]:
    """Least squares of the relative step-time error over the samples not held out.

    ``params`` are the calibration fields fitted (the engine's CPU work by default; an
    engine whose kernels differ from the operator tables' also refits its per-layer floor,
    elementwise efficiency and all-reduce latency here). Returns the calibration with them
    set, and every sample's predicted step time (seconds).
    """
    measured = np.array([s.step_s for s in samples])
    train = ~np.asarray(holdout if holdout is not None else [False] * len(samples), bool)
    lo, hi = _bounds(params)

    def resid(z: np.ndarray) -> np.ndarray:
        return _residuals(samples, cal, params, z, train, measured)

    z0 = np.clip([_start(cal, p) for p in params], lo + 1e-6, hi - 1e-6)
    if tuple(params) == ENGINE_PARAMS:
        z0 = np.array([1.0, 0.01])
    sol = least_squares(resid, z0, bounds=(lo, hi), x_scale="jac", loss=loss, f_scale=0.05)
    fitted = _with(cal, params, sol.x)
    return fitted, np.array([stage_step_s(s, fitted) for s in samples])


def fits_without(samples: Sequence[StageSample], cal: Calibration, groups: Sequence[str],
                 params: Sequence[str] = ENGINE_PARAMS,
                 exclude: Sequence[bool] | None = None) -> dict[str, Calibration]:
    """Per group, the calibration fitted to every sample outside it (what a replay of that
    group's runs uses to measure transfer, not the training fit); samples ``exclude``
    marks are never fitted to (``unreachable``)."""
    groups = np.asarray(groups)
    out = np.zeros(len(samples), bool) if exclude is None else np.asarray(exclude, bool)
    return {str(g): fit_engine(samples, cal, holdout=(groups == g) | out, params=params)[0]
            for g in np.unique(groups)}


def leave_one_group_out(samples: Sequence[StageSample], cal: Calibration,
                        groups: Sequence[str],
                        params: Sequence[str] = ENGINE_PARAMS,
                        exclude: Sequence[bool] | None = None) -> np.ndarray:
    """Each sample's predicted step time from a fit that never saw its group (its model,
    its workload)."""
    fits = fits_without(samples, cal, groups, params, exclude)
    return np.array([stage_step_s(s, fits[str(g)]) for s, g in zip(samples, groups, strict=True)])


#: how far above a stage's measured step time its fastest price may lie before the stage is
#: left out of the fit (assumed; on the shared vLLM runs any value from 2% to 24% leaves out
#: the same two stages: the fastest prices are within +1.9% of the others' and 25-26% over
#: those two)
UNREACHABLE_SLACK = 0.10


def fastest(cal: Calibration, params: Sequence[str]) -> Calibration:
    """``cal`` with every parameter in ``params`` at its fastest physical bound (times and
    the small-matmul half point at their lower bound, efficiencies at their upper)."""
    lo, hi = _bounds(params)
    z = [hi[i] if p.startswith("eta") or p.endswith("_eff") else lo[i]
         for i, p in enumerate(params)]
    return _with(cal, params, z)


def unreachable(samples: Sequence[StageSample], cal: Calibration,
                params: Sequence[str] = ENGINE_PARAMS,
                slack: float = UNREACHABLE_SLACK) -> np.ndarray:
    """Stages no value of ``params`` can price: their step time priced with every fitted
    parameter at its fastest bound is still over ``1 + slack`` times the measured one. What
    makes such a stage fast is not in the cost model (on the shared runs: two stages at
    20 req/s whose prompts the engine served faster than their FLOPs allow, a prefix cache
    being the likely reason); fitted to, they pull every parameter to its bound and
    mis-price the stages the model can serve. They are left out of the fit and reported."""
    quick = fastest(cal, params)
    return np.array([stage_step_s(s, quick) > (1.0 + slack) * s.step_s for s in samples])


WORKLOADS = ("codegen", "general")


def workload_of(name: str) -> str:
    """The workload a measured run's name says it ran (the shared runs' names end in
    ``-codegen`` or ``-general``); ``other`` when it names none."""
    hits = [w for w in WORKLOADS if w in name.lower()]
    return hits[0] if len(hits) == 1 else "other"


@dataclass(frozen=True)
class Identified:
    """What the data say about one fitted parameter (physical units)."""

    name: str
    value: float
    std_err: float  # from the Jacobian at the optimum; inf where the data leave it flat
    # value +- 1.96 std_err, clipped to the bounds (on a bound: the one-sided room the data
    # would leave it, were it free)
    ci95: tuple[float, float]
    at_bound: str  # "lower", "upper" or ""
    status: str  # identified / poorly identified / at a bound / flat
    correlated_with: tuple[str, ...]  # free parameters with |correlation| > 0.9


REL_CI_IDENTIFIED = 0.5  # 95% interval within +-50% of the value: the data pin it down


def identifiability(samples: Sequence[StageSample], cal: Calibration, fitted: Calibration,
                    params: Sequence[str] = ENGINE_PARAMS,
                    exclude: Sequence[bool] | None = None) -> list[Identified]:
    """Which fitted parameters the samples identify, computed from the fit itself.

    At the optimum, the Jacobian J of the relative residuals (central differences in
    optimiser units) gives the covariance s^2 (J'J)^+ with s^2 = RSS / (n - p_free); a
    parameter on a bound is held there (the data push it past the physical range) and left
    out of the covariance (its interval is how far off the bound the data would let it
    move, were it freed alone). A free parameter whose column of J is (near) zero, or lies in
    J's null space, is flat: no value is preferred. Correlations over 0.9 name the pairs
    the data confound."""
    measured = np.array([s.step_s for s in samples])
    train = np.ones(len(samples), bool) if exclude is None else ~np.asarray(exclude, bool)
    lo, hi = _bounds(params)
    z = np.array([getattr(fitted, p) / _scale(p) for p in params], float)
    r0 = _residuals(samples, cal, params, z, train, measured)
    span = hi - lo
    tol = 1e-6 * np.maximum(span, 1.0)
    at = np.where(z <= lo + tol, "lower", np.where(z >= hi - tol, "upper", ""))
    jac = np.zeros((int(train.sum()), len(params)))
    for i in range(len(params)):
        h = 1e-4 * max(abs(z[i]), 1e-2)
        up, dn = z.copy(), z.copy()
        up[i] = min(z[i] + h, hi[i])
        dn[i] = max(z[i] - h, lo[i])
        jac[:, i] = (_residuals(samples, cal, params, up, train, measured)
                     - _residuals(samples, cal, params, dn, train, measured)) / (up[i] - dn[i])
    free = np.flatnonzero(at == "")
    dof = max(int(train.sum()) - len(free), 1)
    s2 = float(r0 @ r0) / dof
    cov = np.full((len(params), len(params)), np.nan)
    flat = np.zeros(len(params), bool)
    if len(free):
        jf = jac[:, free]
        u, sv, vt = np.linalg.svd(jf, full_matrices=False)
        small = sv <= 1e-8 * max(sv.max(), 1e-300)
        for j in np.flatnonzero(small):  # directions the data do not see
            flat[free[np.abs(vt[j]) > 0.1]] = True
        inv = (vt.T / np.where(small, np.inf, sv) ** 2) @ vt
        cov[np.ix_(free, free)] = s2 * inv
    out = []
    for i, p in enumerate(params):
        sc = _scale(p)
        if at[i]:  # how far off its bound the data would let it move, were it free
            cols = np.append(free, i)
            jj = jac[:, cols].T @ jac[:, cols]
            ok = np.linalg.matrix_rank(jj) == len(cols)
            se = math.sqrt(max(s2 * np.linalg.inv(jj)[-1, -1], 0.0)) if ok else math.inf
        else:
            se = math.inf if flat[i] else math.sqrt(max(cov[i, i], 0.0))
        lo_ci = max(lo[i], z[i] - 1.96 * se) if math.isfinite(se) else lo[i]
        hi_ci = min(hi[i], z[i] + 1.96 * se) if math.isfinite(se) else hi[i]
        if at[i]:
            status = "at a bound"
        elif flat[i] or not np.any(jac[:, i]):
            status = "flat"
        elif 1.96 * se <= REL_CI_IDENTIFIED * abs(z[i]):
            status = "identified"
        else:
            status = "poorly identified"
        corr = ()
        if not at[i] and not flat[i]:
            corr = tuple(params[j] for j in free if j != i and not flat[j] and cov[i, i] > 0
                         and cov[j, j] > 0
                         and abs(cov[i, j]) / math.sqrt(cov[i, i] * cov[j, j]) > 0.9)
        out.append(Identified(p, float(z[i] * sc), se * sc, (float(lo_ci * sc), float(hi_ci * sc)),
                              str(at[i]), status, corr))
    return out


SPEC_PARAMS = ("spec_step_overhead_s", "spec_seq_overhead_s", "spec_token_overhead_s")


@dataclass(frozen=True)
class SpecOverheadSample:
    """Speculation's own cost in one measured configuration: the extra time per step over
    the same batch without a speculator, less the drafter's and the verify pass's GPU
    work (zero when measured with nothing drafted, as vLLM's K=0 runs are)."""

    label: str
    rows: float  # decoding sequences per step
    drafted: float  # draft tokens proposed per step, all rows together
    overhead_s: float  # measured extra seconds per step


def fit_spec_overheads(samples: Sequence[SpecOverheadSample],
                       params: Sequence[str] = SPEC_PARAMS) -> dict[str, float]:
    """Non-negative least squares of ``overhead = step + seq x rows + token x drafted``
    (``ForwardCostModel.speculation_overhead``) over the samples, relative errors weighted
    alike. ``params`` picks the terms the samples can separate (with nothing drafted,
    ``spec_token_overhead_s`` cannot be; it stays 0)."""
    from scipy.optimize import nnls

    cols = {"spec_step_overhead_s": lambda s: 1.0, "spec_seq_overhead_s": lambda s: s.rows,
            "spec_token_overhead_s": lambda s: s.drafted}
    if len(samples) < len(params):
        raise ValueError(f"{len(samples)} samples cannot separate {len(params)} parameters")
    y = np.array([s.overhead_s for s in samples])
    a = np.array([[cols[p](s) for p in params] for s in samples]) / y[:, None]
    x, _ = nnls(a, np.ones(len(samples)))
    return {p: float(v) for p, v in zip(params, x, strict=True)}


def operator_tables_values(doc: dict) -> dict:
    """A profile's operator-table values, the base the engine stack is refitted on (kept
    under ``operator_tables_fitted`` once the stack was added)."""
    return dict(doc.get("operator_tables_fitted") or doc["fitted"])


RHYTHM_BOUNDS = (0.0, 16.0)  # engine.output_lag_steps' range in the scenario schema


def fit_output_lag(ttft_s: Sequence[float], tpot_s: Sequence[float],
                   measured_ttft_s: Sequence[float],
                   train: Sequence[bool] | None = None) -> float:
    """``engine.output_lag_steps`` from replays made without it: per stage (or request) the
    replay's TTFT and TPOT at lag 0 and the measured TTFT. The lag adds L x TPOT to every
    TTFT (``metrics.collector.deliver``), so the least squares of the relative error
    ``(ttft + L tpot) / measured - 1`` over the training rows has a closed form; clipped to
    the schema's range. Rows not finite are skipped."""
    t, p, m = (np.asarray(x, float) for x in (ttft_s, tpot_s, measured_ttft_s))
    keep = np.isfinite(t) & np.isfinite(p) & np.isfinite(m) & (m > 0)
    if train is not None:
        keep &= np.asarray(train, bool)
    if not keep.any():
        raise ValueError("no finite stage to fit the output lag to")
    a, b = p[keep] / m[keep], 1.0 - t[keep] / m[keep]
    lag = float(a @ b / (a @ a)) if a @ a > 0 else 0.0
    return float(np.clip(lag, *RHYTHM_BOUNDS))


#: share of requests whose prompt length equals the one ``period`` requests earlier for
#: ``prompt_period`` to call the prompts repeated (assumed; the shared runs give 0.98-0.99
#: at their period and 0.00-0.11 at every other lag tried)
REPEAT_SHARE = 0.9


def prompt_period(index: Sequence[int], prompt_tokens: Sequence[int],
                  max_period: int = 1000, share: float = REPEAT_SHARE) -> int | None:
    """The period of a run whose load generator cycles through a fixed set of prompts, or
    None. inference-perf's ``shared_prefix`` generator makes ``num_groups x
    num_prompts_per_group`` prompts once and sends prompt ``data_index % len(prompts)``
    (kubernetes-sigs/inference-perf, inference_perf/datagen/shared_prefix_datagen.py,
    ``load_lazy_data``): request i and request i + N then carry the same prompt. The
    prompts are not recorded, so the period is read from their lengths: the smallest lag N
    (2..``max_period``, by the generator's request index) at which at least ``share`` of
    the requests have the same prompt length as request i - N (on the shared vLLM runs:
    100 = 10 groups x 10 prompts, their config.yaml)."""
    idx = np.asarray(index, np.int64)
    tok = np.asarray(prompt_tokens, np.int64)
    order = np.argsort(idx, kind="stable")
    idx, tok = idx[order], tok[order]
    if len(idx) < 4 or np.any(np.diff(idx) != 1):
        return None  # the lag must be read over consecutive generator indices
    for n in range(2, min(max_period, len(tok) // 2) + 1):
        if float(np.mean(tok[n:] == tok[:-n])) >= share:
            return n
    return None


def cached_prompt_tokens(index: Sequence[int], prompt_tokens: Sequence[int],
                         period: int | None, block_size: int) -> np.ndarray:
    """Per request, the prompt tokens a prefix-caching engine serves from its cache when the
    prompts repeat every ``period`` requests: none for a prompt's first sending, else its
    full blocks below its last token (vLLM v1 caches whole blocks and always computes the
    last prompt token; its prefix caching is on by default). Eviction is not modelled here
    (the replay's prefix cache models it); with no period, zeros."""
    idx = np.asarray(index, np.int64)
    tok = np.asarray(prompt_tokens, np.int64)
    if period is None or len(idx) == 0:
        return np.zeros(len(idx))
    seen = idx - period >= idx.min()
    full = ((np.maximum(tok, 1) - 1) // block_size) * block_size
    return np.where(seen, full, 0).astype(float)


def with_prompt_cache(samples: Sequence[StageSample], run) -> list[StageSample]:
    """``samples`` of one measured run (``stage_samples``) with each stage's mean cached
    prompt tokens set, where the run's prompts repeat (``prompt_period``); unchanged
    otherwise. ``run`` is a ``MeasuredRun``: requests with index, input_tokens, stage."""
    req = run.requests
    period = prompt_period(req["index"], req["input_tokens"])
    if period is None:
        return list(samples)
    block = int(run.engine.get("block_size") or 16)
    cached = cached_prompt_tokens(req["index"], req["input_tokens"], period, block)
    ok = ~req["has_error"].to_numpy(bool)
    stage = req["stage"].astype(str).to_numpy()
    out = []
    for s in samples:
        name = s.label.rsplit(":", 1)[-1]
        sel = ok & (stage == name)
        out.append(replace(s, cached_tokens=float(cached[sel].mean())) if sel.any() else s)
    return out
