"""Acceptance as evidence (issue 25 part 2) and A/B sizing (part 4): a posterior from
per-round counts, its bands, the profile it writes, and how big an A/B must be."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from specsim.simulator.cli import main
from specsim.simulator.planning import ab_sizing
from specsim.simulator.speculation import evidence
from specsim.simulator.speculation.acceptance import build_acceptance

DATA = Path(__file__).parent / "data"
EXAMPLE = DATA / "acceptance_rounds.csv"


def synth_rounds(cond, requests, rounds, concentration=None, seed=0):
    """(request, accepted, k) per round drawn from the conditional alphas ``cond``; with a
    concentration c every request's alphas are scaled by alpha_r / mean, alpha_r ~ Beta(mean
    c, (1 - mean) c), mean = cond's mean (capped at 1)."""
    rng = np.random.default_rng(seed)
    cond = np.asarray(cond, float)
    k = len(cond)
    scale = np.ones(requests)
    if concentration is not None:
        m = cond.mean()
        scale = rng.beta(m * concentration, (1 - m) * concentration, requests) / m
    alphas = np.clip(cond[None, :] * scale[:, None], 0, 1)  # (requests x k)
    req = np.repeat(np.arange(requests), rounds)
    ok = rng.random((requests * rounds, k)) < alphas[req]
    accepted = np.cumprod(ok, axis=1).sum(axis=1)
    return req, accepted, np.full(len(req), k)


def posterior(cond, requests, rounds, concentration=None, seed=0, cls="chat"):
    req, acc, k = synth_rounds(cond, requests, rounds, concentration, seed)
    return evidence.fit(evidence.from_rounds(evidence.Key(cls=cls), req, acc, k))


def width(p, k=4, seed=1):
    p10, _, p90 = p.tau_band(k, 4000, seed)
    return p90 - p10


def test_posterior_recovers_a_known_survival_curve():
    cond = np.array([0.8, 0.7, 0.6, 0.5])
    p = posterior(cond, requests=5000, rounds=4)
    true_tau = 1 + np.cumprod(cond).sum()
    assert p.mean_alphas() == pytest.approx(cond, abs=0.015)
    p10, p50, p90 = p.tau_band(4)
    assert p10 < true_tau < p90
    assert p.tau_mean(4) == pytest.approx(true_tau, abs=0.03)
    # independent rounds: no spread across requests found, the design effect near 1
    assert p.design_effect[0] < 1.1


def test_posterior_recovers_acceptance_and_spread_of_heterogeneous_requests():
    """Requests with their own alpha ~ Beta(0.7 c, 0.3 c), c = 8, i.i.d. over positions: the
    pooled curve is the population's E[alpha^j], the fit finds c, the band covers tau."""
    mu, c, k = 0.7, 8.0, 4
    p = posterior([mu] * k, requests=600, rounds=30, concentration=c, seed=3)
    a, b = mu * c, (1 - mu) * c
    moments = np.cumprod([(a + i) / (a + b + i) for i in range(k)])  # E[alpha^j]
    true_tau = 1 + moments.sum()
    p10, _, p90 = p.tau_band(k)
    assert p10 < true_tau < p90
    assert p.tau_mean(k) == pytest.approx(true_tau, abs=0.06)
    h = p.heterogeneity
    assert h is not None and h.concentration is not None
    assert c / 2 < h.concentration < c * 2
    assert h.mean_alpha == pytest.approx(mu, abs=0.03)
    # ~30 rounds x ~2.3 trials per request at rho 1/9: a design effect of several
    assert p.design_effect[0] > 3
    assert p.effective_rounds < p.rounds / 3


def test_bands_shrink_as_counts_grow():
    cond = [0.8, 0.7, 0.6, 0.5]
    widths = [width(posterior(cond, requests=n, rounds=1, seed=n)) for n in (200, 2000, 20000)]
    assert widths[2] < widths[1] < widths[0]
    assert widths[0] / widths[2] > 5  # ~sqrt(100) = 10


def test_correlated_rounds_give_a_wider_band_than_as_many_independent_rounds():
    cond = [0.75] * 4
    corr = posterior(cond, requests=100, rounds=40, concentration=5.0, seed=7)
    indep = posterior(cond, requests=4000, rounds=1, seed=7)
    assert corr.rounds == indep.rounds == 4000
    assert width(corr) > 2 * width(indep)
    assert corr.effective_rounds < indep.effective_rounds / 4


def test_written_profile_loads_and_gives_the_posterior_mean_tau(tmp_path):
    p = posterior([0.85, 0.75, 0.65, 0.55], requests=300, rounds=20, concentration=20, seed=2)
    out = tmp_path / "mine.yaml"
    res = evidence.write_profile([p], out, method="eagle3")
    assert Path(res["sidecar"]) == tmp_path / "mine.posterior.yaml"
    model = build_acceptance({"profile": str(out)}, seed=0)
    acc = model.for_class("chat")
    assert acc.tau_at(4) == pytest.approx(p.tau_mean(4), abs=1e-4)
    assert acc.tau_at(4) == pytest.approx(p.tau_draws(4).mean(), abs=2e-2)
    # read back: the sidecar gives the same posterior (same band, same seed)
    back = evidence.posteriors(out, "profile")
    assert len(back) == 1 and isinstance(back[0], evidence.Posterior)
    assert back[0].tau_band(4) == pytest.approx(p.tau_band(4), abs=2e-3)
    # without the sidecar it is a point value and says so
    Path(res["sidecar"]).unlink()
    (pv,) = evidence.posteriors(out, "profile")
    assert pv.kind == "point value, no posterior"
    assert pv.tau_mean(4) == pytest.approx(p.tau_mean(4), abs=1e-4)


def test_keys_of_several_temperatures_become_one_profile_each(tmp_path):
    rows = ["request_id,class,temperature,drafter,a0,a1"]
    rows += [f"r{i},chat,{t},eagle3,1,{i % 2}" for t in (0, 0.7) for i in range(6)]
    f = tmp_path / "rounds.csv"
    f.write_text("\n".join(rows) + "\n")
    posts = evidence.posteriors(f, "csv")
    assert [(p.key.drafter, p.key.temperature) for p in posts] == [("eagle3", 0.0),
                                                                    ("eagle3", 0.7)]
    res = evidence.write_profile(posts, tmp_path / "t.yaml")
    assert sorted(res["profiles"]) == ["t-t0", "t-t0.7"]
    model = build_acceptance({"profile": str(tmp_path / "t.yaml#t-t0.7")}, seed=0)
    assert model.for_class("chat").temperature == 0.7
    assert len(evidence.posteriors(tmp_path / "t.yaml", "profile")) == 2


def test_a_bundled_paper_profile_keeps_its_point_value_and_says_so(capsys):
    assert main(["acceptance", "posterior", "qwen3-8b-eagle3", "--format", "profile",
                 "--class", "code"]) == 0
    out = capsys.readouterr().out
    assert "point value, no posterior" in out and "tau 3.360 at k=7" in out
    assert "source: z-lab/dflash README" in out


def test_ab_size_falls_as_the_gain_grows_and_grows_with_the_cv():
    ns = [ab_sizing.requests_per_arm(g, 0.4) for g in (1.05, 1.2, 1.5, 2.0)]
    assert ns == sorted(ns, reverse=True) and ns[-1] < ns[0] / 20
    by_cv = [ab_sizing.requests_per_arm(1.3, cv) for cv in (0.1, 0.3, 0.6)]
    assert by_cv == sorted(by_cv) and by_cv[0] < by_cv[-1]
    assert ab_sizing.requests_per_arm(1.0, 0.3) == math.inf
    # the closed form: (z_.975 + z_.8)^2 (cv^2 + cv^2 / g^2) / (1 - 1/g)^2
    z = 1.959964 + 0.841621
    assert ab_sizing.requests_per_arm(1.5, 0.3) == math.ceil(
        z ** 2 * (0.09 + 0.09 / 2.25) / (1 / 3) ** 2)


def test_rollout_order_ranks_the_clearer_class_first():
    clear = posterior([0.85] * 4, requests=400, rounds=20, seed=11, cls="code")
    murky = posterior([0.5] * 4, requests=15, rounds=10, concentration=3, seed=12, cls="chat")
    step = 1.8
    gains = {p.key.cls: ab_sizing.gain_from_tau(p.tau_draws(4), step) for p in (murky, clear)}
    plan = ab_sizing.size_ab(gains, rate={"code": 0.5, "chat": 2.0}, tpot_cv=0.3,
                             gain_cv={p.key.cls: p.request_tpot_cv(4) for p in (murky, clear)})
    assert [c.cls for c in plan.classes] == ["code", "chat"]
    code, chat = plan.classes
    assert code.p_gain > chat.p_gain
    assert code.n_per_arm_p50 < chat.n_per_arm_p50 or not math.isfinite(chat.n_per_arm_p10)
    assert code.hours_p50 == pytest.approx(2 * code.n_per_arm_p50 / 0.5 / 3600)
    assert "roll out first" in code.reason and "P(gain > 1)" in chat.reason
    assert chat.spec_cv > chat.tpot_cv  # the spread of acceptance across requests adds noise


def test_cli_posterior_with_ab_on_the_example_file(tmp_path, capsys):
    out = tmp_path / "prof.yaml"
    argv = ["acceptance", "posterior", str(EXAMPLE), "--format", "csv", "--ab",
            "--rate", "code=0.5,chat=2", "--tpot-cv", "0.3", "--step-cost", "1.5",
            "--out", str(out), "--json"]
    assert main(argv) == 0
    res = json.loads(capsys.readouterr().out)
    assert {p["key"]["class"] for p in res["posteriors"]} == {"code", "chat"}
    assert [c["cls"] for c in res["ab"]["classes"]][0] == "code"
    assert out.is_file() and (tmp_path / "prof.posterior.yaml").is_file()
    # no overwrite without --force: one line, exit 2
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "already exists" in err


def _one_line_error(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("specsim: error: ") and "\n" not in err, err
    return err


@pytest.mark.parametrize("text,expect", [
    ("request_id,a0,a1\nr1,1,2\n", "line 2: a1: expected 0, 1 or blank"),
    ("request_id,a0,a1\nr1,0,1\n", "line 2: a1: 1 after a0 was rejected"),
    ("request_id,a0,a1\n# c\nr1,,1\n", "line 3: a1: a value after the blank a0"),
    ("request_id,accepted\nr1,1\n", "line 1: expected columns a0..aD-1"),
    ("request_id,accepted,k\nr1,5,4\n", "line 2: accepted: expected an integer from 0 to 4"),
    ("request_id,acepted,a0\nr1,1,1\n", "line 1: column 'acepted': unknown"),
    ("request_id,round,a0\nr1,0,1\nr1,0,0\n", "line 3: request 'r1' turn 0 round 0 appears"),
    ("request_id,a0,accepted\nr1,1,0\n", "line 2: accepted: 0, but a0..a0 accept 1"),
    ("request_id,a0,a1\nr1,1\n", "line 2: expected 3 columns, got 2"),
])
def test_bad_csv_is_one_line_naming_file_line_and_column(tmp_path, capsys, text, expect):
    f = tmp_path / "rounds.csv"
    f.write_text(text)
    err = _one_line_error(capsys, ["acceptance", "posterior", str(f), "--format", "csv"])
    assert str(f) in err and expect in err


@pytest.mark.parametrize("flag,bad", [("--k", "0"), ("--k", "65"), ("--draws", "5"),
                                      ("--design-effect", "0.5"), ("--confidence", "1.5"),
                                      ("--power", "nan"), ("--temperature", "-1")])
def test_numeric_flags_refuse_nonsense_on_one_line(capsys, flag, bad):
    with pytest.raises(SystemExit) as exc:
        main(["acceptance", "posterior", str(EXAMPLE), "--format", "csv", flag, bad])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and "\n" not in err
    assert f"argument {flag}: expected " in err


@pytest.mark.parametrize("text,expect", [
    ('{"meta_info": {"spec_accept_histogram": [1, -2]}}\n', "line 1: spec_accept_histogram"),
    ('{"meta_info": {}}\n', "line 1: no meta_info.spec_accept_histogram"),
    ('{"meta_info": {"spec_accept_histogram": [1, 2]}}\n{oops\n', "line 2: not JSON"),
])
def test_bad_sglang_is_one_line(tmp_path, capsys, text, expect):
    f = tmp_path / "resp.jsonl"
    f.write_text(text)
    err = _one_line_error(capsys, ["acceptance", "posterior", str(f), "--format", "sglang"])
    assert str(f) in err and expect in err


def test_sglang_histograms_and_vllm_counters_read(tmp_path):
    req, acc, _ = synth_rounds([0.8, 0.6, 0.5], requests=50, rounds=30, concentration=10)
    recs = [{"meta_info": {"id": f"r{r}", "spec_accept_histogram":
                           np.bincount(acc[req == r], minlength=4).tolist()}, "class": "code"}
            for r in range(50)]
    f = tmp_path / "resp.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    (p,) = evidence.posteriors(f, "sglang")
    direct = evidence.fit(evidence.from_rounds(evidence.Key(cls="code"), req, acc,
                                               np.full(len(acc), 3)))
    assert p.key.cls == "code" and p.requests == 50
    assert p.mean_alphas() == pytest.approx(direct.mean_alphas())
    assert p.design_effect == pytest.approx(direct.design_effect, rel=1e-3)
    # vLLM: the same rounds as per-position counters; no per-request information
    per_pos = [(acc >= j).sum() for j in (1, 2, 3)]
    prom = tmp_path / "metrics.txt"
    prom.write_text(f"vllm:spec_decode_num_drafts_total {float(len(acc))}\n"
                    f"vllm:spec_decode_num_accepted_tokens_total {float(acc.sum())}\n"
                    + "".join(f'vllm:spec_decode_num_accepted_tokens_per_pos_total'
                              f'{{position="{i}"}} {float(c)}\n' for i, c in enumerate(per_pos)))
    (v,) = evidence.posteriors(prom, "prometheus", cls="code")
    assert v.requests is None and v.design_effect == pytest.approx(1.0)
    assert v.mean_alphas() == pytest.approx(direct.mean_alphas(), abs=2e-3)
    assert width(v, 3) < width(p, 3)  # independence assumed: a narrower (lower-bound) band
    assert any("lower bound" in n for n in v.notes)
    (v2,) = evidence.posteriors(prom, "prometheus", cls="code", design_effect=p.design_effect[0])
    assert width(v2, 3) > width(v, 3)


def write_example(path: Path = EXAMPLE) -> None:
    """The tiny example of docs/speculation.md: code (high acceptance, requests differ a
    lot) and chat (lower, fewer requests); `python tests/test_acceptance_evidence.py`."""
    rows = ["# synthetic per-round acceptance (tests/test_acceptance_evidence.py write_example)",
            "request_id,class,turn,round,accepted,a0,a1,a2,a3"]
    for cls, cond, n_req, rounds, c, seed in (("code", [0.9, 0.85, 0.8, 0.75], 30, 12, 6.0, 1),
                                              ("chat", [0.7, 0.6, 0.55, 0.5], 20, 10, 10.0, 2)):
        req, acc, _ = synth_rounds(cond, n_req, rounds, c, seed)
        for i, (r, a) in enumerate(zip(req, acc, strict=True)):
            cells = ["1"] * a + ["0"] * (4 - a)
            rows.append(f"{cls}-{r},{cls},0,{i % rounds},{a}," + ",".join(cells))
    path.parent.mkdir(exist_ok=True)
    path.write_text("\n".join(rows) + "\n")


if __name__ == "__main__":
    write_example()
