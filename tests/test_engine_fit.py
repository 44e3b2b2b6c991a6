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
