"""The engine-overhead fit recovers known parameters from timings the model itself made."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from specsim.cost_models.calibrate.engine_fit import (
    StageSample,
    fit_engine,
    leave_one_group_out,
    stage_step_s,
)
from specsim.cost_models.calibration import uncalibrated_default

BASE = uncalibrated_default("H100-SXM")
TRUE = replace(BASE, engine_fixed_s=2.5e-3, engine_per_seq_s=3e-5)


def _samples(noise: float, seed: int = 0) -> list[StageSample]:
    rng = np.random.default_rng(seed)
    out = []
    for model, tp in (("Llama-3.1-8B", 1), ("Llama-3.1-70B", 4), ("Qwen3-32B", 2)):
        for rate, rows in ((2.0, 8.0), (8.0, 40.0), (20.0, 110.0)):
            s = StageSample(f"{model}:{rate}", model, "H100-SXM", tp, rate, 600.0, rows, 700.0,
                            0.02)
            # a self-consistent measured step: iterate the step/prefill-share fixed point
            step = 0.02
            for _ in range(20):
                step = stage_step_s(replace(s, step_s=step), TRUE)
            out.append(replace(s, step_s=step * (1 + noise * rng.standard_normal())))
    return out


def test_recovers_engine_parameters_exactly_without_noise():
    fitted, pred = fit_engine(_samples(0.0), BASE)
    assert fitted.engine_fixed_s == pytest.approx(TRUE.engine_fixed_s, rel=1e-3)
    assert fitted.engine_per_seq_s == pytest.approx(TRUE.engine_per_seq_s, rel=1e-2)


def test_recovers_engine_parameters_with_noise():
    fitted, _ = fit_engine(_samples(0.02, seed=1), BASE)
    assert fitted.engine_fixed_s == pytest.approx(TRUE.engine_fixed_s, rel=0.25)
    assert fitted.engine_per_seq_s == pytest.approx(TRUE.engine_per_seq_s, abs=1.5e-5)


def test_leave_one_model_out_predicts_held_out_models():
    s = _samples(0.01, seed=2)
    pred = leave_one_group_out(s, BASE, [x.model for x in s])
    err = np.abs(pred / np.array([x.step_s for x in s]) - 1)
    assert err.max() < 0.1


STACK = ("engine_fixed_s", "engine_per_seq_s", "per_layer_overhead_s", "allreduce_latency_s",
         "eta_attn_decode", "matmul_half_tokens", "eta_elementwise")
TRUE_STACK = replace(BASE, engine_fixed_s=1.2e-3, engine_per_seq_s=2e-5,
                     per_layer_overhead_s=1.5e-5, allreduce_latency_s=8e-6, eta_attn_decode=0.8,
                     matmul_half_tokens=60.0, eta_elementwise=0.6)


def _stack_samples(noise: float, seed: int) -> list[StageSample]:
    """Stages that separate the terms: TP 1/2/4/8 (all-reduce), short and long contexts
    (attention), light and heavy loads (rows, small vs large matmuls)."""
    rng = np.random.default_rng(seed)
    out = []
    for model, tp in (("Llama-3.1-8B", 1), ("Llama-3.1-8B", 2), ("Llama-3.1-70B", 4),
                      ("Llama-3.1-70B", 8), ("Qwen3-32B", 2)):
        for rate, rows, prompt, ctx in ((1.0, 2.0, 200.0, 300.0), (4.0, 16.0, 600.0, 4000.0),
                                        (10.0, 60.0, 800.0, 1200.0), (2.0, 24.0, 400.0, 12000.0),
                                        (20.0, 120.0, 300.0, 500.0)):
            s = StageSample(f"{model}/{tp}:{rate}", model, "H100-SXM", tp, rate, prompt, rows,
                            ctx, 0.02)
            step = 0.02
            for _ in range(30):
                step = stage_step_s(replace(s, step_s=step), TRUE_STACK)
            out.append(replace(s, step_s=step * (1 + noise * rng.standard_normal())))
    return out


@pytest.mark.parametrize("noise", [0.0, 0.005])
def test_recovers_every_engine_stack_parameter(noise):
    """The engine-stack refit (benchmarks/engine_fit.py) identifies each of its parameters."""
    samples = _stack_samples(noise, seed=3)
    fitted, pred = fit_engine(samples, BASE, params=STACK)
    measured = np.array([s.step_s for s in samples])
    assert np.abs(pred / measured - 1).max() < 4 * noise + 1e-3  # 25 draws: max ~2.5 sigma
    rel = 0.02 if noise == 0 else 0.3
    for name in STACK:
        got, want = getattr(fitted, name), getattr(TRUE_STACK, name)
        assert got == pytest.approx(want, rel=rel), name
