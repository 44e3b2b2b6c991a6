"""A plug-in the kernel has no data for is found by its methods and named in the run's notes
(the kernel calls it through a slower Python hook); built-ins give no note; each hook gives
the built-in's bits when the plug-in does what the built-in does."""

from __future__ import annotations

import pandas as pd
import pytest

from specsim.simulator.cluster.engine import run_scenario
from specsim.simulator.cluster.worker import Ledger
from specsim.simulator.execution.plugins import KERNEL_METHODS, foreign
from specsim.simulator.registry import BATCH_SCHEDULERS
from specsim.simulator.scheduling.batching import FcfsScheduler
from specsim.simulator.speculation.drafters import SequentialDrafter
from tests.conftest import make_trace


@BATCH_SCHEDULERS.register("test_fcfs_copy")
class FcfsCopy(FcfsScheduler):
    """A plug-in batch scheduler: fcfs, declared outside specsim."""


class OwnCost(SequentialDrafter):
    def cost_steps(self, k, ctx, pf_tokens, pf_qc):
        return super().cost_steps(k, ctx, pf_tokens, pf_qc)


def _bare(cls):
    return cls.__new__(cls)  # only its type and own attributes are read


def test_built_ins_are_not_plug_ins():
    assert foreign(_bare(SequentialDrafter), KERNEL_METHODS["drafter"]) == []
    assert foreign(_bare(FcfsScheduler), KERNEL_METHODS["batch scheduler"]) == []
    assert foreign(Ledger(1, 1.0, 1.0, 1.0, 2.0), KERNEL_METHODS["ledger"]) == []


def test_a_subclass_a_patched_class_and_a_patched_object_are_plug_ins(monkeypatch):
    why = foreign(_bare(OwnCost), KERNEL_METHODS["drafter"])
    assert why and "OwnCost is not a built-in" in why[0]
    d = _bare(SequentialDrafter)
    d.cost_steps = lambda *a: a  # on the object: the class is still the built-in
    assert foreign(d, KERNEL_METHODS["drafter"]) == ["its cost_steps is set on the object"]

    def cost_steps(self, k, ctx, pf_tokens, pf_qc):
        return None

    monkeypatch.setattr(SequentialDrafter, "cost_steps", cost_steps)  # the method object
    why = foreign(_bare(SequentialDrafter), KERNEL_METHODS["drafter"])
    assert why == [f"its cost_steps comes from {__name__}"]


def test_a_plug_in_scheduler_is_named_in_the_notes_and_gives_the_same_run():
    sc = {"model": "Llama-3.1-8B", "hardware": {"accelerator": "H100-SXM"},
          "speculation": {"method": "draft_model", "k": 3, "drafter": "Llama-3.2-1B",
                          "acceptance": {"alpha": 0.8}},
          "workload": {}, "simulation": {"progress": False, "compiled": True}}
    tr = make_trace(40, rate=20.0, output=30)
    built_in = run_scenario(sc, trace=tr)
    plug = run_scenario({**sc, "scheduler": {"policy": "test_fcfs_copy"}}, trace=tr)
    said = [n for n in plug.notes if n.startswith("plug-in batch scheduler FcfsCopy")]
    assert len(said) == 1 and "Python hook" in said[0]
    assert not any(n.startswith("plug-in") for n in built_in.notes)
    pd.testing.assert_frame_equal(built_in.requests, plug.requests)  # the same bits


@pytest.mark.parametrize("axis", ["drafter", "cost model", "ledger", "acceptance model"])
def test_each_hook_gives_the_built_ins_bits(axis, monkeypatch):
    """A plug-in that does what the built-in does, patched in from outside specsim: the
    kernel calls it through its hook (pricing between the compiled plan and its timing; a
    ledger's add after the compiled commit; the acceptance sampler inside the pure-Python
    plan's loop; a cost model's own overheads combined by the kernel's ``_combine``) and
    the run is the built-in's, bit for bit, with a note."""
    from specsim.cost_models.roofline import ForwardCostModel
    from specsim.simulator.execution.ledger import Ledger as BuiltInLedger
    from specsim.simulator.speculation.acceptance import AcceptanceModel

    sc = {"model": "Llama-3.1-8B", "hardware": {"accelerator": "H100-SXM"},
          "speculation": {"method": "draft_model", "k": 3, "drafter": "Llama-3.2-1B",
                          "acceptance": {"alpha": 0.7}},
          "workload": {}, "simulation": {"progress": False}}
    tr = make_trace(60, rate=20.0, prompt=(20, 1500), output=(1, 200), seed=4)
    built_in = run_scenario(sc, trace=tr)

    def outside(fn):
        fn.__module__ = __name__
        return fn

    if axis == "drafter":
        own = SequentialDrafter.cost_steps
        monkeypatch.setattr(SequentialDrafter, "cost_steps",
                            outside(lambda self, *a: own(self, *a)))
    elif axis == "cost model":
        for name in ("iteration_overhead", "speculation_overhead"):
            own = getattr(ForwardCostModel, name)
            monkeypatch.setattr(ForwardCostModel, name,
                                outside(lambda self, *a, own=own: own(self, *a)))
    elif axis == "ledger":
        add = BuiltInLedger.add
        monkeypatch.setattr(BuiltInLedger, "add", outside(lambda self, *a: add(self, *a)))
    else:
        acc = AcceptanceModel.accepted
        monkeypatch.setattr(AcceptanceModel, "accepted",
                            staticmethod(outside(lambda u, c, k: acc(u, c, k))))
    plug = run_scenario(sc, trace=tr)
    assert [n for n in plug.notes if n.startswith(f"plug-in {axis} ")]
    pd.testing.assert_frame_equal(built_in.requests, plug.requests, check_exact=True)
    pd.testing.assert_frame_equal(built_in.iterations, plug.iterations, check_exact=True)
    drop = ("wall_time_s", "notes")
    assert ({k: v for k, v in built_in.metrics.items() if k not in drop}
            == {k: v for k, v in plug.metrics.items() if k not in drop})
