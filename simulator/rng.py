"""Counter-based random numbers keyed by (seed, stream, request, step).

Acceptance draws keyed this way do not depend on call order, so the same request sees the
same accepted lengths however the batch around it was scheduled, and a run is reproducible
bit for bit. SplitMix64 (Steele et al., 2014) over uint64 arrays: array work, no Python loop.
"""

from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
_INV53 = 1.0 / float(1 << 53)

# Streams: one per kind of draw so they never collide.
STREAM_ACCEPT = 1
STREAM_ALPHA = 2
STREAM_MATCH = 3


def _mix(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


def request_keys(seed: int, stream: int, request_ids: np.ndarray) -> np.ndarray:
    """One 64-bit key per request for one stream; precomputed once per run."""
    with np.errstate(over="ignore"):
        base = _mix(np.array([(seed * 0x100000001B3 + stream) & 0xFFFFFFFFFFFFFFFF],
                             dtype=np.uint64))
        return _mix(base ^ (np.asarray(request_ids, dtype=np.uint64) * _GOLDEN))


def uniform(keys: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """U(0, 1] for each (key, step): the step-th output of SplitMix64 seeded with key."""
    # uint64 arrays wrap silently (no overflow warning for arrays): no errstate needed
    z = _mix(keys + (np.asarray(steps, dtype=np.uint64) + np.uint64(1)) * _GOLDEN)
    return 1.0 - (z >> _S11).astype(np.float64) * _INV53
