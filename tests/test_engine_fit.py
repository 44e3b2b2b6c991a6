"""The engine-overhead fit recovers known parameters from timings the model itself made."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from specsim.cost_models.calibrate.engine_fit import (
    SpecOverheadSample,
    StageSample,
    fastest,
    fit_engine,
    fit_spec_overheads,
    fits_without,
    identifiability,
    leave_one_group_out,
    stage_step_s,
    unreachable,
    workload_of,
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
TRUE_STACK = replace(BASE, engine_fixed_s=1.2e-3, engine_per_seq_s=2e-5, engine_per_prefill_s=2e-3,
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
    known = replace(BASE, engine_per_prefill_s=TRUE_STACK.engine_per_prefill_s)  # not fitted
    fitted, pred = fit_engine(samples, known, params=STACK)
    measured = np.array([s.step_s for s in samples])
    assert np.abs(pred / measured - 1).max() < 4 * noise + 1e-3  # 25 draws: max ~2.5 sigma
    rel = 0.02 if noise == 0 else 0.3
    for name in STACK:
        got, want = getattr(fitted, name), getattr(TRUE_STACK, name)
        assert got == pytest.approx(want, rel=rel), name


@pytest.mark.parametrize("noise", [0.0, 0.005])
def test_recovers_cpu_work_per_prefill(noise):
    """engine_per_prefill_s with the other CPU terms, the kernels known. (With the kernels'
    small-matmul term fitted too, stage averages cannot tell a prompt's CPU cost from its
    matmuls' inefficiency: both ride on the prompts per step. So the bundled fit leaves
    engine_per_prefill_s at 0.)"""
    params = ("engine_fixed_s", "engine_per_seq_s", "engine_per_prefill_s")
    fitted, _ = fit_engine(_stack_samples(noise, seed=5), TRUE_STACK, params=params)
    rel = 1e-3 if noise == 0 else 0.3
    for name in params:
        assert getattr(fitted, name) == pytest.approx(getattr(TRUE_STACK, name), rel=rel), name


@pytest.mark.parametrize("noise", [0.0, 0.01])
def test_recovers_speculation_overheads(noise):
    """Per step, per decoding sequence and per drafted token, from the model's own
    ``speculation_overhead`` at varied batches and draft lengths."""
    from specsim.cost_models.catalog import get_hardware, get_model, get_precision
    from specsim.cost_models.roofline import ForwardCostModel

    true = replace(BASE, spec_step_overhead_s=8e-4, spec_seq_overhead_s=6e-5,
                   spec_token_overhead_s=5e-6)
    cm = ForwardCostModel(get_model("Llama-3.1-8B"), get_hardware("H100-SXM"), 1,
                          get_precision({"weights": "bf16", "activations": "bf16",
                                         "kv_cache": "bf16"}, "precision"), true)
    rng = np.random.default_rng(4)
    samples = []
    for rows in (1, 4, 16, 64, 189):
        for k in (0, 2, 5):
            o = float(cm.speculation_overhead(rows, rows * k))
            samples.append(SpecOverheadSample(f"{rows}x{k}", rows, rows * k,
                                              o * (1 + noise * rng.standard_normal())))
    fit = fit_spec_overheads(samples)
    rel = 1e-6 if noise == 0 else 0.15
    for name, value in fit.items():
        assert value == pytest.approx(getattr(true, name), rel=rel), name


def test_speculation_overheads_need_enough_samples():
    with pytest.raises(ValueError, match="cannot separate"):
        fit_spec_overheads([SpecOverheadSample("one", 2.0, 0.0, 1e-3)])


def _workload_samples() -> list[StageSample]:
    """Exact stages of three models, each run with two workloads (short and long prompts)
    at two loads, as the shared vLLM runs are: every group left out leaves both loads."""
    out = []
    for model, tp in (("Llama-3.1-8B", 1), ("Llama-3.1-70B", 4), ("Qwen3-32B", 2)):
        for workload, prompt in (("codegen", 300.0), ("general", 900.0)):
            for rate, rows in ((2.0, 8.0), (12.0, 60.0)):
                s = StageSample(f"{model}-{workload}:{rate}", model, "H100-SXM", tp, rate,
                                prompt, rows, prompt + 200.0, 0.02)
                step = 0.02
                for _ in range(20):
                    step = stage_step_s(replace(s, step_s=step), TRUE)
                out.append(replace(s, step_s=step))
    return out


def test_leave_one_group_out_is_exact_on_the_models_own_data():
    """Fit on all, fit with each model / each workload left out: on exact synthetic data
    every held-out stage is predicted to ~0 error and each held-out fit recovers the truth."""
    samples = _workload_samples()
    measured = np.array([s.step_s for s in samples])
    for groups in ([s.model for s in samples], [workload_of(s.label) for s in samples]):
        pred = leave_one_group_out(samples, BASE, groups)
        assert np.abs(pred / measured - 1).max() < 1e-3
        fits = fits_without(samples, BASE, groups)
        assert len(fits) == len(set(groups))
        for fitted in fits.values():
            assert fitted.engine_fixed_s == pytest.approx(TRUE.engine_fixed_s, rel=1e-2)
            assert fitted.engine_per_seq_s == pytest.approx(TRUE.engine_per_seq_s, rel=5e-2)


def test_workload_of_reads_the_run_name():
    assert workload_of("20260217-155451-llama-2-7b-tp1-codegen:0") == "codegen"
    assert workload_of("20260218-130541-mixtral-8x7b-v0-1-tp2-general") == "general"
    assert workload_of("my-run") == "other"


def test_identifiability_separates_pinned_from_flat_parameters():
    """With TP 1/2/4/8, short and long contexts every stack parameter is identified; with
    TP 1 only, nothing in the data moves with the all-reduce latency: it is flat, computed
    from the fit's Jacobian (not asserted by name)."""
    samples = _stack_samples(0.005, seed=3)
    known = replace(BASE, engine_per_prefill_s=TRUE_STACK.engine_per_prefill_s)
    fitted, _ = fit_engine(samples, known, params=STACK)
    ids = {i.name: i for i in identifiability(samples, known, fitted, params=STACK)}
    assert set(ids) == set(STACK)
    for name, i in ids.items():
        assert i.status == "identified", (name, i)
        assert abs(i.value - getattr(TRUE_STACK, name)) <= 3 * i.std_err, name  # ~3 sigma

    tp1 = [s for s in samples if s.tp == 1]
    params = ("engine_fixed_s", "allreduce_latency_s")
    fitted, _ = fit_engine(tp1, known, params=params)
    ids = {i.name: i for i in identifiability(tp1, known, fitted, params=params)}
    assert ids["engine_fixed_s"].status == "identified"
    assert ids["allreduce_latency_s"].status in ("flat", "at a bound")
    assert ids["allreduce_latency_s"].std_err == float("inf")


def test_unreachable_stages_are_found_and_left_out():
    """A stage faster than the model can price with every fitted parameter at its fastest
    bound (a prefix cache the replay does not know of, say) is flagged, and leaving it out
    recovers the parameters the other stages were made with; fitted to, it drags them."""
    samples = _samples(0.0)
    quick = fastest(BASE, ("engine_fixed_s", "engine_per_seq_s"))
    bad = {2, 7}
    for i in bad:  # measured 40% under the fastest price
        samples[i] = replace(samples[i], step_s=0.6 * stage_step_s(samples[i], quick))
    out = unreachable(samples, BASE)
    assert set(np.flatnonzero(out)) == bad
    fitted, _ = fit_engine(samples, BASE, holdout=out)
    assert fitted.engine_fixed_s == pytest.approx(TRUE.engine_fixed_s, rel=1e-3)
    assert fitted.engine_per_seq_s == pytest.approx(TRUE.engine_per_seq_s, rel=1e-2)
    dragged, _ = fit_engine(samples, BASE)
    assert dragged.engine_fixed_s < 0.9 * TRUE.engine_fixed_s
    held = fits_without(samples, BASE, [x.model for x in samples], exclude=out)
    for cal in held.values():
        assert cal.engine_fixed_s == pytest.approx(TRUE.engine_fixed_s, rel=1e-2)
    ids = {i.name: i for i in identifiability(samples, BASE, fitted, exclude=out)}
    assert ids["engine_fixed_s"].status == "identified"
