"""Capacity planning: the cheapest fleet that meets the SLOs at a load.

For each configuration of the search space (hardware kind, TP, drafter, k or policy,
quantization, ...: any scenario keys), find the largest load one replica (one worker:
``tensor_parallel`` devices) sustains within the SLOs, by bisection on its arrival rate,
then size the fleet: replicas = ceil(target QPS / that rate), and price it at the load each
replica then sees. A point is overloaded, and fails at once, when requests are still
unfinished well after the last arrival (the queue only grows): the run stops at a horizon
instead of simulating it token by token.

Rules:
1. Only the rate changes inside a bisection; everything else is the configuration's.
2. A configuration that cannot be built (weights do not fit, an unknown name) or that fails
   the SLOs even at the lowest rate tried is rejected with the reason (which SLO, at what
   load).
3. Ranking: feasible configurations by $/hour of the sized fleet, then $/million tokens.
4. PD split: a configuration with ``disaggregation`` (prefill and decode pools) plans in
   replicas of one PD unit, its devices the pools' sum and its $/hour the pools' prices;
   the space lists splits as values of ``disaggregation`` (null: mixed workers).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specsim.errors import ScenarioError
from specsim.messages import show as show_value
from specsim.messages import show_path
from specsim.simulator.metrics.run_metrics import RunMetrics

#: --slo names -> (metrics key, statistic)
SLO_KEYS = {"ttft_p50": ("ttft_s", "p50"), "ttft_p90": ("ttft_s", "p90"),
            "ttft_p99": ("ttft_s", "p99"), "ttft_mean": ("ttft_s", "mean"),
            "tpot_p50": ("tpot_s", "p50"), "tpot_p90": ("tpot_s", "p90"),
            "tpot_p99": ("tpot_s", "p99"), "tpot_mean": ("tpot_s", "mean"),
            "e2e_p50": ("e2e_s", "p50"), "e2e_p99": ("e2e_s", "p99")}
RATE_KEY = "workload.synthetic.arrival.rate"
REQUESTS_KEY = "workload.synthetic.requests"


@dataclass
class Probe:
    """One simulated load of one replica."""

    rate: float
    ok: bool
    why: str  # the first SLO missed, or "overloaded", or "" when ok
    metrics: RunMetrics = field(default_factory=RunMetrics)


@dataclass
class PlanRow:
    config: dict[str, Any]
    feasible: bool
    why: str = ""
    replica_rate: float | None = None  # largest rate one replica sustains within the SLOs
    fail_rate: float | None = None  # the lowest rate found to fail (None: never failed)
    replicas: int | None = None
    devices: int | None = None
    usd_per_hour: float | None = None
    usd_per_million_tokens: float | None = None
    j_per_token: float | None = None
    margins: dict[str, float] = field(default_factory=dict)  # SLO / measured at the operating load
    probes: int = 0


def parse_slos(items: list[str]) -> dict[str, float]:
    """``ttft_p99=0.5`` -> {"ttft_p99": 0.5}; one-line errors for anything else."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in SLO_KEYS:
            raise ScenarioError(f"--slo {item}: expected NAME=SECONDS with NAME one of "
                                f"{', '.join(SLO_KEYS)}")
        try:
            v = float(value)
        except ValueError:
            raise ScenarioError(f"--slo {item}: expected a number of seconds, got "
                                f"{value!r}") from None
        if not v > 0 or not math.isfinite(v):
            raise ScenarioError(f"--slo {item}: expected a positive number of seconds")
        out[name] = v
    if not out:
        raise ScenarioError("--slo: give at least one, e.g. --slo tpot_p99=0.05")
    return out


def read_space(path: str | None) -> dict[str, list[Any]]:
    """``--space FILE`` -> its mapping ({} without one); a file that cannot be read or
    parsed is one line naming it."""
    if not path:
        return {}
    import yaml

    from specsim import safe_read
    from specsim.yamlio import load

    try:  # under the size cap, the alias budget, no duplicate keys
        safe_read.check_size(Path(path), "a YAML space")
        space = load(Path(path).read_text(), f"--space {show_path(path)}")
    except OSError as exc:
        raise ScenarioError(f"--space {show_path(path)}: cannot be read "
                            f"({exc.strerror or exc})") from None
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" (line {where.line + 1})" if where is not None else ""
        raise ScenarioError(f"--space {show_path(path)}: not valid YAML{at}; expected a mapping of "
                            "scenario keys to lists of values") from None
    if space is None:
        return {}
    space_size(space, show_path(path))
    return space


def space_size(space: Any, where: str = "") -> int:
    """Configurations of the space (the product of its lists' lengths), counted without
    listing them; its shape (a mapping of keys to non-empty lists) checked."""
    name = f"--space {where}".rstrip()
    if not isinstance(space, dict):
        raise ScenarioError(f"{name}: expected a mapping of scenario keys to lists of values, "
                            f"got {show_value(space)}")
    for k, v in space.items():
        if not isinstance(k, str) or not k or not all(k.split(".")):
            raise ScenarioError(f"{name}: {show_value(k)}: expected a dotted scenario key "
                                "like speculation.k")
        if not isinstance(v, list) or not v:
            raise ScenarioError(f"--space {k}: expected a non-empty list of values, got "
                                f"{show_value(v)}")
    return math.prod(len(v) for v in space.values())


def space_points(space: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """The cross product of the space's keys (a key with one value is fixed)."""
    space_size(space)
    keys = list(space)
    return [dict(zip(keys, combo, strict=True))
            for combo in itertools.product(*(space[k] for k in keys))]


def _check(metrics: Any, slos: dict[str, float]) -> tuple[bool, str]:
    m = RunMetrics.from_summary(metrics)  # read by attribute
    if m.requests_in_flight > 0:
        return False, "overloaded (requests still queued well after the last arrival)"
    for name, limit in slos.items():
        key, stat = SLO_KEYS[name]
        got = getattr(getattr(m, key), stat)
        if got is None or not math.isfinite(got) or got > limit:
            return False, f"{name} {got:.4g} s > {limit:g} s"
    return True, ""


class Planner:
    """Bisection on one replica's rate per configuration, then fleet sizing."""

    def __init__(self, scenario: dict[str, Any], slos: dict[str, float], qps: float,
                 requests: int = 300, rel_tol: float = 0.1, seed: int | None = None,
                 duration_s: float = 30.0, first_rate: float | None = None) -> None:
        self.base, self.slos, self.qps = scenario, slos, qps
        self.first_rate = first_rate or qps / 64.0  # the bisection's first probe
        self.requests, self.rel_tol, self.seed = requests, rel_tol, seed
        self.duration_s = duration_s  # of arrivals per probe, at least: a steady state, not
        # a burst that drains before a queue can build

    def check_space(self, space: dict[str, list[Any]]) -> None:
        """Every value of the space alone through the schema, as a probe sets it (no
        catalogs, no trace): an unknown key or a value of the wrong type is refused before
        planning, as a sweep refuses it; a value that cannot be built (an unknown
        accelerator, weights that do not fit) stays a rejected configuration (rule 2)."""
        from specsim.simulator.cluster.engine import USER_ERRORS, load_scenario

        for key, values in space.items():
            for v in values:
                try:
                    load_scenario(self.base, {key: v, "hardware.count":
                                              self.replica_devices({key: v})})
                except USER_ERRORS as exc:
                    raise ScenarioError(f"--space {key}={show_value(v, 60)}: "
                                        f"{self._without_base(exc)}") from None

    def _without_base(self, exc: Exception) -> str:
        """A user error's message without the base scenario's name in front (the row or
        the --space value names what failed)."""
        msg, base = str(exc), str(self.base)
        return msg[len(base) + 2:] if msg.startswith(base + ": ") else msg

    def replica_devices(self, config: dict[str, Any]) -> int:
        """Devices of one replica, as the fleet is built (``build.unit_devices``): a
        worker's TP group, or (rule 4) a PD unit's pools."""
        from specsim.simulator.api import load_scenario
        from specsim.simulator.cluster.build import unit_devices

        sc, _, _ = load_scenario(self.base, config)
        return unit_devices(sc)

    def probe(self, config: dict[str, Any], rate: float) -> Probe:
        from specsim.simulator.cluster.engine import run_scenario

        n = max(self.requests, math.ceil(rate * self.duration_s))
        over = {**config, RATE_KEY: rate, REQUESTS_KEY: n,
                "hardware.count": self.replica_devices(config),
                "simulation.horizon_s": 1.5 * n / rate + 30.0,
                "simulation.record_iterations": False, "simulation.progress": False}
        from specsim.simulator.execution.kernel import prefer_compiled

        prefer_compiled()  # a plan probes many rates: the compile pays for itself
        m = RunMetrics.from_summary(run_scenario(self.base, overrides=over,
                                                 seed=self.seed).metrics)
        ok, why = _check(m, self.slos)
        return Probe(rate, ok, why, m)

    def plan_one(self, config: dict[str, Any]) -> PlanRow:
        row = PlanRow(dict(config), False)
        from specsim.simulator.cluster.engine import USER_ERRORS

        try:
            lo_probe = self.probe(config, self.first_rate)
        except USER_ERRORS as exc:  # rule 2: it cannot be built
            row.why = self._without_base(exc)
            return row
        row.probes = 1
        if not lo_probe.ok:
            row.why = f"{lo_probe.why} even at {lo_probe.rate:.3g} req/s per replica"
            return row
        best = lo_probe
        hi = lo_probe.rate * 2
        # grow until it fails (or one replica carries the whole load)
        while True:
            p = self.probe(config, min(hi, self.qps))
            row.probes += 1
            if not p.ok:
                break
            best = p
            if p.rate >= self.qps:
                break
            hi = p.rate * 2
        bad = None if best.rate >= self.qps else p.rate
        while bad is not None and bad / best.rate > 1 + self.rel_tol:
            mid = math.sqrt(best.rate * bad)
            p = self.probe(config, mid)
            row.probes += 1
            if p.ok:
                best = p
            else:
                bad = mid
        row.fail_rate = bad
        replicas = max(math.ceil(self.qps / best.rate - 1e-9), 1)
        at = self.probe(config, self.qps / replicas)  # the operating point
        row.probes += 1
        m = at.metrics
        row.feasible = at.ok
        row.why = "" if at.ok else f"at the sized load: {at.why}"
        row.replica_rate = best.rate
        row.replicas = replicas
        row.devices = replicas * int(m.fleet.devices)  # a worker's TP, or a PD unit
        price = m.fleet.price_usd_per_device_hour  # (device-weighted over PD pools)
        row.usd_per_hour = row.devices * price
        tok_s = m.throughput_output_tokens_per_s * replicas
        row.usd_per_million_tokens = row.usd_per_hour / 3600.0 / tok_s * 1e6 if tok_s else None
        row.j_per_token = m.energy_j_per_output_token
        for name, limit in self.slos.items():
            key, stat = SLO_KEYS[name]
            got = getattr(getattr(m, key), stat)
            row.margins[name] = limit / got if got else float("inf")
        return row

    def run(self, configs: list[dict[str, Any]], progress=None) -> list[PlanRow]:
        rows = []
        for i, c in enumerate(configs):
            rows.append(self.plan_one(c))
            if progress is not None:
                progress(i + 1, len(configs))
        return rank(rows)


def rank(rows: list[PlanRow]) -> list[PlanRow]:
    """Rule 3: feasible first, by $/hour then $/million tokens; rejected after, as given."""
    ok = sorted((r for r in rows if r.feasible),
                key=lambda r: (r.usd_per_hour, r.usd_per_million_tokens or math.inf))
    return ok + [r for r in rows if not r.feasible]


def config_label(key: str, value: Any) -> Any:
    """A space value as a table cell: a PD split reads ``PD 1:3`` (prefill:decode workers),
    no split ``mixed``; other values as given."""
    if key != "disaggregation":
        return value
    if not value:
        return "mixed"
    pools = [value.get(n) or {} for n in ("prefill", "decode")]
    label = "PD " + ":".join(str(p.get("count", "?")) for p in pools)
    tps = [p.get("tensor_parallel") for p in pools]
    return label + (f" (TP {tps[0] or '-'}:{tps[1] or '-'})" if any(tps) else "")


def rows_frame(rows: list[PlanRow]):
    """A tidy table: one row per configuration."""
    import pandas as pd

    recs = []
    for i, r in enumerate(rows):
        rec = {"rank": i + 1 if r.feasible else None,
               **{k: config_label(k, v) for k, v in r.config.items()}, "feasible": r.feasible,
               "replicas": r.replicas, "devices": r.devices,
               "replica_rate_req_s": r.replica_rate, "usd_per_hour": r.usd_per_hour,
               "usd_per_million_tokens": r.usd_per_million_tokens,
               "j_per_token": r.j_per_token, "probes": r.probes, "why_rejected": r.why}
        rec.update({f"margin_{k}": v for k, v in r.margins.items()})
        recs.append(rec)
    return pd.DataFrame(recs)
