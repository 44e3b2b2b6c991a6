"""``specsim advise`` (simulator/planning/advise.py, issue 25 part 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specsim.simulator.cli import main
from specsim.simulator.planning import advise as adv

DATA = Path(__file__).parent / "data"
PAYS = DATA / "advise_pays.yaml"  # batch 1, tau 4 at k 4, EAGLE-3
LOSES = DATA / "advise_loses.yaml"  # saturated, tau 1.2 at k 4, a 1B draft model
QUICK = {"draws": 3, "load_factors": None, "tornado": False}


def test_says_speculate_where_it_clearly_pays():
    a = adv.advise(PAYS, requests=60, **QUICK)
    (c,) = a.classes
    assert c.cls == "code" and c.speculate
    assert c.config["speculation.method"] == "eagle3"
    assert c.gain["tpot"] > 1.5 and c.band["tpot"][0] > 1.5  # P10 too
    assert c.p_gain == 1.0
    assert set(c.candidates) == {"method=eagle3, k=2", "method=eagle3, k=4",
                                 "method=eagle3, k=6"}  # the default space
    assert c.gain["tpot"] == max(c.candidates.values())  # the best candidate is chosen


def test_says_do_not_speculate_where_it_clearly_loses():
    a = adv.advise(LOSES, requests=200, **QUICK)
    (c,) = a.classes
    assert not c.speculate and c.choice == "no speculation"
    assert max(c.candidates.values()) < 1.0  # every k loses
    assert c.band["tpot"][2] < 1.0  # P90 too
    assert "loses" in c.why
    assert c.flags == {"vllm": "no --speculative-config",
                       "sglang": "no --speculative-algorithm"}


def test_ab_size_falls_as_the_true_gain_grows():
    """Higher acceptance -> a larger TPOT gain -> fewer requests per arm (per-request
    acceptance spread gives arm B a real variance)."""
    sizes, gains = [], []
    for tau in (1.7, 2.2, 3.0):
        a = adv.advise(PAYS, space={"speculation.k": [4]}, requests=60, draws=3,
                       load_factors=None, tornado=False,
                       overrides=[f"speculation.acceptance.tau={tau}",
                                  "speculation.acceptance.per_request="
                                  "{distribution: beta, concentration: 2}"])
        (row,) = a.ab["classes"]
        sizes.append(row["n_per_arm_p50"])
        gains.append(row["gain_p50"])
    assert gains[0] < gains[1] < gains[2]
    assert sizes[0] > sizes[1] > sizes[2] >= 1


def test_load_crossing_and_drivers():
    a = adv.advise(LOSES, requests=120, draws=2, load_factors=(0.05, 0.25, 1.0),
                   tornado=True)
    (c,) = a.classes
    grid = a.loads[next(iter(a.loads))]
    g = [p["chat"] for p in grid["tpot_gain"]]
    if c.crossing_qps is not None:  # between the grid points whose gains bracket 1
        i = next(i for i in range(len(g) - 1) if (g[i] - 1) * (g[i + 1] - 1) < 0)
        assert grid["qps"][i] < c.crossing_qps < grid["qps"][i + 1]
    else:
        assert "stays" in c.crossing_note
    assert g[0] > g[-1]  # speculation pays less as the load grows
    names = [b.input.name for b in a.sensitivity.bars]
    assert "tau.chat" in names and "spec_step_overhead_s" in names


def test_engine_flags_map_back_to_the_same_choice():
    from specsim.simulator.speculation.engine_config import map_sglang, map_vllm

    a = adv.advise(PAYS, requests=40, space={"speculation.k": [4]}, **QUICK)
    (c,) = a.classes
    m = map_vllm(c.flags["vllm_config"])
    assert m.keys["method"] == "eagle3" and m.keys["k"] == 4
    flags = c.flags["sglang"].split(" --")
    args = dict(f.removeprefix("--").split(" ", 1) for f in flags)
    sg = {k.replace("-", "_"): (int(v) if v.isdigit() else v) for k, v in args.items()}
    s = map_sglang(sg)
    assert s.keys["method"] == "eagle3" and s.keys["k"] == 4


def test_cli_writes_one_page_and_json(tmp_path, capsys):
    out = tmp_path / "advice"
    rc = main(["advise", str(PAYS), "--requests", "40", "--draws", "2", "--no-loads",
               "--json", "--out", str(out)])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["classes"][0]["speculate"] is True
    assert doc["sensitivity"]["table"][0]["rank"] == 1
    assert {p.name for p in out.iterdir()} >= {"report.md", "report.html", "advise.json",
                                                "sensitivity.csv", "tornado.png"}
    md = (out / "report.md").read_text()
    for section in ("Recommendation per class", "What flips the decision",
                    "A/B size and rollout order", "Deploy it", "--speculative-config"):
        assert section in md
    assert json.loads((out / "advise.json").read_text()) == doc


@pytest.mark.parametrize("args, needle", [
    (["--space", "missing.yaml"], "missing.yaml': cannot be read"),
    (["--space", str(DATA / "advise_pays.yaml")], "expected a non-empty list"),
    (["--set", "speculation.method=none"], "speculation.method: none, so advise has no "
                                           "drafter"),
])
def test_bad_input_is_one_line_exit_2(args, needle, tmp_path, capsys):
    out = tmp_path / "never"
    rc = main(["advise", str(PAYS), "--requests", "20", "--draws", "2", *args, "--out",
               str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and needle in err, err
    assert not out.exists()


def test_decision_band_and_break_even_for_one_choice():
    """advise.decision (the notebooks' 'how sure is this best k'): the band brackets the
    median, the top input is the class's tau, and its break-even flips the choice."""
    from specsim.simulator.planning import sensitivity as sens

    with sens.Model(PAYS, output="tpot_p50", requests=40) as m:
        d = adv.decision(m, draws=4, top=1)
    assert d.band[0] <= d.band[1] <= d.band[2] and d.band[0] > 1.0
    (f,) = d.flips
    assert f["input"] == "tau.code" and f["break_even"] is not None
    assert not f["within_band"] and "outside its band" in d.text()
    with sens.Model(PAYS, output="tpot_p50", requests=40) as fresh:
        assert abs(fresh.evaluate({"tau.code": f["break_even"]}) - 1.0) < 0.03
