"""The compiled kernel's on-disk cache is keyed to all of its files (specsim/numba_cache.py):
an edit to any one of them (pass_rule.py, say) recompiles every kernel function, where
numba's own key, the function's file alone, would keep running the old rule."""

from __future__ import annotations

import os
import shutil

import pytest

numba = pytest.importorskip("numba")

from specsim import numba_cache  # noqa: E402
from specsim.cost_models import pass_rule  # noqa: E402
from specsim.simulator.execution import kernel_jit, numpy_order, solo_jit  # noqa: E402


def test_the_stamp_covers_every_file(tmp_path):
    copies = []
    for p in numba_cache.KERNEL_SOURCES:
        dst = tmp_path / os.path.basename(p)
        shutil.copy(p, dst)
        copies.append(str(dst))
    before = numba_cache.stamp(tuple(copies))
    assert numba_cache.stamp(tuple(copies)) == before  # the same contents, the same stamp
    for path in copies:
        with open(path, "a") as f:
            f.write("\n# edited\n")
        after = numba_cache.stamp(tuple(copies))
        assert after != before, path
        before = after


def _dispatchers(module):
    return [v for v in vars(module).values() if hasattr(v, "py_func") and hasattr(v, "stats")]


def test_every_kernel_function_is_stamped_by_the_whole_kernel():
    assert numba_cache.install()
    mods = (pass_rule, numpy_order, kernel_jit, solo_jit)
    files = {os.path.realpath(p) for p in numba_cache.KERNEL_SOURCES}
    seen = 0
    for mod in mods:
        assert os.path.realpath(mod.__file__) in files
        for d in _dispatchers(mod):
            locator = d._cache._impl.locator
            assert os.path.realpath(d.py_func.__code__.co_filename) in files
            assert type(locator).__name__.startswith("Kernel"), (mod.__name__, d.__name__)
            assert locator.get_source_stamp() == numba_cache.stamp()
            seen += 1
    assert seen > 20


def test_every_file_that_compiles_is_a_kernel_source():
    """A module that defines compiled functions (a jit decorator) is in KERNEL_SOURCES."""
    import re
    from pathlib import Path

    root = Path(numba_cache.__file__).resolve().parents[1]
    files = {os.path.realpath(p) for p in numba_cache.KERNEL_SOURCES}
    pattern = re.compile(r"^\s*@(?:jit|_njit|njit|numba\.njit)\b|=\s*jit\(", re.M)
    found = [str(p) for pkg in ("simulator", "cost_models", "traces", "specsim")
             for p in (root / pkg).rglob("*.py") if pattern.search(p.read_text())]
    assert found
    assert {os.path.realpath(p) for p in found} <= files, sorted(set(found) - files)


_LEAN_PROBE = r"""
import json, sys
from numba.core.registry import cpu_target
from specsim.simulator.api import run_scenario
from specsim.simulator.execution import kernel_jit, solo_jit
calls = []
refresh = type(cpu_target.target_context).refresh
type(cpu_target.target_context).refresh = lambda self: (calls.append(1), refresh(self))[1]
r = run_scenario(sys.argv[1], overrides={"simulation.compiled": True,
                                         "workload.synthetic.requests": 300})
hits = sum(sum(d.stats.cache_hits.values()) for m in (kernel_jit, solo_jit)
           for d in vars(m).values() if hasattr(d, "py_func") and hasattr(d, "stats"))
print(json.dumps({"refreshes": len(calls), "hits": hits,
                  "csv": r.requests.to_csv(index=False)}))
"""


@pytest.mark.skipif(not numba_cache.install() or not numba_cache.lean_load(),
                    reason="numba's cache internals differ, or a numba release not in LEAN_NUMBA")
@pytest.mark.parametrize("name", ["chat", "pd_disaggregated"])
def test_a_cached_kernel_loads_lean_and_runs_the_same(name):
    """In a fresh process the kernel's cached functions load without numba's context refresh
    (issue 22's fixed cost) and the run is the same, bit for bit, as with numba's own load
    (``SPECSIM_NUMBA_FULL_LOAD=1``, which refreshes): one worker (the compiled solo loop)
    and two PD pools (SimPy calling the kernel's functions one by one)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scenarios" / f"{name}.yaml"
    env = {k: v for k, v in os.environ.items() if k != "SPECSIM_NUMBA_FULL_LOAD"}

    def probe(extra: dict) -> dict:
        out = subprocess.run([sys.executable, "-c", _LEAN_PROBE, str(path)], check=True,
                             capture_output=True, text=True, env={**env, **extra})
        return json.loads(out.stdout.strip().splitlines()[-1])

    probe({})  # compiles where the cache is cold (its compile refreshes, as numba does)
    lean = probe({})
    full = probe({"SPECSIM_NUMBA_FULL_LOAD": "1"})
    assert lean["hits"] >= 1 and full["hits"] >= 1  # both loaded from the cache
    assert lean["refreshes"] == 0
    assert full["refreshes"] >= 1
    assert lean["csv"] == full["csv"]
