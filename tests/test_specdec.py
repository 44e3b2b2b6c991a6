"""Exact speculative sampling and the real speculative loop (torch; skipped without it)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the calibrate extra: pip install -e '.[calibrate]'")

from specsim.cost_models.calibrate.model import ModelConfig, Transformer, greedy_generate  # noqa: E402
from specsim.cost_models.calibrate.specdec import (  # noqa: E402
    PromptLookupDrafter,
    SelfSpecDrafter,
    generate,
    median_of_runs,
    speculative_accept,
)

torch.set_num_threads(min(2, torch.get_num_threads()))

TINY = ModelConfig(n_layers=3, hidden_size=64, n_heads=4, n_kv_heads=2, head_dim=16,
                   intermediate_size=128, vocab_size=61, rope_theta=10000.0, max_context=512,
                   tied_embeddings=False, name="tiny")  # untied: a tied random model echoes itself


def _dist(rng: np.random.Generator, v: int, conc: float) -> torch.Tensor:
    return torch.tensor(rng.dirichlet(np.full(v, conc)), dtype=torch.float32)


@pytest.mark.parametrize("deterministic_drafter", [False, True])
def test_speculative_sampling_preserves_the_target_distribution(deterministic_drafter):
    """Every emitted token, at every position of a step, is distributed as the target's p."""
    from scipy.stats import chisquare

    rng = np.random.default_rng(0)
    v, k, n_steps = 6, 3, 12000
    p = torch.stack([_dist(rng, v, 1.0) for _ in range(k + 1)])
    q = torch.stack([_dist(rng, v, 0.5) for _ in range(k)])  # deliberately unlike p
    assert float((p[:k] - q).abs().sum(-1).min()) > 0.3
    gen = torch.Generator().manual_seed(1)
    counts = np.zeros((k + 1, v))
    accepted = 0
    for _ in range(n_steps):
        if deterministic_drafter:  # prompt lookup: drafts are fixed tokens, q one-hot
            drafts = [int(rng.integers(v)) for _ in range(k)]
            q_probs = None
        else:
            drafts = [int(torch.multinomial(q[j], 1, generator=gen)) for j in range(k)]
            q_probs = q
        n_acc, nxt = speculative_accept(drafts, q_probs, p, gen)
        emitted = drafts[:n_acc] + [nxt]
        accepted += n_acc
        for pos, tok in enumerate(emitted):
            counts[pos, tok] += 1
    assert 0 < accepted < n_steps * k  # both acceptance and rejection happened
    if deterministic_drafter:
        # Fixed drafts are not samples of a distribution, so only position 0 is i.i.d. p.
        positions = [0]
    else:
        positions = [j for j in range(k + 1) if counts[j].sum() >= 500]
        assert len(positions) >= 2
    for j in positions:
        pj = p[j].double().numpy()
        expected = pj / pj.sum() * counts[j].sum()
        stat = chisquare(counts[j], expected)
        assert stat.pvalue > 1e-3, (j, counts[j], expected)


def test_naive_rejection_without_residual_would_be_caught():
    """Guard on the test's power: resampling from p (not the residual) is biased and fails."""
    from scipy.stats import chisquare

    rng = np.random.default_rng(0)
    v = 6
    p, q = _dist(rng, v, 1.0), _dist(rng, v, 0.5)
    gen = torch.Generator().manual_seed(1)
    counts = np.zeros(v)
    for _ in range(12000):
        d = int(torch.multinomial(q, 1, generator=gen))
        keep = float(torch.rand(1, generator=gen)) < min(1.0, float(p[d] / q[d]))
        counts[d if keep else int(torch.multinomial(p, 1, generator=gen))] += 1
    pd = p.double().numpy()
    assert chisquare(counts, pd / pd.sum() * counts.sum()).pvalue < 1e-3


@pytest.fixture(scope="module")
def tiny_model():
    return Transformer(TINY, dtype=torch.float32, seed=3)


@pytest.mark.parametrize("drafter_kind,k", [("self", 3), ("self", 5), ("lookup", 4)])
def test_greedy_speculation_equals_plain_greedy_with_rollback(tiny_model, drafter_kind, k):
    prompt = [int(t) for t in np.random.default_rng(5).integers(0, TINY.vocab_size, 24)]
    prompt = prompt + prompt[:12]  # repeats give prompt lookup something to find
    n_new = 60
    ref = greedy_generate(tiny_model, prompt, n_new)
    drafter = (SelfSpecDrafter(tiny_model, 1) if drafter_kind == "self"
               else PromptLookupDrafter())
    res = generate(tiny_model, prompt, n_new, drafter, k=k)
    assert res.tokens == ref
    drafted = [s for s in res.steps if s.drafted]
    assert any(s.accepted < s.drafted for s in drafted), "no rejection: rollback not exercised"
    assert any(s.accepted > 0 for s in drafted), "nothing accepted"
    assert res.tau >= 1.0


def test_sampled_speculation_runs_and_is_seeded(tiny_model):
    prompt = list(range(10))
    a = generate(tiny_model, prompt, 30, SelfSpecDrafter(tiny_model, 2), k=3, temperature=1.0,
                 seed=7)
    b = generate(tiny_model, prompt, 30, SelfSpecDrafter(tiny_model, 2), k=3, temperature=1.0,
                 seed=7)
    assert a.tokens == b.tokens and len(a.tokens) == 30
    assert all(0 <= t < TINY.vocab_size for t in a.tokens)


def test_kv_rollback_restores_the_cache(tiny_model):
    cache = tiny_model.new_cache(1, 64)
    logits_a = tiny_model(torch.tensor([[1, 2, 3]]), cache)
    tiny_model(torch.tensor([[9, 9, 9, 9]]), cache)  # speculative junk
    cache.rollback(2)
    logits_b = tiny_model(torch.tensor([[3]]), cache)
    assert torch.allclose(logits_a[0, -1], logits_b[0, -1], atol=1e-5)
    with pytest.raises(ValueError):
        cache.rollback(10)


def test_prompt_lookup_copies_the_latest_match():
    d = PromptLookupDrafter(max_ngram=3)
    assert d.lookup([5, 6, 7, 8, 9, 1, 5, 6, 7], 3) == [8, 9, 1]
    assert d.lookup([1, 2, 3, 4], 3) == []
    assert d.lookup([4, 1, 2, 4], 2) == [1, 2]  # falls back to a 1-gram


def test_median_of_runs_takes_per_step_medians(tiny_model):
    prompt = list(range(8))
    real = generate(tiny_model, prompt, 12, PromptLookupDrafter(), k=2)

    def with_durations(prefill, durations):
        """The real run's steps, retimed: deterministic durations, no machine noise."""
        ends = prefill + np.cumsum(durations)
        steps = [dataclasses.replace(st, end_s=float(e)) for st, e in zip(real.steps, ends,
                                                                           strict=True)]
        return dataclasses.replace(real, prefill_s=prefill, steps=steps)

    n = len(real.steps)
    a = with_durations(1.0, np.full(n, 0.010))
    b = with_durations(3.0, np.full(n, 0.030))  # a slow repeat: the median ignores it
    c = with_durations(2.0, np.full(n, 0.020))
    med = median_of_runs([a, b, c])
    assert med.tokens == real.tokens
    assert med.prefill_s == pytest.approx(2.0)
    assert med.decode_s == pytest.approx(0.020 * n)


# ---------------------------------------------------------------- the real model


@pytest.fixture(scope="module")
def smollm2():
    pytest.importorskip("gguf", reason="needs the calibrate extra (gguf)")
    pytest.importorskip("tokenizers", reason="needs the calibrate extra (tokenizers)")
    from specsim.cost_models.calibrate.weights import FETCH_COMMAND, find_smollm2

    if find_smollm2() is None:
        pytest.skip(f"the SmolLM2 GGUF is not fetched: run `{FETCH_COMMAND}` (the README's "
                    "test command does)")
    from specsim.cost_models.calibrate.model import load_smollm2, smollm2_tokenizer

    return load_smollm2(torch.float32), smollm2_tokenizer()


def test_smollm2_tokenizer_round_trips_and_keeps_control_tokens(smollm2):
    from specsim.cost_models.calibrate.model import chat_prompt

    _, tk = smollm2
    text = "def add(a, b):\n    return a + b  # 42 café"
    assert tk.decode(tk.encode(text).ids) == text
    ids = tk.encode(chat_prompt("hi")).ids
    assert ids[0] == 1 and tk.token_to_id("<|im_end|>") in ids  # <|im_start|> is one token


def test_smollm2_answers_sensibly(smollm2):
    from specsim.cost_models.calibrate.model import chat_prompt

    model, tk = smollm2
    ids = tk.encode(chat_prompt("What is the capital of France? Answer in one sentence.")).ids
    out = greedy_generate(model, ids, 8)
    assert "Paris" in tk.decode(out)


def test_smollm2_speculation_equals_greedy(smollm2):
    from specsim.cost_models.calibrate.model import chat_prompt

    model, tk = smollm2
    ids = tk.encode(chat_prompt("Add a docstring to: def inc(x):\n    return x + 1")).ids
    ref = greedy_generate(model, ids, 16)
    for drafter, k in ((SelfSpecDrafter(model, 24), 3), (PromptLookupDrafter(), 4)):
        res = generate(model, ids, 16, drafter, k=k)
        assert res.tokens == ref, drafter.name


def test_quick_prompts_are_short_and_lookup_still_finds_the_code(smollm2):
    """--quick's code prompt is a small edit: about half the full set's code prompt tokens,
    and its answer repeats the prompt, so prompt lookup drafts on it."""
    from specsim.cost_models.calibrate.model import chat_prompt
    from specsim.cost_models.calibrate.prompts import CODE, QUICK

    model, tk = smollm2
    quick = [len(tk.encode(chat_prompt(t)).ids) for p in QUICK.values() for t in p.values()]
    full = min(len(tk.encode(chat_prompt(t)).ids) for n, t in CODE.items() if "```" in t)
    assert set(QUICK) == {"code", "chat"} and max(quick) < 0.75 * full
    ids = tk.encode(chat_prompt(QUICK["code"]["rename-short"])).ids
    res = generate(model, ids, 24, PromptLookupDrafter(), k=4,
                   stop_ids=[tk.token_to_id("<|im_end|>")])
    assert res.tau > 1.3


def test_end_to_end_time_budget_skips_later_prompts_and_says_so(smollm2):
    from specsim.cost_models.calibrate.run import measure_specdec

    skipped: list[str] = []
    notes: list[str] = []
    runs = measure_specdec("float32", "cpu", quick=True, progress=notes.append, max_new=3,
                           budget_s=0.0, skipped=skipped)
    assert {r["kind"] for r in runs} == {"code"} and len(runs) == 3  # every drafter, 1 prompt
    assert skipped == ["end to end: prompts chat/explain-rain (time budget 0 s spent)"]
    assert any("skipping chat/explain-rain" in n for n in notes)
