"""Measured runs reduced to per-stage averages for the engine-overhead fit.

``cost_models.calibrate.engine_fit`` fits the engine's per-iteration CPU work to one
equation per load stage (measured time per output token against the price of the stage's
average iteration). This turns a ``MeasuredRun`` (the replay's loader, one reader for every
format) into those equations. Step times come from the requests whose recorded output
count agrees with their measured decode time (``output_ok``; see ``flag_miscounts``).
"""

from __future__ import annotations

from ...cost_models.calibrate.engine_fit import StageSample
from ...traces.errors import TraceError
from .measured import MeasuredRun


def stage_samples(run: MeasuredRun, precision: str = "bf16") -> list[StageSample]:
    """One ``StageSample`` per load stage (Little's law gives the decoding rows)."""
    if run.model is None or run.hardware is None or run.tp is None:
        raise TraceError(f"{run.path}: no catalog model/hardware for {run.model_id!r} on "
                         f"{run.gpu!r}")
    req = run.requests[~run.requests["has_error"]]
    out = []
    for st in run.stages:
        sub = req[req["stage"] == st.name]
        ok = sub[sub["output_ok"] & (sub["output_tokens"] > 1)]
        if len(ok) < 10:
            continue
        duration = st.end_s - st.start_s
        rate = len(sub) / duration
        step = float((ok["e2e_s"] - ok["ttft_s"]).sum() / (ok["output_tokens"] - 1).sum())
        rows = rate * float((sub["e2e_s"] - sub["ttft_s"]).mean())
        ctx = float((sub["input_tokens"] + ok["output_tokens"].median() / 2).mean())
        out.append(StageSample(f"{run.name}:{st.name}", run.model, run.hardware, int(run.tp),
                               rate, float(sub["input_tokens"].mean()), rows, ctx, step,
                               precision))
    return out
