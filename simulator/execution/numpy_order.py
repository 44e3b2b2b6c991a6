"""numpy's float rules as numba compiles them, written once: the pairwise sum of
``ndarray.sum`` (``total``) and the NaN rules of ``np.maximum`` / ``np.minimum``.

The compiled kernel (kernel_jit.py) sums floats where the ledger and the drafters' pricing
(numpy) sum them; to give the same bits it must add them in numpy's order. This module is
the one mirror of that order; tests/test_kernel_compiled.py checks it against numpy.
"""

from __future__ import annotations

from types import FunctionType

import numpy as np

from specsim.cost_models.pass_rule import nanmax

try:
    import numba

    from specsim import numba_cache

    numba_cache.install()  # one cache key for every file of the compiled kernel
    WHY_NOT = ""
except (ImportError, OSError) as exc:  # a core dependency; without it (or where its LLVM
    # library cannot be loaded, e.g. under a small address-space limit) every kernel
    # function runs as Python source
    numba = None
    WHY_NOT = f"{type(exc).__name__}: {exc}"[:160]

#: how every compiled function of the kernel is compiled (cached on disk)
JIT = {"cache": True, "error_model": "numpy", "nogil": True}


def njit(**options):
    """numba's ``njit(**options)``; where numba is missing, the function as written."""
    return numba.njit(**options) if numba is not None else (lambda fn: fn)


def jit(fn):
    """A kernel function compiled as every one is (``JIT``); see ``pure`` for the other way
    to run it."""
    return njit(**JIT)(fn)


_PURE: dict[int, dict] = {}  # id of a module's globals -> the same names, pure-Python


def pure(fn):
    """The pure-Python version of a kernel function: numba's ``py_func`` (the very source
    numba compiles), whose calls to other kernel functions go to their pure-Python versions
    too. ``simulation.compiled: false`` (or no numba) and a plug-in whose Python hook runs
    inside a kernel loop run these; same source, same float operations in the same order,
    so the same bits (numpy scalars wrap uint64 as numba does: call them under
    ``np.errstate(over="ignore")``)."""
    py = getattr(fn, "py_func", fn)
    return FunctionType(py.__code__, _pure_globals(py.__globals__), py.__name__,
                        py.__defaults__, py.__closure__)


def _pure_globals(g: dict) -> dict:
    ns = _PURE.get(id(g))
    if ns is None:
        ns = _PURE[id(g)] = dict(g)
        for name, v in g.items():
            if hasattr(v, "py_func"):  # a numba dispatcher
                ns[name] = pure(v)
    return ns


@njit(**JIT)
def _block(a, lo, n):
    """numpy's pairwise sum of at most 128 values: 8 accumulators, then the rest in order."""
    if n < 8:
        res = 0.0
        for i in range(n):
            res += a[lo + i]
        return res
    r0 = a[lo]
    r1 = a[lo + 1]
    r2 = a[lo + 2]
    r3 = a[lo + 3]
    r4 = a[lo + 4]
    r5 = a[lo + 5]
    r6 = a[lo + 6]
    r7 = a[lo + 7]
    i = 8
    stop = n - (n % 8)
    while i < stop:
        r0 += a[lo + i]
        r1 += a[lo + i + 1]
        r2 += a[lo + i + 2]
        r3 += a[lo + i + 3]
        r4 += a[lo + i + 4]
        r5 += a[lo + i + 5]
        r6 += a[lo + i + 6]
        r7 += a[lo + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


@njit(**JIT)
def _pairwise(a, lo, n):
    """numpy's pairwise summation of a[lo:lo + n] (``DOUBLE_pairwise_sum``: blocks of at most
    128 values, longer runs split in two at a multiple of 8), so that
    ``0.0 + _pairwise(a, 0, n)`` equals ``a.sum()`` bit for bit. numpy recurses; this walks
    the same tree with a stack (numba's on-disk cache does not keep recursive functions)."""
    if n <= 128:
        return _block(a, lo, n)
    s_lo = np.empty(64, np.int64)
    s_n = np.empty(64, np.int64)
    s_stage = np.zeros(64, np.int64)
    s_left = np.empty(64)
    s_lo[0], s_n[0] = lo, n
    sp = 1
    ret = 0.0
    while sp > 0:
        top = sp - 1
        lo_, n_ = s_lo[top], s_n[top]
        if n_ <= 128:
            ret = _block(a, lo_, n_)
            sp -= 1
            continue
        n2 = n_ // 2
        n2 -= n2 % 8
        if s_stage[top] == 0:
            s_stage[top] = 1
            s_lo[sp], s_n[sp], s_stage[sp] = lo_, n2, 0
            sp += 1
        elif s_stage[top] == 1:
            s_left[top] = ret
            s_stage[top] = 2
            s_lo[sp], s_n[sp], s_stage[sp] = lo_ + n2, n_ - n2, 0
            sp += 1
        else:
            ret = s_left[top] + ret
            sp -= 1
    return ret


@njit(**JIT)
def total(a, lo, n):
    """``float(a[lo:lo + n].sum())`` (the reduction starts from add's identity, 0.0)."""
    return 0.0 + _pairwise(a, lo, n)


# np.maximum of two floats (NaN wins): written once, with the pass rule that needs it too
maximum = nanmax


@njit(**JIT)
def minimum(x, y):
    """np.minimum of two floats (NaN wins)."""
    if x != x:
        return x
    if y != y:
        return y
    return x if x <= y else y
