"""`specsim acceptance import`: measured acceptance -> a profile YAML that reproduces it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from specsim.simulator import run_scenario
from specsim.simulator.cli import main
from specsim.simulator.speculation.acceptance import build_acceptance
from specsim.simulator.speculation.acceptance_import import import_profile
from tests.conftest import REPO, make_trace

MODEL = "openbmb/MiniCPM3-4B"
# vLLM PR #24243's per-position rates (REFERENCES-speculation-load.md B6), as counters
RATES = [0.57, 0.34, 0.21, 0.14, 0.10]


def prometheus_text(rates=RATES, drafts=100_000, per_pos=True, engines=2) -> str:
    """What a vLLM server's /metrics holds (counters with _total, per engine, plus noise)."""
    k = len(rates)
    lines = ["# HELP vllm:num_requests_running Number of requests in model execution batches.",
             "# TYPE vllm:num_requests_running gauge",
             f'vllm:num_requests_running{{engine="0",model_name="{MODEL}"}} 3.0']
    for e in range(engines):
        lab = f'engine="{e}",model_name="{MODEL}"'
        d = drafts // engines
        acc = [round(r * d) for r in rates]
        lines += ["# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
                  "# TYPE vllm:spec_decode_num_drafts_total counter",
                  f"vllm:spec_decode_num_drafts_total{{{lab}}} {float(d)}",
                  f"vllm:spec_decode_num_drafts_created{{{lab}}} 1.7e+09",
                  f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {float(d * k)}",
                  f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {float(sum(acc))}"]
        if per_pos:
            lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{i}"}}'
                      f" {float(a)}" for i, a in enumerate(acc)]
    return "\n".join(lines) + "\n"


def _scenario(acceptance, k, **spec):
    return {"model": "Llama-3.1-8B", "hardware": {"accelerator": "H100-SXM"},
            "speculation": {"method": "eagle3", "k": k, "acceptance": acceptance,
                            "draft_cost": {"ratio": 0.05}, **spec},
            "scheduler": {"block_size": 1}, "workload": {}}


def simulated_rates(acceptance, k, requests=160, output=6000):
    """Per-position acceptance observed in a run: P(accepted >= j) over decode steps.

    One request at a time and KV blocks of one token, so the KV growth between two decode
    iterations of the same request is the tokens one step emitted (accepted + 1).
    """
    tr = make_trace(requests, gap=1e4, prompt=32, output=output)
    res = run_scenario(_scenario(acceptance, k), trace=tr)
    it = res.iterations
    kv = it["kv_blocks_used"].to_numpy()
    dec = ((it["decode_seqs"] == 1) & (it["prefill_seqs"] == 0) & (it["batch_size"] == 1)
           & (it["drafted_tokens"] == k)).to_numpy()
    d = np.diff(kv)
    both = dec[1:] & dec[:-1] & (d >= 1) & (d <= k + 1)
    acc = d[both] - 1
    assert acc.size > 50_000
    return np.array([(acc >= j).mean() for j in range(1, k + 1)]), res


def test_prometheus_per_position_profile_reproduces_its_rates_in_simulation(tmp_path):
    src = tmp_path / "metrics.txt"
    src.write_text(prometheus_text())
    out = tmp_path / "minicpm.yaml"
    res = import_profile("prometheus", src, out, method="eagle3", cls="chat")
    spec = res["entry"]["classes"]["chat"]
    assert spec["at_k"] == 5
    # conditional alphas: rate_j / rate_{j-1}, not the rates themselves
    assert spec["alpha_by_position"][1] == pytest.approx(0.34 / 0.57, rel=1e-5)
    loaded = yaml.safe_load(out.read_text())
    assert loaded["minicpm"]["classes"]["chat"]["alpha_by_position"] == spec["alpha_by_position"]
    sim, run = simulated_rates({"profile": str(out)}, k=5)
    assert sim == pytest.approx(RATES, rel=0.02)
    assert run.metrics["mean_acceptance_length"] == pytest.approx(1 + sum(RATES), rel=0.02)
    assert run.metrics["speculation"]["acceptance_profile"] == "minicpm"


def test_csv_counts_profile_reproduces_its_rates(tmp_path):
    drafted = 20_000
    rows = ["# measured on our cluster", "position,accepted,drafted"]
    rates = [0.917, 0.837, 0.648, 0.538, 0.451, 0.348]  # Qwen3.6-27B MTP, REFERENCES B6
    rows += [f"{j},{round(r * drafted)},{drafted}" for j, r in enumerate(rates, 1)]
    (tmp_path / "pos.csv").write_text("\n".join(rows) + "\n")
    import_profile("csv", tmp_path / "pos.csv", tmp_path / "mtp.yaml", method="mtp")
    sim, _ = simulated_rates({"profile": str(tmp_path / "mtp.yaml")}, k=6, requests=60)
    assert sim == pytest.approx(rates, rel=0.02)


def test_csv_rate_and_alpha_columns_mean_what_they_say(tmp_path):
    (tmp_path / "r.csv").write_text("position,rate\n0,0.8\n1,0.4\n")
    (tmp_path / "a.csv").write_text("position,alpha\n1,0.8\n2,0.4\n")
    r = import_profile("csv", tmp_path / "r.csv", tmp_path / "r.yaml")
    a = import_profile("csv", tmp_path / "a.csv", tmp_path / "a.yaml")
    assert r["entry"]["classes"]["default"]["alpha_by_position"] == [0.8, 0.5]
    assert a["entry"]["classes"]["default"]["alpha_by_position"] == [0.8, 0.4]


def test_tau_at_k_profile_reproduces_tau(tmp_path):
    # no per-position counters: tau at k, k = draft tokens / drafts
    (tmp_path / "m.txt").write_text(prometheus_text(per_pos=False))
    res = import_profile("prometheus", tmp_path / "m.txt", tmp_path / "t.yaml")
    spec = res["entry"]["classes"]["default"]
    assert spec["at_k"] == 5 and spec["tau"] == pytest.approx(1 + sum(RATES), rel=1e-4)
    tr = make_trace(10, gap=1e4, prompt=32, output=6000)
    m = run_scenario(_scenario({"profile": str(tmp_path / "t.yaml")}, 5), trace=tr).metrics
    assert m["mean_acceptance_length"] == pytest.approx(spec["tau"], rel=0.02)
    # --form tau from per-position counters: the same tau
    res2 = import_profile("prometheus", tmp_path / "m.txt", tmp_path / "t2.yaml", form="tau",
                          force=True)
    assert res2["entry"]["classes"]["default"]["tau"] == pytest.approx(spec["tau"], rel=1e-4)


def test_specdec_histograms_per_prompt_kind(tmp_path):
    cal = REPO / "cost_models" / "calibrations" / "cpu-example.yaml"
    res = import_profile("specdec", cal, tmp_path / "sd.yaml", drafter="self-spec-26L")
    classes = res["entry"]["classes"]
    assert set(classes) == {"code", "chat"} and res["entry"]["method"] == "draft_model"
    runs = yaml.safe_load(cal.read_text())["end_to_end"]["runs"]
    for kind, spec in classes.items():
        want = np.sum([r["accept_hist"] for r in runs
                       if r["drafter"] == "self-spec-26L" and r["kind"] == kind], axis=0)
        assert spec["histogram"] == want.tolist() and spec["at_k"] == 3
        p = want / want.sum()
        tau = 1 + (p * np.arange(len(p))).sum()
        tr = make_trace(10, gap=1e4, prompt=32, output=6000, cls=kind)
        m = run_scenario(_scenario({"profile": str(tmp_path / "sd.yaml")}, 3), trace=tr).metrics
        assert m["mean_acceptance_length"] == pytest.approx(tau, rel=0.02)


def test_specdec_step_tables_give_the_same_histogram(tmp_path):
    # RunResult.summary() records: q = drafts + 1, emitted = accepted + 1 per step
    runs = [{"kind": "code", "prompt": "a", "drafter": "self-spec-4L", "k": 3, "tau": 2.0,
             "step_table": {"q": [4, 4, 4, 4, 2], "emitted": [1, 4, 2, 3, 1],
                            "draft_passes": [3, 3, 3, 3, 1], "draft_s": [0.0] * 5}},
            {"kind": "chat", "prompt": "b", "drafter": "self-spec-4L", "k": 3,
             "step_table": {"q": [4, 4], "emitted": [1, 1]}}]
    (tmp_path / "runs.json").write_text(json.dumps(runs))
    res = import_profile("specdec", tmp_path / "runs.json", tmp_path / "o.yaml", cls="code")
    spec = res["entry"]["classes"]
    assert list(spec) == ["code"] and spec["code"]["histogram"] == [1, 1, 1, 1]


def _cli(args, capsys):
    code = main(args)
    return code, capsys.readouterr()


@pytest.mark.parametrize("name,text,fmt,want", [
    ("bad-value.txt", prometheus_text(engines=1).replace(" 100000.0\n", " 1e5x\n", 1),
     "prometheus", r"bad-value.txt line \d+: vllm:spec_decode_num_drafts_total: expected a number"),
    ("growing.txt", prometheus_text(rates=[0.3, 0.5], engines=1), "prometheus",
     r"growing.txt line \d+: accepted at position 1 \(50000\) exceeds position 0"),
    ("empty.txt", "# nothing here\n", "prometheus", r"empty.txt: no vllm:spec_decode_num_drafts"),
    ("bad.csv", "position,accepted,drafted\n1,5,10\n2,x,10\n", "csv",
     r"bad.csv line 3: accepted: expected a number, got 'x'"),
    ("gap.csv", "position,rate\n1,0.5\n3,0.2\n", "csv",
     r"gap.csv line 3: position: expected consecutive positions from 1"),
    ("hdr.csv", "pos,acc\n1,2\n", "csv", r"hdr.csv line 1: header pos,acc: expected columns"),
    ("more.csv", "position,accepted,drafted\n1,11,10\n", "csv",
     r"more.csv line 2: accepted \(11\) exceeds drafted \(10\)"),
    ("hist.yaml", yaml.safe_dump([{"kind": "code", "prompt": "p", "drafter": "d", "k": 3,
                                   "accept_hist": [1, 2]}]), "specdec",
     r"hist.yaml: run 0 \(code/p\): accept_hist: expected k \+ 1 = 4 counts, got 2"),
    ("broken.yaml", "runs: [\n  - {kind: code\n", "specdec", r"broken.yaml line \d+: cannot parse"),
])
def test_malformed_inputs_give_one_line_errors(tmp_path, capsys, monkeypatch, name, text, fmt,
                                               want):
    monkeypatch.chdir(tmp_path)
    Path(name).write_text(text)
    code, cap = _cli(["acceptance", "import", "--from", fmt, name, "--out", "p.yaml"], capsys)
    assert code == 2
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specsim: error: "), cap.err
    assert re.search(want, lines[0]), lines[0]
    assert "Traceback" not in cap.err and not Path("p.yaml").exists()


def test_never_overwrites_without_force_and_writes_atomically(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("m.txt").write_text(prometheus_text())
    Path("p.yaml").write_text("mine: {}\n")
    code, cap = _cli(["acceptance", "import", "--from", "prometheus", "m.txt", "--out",
                      "p.yaml"], capsys)
    assert code == 2 and "p.yaml: already exists; pass --force" in cap.err
    assert Path("p.yaml").read_text() == "mine: {}\n"
    code, cap = _cli(["acceptance", "import", "--from", "prometheus", "m.txt", "--out",
                      "p.yaml", "--force", "--name", "ours", "--class", "code"], capsys)
    assert code == 0 and "wrote p.yaml" in cap.out and "ours.code: alpha_by_position" in cap.out
    assert list(yaml.safe_load(Path("p.yaml").read_text())) == ["ours"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.txt", "p.yaml"]  # no temp left


def test_profile_files_resolve_from_the_scenario_folder_and_pick_by_name(tmp_path):
    (tmp_path / "m.txt").write_text(prometheus_text())
    import_profile("prometheus", tmp_path / "m.txt", tmp_path / "one.yaml")
    model = build_acceptance({"profile": "one.yaml"}, 0, base_dir=tmp_path)
    assert model.name == "one" and model.default is not None
    two = {"a": {"source": "x", "classes": {"default": {"alpha": 0.5}}},
           "b": {"source": "y", "classes": {"default": {"alpha": 0.7}}}}
    (tmp_path / "two.yaml").write_text(yaml.safe_dump(two))
    assert build_acceptance({"profile": "two.yaml#b"}, 0,
                            base_dir=tmp_path).default.mean_alpha == 0.7
    from specsim.errors import ScenarioError

    with pytest.raises(ScenarioError, match=r"holds 2 profiles; name one as two.yaml#NAME"):
        build_acceptance({"profile": "two.yaml"}, 0, base_dir=tmp_path)
    with pytest.raises(ScenarioError, match="no acceptance profile file 'nope.yaml'"):
        build_acceptance({"profile": "nope.yaml"}, 0, base_dir=tmp_path)


def test_scenario_file_names_an_imported_profile_by_relative_path(tmp_path):
    (tmp_path / "m.txt").write_text(prometheus_text())
    import_profile("prometheus", tmp_path / "m.txt", tmp_path / "prof.yaml", method="eagle3")
    sc = _scenario({"profile": "prof.yaml"}, 7)
    sc["workload"] = {"synthetic": {"arrival": {"process": "poisson", "rate": 1.0},
                                    "requests": 3, "prompt_tokens": 32, "output_tokens": 64}}
    sc["simulation"] = {"progress": False}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(sc))
    res = run_scenario(str(tmp_path / "s.yaml"))
    note = [n for n in res.metrics["notes"] if "prof.default" in n]
    assert note and "measured at k=5, applied at k=7: derived" in note[0]
