"""Independent, named random streams derived from one scenario seed.

Each purpose (arrivals, prompt lengths, sampling, ...) gets its own stream, so changing
one part of a workload section does not reshuffle the draws of the others.
"""

from __future__ import annotations

import numpy as np

_STREAMS = {
    "arrival": 1,
    "prompt": 2,
    "output": 3,
    "turns": 4,
    "think": 5,
    "followup": 6,
    "class": 7,
    "sample": 8,
}


def stream(seed: int, name: str) -> np.random.Generator:
    """The generator for purpose ``name`` under ``seed``."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(_STREAMS[name],)))
