"""The shape of the package: data flows one way (no import cycles), and the engine
knows nothing about pytest.

The import graph is read from the source with ``ast`` -- relative and absolute
imports, at module level and inside functions alike (a deferred import is still a
dependency; it only hides the cycle from the interpreter).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest_fxtrace

PACKAGE = Path(pytest_fxtrace.__file__).parent
NAME = "pytest_fxtrace"

# The pytest-facing layer: these modules may import pytest and each other. Everything
# else is the engine, usable from a plain script (check_traceable, recursive_trace).
PYTEST_FACING = frozenset(
    {
        "plugin",  # the hooks and the fixture
        "hookspecs",  # pluggy hookspecs
        "_session",  # the session's records, xdist merging, the terminal summary
        "_snapshot_session",  # golden files held per test, the orphan ledger
        "baseline",  # --fx-baseline: pytest options and the controller's file
        "zoo",  # --fx-zoo: one pytest item per registry model
        "isolate",  # --fx-isolate: checks in child processes, as pytest items
        "_items",  # what the plugin and the zoo items share (options, seams, recording)
        "testing",  # pytester helpers for the project's own tests
    }
)
FORBIDDEN = ("pytest", "_pytest", "pluggy")


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    parts = [part for part in rel.parts if part != "__init__"]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module an ``ImportFrom`` names, relative to the package."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if module else []
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
    prefix = ".".join([NAME, *base]) if base else NAME
    return f"{prefix}.{node.module}" if node.module else prefix


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """Everything ``module`` imports: our modules by their name inside the package
    (``"check"``, ``"backends.fx"``), and outside ones by their top-level name."""
    found: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    is_package = path.name == "__init__.py"

    def ours(absolute: str) -> str | None:
        if absolute == NAME:
            return ""
        if absolute.startswith(NAME + "."):
            return absolute[len(NAME) + 1 :]
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                inner = ours(alias.name)
                found.add(inner if inner is not None else alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            absolute = _resolve(module, is_package, node)
            inner = ours(absolute)
            if inner is None:
                found.add(absolute.split(".")[0])
                continue
            for alias in node.names:  # `from . import check` imports a module
                candidate = f"{inner}.{alias.name}" if inner else alias.name
                found.add(candidate if candidate in known else inner)
    found.discard(module)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph = {}
    for module, path in modules.items():
        graph[module] = {name for name in imports_of(module, path, known) if name in known or name in FORBIDDEN}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of our modules (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return components


def test_the_import_graph_is_read_from_the_source() -> None:
    graph = import_graph()
    assert "plugin" in graph and "entry" in graph
    assert "pytest" in graph["plugin"]
    # imports inside functions count: plugin imports the engine's entry points lazily
    assert "entry" in graph["plugin"]


def test_no_module_imports_itself_back_through_others() -> None:
    cycles = _cycles(import_graph())
    assert cycles == [], "import cycles (each line: the modules of one cycle): " + "; ".join(
        " <-> ".join(c) for c in cycles
    )


def test_the_engine_imports_neither_pytest_nor_the_plugin() -> None:
    graph = import_graph()
    engine = {m: deps for m, deps in graph.items() if m.split(".")[0] not in PYTEST_FACING}
    assert engine, "no engine module found"
    bad = {
        module: sorted(deps & ({*FORBIDDEN} | PYTEST_FACING))
        for module, deps in engine.items()
        if deps & ({*FORBIDDEN} | PYTEST_FACING)
    }
    assert bad == {}, f"engine modules that import pytest or the pytest-facing layer: {bad}"


def test_every_pytest_facing_module_named_here_exists() -> None:
    existing = {m.split(".")[0] for m in _modules()}
    assert PYTEST_FACING - existing <= {"_items"}  # _items: where the plugin and zoo meet, if split out
