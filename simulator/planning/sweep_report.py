"""A sweep's report.md and self-contained report.html, from the folder's own files.

Written by ``specsim sweep`` at the end (``--out``) and again by ``specsim report DIR`` on a
sweep folder; both read the folder back (``sweep.json``: what was swept; ``sweep.csv``: the
table), so the two give the same report. The report says what was swept and on what
(scenario, grid, seeds, specsim version), every number's assumptions (calibration profile,
price with its date, device power), the per-point summary (mean across seeds with the 95%
t-interval half-width) and the plots. The HTML goes through ``report.html``'s converter:
every user string (scenario name, swept values) is escaped, the plots are embedded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specsim import safe_read
from specsim.errors import ScenarioError
from specsim.outputs import md_text, unescape_frame

#: rows of the summary table in report.md (summary.csv holds them all)
MAX_ROWS = 500


def _cell(v: Any) -> str:
    """A user value as Markdown shows it: one line, no column bar, no raw HTML."""
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        v = int(v)
    text = str(v) if v is not None and v == v else "n/a"
    return md_text(" ".join(text.split()).replace("|", "\u00a6")) or "(empty)"


def load(folder: Path) -> tuple[dict[str, Any], Any]:
    """(sweep.json, the table read back from sweep.csv); one-line errors."""
    from specsim.simulator.planning.sweep_folder import DEFINITION, TABLE_CSV

    if not (folder / TABLE_CSV).is_file():
        raise ScenarioError(f"{folder}: an unfinished specsim sweep (no {TABLE_CSV} yet); "
                            f"finish it with `specsim sweep ... --resume --out {folder}`")
    try:  # any folder may be handed to `specsim report`: read under safe_read's caps
        spec = safe_read.load_json(folder / DEFINITION, "a sweep's definition")
        table = unescape_frame(safe_read.read_csv(folder / TABLE_CSV, "a sweep's table"))
    except safe_read.InputError:
        raise
    except (OSError, ValueError) as exc:
        raise ScenarioError(f"{folder}: not a readable specsim sweep ({exc})") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("grid"), dict):
        raise ScenarioError(f"{folder}/{DEFINITION}: expected the JSON object "
                            "`specsim sweep` writes")
    missing = [c for c in ("point", "seed", *spec["grid"]) if c not in table]
    if missing:
        raise ScenarioError(f"{folder}/{TABLE_CSV}: no column {missing[0]!r}; not the table "
                            "of this sweep")
    return spec, table


def _distinct(table, cols: list[str]) -> list[tuple[tuple[Any, ...], int]]:
    """Distinct value combinations of ``cols`` (those present) with their run counts."""
    have = [c for c in cols if c in table]
    if not have or not len(table):
        return []
    sub = table[have].astype(object).where(table[have].notna(), None)
    counts: dict[tuple[Any, ...], int] = {}
    for row in sub.itertuples(index=False, name=None):
        counts[row] = counts.get(row, 0) + 1
    return [(tuple(r[have.index(c)] if c in have else None for c in cols), n)
            for r, n in counts.items()]


def _assumptions(table) -> list[str]:
    from specsim.simulator.report.report import UNCALIBRATED, UNCALIBRATED_LINE, _num

    lines = []
    for (acc, devices, cal, calibrated), n in _distinct(
            table, ["fleet.accelerator", "fleet.devices", "calibration", "hardware_calibrated"]):
        what = f"{_cell(devices)} x {_cell(acc)}"
        if cal is None or cal == UNCALIBRATED:
            lines.append(f"- {what}: **{UNCALIBRATED_LINE}** ({n} run(s))")
        else:
            cal_txt = f"calibration profile **{_cell(cal)}**"
            if calibrated is not None and str(calibrated).lower() in ("false", "0"):
                cal_txt += " (not measured on this accelerator)"
            lines.append(f"- {what}: cost model {cal_txt} ({n} run(s))")
    for (acc, price, date, idle, peak), n in _distinct(
            table, ["fleet.accelerator", "fleet.price_usd_per_device_hour", "fleet.price_date",
                    "fleet.power_idle_w", "fleet.power_max_w"]):
        lines.append(f"- {_cell(acc)}: price {_num(price)} USD/device-hour "
                     f"({_cell(date) if date is not None else 'undated'}); device power idle / "
                     f"max {_num(idle)} / {_num(peak)} W, linear in utilisation ({n} run(s))")
    return lines


def _summary_table(summary, keys: list[str]) -> str:
    from specsim.simulator.report.report import _md_table, _num

    def cell(row, m: str, scale: float = 1.0) -> str:
        mean, half = row.get(f"{m}.mean"), row.get(f"{m}.ci95_half_width")
        if mean is None or mean != mean:
            return "n/a"
        return _num(mean, scale) + (f" ± {_num(half, scale)}" if half == half else "")

    rows = []
    for r in summary.head(MAX_ROWS).to_dict("records"):
        rows.append([str(int(r["point"])), *(_cell(r[k]) for k in keys), str(int(r["seeds"])),
                     cell(r, "tpot_s.p50", 1e3), cell(r, "tpot_s.p99", 1e3),
                     cell(r, "ttft_s.p99", 1e3), cell(r, "throughput_output_tokens_per_s"),
                     cell(r, "cost_usd_per_million_output_tokens")])
    header = ["point", *(f"`{_cell(k)}`" for k in keys), "seeds", "TPOT p50 (ms)",
              "TPOT p99 (ms)", "TTFT p99 (ms)", "throughput (output tok/s)",
              "cost (USD / 1M output tokens)"]
    text = _md_table(header, rows, "r" + "l" * len(keys) + "r" * 6)
    if len(summary) > MAX_ROWS:
        text += f"\n\n({len(summary) - MAX_ROWS} more point(s): see summary.csv.)"
    return text


def markdown(spec: dict[str, Any], table, summary, plots: list[tuple[str, str | None]]) -> str:
    """report.md's text; ``plots``: (file name, None if drawn else why not)."""
    from specsim.simulator.planning.sweep_plots import PLOTS

    keys = list(spec["grid"])
    names = sorted({str(x) for x in table["scenario"].dropna()}) if "scenario" in table else []
    title = _cell(", ".join(names) or Path(str(spec.get("scenario", "scenario"))).stem)
    grid_lines = [f"- `{_cell(k)}`: " + ", ".join(
        _cell(json.dumps(v, sort_keys=True) if isinstance(v, dict | list) else v)
        for v in vals) for k, vals in spec["grid"].items()]
    models = sorted({str(x) for x in table["model"].dropna()}) if "model" in table else []
    npoints = len(spec.get("points", [])) or int(table["point"].nunique())
    seeds = spec.get("seeds_per_point", "?")
    offsets = f"0..{seeds - 1}" if isinstance(seeds, int) and seeds > 1 else "0"
    parts = [
        f"# specsim sweep report: {title}", "",
        "## What was swept", "",
        f"Scenario `{_cell(spec.get('scenario', '?'))}` (sha256 "
        f"{str(spec.get('scenario_sha256', '?'))[:12]}), model {', '.join(models) or 'n/a'}; "
        f"the grid is {'zipped (the i-th values paired)' if spec.get('mode') == 'zip' else 'crossed (every combination)'}:",
        "", *(grid_lines or ["- (no swept key: the scenario as it is)"]), "",
        f"{npoints} point(s) x {seeds} seed(s) per point (the point's scenario seed + "
        f"{offsets}) = {len(table)} run(s) in the table. Each run is summary-only (no "
        f"per-request tables kept). Written by specsim {_cell(spec.get('specsim_version', '?'))}.",
        "",
        "## Assumptions", "",
        *(_assumptions(table) or ["- n/a (no run in the table)"]), "",
        "Cost = devices x USD/device-hour x simulated hours / output tokens (idle time "
        "included); energy integrates device power over simulated time.", "",
        "## Summary per point", "",
        "Mean across seeds ± the 95% t-interval half-width (none with one seed); every run's "
        "figures are in sweep.csv, the intervals in summary.csv.", "",
        _summary_table(summary, keys), "",
        "## Plots", "",
    ]
    why = dict(plots)
    for fname, caption_title, caption in PLOTS:
        parts += [f"### {caption_title}", ""]
        if fname in why and why[fname] is None:
            parts += [f"![{caption_title}]({fname})", "", caption + " Means across seeds.", ""]
        else:
            parts += [f"_Not plotted: {why.get(fname) or 'not drawn'}._", ""]
    return "\n".join(parts).rstrip() + "\n"


def render(folder: Path, plots: bool = True) -> tuple[list[str], list[str]]:
    """(Re)write the plots (when ``plots``), report.md and report.html of the sweep in
    ``folder`` from its sweep.json and sweep.csv; returns (files written, "plot: why
    skipped" lines). Each file is replaced atomically."""
    from specsim.simulator.planning.sweep_folder import (
        _OUR_PNGS,
        MARKER,
        _atomic_write,
        foreign_report_file,
        note_files,
        prune_files,
        summarize,
    )
    from specsim.simulator.planning.sweep_plots import PLOTS, write_plots
    from specsim.simulator.report.html import markdown_to_html

    folder = Path(folder)
    spec, table = load(folder)
    ours = {"report.md", "report.html", *_OUR_PNGS}
    foreign = foreign_report_file(folder, ours)
    if foreign is not None:
        raise ScenarioError(f"{folder}: {foreign} was not written by specsim (its {MARKER} "
                            "does not list it); not replacing it")
    note_files(folder, sorted(ours))  # listed before written: a kill never orphans ours
    keys = list(spec["grid"])
    summary = summarize(table, keys)
    written: list[str] = []
    skipped: list[str] = []
    status: list[tuple[str, str | None]] = []
    if plots and len(table):
        written, skipped = write_plots(table, keys, folder, _atomic_write)
        for name in _OUR_PNGS - set(written):  # a plot the grid no longer supports goes
            (folder / name).unlink(missing_ok=True)
        reasons = dict(s.split(": ", 1) for s in skipped)
        status = [(n, None if n in written else reasons.get(n, "not drawn"))
                  for n, *_ in PLOTS]
    else:
        why = ("the sweep ran with --no-plots; `specsim report` on this folder draws them"
               if plots is False else "the table is empty")
        status = [(n, why) for n, *_ in PLOTS]
    text = markdown(spec, table, summary, status)
    name = ", ".join(sorted({str(x) for x in table["scenario"].dropna()})) if (
        "scenario" in table) else "sweep"
    _atomic_write(folder / "report.md", lambda p: p.write_text(text))
    page = markdown_to_html(text, folder, f"specsim sweep: {name}")
    _atomic_write(folder / "report.html", lambda p: p.write_text(page))
    prune_files(folder)
    return [*written, "report.md", "report.html"], skipped
