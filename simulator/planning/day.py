"""A day of traffic: the cheapest fleet per window, with the switches priced, then replayed.

For a day curve (``traces/diurnal.py``: rates per window, per class) and a space of
configurations, ``DayPlanner`` picks per window the configuration (any space keys: the
speculation choice per class as ``speculation.per_class.CLASS.*``, the drafter, k, the
hardware) and its replica count that meet the SLOs at the least cost over the day, then
replays the day with that plan in the loop, and does the same for the best static fleet.

Rules:
1. Capacity once per configuration (and class mix): ``Planner.plan_one`` at the highest
   window rate of that mix finds the largest rate R one replica sustains within the SLOs.
   A window at rate r needs ceil(r / R) replicas (at least ``min_replicas``). This reuses R
   across windows because a replica's latency does not fall as its load rises below
   saturation (a larger batch makes every step longer, a queue only grows), so a replica
   that meets a percentile SLO at R meets it at any r/n <= R; and n replicas behind a
   round-robin router each see 1/n of a Poisson stream (Erlang gaps, no burstier than
   Poisson at r/n), and if each replica's requests meet p99 <= L so do all of them. The
   replay checks it per window (rule 4).
2. Switches between windows cost replica time: a replica added (same configuration) is
   started ``scale_up_delay_s`` + its weights' load (bytes per device / host link) +
   ``warmup_s`` before the window, so it serves from the boundary; a configuration on the
   same hardware, model, TP and precision (a speculation change) reloads only its drafter
   weights and warms up, one replica at a time with a spare covering it (that time is paid
   for every replica kept); any other change starts the new fleet as added replicas. Paid
   at the configuration's $/replica-hour, energy at the devices' idle power (assumed:
   loading and graph capture draw about idle).
3. The plan minimises the day's $ (windows + switches, the day repeating: the last window
   switches into the first) by dynamic programming over configurations; ties go to the
   configuration ``plan.rank`` puts first, so a flat day is ``specsim plan``'s fleet. The
   static fleet: one configuration at its peak window's replica count all day, the
   cheapest such.
4. Replay: each window is simulated on its fleet at its rate for at least the planner's
   probe length (a time-compressed window: the rate, fleet and mix are the window's, its
   length is not), preceded by a quarter of that at the load carried across the boundary
   (the previous rate on the replicas that stay: prev_rate x min(1, n / n_prev); none on a
   fresh fleet); only requests arriving in the window are checked against the SLOs, as the
   planner checks a probe. A window that misses one counts its whole length as
   SLO-minutes. Energy per window: the replay's average fleet power x the window's length
   (the carried-in fifth of the run leans it toward the previous window's load).
5. The plan in the loop: a window whose replay misses an SLO gets one more replica and is
   replayed again (at most ``MAX_FIXES`` times); the static fleet likewise grows by one in
   every window. Near a replica's capacity a percentile is noisy (a queue close to
   saturation: chat.yaml at 40.7 req/s per H100, 95% of R, TTFT p99 0.28 to 2.2 s over
   seeds 1-3 and 7), so the bisection's R, one seed's answer, can be optimistic; the replay, with
   other arrivals, catches it. Both SLO-minutes are reported: as planned and as replayed
   after the added replicas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specsim.errors import ScenarioError
from specsim.simulator.metrics.run_metrics import RunMetrics
from specsim.simulator.planning.day_defaults import SCALE_UP_DELAY_S, WARMUP_S
from specsim.simulator.planning.plan import (
    RATE_KEY,
    REQUESTS_KEY,
    SLO_KEYS,
    Planner,
    PlanRow,
    _check,
    rank,
)
from specsim.traces.diurnal import ALL, DayCurve

#: a window's replay: the carried-in stretch is this share of the measured one
CARRY_SHARE = 0.25
#: rounds of "add a replica where the replay missed an SLO, replay again" (rule 5)
MAX_FIXES = 3
#: class shares are rounded to this step before a capacity search (one search per mix)
MIX_STEP = 0.05


@dataclass(frozen=True)
class SwitchParams:
    """What a switch between windows costs (rule 2); every default assumed or catalogued."""

    scale_up_delay_s: float = SCALE_UP_DELAY_S
    warmup_s: float = WARMUP_S
    host_gb_s: float | None = None  # None: the accelerator's catalogued host link
    min_replicas: int = 1

    def sources(self) -> dict[str, str]:
        return {
            "scale_up_delay_s": f"{self.scale_up_delay_s:g} s (assumed: a warm node pool "
                                "starting a container; a cold VM takes minutes more)",
            "warmup_s": f"{self.warmup_s:g} s (assumed, of the order of a measured vLLM "
                        "CUDA-graph capture, 43 s on GB10, vLLM 0.25)",
            "host_link": (f"{self.host_gb_s:g} GB/s per device (given)" if self.host_gb_s
                          else "the accelerator's catalogued host link per direction "
                               "(cost_models/data/hardware.yaml: datasheet PCIe figure, "
                               "an upper bound on the copy rate)"),
            "switch_energy": "devices at idle power while loading and warming up (assumed)",
        }


@dataclass(frozen=True)
class Shape:
    """What a switch needs to know of a configuration: its replica's devices and price,
    the weights each device loads, and what an in-place switch must share."""

    devices: int
    usd_per_replica_hour: float
    idle_w_per_device: float
    weight_bytes: float  # per device, target + drafters
    drafter_bytes: float  # per device
    host_bytes_s: float  # per device
    identity: tuple[Any, ...]  # hardware, model, TP, precision

    def load_s(self, nbytes: float) -> float:
        return nbytes / self.host_bytes_s if self.host_bytes_s > 0 else 0.0


@dataclass
class WindowReplay:
    """One window replayed on its fleet (rule 4)."""

    ok: bool
    why: str
    requests: int  # arrived in the window's measured stretch
    stats: dict[str, float]  # SLO name -> measured
    average_power_w: float
    per_replica_rate: float


@dataclass
class Window:
    index: int
    start_s: float
    end_s: float
    rate: float
    mix: dict[str, float] | None
    config: int  # index into DayPlan.configs
    replicas: int
    switch_s: float = 0.0  # replica-seconds paid for the switch into this window
    switch: str = ""
    replay: WindowReplay | None = None  # the last replay (after any replicas it added)
    first: WindowReplay | None = None  # the first replay, of the fleet as planned
    added: int = 0  # replicas the replay added (rule 5)

    @property
    def hours(self) -> float:
        return (self.end_s - self.start_s) / 3600.0


@dataclass
class DayPlan:
    configs: list[dict[str, Any]]
    shapes: list[Shape]
    capacity: dict[tuple[int, Any], PlanRow]  # (config, mix key) -> the planner's row
    windows: list[Window]
    static: list[Window]
    period_s: float
    notes: list[str] = field(default_factory=list)


def mix_key(mix: dict[str, float] | None) -> Any:
    return None if mix is None else tuple(sorted(mix.items()))


def window_mixes(rates: dict[str, np.ndarray]) -> list[dict[str, float] | None]:
    """Each window's class shares, rounded to MIX_STEP (None: the scenario's classes)."""
    if list(rates) == [ALL]:
        return [None] * len(rates[ALL])
    names = sorted(rates)
    table = np.stack([rates[c] for c in names])
    out: list[dict[str, float] | None] = []
    for col in table.T:
        tot = col.sum()
        share = np.round(col / tot / MIX_STEP) * MIX_STEP if tot > 0 else np.ones(len(col))
        share = share / share.sum() if share.sum() > 0 else np.ones(len(col)) / len(col)
        out.append({n: float(round(s, 6)) for n, s in zip(names, share, strict=True) if s > 0})
    return out


def mix_overrides(mix: dict[str, float] | None) -> dict[str, Any]:
    return {} if mix is None else {"workload.class": None, "workload.class_mix": mix}


class DayPlanner:
    """Rules 1-4 over a day curve and a list of configurations."""

    def __init__(self, scenario: str | Path | dict[str, Any], slos: dict[str, float],
                 curve: DayCurve, window_s: float, requests: int = 300,
                 rel_tol: float = 0.1, seed: int | None = None, duration_s: float = 30.0,
                 params: SwitchParams | None = None) -> None:
        self.base, self.slos, self.curve = scenario, slos, curve
        self.requests, self.rel_tol, self.seed = requests, rel_tol, seed
        self.duration_s = duration_s
        self.params = params or SwitchParams()
        edges, rates = curve.windows(window_s)
        self.edges = edges
        self.rates = sum(rates.values())
        self.mixes = window_mixes(rates)
        self.arrival, self.cv = self._steady_arrival()
        if not (self.rates > 0).any():
            raise ScenarioError(f"{curve.source}: every window's rate is 0; nothing to plan")

    def _steady_arrival(self) -> tuple[dict[str, Any], float]:
        """Overrides that make a probe's arrivals steady (a base scenario whose own process
        is diurnal or on/off probes a Gamma process of its CV; Poisson or Gamma stay as
        they are, so a flat day probes as ``specsim plan`` does) and the CV the replay
        draws with."""
        from specsim.simulator.api import load_scenario

        sc, _, _ = load_scenario(self.base)
        arrival = dict(sc.workload["synthetic"]["arrival"])
        cv = float(arrival.get("cv", 1.0))
        if arrival.get("process") in ("poisson", "gamma"):
            return {}, cv
        steady = {"process": "gamma", "cv": cv} if cv != 1.0 else {"process": "poisson"}
        return {"workload.synthetic.arrival": steady}, cv

    # ---------------------------------------------------------------- rule 1
    def _planner(self, qps: float) -> Planner:
        return Planner(self.base, self.slos, qps, requests=self.requests, rel_tol=self.rel_tol,
                       seed=self.seed, duration_s=self.duration_s)

    def capacities(self, configs: list[dict[str, Any]], progress: Any = None
                   ) -> dict[tuple[int, Any], PlanRow]:
        """The planner's row per (configuration, mix), searched at that mix's peak rate."""
        peaks: dict[Any, tuple[dict[str, float] | None, float]] = {}
        for mix, r in zip(self.mixes, self.rates, strict=True):
            k = mix_key(mix)
            peaks[k] = (mix, max(peaks.get(k, (mix, 0.0))[1], float(r)))
        out, total, done = {}, len(configs) * len(peaks), 0
        for k, (mix, peak) in peaks.items():
            if peak <= 0:
                continue
            planner = self._planner(peak)
            for i, c in enumerate(configs):
                row = planner.plan_one({**c, **self.arrival, **mix_overrides(mix)})
                row.config = dict(c)
                out[(i, k)] = row
                done += 1
                if progress is not None:
                    progress(done, total)
        return out

    def _refuse_pd(self, configs: list[dict[str, Any]]) -> None:
        """A PD split is not planned per window yet: refused before any probe."""
        from specsim.simulator.api import load_scenario

        for c in configs:
            if load_scenario(self.base, c)[0].disaggregation is not None:
                raise ScenarioError("plan --day: PD splits (disaggregation) are not planned per "
                                    "window yet; plan them with specsim plan --qps")

    def shape(self, config: dict[str, Any], row: PlanRow) -> Shape:
        """Rule 2's inputs, read from the configuration's deployment and its planner row."""
        from specsim.simulator.api import load_scenario
        from specsim.simulator.cluster.deployment import Deployment

        sc, base, _ = load_scenario(self.base, config)
        d = Deployment(sc, base)
        host = (self.params.host_gb_s * 1e9 if self.params.host_gb_s
                else float(d.hw.host_link_bw or 0.0))
        replicas = row.replicas or 1
        return Shape(int(d.tp), float(row.usd_per_hour or 0.0) / replicas,
                     float(d.hw.power_idle_w), float(d.weight_bytes_device),
                     float(d.weight_bytes_device - d.target.weight_bytes_per_device), host,
                     (d.hw.name, d.model.name, d.tp, d.precision.weights.name))

    def switch_s(self, a: Shape, ca: int, na: int, b: Shape, cb: int, nb: int
                 ) -> tuple[float, str]:
        """Replica-seconds paid to go from (config ca, na replicas) to (cb, nb), and why."""
        p = self.params
        start = p.scale_up_delay_s + b.load_s(b.weight_bytes) + p.warmup_s
        if ca == cb:
            added = max(nb - na, 0)
            return added * start, (f"scale up by {added}" if added else "")
        if a.identity == b.identity:
            kept, added = min(na, nb), max(nb - na, 0)
            return (kept * (b.load_s(b.drafter_bytes) + p.warmup_s) + added * start,
                    "reconfigure in place" + (f", scale up by {added}" if added else ""))
        return nb * start, "new fleet"

    # ---------------------------------------------------------------- rules 2 and 3
    def plan(self, configs: list[dict[str, Any]], progress: Any = None) -> DayPlan:
        from specsim.simulator.execution.kernel import prefer_compiled

        prefer_compiled()  # many probes: the compile pays for itself
        self._refuse_pd(configs)
        cap = self.capacities(configs, progress)
        order = [i for i in self._rank_order(configs, cap)  # those that can be built
                 if any(r.feasible for k, r in cap.items() if k[0] == i)]
        shapes = {i: self.shape(configs[i], next(r for k, r in cap.items()
                                                 if k[0] == i and r.feasible))
                  for i in order}
        W = len(self.rates)
        need = {}  # (config, window) -> replicas, only where the config is feasible
        for i in order:
            for w in range(W):
                row = cap.get((i, mix_key(self.mixes[w])))
                if self.rates[w] <= 0:
                    need[i, w] = self.params.min_replicas
                elif row is not None and row.feasible and row.replica_rate:
                    need[i, w] = max(math.ceil(self.rates[w] / row.replica_rate - 1e-9),
                                     self.params.min_replicas)
        for w in range(W):
            if not any((i, w) in need for i in order):
                why = "; ".join(f"{_label(configs[i])}: {cap[(i, mix_key(self.mixes[w]))].why}"
                                for i in range(len(configs))
                                if (i, mix_key(self.mixes[w])) in cap)
                raise ScenarioError(f"plan --day: no configuration meets the SLOs in window "
                                    f"{w} ({self.rates[w]:.3g} req/s): {why}")
        hours = np.diff(self.edges) / 3600.0
        path = self._cheapest_path(order, need, shapes, hours)
        windows = self._windows(path, need, shapes)
        static = self._static(order, need, shapes)
        return DayPlan(configs, [shapes.get(i) for i in range(len(configs))], cap, windows,
                       static, float(self.edges[-1]))

    def _rank_order(self, configs: list[dict[str, Any]], cap: dict) -> list[int]:
        """Configurations as ``plan.rank`` orders them at the peak window's mix (rule 3's
        tie-break); those never feasible there after, as given."""
        peak_mix = mix_key(self.mixes[int(np.argmax(self.rates))])
        rows = [cap[(i, peak_mix)] for i in range(len(configs)) if (i, peak_mix) in cap]
        ranked = [id(r) for r in rank(rows)]
        by_id = {id(cap[(i, peak_mix)]): i for i in range(len(configs)) if (i, peak_mix) in cap}
        order = [by_id[r] for r in ranked]
        return order + [i for i in range(len(configs)) if i not in order]

    def _cheapest_path(self, order: list[int], need: dict, shapes: dict,
                       hours: np.ndarray) -> list[int]:
        """Rule 3: the least-$ sequence of configurations, the day wrapping around."""
        W = len(hours)

        def window_usd(i: int, w: int) -> float:
            return need[i, w] * shapes[i].usd_per_replica_hour * hours[w]

        def switch_usd(i: int, j: int, w: int) -> float:  # into window w
            s, _ = self.switch_s(shapes[i], i, need[i, (w - 1) % W], shapes[j], j, need[j, w])
            return s * shapes[j].usd_per_replica_hour / 3600.0

        best_cost, best_path = math.inf, None
        for first in order:
            if (first, 0) not in need:
                continue
            cost = {first: window_usd(first, 0)}
            back: list[dict[int, int]] = []
            for w in range(1, W):
                nxt, arg = {}, {}
                for j in order:
                    if (j, w) not in need:
                        continue
                    for i in [j] + [i for i in order if i != j]:  # staying wins a tie
                        if i not in cost:
                            continue
                        c = cost[i] + switch_usd(i, j, w) + window_usd(j, w)
                        if c < nxt.get(j, math.inf):
                            nxt[j], arg[j] = c, i
                cost = nxt
                back.append(arg)
            for last in order:  # the day repeats: the last window switches into the first
                if last not in cost:
                    continue
                wrap = cost[last] + (switch_usd(last, first, 0) if W > 1 else 0.0)
                if wrap < best_cost - 1e-9:
                    path = [last]
                    for arg in reversed(back):
                        path.append(arg[path[-1]])
                    best_cost, best_path = wrap, path[::-1]
        assert best_path is not None
        return best_path

    def _windows(self, path: list[int], need: dict, shapes: dict) -> list[Window]:
        out = [Window(w, float(self.edges[w]), float(self.edges[w + 1]), float(self.rates[w]),
                      self.mixes[w], i, need[i, w]) for w, i in enumerate(path)]
        self.price_switches(out, shapes)
        return out

    def price_switches(self, windows: list[Window], shapes: Any) -> None:
        """Each window's switch from the one before (window 0's from the last: the day
        repeats); none in a one-window day."""
        for w, win in enumerate(windows):
            prev = windows[w - 1]
            win.switch_s, win.switch = (0.0, "") if len(windows) == 1 else self.switch_s(
                shapes[prev.config], prev.config, prev.replicas, shapes[win.config],
                win.config, win.replicas)

    def _static(self, order: list[int], need: dict, shapes: dict) -> list[Window]:
        """The cheapest single configuration sized for its peak window, all day."""
        W = len(self.rates)
        best, best_usd = None, math.inf
        for i in order:
            if all((i, w) in need for w in range(W)):
                n = max(need[i, w] for w in range(W))
                usd = n * shapes[i].usd_per_replica_hour
                if usd < best_usd - 1e-12:
                    best, best_usd = (i, n), usd
        if best is None:  # no one configuration meets every window's mix
            return []
        i, n = best
        return [Window(w, float(self.edges[w]), float(self.edges[w + 1]), float(self.rates[w]),
                       self.mixes[w], i, n) for w in range(W)]

    # ---------------------------------------------------------------- rule 4
    def replay(self, plan: DayPlan, progress: Any = None) -> None:
        """Fill each window's ``replay``, the plan's and the static fleet's; where a replay
        misses an SLO, add a replica (the plan: in that window; the static fleet: in all)
        and replay again, at most ``MAX_FIXES`` times (rule 5)."""
        done = 0

        def step() -> None:
            nonlocal done
            done += 1
            if progress is not None:
                progress(done, None)

        for windows, adaptive in ((plan.windows, True), (plan.static, False)):
            todo = list(range(len(windows)))
            for _ in range(MAX_FIXES + 1):
                for w in todo:
                    win = windows[w]
                    win.replay = self._replay_one(plan, windows, w, adaptive)
                    if win.first is None:
                        win.first = win.replay
                    step()
                bad = [w for w in todo if not windows[w].replay.ok]
                if not bad:
                    break
                if adaptive:
                    todo = bad
                else:  # one size all day
                    todo = list(range(len(windows)))
                for w in todo:
                    windows[w].replicas += 1
                    windows[w].added += 1
            if adaptive:
                self.price_switches(windows, plan.shapes)

    def _replay_one(self, plan: DayPlan, windows: list[Window], w: int, adaptive: bool
                    ) -> WindowReplay:
        """Rule 4: window ``w`` on its fleet, the load carried across its boundary first."""
        win, prev = windows[w], windows[w - 1]
        if len(windows) == 1:
            carry = win.rate
        elif adaptive and plan.shapes[prev.config].identity != plan.shapes[win.config].identity:
            carry = 0.0  # a fresh fleet: the old one drains what it holds
        else:
            carry = prev.rate * min(1.0, win.replicas / prev.replicas)
        return self.replay_window(plan.configs[win.config], win.mix, win.replicas, win.rate,
                                  carry, plan.shapes[win.config].devices)

    def replay_window(self, config: dict[str, Any], mix: dict[str, float] | None,
                      replicas: int, rate: float, carry: float, devices: int) -> WindowReplay:
        from specsim.simulator.api import run_scenario
        from specsim.simulator.metrics.collector import dist

        if rate <= 0:
            return WindowReplay(True, "", 0, {}, math.nan, 0.0)
        n = max(self.requests, math.ceil(rate * self.duration_s))
        measured = n / rate
        carry_s = CARRY_SHARE * measured
        slices = round(1 / CARRY_SHARE)  # the curve: one carried slice, then the window's
        period = carry_s * (slices + 1)
        total = max(n + round(carry * carry_s), 1)
        over = {**config, **mix_overrides(mix), "hardware.count": replicas * devices,
                "workload.synthetic.arrival": {"process": "diurnal", "period_s": period,
                                               "curve": [carry] + [rate] * slices,
                                               "cv": self.cv},
                REQUESTS_KEY: total, "workload.synthetic.duration_s": period,
                "simulation.horizon_s": 1.5 * period + 30.0,
                "simulation.record_iterations": False, "simulation.progress": False}
        over.pop(RATE_KEY, None)
        res = run_scenario(self.base, overrides=over, seed=self.seed)
        req = res.requests
        inside = req[req["arrival_s"] >= carry_s]
        done = inside[inside["status"] == "completed"]
        m = {"requests_in_flight": int(len(inside) - len(done)),
             **{k: dist(done[k].to_numpy(dtype=np.float64)) for k in ("ttft_s", "tpot_s", "e2e_s")}}
        ok, why = _check(m, self.slos)
        stats = {name: m[key][stat] for name, (key, stat) in SLO_KEYS.items() if name in self.slos}
        power = RunMetrics.from_summary(res.metrics).fleet.average_power_w
        return WindowReplay(ok, why, int(len(inside)), stats,
                            float(power) if power is not None else math.nan, rate / replicas)


def _label(config: dict[str, Any]) -> str:
    from specsim.simulator.planning.plan import config_label

    return ", ".join(f"{k}={config_label(k, v)}" for k, v in config.items()) or "the scenario"


# -------------------------------------------------------------------- tables and totals
def windows_frame(plan: DayPlan):
    """One row per window: the plan's choice, its cost and replay, and the static fleet's."""
    import pandas as pd

    keys = list(dict.fromkeys(k for c in plan.configs for k in c))
    recs = []
    static = {w.index: w for w in plan.static}
    for w in plan.windows:
        sh = plan.shapes[w.config]
        rec: dict[str, Any] = {"window": w.index, "start_h": w.start_s / 3600,
                               "end_h": w.end_s / 3600, "rate_req_s": w.rate,
                               "class_mix": _mix_text(w.mix)}
        rec.update({k: plan.configs[w.config].get(k) for k in keys})
        rec.update({"replicas": w.replicas, "devices": w.replicas * sh.devices,
                    "usd": w.replicas * sh.usd_per_replica_hour * w.hours,
                    "switch": w.switch, "switch_replica_s": w.switch_s,
                    "switch_usd": w.switch_s * sh.usd_per_replica_hour / 3600})
        rec.update(_replay_cols("", w, sh))
        s = static.get(w.index)
        if s is not None:
            ss = plan.shapes[s.config]
            rec.update({"static_replicas": s.replicas, "static_devices": s.replicas * ss.devices,
                        "static_usd": s.replicas * ss.usd_per_replica_hour * s.hours})
            rec.update(_replay_cols("static_", s, ss))
        recs.append(rec)
    return pd.DataFrame(recs)


def _mix_text(mix: dict[str, float] | None) -> str:
    return "" if mix is None else " ".join(f"{k}:{v:.2f}" for k, v in mix.items())


def _replay_cols(prefix: str, w: Window, sh: Shape) -> dict[str, Any]:
    r = w.replay
    if r is None:
        return {}
    out = {f"{prefix}replay_{k}_s": v for k, v in r.stats.items()}
    switch_j = w.switch_s * sh.devices * sh.idle_w_per_device if not prefix else 0.0
    power = r.average_power_w if math.isfinite(r.average_power_w) else (  # no traffic: idle
        w.replicas * sh.devices * sh.idle_w_per_device)
    first = w.first or r
    out.update({f"{prefix}slo_ok": r.ok, f"{prefix}slo_minutes": 0.0 if r.ok else w.hours * 60,
                f"{prefix}why": r.why, f"{prefix}replicas_added": w.added,
                f"{prefix}slo_minutes_as_planned": 0.0 if first.ok else w.hours * 60,
                f"{prefix}why_as_planned": first.why,
                f"{prefix}per_replica_rate": r.per_replica_rate,
                f"{prefix}kwh": (power * w.hours * 3600 + switch_j) / 3.6e6})
    return out


def totals(plan: DayPlan) -> dict[str, Any]:
    """$ and kWh over the curve's period and per day (the curve repeating), SLO-minutes,
    switches: the plan against the static fleet."""
    df = windows_frame(plan)
    per_day = 86400.0 / plan.period_s
    out: dict[str, Any] = {"period_h": plan.period_s / 3600, "windows": len(df)}
    for name, pre in (("plan", ""), ("static", "static_")):
        if f"{pre}usd" not in df:
            continue
        usd = float(df[f"{pre}usd"].sum()) + (float(df["switch_usd"].sum()) if not pre else 0.0)
        block = {"usd": usd, "usd_per_day": usd * per_day,
                 "devices_peak": int(df[f"{pre}devices"].max()),
                 "device_hours": float((df[f"{pre}devices"] * (df["end_h"] - df["start_h"])).sum())}
        if f"{pre}kwh" in df:
            kwh = float(df[f"{pre}kwh"].sum())
            slo_min = float(df[f"{pre}slo_minutes"].sum())
            planned = float(df[f"{pre}slo_minutes_as_planned"].sum())
            block.update({"kwh": kwh, "kwh_per_day": kwh * per_day, "slo_minutes": slo_min,
                          "slo_minutes_per_day": slo_min * per_day,
                          "slo_minutes_as_planned_per_day": planned * per_day,
                          "replicas_added_by_replay": int(df[f"{pre}replicas_added"].max()
                                                          if pre else
                                                          df["replicas_added"].sum())})
        if not pre:
            block.update({"switches": int((df["switch"] != "").sum()),
                          "switch_usd": float(df["switch_usd"].sum())})
        out[name] = block
    return out
