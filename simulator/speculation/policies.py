"""Speculation policies: how many tokens each decode row drafts this iteration.

A policy registers by name (``speculation.policy`` picks it) and declares ``fixed_k`` when
its k never changes, which lets the kernel plan many iterations at once.
"""

from __future__ import annotations

import numpy as np

from specsim.simulator.registry import SPECULATION_POLICIES


class SpeculationPolicy:
    """Interface: the draft length of each decode row this iteration.

    ``choose(rows, table)`` returns one k per row. A policy whose k never changes declares it
    as ``fixed_k``: the kernel may then plan many iterations at once.
    """

    name = "policy"
    fixed_k: int | None = None

    def __init__(self, k: int) -> None:
        self.k = k

    def choose(self, rows: np.ndarray, table) -> np.ndarray:
        raise NotImplementedError


@SPECULATION_POLICIES.register("static")
class StaticK(SpeculationPolicy):
    """The scenario's k for every row, every iteration."""

    def __init__(self, k: int) -> None:
        super().__init__(k)
        self.fixed_k = k

    def choose(self, rows: np.ndarray, table) -> np.ndarray:
        return np.full(len(rows), self.k, dtype=np.int64)


@SPECULATION_POLICIES.register("off")
class Off(StaticK):
    """No drafting (also what ``method: none`` or ``k: 0`` mean)."""

    def __init__(self, k: int = 0) -> None:
        super().__init__(0)


def make_policy(policy: str, method: str, k: int) -> SpeculationPolicy:
    if method == "none" or k == 0:
        return Off()
    return SPECULATION_POLICIES.get(policy)(k)
