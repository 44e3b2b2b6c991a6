"""report.md with PNG plots for one run: what was simulated, the numbers, and the pictures.

Written for people deciding whether to speculate and on what hardware: the latency
distributions against the SLOs, how full the batch and the KV cache ran, how many tokens
each verification step bought per traffic class, and what drafting costs per iteration.

Plots use matplotlib's object API on an Agg canvas (``matplotlib.figure.Figure``), not
pyplot: nothing global is switched (a notebook's inline backend keeps working), nothing is
registered with pyplot, so there is no figure to leak. Big runs are downsampled before
plotting (CDFs on a quantile grid, timelines as exact time-weighted bin means, scatters as
a seeded sample), so the report stays fast however long the run.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from specsim.outputs import md_text
from specsim.simulator.metrics.collector import slo_attainment, slo_targets
from specsim.simulator.metrics.iteration_log import block_rows
from specsim.simulator.metrics.run_metrics import RunMetrics

DPI = 110
MAX_POINTS = 5000  # per plotted series
MAX_CLASSES_PLOTTED = 6
MAX_CLASSES_TABLE = 15
UNCALIBRATED = "uncalibrated default"
UNCALIBRATED_LINE = ("Cost model: uncalibrated default (efficiencies/overheads assumed, "
                     "not measured)")


# ---------------------------------------------------------------------------- formatting
def _finite(x: Any) -> bool:
    try:
        return x is not None and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def _num(x: Any, scale: float = 1.0) -> str:
    """A readable number: thousands separators for big ones, 3 significant digits for small."""
    if not _finite(x):
        return "n/a"
    v = float(x) * scale
    a = abs(v)
    if a == 0:
        return "0"
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    if a >= 0.1:
        return f"{v:.3f}"
    return f"{v:.3g}"


def _pct(x: Any) -> str:
    return f"{100 * float(x):.1f}%" if _finite(x) else "n/a"


def _md_table(header: list[str], rows: list[list[str]], align: str | None = None) -> str:
    align = align or ("l" + "r" * (len(header) - 1))
    sep = ["---:" if a == "r" else ":---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(md_text(c) for c in r) + " |" for r in rows]  # user names
    return "\n".join(lines)


def _quant(q: Any) -> str:
    if not isinstance(q, dict):
        return str(q) if q is not None else "n/a"
    return (f"weights {q.get('weights', '?')}, activations {q.get('activations', '?')}, "
            f"KV cache {q.get('kv_cache', '?')}")


def _or(x: Any, default: Any) -> Any:
    """A metric, or ``default`` where the run's metrics.json lacks it (None)."""
    return default if x is None else x


def _col(df: _Table, name: str, default: float = np.nan) -> np.ndarray:
    if name in df:
        return df[name]
    return np.full(len(df), default)


def _text(col: np.ndarray) -> np.ndarray:
    """A text column as an object array of str, a missing value (None, NaN) as NaN: what
    pandas' ``astype(str)`` gave the report, without pandas."""
    values = col.tolist()
    if all(isinstance(v, str) for v in set(values)):
        return np.asarray(col, dtype=object)
    out = np.empty(len(values), dtype=object)
    out[:] = [v if isinstance(v, str) else math.nan if v is None or v != v else str(v)
              for v in values]
    return out


def _by_count(values: np.ndarray) -> list[str]:
    """The distinct strings of ``values``, most frequent first, ties in order of first
    appearance (pandas' ``value_counts``: a stable sort; missing values left out)."""
    counts = Counter(v for v in values.tolist() if isinstance(v, str))
    return [v for v, _ in sorted(counts.items(), key=lambda vc: -vc[1])]


def _quantile(x: np.ndarray, q: float) -> float:
    """The ``q`` quantile of the non-NaN values of ``x`` (NaN where there are none), by
    pandas' grouped linear interpolation, bit for bit (``v + (next - v) * frac``; numpy's
    own rounds differently above the midpoint)."""
    x = np.sort(x[~np.isnan(x)])
    if not x.size:
        return math.nan
    pos = q * (x.size - 1)
    i, frac = int(pos), pos % 1
    return float(x[i]) if frac == 0.0 else float(x[i] + (x[i + 1] - x[i]) * frac)


# ---------------------------------------------------------------------------- data views
class _Table:
    """A table's columns by name as numpy arrays, and its rows (``len``): the requests
    (columns built without pandas) or the iteration log (a frame, its columns, or none)."""

    def __init__(self, cols: Mapping[str, np.ndarray]) -> None:
        self.cols = cols
        self.rows = block_rows(cols)

    def __len__(self) -> int:
        return self.rows

    def __contains__(self, name: str) -> bool:
        return name in self.cols

    def __getitem__(self, name: str) -> np.ndarray:
        return np.asarray(self.cols[name])


class _View:
    """The arrays the report needs, pulled out of the result once."""

    def __init__(self, result: Any) -> None:
        self.m = RunMetrics.from_summary(result.metrics)  # read by attribute
        self.sc: dict[str, Any] = dict(result.scenario or {})
        it = result.iterations_columns()
        req = self.req = _Table(result.requests_columns())
        self.it = _Table(it if it is not None else {})
        # a long streamed log is read back sampled (iteration_log.read_for_report): every
        # it_every-th iteration of each worker, of it_rows in all
        attrs = result.iterations_attrs()
        self.it_every = int(attrs.get("sample_every", 1))
        self.it_rows = int(attrs.get("rows", len(self.it)))
        self.status = (_text(req["status"]) if "status" in req
                       else np.full(len(req), "completed", dtype=object))
        self.done = self.status == "completed"
        self.cls = (_text(req["workload_class"]) if "workload_class" in req
                    else np.full(len(req), "all", dtype=object))
        self.ttft = _col(req, "ttft_s").astype(np.float64)
        self.tpot = _col(req, "tpot_s").astype(np.float64)
        self.accepted = _col(req, "accepted_tokens", 0).astype(np.float64)
        self.drafted = _col(req, "drafted_tokens", 0).astype(np.float64)
        self.steps = _col(req, "steps", 0).astype(np.float64)
        slo = self.sc.get("slo") or {}
        in_metrics = "slo" in self.m.model_fields_set
        self.slo_ttft = self.m.slo.ttft_s if in_metrics else slo.get("ttft_s")
        self.slo_tpot = self.m.slo.tpot_s if in_metrics else slo.get("tpot_s")
        spec = self.m.speculation
        self.method = spec.method or (self.sc.get("speculation") or {}).get("method", "none")
        self.k = spec.k
        self.speculates = self.method != "none" and float(self.drafted.sum()) > 0
        self.classes = _by_count(self.cls)  # classes, most requests first
        # SLO verdicts per request (single-token outputs have no TPOT and pass it)
        tiers = self.slo_tiers = self.m.slo.tiers if in_metrics else slo.get("tiers")
        targets = (slo_targets(req["slo_tier"], self.slo_ttft, self.slo_tpot, tiers)
                   if tiers and "slo_tier" in req else (self.slo_ttft, self.slo_tpot))
        self.ttft_ok, self.tpot_ok, self.good = slo_attainment(
            self.done, self.ttft, self.tpot, *targets)

    @property
    def overlap(self) -> bool:
        return bool((self.sc.get("speculation") or {}).get("overlap_draft", False))

    def iteration_durations(self) -> np.ndarray:
        d = _col(self.it, "draft_time_s", 0).astype(np.float64)
        v = _col(self.it, "verify_time_s", 0).astype(np.float64)
        return np.maximum(d, v) if self.overlap else d + v


# ---------------------------------------------------------------------------- markdown parts
def _intro(v: _View) -> str:
    m, sc = v.m, v.sc
    fleet = m.fleet
    hw = sc.get("hardware") or {}
    acc = fleet.accelerator or hw.get("accelerator")
    acc = acc if isinstance(acc, str) else (acc or {}).get("name", "inline accelerator")
    devices = _or(fleet.devices, hw.get("count", "?"))
    tp = _or(fleet.tensor_parallel, hw.get("tensor_parallel", 1))
    workers = _or(fleet.workers, "?")
    model = m.model or (sc.get("model") if isinstance(sc.get("model"), str) else "inline")
    spec = m.speculation
    ssc = sc.get("speculation") or {}
    if v.method == "none":
        spec_txt = "no speculation (baseline: one target token per step)"
    else:
        bits = [f"**{v.method}**, k = {_or(spec.k, ssc.get('k'))}",
                f"policy {_or(spec.policy, ssc.get('policy', 'static'))}"]
        if spec.drafter:
            bits.append(f"drafter: {spec.drafter}")
        if ssc.get("drafter_quantization"):
            bits.append(f"drafter precision: {_quant(ssc['drafter_quantization'])}")
        bits.append(f"acceptance profile: {_or(spec.acceptance_profile, 'n/a')}")
        if ssc.get("overlap_draft"):
            bits.append("drafting overlapped with verification")
        spec_txt = "; ".join(bits)
    req = v.req
    n = len(req)
    arrived = _or(m.requests_arrived, n)
    if n:
        arr = _col(req, "arrival_s").astype(np.float64)
        span = float(np.nanmax(arr) - np.nanmin(arr)) if n > 1 else 0.0
        prompt = _col(req, "prompt_tokens").astype(np.float64)
        out_col = "output_tokens_requested" if "output_tokens_requested" in req else "output_tokens"
        out = _col(req, out_col).astype(np.float64)
        rate = f", {_num((n - 1) / span)} requests/s on average" if span > 0 else ""
        mix = ", ".join(f"{c} {100 * np.mean(v.cls == c):.0f}%" for c in v.classes[:8])
        if len(v.classes) > 8:
            mix += f", and {len(v.classes) - 8} more"
        work = (f"{n:,} requests arriving over {_num(span)} s{rate}; prompts "
                f"{_num(np.nanmean(prompt))} tokens on average (p50 {_num(np.nanmedian(prompt))}), "
                f"outputs {_num(np.nanmean(out))} tokens on average; workload classes: {mix}")
    else:
        work = "an empty trace (no requests)"
    if arrived != n:
        horizon = (sc.get("simulation") or {}).get("horizon_s")
        work += (f"; the run stopped at the horizon ({_num(horizon)} s simulated) with "
                 f"{arrived:,} of them arrived")
    desc = sc.get("description") or ""
    lines = [
        "## What was simulated",
        "",
        (f"**{model}** served on **{devices} x {acc}** ({workers} worker(s), tensor parallel "
         f"{tp}), precision {_quant(sc.get('quantization'))}. Speculation: {spec_txt}. "
         f"Workload: {work}. Seed {_or(m.seed, sc.get('seed', '?'))}."),
    ]
    if desc:
        lines += ["", f"Scenario description: {desc}"]
    return "\n".join(lines)


def _calibration_banner(v: _View) -> str:
    cal = _or(v.m.calibration, UNCALIBRATED)
    vals = v.m.calibration_values
    detail = (f"eta_compute {_num(vals.get('eta_compute'))}, eta_memory "
              f"{_num(vals.get('eta_memory'))}, per-layer overhead "
              f"{_num(vals.get('per_layer_overhead_s'), 1e6)} us, fixed overhead "
              f"{_num(vals.get('fixed_overhead_s'), 1e6)} us per pass, engine CPU work "
              f"{_num(vals.get('engine_fixed_s'), 1e3)} ms per iteration")
    if vals.get("spec_step_overhead_s"):
        detail += (f", speculation {_num(vals.get('spec_step_overhead_s'), 1e3)} ms per step + "
                   f"{_num(vals.get('spec_seq_overhead_s'), 1e6)} us per sequence")
    if cal == UNCALIBRATED:
        return (f"> **{UNCALIBRATED_LINE}.** Iteration times, and every latency, throughput, cost "
                f"and energy figure below, rest on {detail} ({vals.get('source', 'assumed')}). "
                "Run `specsim calibrate` on the target hardware and set `calibration:` in the "
                "scenario to replace them with measured values.")
    src = vals.get("source")
    return (f"Cost model: calibration profile **{cal}** ({detail}"
            + (f"; source: {src}" if src else "") + ").")


def _overload_banner(v: _View) -> str:
    o = v.m.overload
    return (f"> **Overloaded: the run was stopped at {_num(o.at_s)} s simulated** with "
            f"{_or(o.queued_requests, 0):,} requests queued (oldest waiting "
            f"{_num(o.oldest_wait_s)} s): arrivals {_num(o.arrival_rate_per_s)}/s "
            f"against completions {_num(o.completion_rate_per_s)}/s ({o.rule}). "
            "Every figure below covers the run until then; this load is beyond the fleet's "
            "capacity (`simulation.overload.detect: false` simulates the whole backlog).")


def _latency_table(v: _View) -> str:
    m = v.m
    rows = []
    for d, label, unit, scale, slo in (
            (m.ttft_s.model_dump(), "TTFT", "ms", 1e3, v.slo_ttft),
            (m.tpot_s.model_dump(), "TPOT", "ms", 1e3, v.slo_tpot),
            (m.itl_s, "ITL (per delivery)", "ms", 1e3, None),
            (m.e2e_s.model_dump(), "E2E latency", "s", 1.0, None)):
        rows.append([f"{label} ({unit})", *(_num(d.get(q), scale) for q in
                                             ("mean", "p50", "p90", "p99")),
                     _num(slo, scale) if slo is not None else "-"])
    return _md_table(["latency", "mean", "p50", "p90", "p99", "SLO"], rows)


def _metrics_table(v: _View) -> str:
    m = v.m
    devices = m.fleet.devices or 1
    thr = m.throughput_output_tokens_per_s
    rows = [
        ["requests arrived / completed / rejected / in flight",
         f"{_or(m.requests_arrived, 'n/a')} / {_or(m.requests_completed, 'n/a')} / "
         f"{_or(m.requests_rejected, 'n/a')} / {_or(m.requests_in_flight, 'n/a')}", "requests"],
        ["output tokens", _num(m.output_tokens), "tokens"],
        ["throughput", _num(thr), "output tokens/s"],
        ["throughput per device", _num(float(thr) / devices if _finite(thr) else None),
         "output tokens/s/device"],
        ["goodput (meeting every SLO)", _num(m.goodput_requests_per_s), "requests/s"],
        ["mean acceptance length (tau)", _num(m.mean_acceptance_length),
         "output tokens/verification step"],
        ["acceptance rate", _pct(m.acceptance_rate) if m.drafted_tokens else "-",
         "accepted / drafted tokens"],
        ["draft / verify time", f"{_pct(m.draft_time_fraction)} / "
                                f"{_pct(m.verify_time_fraction)}", "of busy device time"],
        ["busy fraction", _pct(m.busy_fraction), "of worker time"],
        ["KV cache peak", _pct(m.kv_peak_utilization),
         f"of {_num(m.kv_blocks_per_worker)} blocks/worker"],
        ["preemptions", _num(m.preemptions), "requests"],
        *([["speculative KV blocks taken / returned / kept",
            " / ".join(f"{int(getattr(m.speculative_kv_blocks, key) or 0):,}"
                       for key in ("allocated", "freed_rejected", "committed")),
            "blocks drafting steps took for draft + bonus tokens / those of rejected drafts, "
            "returned after the step / kept for accepted tokens (all workers)"]]
          if m.drafted_tokens and m.speculative_kv_blocks else []),
        ["iterations", _num(m.iterations), "worker steps"],
        ["simulated / wall time", f"{_num(m.simulated_time_s)} / "
                                  f"{_num(m.wall_time_s)}", "s"],
    ]
    rej = m.rejected_by_reason
    if rej:
        rows.insert(1, ["rejections by reason", ", ".join(f"{k}: {c}" for k, c in rej.items()),
                        "requests"])
    cut, dropped = m.requests_truncated_to_context, m.requests_dropped_for_context
    if cut is not None or dropped is not None:
        rows.insert(1, ["longer than the context: truncated / dropped by the workload",
                        f"{int(cut or 0):,} / {int(dropped or 0):,}", "requests"])
    return _md_table(["metric", "value", "unit"], rows, "lrl")


def _slo_section(v: _View) -> str:
    m = v.m
    arrived = int(_or(m.requests_arrived, len(v.req)) or 0)
    ndone = int(v.done.sum())
    if v.slo_ttft is None and v.slo_tpot is None and not v.slo_tiers:
        return ("No SLO is set in the scenario (`slo.ttft_s`, `slo.tpot_s`), so goodput counts "
                f"every completed request: {_num(m.goodput_requests_per_s)} requests/s.")
    rows = []

    def row(label: str, ok: np.ndarray) -> list[str]:
        met = int((v.done & ok).sum())
        return [label, f"{met:,}", _pct(met / ndone) if ndone else "n/a",
                _pct(met / arrived) if arrived else "n/a"]

    if v.slo_tiers:  # each request against its tier's targets (the next section)
        rows += [row("TTFT <= its tier's target", v.ttft_ok),
                 row("TPOT <= its tier's target", v.tpot_ok)]
    if v.slo_ttft is not None and not v.slo_tiers:
        rows.append(row(f"TTFT <= {_num(v.slo_ttft, 1e3)} ms", v.ttft_ok))
    if v.slo_tpot is not None and not v.slo_tiers:
        rows.append(row(f"TPOT <= {_num(v.slo_tpot, 1e3)} ms", v.tpot_ok))
    rows.append(row("every SLO", v.ttft_ok & v.tpot_ok))
    tab = _md_table(["SLO", "requests met", "of completed", "of arrived"], rows)
    return (tab + "\n\nRejected and unfinished requests count as misses in the last column; "
            "single-token outputs have no TPOT and pass the TPOT SLO. Goodput: "
            f"{_num(m.goodput_requests_per_s)} requests/s meet every SLO.")


def _tier_table(v: _View) -> str | None:
    """Per SLO tier (metrics.json ``slo_by_tier``): targets, TTFT and TPOT, attainment."""
    tiers = v.m.slo_by_tier
    if not tiers:
        return None

    def target(x: float | None) -> str:
        return f"{_num(x, 1e3)} ms" if _finite(x) else "none"

    rows = [[name, f"{target(b.ttft_target_s)} / {target(b.tpot_target_s)}",
             f"{_or(b.requests, 0):,}", f"{_or(b.completed, 0):,}", f"{_or(b.rejected, 0):,}",
             f"{_num(b.ttft_s.p50, 1e3)} / {_num(b.ttft_s.p99, 1e3)}",
             f"{_num(b.tpot_s.p50, 1e3)} / {_num(b.tpot_s.p99, 1e3)}",
             _pct(b.attainment), _pct(b.attainment_of_completed)]
            for name, b in tiers.items()]
    return (_md_table(["SLO tier", "TTFT / TPOT target", "requests", "completed", "rejected",
                       "TTFT p50 / p99 (ms)", "TPOT p50 / p99 (ms)", "met every target",
                       "of completed"], rows)
            + "\n\nEach tier against its own targets (`slo.tiers`, else `slo.ttft_s` / "
              "`slo.tpot_s`); rejected and unfinished requests count as misses in \"met "
              "every target\".")


def _class_table(v: _View) -> str | None:
    if len(v.classes) == 0:
        return None
    ttft, tpot = np.where(v.done, v.ttft, np.nan), np.where(v.done, v.tpot, np.nan)
    rows = []
    for c in v.classes[:MAX_CLASSES_TABLE]:
        m = v.cls == c
        done, good = int(v.done[m].sum()), int(v.good[m].sum())
        acc, drafted, steps = (float(x[m].sum()) for x in (v.accepted, v.drafted, v.steps))
        tau = 1.0 + acc / steps if steps else float("nan")
        rate = acc / drafted if drafted else float("nan")
        rows.append([str(c), f"{int(m.sum()):,}", f"{done:,}",
                     " / ".join(_num(_quantile(ttft[m], q), 1e3) for q in (0.5, 0.99)),
                     " / ".join(_num(_quantile(tpot[m], q), 1e3) for q in (0.5, 0.99)),
                     _pct(good / done) if done else "n/a",
                     _num(tau), _pct(rate) if v.method != "none" else "-"])
    tab = _md_table(["class", "requests", "completed", "TTFT p50 / p99 (ms)",
                     "TPOT p50 / p99 (ms)", "met every SLO (of completed)",
                     "tokens/step", "acceptance rate"], rows)
    if len(v.classes) > MAX_CLASSES_TABLE:
        tab += f"\n\n({len(v.classes) - MAX_CLASSES_TABLE} smaller classes not shown.)"
    return tab


def _cost_section(v: _View) -> str:
    m, sc = v.m, v.sc
    fleet = m.fleet
    cost_sc = sc.get("cost") or {}
    price = fleet.price_usd_per_device_hour
    date = fleet.price_date or "undated"
    energy = fleet.energy_j
    rows = [
        ["cost per million output tokens", _num(m.cost_usd_per_million_output_tokens),
         "USD / 1M output tokens"],
        ["energy per output token", _num(m.energy_j_per_output_token),
         "J / output token"],
        ["fleet cost of the run", _num(fleet.cost_usd), "USD"],
        ["fleet energy of the run", f"{_num(energy)} ({_num(energy, 1 / 3.6e6)} kWh)"
         if _finite(energy) else "n/a", "J"],
        ["average fleet power", _num(fleet.average_power_w), "W"],
        ["price", f"{_num(price)} x {_or(fleet.devices, '?')} devices", "USD / device-hour"],
        ["device power idle / max", f"{_num(fleet.power_idle_w)} / "
                                    f"{_num(fleet.power_max_w)}", "W per device"],
    ]
    tab = _md_table(["metric", "value", "unit"], rows, "lrl")
    assumed, measured = [], []
    if cost_sc.get("price_usd_per_hour") is None:
        assumed.append(f"price {_num(price)} USD/device-hour (catalog list price, dated {date})")
    else:
        measured.append(f"price {_num(price)} USD/device-hour (set in the scenario)")
    if cost_sc.get("power_idle_w") is None or cost_sc.get("power_max_w") is None:
        assumed.append(f"device power idle/max {_num(fleet.power_idle_w)}/"
                       f"{_num(fleet.power_max_w)} W (catalog: max is board power, idle is "
                       "assumed)")
    else:
        measured.append("device power (set in the scenario)")

    if _or(m.calibration, UNCALIBRATED) == UNCALIBRATED:
        assumed.append("compute/memory efficiencies and launch overheads (uncalibrated default)")
    else:
        measured.append(f"efficiencies and overheads (calibration {m.calibration})")
    out = [tab, "",
           f"Prices as of **{date}**. Cost = devices x USD/device-hour x simulated hours / "
           "output tokens (idle time included); energy integrates each phase's power over "
           "simulated time, idle devices included. Power model: "
           f"{m.energy.power_model.rule or 'not recorded'} (cost_models/data/power.yaml)."]
    ph = _phase_table(m)
    if ph:
        out += ["", "**Energy by phase:**", "", ph]
    out += [f"\nPower curve of {name}: host {_num(c.get('host'))}, compute "
            f"{_num(c.get('compute'))}, memory {_num(c.get('memory'))} ({c.get('source')})."
            for name, c in m.energy.power_model.accelerators.items()]
    out += ["", "**Assumed defaults:** " + ("; ".join(assumed) if assumed else "none") + "."]
    if measured:
        out += ["", "From the scenario or a calibration: " + "; ".join(measured) + "."]
    if _or(m.calibration, UNCALIBRATED) == UNCALIBRATED:
        out += ["", f"**{UNCALIBRATED_LINE}.**"]
    return "\n".join(out)


#: the energy phases in the order the tables show them (ledger.PHASES, then the fleet's idle)
PHASE_LABELS = {"draft": "draft (drafter passes, speculation bookkeeping)",
                "verify": "verify (target pass over decoding rows)",
                "prefill": "prefill (target pass over prompt tokens)",
                "host": "host (engine bookkeeping, GPU waits)",
                "idle": "idle (nothing in flight)"}


def _phase_table(m: RunMetrics) -> str | None:
    """Where the run's energy went by phase: device-seconds, joules, watts per device and
    the phase's mean utilisations (``metrics.json`` ``energy.phases``)."""
    phases = m.energy.phases
    if not phases:
        return None
    rows = [[PHASE_LABELS.get(p, p), _num(e.device_seconds), _num(e.energy_j),
             _pct(e.energy_fraction), _num(e.average_power_w), _num(e.compute_util),
             _num(e.memory_util)] for p, e in phases.items() if e.device_seconds]
    return _md_table(["phase", "device-s", "energy (J)", "share", "W per device",
                      "compute util", "memory util"], rows, "lrrrrrr")


# ---------------------------------------------------------------------------- plotting helpers
def _figure(nrows: int, ncols: int, size: tuple[float, float],
            adjust: dict[str, float] | None = None, **kw: Any):
    """A figure on its own Agg canvas. Fixed margins (``adjust``) where the labels have a
    known size, as constrained layout costs a third of the drawing time; constrained where
    they do not (class names)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=DPI, layout=None if adjust else "constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    if adjust:
        fig.subplots_adjust(**adjust)
    return fig, axes


def _save(fig: Any, path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    # zlib level 3 instead of PIL's 6: lossless either way, 40% less encoding time for
    # files about 6% larger
    fig.savefig(path, dpi=DPI, pil_kwargs={"compress_level": 3})
    fig.clear()


def _colors(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return [cmap(i % 10) for i in range(n)]


def _cdf_points(x: np.ndarray, max_points: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    x = np.sort(x[np.isfinite(x)])
    n = x.size
    if n == 0:
        return x, x
    y = np.arange(1, n + 1) / n
    if n > max_points:
        idx = np.unique(np.linspace(0, n - 1, max_points).astype(np.int64))
        x, y = x[idx], y[idx]
    return x, y


def _class_groups(v: _View, mask: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """('all', mask) plus the biggest classes when there are several."""
    groups = [("all requests", mask)]
    if len(v.classes) > 1:
        groups += [(c, mask & (v.cls == c)) for c in v.classes[:MAX_CLASSES_PLOTTED]]
    return groups


def _time_unit(span: float) -> tuple[str, float]:
    if span > 3 * 3600:
        return "h", 1 / 3600
    if span > 1200:
        return "min", 1 / 60
    return "s", 1.0


def _worker_label(m: RunMetrics, wid: int) -> str:
    """``worker 2``, or ``worker 2 (decode)`` in a PD fleet (its pools' worker ids)."""
    pools = m.disaggregation.pools if m.disaggregation is not None else {}
    for name, pool in pools.items():
        if wid in pool.worker_ids:
            return f"worker {wid} ({name})"
    return f"worker {wid}"


def _binned_mean(s: np.ndarray, e: np.ndarray, y: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Exact time-weighted mean over each bin of a piecewise-constant signal.

    The signal is y[i] on [s[i], e[i]) and 0 elsewhere; intervals sorted and disjoint.
    """
    cum = np.concatenate([[0.0], np.cumsum(y * (e - s))])
    i = np.searchsorted(e, edges, side="right")
    part = np.zeros(edges.size)
    inside = i < s.size
    j = i[inside]
    part[inside] = y[j] * np.clip(edges[inside] - s[j], 0.0, None)
    area = cum[i] + part
    return np.diff(area) / np.diff(edges)


# ---------------------------------------------------------------------------- the plots
_Outcome = tuple[str | None, str | None]  # (why it was not drawn, extra caption)


def _skip(reason: str) -> _Outcome:
    return reason, None


def _drawn(note: str | None = None) -> _Outcome:
    return None, note


def _plot_latency(v: _View, path: Path) -> _Outcome:
    if not v.done.any():
        return _skip("no request completed, so there is no latency distribution to plot")
    fig, ax = _figure(1, 2, (11, 4.2), adjust=dict(left=0.065, right=0.985, bottom=0.13,
                                                    top=0.86, wspace=0.2))
    groups = _class_groups(v, v.done)
    colors = _colors(len(groups))
    for a, vals, slo, name in ((ax[0, 0], v.ttft, v.slo_ttft, "TTFT"),
                               (ax[0, 1], v.tpot, v.slo_tpot, "TPOT")):
        drawn = []
        for (label, mask), col in zip(groups, colors, strict=True):
            sel = vals[mask]
            x, y = _cdf_points(sel * 1e3)
            if x.size:
                a.plot(x, y, color=col, lw=2.2 if label == "all requests" else 1.3,
                       label=f"{label} (n={int(np.isfinite(sel).sum()):,})")
                drawn.append(x)
        if not drawn:
            a.text(0.5, 0.5, f"no {name}: every completed output was a single token",
                   ha="center", va="center", transform=a.transAxes)
            a.set_axis_off()
            continue
        allx = np.concatenate(drawn)
        lo, hi = float(allx.min()), float(allx.max())
        if slo is not None:
            ok = v.ttft_ok if name == "TTFT" else v.tpot_ok
            met = (v.done & ok).sum() / max(v.done.sum(), 1)
            a.axvline(slo * 1e3, color="crimson", ls="--", lw=1.5,
                      label=f"SLO {_num(slo, 1e3)} ms ({100 * met:.1f}% met)")
            lo, hi = min(lo, slo * 1e3), max(hi, slo * 1e3)
        if lo > 0 and hi / lo > 30:
            a.set_xscale("log")
        a.set_xlabel(f"{name} per request (ms)" + (", log scale" if a.get_xscale() == "log"
                                                     else ""))
        a.set_ylabel("fraction of completed requests")
        a.set_ylim(0, 1.02)
        a.grid(True, alpha=0.3, which="both")
        a.set_title(f"{name} CDF")
        a.legend(fontsize=8, loc="lower right")
    fig.suptitle("Latency per request (completed requests)")
    _save(fig, path)
    return _drawn()


def _plot_timeline(v: _View, path: Path) -> _Outcome:
    req, it, m = v.req, v.it, v.m
    have_it = len(it) > 0 and "time_s" in it
    if not len(req) and not have_it:
        return _skip("no requests and no iterations to plot")
    arr = _col(req, "arrival_s").astype(np.float64)
    fin = _col(req, "finish_s").astype(np.float64)
    t_end = float(m.simulated_time_s or 0.0)
    if have_it:
        starts = it["time_s"].astype(np.float64)
        dur = v.iteration_durations()
        ends = starts + dur
        t_end = max(t_end, float(ends.max()))
        if v.it_every > 1:  # a sampled iteration stands for its worker's next it_every
            ends = np.minimum(starts + v.it_every * dur, t_end)
    elif not t_end > 0 and arr.size and np.isfinite(arr).any():
        t_end = float(np.nanmax(arr))  # no clock in the metrics: the trace's span
    if not t_end > 0:
        return _skip("the run covers no simulated time")
    if not have_it and not (arr <= t_end).any():
        return _skip("no request arrived before the end of the run")
    unit, tscale = _time_unit(t_end)
    n_bins = 2000
    if have_it:
        med = float(np.median(dur))
        if med > 0:
            n_bins = int(min(n_bins, max(20, t_end / (2 * med))))
    panels = ["system"] + (["batch", "kv"] if have_it else [])
    fig, ax = _figure(len(panels), 1, (11, 2.5 * len(panels) + 0.7), sharex=True,
                      adjust=dict(left=0.075, right=0.925, bottom=0.22 / len(panels),
                                  top=1 - 0.3 / len(panels), hspace=0.36))
    axes = {p: ax[i, 0] for i, p in enumerate(panels)}
    edges = np.linspace(0.0, t_end, n_bins + 1)
    mid = 0.5 * (edges[:-1] + edges[1:])
    centers = mid * tscale
    # requests in the system: arrived, not rejected, not yet finished
    a = axes["system"]
    keep = v.status != "rejected"
    arr_s = np.sort(arr[keep & np.isfinite(arr)])
    fin_s = np.sort(fin[keep & np.isfinite(fin)])
    in_sys = np.searchsorted(arr_s, mid, side="right") - np.searchsorted(fin_s, mid, side="right")
    a.plot(centers, in_sys, color="tab:purple", lw=1.2, label="requests in system (queued + running)")
    a.set_ylabel("requests in system")
    a.set_ylim(bottom=0)
    # arrival and completion rates over a rolling window of ~1/50 of the run
    win = max(1, n_bins // 50)
    kernel = np.ones(win)
    cover = np.convolve(np.ones(n_bins), kernel, mode="same") * (edges[1] - edges[0])
    a2 = a.twinx()
    for times, col, label in ((np.sort(arr[np.isfinite(arr)]), "tab:gray", "arrivals"),
                              (fin_s, "tab:green", "completions")):
        rate = np.convolve(np.histogram(times, bins=edges)[0], kernel, mode="same") / cover
        a2.plot(centers, rate, color=col, lw=1.0, alpha=0.85, label=f"{label} (requests/s)")
    a2.set_ylabel(f"requests/s (rolling {_num(win * (edges[1] - edges[0]) * tscale)} {unit})")
    a2.set_ylim(bottom=0)
    h1, l1 = a.get_legend_handles_labels()
    h2, l2 = a2.get_legend_handles_labels()
    a.legend(h1 + h2, l1 + l2, fontsize=8, loc="lower left", bbox_to_anchor=(0.0, 1.0),
             ncol=3, frameon=False, borderaxespad=0.2)
    a.grid(True, alpha=0.3)
    fig.suptitle("Load over simulated time")
    if have_it:
        workers = (it["worker"].astype(np.int64) if "worker" in it
                   else np.zeros(len(it), np.int64))
        wids = np.unique(workers)
        batch = _col(it, "batch_size", 0).astype(np.float64)
        kvu = _col(it, "kv_blocks_used", 0).astype(np.float64)
        bseries, kseries = [], []
        for w in wids:
            sel = np.flatnonzero(workers == w)
            sel = sel[np.argsort(starts[sel], kind="stable")]
            s, e = starts[sel], ends[sel]
            e = np.minimum(e, np.append(s[1:], np.inf))  # keep intervals disjoint
            bseries.append(_binned_mean(s, e, batch[sel], edges))
            # KV occupancy holds from the end of one iteration to the end of the next
            ke = np.append(e[1:], max(t_end, float(e[-1])))
            kseries.append(_binned_mean(e, ke, kvu[sel], edges))
        cap = m.kv_blocks_per_worker
        for key, series, label in (("batch", bseries, "batch size (sequences)"),
                                   ("kv", kseries, "KV blocks used")):
            a = axes[key]
            if len(wids) <= 4:
                for w, ser, col in zip(wids, series, _colors(len(wids)), strict=True):
                    a.plot(centers, ser, color=col, lw=1.0, label=_worker_label(m, int(w)))
            else:
                arr2 = np.vstack(series)
                a.fill_between(centers, arr2.min(0), arr2.max(0), color="tab:blue", alpha=0.2,
                               label=f"min-max over {len(wids)} workers")
                a.plot(centers, arr2.mean(0), color="tab:blue", lw=1.0, label="mean of workers")
            a.set_ylabel(label)
            a.set_ylim(bottom=0)
            a.grid(True, alpha=0.3)
            a.legend(fontsize=8, loc="best")
        a = axes["batch"]
        sb = (v.sc.get("scheduler") or {}).get("max_batch")
        if sb and max(float(s.max()) for s in bseries) > 0.5 * sb:
            a.axhline(sb, color="crimson", ls="--", lw=1, label=f"max_batch {sb}")
            a.set_ylim(0, max(a.get_ylim()[1], 1.08 * sb))
            a.legend(fontsize=8, loc="best")
        a.set_title("Batch size per worker (time-weighted mean per bin, 0 while idle)",
                    fontsize=10)
        a = axes["kv"]
        if cap:
            a.secondary_yaxis("right", functions=(lambda b: 100 * b / cap,
                                                   lambda p: p * cap / 100)).set_ylabel(
                "% of KV capacity")
            peak = m.kv_peak_utilization
            a.set_title(f"KV blocks used per worker (capacity {_num(cap)} blocks; peak "
                        f"{_pct(peak)})", fontsize=10)
    ax[-1, 0].set_xlabel(f"simulated time ({unit})")
    ax[-1, 0].set_xlim(0, t_end * tscale)
    _save(fig, path)
    if have_it and v.it_every > 1:
        return _drawn(f"Batch size and KV from every {v.it_every:,}th iteration of each worker "
                      f"({len(it):,} of {v.it_rows:,}), each standing for the next "
                      f"{v.it_every:,}.")
    return _drawn(None if have_it else "Batch size and KV panels are missing: no iterations "
                  "were recorded (`simulation.record_iterations`).")


def _plot_acceptance(v: _View, path: Path) -> _Outcome:
    if v.method == "none":
        return _skip("speculation is off (method none): every step yields one token")
    if not v.speculates:
        return _skip("no draft tokens were proposed in this run")
    mask = (v.steps > 0) & (v.drafted > 0)
    if not mask.any():
        return _skip("no request took a speculative step")
    tps = np.full(v.steps.size, np.nan)
    tps[mask] = 1.0 + v.accepted[mask] / v.steps[mask]
    kmax = float(np.nanmax(v.drafted[mask] / v.steps[mask]))
    top = max(kmax + 1.0, float(np.nanmax(tps)), 2.0)
    multi = len(v.classes) > 1
    if multi:
        fig, ax = _figure(1, 2, (11, 4.2), width_ratios=[1.5, 1])
    else:
        fig, ax = _figure(1, 1, (9, 4.2), adjust=dict(left=0.08, right=0.98, bottom=0.13,
                                                       top=0.86))
    a = ax[0, 0]
    bins = np.linspace(1.0, top, min(60, max(10, int((top - 1) * 12))) + 1)
    groups = _class_groups(v, mask)
    for (label, gm), col in zip(groups, _colors(len(groups)), strict=True):
        if not gm.any():
            continue
        if label == "all requests":
            a.hist(tps[gm], bins=bins, color=col, alpha=0.35, label=f"{label} (n={gm.sum():,})")
        else:
            a.hist(tps[gm], bins=bins, histtype="step", color=col, lw=1.4,
                   label=f"{label} (n={gm.sum():,})")
    tau = float(v.m.mean_acceptance_length or np.nanmean(tps[mask]))
    a.axvline(tau, color="black", ls="-", lw=1.2, label=f"mean tau {tau:.2f}")
    a.axvline(kmax + 1, color="crimson", ls="--", lw=1.2,
              label=f"ceiling k+1 = {kmax + 1:.3g}" if v.k is None else f"ceiling k+1 = {v.k + 1}")
    a.set_xlabel("tokens per verification step, per request (accepted drafts + 1)")
    a.set_ylabel("requests")
    a.grid(True, alpha=0.3)
    a.legend(fontsize=8)
    if not multi:
        rate = v.accepted[mask].sum() / v.drafted[mask].sum()
        a.set_title(f"Tokens per step ({v.classes[0]}: acceptance rate {100 * rate:.1f}% of "
                    "drafted tokens)")
        fig.suptitle(f"Speculation: {v.method}, k = {v.k}")
        _save(fig, path)
        return _drawn()
    a.set_title("Tokens per step")
    # acceptance rate per class
    a = ax[0, 1]
    names = v.classes[:12]
    rates, taus, ns = [], [], []
    for c in names:
        sel = v.cls == c
        d = v.drafted[sel].sum()
        st = v.steps[sel].sum()
        rates.append(v.accepted[sel].sum() / d if d else np.nan)
        taus.append(1 + v.accepted[sel].sum() / st if st else np.nan)
        ns.append(int(sel.sum()))
    y = np.arange(len(names))
    cols = _colors(len(names) + 1)
    cols = cols[1:] if len(v.classes) > 1 else cols[:1]  # same colours as the histogram
    bars = a.barh(y, np.nan_to_num(np.array(rates) * 100), color=cols[:len(names)])
    for b, r, t in zip(bars, rates, taus, strict=True):
        txt = f"{100 * r:.1f}%  tau {t:.2f}" if _finite(r) else "no drafts"
        a.text(b.get_width() + 1, b.get_y() + b.get_height() / 2, txt, va="center", fontsize=8)
    a.set_yticks(y, [f"{c[:24]} ({n:,})" for c, n in zip(names, ns, strict=True)], fontsize=8)
    a.set_ylim(max(len(names), 4) - 0.5, -0.5)  # top to bottom; thin bars for few classes
    a.set_xlim(0, 120)
    a.set_xticks([0, 20, 40, 60, 80, 100])
    a.set_xlabel("acceptance rate (% of drafted tokens accepted)")
    a.set_title("Acceptance per workload class")
    a.grid(True, axis="x", alpha=0.3)
    fig.suptitle(f"Speculation: {v.method}, k = {v.k}")
    _save(fig, path)
    return _drawn()


def _plot_iteration_time(v: _View, path: Path) -> _Outcome:
    it = v.it
    if not len(it):
        if not (v.sc.get("simulation") or {}).get("record_iterations", True):
            return _skip("iterations were not recorded (`simulation.record_iterations: false`)")
        return _skip("no worker iteration ran")
    dur = v.iteration_durations() * 1e3
    draft = _col(it, "draft_time_s", 0).astype(np.float64) * 1e3
    verify = _col(it, "verify_time_s", 0).astype(np.float64) * 1e3
    tokens = _col(it, "tokens", 0).astype(np.float64)
    batch = _col(it, "batch_size", 0).astype(np.float64)
    prefill = _col(it, "prefill_seqs", 0).astype(np.float64)
    n = len(it)
    idx = np.arange(n)
    if n > MAX_POINTS:
        idx = np.sort(np.random.default_rng(0).choice(n, MAX_POINTS, replace=False))
    fig, ax = _figure(1, 2, (11, 4.4), width_ratios=[1.35, 1],
                      adjust=dict(left=0.06, right=0.985, bottom=0.17, top=0.92, wspace=0.2))
    a = ax[0, 0]
    tok = np.maximum(tokens[idx], 1.0)
    if v.speculates and draft.sum() > 0:
        share = np.divide(draft[idx], draft[idx] + verify[idx],
                          out=np.zeros(idx.size), where=(draft[idx] + verify[idx]) > 0)
        sc_ = a.scatter(tok, dur[idx], c=100 * share, cmap="viridis", s=6, alpha=0.7,
                        vmin=0, vmax=max(1.0, float(100 * share.max())))
        fig.colorbar(sc_, ax=a, label="draft share of iteration time (%)")
    else:
        has_pre = prefill[idx] > 0
        a.scatter(tok[~has_pre], dur[idx][~has_pre], s=6, alpha=0.6, color="tab:blue",
                  label="decode only")
        a.scatter(tok[has_pre], dur[idx][has_pre], s=6, alpha=0.6, color="tab:orange",
                  label="with prefill chunk(s)")
        a.legend(fontsize=8, markerscale=2)
    if tok.max() / max(tok.min(), 1) > 20:
        a.set_xscale("log")
    a.set_xlabel("tokens in the target pass (decode + verify + prefill)"
                 + (", log scale" if a.get_xscale() == "log" else ""))
    a.set_ylabel("iteration time (ms)")
    a.set_ylim(bottom=0)
    a.grid(True, alpha=0.3, which="both")
    a.set_title("Iteration time vs batch tokens"
                + (f" ({idx.size:,} of {v.it_rows:,} sampled)" if v.it_rows > idx.size else ""))
    # mean draft / verify time per batch-size bin
    # (decode-only iterations where there are enough: prefill chunks would blur the trend)
    a = ax[0, 1]
    dec_only = prefill == 0
    only = int(dec_only.sum()) >= max(20, n // 10)
    if only:
        batch, draft, verify = batch[dec_only], draft[dec_only], verify[dec_only]
    bmax = int(batch.max()) if batch.size else 0
    width = max(1, -(-bmax // 16))
    bedges = np.arange(0, bmax + width, width, dtype=np.int64)
    bidx = np.clip(np.searchsorted(bedges, batch, side="left") - 1, 0, max(bedges.size - 2, 0))
    nbins = max(bedges.size - 1, 1)
    cnt = np.bincount(bidx, minlength=nbins)[:nbins]
    keep = cnt > 0
    md = np.bincount(bidx, weights=draft, minlength=nbins)[:nbins][keep] / cnt[keep]
    mv = np.bincount(bidx, weights=verify, minlength=nbins)[:nbins][keep] / cnt[keep]
    if bedges.size >= 2:
        labels = [f"{lo + 1}-{hi}" if hi - lo > 1 else f"{hi}"
                  for lo, hi in zip(bedges[:-1], bedges[1:], strict=True)]
    else:
        labels = [str(bmax)]
    labels = [lab for lab, k in zip(labels, keep, strict=True) if k]
    x = np.arange(len(labels))
    a.bar(x, mv, color="tab:blue", label="verify (target pass)")
    if md.sum() > 0:
        a.bar(x, md, bottom=mv, color="tab:orange", label="draft")
    a.set_xticks(x, labels, rotation=45 if len(labels) > 8 else 0, fontsize=8)
    a.set_xlabel("batch size (sequences)")
    a.set_ylabel("mean time per iteration (ms)" + (", decode-only" if only else ""))
    title = ("Draft vs verify time by batch size" if md.sum() > 0
             else "Iteration time by batch size")
    if v.overlap:
        title += " (draft overlapped: iteration = max)"
    a.set_title(title)
    a.legend(fontsize=8)
    a.grid(True, axis="y", alpha=0.3)
    _save(fig, path)
    return _drawn()


#: what report.md says while a second process draws its plots (``plots_later``); a reader
#: waiting for them (benchmarks/speed_targets.py, the tests) looks for this text
PLOTS_PENDING = "Being drawn by a second process"

PLOTS: tuple[tuple[str, str, str, Callable[[_View, Path], _Outcome]], ...] = (
    ("latency_cdf.png", "Latency distributions",
     "TTFT and TPOT per completed request, with the SLO lines.", _plot_latency),
    ("timeline.png", "Load over time",
     "Requests in the system, batch size and KV blocks used over simulated time.",
     _plot_timeline),
    ("acceptance.png", "Speculation: tokens per step and acceptance",
     "Per request: tokens bought by each verification step; per class: share of drafted "
     "tokens accepted.", _plot_acceptance),
    ("iteration_time.png", "Iteration cost",
     "Iteration time against tokens in the target pass, and its draft / verify split by "
     "batch size (decode-only iterations where there are enough).", _plot_iteration_time),
)


def _baseline_section(v: _View) -> str | None:
    """Speculation against the same run without it (``specsim run --baseline``): per-class
    speedups and the two product tables (daily cost and energy for the same daily output)."""
    b = v.m.baseline
    if b is None or not b.per_class:
        return None
    rows = []
    for cls, r in b.per_class.items():
        sp, ba = r.speculative, r.baseline

        def pair(key: str, scale: float = 1e3, r=r, sp=sp, ba=ba) -> str:
            x = getattr(r, key.replace("_s", "_speedup"))
            return (f"{_num(getattr(ba, key), scale)} -> {_num(getattr(sp, key), scale)} "
                    f"({_num(x)}x)" if x else "n/a")

        rows.append([cls, str(sp.requests), pair("tpot_s"), pair("e2e_s", 1.0),
                     pair("ttft_s")])
    out = [_md_table(["class", "requests", "TPOT ms: none -> spec", "E2E s: none -> spec",
                      "TTFT ms: none -> spec"], rows, "lrrrr"), "",
           "Speedup = baseline / speculative (above 1: speculation helped). Baseline: the same "
           "trace and seed with `speculation.method: none`."]
    run, fleet = b.run, b.fleet
    devices = fleet.devices or 0
    price = fleet.price_usd_per_device_hour
    date = fleet.price_date or "undated"

    def cap(side: str) -> float | None:
        tput = getattr(run.throughput_output_tokens_per_s, side)
        busy = getattr(run.busy_fraction, side)
        if not (_finite(tput) and _finite(busy) and busy > 0 and devices):
            return None
        return tput / (busy * devices)  # output tokens per busy device-second

    c_spec, c_base = cap("speculative"), cap("baseline")
    tput = run.throughput_output_tokens_per_s.speculative
    if c_spec and c_base and _finite(price) and _finite(tput):
        volume = tput * 86400.0  # the run's daily output volume
        native = volume / c_base / 3600.0 * price
        gain = c_spec / c_base
        spec_cost = native / gain
        out += ["", "**Daily cost for the same daily output volume** "
                f"({_num(volume / 1e6)} M output tokens/day, this run's rate):", "",
                _md_table(["", "native", "speculative"], [
                    ["output tokens per busy device-second, this load", _num(c_base),
                     _num(c_spec)],
                    ["net throughput gain", "1.00x", f"{_num(gain)}x"],
                    ["daily cost (USD)", _num(native), _num(spec_cost)],
                    ["saving", "", _pct(1 - 1 / gain) if gain else "n/a"]], "lrr"), "",
                f"Effective daily cost = native daily cost / net throughput gain; a fleet "
                f"sized to keep its devices as busy as in the run; price {_num(price)} "
                f"USD/device-hour ({date}). At light load a GPU steps whenever any request is "
                "in flight, so busy time understates what speculation frees: the capacity "
                "gain under SLOs is what `specsim plan` measures (largest sustainable load "
                "per replica, with and without speculation)."]
    e = run.energy_j_per_output_token
    if _finite(e.speculative) and _finite(e.baseline) and _finite(tput):
        volume = tput * 86400.0
        p = run.average_power_w
        out += ["", "**Energy for the same daily output volume:**", "",
                _md_table(["", "native", "speculative"], [
                    ["energy per output token (J)", _num(e.baseline),
                     _num(e.speculative)],
                    ["energy per day (kWh)", _num(e.baseline * volume / 3.6e6),
                     _num(e.speculative * volume / 3.6e6)],
                    ["average fleet power in the run (W)", _num(p.baseline),
                     _num(p.speculative)],
                    *([f"{PHASE_LABELS.get(name, name)}: W per device", _num(q.baseline_w),
                       _num(q.speculative_w)] for name, q in b.energy_phases.items()),
                    *([f"{PHASE_LABELS.get(name, name)}: J per output token",
                       _num(q.baseline_j_per_token), _num(q.speculative_j_per_token)]
                      for name, q in b.energy_phases.items())], "lrr"), "",
                "Energy per token includes idle devices over the run. Every phase is drawn "
                "on one power curve of its utilisation (the same for both runs: a verify pass "
                "and a plain decode pass at the same utilisation draw the same power); "
                f"{v.m.energy.power_model.rule or 'power model not recorded'} "
                "(cost_models/data/power.yaml, its sources under Cost and energy above)."]
    return "\n".join(out)


def _kv_cache_section(v: _View) -> str | None:
    """The prefix cache and its tiers (only for runs with ``kv_cache:``)."""
    kc = v.m.kv_cache
    if kc is None:
        return None

    def n(x: Any) -> str:
        return f"{int(x):,}" if _finite(x) else "n/a"

    hit_t, hit_b, rate = kc.hit_tokens, kc.hit_blocks, kc.hit_rate  # per tier name
    rows = [[str(name), n(t.capacity_blocks_per_worker), n(hit_t.get(name)),
             n(hit_b.get(name)), _pct(rate.get(name)), n(t.used_blocks_at_end)]
            for name, t in kc.tiers.items()]
    rows.append(["all tiers", "-", n(sum(hit_t.values())), n(sum(hit_b.values())),
                 _pct(rate.get("total")), "-"])
    tab = _md_table(["tier", "capacity (blocks/worker)", "hit tokens", "hit blocks",
                     "hit rate (of tokens looked up)", "in use at the end (all workers)"],
                    rows)
    moved_txt = ", ".join(f"{k}: {_num(b / 1e9)} GB" for k, b in kc.bytes_moved.items()
                          ) or "none"
    kinds, xfer = kc.preemptions_by_kind, kc.ttft_transfer_s
    return "\n".join([
        tab, "",
        f"Prefix cache {'on' if kc.prefix_cache else 'off'} "
        f"({kc.eviction} eviction, {n(kc.page_tokens)}-token pages); "
        f"{n(kc.lookups)} lookups over {n(kc.lookup_tokens)} prompt tokens, "
        f"{n(kc.prefill_tokens_saved)} tokens not prefilled. Moved between tiers: "
        f"{moved_txt}. Preemptions: {n(kinds.recompute)} by recompute, "
        f"{n(kinds.swap)} by swap ({n(kc.swap_fallbacks)} swaps fell back to "
        f"recompute). Transfer time inside TTFT: mean {_num(xfer.mean, 1e3)} ms, max "
        f"{_num(xfer.max, 1e3)} ms ({_pct(kc.ttft_transfer_fraction)} of all "
        f"TTFT; {'overlapped with compute (layer-wise loading)' if kc.layerwise_loading else 'not overlapped with compute'}).",
    ])


def _pd_section(v: _View) -> str | None:
    """The pools and the KV link of a disaggregated run (``metrics.disaggregation``)."""
    pd = v.m.disaggregation
    if pd is None:
        return None
    rows = []
    for name, p in pd.pools.items():
        rows.append([name, f"{_or(p.devices, '?')} x {_or(p.accelerator, '?')}",
                     f"{_or(p.workers, '?')} (TP {_or(p.tensor_parallel, '?')})",
                     _pct(p.busy_fraction), _pct(p.kv_peak_utilization),
                     _num(p.price_usd_per_device_hour), _num(p.cost_usd), _num(p.energy_j)])
    tab = _md_table(["pool", "devices", "workers", "busy", "KV peak", "USD/device-h",
                     "cost (USD)", "energy (J)"], rows, "lllrrrrr")
    link, xfer, wait = pd.link, pd.transfer_s, pd.link_wait_s
    where = "one link shared by all" if link.shared else \
        f"{_or(link.links, '?')} links, one per prefill worker"
    lines = [tab, "", _md_table(["KV link", "value"], [
        ["bandwidth, latency", f"{_num(link.bandwidth_gb_s)} GB/s, "
                               f"{_num(link.latency_s, 1e6)} us ({where})"],
        ["transfers", f"{_or(pd.transfers, 0):,}"],
        ["bytes moved", f"{_num(pd.bytes_moved, 1e-9)} GB"],
        ["transfer time mean / p50 / p99 (ms)",
         f"{_num(xfer.mean, 1e3)} / {_num(xfer.p50, 1e3)} / {_num(xfer.p99, 1e3)}"],
        ["waiting for the link mean / p99 (ms)",
         f"{_num(wait.mean, 1e3)} / {_num(wait.p99, 1e3)}"],
        ["link busy", _pct(link.busy_fraction)],
        ["share of TTFT on the link (mean)", _pct(pd.transfer_share_of_ttft)],
        ["prefilled on a decode worker (prefix held there)",
         f"{_or(pd.prefilled_on_decode_pool, 0):,}"],
    ], "lr"), "",
        "Prefill workers run each prompt and sample its first token; its KV (prompt tokens x "
        f"{_num(pd.kv_bytes_per_token)} bytes, target + drafter) then crosses the link "
        "(bytes / bandwidth + latency, transfers first come first served on a link) to the "
        f"decode worker `{_or(pd.decode_router, '?')}` picks. TTFT includes the wait for "
        "the link and the transfer (the first token reaches the user with the hand-off). Fleet "
        "cost and energy above are the two pools added."]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- entry point
def write_report(result: Any, out_dir: Path, plots: bool | str = True) -> None:
    """Write ``report.md`` (and ``report.html``) and its PNGs (relative links) into
    ``out_dir``; ``plots=False`` writes the tables only, without importing matplotlib
    (about 0.8 s less on a 2-core machine; ``specsim report DIR`` draws them later);
    ``plots="later"`` the same, saying a second process is drawing them
    (``plots_later``: it rewrites both files when they are in place)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    v = _View(result)
    m = v.m
    name = m.scenario or v.sc.get("name") or "scenario"
    parts = [f"# specsim report: {md_text(name)}", "", _intro(v), "", _calibration_banner(v), "",
             *([_overload_banner(v), ""] if v.m.overload is not None else []),
             "## Latency", "", _latency_table(v), "",
             "TTFT = first token - arrival (queueing and prefill included). TPOT = (last - "
             "first token time) / (output tokens - 1). ITL = gaps between deliveries to one "
             "request; tokens accepted in one step arrive together. Percentiles over requests "
             "(TTFT, TPOT, E2E) or deliveries (ITL).",
             "", "## Throughput, speculation and memory", "", _metrics_table(v), "",
             "## SLO attainment", "", _slo_section(v), ""]
    ttab = _tier_table(v)
    if ttab:
        parts += ["## Per SLO tier", "", ttab, ""]
    ctab = _class_table(v)
    if ctab:
        parts += ["## Per workload class", "", ctab, ""]
    kv = _kv_cache_section(v)
    if kv:
        parts += ["## KV cache: prefix hits, tiers and transfers", "", kv, ""]
    parts += ["## Cost and energy", "", _cost_section(v), ""]
    pd = _pd_section(v)
    if pd:
        parts += ["## Prefill/decode disaggregation", "", pd, ""]
    base = _baseline_section(v)
    if base:
        parts += ["## Speculation against none (`--baseline`)", "", base, ""]
    notes = list(dict.fromkeys([*m.notes, *(getattr(result, "notes", None) or [])]))
    parts += ["## Notes", ""]
    parts += [f"- {md_text(n)}" for n in notes] if notes else ["None."]
    parts += ["", "## Plots", ""]
    if plots == "later":
        parts += [f"_{PLOTS_PENDING}: the PNGs, and this report with them, "
                  "appear in this folder a second or two after `specsim run` returns "
                  "(`--wait-plots` draws them before it returns)._", ""]
    elif not plots:
        parts += ["_Not drawn (`--no-plots`): `specsim report DIR` draws them from this "
                  "folder._", ""]
    for fname, title, caption, fn in PLOTS if plots is True else ():
        parts += [f"### {title}", ""]
        try:
            skipped, note = fn(v, out_dir / fname)
        except Exception as exc:  # a plot must not cost the user the run's other outputs
            warnings.warn(f"specsim report: could not draw {fname}: {exc!r}", stacklevel=2)
            skipped, note = f"could not draw this plot ({type(exc).__name__}: {exc})", None
        if skipped is None:
            parts += [f"![{title}]({fname})", "", caption + (f" {note}" if note else ""), ""]
        else:
            (out_dir / fname).unlink(missing_ok=True)
            parts += [f"_Not plotted: {skipped}._", ""]
    text = "\n".join(parts).rstrip() + "\n"
    (out_dir / "report.md").write_text(text)
    from specsim.simulator.report.html import markdown_to_html

    (out_dir / "report.html").write_text(markdown_to_html(text, out_dir, f"specsim: {name}"))
