"""Arrival processes: Poisson, Gamma (bursty, a given CV), diurnal curve, on/off bursts.

All are one construction: a unit-rate renewal process with Gamma gaps of the wanted CV
(CV 1 = Poisson) in "operational time", mapped to real time through the inverse of the
cumulative rate. A constant rate gives a Gamma renewal process; a piecewise-constant
rate (a diurnal curve, on/off periods) modulates it. Everything is vectorised.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from specsim.traces.errors import TraceError
from specsim.traces.spec import Section, is_real

PROCESSES = ("poisson", "gamma", "diurnal", "onoff")
#: Slices per period used to integrate a sinusoidal diurnal rate exactly per slice.
_SINE_SLICES = 1440
#: The largest gap CV accepted: beyond it the Gamma gaps underflow to 0 but for rare giants,
#: and reaching a horizon takes ~CV^2 draws. Real traces stay far below.
MAX_CV = 1000.0
#: The shortest diurnal period accepted (a shorter one is a typo, and breaks the maths).
MIN_PERIOD_S = 1e-6
#: Random on/off periods are drawn as arrays; more than this many is refused (~1 GB).
MAX_PERIODS = 10_000_000


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

    def peak_rate(self) -> float:
        """The highest rate the process reaches (arrivals per second)."""
        return float(max(self.rates))

    def expected_count(self, n: int | None, duration_s: float | None) -> float:
        """An upper estimate of how many arrivals ``generate(n, duration_s)`` draws.

        ``n`` when given, else the peak rate times the duration.
        """
        if n is not None:
            return float(n)
        return self.peak_rate() * float(duration_s or 0.0)

    def check_periods(self, n: int | None, duration_s: float | None, path: str) -> None:
        """Refuse random on/off periods so short that drawing them would not fit in memory."""
        if not self.random_periods:
            return
        cycle = self.on_s + self.off_s
        if duration_s is not None:
            periods = duration_s / cycle
            span = f"duration_s {duration_s:g} s"
        else:
            periods = float(n or 0) / (self.mean_rate() * cycle)
            span = f"{int(n or 0):,} requests"
        if periods > MAX_PERIODS:
            raise TraceError(
                f"{path}: on_s + off_s = {cycle:g} s makes ~{periods:.3g} random on/off "
                f"periods over {span} (at most {MAX_PERIODS:,}); use longer periods or "
                "periods: fixed"
            )

    def window_rates(self, bounds: np.ndarray) -> np.ndarray:
        """Mean arrivals per second between consecutive ``bounds`` (seconds, increasing):
        the expected count over each window over its length, so a window that cuts slices
        averages them; periodic processes only (a day plan's windows, traces/diurnal.py)."""
        if self.random_periods:
            raise TraceError("on/off periods drawn at random have no fixed rate per window")
        edges, cum = self._period()
        mass = np.array([self._mass(float(t), edges, cum) for t in bounds])
        return np.diff(mass) / np.diff(bounds)

    def scaled(self, factor: float) -> Arrivals:
        """The same process with every rate multiplied by ``factor``."""
        return replace(self, rates=tuple(r * factor for r in self.rates))

    def generate(
        self,
        rng: np.random.Generator,
        n: int | None = None,
        duration_s: float | None = None,
        limit: int | None = None,
    ) -> np.ndarray:
        """Sorted arrival times in seconds.

        ``n`` alone: the first ``n`` arrivals. ``duration_s`` alone: every arrival in
        ``[0, duration_s)``. Both: exactly ``n`` arrivals in ``[0, duration_s)``, the
        process conditioned on that count (its gaps rescaled to fit, which for Gamma
        gaps is exactly the conditional law), so the realised mean rate is the target.
        ``limit`` (with ``duration_s`` alone) stops after the first ``limit`` arrivals:
        the same times as drawing them all and keeping the first ``limit``.
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
                # All gaps can underflow to 0 for a huge CV: then every arrival is at 0.
                ops = ops[:n] * (horizon / ops[n] if ops[n] > 0 else 0.0)
            else:
                ops = _renewal_until(gap_rng, self.cv, horizon, limit)
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
            if cycles > MAX_PERIODS or not np.isfinite(cum[-1]):  # rates underflow to 0
                raise TraceError(
                    f"workload.synthetic.arrival: more than {MAX_PERIODS:,} random on/off "
                    "periods would be needed; use longer periods, higher rates or "
                    "periods: fixed"
                )


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
    if cv < 1e-6:  # regular to within a millionth (1 / cv^2 would overflow)
        return np.ones(n)
    shape = 1.0 / cv**2
    return rng.gamma(shape, 1.0 / shape, n)


def _renewal(rng: np.random.Generator, cv: float, n: int) -> np.ndarray:
    """The first ``n`` points of a unit-rate renewal process with gap CV ``cv``."""
    return np.cumsum(_gaps(rng, cv, n))


def _renewal_until(
    rng: np.random.Generator, cv: float, horizon: float, limit: int | None = None
) -> np.ndarray:
    """All points of a unit-rate renewal process in ``[0, horizon)`` (the first ``limit``)."""
    # A first guess with room for the usual spread (capped for a huge CV, whose draws
    # may need many extensions anyway).
    n = int(min(horizon + 6 * cv * np.sqrt(horizon) + 16, 2 * horizon + 1024))
    if limit is not None:
        n = min(n, limit)
    points = _renewal(rng, cv, n)
    while points.size and points[-1] < horizon and (limit is None or points.size < limit):
        more = _renewal(rng, cv, max(n // 2, points.size // 2, 16)) + points[-1]
        points = np.concatenate([points, more])
    points = points[points < horizon]
    return points if limit is None else points[:limit]


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
        cv = sec.number("cv", required=True, positive=True, maximum=MAX_CV)
        result = Arrivals(process, (rate,), (0.0, 1.0), cv)
    elif process == "diurnal":
        result = _diurnal(sec)
    else:
        result = _onoff(sec)
    sec.finish()
    return result


def _diurnal(sec: Section) -> Arrivals:
    period = sec.number("period_s", 86400.0, positive=True)
    if period < MIN_PERIOD_S:
        raise sec.error("period_s", f"a period of at least {MIN_PERIOD_S:g} s", period)
    cv = sec.number("cv", 1.0, positive=True, maximum=MAX_CV)
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
    with np.errstate(all="ignore"):
        cum = rate * (edges + amplitude / w * np.sin(w * (edges - peak)))
        rates = np.maximum(np.diff(cum) / np.diff(edges), 0.0)
    if not np.isfinite(rates).all() or rates.sum() <= 0:
        raise TraceError(
            f"{sec.path}: rate {rate:g} req/s over period_s {period:g} s gives no usable "
            "rate curve; use ordinary sizes"
        )
    return Arrivals("diurnal", tuple(rates), tuple(edges), cv)


def _onoff(sec: Section) -> Arrivals:
    rate = sec.number("rate", required=True, positive=True)
    off_rate = sec.number("off_rate", 0.0, minimum=0.0)
    on_s = sec.number("on_s", required=True, positive=True)
    off_s = sec.number("off_s", required=True, positive=True)
    cv = sec.number("cv", 1.0, positive=True, maximum=MAX_CV)
    periods = sec.string("periods", "exponential", choices=("exponential", "fixed"))
    if periods == "fixed":
        return Arrivals(
            "onoff", (rate, off_rate), (0.0, on_s, on_s + off_s), cv, False, on_s, off_s
        )
    return Arrivals("onoff", (rate, off_rate), (0.0, on_s + off_s), cv, True, on_s, off_s)


def _equal_edges(period: float, slices: int) -> tuple[float, ...]:
    return tuple(np.linspace(0.0, period, slices + 1))
