"""The engine's rhythm (issue 23 part 2): repeated prompts served from the prefix cache, and
vLLM v1's output lag. The fits recover known values from data the model itself made, and a
request alone has a closed-form TTFT under the shipped rhythm."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import yaml

from specsim.cost_models.calibrate.engine_fit import (
    StageSample,
    cached_prompt_tokens,
    fit_engine,
    fit_output_lag,
    prompt_period,
    stage_step_s,
)
from specsim.cost_models.calibration import default_profile, uncalibrated_default
from specsim.cost_models.catalog import get_hardware, get_model, get_precision
from specsim.cost_models.roofline import ForwardCostModel, attention_area
from specsim.simulator.cluster.engine import run_scenario
from specsim.simulator.scenario.schema import VLLM_OUTPUT_LAG_STEPS
from tests.conftest import REPO

CHAT = REPO / "scenarios" / "chat_nospec.yaml"


def _lengths(period: int, n: int, seed: int = 0) -> np.ndarray:
    """Prompt lengths of a generator that cycles through ``period`` prompts (as
    inference-perf's shared_prefix does), lengths drawn like the shared runs' (557-609)."""
    rng = np.random.default_rng(seed)
    return np.tile(rng.integers(557, 610, period), n // period + 1)[:n]


@pytest.mark.parametrize("period", [44, 100, 250])
def test_prompt_period_recovers_the_generators_cycle(period):
    tok = _lengths(period, 6000)
    assert prompt_period(np.arange(len(tok)), tok) == period
    # order of the rows does not matter (the index does)
    perm = np.random.default_rng(1).permutation(len(tok))
    assert prompt_period(np.arange(len(tok))[perm], tok[perm]) == period


def test_prompt_period_none_without_repeats_or_with_gaps():
    rng = np.random.default_rng(2)
    tok = rng.integers(557, 610, 5000)
    assert prompt_period(np.arange(5000), tok) is None
    gappy = np.arange(5000) * 2  # not consecutive generator indices: the lag is unreadable
    assert prompt_period(gappy, _lengths(100, 5000)) is None


def test_cached_tokens_are_full_blocks_below_the_last_token_after_the_first_sending():
    tok = np.array([590, 33, 32, 590, 33, 32])
    got = cached_prompt_tokens(np.arange(6), tok, 3, 16)
    np.testing.assert_array_equal(got, [0, 0, 0, 576, 32, 16])
    np.testing.assert_array_equal(cached_prompt_tokens(np.arange(6), tok, None, 16), 0)


def _sample(rate, rows, cached=0.0, step=0.02):
    return StageSample(f"x:{rate}", "Llama-3.1-70B", "H100-SXM", 4, rate, 590.0, rows, 700.0,
                       step, "bf16", cached)


def test_stage_price_without_cache_is_the_uncached_one_and_cache_lowers_it():
    cal = default_profile("H100-SXM")
    s = _sample(10.0, 40.0)
    cm = ForwardCostModel(get_model("Llama-3.1-70B"), get_hardware("H100-SXM"), 4,
                          get_precision({"weights": "bf16", "activations": "bf16",
                                         "kv_cache": "bf16"}, "p"), cal)
    b, c, p = 40.0, 700.0, 590.0
    decode = cm.time(b, b * (c + 1), b * c, b)
    mixed = cm.time(b + p, b * (c + 1) + attention_area(p, 0.0), b * c, b + 1)
    per = min(10.0 * 0.02, 1.0)
    want = decode + per * (mixed - decode) + float(cm.iteration_overhead(b + per, per))
    assert stage_step_s(s, cal) == pytest.approx(want, rel=1e-12)
    cached = stage_step_s(replace(s, cached_tokens=576.0), cal)
    assert cached < stage_step_s(s, cal)
    assert cached > decode  # 14 tokens are still prefilled, the 576 cached ones read


def test_stack_fit_recovers_known_parameters_from_cached_stages():
    """Stages whose prompts are served from the cache, step times made by the model with
    known engine parameters: the fit gives them back."""
    base = uncalibrated_default("H100-SXM")
    true = replace(base, engine_fixed_s=4e-4, engine_per_seq_s=1.2e-5, eta_attn_decode=0.9)
    params = ("engine_fixed_s", "engine_per_seq_s", "eta_attn_decode")
    samples = []
    for model, tp in (("Llama-3.1-8B", 1), ("Llama-3.1-70B", 4), ("Qwen3-32B", 2)):
        for rate, rows in ((5.0, 20.0), (10.0, 45.0), (20.0, 110.0)):
            s = replace(_sample(rate, rows, cached=576.0), model=model, tp=tp)
            step = 0.02
            for _ in range(20):  # the step / prefill-share fixed point
                step = stage_step_s(replace(s, step_s=step), true)
            samples.append(replace(s, step_s=step))
    fitted, _ = fit_engine(samples, base, params=params)
    assert fitted.engine_fixed_s == pytest.approx(true.engine_fixed_s, rel=1e-3)
    assert fitted.engine_per_seq_s == pytest.approx(true.engine_per_seq_s, rel=1e-3)
    assert fitted.eta_attn_decode == pytest.approx(true.eta_attn_decode, rel=1e-4)


def _run(n=40, **over):
    o = {"workload.synthetic.requests": n, "simulation.progress": False,
         **{f"engine.{k}": v for k, v in over.items()}}
    return run_scenario(yaml.safe_load(CHAT.read_text()), overrides=o).requests


def test_the_lag_fit_recovers_the_shipped_default_from_the_model_itself():
    base, shipped = _run(output_lag_steps=0.0), _run()
    two = (base["output_tokens"] > 1).to_numpy()
    got = fit_output_lag(base["ttft_s"][two], base["tpot_s"][two], shipped["ttft_s"][two])
    assert got == pytest.approx(VLLM_OUTPUT_LAG_STEPS, rel=1e-9)


def test_closed_form_ttft_of_one_request_alone_under_the_shipped_rhythm():
    """One request alone: its prompt is prefilled in one step (pass + the engine's CPU work
    for one sequence with a chunk), then the client sees the token 1.64 of its decode
    steps later; TPOT is the mean of its decode steps."""
    r = _run(n=1).iloc[0]
    cal = default_profile("H100-SXM")
    cm = ForwardCostModel(get_model("Qwen3-8B"), get_hardware("H100-SXM"), 1,
                          get_precision({"weights": "bf16", "activations": "bf16",
                                         "kv_cache": "bf16"}, "p"), cal)
    p, n = int(r["prompt_tokens"]), int(r["output_tokens"])
    prefill = cm.time(p, attention_area(p, 0.0), 0.0, 1.0) + float(cm.iteration_overhead(1, 1))
    steps = [cm.time(1, p + i + 1.0, p + i, 1.0) + float(cm.iteration_overhead(1, 0))
             for i in range(n - 1)]
    assert r["tpot_s"] == pytest.approx(np.mean(steps), rel=1e-9)
    assert r["ttft_s"] == pytest.approx(prefill + VLLM_OUTPUT_LAG_STEPS * np.mean(steps),
                                        rel=1e-9)
