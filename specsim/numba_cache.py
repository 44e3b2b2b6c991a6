"""One cache key for the whole compiled kernel: a change to any of its files recompiles it.

numba keys a function's on-disk cache (``cache=True``) to its own source file only, but the
kernel's compiled functions call one another across files and read their constants
(``kernel_jit._price`` runs ``pass_rule``'s rule, ``solo_jit._run`` runs ``kernel_jit``'s
plan and commit, ``pass_rule`` reads ``routing.SKEW_POINTS``). Edit ``pass_rule.py`` alone
and ``kernel_jit``'s cache would keep running the old rule, compiled, while the Python
source runs the new one (found when the routing skew was added, issue 26). So every kernel
function's cache is stamped with one hash over all of ``KERNEL_SOURCES``' contents: any
edit to any of them invalidates every one of their caches, and nothing else changes (the
same cache folders, numba's own locators, its own index). ``install`` runs before the
first kernel function is decorated (``pass_rule`` and ``numpy_order`` call it); where
numba's cache internals are not as expected it does nothing, and numba's per-file stamps
apply as before.
"""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
#: every file a compiled kernel function is defined in or reads a constant from
KERNEL_SOURCES = tuple(str(_ROOT / p) for p in (
    "cost_models/pass_rule.py", "cost_models/routing.py", "simulator/rng.py",
    "simulator/execution/numpy_order.py", "simulator/execution/loop_rules.py",
    "simulator/execution/kernel_jit.py",
    "simulator/execution/solo_jit.py", "simulator/metrics/iteration_log.py",
    "specsim/numba_cache.py"))


def stamp(paths: tuple[str, ...] = KERNEL_SOURCES) -> str:
    """The hash of the files' contents, in order (a missing file counts as empty)."""
    h = hashlib.sha256()
    for p in paths:
        h.update(p.encode())
        try:
            h.update(Path(p).read_bytes())
        except OSError:
            h.update(b"")
    return h.hexdigest()


@lru_cache(maxsize=1)
def _kernel_stamp() -> str:
    return stamp()


@lru_cache(maxsize=1)
def _kernel_files() -> frozenset[str]:
    return frozenset(os.path.realpath(p) for p in KERNEL_SOURCES)


_installed = False


def install() -> bool:
    """Put the kernel's locators in front of numba's (once); True where they are in place."""
    global _installed
    if _installed:
        return True
    try:
        from numba.core import caching
    except (ImportError, OSError):
        return False
    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
    classes = getattr(impl, "_locator_classes", None)
    if not isinstance(classes, list):
        return False
    ours = []
    for name in ("UserProvidedCacheLocator", "InTreeCacheLocator", "UserWideCacheLocator"):
        base = getattr(caching, name, None) or getattr(caching, "_" + name, None)
        if base is None or not hasattr(base, "get_source_stamp"):
            return False
        ours.append(_kernel_locator(base))
    classes[:0] = ours
    _installed = True
    return True


def _kernel_locator(base: type) -> type:
    class KernelLocator(base):
        """``base``, for the kernel's files only, stamped with the whole kernel's hash."""

        @classmethod
        def from_function(cls, py_func, py_file):
            if os.path.realpath(py_file) not in _kernel_files():
                return None
            return super().from_function(py_func, py_file)

        def get_source_stamp(self):
            return _kernel_stamp()

    KernelLocator.__name__ = KernelLocator.__qualname__ = f"Kernel{base.__name__.lstrip('_')}"
    return KernelLocator
