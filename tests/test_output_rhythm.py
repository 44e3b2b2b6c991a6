"""The engine's output rhythm (``engine.output_lag_steps``, ``engine.output_delay_s``): the
client sees each token L steps (plus a fixed delay) after the step that made it, so TTFT and
E2E move by the same amount and TPOT does not; off (both 0), the run is bit for bit the
simulated one (the shipped default is vLLM v1's fitted lag, tests/test_engine_rhythm.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from specsim.simulator.cluster.engine import run_scenario
from specsim.simulator.metrics.collector import deliver
from specsim.simulator.scenario.schema import ScenarioError
from tests.conftest import REPO

CHAT = REPO / "scenarios" / "chat_nospec.yaml"
SMALL = {"workload.synthetic.requests": 40, "simulation.progress": False}


def _run(**engine):
    over = {**SMALL, **{f"engine.{k}": v for k, v in engine.items()}}
    res = run_scenario(yaml.safe_load(CHAT.read_text()), overrides=over)
    m = dict(res.metrics)
    m.pop("wall_time_s")
    return m, res.requests


def test_off_is_bit_for_bit_the_run_without_the_keys():
    base_m, base_r = _run(output_lag_steps=0.0)
    m, r = _run(output_lag_steps=0.0, output_delay_s=0.0)
    assert m == base_m
    pd.testing.assert_frame_equal(r, base_r, check_exact=True)
    # TPOT does not depend on the rhythm; TTFT does (the default lag is not 0)
    _, shipped = _run()
    np.testing.assert_allclose(shipped["tpot_s"], r["tpot_s"], rtol=1e-12)
    assert (shipped["ttft_s"] > r["ttft_s"]).all()


def test_lag_moves_ttft_and_e2e_by_lag_tpots_and_keeps_tpot():
    _, base = _run(output_lag_steps=0.0)
    _, lag = _run(output_lag_steps=1.5, output_delay_s=0.002)
    two = base["output_tokens"] > 1
    shift = 1.5 * base["tpot_s"][two] + 0.002
    np.testing.assert_allclose(lag["ttft_s"][two], base["ttft_s"][two] + shift, rtol=1e-9)
    np.testing.assert_allclose(lag["e2e_s"][two], base["e2e_s"][two] + shift, rtol=1e-9)
    np.testing.assert_allclose(lag["tpot_s"][two], base["tpot_s"][two], rtol=1e-9)


def test_closed_form_one_request_alone():
    """One request alone on its worker: first token at its prefill step's end + L of its
    decode steps + the delay; the last token moves by the same."""
    ft, fin, gen = np.array([0.05]), np.array([0.05 + 9 * 0.01]), np.array([10])
    f2, e2 = deliver(ft, fin, gen, 2.0, 0.003)
    assert f2[0] == pytest.approx(0.05 + 2 * 0.01 + 0.003)
    assert e2[0] == pytest.approx(0.14 + 2 * 0.01 + 0.003)


def test_no_tpot_takes_the_mean_step_and_zero_is_identity():
    ft = np.array([1.0, 2.0, 3.0, np.nan])
    fin = np.array([1.5, 2.0, np.nan, np.nan])  # 6 tokens; 1 token; still decoding; queued
    gen = np.array([6, 1, 4, 0])
    f2, e2 = deliver(ft, fin, gen, 1.0, 0.0)
    np.testing.assert_allclose(f2[:3], [1.1, 2.1, 3.1])
    assert e2[0] == pytest.approx(1.6) and e2[1] == pytest.approx(2.1)
    assert np.isnan(e2[2]) and np.isnan(f2[3])
    same = deliver(ft, fin, gen, 0.0, 0.0)
    assert same[0] is ft and same[1] is fin


def test_a_lag_step_is_the_requests_own_step_with_speculation():
    """With ``steps`` (decode steps per request) a step is (finish - first) / steps, longer
    than the TPOT when a step makes several tokens."""
    ft, fin, gen, steps = np.array([1.0]), np.array([1.9]), np.array([10]), np.array([3])
    f2, e2 = deliver(ft, fin, gen, 1.0, 0.0, steps)
    assert f2[0] == pytest.approx(1.3) and e2[0] == pytest.approx(2.2)


@pytest.mark.parametrize("key,value", [("output_lag_steps", -1), ("output_delay_s", "x")])
def test_bad_values_are_one_line_errors(key, value):
    with pytest.raises(ScenarioError, match=f"engine.{key}"):
        _run(**{key: value})


def test_fit_recovers_a_known_lag_from_the_model_itself():
    from specsim.cost_models.calibrate.engine_fit import fit_output_lag

    _, base = _run(output_lag_steps=0.0)
    _, lag = _run(output_lag_steps=1.25)
    two = (base["output_tokens"] > 1).to_numpy()
    got = fit_output_lag(base["ttft_s"][two], base["tpot_s"][two], lag["ttft_s"][two])
    assert got == pytest.approx(1.25, rel=1e-9)
    # held-out rows are not used: a wrong measurement there changes nothing
    bad = lag["ttft_s"][two].to_numpy().copy()
    bad[0] *= 10
    train = np.ones(len(bad), bool)
    train[0] = False
    assert fit_output_lag(base["ttft_s"][two], base["tpot_s"][two], bad, train) == \
        pytest.approx(1.25, rel=1e-9)
