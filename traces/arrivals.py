"""Arrival processes: Poisson, Gamma (bursty, a given CV), diurnal curve, on/off bursts.

All are one construction: a unit-rate renewal process with Gamma gaps of the wanted CV
(CV 1 = Poisson) in "operational time", mapped to real time through the inverse of the
cumulative rate. A constant rate gives a Gamma renewal process; a piecewise-constant
rate (a diurnal curve, on/off periods) modulates it. Everything is vectorised.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from traces.errors import TraceError
from traces.spec import Section, is_real

PROCESSES = ("poisson", "gamma", "diurnal", "onoff")
#: Slices per period used to integrate a sinusoidal diurnal rate exactly per slice.
_SINE_SLICES = 1440


@dataclass(frozen=True)
class Arrivals:
    """A parsed arrival process.

    Periodic processes hold ``rates`` over the slices ``edges`` of one period (a constant
    rate is one slice). Random on/off periods hold ``rates = (on, off)`` and the mean
    period lengths ``on_s``/``off_s``. ``cv`` is the gap CV of the underlying renewal.
    """

    process: str
    rates: tuple[float, ...]
    edges: tuple[float, ...]
    cv: float = 1.0
    random_periods: bool = False
    on_s: float = 0.0
    off_s: float = 0.0

    def mean_rate(self) -> float:
        """Long-run mean arrivals per second."""
        if self.random_periods:
            on, off = self.rates
            return (on * self.on_s + off * self.off_s) / (self.on_s + self.off_s)
        edges = np.asarray(self.edges)
        return float(np.dot(self.rates, np.diff(edges)) / edges[-1])

    def scaled(self, factor: float) -> Arrivals:
        """The same process with every rate multiplied by ``factor``."""
        return replace(self, rates=tuple(r * factor for r in self.rates))

    def generate(
        self, rng: np.random.Generator, n: int | None = None, duration_s: float | None = None
    ) -> np.ndarray:
        """Sorted arrival times in seconds.

        ``n`` alone: the first ``n`` arrivals. ``duration_s`` alone: every arrival in
        ``[0, duration_s)``. Both: exactly ``n`` arrivals in ``[0, duration_s)``, the
        process conditioned on that count (its gaps rescaled to fit, which for Gamma
        gaps is exactly the conditional law), so the realised mean rate is the target.
        """
        gap_rng, period_rng = rng.spawn(2)
        ops = None
        if duration_s is None:
            ops = _renewal(gap_rng, self.cv, int(n or 0))
        if self.random_periods:
            edges, cum = self._onoff_periods(period_rng, duration_s, ops)
        else:
            edges, cum = self._period()
        if duration_s is not None:
            horizon = self._mass(duration_s, edges, cum)
            if n is not None:
                ops = _renewal(gap_rng, self.cv, n + 1)
                ops = ops[:n] * (horizon / ops[n])
            else:
                ops = _renewal_until(gap_rng, self.cv, horizon)
        assert ops is not None
        times = self._to_time(ops, edges, cum)
        if duration_s is not None:
            times = np.minimum(times, np.nextafter(duration_s, 0.0))
        return times

    def _period(self) -> tuple[np.ndarray, np.ndarray]:
        edges = np.asarray(self.edges, dtype=np.float64)
        cum = np.concatenate([[0.0], np.cumsum(np.asarray(self.rates) * np.diff(edges))])
        return edges, cum

    def _mass(self, t: float, edges: np.ndarray, cum: np.ndarray) -> float:
        """Expected arrivals in ``[0, t)`` (the cumulative rate)."""
        if self.random_periods:
            return float(np.interp(t, edges, cum))
        k, rem = divmod(t, edges[-1])
        return float(k * cum[-1] + np.interp(rem, edges, cum))

    def _to_time(self, ops: np.ndarray, edges: np.ndarray, cum: np.ndarray) -> np.ndarray:
        if self.random_periods:
            return _inverse_piecewise(ops, edges, cum)
        k, rem = np.divmod(ops, cum[-1])
        return k * edges[-1] + _inverse_piecewise(rem, edges, cum)

    def _onoff_periods(
        self, period_rng: np.random.Generator, duration_s: float | None, ops: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Exponential on/off periods covering ``duration_s`` or the operational times ``ops``."""
        lengths = np.empty(0)
        cycles = 16
        while True:
            more = np.empty(2 * cycles)
            more[0::2] = period_rng.exponential(self.on_s, cycles)
            more[1::2] = period_rng.exponential(self.off_s, cycles)
            lengths = np.concatenate([lengths, more])
            cycles = len(lengths) // 2
            edges = np.concatenate([[0.0], np.cumsum(lengths)])
            cum = np.concatenate([[0.0], np.cumsum(np.tile(self.rates, cycles) * lengths)])
            if duration_s is not None and edges[-1] >= duration_s:
                return edges, cum
            if ops is not None and (not ops.size or cum[-1] > ops[-1]):
                return edges, cum


def _inverse_piecewise(y: np.ndarray, edges: np.ndarray, cum: np.ndarray) -> np.ndarray:
    """Invert the piecewise-linear cumulative rate (zero-rate slices are skipped)."""
    j = np.searchsorted(cum, y, side="right") - 1
    j = np.clip(j, 0, len(edges) - 2)
    rate = (cum[j + 1] - cum[j]) / (edges[j + 1] - edges[j])
    with np.errstate(divide="ignore", invalid="ignore"):
        t = edges[j] + np.where(rate > 0, (y - cum[j]) / rate, 0.0)
    return t


def _gaps(rng: np.random.Generator, cv: float, n: int) -> np.ndarray:
    if cv == 1.0:
        return rng.exponential(1.0, n)
    shape = 1.0 / cv**2
    return rng.gamma(shape, 1.0 / shape, n)


def _renewal(rng: np.random.Generator, cv: float, n: int) -> np.ndarray:
    """The first ``n`` points of a unit-rate renewal process with gap CV ``cv``."""
    return np.cumsum(_gaps(rng, cv, n))


def _renewal_until(rng: np.random.Generator, cv: float, horizon: float) -> np.ndarray:
    """All points of a unit-rate renewal process in ``[0, horizon)``."""
    n = int(horizon + 6 * cv * np.sqrt(horizon) + 16)
    points = _renewal(rng, cv, n)
    while points.size and points[-1] < horizon:
        more = _renewal(rng, cv, max(n // 2, 16)) + points[-1]
        points = np.concatenate([points, more])
    return points[points < horizon]


def parse_arrivals(value: object, path: str) -> Arrivals:
    """Parse an ``arrival:`` mapping at key ``path``."""
    sec = Section(value, path)
    process = sec.string("process", choices=PROCESSES)
    if process is None:
        raise TraceError(f"{sec.key('process')}: missing; expected one of {', '.join(PROCESSES)}")
    if process == "poisson":
        rate = sec.number("rate", required=True, positive=True)
        result = Arrivals(process, (rate,), (0.0, 1.0))
    elif process == "gamma":
        rate = sec.number("rate", required=True, positive=True)
        cv = sec.number("cv", required=True, positive=True)
        result = Arrivals(process, (rate,), (0.0, 1.0), cv)
    elif process == "diurnal":
        result = _diurnal(sec)
    else:
        result = _onoff(sec)
    sec.finish()
    return result


def _diurnal(sec: Section) -> Arrivals:
    period = sec.number("period_s", 86400.0, positive=True)
    cv = sec.number("cv", 1.0, positive=True)
    if sec.has("curve"):
        curve = sec.raw("curve")
        if (
            not isinstance(curve, list)
            or not curve
            or not all(is_real(r) and r >= 0 for r in curve)
        ):
            raise sec.error(
                "curve", "a non-empty list of rates >= 0 (req/s per equal slice of period_s)", curve
            )
        rates = np.asarray(curve, dtype=np.float64)
        if rates.sum() <= 0:
            raise sec.error("curve", "at least one positive rate", curve)
        target = sec.number("rate", None, positive=True)
        if target is not None:
            rates = rates * target / rates.mean()
        return Arrivals("diurnal", tuple(rates), _equal_edges(period, len(rates)), cv)
    rate = sec.number("rate", required=True, positive=True)
    amplitude = sec.number("amplitude", 0.5, minimum=0.0, maximum=1.0)
    peak = sec.number("peak_s", period / 2, minimum=0.0)
    edges = np.linspace(0.0, period, _SINE_SLICES + 1)
    w = 2 * np.pi / period
    # Exact mean of rate * (1 + a cos(w (t - peak))) over each slice.
    cum = rate * (edges + amplitude / w * np.sin(w * (edges - peak)))
    rates = np.maximum(np.diff(cum) / np.diff(edges), 0.0)
    return Arrivals("diurnal", tuple(rates), tuple(edges), cv)


def _onoff(sec: Section) -> Arrivals:
    rate = sec.number("rate", required=True, positive=True)
    off_rate = sec.number("off_rate", 0.0, minimum=0.0)
    on_s = sec.number("on_s", required=True, positive=True)
    off_s = sec.number("off_s", required=True, positive=True)
    cv = sec.number("cv", 1.0, positive=True)
    periods = sec.string("periods", "exponential", choices=("exponential", "fixed"))
    if periods == "fixed":
        return Arrivals(
            "onoff", (rate, off_rate), (0.0, on_s, on_s + off_s), cv, False, on_s, off_s
        )
    return Arrivals("onoff", (rate, off_rate), (0.0, on_s + off_s), cv, True, on_s, off_s)


def _equal_edges(period: float, slices: int) -> tuple[float, ...]:
    return tuple(np.linspace(0.0, period, slices + 1))
