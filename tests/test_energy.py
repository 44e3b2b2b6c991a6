"""Energy by phase (issue 25 part 5): one power curve for every phase, phases that add up to
the run's energy, idle devices at idle power, and ``specsim report --seed-tables``."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from specsim import run_scenario
from specsim.cost_models.catalog import PowerCurve, power_curve
from specsim.simulator.cli import main
from specsim.simulator.execution.ledger import PHASES, Ledger
from tests.conftest import REPO

CHAT, NOSPEC = REPO / "scenarios" / "chat.yaml", REPO / "scenarios" / "chat_nospec.yaml"
CURVE = PowerCurve("test", host=0.1, compute=2.0, memory=0.5, source="test")
PEAK, BW, IDLE, MAX = 1e15, 1e12, 100.0, 700.0


def _watts(u_c: float, u_m: float, c: PowerCurve = CURVE) -> float:
    """The curve as power.yaml writes it (independent of the kernel's code)."""
    return IDLE + (MAX - IDLE) * min(1.0, c.host + c.compute * u_c + c.memory * u_m)


def _step(led: Ledger, *, draft: float, dflops: float, dbytes: float, verify: float,
          flops: float, nbytes: float, engine: float, prompt: float = 0.0) -> None:
    """One step: a draft phase (``draft`` s doing dflops/dbytes), the target's pass
    (``verify`` s doing flops/nbytes) and the engine's bookkeeping (``engine`` s)."""
    a = np.array
    led.add(dt=a([draft + verify + engine]), draft=a([draft]), verify=a([verify]),
            flops=a([flops + dflops]), nbytes=a([nbytes + dbytes]), draft_phase=a([draft]),
            dflops=a([dflops]), dbytes=a([dbytes]), drafted=a([4.0 if draft else 0.0]),
            accepted=a([2.0 if draft else 0.0]), decode_rows=a([8.0]),
            prefill_tokens=a([prompt]), tokens=a([8.0 * (5 if draft else 1) + prompt]))


def _phase_w(led: Ledger, p: str) -> float:
    return led.phase_j[p] / (led.phase_s[p] * led.devices)


def test_same_utilisation_same_power_per_phase_with_and_without_speculation():
    """The issue's test: a target pass at the same utilisation draws the same power whether
    it verifies drafts or decodes plainly, whatever the step's draft phase and bookkeeping;
    the host's bookkeeping draws the same power in both; each is the curve at its own
    utilisation (not the step's average, which the draft phase and the host time dilute)."""
    v, F, B = 0.010, 3e12, 8e9  # u_compute 0.3, u_memory 0.8
    off = Ledger(1, PEAK, BW, IDLE, MAX, CURVE)
    on = Ledger(1, PEAK, BW, IDLE, MAX, CURVE)
    _step(off, draft=0.0, dflops=0.0, dbytes=0.0, verify=v, flops=F, nbytes=B, engine=0.001)
    _step(on, draft=0.004, dflops=1e10, dbytes=4e8, verify=v, flops=F, nbytes=B,
          engine=0.003)  # speculation: a draft phase and three times the bookkeeping
    for p in ("verify", "host"):
        assert _phase_w(on, p) == pytest.approx(_phase_w(off, p), rel=1e-12), p
    assert _phase_w(off, "verify") == pytest.approx(_watts(0.3, 0.8))
    assert _phase_w(off, "host") == pytest.approx(_watts(0.0, 0.0))
    assert _phase_w(on, "draft") == pytest.approx(_watts(1e10 / (0.004 * PEAK),
                                                         4e8 / (0.004 * BW)))
    assert off.phase_s["draft"] == 0.0 and off.phase_j["draft"] == 0.0
    # the step's average utilisation would have priced the spec step's pass lower
    assert on.energy_j / (0.017 * 1) < _phase_w(on, "verify")


def test_a_pass_is_split_between_prefill_and_verify_by_its_tokens_at_one_power():
    led = Ledger(2, PEAK, BW, IDLE, MAX, CURVE)
    _step(led, draft=0.0, dflops=0.0, dbytes=0.0, verify=0.02, flops=1e13, nbytes=5e9,
          engine=0.001, prompt=24.0)  # 8 decode tokens + 24 prompt tokens
    assert led.phase_s["prefill"] == pytest.approx(0.02 * 24 / 32)
    assert led.phase_s["verify"] == pytest.approx(0.02 * 8 / 32)
    assert _phase_w(led, "prefill") == pytest.approx(_phase_w(led, "verify"))
    assert _phase_w(led, "prefill") == pytest.approx(_watts(1e13 / (0.02 * PEAK),
                                                            5e9 / (0.02 * BW)))
    # a compute-bound pass is held at board power
    hot = Ledger(1, PEAK, BW, IDLE, MAX, CURVE)
    _step(hot, draft=0.0, dflops=0.0, dbytes=0.0, verify=0.01, flops=8e12, nbytes=1e9,
          engine=0.0, prompt=100.0)
    assert _phase_w(hot, "prefill") == pytest.approx(MAX)


def test_bundled_curve_reproduces_its_published_anchors():
    """power.yaml's H100-SXM fit: ~300 W at the batch-1 decode step's utilisations and ~600 W
    at batch 128's (the ML.ENERGY anchors it cites), board power for a compute-bound pass."""
    c = power_curve("H100-SXM")
    assert c.accelerator == "H100-SXM" and "arXiv 2601.22076" in c.source
    assert _watts(0.0025, 0.738, c) == pytest.approx(300.0, abs=3.0)
    assert _watts(0.2286, 0.814, c) == pytest.approx(600.0, abs=3.0)
    assert _watts(0.6, 0.2, c) == MAX
    d = power_curve("A100-SXM-80GB")  # no measurement of its own: the labelled default
    assert d.accelerator == "default" and d.source.startswith("assumed")


def _short(path, *extra):
    """A light, short-prompt run: no pass reaches the curve's cap, so a phase's average
    power is the curve at its mean utilisation exactly."""
    return run_scenario(path, overrides=[
        "workload.synthetic.requests=60", "workload.synthetic.arrival.rate=2.0",
        "workload.synthetic.prompt_tokens.mean=32", "workload.synthetic.prompt_tokens.max=64",
        *extra]).metrics


@pytest.fixture(scope="module")
def pair():
    return _short(NOSPEC), _short(CHAT)


def test_runs_with_and_without_speculation_draw_each_phase_on_one_curve(pair):
    c = power_curve("H100-SXM")
    for m in pair:
        ph = m["energy"]["phases"]
        for p in ("verify", "prefill", "draft", "host"):
            e = ph[p]
            if not e["device_seconds"]:
                continue
            assert e["average_power_w"] == pytest.approx(
                _watts(e["compute_util"], e["memory_util"], c), rel=1e-9), p
        assert ph["host"]["average_power_w"] == pytest.approx(_watts(0.0, 0.0, c))
        assert ph["idle"]["average_power_w"] == IDLE
    off, on = (m["energy"]["phases"] for m in pair)
    assert off["draft"]["device_seconds"] == 0.0 and on["draft"]["device_seconds"] > 0
    # a verify pass over 5 tokens per row is busier than a decode pass over one
    assert on["verify"]["compute_util"] > off["verify"]["compute_util"]
    assert on["verify"]["average_power_w"] > off["verify"]["average_power_w"]


def test_phases_add_up_to_the_run_energy_and_idle_is_at_idle_power(pair):
    for m in pair:
        ph, fleet = m["energy"]["phases"], m["fleet"]
        assert set(ph) == {*PHASES, "idle"}
        assert sum(e["energy_j"] for e in ph.values()) == pytest.approx(fleet["energy_j"],
                                                                         rel=1e-12)
        assert sum(e["energy_fraction"] for e in ph.values()) == pytest.approx(1.0)
        T, busy = m["simulated_time_s"], m["busy_fraction"]
        idle_s = (1.0 - busy) * T * fleet["devices"]
        assert idle_s > 0.5  # a light load: the GPU waits for arrivals
        assert ph["idle"]["device_seconds"] == pytest.approx(idle_s, rel=1e-9)
        assert ph["idle"]["energy_j"] == pytest.approx(idle_s * IDLE, rel=1e-9)
        busy_s = sum(e["device_seconds"] for p, e in ph.items() if p != "idle")
        assert busy_s == pytest.approx(busy * T * fleet["devices"], rel=1e-9)
        assert m["energy"]["power_model"]["accelerators"]["H100-SXM"]["source"]


def test_pd_pools_idle_each_at_their_own_power():
    m = run_scenario(REPO / "scenarios" / "pd_mixed_hardware.yaml",
                     overrides=["workload.synthetic.requests=40"]).metrics
    pools, ph = m["disaggregation"]["pools"], m["energy"]["phases"]
    T = m["simulated_time_s"]
    want = sum((1 - p["busy_fraction"]) * T * p["devices"] * p["power_idle_w"]
               for p in pools.values())
    assert ph["idle"]["energy_j"] == pytest.approx(want, rel=1e-9)
    assert sum(e["energy_j"] for e in ph.values()) == pytest.approx(m["fleet"]["energy_j"],
                                                                     rel=1e-12)
    assert set(m["energy"]["power_model"]["accelerators"]) == {p["accelerator"]
                                                              for p in pools.values()}


# ------------------------------------------------------------------ specsim report --seed-tables


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("seed")
    small = ["--set", "workload.synthetic.requests=40", "--quiet", "--no-report"]
    for name, sc, extra in (("base", NOSPEC, []), ("spec", CHAT, []),
                            ("k2", CHAT, ["--set", "speculation.k=2"]),
                            ("two", CHAT, ["--set", "hardware.count=2"]),
                            ("pair", CHAT, ["--baseline"])):
        assert main(["run", str(sc), "--out", str(d / name), *small, *extra]) == 0
    return d


def test_seed_tables_cost_and_energy_per_configuration(runs, capsys):
    out = runs / "tables"
    assert main(["report", "--seed-tables", str(runs / "base"), str(runs / "spec"),
                 str(runs / "k2"), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "## Cost per configuration" in text and "## Energy per configuration" in text
    assert "arXiv 2601.22076" in text  # the power model is named with its source
    assert (out / "seed_tables.md").read_text() in text
    m = {n: json.loads((runs / n / "metrics.json").read_text()) for n in ("base", "spec", "k2")}
    with open(out / "seed_cost.csv") as fh:
        cost = list(csv.DictReader(fh))
    with open(out / "seed_energy.csv") as fh:
        energy = list(csv.DictReader(fh))
    assert [r["configuration"] for r in cost] == ["no speculation", "eagle3 k=4 (static)",
                                                  "eagle3 k=2 (static)"]
    for row, name in zip(energy, ("base", "spec", "k2"), strict=True):
        mm, mb = m[name], m["base"]
        assert float(row["j_per_output_token"]) == pytest.approx(
            mm["energy_j_per_output_token"])
        assert float(row["energy_gain"]) == pytest.approx(
            mb["energy_j_per_output_token"] / mm["energy_j_per_output_token"])
        # energy gain = throughput gain x baseline power / this power
        assert float(row["energy_gain"]) == pytest.approx(
            float(row["throughput_gain"]) * mb["fleet"]["average_power_w"]
            / mm["fleet"]["average_power_w"], rel=1e-9)
        assert float(row["verify_power_w"]) == pytest.approx(
            mm["energy"]["phases"]["verify"]["average_power_w"])
    for row, name in zip(cost, ("base", "spec", "k2"), strict=True):
        assert float(row["usd_per_million_output_tokens"]) == pytest.approx(
            m[name]["cost_usd_per_million_output_tokens"])
        assert int(row["devices"]) == 1


def test_seed_tables_of_a_baseline_folder_are_those_of_its_two_runs(runs):
    """``specsim run --baseline`` holds both runs: its tables are the two folders' (the
    baseline twin is chat.yaml with speculation off, i.e. chat_nospec.yaml)."""
    from specsim.simulator.report.seed_tables import from_baseline_run, load, rows

    one = rows(from_baseline_run(runs / "pair"))
    two = rows([load(runs / "base"), load(runs / "spec")])
    for t1, t2 in zip(one, two, strict=True):
        for r1, r2 in zip(t1, t2, strict=True):
            r1.pop("folder"), r2.pop("folder")
            assert r1.keys() == r2.keys()
            for k in r1:
                if isinstance(r1[k], float):
                    assert r1[k] == pytest.approx(r2[k], rel=1e-12), k
                elif not k.endswith("energy_fraction"):  # None where the phase never ran
                    assert r1[k] == r2[k], k
    assert main(["report", "--seed-tables", str(runs / "pair")]) == 0


@pytest.mark.parametrize("args, says", [
    (["spec", "base"], "the baseline (first folder) speculates"),
    (["base", "base"], "does not speculate"),
    (["base"], "at least one speculative run folder"),
    (["base", "two"], "differs from the baseline's at 'hardware.count'"),
    (["base", "pair"], "not a sweep or a --baseline run"),
    (["spec"], "or one `specsim run --baseline` folder"),
    (["base", "nowhere"], "not a folder"),
])
def test_seed_tables_refuse_bad_input_in_one_line(runs, capsys, args, says):
    assert main(["report", "--seed-tables", *(str(runs / a) for a in args)]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1


def test_seed_tables_write_nothing_into_a_foreign_folder(runs, capsys):
    foreign = runs / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    assert main(["report", "--seed-tables", str(runs / "base"), str(runs / "spec"),
                 "--out", str(foreign)]) == 2
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
    assert main(["report", str(runs / "base"), "--seed-tables", str(runs / "base"),
                 str(runs / "spec")]) == 2
    assert "not both" in capsys.readouterr().err
