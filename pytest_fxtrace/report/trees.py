"""Module trees in their shared form: each distinct subtree stored once.

A model repeats its blocks (a ViT's identical encoder layers, a ResNet's bottlenecks), so
its module tree -- every module with its path, class, status and parameter count -- holds
the same subtree many times over. The shared form lists each distinct subtree once, as a
node that names its children and points at them::

    {"types": ["Net", "Block", "Linear"],
     "nodes": [[2, "t", 20, []], [1, "t", 20, ["lin", 0]], [0, "t", 40, ["a", 1, "b", 1]]]}

is a ``Net`` holding two identical ``Block`` s, ``a`` and ``b``, each holding a ``Linear``
``lin``: five modules, three nodes. A node is ``[type, status, params, children]``, then,
for a failing module, ``{"category", "location"}``: ``type`` indexes ``types``; ``status``
is one letter (``t`` traced, ``l`` leaf, ``f`` failed, ``u`` unvisited, ``n`` unused);
``children`` alternates a child's name and its node's index. A node's children come
before it, so the last node is the root. Nothing is lost: ``expand`` gives back every
module in ``named_modules`` order. On timm's models the JSON report's trees are 13 times
smaller this way (benchmarks/README.md, "A report that stays small").

The JSON report's ``"modules"`` and the HTML page's trees are in this form (the page's
type names and nodes are shared by all its checks). Pytest-free and torch-free.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pytest_fxtrace.types import ModuleNode, ModuleStatus, NodeFailure

STATUS_LETTERS = {
    ModuleStatus.TRACED: "t", ModuleStatus.LEAF: "l", ModuleStatus.FAILED: "f",
    ModuleStatus.UNVISITED: "u", ModuleStatus.UNUSED: "n",
}  # fmt: skip
_STATUSES = {letter: status for status, letter in STATUS_LETTERS.items()}


class Nodes:
    """A table of shared nodes: each distinct one stored once, by its index."""

    def __init__(self) -> None:
        self.nodes: list[list[Any]] = []
        self._index: dict[tuple[Any, ...], int] = {}

    def add(self, head: Sequence[Any], children: Sequence[Any], tail: Sequence[Any] = ()) -> int:
        """The index of the node ``[*head, children, *tail]``, stored if new."""
        # a tuple key: hashing it is ~20x cheaper than dumping the node (a tree has
        # hundreds); a failing module's tail holds a dict, dumped
        key = (*head, tuple(children), json.dumps(tail, sort_keys=True) if tail else "")
        found = self._index.get(key)
        if found is None:
            found = self._index[key] = len(self.nodes)
            self.nodes.append([*head, list(children), *tail])
        return found

    def share(self, rows: Iterable[tuple[int, str, Sequence[Any], Sequence[Any]]]) -> int | None:
        """The root's index of a tree given in pre-order as ``(depth, name, head, tail)``
        rows (the root at depth 0, each child one deeper than its parent): a node is
        ``[*head, children, *tail]``."""
        stack: list[tuple[int, str, Sequence[Any], Sequence[Any], list[Any]]] = []
        root = None

        def close() -> None:
            nonlocal root
            depth, name, head, tail, children = stack.pop()
            index = self.add(head, children, tail)
            if stack:
                stack[-1][4].extend([name, index])
            else:
                root = index

        for depth, name, head, tail in rows:
            while stack and stack[-1][0] >= depth:
                close()
            stack.append((depth, name, head, tail, []))
        while stack:
            close()
        return root


class Types:
    """Class names, each stored once, by index."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._index: dict[str, int] = {}

    def __call__(self, name: str) -> int:
        index = self._index.get(name)
        if index is None:
            index = self._index[name] = len(self.names)
            self.names.append(name)
        return index


def _failure_json(failure: NodeFailure) -> dict[str, Any]:
    where = failure.location
    return {"category": failure.category, "location": {"path": where[0], "line": where[1]} if where else None}


def _follows(path: str, depth: int, branch: Sequence[str]) -> bool:
    """Whether the module at ``path`` comes next in a pre-order walk of one tree, after
    ``branch`` (the paths from the root to the module before)."""
    if depth == 0:
        return not branch  # the root, and first
    return depth <= len(branch) and branch[depth - 1] == path.rpartition(".")[0]


def shared_json(modules: Sequence[ModuleNode]) -> dict[str, Any] | list[dict[str, Any]]:
    """``modules`` (``named_modules`` order) in the shared form; a list of the nodes'
    ``to_json`` where they are not one tree of paths in pre-order (never from
    ``module_tree``), which the shared form could not give back.

    Example::

        shared_json(report.modules)  # {"types": [...], "nodes": [...]}
    """
    types, table = Types(), Nodes()
    rows = []
    branch: list[str] = []  # the paths from the root to the module before
    for node in modules:
        depth = node.path.count(".") + 1 if node.path else 0
        if not _follows(node.path, depth, branch):
            return [node.to_json() for node in modules]
        del branch[depth:]
        branch.append(node.path)
        head = [types(node.type), STATUS_LETTERS[node.status], node.params]
        rows.append((depth, node.path.rpartition(".")[2], head, [_failure_json(node.failure)] if node.failure else []))
    table.share(rows)
    return {"types": types.names, "nodes": table.nodes}


def expand(document: Mapping[str, Any]) -> tuple[ModuleNode, ...]:
    """Every module of a shared tree, in ``named_modules`` order."""
    types, nodes = document["types"], document["nodes"]
    out: list[ModuleNode] = []
    if not nodes:
        return ()
    todo: list[tuple[str, int]] = [("", len(nodes) - 1)]
    while todo:
        path, index = todo.pop()
        node = nodes[index]
        failure = None
        if len(node) > 4:
            where = node[4].get("location")
            failure = NodeFailure(node[4].get("category"), (str(where["path"]), int(where["line"])) if where else None)
        out.append(ModuleNode(path, types[node[0]], _STATUSES[node[1]], int(node[2]), failure))
        children = node[3]
        for i in range(len(children) - 2, -1, -2):  # reversed: the first child is taken next
            todo.append((f"{path}.{children[i]}" if path else str(children[i]), children[i + 1]))
    return tuple(out)


def modules_from_json(value: Any) -> tuple[ModuleNode, ...] | None:
    """A JSON record's ``"modules"``: the shared form, or the list of nodes earlier
    releases wrote (and ``shared_json`` falls back to)."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        return expand(value)
    return tuple(ModuleNode.from_json(node) for node in value)


__all__ = ["STATUS_LETTERS", "Nodes", "Types", "expand", "modules_from_json", "shared_json"]
