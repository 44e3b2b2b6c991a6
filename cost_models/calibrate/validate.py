"""Predict the real speculative loop's time per output token from the fitted roofline.

Given a run's measured acceptance (which steps drafted how much, and what was kept), the
calibrated ``ForwardCostModel`` prices each draft and verify pass; the prediction is compared
with the loop's measured TPOT. Two predictions: *closed form*, what a simulator does with
mean figures (E[time per token] = (drafter passes x T_draft + T_verify(q_mean) + CPU draft
time) / tau at the mean context), and *per step*, every step priced at its own shape.
No torch needed: runs are plain dicts (``RunResult.summary`` plus ``step_table``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from ..roofline import ForwardCostModel, attention_area


def pass_time(cm: ForwardCostModel, q: np.ndarray | float, ctx: np.ndarray | float,
              logits: np.ndarray | float | None = None) -> np.ndarray:
    """One sequence, q new tokens after ctx cached ones (token j attends ctx + j + 1)."""
    q = np.asarray(q, dtype=float)
    ctx = np.asarray(ctx, dtype=float)
    return np.asarray(cm.time(q, attention_area(q, ctx), ctx, q if logits is None else logits))


def predict_run(steps: pd.DataFrame, tokens_after_first: int, target: ForwardCostModel,
                drafter: ForwardCostModel | None) -> dict[str, float]:
    """Predicted TPOT of one run, closed form and per step (seconds).

    ``steps`` columns: ctx, q, emitted, draft_passes, draft_s (CPU drafters' measured time is
    used as their cost: it is not a model pass).
    """
    if steps.empty or tokens_after_first <= 0:
        return {"pred_tpot_closed_s": float("nan"), "pred_tpot_steps_s": float("nan")}
    ctx = steps["ctx"].to_numpy(float)
    q = steps["q"].to_numpy(float)
    passes = steps["draft_passes"].to_numpy(float)
    cpu_draft = np.where(passes == 0, steps["draft_s"].to_numpy(float), 0.0)
    verify = pass_time(target, q, ctx)
    draft = np.zeros_like(verify)
    if drafter is not None and passes.max() > 0:
        for j in range(int(passes.max())):
            on = passes > j
            draft[on] += pass_time(drafter, 1.0, ctx[on] + j)
    # Tokens are counted after the first (prefill) token, as TPOT is; the last step's
    # overshoot beyond max_new is cut from both the measurement and the prediction.
    per_step = float((verify + draft + cpu_draft).sum()) / tokens_after_first
    tau = tokens_after_first / len(steps)
    c_mean, q_mean, p_mean = ctx.mean(), q.mean(), passes.mean()
    closed = float(pass_time(target, q_mean, c_mean))
    if drafter is not None and p_mean > 0:
        closed += p_mean * float(pass_time(drafter, 1.0, c_mean + (p_mean - 1) / 2))
    closed += float(cpu_draft.mean())
    return {"pred_tpot_closed_s": closed / tau, "pred_tpot_steps_s": per_step}


def acceptance_summary(steps: pd.DataFrame, k: int) -> dict[str, Any]:
    """What a simulator needs of a run's acceptance: accepted-count histogram at k, match rate.

    The histogram counts steps that drafted the full k (prompt lookup's shorter proposals are
    folded in when there are none); match_rate is the share of steps that drafted anything,
    and cpu_draft_s the mean measured time of a lookup on those steps.
    """
    if k <= 0 or steps.empty:
        return {"accept_hist": [], "match_rate": 0.0, "cpu_draft_s": 0.0}
    drafted = (steps["q"] - 1).to_numpy(int)
    accepted = (steps["emitted"] - 1).to_numpy(int)
    full = drafted == k
    pick = accepted[full] if full.any() else accepted[drafted > 0]
    hist = np.bincount(np.minimum(pick, k), minlength=k + 1)[: k + 1]
    proposing = drafted > 0
    cpu = steps["draft_s"].to_numpy(float)[proposing & (steps["draft_passes"].to_numpy() == 0)]
    return {"accept_hist": [int(h) for h in hist], "match_rate": float(proposing.mean()),
            "cpu_draft_s": float(cpu.mean()) if cpu.size else 0.0}


def predict_prefill(cm: ForwardCostModel, prompt_len: int) -> float:
    """A prefill of ``prompt_len`` tokens with one logit (the first output token)."""
    return float(pass_time(cm, float(prompt_len), 0.0, 1.0))


def compare(runs: Iterable[dict[str, Any]], target: ForwardCostModel,
            drafters: dict[str, ForwardCostModel | None]) -> pd.DataFrame:
    """One row per run: measured and predicted TPOT and prefill, and the errors (%)."""
    rows = []
    for run in runs:
        steps = pd.DataFrame(run["step_table"])
        pred = predict_run(steps, run["output_tokens"] - 1, target, drafters.get(run["drafter"]))
        row = {k: run[k] for k in ("kind", "prompt", "drafter", "k", "prompt_len",
                                   "output_tokens", "tau", "tpot_s", "prefill_s")}
        row.update(pred)
        row.update(acceptance_summary(steps, int(run["k"])))
        row["pred_prefill_s"] = predict_prefill(target, run["prompt_len"])
        row["tpot_err_pct"] = 100.0 * (row["pred_tpot_closed_s"] / row["tpot_s"] - 1.0)
        row["tpot_steps_err_pct"] = 100.0 * (row["pred_tpot_steps_s"] / row["tpot_s"] - 1.0)
        row["prefill_err_pct"] = 100.0 * (row["pred_prefill_s"] / row["prefill_s"] - 1.0)
        rows.append(row)
    return pd.DataFrame(rows)


def by_drafter_and_kind(table: pd.DataFrame) -> pd.DataFrame:
    """Mean over prompts of each (drafter, prompt kind): tau, TPOT measured vs predicted."""
    g = table.groupby(["drafter", "kind"], sort=False)
    out = g.agg(prompts=("prompt", "count"), tau=("tau", "mean"), tpot_ms=("tpot_s", "mean"),
                pred_tpot_ms=("pred_tpot_closed_s", "mean"),
                pred_tpot_steps_ms=("pred_tpot_steps_s", "mean")).reset_index()
    out["tpot_ms"] *= 1e3
    out["pred_tpot_ms"] *= 1e3
    out["pred_tpot_steps_ms"] *= 1e3
    out["err_pct"] = 100.0 * (out["pred_tpot_ms"] / out["tpot_ms"] - 1.0)
    out["steps_err_pct"] = 100.0 * (out["pred_tpot_steps_ms"] / out["tpot_ms"] - 1.0)
    if "sim_tpot_s" in table.columns:
        sim = g.agg(sim_tpot_ms=("sim_tpot_s", "mean"), sim_tau=("sim_tau", "mean"))
        out["sim_tpot_ms"] = sim["sim_tpot_ms"].to_numpy() * 1e3
        out["sim_tau"] = sim["sim_tau"].to_numpy()
        out["sim_err_pct"] = 100.0 * (out["sim_tpot_ms"] / out["tpot_ms"] - 1.0)
    return out.round(3)
