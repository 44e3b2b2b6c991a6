"""Turn measured acceptance into a profile YAML that a scenario names by path.

``specsim acceptance import --from prometheus|csv|specdec FILE --out profile.yaml`` writes one
profile (the format of ``data/acceptance.yaml``); a scenario then uses it with
``speculation: {acceptance: {profile: profile.yaml}}`` (relative to the scenario's folder).

Sources:

(a) ``prometheus``: the text a vLLM server serves at ``/metrics``. vLLM registers the
    speculative-decoding counters in ``vllm/v1/spec_decode/metrics.py`` (``SpecDecodingProm``):
    ``vllm:spec_decode_num_drafts``, ``vllm:spec_decode_num_draft_tokens``,
    ``vllm:spec_decode_num_accepted_tokens`` and ``vllm:spec_decode_num_accepted_tokens_per_pos``
    (label ``position`` = "0" .. k-1); prometheus_client exposes counters with the suffix
    ``_total`` (``vllm:spec_decode_num_drafts_total`` ...), and both spellings are read.
    ``SpecDecodingStats.observe_draft`` adds 1 to positions 0 .. accepted-1 of a draft, so
    ``per_pos[i] / num_drafts`` = P(accepted >= i+1), vLLM's "per-position acceptance rate",
    and ``1 + accepted / drafts`` is its mean acceptance length (tau). Series with other labels
    (``model_name``, ``engine``) are summed; several models in one file are refused. The
    profile holds the conditional alphas ``per_pos[i] / per_pos[i-1]`` at ``at_k`` = k; without
    per-position counters it holds tau at k (k = draft tokens / drafts, or ``--k``).
(b) ``csv``: one row per draft position, a header naming the columns, ``#`` comments:
    ``position,accepted,drafted`` (counts: drafts that accepted positions 1..j, and drafts that
    proposed position j), or ``position,rate`` (P(accepted >= j), vLLM's per-position rate), or
    ``position,alpha`` (conditional: P(accept j | accepted 1..j-1)). Positions run 1..k (or
    0..k-1, vLLM's labels). Rates must not increase with position.
(c) ``specdec``: the repository's own torch speculative loop
    (``cost_models/calibrate/specdec.py``): a calibration profile YAML (its
    ``end_to_end.runs``, each with ``kind``, ``drafter``, ``k`` and ``accept_hist``) or a
    JSON/YAML list of ``RunResult.summary()`` dicts (with ``step_table``). One class per prompt
    kind (``code``, ``chat``): the accepted-length histogram at k, summed over that kind's
    prompts (steps that drafted the full k, as the calibration's replay counts them).

Every error is one line naming the file (and line where there is one); nothing is written
unless the whole input is read, and the output is written atomically and never over an
existing file without ``force``.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from specsim import safe_read, yamlio
from specsim.errors import ScenarioError

from .acceptance import MAX_K, parse_profile

SOURCES = ("prometheus", "csv", "specdec")
FORMS = ("positions", "tau")

_VLLM = "vllm:spec_decode_num_"
_PROM_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?\s*$")
_PROM_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')


@dataclass
class Measured:
    """One class's measured acceptance."""

    at_k: int
    rates: np.ndarray | None = None  # P(accepted >= j), j = 1..k
    alphas: np.ndarray | None = None  # conditional, when given directly
    histogram: list[int] | None = None  # counts of 0..k accepted
    tau: float | None = None
    notes: list[str] = field(default_factory=list)
    drafts: float | None = None  # prometheus: the drafts counter (rates = per_pos / drafts)
    model: str | None = None  # prometheus: the model_name label, where there is one

    def conditional(self) -> np.ndarray:
        if self.alphas is not None:
            return self.alphas
        assert self.rates is not None
        prev = np.concatenate([[1.0], self.rates[:-1]])
        return np.where(prev > 0, self.rates / np.maximum(prev, 1e-300), 0.0)

    def survival(self) -> np.ndarray:
        if self.rates is not None:
            return self.rates
        return np.cumprod(self.conditional())

    def expected_tau(self) -> float:
        if self.tau is not None:
            return self.tau
        if self.histogram is not None:
            h = np.asarray(self.histogram, float)
            return 1.0 + float((h * np.arange(len(h))).sum() / h.sum())
        return 1.0 + float(self.survival().sum())


def _read_text(path: Path) -> str:
    """The file's text through ``specsim.safe_read`` (size cap; gzip inflated under the
    ratio cap), or one line saying why not."""
    return safe_read.read_text(path, "an acceptance measurement", safe_read.DATA_BYTES,
                               inflate=True)


# ---------------------------------------------------------------- (a) Prometheus text


def _labels(text: str, where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _PROM_LABEL.match(text, pos)
        if not m:
            raise ScenarioError(f"{where}: cannot read the labels {{{text}}}")
        out[m.group(1)] = m.group(2)
        pos = m.end()
    return out


def parse_prometheus(text: str, origin: str, k: int | None = None) -> Measured:
    """vLLM's spec-decode counters (see the module docstring) -> per-position rates at k."""
    totals: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    pos_line: dict[int, int] = {}
    models: set[str] = set()
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _PROM_LINE.match(line)
        if not m:
            raise ScenarioError(f"{origin} line {n}: not a Prometheus sample line: {line[:80]!r}")
        name = m.group(1)
        if not name.startswith(_VLLM) or name.endswith("_created"):
            continue
        base = name[len(_VLLM):]
        base = base[:-len("_total")] if base.endswith("_total") else base
        if base not in ("drafts", "draft_tokens", "accepted_tokens", "accepted_tokens_per_pos"):
            continue
        where = f"{origin} line {n}"
        labels = _labels(m.group(3) or "", where)
        try:
            value = float(m.group(4))
        except ValueError:
            raise ScenarioError(f"{where}: {name}: expected a number, got {m.group(4)!r}"
                                ) from None
        if not math.isfinite(value) or value < 0:
            raise ScenarioError(f"{where}: {name}: expected a non-negative count, got "
                                f"{m.group(4)}")
        if "model_name" in labels:
            models.add(labels["model_name"])
        if base == "accepted_tokens_per_pos":
            p = labels.get("position")
            if p is None or not p.isdigit():
                raise ScenarioError(f"{where}: {name}: expected a label position=\"0\", \"1\", "
                                    f"..., got {p!r}")
            per_pos[int(p)] = per_pos.get(int(p), 0.0) + value
            pos_line.setdefault(int(p), n)
        else:
            totals[base] = totals.get(base, 0.0) + value
    if len(models) > 1:
        raise ScenarioError(f"{origin}: counters for several models ({', '.join(sorted(models))}):"
                            " keep one model's lines (e.g. grep 'model_name=\"NAME\"')")
    if "drafts" not in totals:
        raise ScenarioError(f"{origin}: no {_VLLM}drafts_total counter (is speculative decoding "
                            "on, and is this vLLM's /metrics text?)")
    drafts = totals["drafts"]
    if drafts <= 0:
        raise ScenarioError(f"{origin}: {_VLLM}drafts_total is 0: nothing was drafted")
    accepted = totals.get("accepted_tokens")
    notes = [f"{drafts:.0f} drafts"]
    if "draft_tokens" in totals:
        notes[0] += f", {totals['draft_tokens']:.0f} draft tokens"
    if accepted is not None:
        notes[0] += f", {accepted:.0f} accepted"
    if per_pos:
        ks = sorted(per_pos)
        if ks != list(range(len(ks))):
            raise ScenarioError(f"{origin}: per-position counters for positions {ks}: expected "
                                f"0..{len(ks) - 1} with none missing")
        if k is not None and k != len(ks):
            raise ScenarioError(f"--k {k}: the file has per-position counters for k={len(ks)}")
        counts = np.array([per_pos[i] for i in ks])
        for i in range(1, len(counts)):
            if counts[i] > counts[i - 1]:
                raise ScenarioError(f"{origin} line {pos_line[i]}: accepted at position {i} "
                                    f"({counts[i]:.0f}) exceeds position {i - 1} "
                                    f"({counts[i - 1]:.0f}): counters from different scrapes?")
        if counts[0] > drafts:
            raise ScenarioError(f"{origin} line {pos_line[0]}: accepted at position 0 "
                                f"({counts[0]:.0f}) exceeds the drafts ({drafts:.0f})")
        if len(counts) > MAX_K:
            raise ScenarioError(f"{origin}: {len(counts)} positions; at most {MAX_K} supported")
        if accepted is not None and abs(counts.sum() - accepted) > 0.005 * max(accepted, 1):
            notes.append(f"per-position counts sum to {counts.sum():.0f}, the accepted counter "
                         f"says {accepted:.0f}")
        dt = totals.get("draft_tokens")
        if dt is not None and dt < 0.995 * drafts * len(counts):
            notes.append(f"drafts averaged {dt / drafts:.2f} tokens < k={len(counts)}: positions "
                         "a short draft did not propose count as rejected")
        rates = counts / drafts
        return Measured(len(counts), rates=rates, tau=None, notes=notes, drafts=drafts,
                        model=next(iter(models), None))
    if accepted is None:
        raise ScenarioError(f"{origin}: no {_VLLM}accepted_tokens_total counter")
    if k is None:
        if "draft_tokens" not in totals:
            raise ScenarioError(f"{origin}: no per-position counters and no "
                                f"{_VLLM}draft_tokens_total: pass --k")
        ratio = totals["draft_tokens"] / drafts
        k = round(ratio)
        if abs(ratio - k) > 0.01 or k < 1:
            raise ScenarioError(f"{origin}: drafts averaged {ratio:.2f} tokens (not a whole k): "
                                "pass --k with the configured num_speculative_tokens")
    if not 1 <= k <= MAX_K:
        raise ScenarioError(f"--k: expected an integer in [1, {MAX_K}], got {k}")
    tau = 1.0 + accepted / drafts
    if tau > k + 1:
        raise ScenarioError(f"{origin}: accepted per draft ({accepted / drafts:.2f}) exceeds "
                            f"k={k}")
    return Measured(k, tau=tau, notes=notes, drafts=drafts, model=next(iter(models), None))


# ---------------------------------------------------------------- (b) per-position CSV


def parse_csv(text: str, origin: str) -> Measured:
    """``position,accepted,drafted`` | ``position,rate`` | ``position,alpha`` (docstring)."""
    rows: list[tuple[int, list[str]]] = []
    header: list[str] | None = None
    header_line = 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        cells = [c.strip() for c in line.split(",")]
        if header is None:
            header, header_line = [c.lower() for c in cells], n
            safe_read.check_columns(header, f"{origin} line {n}")
            continue
        rows.append((n, cells))
    if header is None:
        raise ScenarioError(f"{origin}: empty (expected a header: position,accepted,drafted or "
                            "position,rate or position,alpha)")
    cols = set(header)
    kind = ("counts" if {"position", "accepted", "drafted"} <= cols else
            "rate" if {"position", "rate"} <= cols else
            "alpha" if {"position", "alpha"} <= cols else None)
    if kind is None:
        raise ScenarioError(f"{origin} line {header_line}: header {','.join(header)}: expected "
                            "columns position,accepted,drafted or position,rate or "
                            "position,alpha")
    if not rows:
        raise ScenarioError(f"{origin}: no rows after the header")
    idx = {c: header.index(c) for c in header}

    def cell(n: int, cells: list[str], col: str, integer: bool = False) -> float:
        if len(cells) != len(header):
            raise ScenarioError(f"{origin} line {n}: expected {len(header)} columns, got "
                                f"{len(cells)}")
        s = cells[idx[col]]
        try:
            v = float(s)
        except ValueError:
            raise ScenarioError(f"{origin} line {n}: {col}: expected a number, got {s!r}"
                                ) from None
        if not math.isfinite(v) or v < 0 or (integer and v != int(v)):
            what = "a non-negative integer" if integer else "a non-negative number"
            raise ScenarioError(f"{origin} line {n}: {col}: expected {what}, got {s!r}")
        return v

    positions = [int(cell(n, c, "position", True)) for n, c in rows]
    first = positions[0]
    if first not in (0, 1) or positions != list(range(first, first + len(rows))):
        bad = next((i for i, p in enumerate(positions) if p != first + i), 0)
        raise ScenarioError(f"{origin} line {rows[bad][0]}: position: expected consecutive "
                            f"positions from 1 (or 0), got {positions[bad]}")
    if len(rows) > MAX_K:
        raise ScenarioError(f"{origin}: {len(rows)} positions; at most {MAX_K} supported")
    vals = []
    for n, c in rows:
        if kind == "counts":
            acc, dr = cell(n, c, "accepted"), cell(n, c, "drafted")
            if dr <= 0:
                raise ScenarioError(f"{origin} line {n}: drafted: expected a positive count, "
                                    f"got {c[idx['drafted']]!r}")
            if acc > dr:
                raise ScenarioError(f"{origin} line {n}: accepted ({acc:g}) exceeds drafted "
                                    f"({dr:g})")
            vals.append(acc / dr)
        else:
            v = cell(n, c, kind)
            if v > 1:
                raise ScenarioError(f"{origin} line {n}: {kind}: expected a value in [0, 1], "
                                    f"got {c[idx[kind]]!r}")
            vals.append(v)
    arr = np.array(vals)
    if kind == "alpha":
        return Measured(len(arr), alphas=arr, notes=["conditional alphas per position"])
    for i in range(1, len(arr)):
        if arr[i] > arr[i - 1] + 1e-12:
            raise ScenarioError(f"{origin} line {rows[i][0]}: rate at position {positions[i]} "
                                f"({arr[i]:.4g}) exceeds the previous one ({arr[i - 1]:.4g}): "
                                "P(accepted >= j) cannot grow with j (conditional alphas go in "
                                "an 'alpha' column)")
    note = ("per-position accepted / drafted counts" if kind == "counts" else
            "per-position rates P(accepted >= j)")
    return Measured(len(arr), rates=arr, notes=[note])


# ---------------------------------------------------------------- (c) the repo's torch loop


def _specdec_runs(path: Path) -> list[dict[str, Any]]:
    text = _read_text(path)
    try:  # no duplicate keys; YAML under the alias budget
        data = (safe_read.json_loads(text) if path.suffix == ".json"
                else yamlio.load(text, str(path)))
    except safe_read.DuplicateKeyError as exc:
        raise ScenarioError(f"{path}: key {exc.args[0]!r} appears twice in one object; give "
                            "each key once") from None
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        line = getattr(exc, "lineno", None)
        mark = getattr(exc, "problem_mark", None)
        line = line if line is not None else (mark.line + 1 if mark is not None else None)
        raise ScenarioError(f"{path}{f' line {line}' if line else ''}: cannot parse "
                            f"({getattr(exc, 'msg', None) or getattr(exc, 'problem', exc)})"
                            ) from None
    if isinstance(data, dict) and isinstance(data.get("end_to_end"), dict):
        runs = data["end_to_end"].get("runs")
    elif isinstance(data, dict) and "runs" in data:
        runs = data["runs"]
    else:
        runs = data
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        raise ScenarioError(f"{path}: expected a calibration profile (end_to_end.runs) or a list "
                            "of specdec RunResult.summary() records")
    return runs


def parse_specdec(path: Path, drafter: str | None, only_class: str | None
                  ) -> tuple[dict[str, Measured], str]:
    """Accepted-length histograms per prompt kind for one drafter; returns (classes, drafter)."""
    runs = _specdec_runs(path)
    drafters = sorted({str(r.get("drafter")) for r in runs if r.get("drafter") not in
                       (None, "none")})
    if not drafters:
        raise ScenarioError(f"{path}: no speculative runs (every run has drafter 'none')")
    if drafter is None:
        if len(drafters) > 1:
            raise ScenarioError(f"{path}: runs of several drafters ({', '.join(drafters)}): "
                                "pick one with --drafter")
        drafter = drafters[0]
    elif drafter not in drafters:
        raise ScenarioError(f"--drafter: {path} has no runs of {drafter!r} (has: "
                            f"{', '.join(drafters)})")
    by_kind: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for i, r in enumerate(runs):
        if str(r.get("drafter")) == drafter:
            by_kind.setdefault(str(r.get("kind") or "default"), []).append((i, r))
    if only_class is not None:
        if only_class not in by_kind:
            raise ScenarioError(f"--class: {path} has no {drafter} runs of kind {only_class!r} "
                                f"(has: {', '.join(sorted(by_kind))})")
        by_kind = {only_class: by_kind[only_class]}
    out: dict[str, Measured] = {}
    for kind, rs in by_kind.items():
        ks = {r.get("k") for _, r in rs}
        if len(ks) != 1 or not isinstance(next(iter(ks)), int) or not 1 <= next(iter(ks)) <= MAX_K:
            raise ScenarioError(f"{path}: {drafter} runs of kind {kind!r} have draft lengths "
                                f"{sorted(map(str, ks))}: expected one k in [1, {MAX_K}]")
        k = int(next(iter(ks)))
        hist = np.zeros(k + 1, np.int64)
        match, taus = [], []
        for i, r in rs:
            h, mr, tau = _run_histogram(path, i, r, k)
            hist += h
            match.append(mr)
            if tau is not None:
                taus.append(tau)
        if hist.sum() == 0:
            raise ScenarioError(f"{path}: {drafter} runs of kind {kind!r} have no step that "
                                f"drafted {k} tokens")
        notes = [f"{len(rs)} prompts, {int(hist.sum())} steps drafting k={k}"]
        if taus:
            notes.append(f"measured tau per prompt {', '.join(f'{t:.2f}' for t in taus)}")
        if match and min(match) < 1.0:
            notes.append(f"lookup match rate {float(np.mean(match)):.3f} (set "
                         "speculation.ngram.match_rate: this histogram counts steps that drafted)")
        out[kind] = Measured(k, histogram=[int(x) for x in hist], notes=notes)
    return out, drafter


def _run_histogram(path: Path, i: int, r: dict[str, Any], k: int
                   ) -> tuple[np.ndarray, float, float | None]:
    """One run's accepted-length histogram at k, its lookup match rate and measured tau."""
    where = f"{path}: run {i} ({r.get('kind')}/{r.get('prompt')})"
    tau = r.get("tau")
    tau = float(tau) if isinstance(tau, int | float) and not isinstance(tau, bool) else None
    if "step_table" in r:
        import pandas as pd

        from specsim.cost_models.calibrate.validate import acceptance_summary

        table = r["step_table"]
        if not isinstance(table, dict) or not {"q", "emitted"} <= set(table):
            raise ScenarioError(f"{where}: step_table: expected columns q and emitted")
        n = len(table["q"]) if isinstance(table["q"], list) else -1
        table = {c: table.get(c, [0] * max(n, 0)) for c in ("q", "emitted", "draft_passes",
                                                             "draft_s")}
        try:
            summ = acceptance_summary(pd.DataFrame(table), k)
        except (ValueError, TypeError, KeyError) as exc:
            raise ScenarioError(f"{where}: step_table: {exc}") from None
        return np.asarray(summ["accept_hist"], np.int64), float(summ["match_rate"]), tau
    hist = r.get("accept_hist")
    if not isinstance(hist, list) or not all(isinstance(x, int) and x >= 0 for x in hist):
        raise ScenarioError(f"{where}: accept_hist: expected a list of non-negative counts")
    if len(hist) != k + 1:
        raise ScenarioError(f"{where}: accept_hist: expected k + 1 = {k + 1} counts, got "
                            f"{len(hist)}")
    mr = r.get("match_rate", 1.0)
    mr = float(mr) if isinstance(mr, int | float) else 1.0
    return np.asarray(hist, np.int64), mr, tau


# ---------------------------------------------------------------- the profile


def _r(x: float) -> float:
    return float(f"{float(x):.6g}")


def class_entry(m: Measured, form: str) -> dict[str, Any]:
    """A class's YAML entry: per-position alphas (or the histogram), or tau at k."""
    tau = m.expected_tau()
    over = " over the histogram's steps" if m.histogram is not None else ""
    notes = "; ".join([*m.notes, f"tau {tau:.4f} at k={m.at_k}{over}"])
    if form == "tau" or (m.rates is None and m.alphas is None and m.histogram is None):
        return {"tau": _r(tau), "at_k": m.at_k, "notes": notes}
    if m.histogram is not None:
        return {"histogram": m.histogram, "at_k": m.at_k, "notes": notes}
    rates = m.survival()
    notes += "; per-position rates " + ", ".join(f"{x:.4f}" for x in rates)
    return {"alpha_by_position": [_r(a) for a in m.conditional()], "at_k": m.at_k,
            "notes": notes}


def build_profile(classes: dict[str, Measured], *, source: str, method: str | None,
                  form: str = "positions", notes: str = "") -> dict[str, Any]:
    entry: dict[str, Any] = {}
    if method:
        entry["method"] = method
    entry["source"] = source
    if notes:
        entry["notes"] = notes
    entry["classes"] = {c: class_entry(m, form) for c, m in classes.items()}
    return entry


def write_profile(name: str, entry: dict[str, Any], out: Path, force: bool,
                  header: str) -> None:
    """By ``specsim.outputs``' rules: atomic, never over a file without force, never
    through a link; a failure is one line and leaves nothing."""
    from specsim.outputs import write_file

    text = header + yaml.safe_dump({name: entry}, sort_keys=False, width=100,
                                   default_flow_style=None)
    write_file(out, text, force, "--out")


def import_profile(source: str, file: str | Path, out: str | Path, *, name: str | None = None,
                   method: str | None = None, cls: str | None = None,
                   drafter: str | None = None, k: int | None = None,
                   form: str = "positions", force: bool = False) -> dict[str, Any]:
    """Read ``file`` (``source`` = prometheus | csv | specdec), write the profile to ``out``.

    Returns {name, entry, path}. Raises ScenarioError (one line) on any bad input.
    """
    if source not in SOURCES:
        raise ScenarioError(f"--from: expected one of {', '.join(SOURCES)}, got {source!r}")
    if form not in FORMS:
        raise ScenarioError(f"--form: expected one of {', '.join(FORMS)}, got {form!r}")
    path, out = Path(file), Path(out)
    from specsim.outputs import check_file

    check_file(out, force, "--out")  # refuse before reading anything
    name = name or out.stem
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise ScenarioError(f"--name: expected letters, digits, '.', '_' or '-', got {name!r}")
    today = _dt.date.today().isoformat()
    if source == "prometheus":
        m = parse_prometheus(_read_text(path), str(path), k)
        classes = {cls or "default": m}
        src = f"vLLM Prometheus spec-decode counters, {path.name} (imported {today})"
    elif source == "csv":
        if k is not None:
            raise ScenarioError("--k: only for --from prometheus without per-position counters")
        m = parse_csv(_read_text(path), str(path))
        classes = {cls or "default": m}
        src = f"per-position CSV {path.name} (imported {today})"
    else:
        if k is not None:
            raise ScenarioError("--k: only for --from prometheus without per-position counters")
        classes, drafter = parse_specdec(path, drafter, cls)
        method = method or ("ngram" if drafter == "prompt-lookup" else "draft_model")
        src = (f"specsim's torch speculative loop (cost_models/calibrate/specdec.py), drafter "
               f"{drafter}, {path.name} (imported {today})")
    entry = build_profile(classes, source=src, method=method, form=form)
    parse_profile(name, entry, f"imported profile {name}")  # what a scenario will load
    header = (f"# acceptance profile written by `specsim acceptance import --from {source} "
              f"{path.name}` on {today}\n# use: speculation: {{acceptance: {{profile: "
              f"{out.name}}}}}\n")
    write_profile(name, entry, out, force, header)
    return {"name": name, "entry": entry, "path": str(out)}
