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

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import least_squares

from ..calibration import Calibration
from ..catalog import get_hardware, get_model, get_precision
from ..roofline import ForwardCostModel, attention_area

ENGINE_PARAMS = ("engine_fixed_s", "engine_per_seq_s")


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


def stage_step_s(sample: StageSample, cal: Calibration) -> float:
    """The modelled mean time of one iteration at this stage's load."""
    cm = ForwardCostModel(get_model(sample.model), get_hardware(sample.hardware), sample.tp,
                          get_precision({"weights": sample.precision,
                                         "activations": sample.precision,
                                         "kv_cache": sample.precision}, "precision"), cal)
    b, c, p = sample.decode_rows, sample.context, sample.prompt_tokens
    decode = float(cm.time(b, b * (c + 1.0), b * c, b))
    mixed = float(cm.time(b + p, b * (c + 1.0) + attention_area(p, 0.0), b * c, b + 1.0))
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
    lo = np.array([0.05 if not p.endswith("_s") else 0.0 for p in params])
    hi = np.array([1.0 if p.startswith("eta") else 1e4 if p == "matmul_half_tokens" else 1.5
                   if not p.endswith("_s") else 50.0 for p in params])

    def resid(z: np.ndarray) -> np.ndarray:
        c = _with(cal, params, z)
        pred = np.array([stage_step_s(s, c) for s, t in zip(samples, train, strict=True) if t])
        return pred / measured[train] - 1.0

    z0 = np.clip([_start(cal, p) for p in params], lo + 1e-6, hi - 1e-6)
    if tuple(params) == ENGINE_PARAMS:
        z0 = np.array([1.0, 0.01])
    sol = least_squares(resid, z0, bounds=(lo, hi), x_scale="jac", loss=loss, f_scale=0.05)
    fitted = _with(cal, params, sol.x)
    return fitted, np.array([stage_step_s(s, fitted) for s in samples])


def leave_one_group_out(samples: Sequence[StageSample], cal: Calibration,
                        groups: Sequence[str],
                        params: Sequence[str] = ENGINE_PARAMS) -> np.ndarray:
    """Each sample's predicted step time from a fit that never saw its group (its model)."""
    groups = np.asarray(groups)
    pred = np.empty(len(samples))
    for g in np.unique(groups):
        out = groups == g
        _, p = fit_engine(samples, cal, holdout=out, params=params)
        pred[out] = p[out]
    return pred


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
