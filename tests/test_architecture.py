"""The shape of the package, read from paths: data flows one way (no import cycles, no
import up a layer), and nothing but the plugin layer knows pytest.

The layers, bottom up, are the folders (docs/development.md draws them):

0. the core: ``pytest_fxtrace/*.py``, ``snapshot/`` and the backend seam
   (``backends/base.py``, the registry ``backends/__init__.py``);
1. the backends: ``backends/<name>/``, each a folder that imports the core and no other
   backend's folder;
2. ``report/`` (the formats) and ``zoo/`` (registries, the isolated child's engine half),
   which import the layers below and not each other;
3. ``plugin/`` (everything that imports pytest) and the public pytester helpers
   ``testing.py``.

The package's faces -- ``__init__.py`` (the public names) and ``merge.py`` (``python -m
pytest_fxtrace.merge``) -- only hand on names from the layers and are outside them.

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
FACES = frozenset({"", "merge"})
FORBIDDEN = ("pytest", "_pytest", "pluggy")
# a backend built on another, as torch builds it: torch.onnx.export(dynamo=True) converts
# torch.export's program, so the ONNX backend is the export backend's capture, then a conversion
BUILT_ON = frozenset({("backends.onnx", "backends.export")})


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


def layer(module: str) -> tuple[int, str]:
    """(rank, room) of one of our modules, from its path alone."""
    parts = module.split(".")
    if parts[0] == "plugin" or module == "testing":
        return 3, "plugin"
    if parts[0] in ("report", "zoo"):
        return 2, parts[0]
    path = _modules()[module]
    inside = path.relative_to(PACKAGE).parts
    if inside[0] == "backends" and len(inside) > 2:  # backends/<name>/...: a backend's folder
        return 1, f"backends.{inside[1]}"
    return 0, "core"


def test_the_import_graph_is_read_from_the_source() -> None:
    graph = import_graph()
    assert "plugin" in graph and "entry" in graph
    assert "pytest" in graph["plugin"]
    # imports inside functions count: the plugin imports the engine's entry points lazily
    assert "entry" in graph["plugin"]


def test_the_layers_are_read_from_paths() -> None:
    assert layer("check") == (0, "core")
    assert layer("backends.base") == (0, "core")
    assert layer("snapshot.storage") == (0, "core")
    assert layer("backends.fx") == (1, "backends.fx")
    assert layer("backends.export.shapes") == (1, "backends.export")
    assert layer("report.html") == (2, "report")
    assert layer("zoo.registries") == (2, "zoo")
    assert layer("plugin.session") == (3, "plugin")


def test_no_module_imports_itself_back_through_others() -> None:
    cycles = _cycles(import_graph())
    assert cycles == [], "import cycles (each line: the modules of one cycle): " + "; ".join(
        " <-> ".join(c) for c in cycles
    )


def test_no_import_runs_up_a_layer_or_across_to_a_sibling() -> None:
    graph = import_graph()
    wrong = []
    for module, deps in sorted(graph.items()):
        if module in FACES:
            continue
        rank, room = layer(module)
        for dep in sorted(deps - set(FORBIDDEN)):
            if dep in FACES:
                wrong.append(f"{module} -> {dep} (a face: import the module that defines the name)")
                continue
            dep_rank, dep_room = layer(dep)
            if dep_rank > rank:
                wrong.append(f"{module} ({room}) -> {dep} ({dep_room}): up a layer")
            elif dep_rank == rank and dep_room != room and (room, dep_room) not in BUILT_ON:
                wrong.append(f"{module} ({room}) -> {dep} ({dep_room}): across to a sibling")
    assert wrong == []


def test_nothing_outside_the_plugin_layer_imports_pytest() -> None:
    graph = import_graph()
    bad = {
        module: sorted(deps & set(FORBIDDEN))
        for module, deps in graph.items()
        if deps & set(FORBIDDEN) and layer(module)[1] != "plugin"
    }
    assert bad == {}, f"modules outside plugin/ (and testing.py) that import pytest: {bad}"


def test_the_plugin_layer_is_where_pytest_is_imported() -> None:
    graph = import_graph()
    assert {"pytest"} <= graph["plugin"] and {"pytest"} <= graph["plugin.zoo"]


# the string that names a backend in code: a built-in backend's name, as a constant
BACKEND_NAMES = frozenset({"fx", "export", "export-strict", "compile"})
# where the core may name one: the default of a check that names none, said by the registry
# and by the snapshot package (which imports nothing outside itself)
NAMES_THE_DEFAULT = frozenset({"backends.spec", "snapshot.naming"})


def _named_backends(path: Path) -> list[str]:
    """``line: 'name'`` for each string constant in ``path`` that is a backend's name,
    outside docstrings and outside ``getattr(obj, "name")`` (a torch attribute)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            skipped.add(id(body[0].value))  # a docstring
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr"):
            skipped.update(id(arg) for arg in node.args[1:2])
    return [
        f"{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in BACKEND_NAMES and id(node) not in skipped
    ]


def test_the_core_names_no_backend() -> None:
    """A backend is one folder: options, the check, snapshots, reports and the plugin ask
    the registry (backends/spec.py) for a backend's availability, options, snapshot title
    and words, so that a new backend (or a third party's) plugs in without an edit there.
    (zoo/ is left out: a registry's knowledge of the models, e.g. transformers' HFTracer
    for the fx backend.)"""
    named = {}
    for module, path in _modules().items():
        rank, room = layer(module)
        if module in FACES or module in NAMES_THE_DEFAULT or room == "zoo" or rank == 1:
            continue
        found = _named_backends(path)
        if found:
            named[module] = found
    assert named == {}, f"core modules that name a backend (ask backends.spec instead): {named}"


def test_the_snapshot_package_knows_the_registry_s_default_backend() -> None:
    from pytest_fxtrace.backends import spec
    from pytest_fxtrace.snapshot import naming

    assert naming.DEFAULT_BACKEND == spec.DEFAULT_BACKEND and naming.SUFFIX == f".{spec.DEFAULT_BACKEND}.txt"


def test_the_architecture_test_sees_a_backend_named_in_code(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text('"""backend="fx" in a docstring is fine."""\nx = getattr(t, "export")\nif b == "compile":\n    pass\n')
    assert _named_backends(path) == ["3: 'compile'"]


def draw() -> str:
    """The import graph by layer, one module a line with what it imports of ours;
    an arrow up a layer or across to a sibling would be marked ``<-- WRONG``."""
    graph = import_graph()
    lines = []
    names = {0: "core", 1: "backends", 2: "report / zoo", 3: "plugin"}
    for rank in sorted(names):
        lines.append(f"== layer {rank}: {names[rank]}")
        for module in sorted(m for m in graph if m not in FACES and layer(m)[0] == rank):
            deps = []
            for dep in sorted(graph[module]):
                if dep in FORBIDDEN:
                    deps.append(dep)
                    continue
                wrong = dep in FACES or layer(dep)[0] > rank or (
                    layer(dep)[0] == rank and layer(dep)[1] != layer(module)[1]
                )
                deps.append(f"{dep} <-- WRONG" if wrong else dep)
            lines.append(f"  {module or '__init__'} -> {', '.join(deps) or '-'}")
    return "\n".join(lines)


if __name__ == "__main__":  # python tests/test_architecture.py: the graph, by layer
    print(draw())
