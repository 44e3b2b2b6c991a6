"""A day of traffic as rates per window, per class: what ``specsim plan --day`` sizes for.

A day curve is one periodic ``diurnal`` arrival process per class (``traces/arrivals.py``:
piecewise-constant rates over slices of the period, so the planner's windows, the replay's
arrivals and a scenario's own ``diurnal`` process are one construction). It comes from:

- a curve file (YAML): ``rates:`` a list (req/s over equal slices of ``period_s``, default
  86,400 s) or ``hour: rate`` pairs (each rate holds until the next hour given; hour 0
  needed), or ``classes: {NAME: <the same>}`` for a curve per class;
- a trace file (any format ``load_trace`` reads): its arrivals counted per window and per
  ``workload_class`` (a trace whose requests are all ``default`` is one curve, and the
  scenario keeps its own classes);
- a scenario whose ``workload.synthetic.arrival`` is ``diurnal``.

A window's rate is the curve's mean over it (``Arrivals.window_rates``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from specsim.traces.arrivals import Arrivals, _equal_edges
from specsim.traces.errors import TraceError
from specsim.traces.spec import Section, is_real

#: the class key of a curve that leaves the scenario's classes as they are
ALL = ""
DAY_S = 86400.0
#: the most windows a day is cut into (each is simulated: minutes are plenty)
MAX_WINDOWS = 1440
YAML_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class DayCurve:
    """One periodic arrival process per class (``ALL``: one for the scenario's classes);
    ``window_s``: a trace's counting window, which the plan's windows then are."""

    period_s: float
    classes: dict[str, Arrivals]
    source: str
    window_s: float | None = None

    def windows(self, window_s: float) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Window edges over one period (the last window may be shorter) and each class's
        mean rate per window, req/s; a trace's curve keeps its own counting windows."""
        window_s = self.window_s or window_s
        if not (np.isfinite(window_s) and window_s > 0):
            raise TraceError(f"--window: expected a positive number of seconds, got {window_s}")
        n = max(int(np.ceil(self.period_s / window_s * (1 - 1e-9))), 1)
        if n > MAX_WINDOWS:
            raise TraceError(f"--window: {window_s:g} s windows cut the {self.period_s:g} s "
                             f"day into {n:,} windows (at most {MAX_WINDOWS:,}); use longer ones")
        edges = np.append(np.arange(n) * window_s, self.period_s)
        return edges, {c: a.window_rates(edges) for c, a in self.classes.items()}


def scaled_to(curve: DayCurve, mean_rate: float) -> DayCurve:
    """The curve with every class's rates scaled so the day's mean rate is ``mean_rate``
    (``--qps`` with ``--day``: a trace's shape at another volume)."""
    factor = mean_rate / sum(a.mean_rate() for a in curve.classes.values())
    return replace(curve, classes={c: a.scaled(factor) for c, a in curve.classes.items()},
                   source=f"{curve.source} scaled to a mean of {mean_rate:g} req/s")


def _rates(value: Any, key: str, period_s: float) -> Arrivals:
    """A list (equal slices) or ``hour: rate`` pairs -> a periodic diurnal process."""
    if isinstance(value, dict):
        pairs = {}
        for h, r in value.items():
            if isinstance(h, bool) or not isinstance(h, int) or not 0 <= h < period_s / 3600:
                raise TraceError(f"{key}: {h!r}: expected an hour from 0 to "
                                 f"{int(np.ceil(period_s / 3600)) - 1} as the key")
            if not is_real(r) or not np.isfinite(r) or r < 0:
                raise TraceError(f"{key}.{h}: expected a rate >= 0 (req/s), got {r!r}")
            pairs[h] = float(r)
        if 0 not in pairs:
            raise TraceError(f"{key}: expected hour 0 among the hours (each rate holds until "
                             "the next hour given)")
        hours = sorted(pairs)
        edges = [h * 3600.0 for h in hours] + [period_s]
        rates = [pairs[h] for h in hours]
        return Arrivals("diurnal", tuple(rates), tuple(edges))
    if (not isinstance(value, list) or not value
            or not all(is_real(r) and np.isfinite(r) and r >= 0 for r in value)):
        raise TraceError(f"{key}: expected a non-empty list of rates >= 0 (req/s per equal "
                         f"slice of the period) or hour: rate pairs, got {_short(value)}")
    return Arrivals("diurnal", tuple(float(r) for r in value),
                    _equal_edges(period_s, len(value)))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def parse_curve(data: Any, origin: str) -> DayCurve:
    """A curve file's mapping -> DayCurve; every error one line naming ``origin`` and key."""
    sec = Section(data, origin)
    period = sec.number("period_s", DAY_S, positive=True)
    if sec.has("rates") == sec.has("classes"):
        raise TraceError(f"{origin}: expected exactly one of rates (one curve) or classes "
                         "(a curve per class)")
    if sec.has("rates"):
        classes = {ALL: _rates(sec.raw("rates"), sec.key("rates"), period)}
    else:
        raw = sec.raw("classes")
        if not isinstance(raw, dict) or not raw:
            raise sec.error("classes", "a mapping of class names to curves", raw)
        classes = {}
        for name, curve in raw.items():
            if not isinstance(name, str) or not name.strip():
                raise TraceError(f"{sec.key('classes')}: {name!r}: expected a class name")
            classes[name] = _rates(curve, f"{sec.key('classes')}.{name}", period)
    sec.finish()
    if sum(a.mean_rate() for a in classes.values()) <= 0:
        raise TraceError(f"{origin}: every rate is 0; expected some traffic")
    return DayCurve(float(period), classes, origin)


def curve_from_trace(df: pd.DataFrame, window_s: float, origin: str) -> DayCurve:
    """A trace's arrivals counted per window (and per class where it has classes): equal
    windows ending at the last arrival (about ``window_s`` each, as ``trace fit --arrival
    curve`` cuts them, so a part-empty last window does not drag its rate down)."""
    t = df["arrival_s"].to_numpy(dtype=np.float64)
    span = float(t[-1]) if t.size else 0.0
    if t.size < 2 or span <= 0:
        raise TraceError(f"{origin}: a day curve needs at least two distinct arrival times")
    slices = max(int(round(span / window_s)), 1)
    if slices > MAX_WINDOWS:
        raise TraceError(f"--window: {window_s:g} s windows cut {origin}'s {span:g} s into "
                         f"{slices:,} windows (at most {MAX_WINDOWS:,}); use longer ones")
    width = span / slices
    slot = np.minimum((t / width).astype(np.int64), slices - 1)
    edges = _equal_edges(span, slices)
    cls = df["workload_class"].astype(str).to_numpy()
    names = sorted(set(cls))
    if names == ["default"]:
        names, cls = [ALL], np.full(cls.shape, ALL)
    classes = {c: Arrivals("diurnal", tuple(np.bincount(slot[cls == c], minlength=slices)
                                            / width), edges)
               for c in names}
    return DayCurve(span, classes, origin, width)


def read_day(path: str | Path, window_s: float) -> DayCurve:
    """``--day FILE``: a curve file (.yaml/.yml) or a trace file."""
    from specsim import yamlio

    path = Path(path)
    if path.suffix.lower() in YAML_SUFFIXES:
        if not path.is_file():
            raise TraceError(f"--day {path}: no such curve file")
        return parse_curve(yamlio.load_file(path, "a day curve"), str(path))
    from specsim.traces.loaders import load_trace

    return curve_from_trace(load_trace(path, origin=f"--day {path}"), window_s, str(path))


def curve_from_arrivals(arrivals: Arrivals, origin: str) -> DayCurve:
    """A scenario's own ``diurnal`` process as a day curve (the scenario's classes)."""
    if arrivals.process != "diurnal":
        raise TraceError(f"{origin}: --day without a file needs a diurnal arrival process "
                         f"(got {arrivals.process}); give --day CURVE.yaml or a trace")
    return DayCurve(float(arrivals.edges[-1]), {ALL: arrivals}, origin)
