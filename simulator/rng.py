"""Counter-based random numbers keyed by (seed, stream, request, step).

Acceptance draws keyed this way do not depend on call order, so the same request sees the
same accepted lengths however the batch around it was scheduled, and a run is reproducible
bit for bit. SplitMix64 (Steele et al., 2014), written once: ``mix`` and ``draw`` are plain
functions that work on uint64 arrays (numpy, here) and on uint64 scalars (the compiled
kernel compiles these very functions with numba, ``execution/kernel_jit.py``).
"""

from __future__ import annotations

import numpy as np

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
_ONE = np.uint64(1)
_INV53 = 1.0 / float(1 << 53)

# Streams: one per kind of draw so they never collide.
STREAM_ACCEPT = 1
STREAM_ALPHA = 2
STREAM_MATCH = 3


def mix(z):
    """SplitMix64's finaliser of a uint64 array or scalar (wraps mod 2^64)."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


def draw(key, step):
    """U(0, 1] for (key, step), both uint64 (arrays or scalars): the step-th output of
    SplitMix64 seeded with key."""
    z = mix(key + (step + _ONE) * GOLDEN)
    return 1.0 - np.float64(z >> _S11) * _INV53


def request_keys(seed: int, stream: int, request_ids: np.ndarray) -> np.ndarray:
    """One 64-bit key per request for one stream; precomputed once per run."""
    with np.errstate(over="ignore"):
        base = mix(np.array([(seed * 0x100000001B3 + stream) & 0xFFFFFFFFFFFFFFFF],
                            dtype=np.uint64))
        return mix(base ^ (np.asarray(request_ids, dtype=np.uint64) * GOLDEN))


def uniform(keys: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """``draw`` for each (key, step) of two arrays (broadcast)."""
    # uint64 arrays wrap silently (no overflow warning for arrays): no errstate needed
    return draw(np.asarray(keys), np.asarray(steps, dtype=np.uint64))
