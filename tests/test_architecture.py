"""The architecture holds: one import name, no cycles, arrows one way, a light start-up."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

PACKAGES = {"simulator": "specsim.simulator", "cost_models": "specsim.cost_models",
            "traces": "specsim.traces"}


def modules() -> dict[str, Path]:
    out = {}
    for folder, name in PACKAGES.items():
        for path in (REPO / folder).rglob("*.py"):
            parts = list(path.relative_to(REPO / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([name, *parts])] = path
    return out


def imports_of(path: Path, known: set[str]) -> set[str]:
    """specsim modules a file imports at module level (not inside functions).

    ``from pkg import mod`` is an edge to ``pkg.mod``, not to ``pkg`` itself.
    """
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = {f"{node.module}.{a.name}" for a in node.names} & known
            found |= subs or {node.module}
    return {m for m in found if m in known}


def test_nothing_imports_the_old_top_level_names():
    for path in [*REPO.glob("simulator/**/*.py"), *REPO.glob("cost_models/**/*.py"),
                 *REPO.glob("traces/**/*.py"), *REPO.glob("tests/*.py"),
                 *REPO.glob("benchmarks/*.py")]:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0
                     and node.module else [])
            for n in names:
                assert n.split(".")[0] not in PACKAGES, f"{path}: imports {n}"


def test_cost_models_and_traces_never_import_the_simulator():
    for name, path in modules().items():
        if name.startswith(("specsim.cost_models", "specsim.traces")):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module:
                    assert not node.module.startswith("specsim.simulator"), f"{path}"


def test_no_import_cycles():
    mods = modules()
    known = set(mods)
    graph = {m: {d for d in imports_of(p, known) if d != m} for m, p in mods.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in graph[m]:
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(d):] + [d]))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m)


def test_help_imports_nothing_heavy():
    """`specsim --help` stays fast: no numpy, pandas, scipy, simpy, matplotlib or rich."""
    code = ("import sys\nfrom specsim.simulator.cli import build_parser\nbuild_parser()\n"
            "heavy = [m for m in ('numpy', 'pandas', 'scipy', 'simpy', 'matplotlib', 'rich', "
            "'pydantic', 'torch') if m in sys.modules]\nprint(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, check=True).stdout.strip()
    assert out == "", f"importing the CLI pulls in: {out}"
