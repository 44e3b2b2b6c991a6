"""When Python's cyclic garbage collector runs: not while a run starts, nor while a reader
builds many containers that hold no cycles.

Starting a run allocates hundreds of thousands of long-lived objects (the imports, pydantic's
schemas, the catalogs, the trace) and almost no garbage cycles, yet Python's collector walks
them some 350 times on the way: 0.06-0.1 s of a 0.85 s 1k-request replay (issue 22). The
console script holds collection off from its first line (``hold``) until the simulation
loop starts (``release``), which freezes every object alive by then (never walked again) and
collects as usual from there on, so a long fleet run's SimPy cycles are still freed. A
library caller (tests, notebooks, the API) never holds, so nothing changes for it; results
do not depend on when the collector runs.

``paused`` holds it off for one block of work: the CSV reader's rows (a million rows are a
million small lists; the collector walked them 4 times over, 2.2 -> 5 s) and nothing else.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

_held = False


def hold() -> None:
    """Turn cyclic collection off until ``release`` (where it is on now)."""
    global _held
    if gc.isenabled():
        gc.disable()
        _held = True


def release() -> None:
    """After ``hold``: freeze what is alive (start-up's objects) and collect again."""
    global _held
    if _held:
        _held = False
        gc.freeze()
        gc.enable()


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No cyclic collection inside the block (the collector's state restored after it)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
