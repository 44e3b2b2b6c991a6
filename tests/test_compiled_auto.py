"""``simulation.compiled: auto``: a short first run on a fresh machine is not made to wait
for numba's compile; a long run, a run with the compiled kernel at hand, or a caller that
runs many scenarios compiles (same bits either way, checked in test_kernel_compiled)."""

from __future__ import annotations

import pytest

from specsim.simulator.execution import kernel


@pytest.fixture
def fresh(monkeypatch):
    """As on a fresh clone: no cache on disk, nothing compiled, no sweep or plan."""
    monkeypatch.setattr(kernel, "_prefer_compiled", False)
    monkeypatch.setattr(kernel, "_compiled_at_hand", lambda: False)


def test_a_short_first_run_is_not_compiled(fresh):
    assert kernel.compiled_backend("auto", 1000) is False
    assert kernel.compiled_backend("auto", kernel.AUTO_MIN_REQUESTS - 1) is False


def test_a_long_run_a_forced_one_and_many_runs_compile(fresh, monkeypatch):
    assert kernel.compiled_backend("auto", kernel.AUTO_MIN_REQUESTS) is True
    assert kernel.compiled_backend(True, 10) is True
    assert kernel.compiled_backend(False, 10**6) is False
    kernel.prefer_compiled()
    assert kernel.compiled_backend("auto", 10) is True


def test_the_compiled_kernel_at_hand_is_used_for_short_runs(fresh, monkeypatch):
    monkeypatch.setattr(kernel, "_compiled_at_hand", lambda: True)
    assert kernel.compiled_backend("auto", 10) is True


def test_a_short_auto_run_and_a_compiled_one_agree(fresh):
    from pathlib import Path

    from specsim import run_scenario

    sc = Path(__file__).resolve().parents[1] / "scenarios" / "chat.yaml"
    over = {"workload.synthetic.requests": 60}
    pure = run_scenario(sc, overrides=over)
    forced = run_scenario(sc, overrides={**over, "simulation.compiled": True})
    assert pure.metrics["tpot_s"] == forced.metrics["tpot_s"]
