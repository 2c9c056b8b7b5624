"""Localization: which parts of a model trace, which fail, and how much of it traced.

``recursive_trace`` walks the model the way modelopt's does -- failing submodules
become leaves so the trace goes on past them -- but in one pass per traced region
instead of a retrace per new leaf: when a submodule's call raises, the nodes it
had added are taken out of the graph again and the call is recorded as a leaf
right there. When a module's *own* forward fails (the root included), each of
its children is traced on its own with the inputs the eager run gave it, so a
detection model still reports its backbone as traceable.

What it found is ``collection.py``'s data. Knows tracers and modules; knows nothing of
the check, its verdict, fixes or pytest.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

import torch
import torch.fx

from pytest_fxtrace._compat import children as module_children
from pytest_fxtrace._compat import last_node, module_stores, node_erased
from pytest_fxtrace.backends.fx.diagnose import FailureContext, diagnose_exception, failure_context
from pytest_fxtrace.backends.fx.tracer import build_tracer, only_torch_fx_and_ours_define, user_facing
from pytest_fxtrace.binding import EagerRecord, bind_call
from pytest_fxtrace.collection import Claims, GraphCollection, ModuleRecord, join_path, module_paths
from pytest_fxtrace.options import TraceOptions
from pytest_fxtrace.types import Diagnosis, ModuleStatus


class _Localizing:
    """Installed on one tracer: a submodule whose call raises is rolled out of the
    graph and recorded as a leaf, and tracing goes on.

    It wraps that tracer's own bound methods (set on the instance, over its class's),
    so it works on whatever tracer ``make_tracer`` built (the user's, HF's, torchrec's)
    without deriving a class from theirs or changing the ``__class__`` of an object
    their hook made; the tracer is used for this one region's trace only."""

    def __init__(
        self, tracer: torch.fx.Tracer, on_listed: Callable[[Iterable[torch.nn.Module]], None] | None = None
    ) -> None:
        self.tracer = tracer
        self.on_listed = on_listed  # told the modules once torch.fx listed them, before any forward runs
        self.failed: dict[str, tuple[BaseException, FailureContext, torch.nn.Module]] = {}
        self.seen: dict[str, tuple[ModuleStatus, torch.nn.Module]] = {}  # path -> (status, module)
        self.leaf: dict[str, bool] = {}  # the tracer's own answer, per path
        self.param_cache: dict[str, torch.fx.Proxy] | None = None
        self.paths: dict[torch.nn.Module, str] | None = None  # torch.fx's {module: path} of the traced root
        # the tracer's own methods
        self.tracer_is_leaf_module = tracer.is_leaf_module
        self.tracer_call_module = tracer.call_module
        self.tracer_getattr = tracer.getattr
        self.tracer_create_args_for_root = tracer.create_args_for_root
        vars(tracer).update(
            is_leaf_module=self.is_leaf_module, call_module=self.call_module, getattr=self.getattr,
            create_args_for_root=self.create_args_for_root,
        )  # fmt: skip

    def is_leaf_module(self, m: torch.nn.Module, module_qualified_name: str) -> bool:
        if module_qualified_name in self.failed:
            return True
        leaf = self.leaf[module_qualified_name] = self.tracer_is_leaf_module(m, module_qualified_name)
        return leaf

    # untyped: passed on as they came to the tracer's own, whose signature its class decides
    def create_args_for_root(self, *args: Any, **kwargs: Any) -> object:
        # torch.fx calls this once per trace, right after it listed the root's modules
        # (``submodule_paths``, which it drops again when the trace succeeds)
        self.paths = getattr(self.tracer, "submodule_paths", None)
        if self.on_listed is not None and self.paths:
            self.on_listed(self.paths)
            self.on_listed = None
        return self.tracer_create_args_for_root(*args, **kwargs)

    def getattr(self, attr: str, attr_val: object, parameter_proxy_cache: dict[str, torch.fx.Proxy]) -> object:
        self.param_cache = parameter_proxy_cache
        return self.tracer_getattr(attr, attr_val, parameter_proxy_cache)

    def call_module(
        self, m: torch.nn.Module, forward: Callable[..., object], args: tuple[object, ...], kwargs: dict[str, object]
    ) -> object:
        tracer = self.tracer
        try:
            path = tracer.path_of_module(m)
        except NameError:
            return self.tracer_call_module(m, forward, args, kwargs)
        if path in self.failed:
            return self.tracer_call_module(m, forward, args, kwargs)
        graph: torch.fx.Graph = tracer.graph
        mark = last_node(graph)
        depth = len(tracer.module_stack)
        try:
            out = self.tracer_call_module(m, forward, args, kwargs)
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
            self.seen[path] = (ModuleStatus.LEAF if leaf else ModuleStatus.TRACED, m)
        return out

    def rollback(self, mark: torch.fx.Node | None, depth: int) -> None:
        tracer = self.tracer
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


class _Store(Protocol):
    """A module's ``__dict__`` or one of its parameter / buffer / submodule dicts."""

    def __iter__(self) -> Iterator[str]: ...

    def pop(self, key: str, /) -> object: ...


def _stores(module: torch.nn.Module) -> dict[str, _Store]:
    return {
        "dict": module.__dict__, **dict(zip(("params", "buffers", "modules"), module_stores(module), strict=True)),
    }  # fmt: skip


def _added(module: torch.nn.Module, before: dict[str, set[str]]) -> dict[str, object]:
    """Remove and return what tracing added to ``module`` (``_tensor_constant0``...)."""
    added = {}
    for name, store in _stores(module).items():
        for key in set(store) - before[name]:
            added[key] = store.pop(key)
    return added


class _LazyGraphModule:
    """A traced region; the GraphModule is built (and compiled) only when asked for:
    diagnosis needs the statuses, rarely the code."""

    def __init__(self, root: torch.nn.Module, graph: torch.fx.Graph, constants: dict[str, object]) -> None:
        self.root, self.graph, self.constants = root, graph, constants
        self._gm: torch.fx.GraphModule | None = None

    def get(self) -> torch.fx.GraphModule:
        if self._gm is None:
            targets: dict[str, object] = {}
            for node in self.graph.nodes:
                if node.op in ("get_attr", "call_module"):
                    target = str(node.target)
                    if target in self.constants:
                        targets[target] = self.constants[target]
                    else:
                        value: object = self.root
                        for atom in target.split("."):
                            value = getattr(value, atom)
                        targets[target] = value
            self._gm = torch.fx.GraphModule(targets, self.graph, type(self.root).__name__)
        return self._gm


@dataclasses.dataclass
class _Region:
    graph_module: _LazyGraphModule | None
    # relative path -> (exception, failure_context, module)
    failures: dict[str, tuple[BaseException, FailureContext, torch.nn.Module]]
    seen: dict[str, tuple[ModuleStatus, torch.nn.Module]]  # relative path -> (status, module)
    own_failure: tuple[BaseException, FailureContext] | None
    paths: dict[torch.nn.Module, str] | None  # torch.fx's paths of every module under the region
    localizing: _Localizing


def _diagnosis(
    exc: BaseException, context: FailureContext, path: str, module_type: str | None = None
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
    concrete: Mapping[str, object] | None,
    on_listed: Callable[[Iterable[torch.nn.Module]], None] | None = None,
) -> _Region:
    tracer = make_tracer(options)
    localizing = _Localizing(tracer, on_listed)
    tracer_class: type = type(tracer)
    if on_listed is None and type(module).forward is torch.nn.Module.forward and plain_trace(tracer_class):
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
    root_concrete: Mapping[str, object] | None = None,
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
    walk = _Walk(model, options, make_tracer, eager)
    while walk.queue:
        prefix, module = walk.queue.pop(0)
        if prefix in walk.done:
            continue
        walk.done.add(prefix)
        walk.visit(prefix, module, root_concrete, on_listed)
    if walk.recorded:
        walk.claims.called = walk.recorded[0].inputs
    seconds = time.perf_counter() - start
    return GraphCollection(model, walk.records, walk.graphs, seconds, paths=walk.paths, claims=walk.claims)


class _Walk:
    """``localize``'s state across the regions it traces, one queued module at a time.

    Records are written here only for failures and the modules a region starts at;
    every other module's status is what the first region that met it says
    (``Claims``), resolved when the collection's records are first asked for.
    The model's module paths come from torch.fx, which lists them for the root's
    trace anyway; the root's tracer answers which modules are leaves by class."""

    def __init__(
        self,
        model: torch.nn.Module,
        options: TraceOptions,
        make_tracer: Callable[[TraceOptions], torch.fx.Tracer],
        eager: EagerRecord | Callable[[], EagerRecord] | None,
    ) -> None:
        self.model, self.options, self.make_tracer, self.eager = model, options, make_tracer, eager
        self.records: dict[str, ModuleRecord] = {}
        self.claims = Claims()
        self.paths: dict[torch.nn.Module, str] = {}
        self.probe: _Localizing | None = None  # the root region's
        self.recorded: list[EagerRecord] = [eager] if isinstance(eager, EagerRecord) else []
        self.graphs: dict[str, _LazyGraphModule] = {}
        self.queue: list[tuple[str, torch.nn.Module]] = [("", model)]
        self.done: set[str] = set()

    def inputs(self) -> EagerRecord | None:
        if not self.recorded and callable(self.eager):
            self.recorded.append(self.eager())
        return self.recorded[0] if self.recorded else None

    def record(
        self, path: str, module: torch.nn.Module, status: ModuleStatus, region: str | None
    ) -> ModuleRecord:
        found = self.records.get(path)
        if found is None:
            found = self.records[path] = ModuleRecord(path, type(module).__name__, status, region)
        else:
            found.status, found.region = status, region
        return found

    def status(self, path: str) -> str:
        found = self.records.get(path)
        return found.status if found is not None else self.claims.status(path)[0]

    def visit(
        self,
        prefix: str,
        module: torch.nn.Module,
        root_concrete: Mapping[str, object] | None,
        on_listed: Callable[[Iterable[torch.nn.Module]], None] | None,
    ) -> None:
        """Trace the region starting at ``prefix``, record what it found, and queue the
        children of what failed in it."""
        eager_record = self.inputs() if prefix and self.eager is not None else None
        if eager_record is not None and prefix not in eager_record.inputs:
            return  # never called: nothing to trace it with
        concrete = root_concrete if prefix == "" else _concrete_of(prefix, module, eager_record)
        if prefix and self.probe is not None and self.probe.tracer_is_leaf_module(module, prefix):
            self.visit_leaf(prefix, module, concrete)
            return
        region = _trace_region(
            module, self.make_tracer, self.options, concrete, on_listed if prefix == "" else None
        )
        if prefix == "":
            # a tracer with a trace of its own may not list them: then our walk does
            self.paths = region.paths or module_paths(self.model)
            self.probe = region.localizing  # its tracer_is_leaf_module: leaves as configured
            if region.localizing.on_listed is not None:  # not listed: no forward ran either
                region.localizing.on_listed(self.paths)
        self.queue_children(self.take(prefix, module, region))

    def visit_leaf(self, prefix: str, module: torch.nn.Module, concrete: Mapping[str, object] | None) -> None:
        # a leaf of a failing module is in no graph; traced on its own (as export
        # exports it alone) its parameters are in one, and count in coverage
        alone = _trace_leaf(module, self.make_tracer, self.options, concrete, self.model)
        if alone is None:
            self.record(prefix, module, ModuleStatus.LEAF, None)
        else:
            assert alone.graph_module is not None  # _trace_leaf gives clean traces only
            self.graphs[prefix] = alone.graph_module
            self.record(prefix, module, ModuleStatus.TRACED, prefix)
            self.claims.add(prefix, alone.seen)

    def take(
        self, prefix: str, module: torch.nn.Module, region: _Region
    ) -> list[tuple[str, torch.nn.Module]]:
        """Record what the region at ``prefix`` found; returns the modules that failed in it."""
        failed_here: list[tuple[str, torch.nn.Module]] = []
        for rel, (exc, context, failed) in region.failures.items():
            path = join_path(prefix, rel)
            self.record(path, failed, ModuleStatus.FAILED, prefix).diagnosis = _diagnosis(exc, context, path)
            failed_here.append((path, failed))
        self.claims.add(prefix, region.seen)
        if region.own_failure is not None:
            exc, context = region.own_failure
            own = self.records.get(prefix) or self.record(prefix, module, ModuleStatus.FAILED, None)
            own.status = ModuleStatus.FAILED
            own.diagnosis = _diagnosis(exc, context, prefix, type(module).__name__)
            failed_here.append((prefix, module))
        else:
            assert region.graph_module is not None  # its own trace did not fail
            self.graphs[prefix] = region.graph_module
            self.record(prefix, module, ModuleStatus.TRACED, prefix)
        return failed_here

    def queue_children(self, failed_here: list[tuple[str, torch.nn.Module]]) -> None:
        for path, failed in failed_here:
            for name, child_module in module_children(failed).items():
                child = join_path(path, name)
                if child_module is None or self.paths.get(child_module) != child:
                    continue  # None, or the same module met earlier under another path
                if child in self.done:
                    continue
                if self.status(child) in (ModuleStatus.UNVISITED, ModuleStatus.UNUSED):
                    self.queue.append((child, child_module))


def _concrete_of(path: str, module: torch.nn.Module, eager: EagerRecord | None) -> Mapping[str, object] | None:
    """The concrete args of a submodule traced on its own: those of the inputs the eager
    run gave it (none without a record, or when they do not bind)."""
    if eager is None:
        return None
    args, kwargs = eager.inputs[path]
    try:
        return bind_call(module, args, kwargs, None).concrete
    except (TypeError, ValueError):
        return None


def _trace_leaf(
    module: torch.nn.Module,
    make_tracer: Callable[[TraceOptions], torch.fx.Tracer],
    options: TraceOptions,
    concrete: Mapping[str, object] | None,
    model: torch.nn.Module,
) -> _Region | None:
    """A leaf traced on its own, when it matters to coverage (it holds parameters, or the
    model has none), and only a clean trace: a leaf is a configured boundary, so what
    fails inside it is no failure of the model's. None: not traced, or not cleanly."""
    if next(module.parameters(), None) is None and next(model.parameters(), None) is not None:
        return None
    region = _trace_region(module, make_tracer, options, concrete)
    if region.own_failure is not None or region.failures or region.graph_module is None:
        return None
    return region


@functools.cache
def plain_trace(cls: type) -> bool:
    """Whether ``cls`` traces with torch.fx's own ``trace`` and ``create_args_for_root`` (and ours)."""
    return only_torch_fx_and_ours_define(cls, "trace", "create_args_for_root")


__all__ = ["GraphCollection", "ModuleRecord", "localize", "plain_trace"]
