"""The run's metrics (metrics.json): per pool, and for the fleet the pools make.

One function per level: ``pool_metrics`` (devices, cost, energy, busy time and KV of one
pool's workers), ``fleet_block`` (the pools added; a fleet of one pool is that pool, so a
run without disaggregation reports what it always did) and ``summarise`` (the run: requests,
latencies, tokens, speculation, the fleet, notes). The engine's ``Simulation`` is read,
never written.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from specsim.cost_models.calibration import UNCALIBRATED
from specsim.simulator.cluster import requests as rq
from specsim.simulator.metrics.collector import dist, slo_attainment, slo_targets
from specsim.simulator.metrics.collector import tpot as metrics_tpot


def pool_metrics(d: Any, workers: list[Any], now: float) -> dict[str, Any]:
    """One pool: its devices, price, power, cost and energy over ``now`` seconds (idle time
    at idle power), busy fraction and KV peak. ``d`` is the pool's Deployment."""
    n = len(workers)
    busy = sum(w.ledger.busy_s for w in workers)
    energy = (sum(w.ledger.energy_j for w in workers)
              + max(n * now - busy, 0.0) * d.tp * d.power_idle)
    devices = n * d.tp
    peak = max((w.kv.peak for w in workers), default=0)
    return {
        "accelerator": d.hw.name, "devices": devices, "workers": n,
        "tensor_parallel": d.tp, "worker_ids": [w.wid for w in workers[:1]]
        + [w.wid for w in workers[-1:]],
        "price_usd_per_device_hour": d.price, "price_date": d.hw.price_date,
        "power_idle_w": d.power_idle, "power_max_w": d.power_max,
        "cost_usd": devices * d.price * now / 3600.0, "energy_j": energy,
        "busy_fraction": busy / (n * now) if now and n else 0.0,
        "kv_blocks_per_worker": d.kv_blocks,
        "kv_peak_utilization": peak / max(d.kv_blocks, 1),
        "iterations": int(sum(w.ledger.iterations for w in workers)),
        "preemptions": int(sum(w.preemptions for w in workers)),
        "calibration": d.calibration.name,
    }


FLEET_KEYS = ("accelerator", "devices", "workers", "tensor_parallel",
              "price_usd_per_device_hour", "price_date", "cost_usd", "energy_j",
              "power_idle_w", "power_max_w")


def fleet_block(pools: dict[str, dict[str, Any]], now: float) -> dict[str, Any]:
    """metrics.json's ``fleet``: the pools added (devices, workers, cost, energy), prices and
    power weighted by devices; names, TPs and price dates joined where they differ."""
    if len(pools) == 1:  # the fleet is its pool: the same figures, bit for bit
        (p,) = pools.values()
        out = {k: p[k] for k in FLEET_KEYS}
        out["average_power_w"] = p["energy_j"] / now if now else 0.0
        return out
    devices = sum(p["devices"] for p in pools.values())
    energy = sum(p["energy_j"] for p in pools.values())
    names = list(dict.fromkeys(p["accelerator"] for p in pools.values()))
    tps = list(dict.fromkeys(p["tensor_parallel"] for p in pools.values()))
    dates = list(dict.fromkeys(str(p["price_date"]) for p in pools.values()))

    def per_device(key: str) -> float:  # device-weighted: x devices = the fleet's
        return sum(p[key] * p["devices"] for p in pools.values()) / devices

    return {
        "accelerator": " + ".join(names), "devices": devices,
        "workers": sum(p["workers"] for p in pools.values()),
        "tensor_parallel": tps[0] if len(tps) == 1 else "/".join(map(str, tps)),
        "price_usd_per_device_hour": per_device("price_usd_per_device_hour"),
        "price_date": dates[0] if len(dates) == 1 else ", ".join(dates),
        "cost_usd": sum(p["cost_usd"] for p in pools.values()), "energy_j": energy,
        "power_idle_w": per_device("power_idle_w"),
        "power_max_w": per_device("power_max_w"),
        "average_power_w": energy / now if now else 0.0,
    }


def summarise(sim: Any, wall_s: float) -> dict[str, Any]:
    """metrics.json of a finished (or stopped) run."""
    t, sc, fleet = sim.table, sim.sc, sim.fleet
    d = fleet.deployment  # the pool that decodes: model, speculation, calibration
    workers = fleet.workers
    now = float(sim.env.now)
    arrived = int(np.count_nonzero(sim.arrived()))
    done = t.status == rq.DONE
    rejected = int((t.status == rq.REJECTED).sum())
    out_tokens = int(t.generated.sum())
    ttft = t.first_token - t.arrival
    tpot = np.where(done, metrics_tpot(t.first_token, t.finish, t.generated), np.nan)
    e2e = np.where(done, t.finish - t.arrival, np.nan)
    slo = sc.slo
    targets = slo_targets(t.slo_tier, slo.ttft_s, slo.tpot_s, slo.tiers)
    ttft_ok, tpot_ok, good = slo_attainment(done, ttft, tpot, *targets)
    window = now if now > 0 else float("nan")
    steps = int(t.steps.sum())
    decode_tokens = int((t.accepted + t.bonus).sum() - (t.first_token == t.first_token).sum())
    busy = sum(w.ledger.busy_s for w in workers)
    draft_s = sum(w.ledger.draft_s for w in workers)
    verify_s = sum(w.ledger.verify_s for w in workers)
    pools = {p.name: pool_metrics(p.deployment, p.workers, now) for p in fleet.pools}
    fl = fleet_block(pools, now)
    cost, energy = fl["cost_usd"], fl["energy_j"]
    drafted = int(t.drafted.sum())
    cal = d.calibration
    if len(pools) == 1:  # one pool: its own figures
        busy_fraction = busy / (fl["workers"] * now) if now else 0.0
        kv_peak = max((w.kv.peak for w in workers), default=0) / max(d.kv_blocks, 1)
    else:
        busy_fraction = (sum(p["busy_fraction"] * p["workers"] for p in pools.values())
                         / fl["workers"] if fl["workers"] else 0.0)
        kv_peak = max(p["kv_peak_utilization"] for p in pools.values())
    out = {
        **({"overload": sim.overload} if sim.overload is not None else {}),
        "scenario": sc.name,
        "seed": d.seed,
        "requests_arrived": arrived,
        "requests_completed": int(done.sum()),
        "requests_rejected": rejected,
        "requests_in_flight": arrived - int(done.sum()) - rejected,
        "rejected_by_reason": dict(sorted(sim.rejected_reasons.items())),
        "requests_truncated_to_context": sim.truncated,
        "requests_dropped_for_context": sim.dropped,
        "output_tokens": out_tokens,
        "accepted_tokens": int(t.accepted.sum()),
        "bonus_tokens": int(t.bonus.sum()),
        "drafted_tokens": drafted,
        "ttft_s": dist(ttft[done]),
        "tpot_s": dist(tpot),
        "itl_s": sim.metrics.itl.summary(),
        "e2e_s": dist(e2e),
        "throughput_output_tokens_per_s": out_tokens / window,
        "goodput_requests_per_s": int(good.sum()) / window,
        "slo": {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s,
                **({"tiers": slo.tiers} if slo.tiers else {})},
        "mean_acceptance_length": (decode_tokens / steps) if steps else 1.0,
        "acceptance_rate": (int(t.accepted.sum()) / drafted) if drafted else 0.0,
        "draft_time_fraction": float(draft_s / busy) if busy else 0.0,
        "verify_time_fraction": float(verify_s / busy) if busy else 0.0,
        "busy_fraction": busy_fraction,
        "kv_peak_utilization": kv_peak,
        "kv_blocks_per_worker": d.kv_blocks,
        "kv_blocks_used_at_end": int(sum(w.kv.held for w in workers)),
        "preemptions": int(sum(w.preemptions for w in workers)),
        "speculative_kv_blocks": speculative_kv(workers),
        "iterations": int(sum(w.ledger.iterations for w in workers)),
        "cost_usd_per_million_output_tokens": cost / out_tokens * 1e6 if out_tokens else None,
        "energy_j_per_output_token": energy / out_tokens if out_tokens else None,
        "fleet": fl,
        "energy": energy_by_phase(fleet, now),
        "model": d.model.name,
        "speculation": {"method": d.method, "k": sc.speculation.k,
                        "policy": d.controller.name, "drafter": d.drafter.describe(),
                        "acceptance_profile": d.acceptance.name,
                        **speculation_metrics(sim, busy)},
        "simulated_time_s": now,
        "wall_time_s": wall_s,
        # each pool's profile, once each (its values: the decoding pool's; every pool's
        # name is in disaggregation.pools)
        "calibration": " + ".join(dict.fromkeys(
            p.deployment.calibration.name if p.deployment.calibration.calibrated
            else UNCALIBRATED for p in fleet.pools)),
        "calibration_values": {**cal.values(), "source": cal.source},
        "hardware_calibrated": all(
            p.deployment.calibration.calibrated
            and p.deployment.calibration.hardware == p.deployment.hw.name
            for p in fleet.pools),
        "notes": list(sim.notes),
    }
    tiers = slo_by_tier(t, slo, sim.arrived(), done, ttft, tpot, (ttft_ok, tpot_ok, good),
                        window)
    if tiers is not None:  # two tiers or more, or slo.tiers: other runs' metrics as before
        out["slo_by_tier"] = tiers
    if d.kv_cache is not None:  # only with kv_cache: other runs' metrics as before
        from specsim.simulator.kv import prefix_cache as pc

        out["kv_cache"] = pc.summary(sim)
    for h in sim.handoffs:  # PD: each pool, the link's numbers
        out["disaggregation"] = {"pools": pools, **h.metrics(now)}
    return out


#: the power rule every phase is drawn on (``kernel_jit._util``, cost_models/data/power.yaml)
POWER_RULE = ("P = idle + (max - idle) x min(1, host + compute x u_compute + memory x "
              "u_memory), each utilisation over the phase's own seconds")


def energy_by_phase(fleet: Any, now: float) -> dict[str, Any]:
    """metrics.json's ``energy``: per phase (``ledger.PHASES``, then ``idle``: devices with
    nothing in flight, at idle power) device-seconds, joules, average watts per device,
    share of the fleet's energy and mean utilisations (device-weighted); the phases add up
    to ``fleet.energy_j``. ``power_model``: the rule and each pool's curve with its
    source."""
    from specsim.simulator.execution.ledger import PHASES

    acc = {p: [0.0, 0.0, 0.0, 0.0] for p in (*PHASES, "idle")}  # dev-s, J, F/peak, B/bw
    curves: dict[str, Any] = {}
    for pool in fleet.pools:
        d, workers = pool.deployment, pool.workers
        for w in workers:
            led = w.ledger
            for p in PHASES:
                a = acc[p]
                a[0] += led.phase_s[p] * led.devices
                a[1] += led.phase_j[p]
                a[2] += led.phase_flops[p] / led.peak_flops * led.devices
                a[3] += led.phase_bytes[p] / led.hbm_bw * led.devices
            c = led.curve
            curves[d.hw.name] = {"curve": c.accelerator, "host": c.host, "compute": c.compute,
                                 "memory": c.memory, "power_idle_w": d.power_idle,
                                 "power_max_w": d.power_max, "source": c.source}
        idle_s = max(len(workers) * now - sum(w.ledger.busy_s for w in workers), 0.0) * d.tp
        acc["idle"][0] += idle_s
        acc["idle"][1] += idle_s * d.power_idle
    total = sum(a[1] for a in acc.values())
    phases = {p: {"device_seconds": a[0], "energy_j": a[1],
                  "average_power_w": a[1] / a[0] if a[0] else None,
                  "energy_fraction": a[1] / total if total else 0.0,
                  "compute_util": a[2] / a[0] if a[0] else None,
                  "memory_util": a[3] / a[0] if a[0] else None}
              for p, a in acc.items()}
    return {"phases": phases, "power_model": {"rule": POWER_RULE, "accelerators": curves}}


def slo_by_tier(t: Any, slo: Any, arrived: np.ndarray, done: np.ndarray, ttft: np.ndarray,
                tpot: np.ndarray, ok: tuple[np.ndarray, ...], window: float) -> dict[str, Any] | None:
    """Per SLO tier (the workload's ``slo_tier``; ``slo.tiers``' order first, then by name):
    its targets, arrivals, completions and rejections, TTFT and TPOT of its completed
    requests, how many met each target and every one, ``attainment`` (met every target, of
    arrived: rejected and unfinished requests are misses) and its goodput. None when the
    run has one tier and ``slo.tiers`` is not set."""
    tier = t.slo_tier  # (object array: its strings shared, no per-request copy)
    present = sorted(set(tier[arrived]))
    if len(present) < 2 and not slo.tiers:
        return None
    names = [*(slo.tiers or {}), *(n for n in present if n not in (slo.tiers or {}))]
    ttft_ok, tpot_ok, good = ok
    rejected = t.status == rq.REJECTED
    out = {}
    for name in names:
        m = (tier == name) & arrived
        md = m & done
        n, nd, met = int(m.sum()), int(md.sum()), int((good & m).sum())
        own = [None if v is None or not np.isfinite(np.ravel(v)[0]) else float(np.ravel(v)[0])
               for v in slo_targets(np.array([name]), slo.ttft_s, slo.tpot_s, slo.tiers)]
        out[name] = {
            "ttft_target_s": own[0], "tpot_target_s": own[1],
            "requests": n, "completed": nd, "rejected": int((m & rejected).sum()),
            "ttft_s": dist(ttft[md]), "tpot_s": dist(tpot[md]),
            "ttft_met": int((md & ttft_ok).sum()), "tpot_met": int((md & tpot_ok).sum()),
            "slo_met": met, "attainment": met / n if n else None,
            "attainment_of_completed": met / nd if nd else None,
            "goodput_requests_per_s": met / window}
    return out


def speculative_kv(workers: list[Any]) -> dict[str, Any]:
    """Speculative KV blocks, in total and per worker (index = worker id): ``allocated``,
    the blocks decode steps took above what their rows held, for their draft + bonus
    tokens; ``freed_rejected``, of them, those that held only rejected drafts and were
    returned after the step; ``committed`` = allocated - freed_rejected, kept for the
    accepted + bonus tokens. A row's finishing step frees everything and is not
    counted."""
    taken = [int(w.spec_blocks_taken) for w in workers]
    freed = [int(w.spec_blocks_freed) for w in workers]
    kept = [a - f for a, f in zip(taken, freed, strict=True)]
    return {"allocated": sum(taken), "freed_rejected": sum(freed), "committed": sum(kept),
            "per_worker": {"allocated": taken, "freed_rejected": freed,
                           "committed": kept}}


def speculation_metrics(sim: Any, busy: float) -> dict[str, Any]:
    """Where the busy time and energy went (accepted, bonus, wasted, prompt work), the
    accepted-length histogram per class and the policy's decisions."""
    from specsim.simulator.cluster.worker import WORK_KINDS

    workers, d = sim.fleet.workers, sim.fleet.deployment
    work_s = {k: sum(w.ledger.work_s[k] for w in workers) for k in WORK_KINDS}
    work_j = {k: sum(w.ledger.work_j[k] for w in workers) for k in WORK_KINDS}
    out: dict[str, Any] = {
        "work_s": work_s, "work_j": work_j,
        "wasted_time_fraction": work_s["wasted"] / busy if busy else 0.0,
        "wasted_energy_fraction": (work_j["wasted"] / sum(work_j.values())
                                   if any(work_j.values()) else 0.0)}
    hists = [w.kernel.accept_hist for w in workers if w.kernel.accept_hist is not None]
    if hists:
        h = np.sum(hists, axis=0)
        names = list(getattr(d.acceptance, "_names", []) or [])
        kmax = int(np.flatnonzero(h.sum(axis=0)).max()) + 1 if h.any() else 0
        out["accepted_per_step_histogram"] = {
            names[i] if i < len(names) else str(i): [int(x) for x in h[i, :kmax]]
            for i in range(h.shape[0]) if h[i].any()}
    codes = {c: r for r, c in sim.metrics.reasons.items()}
    decisions: dict[str, int] = {}
    for w in workers:
        for c, n in w.kernel.reason_iterations.items():
            decisions[codes.get(c, str(c))] = decisions.get(codes.get(c, str(c)), 0) + n
    out["policy_decisions"] = dict(sorted(decisions.items(), key=lambda kv: -kv[1])[:20])
    out["policy_changes"] = int(sum(w.kernel.reason_changes for w in workers))
    switches = [e for w in workers for e in getattr(w.policy, "switches", [])]
    if d.drafter.per_class and d.drafter.fallback is not None:
        # drafter switching (per_class.py rule 4): each switch, in time order
        switches.sort(key=lambda e: (e["time_s"], e["worker"]))
        out["drafter_switch_count"] = len(switches)
        out["drafter_switches"] = switches[:200]
    return out
