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


# the bundled drafters as data: every kind the kernel prices (issue 22 part 1)
KINDS = {
    "sequential": ("draft_model", {}),
    "sequential tree": ("eagle3", {"drafter": None, "tree": {"widths": [3, 2, 2, 1]}}),
    "parallel": ("dflash", {}),
    "medusa": ("medusa", {"drafter": None}),
    "lookup": ("ngram", {"drafter": None}),
    "ratio": ("draft_model", {"drafter": None, "draft_cost": {"ratio": 0.1}}),
    "fixed": ("draft_model", {"drafter": None, "draft_cost": {"seconds_per_token": 2e-4}}),
}


def test_no_built_in_drafter_prices_itself():
    """A built-in drafter declares a kind (and its cost model or scalar); only the kernel
    prices it (``kernel_jit._draft``): no class of drafters.py has a ``cost_steps`` of its
    own, so a pricing rule cannot be edited in one place and not the other."""
    from specsim.simulator.execution import kernel_jit as kj
    from specsim.simulator.speculation import drafters as dr

    classes = [c for c in vars(dr).values() if isinstance(c, type) and issubclass(c, dr.Drafter)]
    assert len(classes) >= 8
    for cls in classes:
        assert "cost_steps" not in vars(cls) or cls is dr.Drafter, cls.__name__
        assert cls.kind in kj.DRAFTER_KINDS, cls.__name__
    assert {m for m, _ in KINDS.values()} >= {"draft_model", "eagle3", "dflash", "medusa", "ngram"}


@pytest.mark.parametrize("kind", list(KINDS))
def test_cost_steps_is_the_kernels_pricing_compiled_or_as_source(kind):
    """``cost_steps`` (a Python caller: the per-class drafter, the adaptive policies) runs
    the kernel's ``_draft``: as its Python source it gives the compiled function's bits,
    over steps of mixed draft lengths, idle rows and a prefill chunk."""
    pytest.importorskip("numba", reason="numba is not installed: only the Python source runs")
    from specsim.simulator.execution import kernel_jit as kj

    method, spec = KINDS[kind]
    d = _drafter(method, **{"drafter": "Llama-3.2-1B", **spec})
    assert kj.drafter_data(d) is not None  # the compiled plan prices it too
    r = np.random.default_rng(1)
    k = r.integers(0, 5, (6, 9)).astype(np.int64)
    k[2] = 0  # a step where nobody drafts
    ctx = r.integers(10, 4000, (6, 9)).astype(np.float64)
    pf = np.array([0.0, 512.0, 0.0, 0.0, 64.0, 0.0])
    pq = pf * (pf + 1) / 2
    kind_, p, scal = kj.drafter_data(d)
    rows = np.asarray(d.tree.pass_rows if d.tree is not None else [], np.int64)
    out = np.zeros((3, 6))
    kj._draft(6, 9, k, ctx, pf, pq, kind_, p, d.prefills, rows, scal, out[0], out[1], out[2])
    kj.functions(False)  # cost_steps runs as the last kernel made runs: the Python source
    got = d.cost_steps(k, ctx, pf, pq)
    for a, b in zip(got, out, strict=True):
        np.testing.assert_array_equal(a, b)
    assert got[0][2] == 0.0 and (got[0][[0, 1, 3, 4, 5]] > 0).all()
