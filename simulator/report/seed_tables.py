"""``specsim report --seed-tables BASELINE_DIR SPEC_DIR [SPEC_DIR ...]``: the two tables a
speculation decision rests on, from run folders of one scenario, the first without
speculation and each other with it (as ``specsim run --out`` writes them), or from one
``specsim run --baseline`` folder (the run and its twin without speculation):

- cost per configuration: devices, output throughput, $/M output tokens and the gains over
  the baseline;
- energy per configuration: J per output token, average fleet power and the power of each
  phase (draft, verify, prefill, host bookkeeping, idle), with the energy gain next to the
  throughput gain (they differ by the ratio of average powers).

Printed as Markdown; with ``--out DIR`` also written there as ``seed_tables.md``,
``seed_cost.csv`` and ``seed_energy.csv`` (one staged folder, moved into place whole).
The runs must be the same scenario but for ``speculation`` (and its name, description and
how it was simulated): a pair that differs elsewhere is refused in one line, as is a
folder that is not a run, a baseline that speculates or a configuration that does not.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specsim import safe_read
from specsim.errors import ScenarioError
from specsim.simulator.execution.ledger import PHASES
from specsim.simulator.metrics.run_metrics import RunMetrics
from specsim.simulator.report.report import _md_table, _num
from specsim.simulator.report.rerender import BASELINE, RUN, detect

#: what may differ between the runs of one seed table
FREE_KEYS = ("speculation", "name", "description", "simulation")
#: the phases a table shows, the fleet's idle time last
ALL_PHASES = (*PHASES, "idle")


@dataclass(frozen=True)
class Run:
    """One run folder: its metrics and its scenario as it ran."""

    folder: Path
    m: RunMetrics
    scenario: dict[str, Any]

    @property
    def label(self) -> str:
        s = self.m.speculation
        if (s.method or "none") == "none":
            return "no speculation"
        return f"{s.method} k={s.k} ({s.policy})" if s.policy else f"{s.method} k={s.k}"


def load(folder: str | Path) -> Run:
    """A run folder's metrics and scenario; a one-line error for anything else."""
    folder = Path(folder)
    if detect(folder) != RUN:  # a sweep or a --baseline folder is not one configuration
        raise ScenarioError(f"{folder}: a seed table takes plain run folders (`specsim run "
                            "--out`), not a sweep or a --baseline run")
    metrics = safe_read.load_json(folder / "metrics.json", "a run's metrics")
    if not isinstance(metrics, dict) or not isinstance(metrics.get("fleet"), dict):
        raise ScenarioError(f"{folder}/metrics.json: not a specsim run's metrics (no 'fleet')")
    sc_path = folder / "scenario.json"
    if not sc_path.is_file():
        raise ScenarioError(f"{folder}: no scenario.json (the scenario as it ran), so it "
                            "cannot be checked against the others")
    scenario = safe_read.load_json(sc_path, "a run's scenario")
    if not isinstance(scenario, dict):
        raise ScenarioError(f"{sc_path}: expected a JSON object")
    return Run(folder, RunMetrics.from_summary(metrics, f"{folder}/metrics.json"), scenario)


def from_baseline_run(folder: str | Path) -> list[Run]:
    """A ``specsim run --baseline`` folder as the two runs of a seed table: its speculative
    run, and the run without speculation from its ``baseline`` block (the same trace, seed
    and fleet, by construction)."""
    folder = Path(folder)
    metrics = safe_read.load_json(folder / "metrics.json", "a run's metrics")
    spec = RunMetrics.from_summary(metrics, f"{folder}/metrics.json")
    b, f = spec.baseline, spec.fleet
    if b is None or not b.energy_phases:
        raise ScenarioError(f"{folder}: its baseline block has no energy phases (written by "
                            "an older specsim); run it again with --baseline")
    r, e = b.run, b.run.energy_j_per_output_token.baseline
    base = RunMetrics.from_summary({
        "scenario": spec.scenario, "speculation": {"method": "none"},
        "throughput_output_tokens_per_s": r.throughput_output_tokens_per_s.baseline,
        "energy_j_per_output_token": e,
        "cost_usd_per_million_output_tokens": r.cost_usd_per_million_output_tokens.baseline,
        "fleet": {"devices": f.devices, "accelerator": f.accelerator,
                  "price_usd_per_device_hour": f.price_usd_per_device_hour,
                  "price_date": f.price_date, "average_power_w": r.average_power_w.baseline},
        "energy": {"phases": {p: {"average_power_w": q.baseline_w,
                                  "energy_fraction": (q.baseline_j_per_token / e
                                                      if q.baseline_j_per_token is not None
                                                      and e else None)}
                              for p, q in b.energy_phases.items()},
                   "power_model": spec.energy.power_model.model_dump()}},
        f"{folder}/metrics.json baseline")
    return [Run(folder, base, {}), Run(folder, spec, {})]


def _first_difference(a: Any, b: Any, path: str) -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in dict.fromkeys([*a, *b]):
            if path == "" and k in FREE_KEYS:
                continue
            d = _first_difference(a.get(k), b.get(k), f"{path}.{k}" if path else str(k))
            if d is not None:
                return d
        return None
    return None if a == b else (path or "scenario")


def check(runs: list[Run]) -> None:
    """The baseline speculates nowhere, every other run does, all are one scenario."""
    base, *specs = runs
    if (base.m.speculation.method or "none") != "none":
        raise ScenarioError(f"{base.folder}: the baseline (first folder) speculates "
                            f"(speculation.method {base.m.speculation.method}); give the run "
                            "without speculation first")
    for r in specs:
        if (r.m.speculation.method or "none") == "none":
            raise ScenarioError(f"{r.folder}: does not speculate (speculation.method none); "
                                "each folder after the baseline is a speculative configuration")
        diff = _first_difference(base.scenario, r.scenario, "")
        if diff is not None:
            raise ScenarioError(f"{r.folder}: its scenario differs from the baseline's at "
                                f"{diff!r}; a seed table compares one scenario with and "
                                f"without speculation (only {', '.join(FREE_KEYS)} may differ)")


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def rows(runs: list[Run]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The cost and the energy table, one row per configuration (the baseline first)."""
    base = runs[0].m
    cost, energy = [], []
    for r in runs:
        m, f = r.m, r.m.fleet
        tput = m.throughput_output_tokens_per_s
        cost.append({
            "configuration": r.label, "folder": str(r.folder), "devices": f.devices,
            "accelerator": f.accelerator,
            "throughput_output_tokens_per_s": tput,
            "throughput_gain": _ratio(tput, base.throughput_output_tokens_per_s),
            "usd_per_million_output_tokens": m.cost_usd_per_million_output_tokens,
            "cost_gain": _ratio(base.cost_usd_per_million_output_tokens,
                                m.cost_usd_per_million_output_tokens),
            "price_usd_per_device_hour": f.price_usd_per_device_hour,
            "price_date": f.price_date})
        row = {"configuration": r.label, "folder": str(r.folder),
               "j_per_output_token": m.energy_j_per_output_token,
               "energy_gain": _ratio(base.energy_j_per_output_token,
                                     m.energy_j_per_output_token),
               "throughput_gain": _ratio(tput, base.throughput_output_tokens_per_s),
               "average_power_w": f.average_power_w}
        for p in ALL_PHASES:
            ph = m.energy.phases.get(p)
            row[f"{p}_power_w"] = ph.average_power_w if ph else None
            row[f"{p}_energy_fraction"] = ph.energy_fraction if ph else None
        energy.append(row)
    return cost, energy


def _power_model(runs: list[Run]) -> str:
    curves: dict[str, Any] = {}
    for r in runs:
        curves.update(r.m.energy.power_model.accelerators)
    if not curves:
        return ("Power model: not recorded in these runs' metrics.json (written by a specsim "
                "without per-phase power); run them again.")
    rule = runs[0].m.energy.power_model.rule or "?"
    parts = [f"{name}: host {_num(c.get('host'))}, compute {_num(c.get('compute'))}, memory "
             f"{_num(c.get('memory'))}, idle/max {_num(c.get('power_idle_w'))}/"
             f"{_num(c.get('power_max_w'))} W; {c.get('source', 'source not recorded')}"
             for name, c in curves.items()]
    return (f"Power model: {rule} (cost_models/data/power.yaml). " + " | ".join(parts)
            + ". Idle devices draw idle power (assumed, the catalog's power_w.idle).")


def markdown(runs: list[Run]) -> str:
    """Both tables as Markdown, with the assumptions under them."""
    cost, energy = rows(runs)
    price = cost[0]
    t1 = _md_table(["configuration", "devices", "output tok/s", "throughput gain",
                    "$/M output tokens", "cost gain"],
                   [[c["configuration"], str(c["devices"]),
                     _num(c["throughput_output_tokens_per_s"]),
                     f"{_num(c['throughput_gain'])}x", _num(c["usd_per_million_output_tokens"]),
                     f"{_num(c['cost_gain'])}x"] for c in cost], "lrrrrr")
    t2 = _md_table(["configuration", "J / output token", "energy gain", "throughput gain",
                    "average W", *(f"{p} W" for p in ALL_PHASES)],
                   [[e["configuration"], _num(e["j_per_output_token"]),
                     f"{_num(e['energy_gain'])}x", f"{_num(e['throughput_gain'])}x",
                     _num(e["average_power_w"]),
                     *(_num(e[f"{p}_power_w"]) for p in ALL_PHASES)] for e in energy],
                   "l" + "r" * (4 + len(ALL_PHASES)))
    name = runs[-1].m.scenario or runs[0].scenario.get("name", "scenario")
    return "\n".join([
        f"# Seed tables: {name}", "",
        "## Cost per configuration", "", t1, "",
        f"Price {_num(price['price_usd_per_device_hour'])} USD/device-hour "
        f"({price['price_date'] or 'undated'}); cost = devices x price x simulated hours / "
        "output tokens (idle time included). Gains are over the first row (above 1: "
        "speculation helped).", "",
        "## Energy per configuration", "", t2, "",
        "Average W is the fleet's (all devices, idle time included); a phase's W is per "
        "device while in it: draft = the drafter's passes and speculation's bookkeeping, "
        "verify = the target's pass over decoding rows (plain decode without speculation), "
        "prefill = its pass over prompt tokens, host = the engine's bookkeeping while the "
        "GPU waits, idle = nothing in flight. Energy gain = throughput gain x baseline "
        "average W / the configuration's.", "",
        _power_model(runs), ""])


def _csv(table: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(table[0]), lineterminator="\n")
    w.writeheader()
    w.writerows({k: ("" if v is None else v) for k, v in row.items()} for row in table)
    return buf.getvalue()


def seed_tables(folders: list[str], out: str | None = None, force: bool = False) -> str:
    """Read, check and tabulate the runs; write them into ``out`` when given. Returns the
    Markdown."""
    pair = len(folders) == 1 and detect(folders[0]) == BASELINE
    if len(folders) < 2 and not pair:
        raise ScenarioError("--seed-tables: expected a baseline run folder and at least one "
                            "speculative run folder, or one `specsim run --baseline` folder, "
                            f"got {len(folders)} folder(s)")
    if out is not None:  # a place we may not write is refused before any reading
        from specsim.outputs import check_folder

        check_folder(out, force)
    if pair:
        runs = from_baseline_run(folders[0])
    else:
        runs = [load(f) for f in folders]
        check(runs)
    text = markdown(runs)
    if out is not None:
        from specsim.outputs import write_folder

        cost, energy = rows(runs)

        def fill(tmp: Path) -> None:
            (tmp / "seed_tables.md").write_text(text)
            (tmp / "seed_cost.csv").write_text(_csv(cost))
            (tmp / "seed_energy.csv").write_text(_csv(energy))

        write_folder(out, fill, force, written_by="specsim report --seed-tables")
    return text
