"""The architecture holds: one import name, no cycles, arrows one way, a light start-up."""

from __future__ import annotations

import ast
import itertools
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

PACKAGES = {"simulator": "specsim.simulator", "cost_models": "specsim.cost_models",
            "traces": "specsim.traces"}

#: Function-level imports allowed to close an import cycle, as (importer, imported): each
#: says why. Every other import, at any depth (module level or inside a function), counts
#: towards a cycle, because a lazy import is still an arrow between two modules: it only
#: moves the failure from start-up to the first call. The test checks that each entry still
#: exists and is only ever imported inside a function.
LAZY_ALLOWED: dict[tuple[str, str], str] = {}  # (importer, imported): why a cycle is allowed


def modules() -> dict[str, Path]:
    """Every specsim module by its import name: the three packages and ``specsim/*.py``."""
    out = {}
    for folder, name in PACKAGES.items():
        for path in (REPO / folder).rglob("*.py"):
            parts = list(path.relative_to(REPO / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([name, *parts])] = path
    for path in (REPO / "specsim").glob("*.py"):
        out["specsim" if path.stem == "__init__" else f"specsim.{path.stem}"] = path
    return out


def imports_of(name: str, path: Path, known: set[str]) -> dict[str, list[tuple[int, bool]]]:
    """specsim modules a file imports, anywhere in it: {module: [(line, at module level)]}.

    ``from pkg import mod`` is an edge to ``pkg.mod``, not to ``pkg`` itself; relative
    imports are resolved against the file's package.
    """
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, list[tuple[int, bool]]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            targets = ({f"{base}.{a.name}" for a in node.names} & known) or {base}
        else:
            continue
        for t in targets & known - {name}:
            found.setdefault(t, []).append((node.lineno, id(node) in top))
    return found


def _graph() -> tuple[dict[str, Path], dict[str, dict[str, list[tuple[int, bool]]]]]:
    mods = modules()
    known = set(mods)
    return mods, {m: imports_of(m, p, known) for m, p in mods.items()}


def test_imports_of_sees_function_level_and_relative_imports(tmp_path):
    pkg = tmp_path / "a"
    pkg.mkdir()
    (pkg / "m.py").write_text("from . import n\n\ndef f():\n    from .n import g\n"
                              "    import specsim.x\n    return g\n")
    found = imports_of("specsim.a.m", pkg / "m.py", {"specsim.a.n", "specsim.x"})
    assert found == {"specsim.a.n": [(1, True), (4, False)], "specsim.x": [(5, False)]}


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


def test_the_lazy_allow_list_is_current():
    """Each allowed edge still exists and is imported only inside functions."""
    _, graph = _graph()
    for (a, b), why in LAZY_ALLOWED.items():
        assert why, f"{a} -> {b}: say why it is allowed"
        sites = graph.get(a, {}).get(b)
        assert sites, f"{a} no longer imports {b}: drop it from LAZY_ALLOWED"
        assert not any(top for _, top in sites), f"{a} imports {b} at module level"


def test_no_import_cycles():
    """No cycle among specsim's modules, counting imports inside functions too."""
    mods, graph = _graph()
    edges = {m: {d for d in ds if (m, d) not in LAZY_ALLOWED} for m, ds in graph.items()}
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[str] = []

    def where(a: str, b: str) -> str:
        line, top = graph[a][b][0]
        return f"{mods[a].relative_to(REPO)}:{line}{'' if top else ' (in a function)'}"

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(edges[m]):
            if state.get(d) == 1:
                loop = stack[stack.index(d):] + [d]
                cycles.append(" -> ".join(loop) + "\n    " + "\n    ".join(
                    where(a, b) for a, b in itertools.pairwise(loop)))
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_help_imports_nothing_heavy():
    """`specsim --help` stays fast: no numpy, pandas, scipy, simpy, matplotlib or rich."""
    code = ("import sys\nfrom specsim.simulator.cli import build_parser\nbuild_parser()\n"
            "heavy = [m for m in ('numpy', 'pandas', 'scipy', 'simpy', 'matplotlib', 'rich', "
            "'pydantic', 'torch') if m in sys.modules]\nprint(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, check=True).stdout.strip()
    assert out == "", f"importing the CLI pulls in: {out}"
