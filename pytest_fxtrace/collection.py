"""What localization found, as data: each module's record (``ModuleRecord``), the
collection of traced regions with coverage and the per-module table
(``GraphCollection``), and a model's module tree (``module_tree``: ``types.ModuleNode``s).

Knows modules, paths and statuses; knows nothing of tracers, the check or pytest:
``backends/fx/localize.py`` and ``backends/export/localize.py`` fill it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any, Protocol

import torch
import torch.fx

from pytest_fxtrace._compat import module_stores
from pytest_fxtrace.state import named_modules
from pytest_fxtrace.types import Diagnosis, Location, ModuleNode, ModuleStatus, NodeFailure, public_id


@dataclasses.dataclass
class ModuleRecord:
    """What localization learned about one submodule."""

    path: str  # qualified path, "" for the root
    type_name: str
    status: ModuleStatus
    region: str | None = None  # the traced region (a GraphCollection key) holding it
    # a Diagnosis, or what computes it on first access: locating and classifying a
    # failure reads source and parses it, which a caller asking only *which* modules
    # fail never needs
    _diagnosis: Diagnosis | Callable[[], Diagnosis] | None = dataclasses.field(default=None, repr=False)

    @property
    def diagnosis(self) -> Diagnosis | None:
        if callable(self._diagnosis):
            self._diagnosis = self._diagnosis()
        return self._diagnosis

    @diagnosis.setter
    def diagnosis(self, value: Diagnosis | Callable[[], Diagnosis] | None) -> None:
        self._diagnosis = value

    @property
    def is_failed(self) -> bool:
        return self.status == ModuleStatus.FAILED

    @property
    def is_unvisited(self) -> bool:
        return self.status == ModuleStatus.UNVISITED

    @property
    def failure_msg(self) -> str | None:
        return self.diagnosis.error if self.diagnosis else None

    @property
    def label(self) -> str:
        return f"{self.path or '<root>'} ({self.type_name})"


class LazyGraph(Protocol):
    """A captured region's graph, built when first asked for (localize's regions)."""

    def get(self) -> torch.fx.GraphModule: ...


class GraphCollection:
    """Per-module tracing results of ``recursive_trace``.

    Keys are submodule paths (``""`` is the root); ``is_failed``, ``failure_msg`` and
    ``is_unvisited`` take a path or the module itself, like modelopt's.

    Example::

        collection = recursive_trace(model, args=(x,))
        collection.coverage, [r.path for r in collection.deepest_failures()]
    """

    def __init__(
        self,
        model: torch.nn.Module,
        records: dict[str, ModuleRecord],
        graphs: Mapping[str, LazyGraph],
        seconds: float = 0.0,
        *,
        paths: Mapping[torch.nn.Module, str] | None = None,
        claims: Claims | None = None,
        verb: str = "traced",
    ) -> None:
        """``records`` holds every module's record; or, with ``claims``, only those
        localization wrote: the others are made on first use, for each module of
        ``paths`` (``{module: path}`` of every module, in order; the model's own
        ``named_modules`` when not given). ``verb``: what the summary says a captured
        module did (``"exported"`` for torch.export)."""
        self.verb = verb
        self.graphs = graphs
        self.seconds = seconds
        self.model_name = type(model).__name__
        self._module_paths = paths if paths is not None else module_paths(model)
        if claims is None:
            self.records = records
        else:
            self._written, self._claims = records, claims
        # each module's own parameters, as they are now (coverage is computed on first use)
        self._params = {name: list(ps.values()) for m, name in self._module_paths.items() if (ps := module_stores(m)[0])}

    @functools.cached_property
    def records(self) -> dict[str, ModuleRecord]:
        """Every module's record, keyed by path, in ``named_modules`` order."""
        written, claims = self._written, self._claims
        records = {}
        for module, path in self._module_paths.items():
            record = written.get(path)
            if record is None:
                status, region = claims.status(path)
                record = ModuleRecord(path, type(module).__name__, status, region)
            records[path] = record
        for path, record in written.items():  # a module reached under a path of its own (``_fx_path``)
            records.setdefault(path, record)
        return records

    @functools.cached_property
    def _coverage_pair(self) -> tuple[float, str]:
        return self._coverage()

    @property
    def coverage(self) -> float:
        """Share of the parameters the recorded call reached that are in graphs that
        were captured (``is_covered``); for a parameter-free model, of the modules it
        reached. The same definition for every backend; ``unreached()`` lists what
        the call never reached, which the share leaves out."""
        return self._coverage_pair[0]

    @property
    def coverage_basis(self) -> str:
        """``"parameters"`` or ``"modules"``: what ``coverage`` counts."""
        return self._coverage_pair[1]

    def unreached(self) -> list[ModuleRecord]:
        """What ``coverage`` leaves out: the outermost modules the recorded call never
        reached whose parameters it never reached either (any module never reached, for
        a parameter-free model). A container that is never called itself (a
        ``ModuleList``) is not listed while the call reached a module inside it."""
        counted = list(self._params) if self.coverage_basis == "parameters" else list(self.records)
        found: list[ModuleRecord] = []
        for record in self.records.values():
            if record.status != ModuleStatus.UNUSED or any(is_under(record.path, r.path) for r in found):
                continue
            inside = [path for path in counted if is_under(path, record.path)]
            if inside and all(self.records[path].status == ModuleStatus.UNUSED for path in inside):
                found.append(record)
        return found

    def _path(self, key: str | torch.nn.Module) -> str:
        if isinstance(key, str):
            return key
        return self._module_paths[key]

    def __iter__(self) -> Iterator[str]:
        yield from self.graphs

    def __getitem__(self, key: str | torch.nn.Module) -> torch.fx.GraphModule:
        return self.graphs[self._path(key)].get()

    def __contains__(self, key: str | torch.nn.Module) -> bool:
        return self._path(key) in self.graphs

    def is_failed(self, key: str | torch.nn.Module) -> bool:
        return self.records[self._path(key)].is_failed

    def failure_msg(self, key: str | torch.nn.Module) -> str | None:
        return self.records[self._path(key)].failure_msg

    def is_unvisited(self, key: str | torch.nn.Module) -> bool:
        return self.records[self._path(key)].is_unvisited

    def failed(self) -> list[ModuleRecord]:
        return [r for r in self.records.values() if r.is_failed]

    def deepest_failures(self) -> list[ModuleRecord]:
        """Failing modules none of whose descendants fail: where to look first."""
        failed = self.failed()
        return [r for r in failed if not any(o is not r and is_under(o.path, r.path) for o in failed)]

    def traceable(self) -> list[ModuleRecord]:
        """The outermost modules inside graphs that traced (with everything inside them)."""
        ok = [r for r in self.records.values() if r.status in (ModuleStatus.TRACED, ModuleStatus.LEAF) and self.is_covered(r.path)]
        ok_paths = {r.path for r in ok}
        return [r for r in ok if not any(is_under(r.path, p) and p != r.path for p in ok_paths)]

    def is_covered(self, key: str | torch.nn.Module) -> bool:
        """Whether a module is in a captured graph: it traced (or exported), on its own or
        within a region's trace, or it is a leaf (or inside one) whose call a region's
        trace got through: counted as export counts what a failing export got through.
        A leaf no trace reached (a failing module's child that could not be traced on
        its own) is in no graph."""
        record = self.records.get(self._path(key))
        if record is None:
            return False
        if record.status == ModuleStatus.LEAF:
            return record.region is not None
        return record.status == ModuleStatus.TRACED

    def _coverage(self) -> tuple[float, str]:
        # id(parameter) -> (numel, in a captured graph): a parameter shared by several
        # modules counts once, as reached when one of them was, covered when one is
        reached: dict[int, tuple[int, bool]] = {}
        for path, params in self._params.items():
            record = self.records.get(path)
            if record is None or record.status == ModuleStatus.UNUSED:
                continue
            inside = self.is_covered(path)
            for p in params:
                if p is not None:
                    numel, covered = reached.get(id(p), (p.numel(), False))
                    reached[id(p)] = (numel, covered or inside)
        total = sum(numel for numel, _ in reached.values())
        if total:
            return sum(numel for numel, covered in reached.values() if covered) / total, "parameters"
        used = [r for r in self.records.values() if r.status != ModuleStatus.UNUSED]
        if not used:
            return 0.0, "modules"
        return sum(self.is_covered(r.path) for r in used) / len(used), "modules"

    def table(self, limit: int | None = None) -> str:
        """One line per module: status, class, and for failures where and why."""
        lines = []
        for record in self.records.values():
            if record.status == ModuleStatus.UNUSED:
                continue
            depth = record.path.count(".") + (1 if record.path else 0)
            line = f"{'  ' * depth}{record.path or '<root>'} ({record.type_name}): {record.status}"
            diag = record.diagnosis
            if diag is not None:
                where = f" at {diag.location}" if diag.location else ""
                line += f" [{diag.category}]{where}"
            lines.append(line)
        if limit is not None and len(lines) > limit:
            lines = lines[:limit] + [f"... {len(lines) - limit} more modules"]
        return "\n".join(lines)

    def summary(self) -> str:
        """What coverage measures, what was captured and what the call never reached:
        '62% of the parameters the call reached are in graphs that traced (the root's
        own forward failed); traced: backbone (BackboneWithFPN), ...; not reached:
        aux_head (Linear)'"""
        verb = self.verb
        text = coverage_text(self.coverage, self.coverage_basis, verb)
        if self.records[""].status == ModuleStatus.TRACED:
            text += f" (the root {verb}, with the failing modules as leaves)"
        else:
            # in the failing root's own trace, up to the failure, or on their own
            ok = [r for r in self.traceable() if r.path]
            captured = f"{verb}: {_names(ok)}" if ok else f"no submodule {verb}"
            text += f" (the root's own forward failed); {captured}"
        unreached = self.unreached()
        return f"{text}; not reached: {_names(unreached)}" if unreached else text


def coverage_text(share: float, basis: str | None = "parameters", verb: str = "traced") -> str:
    """How coverage reads, the same for every backend (``verb``: what a captured module
    did, ``"exported"`` for torch.export; ``basis`` None: not known).

    Example::

        coverage_text(0.5)  # '50% of the parameters the call reached are in graphs that traced'
    """
    graphs = "graphs that traced" if verb == "traced" else f"{verb} graphs"
    if basis is None:
        return f"{percent(share)} of what the call reached is in {graphs}"
    what = "parameters the call reached" if basis == "parameters" else "modules the call reached (it has no parameters)"
    return f"{percent(share)} of the {what} are in {graphs}"


def _names(records: list[ModuleRecord], shown: int = 4) -> str:
    more = f", +{len(records) - shown} more" if len(records) > shown else ""
    return ", ".join(r.label for r in records[:shown]) + more


def percent(share: float) -> str:
    """``share`` as a whole percentage, rounded down: 99.7 % is "99%", never "100%"."""
    return f"{math.floor(share * 100 + 1e-9)}%"


def module_paths(root: torch.nn.Module) -> dict[torch.nn.Module, str]:
    return {module: path for path, module in named_modules(root).items()}


def is_under(path: str, ancestor: str) -> bool:
    """Whether the module at ``path`` is the one at ``ancestor`` or inside it (every
    module is under the root, ``""``).

    Example::

        is_under("layer1.0.conv", "layer1"), is_under("layer10", "layer1")  # True, False
    """
    return ancestor == "" or path == ancestor or path.startswith(ancestor + ".")


def join_path(prefix: str, rel: str) -> str:
    return f"{prefix}.{rel}" if prefix and rel else prefix or rel


class Claims:
    """The status of a module no record was written for, resolved when asked: the
    first traced region (in order) that called it (its status there) or holds it
    inside one of its leaves; else unvisited -- or unused, when an eager run
    recorded which modules were called and it was not. (Localization itself writes
    records only for failures and the modules it traced or made leaves itself.)"""

    def __init__(self) -> None:
        # [prefix, {relative path: (status, module)} of the modules its trace called,
        #  its leaves as ("path.", ...) once needed]
        self.regions: list[list[Any]] = []
        self.called: Mapping[str, object] | None = None

    def add(self, prefix: str, seen: dict[str, tuple[ModuleStatus, torch.nn.Module]]) -> None:
        if seen:
            self.regions.append([prefix, seen, None])

    def status(self, path: str) -> tuple[ModuleStatus, str | None]:
        """(status, region) of ``path``."""
        for region in self.regions:
            prefix, seen, leaves = region
            if prefix:
                if not path.startswith(prefix) or path[len(prefix) : len(prefix) + 1] != ".":
                    continue
                hit = seen.get(path[len(prefix) + 1 :])
            else:
                hit = seen.get(path)
            if hit is not None:
                return hit[0], prefix
            if leaves is None:
                leaves = region[2] = tuple(join_path(prefix, rel) + "." for rel, (status, _) in seen.items() if status == ModuleStatus.LEAF)
            if path.startswith(leaves):  # inside a leaf counts as traced
                return ModuleStatus.LEAF, prefix
        if self.called is not None and path not in self.called:
            return ModuleStatus.UNUSED, None
        return ModuleStatus.UNVISITED, None


def module_tree(
    model: torch.nn.Module,
    collection: GraphCollection | None = None,
    graph_module: torch.fx.GraphModule | None = None,
    failing: tuple[str, str | None, Location | None] | None = None,
    graphed: Collection[str] | None = None,
) -> tuple[ModuleNode, ...]:
    """Every module of ``model`` in ``named_modules`` order: its path, class name,
    status and parameter count (its own and its descendants'), and for a failing one
    its category and the user's line.

    The statuses are ``collection``'s (an untraceable model's localization), else
    read from ``graph_module`` (a traced one: its ``call_module`` targets are leaves,
    the modules its nodes came from traced, the rest never reached); ``failing``
    (path, category, location) marks where a traced model went wrong; ``graphed``, where
    given, the paths whose code ran in a graph (``Backend.graphed_modules``: every graph
    torch.compile made), traced with their ancestors, instead of ``graph_module``'s.

    Example::

        module_tree(model, graph_module=gm)[1]
        # ModuleNode(path="lin", type="Linear", status=ModuleStatus.LEAF, params=20)
    """
    modules = named_modules(model)
    if collection is not None:
        records = collection.records
        statuses = {path: records[path].status if path in records else ModuleStatus.UNVISITED for path in modules}
    elif graphed is not None:
        statuses = dict.fromkeys(modules, ModuleStatus.UNVISITED)
        for path in graphed:
            parts = path.split(".") if path else []
            for depth in range(len(parts) + 1):  # it and its ancestors
                ancestor = ".".join(parts[:depth])
                if ancestor in statuses:
                    statuses[ancestor] = ModuleStatus.TRACED
    else:
        statuses = _statuses_of(modules, graph_module)
    params = _parameter_counts(modules)
    tree = []
    for path, module in modules.items():
        status, failure = statuses[path], None
        diagnosis = records[path].diagnosis if collection is not None and status == ModuleStatus.FAILED else None
        if diagnosis is not None:
            failure = _failure(diagnosis.category, diagnosis.location)
        if failing is not None and failing[0] == path:  # where a traced model went wrong
            status, failure = ModuleStatus.FAILED, _failure(failing[1], failing[2])
        tree.append(ModuleNode(path, type(module).__name__, status, params[path], failure))
    return tuple(tree)


def _parameter_counts(modules: Mapping[str, torch.nn.Module]) -> dict[str, int]:
    """Each module's parameter count, its own and its descendants' (``modules`` in
    pre-order); a parameter shared by several modules counts once, where first met."""
    owned: set[int] = set()
    params = dict.fromkeys(modules, 0)
    for path, module in modules.items():
        own = 0
        for p in module_stores(module)[0].values():
            if p is not None and id(p) not in owned:
                owned.add(id(p))
                own += p.numel()
        if own:  # up the chain of ancestors (paths in pre-order: each parent is listed)
            parts = path.split(".") if path else []
            for depth in range(len(parts) + 1):
                ancestor = ".".join(parts[:depth])
                if ancestor in params:
                    params[ancestor] += own
    return params


def _failure(category: str | None, location: Location | None) -> NodeFailure:
    where = (str(location.path), int(location.line)) if location is not None else None
    return NodeFailure(public_id(category), where)


def _statuses_of(modules: Mapping[str, torch.nn.Module], gm: torch.fx.GraphModule | None) -> dict[str, ModuleStatus]:
    """Statuses from a traced graph: ``call_module`` targets are leaves (and what is
    inside them), modules a node was recorded in traced, the rest never reached."""
    statuses = dict.fromkeys(modules, ModuleStatus.UNVISITED)
    if gm is None:
        return statuses
    statuses[""] = ModuleStatus.TRACED
    leaves = set()
    for node in gm.graph.nodes:
        if node.op == "call_module":
            leaves.add(str(node.target))
        for key, value in (node.meta.get("nn_module_stack") or {}).items():
            # torch >= 2.2: {"path@call": (path, class)}; before: {path: class}
            path = value[0] if isinstance(value, tuple) else str(key).partition("@")[0]
            while path and statuses.get(path) == ModuleStatus.UNVISITED:  # it and its ancestors
                statuses[path] = ModuleStatus.TRACED
                path = path.rpartition(".")[0]
    for path in statuses:
        ancestor = path
        while ancestor:  # a leaf, or inside one
            if ancestor in leaves:
                statuses[path] = ModuleStatus.LEAF
                break
            ancestor = ancestor.rpartition(".")[0]
    return statuses


__all__ = ["Claims", "GraphCollection", "ModuleRecord", "coverage_text", "is_under", "join_path", "module_paths", "module_tree", "percent"]
