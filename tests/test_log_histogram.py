"""The ITL histogram depends on the sequence of gaps, not on how it was cut into calls.

The compiled kernel adds a segment's gaps in one call where the Python kernel adds them
step by step (tests/test_kernel_compiled.py compares whole runs); the histogram bins its
buffer exactly when full, so the counts, the maximum and the float total (summed a full
buffer at a time) come out the same bits either way.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.simulator.metrics.collector import LogHistogram


def _fed(values: np.ndarray, cuts: list[int], buffer: int) -> LogHistogram:
    h = LogHistogram()
    h.BUFFER = buffer
    h._buf = np.empty(buffer)
    edges = [0, *sorted(c % (len(values) + 1) for c in cuts), len(values)]
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        h.add(values[lo:hi])
    h._flush()
    return h


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 700), cuts=st.lists(st.integers(0, 10_000), max_size=30),
       buffer=st.integers(1, 97), seed=st.integers(0, 2**32 - 1))
def test_any_cut_of_the_same_gaps_gives_the_same_bits(n, cuts, buffer, seed):
    v = np.random.default_rng(seed).lognormal(-4.0, 1.5, n)
    whole, cut = _fed(v, [], buffer), _fed(v, cuts, buffer)
    assert whole.n == cut.n == n
    assert np.array_equal(whole.counts, cut.counts)
    assert whole.total == cut.total  # bit for bit, not approximately
    assert whole.max == cut.max
    if n:
        assert abs(whole.total - v.sum()) <= 1e-9 * v.sum()
        assert whole.quantile(0.5) == cut.quantile(0.5)
