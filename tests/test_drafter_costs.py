"""Each drafter's cost behaves as its design says (issue 10): a draft model's grows linearly
in k (k sequential passes), PARD's and DFlash's stay near one pass as k grows (one parallel
pass over the k positions), an n-gram lookup's is CPU microseconds."""

from __future__ import annotations

import numpy as np
import pytest

from specsim.simulator.cluster.engine import Deployment, load_scenario


def _drafter(method: str, drafter: str | None = "Llama-3.2-1B", **spec):
    sc = {"model": "Llama-3.1-8B", "hardware": {"accelerator": "H100-SXM", "count": 1},
          "speculation": {"method": method, "k": 4, "acceptance": {"alpha": 0.7},
                          **({"drafter": drafter} if drafter else {}), **spec},
          "workload": {}, "simulation": {"progress": False}}
    scenario, base, _ = load_scenario(sc)
    return Deployment(scenario, base).drafter


def _cost(drafter, k: int, rows: int = 8, ctx: float = 1000.0) -> float:
    kk = np.full((1, rows), k, np.int64)
    cx = np.full((1, rows), ctx)
    z = np.zeros(1)
    return float(drafter.cost_steps(kk, cx, z, z)[0][0])


def test_draft_model_cost_grows_linearly_in_k():
    d = _drafter("draft_model")
    costs = np.array([_cost(d, k) for k in range(1, 9)])
    steps = np.diff(costs)
    assert (steps > 0).all()
    # k sequential passes: each extra draft token costs about one more drafter pass
    assert steps.max() / steps.min() < 1.1
    assert costs[7] / costs[0] == pytest.approx(8, rel=0.1)


@pytest.mark.parametrize("method", ["pard", "dflash"])
def test_parallel_drafters_stay_near_one_pass_as_k_grows(method):
    d = _drafter(method)
    one, sixteen = _cost(d, 1), _cost(d, 16)
    assert sixteen < 1.6 * one  # one pass over 16 positions, not 16 passes
    seq = _drafter("draft_model")
    assert _cost(seq, 16) > 8 * _cost(seq, 1) * 0.9


def test_ngram_lookup_costs_cpu_microseconds():
    d = _drafter("ngram", drafter=None, ngram={"cpu_s_per_step": 2e-5})
    assert _cost(d, 4) == pytest.approx(2e-5)
    assert _cost(d, 16, rows=64) == pytest.approx(2e-5)  # per step, whatever the batch
    assert _cost(d, 0) == 0.0
