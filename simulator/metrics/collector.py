"""Metrics: streaming ITL histogram, the iteration log, and the run summary.

Definitions follow DESIGN.md ("Metric definitions") so numbers compare with peers: TTFT,
TPOT and E2E percentiles over requests; ITL over deliveries (tokens accepted in one step
arrive together as one delivery), from a log-spaced histogram with 0.5% bin width.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from specsim.simulator.execution.loop_rules import log_flush
from specsim.simulator.metrics.iteration_log import ITER_COLUMNS

if TYPE_CHECKING:  # pragma: no cover  (the frame is the API's; the writers take columns)
    import pandas as pd


class LogHistogram:
    """Fixed log-spaced bins from 1 us to 10^4 s: memory stays flat however long the run."""

    BUFFER = 1 << 16

    def __init__(self, lo: float = 1e-6, hi: float = 1e4, bins_per_decade: int = 460) -> None:
        self.lo, self.bpd = lo, bins_per_decade
        self.nbins = int(np.ceil(np.log10(hi / lo) * bins_per_decade)) + 2
        self.counts = np.zeros(self.nbins, np.int64)
        self.total = 0.0
        self.n = 0
        self.max = 0.0
        self._buf = np.empty(self.BUFFER)
        self._fill = 0

    def add(self, values: np.ndarray) -> None:
        """Values are buffered and binned in bulk, one bincount per BUFFER values. The
        buffer is binned exactly when full, so the bins and the float total depend only on
        the sequence of values, not on how it was cut into calls (the compiled kernel adds
        a segment's gaps in one call where the Python one makes several)."""
        m = len(values)
        fill = self._fill
        if fill + m < self.BUFFER:  # the common case: room to spare
            self._buf[fill:fill + m] = values
            self._fill = fill + m
            return
        i = 0
        while i < m:
            take = min(self.BUFFER - self._fill, m - i)
            self._buf[self._fill:self._fill + take] = values[i:i + take]
            self._fill += take
            i += take
            if self._fill == self.BUFFER:
                self._flush()

    def _flush(self) -> None:
        if self._fill:
            self._bin(self._buf[: self._fill])
            self._fill = 0

    def _bin(self, v: np.ndarray) -> None:
        if not v.size:
            return
        idx = np.floor(np.log10(np.maximum(v, self.lo * 0.5) / self.lo) * self.bpd).astype(np.int64) + 1
        self.counts += np.bincount(np.clip(idx, 0, self.nbins - 1), minlength=self.nbins)
        self.total += float(v.sum())
        self.n += v.size
        self.max = max(self.max, float(v.max()))

    def quantile(self, q: float) -> float:
        self._flush()
        if self.n == 0:
            return float("nan")
        c = np.cumsum(self.counts)
        i = int(np.searchsorted(c, q * self.n, side="left"))
        if i == 0:
            return self.lo
        # geometric middle of the bin
        return float(min(self.lo * 10 ** ((i - 0.5) / self.bpd), self.max))

    def summary(self) -> dict[str, float]:
        self._flush()
        if self.n == 0:
            nan = float("nan")
            return {"mean": nan, "p50": nan, "p90": nan, "p99": nan, "count": 0}
        return {"mean": self.total / self.n, "p50": self.quantile(0.5),
                "p90": self.quantile(0.9), "p99": self.quantile(0.99), "count": self.n}




class Metrics:
    """Collects per-delivery ITL and per-iteration rows during a run.

    Iteration rows go into one growable float64 table (doubling capacity): one row at a
    time from the step-by-step path, a block of m rows from the fast path. ``extra``
    names columns after ``ITER_COLUMNS`` (the KV tiers' use with a prefix cache), filled by
    ``fill_extra`` for the rows just added; without them the table is as before.
    """

    def __init__(self, extra: tuple[str, ...] = ()) -> None:
        self.itl = LogHistogram()
        self.reasons: dict[str, int] = {}  # speculation-policy decisions, coded in the log
        self.extra = tuple(extra)
        self._width = len(ITER_COLUMNS) + len(self.extra)
        self._buf = np.empty((4096, self._width))
        self._n = 0
        self._log = None  # an IterationWriter (iteration_log.py): rows streamed in chunks
        self._chunk = 0
        self._streamed = 0  # rows already written to the log

    def stream_to(self, writer, chunk_rows: int) -> None:
        """Write rows to ``writer`` whenever ``chunk_rows`` are held, so memory stays flat."""
        self._log, self._chunk = writer, max(int(chunk_rows), 1)

    def finish_stream(self) -> int:
        """Write the rows still held and close the log; returns the rows written in all."""
        if self._n or not self._streamed:  # an empty log still gets its columns
            self._flush()
        self._log.close()
        return self._streamed

    def _flush(self) -> None:
        self._log.write(self.iterations_columns())
        self._streamed += self._n
        self._n = 0

    def add_itl(self, gaps: np.ndarray) -> None:
        self.itl.add(gaps)

    def _reserve(self, m: int) -> None:
        if self._n + m > len(self._buf):
            grown = np.empty((max(2 * len(self._buf), self._n + m), self._width))
            grown[: self._n] = self._buf[: self._n]
            self._buf = grown

    def reason_code(self, reason: str) -> int:
        """A small integer for a policy's decision text (iterations.csv shows the text)."""
        code = self.reasons.get(reason)
        if code is None:
            code = self.reasons[reason] = len(self.reasons)
        return code

    def reserve_rows(self, m: int) -> tuple[np.ndarray, int]:
        """Room for ``m`` rows: (the buffer, the first new row's index), for a writer of the
        ITER_COLUMNS in place by name (the kernel's commit, ``ITER.<column>``); ``rows_added(m)``
        then counts them in."""
        if log_flush(self._log is not None, self._n, m, self._chunk):
            self._flush()  # before adding: fill_extra may still write the rows added now
        self._reserve(m)
        return self._buf, self._n

    def rows_added(self, m: int) -> None:
        if self.extra:
            self._buf[self._n:self._n + m, len(ITER_COLUMNS):] = 0.0
        self._n += m

    def fill_extra(self, m: int, *cols) -> None:
        """The ``extra`` columns of the last ``m`` rows (scalars broadcast)."""
        block = self._buf[self._n - m:self._n]
        for i, c in enumerate(cols):
            block[:, len(ITER_COLUMNS) + i] = c

    def iterations_frame(self) -> pd.DataFrame:
        """The log held, as a frame (``Result.iterations`` when nothing was streamed)."""
        import pandas as pd

        return pd.DataFrame(self.iterations_columns())

    def iterations_columns(self) -> dict[str, np.ndarray]:
        """The rows held, column by column in the log's order and final dtype (the frame's
        columns; a streamed chunk goes to the log as these, no frame built)."""
        data = self._buf[: self._n]
        ints = {"worker", "batch_size", "decode_seqs", "prefill_seqs", "drafted_tokens",
                "kv_blocks_used", *(c for c in self.extra if c.endswith("_blocks"))}
        reasons = np.array(list(self.reasons) or [""], dtype=object)
        cols = {}
        for i, name in enumerate(ITER_COLUMNS + self.extra):  # one copy each, final dtype
            col = data[:, i]
            cols[name] = (reasons[col.astype(np.int64)] if name == "policy_reason"
                          else col.astype(np.int64) if name in ints else col.copy())
        return cols


def dist(values: np.ndarray) -> dict[str, float]:
    """Mean and percentiles of finite values (NaN when there are none)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if not v.size:
        nan = float("nan")
        return {"mean": nan, "p50": nan, "p90": nan, "p99": nan}
    p = np.percentile(v, [50, 90, 99])
    return {"mean": float(v.mean()), "p50": float(p[0]), "p90": float(p[1]), "p99": float(p[2])}


def tpot(first_token: np.ndarray, finish: np.ndarray, generated: np.ndarray) -> np.ndarray:
    """Time per output token of each request: (last token - first token) / (tokens - 1).

    NaN where there is no second token or the request has not finished. The one place TPOT
    is computed (metrics.json, requests.csv and the report all use it).
    """
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(generated > 1, (finish - first_token) / np.maximum(generated - 1, 1),
                        np.nan)


def deliver(first_token: np.ndarray, finish: np.ndarray, generated: np.ndarray,
            lag_steps: float, delay_s: float, steps: np.ndarray | None = None
            ) -> tuple[np.ndarray, np.ndarray]:
    """When the client sees each request's first and last token: ``lag_steps`` engine steps
    plus ``delay_s`` after the step that made it (``engine.output_lag_steps`` and
    ``engine.output_delay_s``: vLLM v1 hands a step's tokens to a separate output process
    that detokenises and streams them while the next steps run).

    A step is priced at the request's own mean decode step: (finish - first token) over its
    decode steps where ``steps`` gives them (with speculation a step makes several tokens,
    so its step is longer than its TPOT), else its TPOT; every token moves by the same
    amount and TPOT is unchanged; a request with neither (one token, or still decoding)
    takes the mean over those that have one. Both zero returns the arrays themselves, bit
    for bit. Applied once the run has ended, so a closed-loop client still
    sends its next request at the unshifted finish (the lag is not fed back into arrivals).
    """
    if lag_steps == 0.0 and delay_s == 0.0:
        return first_token, finish
    step = tpot(first_token, finish, generated)
    if steps is not None:
        with np.errstate(invalid="ignore", divide="ignore"):
            step = np.where(steps > 0, (finish - first_token) / np.maximum(steps, 1), step)
    known = np.isfinite(step)
    step = np.where(known, step, float(step[known].mean()) if known.any() else 0.0)
    shift = lag_steps * step + delay_s
    return first_token + shift, finish + shift


def slo_attainment(done: np.ndarray, ttft: np.ndarray, tpot_s: np.ndarray,
                   slo_ttft: float | None, slo_tpot: float | None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per request: (meets the TTFT SLO, meets the TPOT SLO, completed and meets every SLO).

    An SLO that is not set is met by everyone; a single-token output has no TPOT and meets
    any TPOT SLO. The one place "meets the SLO" is decided.
    """
    ttft_ok = (ttft <= slo_ttft) if slo_ttft is not None else np.ones(len(done), bool)
    tpot_ok = ~(tpot_s > slo_tpot) if slo_tpot is not None else np.ones(len(done), bool)
    return ttft_ok, tpot_ok, done & ttft_ok & tpot_ok


def slo_targets(tier: np.ndarray, ttft_s: float | None, tpot_s: float | None,
                tiers: dict[str, dict[str, float | None]] | None
                ) -> tuple[np.ndarray | float | None, np.ndarray | float | None]:
    """Each request's (TTFT, TPOT) targets for ``slo_attainment``: its SLO tier's
    (``slo.tiers``), else the run's (``ttft_s``, ``tpot_s``); a target set for no one is
    inf. Without ``tiers``, the run's two values themselves (scalars or None)."""
    if not tiers:
        return ttft_s, tpot_s
    names, inv = np.unique(np.asarray(tier, dtype=str), return_inverse=True)
    out = []
    for key, run in (("ttft_s", ttft_s), ("tpot_s", tpot_s)):
        per = [(tiers.get(str(n)) or {}).get(key) for n in names]
        per = [run if v is None else v for v in per]
        out.append(np.array([np.inf if v is None else float(v) for v in per])[inv])
    return out[0], out[1]
