"""A scenario names a calibration profile; metrics and the cost model use it."""

from __future__ import annotations

import pytest
import yaml

from specsim.cost_models.errors import CatalogError
from specsim.simulator import run_scenario
from tests.conftest import make_trace

TRACE = make_trace(40, rate=2.0, prompt=200, output=200)


def _sc(cal=None):
    sc = {"model": "Llama-3.1-8B", "hardware": {"accelerator": "H100-SXM"},
          "speculation": {"method": "none"}, "workload": {}}
    if cal is not None:
        sc["calibration"] = cal
    return sc


def _profile(tmp_path, eta_m, name="test-h100"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "hardware": "H100-SXM", "source": "test fit",
        "fitted": {"eta_compute": 0.7, "eta_memory": eta_m, "per_layer_overhead_s": 0.0,
                   "fixed_overhead_s": 0.0}}))
    return str(path)


def test_profile_is_used_and_named(tmp_path):
    base = run_scenario(_sc(), trace=TRACE).metrics
    assert base["calibration"] == "H100-SXM"  # the bundled profile for the hardware
    fast = run_scenario(_sc(_profile(tmp_path, 0.95)), trace=TRACE).metrics
    slow = run_scenario(_sc(_profile(tmp_path, 0.5, "slow")), trace=TRACE).metrics
    assert fast["calibration"] == "test-h100" and slow["calibration"] == "slow"
    assert fast["calibration_values"]["eta_memory"] == 0.95
    # memory-bound decode: TPOT scales with 1 / eta_memory
    assert slow["tpot_s"]["mean"] / fast["tpot_s"]["mean"] == pytest.approx(0.95 / 0.5, rel=0.03)


def test_profile_fitted_elsewhere_is_noted(tmp_path):
    res = run_scenario({**_sc(_profile(tmp_path, 0.8)), "hardware": {"accelerator": "A100-SXM-80GB"}},
                       trace=TRACE)
    assert any("fitted on H100-SXM" in n for n in res.metrics["notes"])


def test_bad_profile_is_a_clear_error(tmp_path):
    with pytest.raises(CatalogError, match="no calibration profile 'nope'"):
        run_scenario(_sc("nope"), trace=TRACE)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"fitted": {"eta_compute": -1}}))
    with pytest.raises(CatalogError, match="fitted.eta_compute: expected a number greater than 0, got -1"):
        run_scenario(_sc(str(bad)), trace=TRACE)
