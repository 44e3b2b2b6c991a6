"""Eviction: whose KV goes when a worker's KV pool runs out mid-run.

With recompute-style preemption (vLLM's default) a victim's KV blocks are freed and it goes
back to the front of the queue; its prompt plus what it generated is prefilled again later.
A policy only picks the victims, in order; the worker frees and requeues them.
"""

from __future__ import annotations

import numpy as np

from specsim.simulator.registry import EVICTION


class EvictionPolicy:
    """Interface: ``order(rows, table)`` -> the batch's rows, first victim first."""

    name = "eviction"

    def order(self, rows: np.ndarray, table) -> np.ndarray:
        raise NotImplementedError


@EVICTION.register("newest")
class Newest(EvictionPolicy):
    """The most recently admitted request first (vLLM's recompute preemption under FCFS)."""

    def order(self, rows, table):
        return rows[::-1]


@EVICTION.register("least_progress")
class LeastProgress(EvictionPolicy):
    """Fewest tokens generated first (ties: longer prompt first, then newest): the victim
    whose recomputation wastes the least decoding work."""

    def order(self, rows, table):
        pos = np.arange(len(rows))
        keys = (-pos, -table.prompt[rows], table.generated[rows])  # lexsort: last key first
        return rows[np.lexsort(keys)]
