"""Localization: which parts of a model trace, which fail, and how much of it traced.

``recursive_trace`` walks the model the way modelopt's does -- failing submodules
become leaves so the trace goes on past them -- but in one pass per traced region
instead of a retrace per new leaf: when a submodule's call raises, the nodes it
had added are taken out of the graph again and the call is recorded as a leaf
right there. When a module's *own* forward fails (the root included), each of
its children is traced on its own with the inputs the eager run gave it, so a
detection model still reports its backbone as traceable.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch
import torch.fx

from ._compat import children as module_children
from ._compat import is_lazy_graph_module, last_node, module_stores, node_erased
from .binding import EagerRecord, bind_call, record_eager
from .capture import ModelState, modules_of, named_modules, suspended
from .diagnose import diagnose_exception, failure_context
from .guards import collection_paused
from .options import TraceOptions, resolve_options
from .tracer import Tracer, _TracerFeatures, build_tracer, user_facing
from .types import Diagnosis, public_id


@dataclasses.dataclass
class ModuleRecord:
    """What localization learned about one submodule."""

    path: str  # qualified path, "" for the root
    type_name: str
    status: str  # one of MODULE_STATUSES
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
        return self.status == "failed"

    @property
    def is_unvisited(self) -> bool:
        return self.status == "unvisited"

    @property
    def failure_msg(self) -> str | None:
        return self.diagnosis.error if self.diagnosis else None

    @property
    def label(self) -> str:
        return f"{self.path or '<root>'} ({self.type_name})"


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
        graphs: dict[str, Any],
        seconds: float = 0.0,
        *,
        paths: Mapping[torch.nn.Module, str] | None = None,
        claims: _Claims | None = None,
    ) -> None:
        """``records`` holds every module's record; or, with ``claims``, only those
        localization wrote: the others are made on first use, for each module of
        ``paths`` (``{module: path}`` of every module, in order; the model's own
        ``named_modules`` when not given)."""
        self.graphs = graphs
        self.seconds = seconds
        self.model_name = type(model).__name__
        self._module_paths = paths if paths is not None else _module_paths(model)
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
        """Share of the used parameters (or modules, for a parameter-free model) inside graphs
        that traced (``is_covered``)."""
        return self._coverage_pair[0]

    @property
    def coverage_basis(self) -> str:
        """``"parameters"`` or ``"modules"``: what ``coverage`` counts."""
        return self._coverage_pair[1]

    def _path(self, key: Any) -> str:
        if isinstance(key, str):
            return key
        return self._module_paths[key]

    def __iter__(self) -> Iterator[str]:
        yield from self.graphs

    def __getitem__(self, key: Any) -> torch.fx.GraphModule:
        return self.graphs[self._path(key)].get()

    def __contains__(self, key: Any) -> bool:
        return self._path(key) in self.graphs

    def is_failed(self, key: Any) -> bool:
        return self.records[self._path(key)].is_failed

    def failure_msg(self, key: Any) -> str | None:
        return self.records[self._path(key)].failure_msg

    def is_unvisited(self, key: Any) -> bool:
        return self.records[self._path(key)].is_unvisited

    def failed(self) -> list[ModuleRecord]:
        return [r for r in self.records.values() if r.is_failed]

    def deepest_failures(self) -> list[ModuleRecord]:
        """Failing modules none of whose descendants fail: where to look first."""
        failed = self.failed()
        return [r for r in failed if not any(o is not r and _is_under(o.path, r.path) for o in failed)]

    def traceable(self) -> list[ModuleRecord]:
        """The outermost modules inside graphs that traced (with everything inside them)."""
        ok = [r for r in self.records.values() if r.status in ("traced", "leaf") and self.is_covered(r.path)]
        ok_paths = {r.path for r in ok}
        return [r for r in ok if not any(_is_under(r.path, p) and p != r.path for p in ok_paths)]

    def is_covered(self, key: Any) -> bool:
        """Whether a module sits inside a graph that traced: the nearest of itself and
        its ancestors that is not a leaf traced (its call completed, or its region's
        trace did). A leaf only counts inside such a graph: a leaf child of a failing
        module, or one called before the failing root gave up, is in no graph."""
        path = self._path(key)
        records = self.records
        while True:
            record = records.get(path)
            status = record.status if record is not None else "unvisited"
            if status != "leaf":
                return status == "traced"
            if not path:
                return False
            path = path.rpartition(".")[0]

    def _coverage(self) -> tuple[float, str]:
        seen: set[int] = set()
        total = covered = 0
        for path, params in self._params.items():
            record = self.records.get(path)
            if record is None or record.status == "unused":
                continue
            inside = self.is_covered(path)
            for p in params:
                if p is None or id(p) in seen:
                    continue
                seen.add(id(p))
                total += p.numel()
                if inside:
                    covered += p.numel()
        if total:
            return covered / total, "parameters"
        used = [r for r in self.records.values() if r.status != "unused"]
        if not used:
            return 0.0, "modules"
        return sum(self.is_covered(r.path) for r in used) / len(used), "modules"

    def table(self, limit: int | None = None) -> str:
        """One line per module: status, class, and for failures where and why."""
        lines = []
        for record in self.records.values():
            if record.status == "unused":
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
        """What coverage measures, and what traced: '62% of parameters are in graphs
        that traced (the root's own forward failed); traced on their own: backbone
        (BackboneWithFPN), ...'"""
        basis = self.coverage_basis
        if basis == "modules":
            basis = "modules (it has no parameters)"
        text = f"{percent(self.coverage)} of {basis} are in graphs that traced"
        if self.records[""].status == "traced":
            return f"{text} (the root traced, with the failing modules as leaves)"
        ok = [r for r in self.traceable() if r.path]
        names = ", ".join(r.label for r in ok[:4]) + (f", +{len(ok) - 4} more" if len(ok) > 4 else "")
        text += " (the root's own forward failed)"
        return f"{text}; traced on their own: {names}" if ok else f"{text}; no submodule traced on its own"


def percent(share: float) -> str:
    """``share`` as a whole percentage, rounded down: 99.7 % is "99%", never "100%"."""
    return f"{math.floor(share * 100 + 1e-9)}%"


def _module_paths(root: torch.nn.Module) -> dict[torch.nn.Module, str]:
    return {module: path for path, module in named_modules(root).items()}


def _is_under(path: str, ancestor: str) -> bool:
    return ancestor == "" or path == ancestor or path.startswith(ancestor + ".")


def _join(prefix: str, rel: str) -> str:
    return f"{prefix}.{rel}" if prefix and rel else prefix or rel


class _Claims:
    """The status of a module no record was written for, resolved when asked: the
    first traced region (in order) that called it (its status there) or holds it
    inside one of its leaves; else unvisited -- or unused, when an eager run
    recorded which modules were called and it was not. (Localization itself writes
    records only for failures and the modules it traced or made leaves itself.)"""

    def __init__(self) -> None:
        # [prefix, {relative path: (status, module)} of the modules its trace called,
        #  its leaves as ("path.", ...) once needed]
        self.regions: list[list[Any]] = []
        self.called: Mapping[str, Any] | None = None

    def add(self, prefix: str, seen: dict[str, tuple[str, torch.nn.Module]]) -> None:
        if seen:
            self.regions.append([prefix, seen, None])

    def status(self, path: str) -> tuple[str, str | None]:
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
                leaves = region[2] = tuple(_join(prefix, rel) + "." for rel, (status, _) in seen.items() if status == "leaf")
            if path.startswith(leaves):  # inside a leaf counts as traced
                return "leaf", prefix
        if self.called is not None and path not in self.called:
            return "unused", None
        return "unvisited", None


class _Localizing:
    """Installed on a tracer (as methods of the instance, over its class's): a
    submodule whose call raises is rolled out of the graph and recorded as a leaf,
    and tracing goes on. No class of its own: giving an instance another
    ``__class__`` costs more than a small region's trace (~100 k instructions)."""

    def __init__(
        self, tracer: torch.fx.Tracer, on_listed: Callable[[Iterable[torch.nn.Module]], None] | None = None
    ) -> None:
        self.tracer = tracer
        self.on_listed = on_listed  # told the modules once torch.fx listed them, before any forward runs
        self.failed: dict[str, tuple[BaseException, tuple[str, str | None, Any], torch.nn.Module]] = {}
        self.seen: dict[str, tuple[str, torch.nn.Module]] = {}  # path -> (status, module)
        self.leaf: dict[str, bool] = {}  # the tracer's own answer, per path
        self.param_cache: dict[str, Any] | None = None
        self.paths: dict[torch.nn.Module, str] | None = None  # torch.fx's {module: path} of the traced root
        # the tracer's own methods
        self.tracer_is_leaf_module = tracer.is_leaf_module
        self.tracer_call_module = tracer.call_module
        self.tracer_getattr = tracer.getattr
        self.tracer_create_args_for_root = tracer.create_args_for_root
        # path_of_module is torch.fx's (+ ours): submodule_paths answers it; and the
        # call_module after _TracerFeatures' (which would only pass an installed module on)
        plain_paths, plain_call = _plain(type(tracer))
        self.plain_paths = plain_paths
        self.plain_call = plain_call.__get__(tracer) if plain_call is not None else self.tracer_call_module
        vars(tracer).update(
            is_leaf_module=self.is_leaf_module, call_module=self.call_module, getattr=self.getattr,
            create_args_for_root=self.create_args_for_root,
        )  # fmt: skip

    def is_leaf_module(self, m: torch.nn.Module, module_qualified_name: str) -> bool:
        if module_qualified_name in self.failed:
            return True
        leaf = self.leaf[module_qualified_name] = self.tracer_is_leaf_module(m, module_qualified_name)
        return leaf

    def create_args_for_root(self, *args: Any, **kwargs: Any) -> Any:
        # torch.fx calls this once per trace, right after it listed the root's modules
        # (``submodule_paths``, which it drops again when the trace succeeds)
        self.paths = getattr(self.tracer, "submodule_paths", None)
        if self.on_listed is not None and self.paths:
            self.on_listed(self.paths)
            self.on_listed = None
        return self.tracer_create_args_for_root(*args, **kwargs)

    def getattr(self, attr: str, attr_val: Any, parameter_proxy_cache: dict[str, Any]) -> Any:
        self.param_cache = parameter_proxy_cache
        return self.tracer_getattr(attr, attr_val, parameter_proxy_cache)

    def call_module(
        self, m: torch.nn.Module, forward: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        tracer: Any = self.tracer
        paths = getattr(tracer, "submodule_paths", None) if self.plain_paths else None
        path = paths.get(m) if paths else None  # installed: the usual case, no lookup chain
        installed = path is not None
        if path is None:
            try:
                path = tracer.path_of_module(m)
            except NameError:
                return self.tracer_call_module(m, forward, args, kwargs)
        if path in self.failed:
            return self.tracer_call_module(m, forward, args, kwargs)
        graph: torch.fx.Graph = tracer.graph
        mark = last_node(graph)
        depth = len(tracer.module_stack)
        call = self.plain_call if installed else self.tracer_call_module
        try:
            out = call(m, forward, args, kwargs)
        except Exception as caught:
            exc = user_facing(caught)
            context = failure_context(tracer)  # diagnosed when asked for (ModuleRecord.diagnosis)
            self.rollback(mark, depth)
            # submodules whose calls completed before the failure did trace: their
            # statuses stay, so only the ones never reached are traced on their own
            self.failed[path] = (exc, context, m)
            return self.tracer_call_module(m, forward, args, kwargs)
        if path not in self.seen:
            leaf = self.leaf.get(path)  # asked by the tracer's call_module just now
            if leaf is None:
                leaf = self.tracer_is_leaf_module(m, path)
            self.seen[path] = ("leaf" if leaf else "traced", m)
        return out

    def rollback(self, mark: torch.fx.Node, depth: int) -> None:
        tracer: Any = self.tracer
        graph: torch.fx.Graph = tracer.graph
        while (node := last_node(graph)) is not None and node is not mark:
            for user in list(node.users):
                graph.erase_node(user)  # only later nodes use it; they are erased already
            graph.erase_node(node)
        module_stack = tracer.module_stack
        for key in list(module_stack)[depth:]:
            del module_stack[key]
        cache = self.param_cache
        if cache:
            for name, proxy in list(cache.items()):
                if node_erased(getattr(proxy, "node", None)):
                    del cache[name]


@functools.cache
def _plain(cls: type) -> tuple[bool, Callable[..., Any] | None]:
    """For a tracer class: whether its path_of_module is torch.fx's (with ours), and
    the call_module after _TracerFeatures' when nothing before it overrides one."""
    mro = cls.__mro__
    if _TracerFeatures in mro and not any("call_module" in vars(c) for c in mro[: mro.index(_TracerFeatures)]):
        return _only_torch_fx_and_ours(cls, "path_of_module"), cls._fx_next_call_module  # type: ignore[attr-defined]
    return False, None


def _only_torch_fx_and_ours(cls: type, *names: str) -> bool:
    """Whether no class of the tracer ``cls`` but torch.fx's and our features defines ``names``."""
    return all(c in (_TracerFeatures, torch.fx.Tracer) or vars(c).keys().isdisjoint(names) for c in cls.__mro__)


def _stores(module: torch.nn.Module) -> dict[str, dict[str, Any]]:
    return {
        "dict": module.__dict__, **dict(zip(("params", "buffers", "modules"), module_stores(module), strict=True)),
    }  # fmt: skip


def _added(module: torch.nn.Module, before: dict[str, set[str]]) -> dict[str, Any]:
    """Remove and return what tracing added to ``module`` (``_tensor_constant0``...)."""
    added = {}
    for name, store in _stores(module).items():
        for key in set(store) - before[name]:
            added[key] = store.pop(key)
    return added


class _LazyGraphModule:
    """A traced region; the GraphModule is built (and compiled) only when asked for:
    diagnosis needs the statuses, rarely the code."""

    def __init__(self, root: torch.nn.Module, graph: torch.fx.Graph, constants: dict[str, Any]) -> None:
        self.root, self.graph, self.constants = root, graph, constants
        self._gm: torch.fx.GraphModule | None = None

    def get(self) -> torch.fx.GraphModule:
        if self._gm is None:
            targets: dict[str, Any] = {}
            for node in self.graph.nodes:
                if node.op in ("get_attr", "call_module"):
                    target = str(node.target)
                    if target in self.constants:
                        targets[target] = self.constants[target]
                    else:
                        value: Any = self.root
                        for atom in target.split("."):
                            value = getattr(value, atom)
                        targets[target] = value
            self._gm = torch.fx.GraphModule(targets, self.graph, type(self.root).__name__)
        return self._gm


@dataclasses.dataclass
class _Region:
    graph_module: _LazyGraphModule | None
    # relative path -> (exception, failure_context, module)
    failures: dict[str, tuple[BaseException, Any, torch.nn.Module]]
    seen: dict[str, tuple[str, torch.nn.Module]]  # relative path -> (status, module)
    own_failure: tuple[BaseException, Any] | None
    paths: dict[torch.nn.Module, str] | None  # torch.fx's paths of every module under the region
    localizing: _Localizing


def _diagnosis(
    exc: BaseException, context: Any, path: str, module_type: str | None = None
) -> Callable[[], Diagnosis]:
    """The Diagnosis of a failure at ``path``, computed when first asked for."""

    def diagnose() -> Diagnosis:
        diagnosis = diagnose_exception(exc, context)
        if module_type is not None:  # the region's own forward failed
            return dataclasses.replace(diagnosis, module=path, module_type=module_type)
        return dataclasses.replace(diagnosis, module=path)

    return diagnose


def _trace_region(
    module: torch.nn.Module,
    make_tracer: Callable[[TraceOptions], torch.fx.Tracer],
    options: TraceOptions,
    concrete: Mapping[str, Any] | None,
    on_listed: Callable[[Iterable[torch.nn.Module]], None] | None = None,
) -> _Region:
    tracer = make_tracer(options)
    localizing = _Localizing(tracer, on_listed)
    if on_listed is None and type(module).forward is torch.nn.Module.forward and _plain_trace(type(tracer)):
        # no forward of its own (raft's CorrBlock): torch.fx's trace fails on its first
        # line with torch's own error; that error, without a trace's set-up and patching
        try:
            torch.nn.Module.forward(module)
        except NotImplementedError as exc:
            return _Region(None, {}, {}, (exc, ("", type(module).__name__, None)), None, localizing)
    gm = own = None
    before = {name: set(store) for name, store in _stores(module).items()}
    try:
        graph = tracer.trace(module, concrete_args=dict(concrete) if concrete else None)
        gm = _LazyGraphModule(module, graph, _added(module, before))
    except Exception as exc:
        own = (exc, failure_context(tracer))
    finally:
        _added(module, before)  # constants the tracer stored on the module go again
    return _Region(gm, localizing.failed, localizing.seen, own, localizing.paths, localizing)


def localize(
    model: torch.nn.Module,
    options: TraceOptions,
    make_tracer: Callable[[TraceOptions], torch.fx.Tracer] = build_tracer,
    root_concrete: Mapping[str, Any] | None = None,
    eager: EagerRecord | Callable[[], EagerRecord] | None = None,
    on_listed: Callable[[Iterable[torch.nn.Module]], None] | None = None,
) -> GraphCollection:
    """Trace ``model`` region by region (see the module docstring).

    ``on_listed`` is called with every module of the model before any of its code
    runs: when torch.fx has listed them for the root's trace, else (a trace that
    failed before) right after it.

    ``root_concrete`` are the root's concrete args; children of failing modules
    are traced with the inputs ``eager`` recorded for them (their own defaults
    and all-symbolic tensors when there is no record). ``eager`` may be a callable
    that records them: it is called only if some child needs its inputs.
    """
    import time

    start = time.perf_counter()
    # Records are written here only for failures and the modules a region starts at;
    # every other module's status is what the first region that met it says
    # (``_Claims``), resolved when the collection's records are first asked for.
    # The model's module paths come from torch.fx, which lists them for the root's
    # trace anyway; the root's tracer answers which modules are leaves by class.
    records: dict[str, ModuleRecord] = {}
    claims = _Claims()
    paths: dict[torch.nn.Module, str] = {}
    probe: Any = None  # the root region's _Localizing
    recorded: list[EagerRecord] = [eager] if isinstance(eager, EagerRecord) else []

    def inputs() -> EagerRecord | None:
        if not recorded and callable(eager):
            recorded.append(eager())
        return recorded[0] if recorded else None

    def record(path: str, module: torch.nn.Module, status: str, region: str | None) -> ModuleRecord:
        found = records.get(path)
        if found is None:
            found = records[path] = ModuleRecord(path, type(module).__name__, status, region)
        else:
            found.status, found.region = status, region
        return found

    def status(path: str) -> str:
        found = records.get(path)
        return found.status if found is not None else claims.status(path)[0]

    graphs: dict[str, _LazyGraphModule] = {}
    queue: list[tuple[str, torch.nn.Module]] = [("", model)]
    done: set[str] = set()
    while queue:
        prefix, module = queue.pop(0)
        if prefix in done:
            continue
        done.add(prefix)
        concrete: Mapping[str, Any] | None
        eager_record = inputs() if prefix and eager is not None else None
        if eager_record is not None and prefix not in eager_record.inputs:
            continue  # never called: nothing to trace it with
        if prefix and probe.tracer_is_leaf_module(module, prefix):
            record(prefix, module, "leaf", None)  # a leaf wherever it is called: nothing to trace
            continue
        if prefix == "":
            concrete = root_concrete
        elif eager_record is not None:
            args, kwargs = eager_record.inputs[prefix]
            try:
                concrete = bind_call(module, args, kwargs, None).concrete
            except (TypeError, ValueError):
                concrete = None
        else:
            concrete = None
        region = _trace_region(module, make_tracer, options, concrete, on_listed if prefix == "" else None)
        if prefix == "":
            # a tracer with a trace of its own may not list them: then our walk does
            paths = region.paths or _module_paths(model)
            probe = region.localizing  # its tracer_is_leaf_module: leaves as configured
            if region.localizing.on_listed is not None:  # not listed: no forward ran either
                region.localizing.on_listed(paths)
        failed_here: list[tuple[str, torch.nn.Module]] = []
        for rel, (exc, context, failed) in region.failures.items():
            path = _join(prefix, rel)
            record(path, failed, "failed", prefix).diagnosis = _diagnosis(exc, context, path)
            failed_here.append((path, failed))
        claims.add(prefix, region.seen)
        if region.own_failure is not None:
            exc, context = region.own_failure
            own = records.get(prefix) or record(prefix, module, "failed", None)
            own.status = "failed"
            own.diagnosis = _diagnosis(exc, context, prefix, type(module).__name__)
            failed_here.append((prefix, module))
        else:
            graphs[prefix] = region.graph_module  # type: ignore[assignment]
            record(prefix, module, "traced", prefix)
        for path, failed in failed_here:
            for name, child_module in module_children(failed).items():
                child = _join(path, name)
                if child_module is None or paths.get(child_module) != child:
                    continue  # None, or the same module met earlier under another path
                if child not in done and status(child) in ("unvisited", "unused"):
                    queue.append((child, child_module))
    if recorded:
        claims.called = recorded[0].inputs
    seconds = time.perf_counter() - start
    return GraphCollection(model, records, graphs, seconds, paths=paths, claims=claims)


def _lists_first(model: torch.nn.Module, options: TraceOptions) -> bool:
    """Whether the root's trace lists every module (torch.fx's ``named_modules``,
    torch's own) before anything can change the model: the tracer's ``trace`` and
    ``create_args_for_root`` are torch.fx's (with ours), and the model is no lazy
    GraphModule (whose trace recompiles it first)."""
    if is_lazy_graph_module(model) or type(model).named_modules is not torch.nn.Module.named_modules:
        return False
    return _plain_trace(options.tracer or Tracer)


@functools.cache
def _plain_trace(cls: type) -> bool:
    return _only_torch_fx_and_ours(cls, "trace", "create_args_for_root")


def recursive_trace(
    model: torch.nn.Module,
    concrete_args: Mapping[str, Any] | None = None,
    *,
    args: Any = None,
    kwargs: Mapping[str, Any] | None = None,
    **options: Any,
) -> GraphCollection:
    """Trace ``model`` and every failing submodule's children; never raises for the
    model's own faults. With ``args``/``kwargs`` (sample inputs) the model is run
    once eagerly so each child is traced with the inputs it really receives.

    Options are those of ``@pytest.mark.traceable``. The model is left as it was.

    Example::

        collection = pytest_fxtrace.recursive_trace(model, args=(torch.randn(1, 3, 64, 64),))
        print(collection.coverage, collection.table())
    """
    if concrete_args is not None:
        options = {**options, "concrete_args": concrete_args}
    resolved = resolve_options(("recursive_trace()", options))
    with_inputs = args is not None or kwargs is not None
    with collection_paused():
        # buffer values are only lent to the eager run; without inputs, attributes are all
        # to restore, and they are taken from torch.fx's own listing of the modules for
        # the root's trace, before any forward runs (where nothing else can run first)
        captured: list[ModelState] = []
        listed = not with_inputs and _lists_first(model, resolved)
        if not listed:
            captured.append(ModelState.capture(model) if with_inputs else ModelState.attributes_of(modules_of(model)))
        try:
            eager = root_concrete = None
            if with_inputs:
                if not isinstance(args, tuple):
                    args = tuple(args) if isinstance(args, list) else (() if args is None else (args,))
                eager = record_eager(model, args, dict(kwargs or {}), captured[0])
                root_concrete = bind_call(model, args, dict(kwargs or {}), resolved.concrete_args).concrete
            else:
                root_concrete = resolved.concrete_args
            with suspended():
                collection = localize(
                    model, resolved, root_concrete=root_concrete, eager=eager,
                    on_listed=(lambda modules: captured.append(ModelState.attributes_of(list(modules)))) if listed else None,
                )  # fmt: skip
        finally:
            for state in captured:
                state.restore()
            del captured[:]  # the copies go now, not in the collection at the block's end
    return collection


def module_tree(
    model: torch.nn.Module,
    collection: GraphCollection | None = None,
    graph_module: torch.fx.GraphModule | None = None,
    failing: tuple[str, str | None, Any] | None = None,
) -> list[dict[str, Any]]:
    """Every module of ``model`` in ``named_modules`` order, as plain JSON data: its
    path, class name, status (``MODULE_STATUSES``) and parameter count (its own and its
    descendants'), and for a failing one its category and the user's line.

    The statuses are ``collection``'s (an untraceable model's localization), else
    read from ``graph_module`` (a traced one: its ``call_module`` targets are leaves,
    the modules its nodes came from traced, the rest never reached); ``failing``
    (path, category, location) marks where a traced model went wrong.

    Example::

        module_tree(model, graph_module=gm)[1]
        # {"path": "lin", "type": "Linear", "status": "leaf", "params": 20}
    """
    modules = named_modules(model)
    if collection is not None:
        records = collection.records
        statuses = {path: records[path].status if path in records else "unvisited" for path in modules}
    else:
        statuses = _statuses_of(modules, graph_module)
    owned: set[int] = set()
    params = dict.fromkeys(modules, 0)
    for path, module in modules.items():
        own = 0
        for p in module_stores(module)[0].values():
            if p is not None and id(p) not in owned:  # a shared parameter counts once, where first met
                owned.add(id(p))
                own += p.numel()
        if own:  # up the chain of ancestors (paths in pre-order: each parent is listed)
            parts = path.split(".") if path else []
            for depth in range(len(parts) + 1):
                ancestor = ".".join(parts[:depth])
                if ancestor in params:
                    params[ancestor] += own
    tree = []
    for path, module in modules.items():
        entry: dict[str, Any] = {
            "path": path, "type": type(module).__name__, "status": statuses[path], "params": params[path],
        }  # fmt: skip
        diagnosis = records[path].diagnosis if collection is not None and entry["status"] == "failed" else None
        if diagnosis is not None:
            _where(entry, diagnosis.category, diagnosis.location)
        tree.append(entry)
    if failing is not None:
        path, category, location = failing
        for entry in tree:
            if entry["path"] == path:
                entry["status"] = "failed"
                _where(entry, category, location)
    return tree


def _where(entry: dict[str, Any], category: str | None, location: Any) -> None:
    entry["category"] = public_id(category)  # plain JSON data: an xdist worker sends it as is
    entry["location"] = {"path": str(location.path), "line": int(location.line)} if location is not None else None


def _statuses_of(modules: Mapping[str, torch.nn.Module], gm: torch.fx.GraphModule | None) -> dict[str, str]:
    """Statuses from a traced graph: ``call_module`` targets are leaves (and what is
    inside them), modules a node was recorded in traced, the rest never reached."""
    statuses = dict.fromkeys(modules, "unvisited")
    if gm is None:
        return statuses
    statuses[""] = "traced"
    leaves = set()
    for node in gm.graph.nodes:
        if node.op == "call_module":
            leaves.add(str(node.target))
        for key, value in (node.meta.get("nn_module_stack") or {}).items():
            # torch >= 2.2: {"path@call": (path, class)}; before: {path: class}
            path = value[0] if isinstance(value, tuple) else str(key).partition("@")[0]
            while path and statuses.get(path) == "unvisited":  # it and its ancestors
                statuses[path] = "traced"
                path = path.rpartition(".")[0]
    for path in statuses:
        ancestor = path
        while ancestor:  # a leaf, or inside one
            if ancestor in leaves:
                statuses[path] = "leaf"
                break
            ancestor = ancestor.rpartition(".")[0]
    return statuses


__all__ = ["GraphCollection", "ModuleRecord", "localize", "module_tree", "named_modules", "recursive_trace"]
