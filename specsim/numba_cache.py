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

It also makes loading a kernel function from that cache lean (issue 22: a run's fixed
cost). numba refreshes its whole target context before every cache load "to ensure it is
initialized": it imports and installs every lowering registry (~0.15-0.3 s on the first
load of a process), which only compiling needs. Running machine code loaded from the cache
needs the C symbols it links to: numba's helpers and exception types (installed when the
context is created), its C math functions (likewise), the NRT runtime's
(``rtsys.initialize``, which numba does inside that refresh) and the hash secrets
(``numba.cpython.hashing``'s import). A kernel cache load does just those; a cache miss
compiles through numba's compiler, which refreshes everything itself, and any other
function's cache loads as numba does. Only for the numba releases this was checked against
(``LEAN_NUMBA``); ``SPECSIM_NUMBA_FULL_LOAD=1`` turns it off (the run is the same, bit for
bit; tests/test_numba_cache.py checks it in a fresh process).
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
    _cache_loads(caching, tuple(ours), lean=lean_load())
    _installed = True
    return True


#: numba releases whose cache loads were checked to need no more than the lean load installs
#: (0.60-0.67 create the NRT in the context's init; 0.68 in its refresh, which the lean load
#: calls); a later numba loads as numba does until it is checked
LEAN_NUMBA = ((0, 60), (0, 68))


def lean_load() -> bool:
    """Whether kernel functions load from the cache without numba's full refresh: a numba
    release in ``LEAN_NUMBA`` and no ``SPECSIM_NUMBA_FULL_LOAD``."""
    if os.environ.get("SPECSIM_NUMBA_FULL_LOAD"):
        return False
    try:
        import numba

        version = tuple(int(x) for x in numba.__version__.split(".")[:2])
    except (ImportError, ValueError):
        return False
    return LEAN_NUMBA[0] <= version <= LEAN_NUMBA[1]


def _cache_loads(caching, ours: tuple[type, ...], lean: bool) -> None:
    """Load the kernel's cached functions without numba's full context refresh where
    ``lean`` (module docstring); every other cache loads as numba does. Either way after
    ``_skip_blas_probe``. Nothing where numba's internals are not as expected."""
    cache = getattr(caching, "Cache", None)
    numba_load = getattr(cache, "load_overload", None)
    if numba_load is None or not hasattr(cache, "_load_overload") \
            or not hasattr(cache, "_guard_against_spurious_io_errors"):
        return
    try:
        from numba.core.runtime import rtsys
    except ImportError:
        return

    def load_overload(self, sig, target_context):
        _skip_blas_probe()  # a cached function's environments import numba.np.arraymath
        locator = getattr(getattr(self, "_impl", None), "locator", None)
        if not (lean and isinstance(locator, ours)):
            return numba_load(self, sig, target_context)
        rtsys.initialize(target_context)  # the NRT's symbols (numba does it in the refresh)
        import numba.cpython.hashing  # noqa: F401  (its import installs the hash secrets)
        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)

    cache.load_overload = load_overload


def _skip_blas_probe() -> None:
    """Import ``numba.np.arraymath`` (numba's context refresh does, and so does loading a
    cached function whose environments name it) without its BLAS probe importing
    ``scipy.linalg`` (~0.2 s): the probe only decides how ``np.dot`` and the like compile,
    which this kernel does not use; it is answered from ``find_spec`` instead, and numba's
    own ``ensure_blas`` is put back for anything compiled later. (A cache miss comes through
    the load hook first, so the compile that follows finds arraymath imported.)"""
    import importlib.util
    import sys

    if "numba.np.arraymath" in sys.modules:
        return
    try:
        import numba.np.linalg as linalg
    except (ImportError, OSError):
        return
    probe = getattr(linalg, "ensure_blas", None)
    if probe is None:
        return

    def ensure_blas() -> None:
        if importlib.util.find_spec("scipy") is None:
            raise ImportError("scipy 0.16+ is required for linear algebra")

    linalg.ensure_blas = ensure_blas
    try:
        import numba.np.arraymath  # noqa: F401
    finally:
        linalg.ensure_blas = probe


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
