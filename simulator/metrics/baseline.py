"""Speculation against the same run without it: per-class and overall speedups.

``specsim run --baseline`` runs the scenario twice, as given and with speculation off
(same trace, same seed), and adds what this computes to metrics.json: for each workload
class and for all requests, TPOT, E2E and TTFT means and their ratios (baseline over
speculative: above 1 means speculation helped), and the run-level throughput, energy and
cost ratios.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd


def _means(req: pd.DataFrame) -> dict[str, float | None]:
    done = req[req["status"] == "completed"]

    def mean(col: str) -> float | None:
        v = done[col].to_numpy(dtype=np.float64)
        v = v[np.isfinite(v)]
        return float(v.mean()) if v.size else None

    return {"requests": int(len(done)), "tpot_s": mean("tpot_s"), "e2e_s": mean("e2e_s"),
            "ttft_s": mean("ttft_s")}


def _ratio(base: float | None, spec: float | None) -> float | None:
    if base is None or spec is None or not spec:
        return None
    return base / spec


def _phases(spec: dict[str, Any], base: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per energy phase (summary.energy_by_phase): watts per device and joules per output
    token, with speculation and without."""
    sp = (spec.get("energy") or {}).get("phases") or {}
    bp = (base.get("energy") or {}).get("phases") or {}

    def per_token(m: dict[str, Any], ph: dict[str, Any]) -> float | None:
        out = m.get("output_tokens")
        return ph["energy_j"] / out if out and ph.get("energy_j") is not None else None

    return {name: {"speculative_w": (sp.get(name) or {}).get("average_power_w"),
                   "baseline_w": (bp.get(name) or {}).get("average_power_w"),
                   "speculative_j_per_token": per_token(spec, sp.get(name) or {}),
                   "baseline_j_per_token": per_token(base, bp.get(name) or {})}
            for name in dict.fromkeys([*bp, *sp])}


def compare(spec_metrics: dict[str, Any], spec_requests: pd.DataFrame,
            base_metrics: dict[str, Any], base_requests: pd.DataFrame) -> dict[str, Any]:
    """The ``baseline`` section of metrics.json."""
    classes = sorted(set(spec_requests["workload_class"]) | set(base_requests["workload_class"]))
    per_class = {}
    for cls in ["all", *classes]:
        s = spec_requests if cls == "all" else spec_requests[
            spec_requests["workload_class"] == cls]
        b = base_requests if cls == "all" else base_requests[
            base_requests["workload_class"] == cls]
        ms, mb = _means(s), _means(b)
        per_class[cls] = {"speculative": ms, "baseline": mb,
                          "tpot_speedup": _ratio(mb["tpot_s"], ms["tpot_s"]),
                          "e2e_speedup": _ratio(mb["e2e_s"], ms["e2e_s"]),
                          "ttft_speedup": _ratio(mb["ttft_s"], ms["ttft_s"])}
    run = {}
    for key, better in (("throughput_output_tokens_per_s", "higher"),
                        ("energy_j_per_output_token", "lower"),
                        ("cost_usd_per_million_output_tokens", "lower")):
        s, b = spec_metrics.get(key), base_metrics.get(key)
        run[key] = {"speculative": s, "baseline": b,
                    "ratio": (_ratio(s, b) if better == "higher" else _ratio(b, s))}
    for key in ("busy_fraction", "simulated_time_s", "output_tokens"):
        run[key] = {"speculative": spec_metrics.get(key), "baseline": base_metrics.get(key)}
    fleet = {k: (spec_metrics.get("fleet") or {}).get(k)
             for k in ("devices", "price_usd_per_device_hour", "price_date")}
    run["average_power_w"] = {"speculative": (spec_metrics.get("fleet") or {}).get(
        "average_power_w"), "baseline": (base_metrics.get("fleet") or {}).get("average_power_w")}
    return {"scenario_change": "speculation.method=none (same trace and seed)",
            "per_class": per_class, "run": run, "fleet": fleet,
            "energy_phases": _phases(spec_metrics, base_metrics),
            "note": "ratios are baseline / speculative for times, energy and cost and "
                    "speculative / baseline for throughput: above 1 means speculation helped"}
