"""The custom tracer: what torchrec, modelopt, timm and experimental-experiment
each bolt onto ``torch.fx.Tracer``, through the Tracer's own overridable methods.

* leaf modules by class (subclasses count), by class name, by submodule path, and
  a class registry (``register_leaf``);
* ``path_of_module`` falls back to a module's ``_fx_path`` (torchrec), and a
  parameter-free module created inside ``forward`` is traced through instead of
  failing with "module is not installed as a submodule";
* ``create_arg`` can be taught extra argument types (``Tracer.register_arg_type``);
* graphs with pytree-structured concrete args compile (torch 2.14 emits a
  placeholder default inside the tuple-unpacking line otherwise).
* plain arguments (Proxy, tuple, list, dict, numbers, str, None) skip
  ``torch.fx.Tracer.create_arg``'s checks for parameters and constants, which they
  cannot be: the same graph for 6-11 % fewer instructions.

The same features are mixed into any other ``torch.fx.Tracer`` subclass the user
configures (``build_tracer``), so ``leaf_modules=`` works with HF's or torchrec's
tracer too.
"""

from __future__ import annotations

import builtins
import inspect
import math
import types
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar

import torch
import torch.fx
from torch.fx.node import Argument

from pytest_fxtrace._compat import has_pytree_codegen, module_stores, plain_arg_handlers, wrapped_function
from pytest_fxtrace.locate import is_user_frame
from pytest_fxtrace.options import OptionError, TraceOptions, accepted_kwargs, resolve_options
from pytest_fxtrace.paths import shown_path
from pytest_fxtrace.timelimit import cleanup

_LEAF_REGISTRY: list[type[torch.nn.Module]] = []
_T = TypeVar("_T")

# TracerBase's handlers for the exact types torch.fx.Tracer's own create_arg checks
# (Parameter, buffer or constant tensor, module, namedtuple, opaque object) can never
# match: Proxy, tuple, list, dict, numbers, str, None, dtype, device... (empty on a
# torch without that table: every argument then takes torch.fx's create_arg)
_PLAIN_ARG_HANDLERS = plain_arg_handlers()


def register_leaf(cls: type[torch.nn.Module]) -> type[torch.nn.Module]:
    """Make ``cls`` (and its subclasses) a leaf for every trace; usable as a decorator.

    Example::

        @pytest_fxtrace.register_leaf
        class DynamicPad(nn.Module): ...
    """
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        raise TypeError(f"register_leaf expects an nn.Module subclass, got {cls!r}")
    if cls not in _LEAF_REGISTRY:
        _LEAF_REGISTRY.append(cls)
    return cls


def unregister_leaf(cls: type[torch.nn.Module]) -> None:
    """Undo ``register_leaf(cls)``; unknown classes are ignored.

    Example::

        pytest_fxtrace.unregister_leaf(DynamicPad)
    """
    if cls in _LEAF_REGISTRY:
        _LEAF_REGISTRY.remove(cls)


def leaf_spec_matches(spec: object, module: torch.nn.Module, qualified_name: str) -> bool:
    """Whether one ``leaf_modules`` entry names ``module`` (at ``qualified_name``)."""
    if isinstance(spec, type):
        return isinstance(module, spec)
    if spec == qualified_name:
        return True
    for cls in type(module).__mro__:
        if spec in (cls.__name__, cls.__qualname__, f"{cls.__module__}.{cls.__qualname__}"):
            return True
    return False


def _has_state(module: torch.nn.Module) -> bool:
    return any(True for _ in module.parameters()) or any(True for _ in module.buffers())


class _TracerFeatures:
    """Our features as a mixin, so they stack on any ``torch.fx.Tracer`` subclass."""

    fx_leaf_modules: tuple[type | str, ...] = ()
    fx_builtins: tuple[str, ...] = ()  # builtins among autowrap_functions (``len``), by name
    # stateless modules created inside forward that the trace inlined ("nn.ReLU at m.py:7"):
    # plain torch.fx refuses them (a module it cannot find among the root's submodules)
    fx_inlined: tuple[str, ...] = ()
    # type -> function returning the constructor arguments of an instance (untyped: each
    # function takes its own type's instances, register_arg_type pairs them)
    arg_types: Mapping[type, Callable[[Any], tuple[object, ...]]] = {}
    # whether the create_arg after this mixin in the class's MRO is torch.fx.Tracer's own
    # (a user's tracer may override it). (Caching the next-in-MRO methods per class, in
    # place of super(), saved 0.1 % of P1 -- resnet18 at 64 px, 206.2 vs 206.4 M
    # instructions marked: not kept.)
    _fx_torch_create_arg: bool

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        after = super()  # in __init_subclass__: the classes after _TracerFeatures in cls.__mro__
        cls._fx_torch_create_arg = after.create_arg is torch.fx.Tracer.create_arg  # type: ignore[attr-defined]  # a mixin: the torch.fx.Tracer it precedes in the MRO has it

    @classmethod
    def register_arg_type(cls, arg_type: type[_T], flatten: Callable[[_T], Iterable[object]]) -> None:
        """Teach ``create_arg`` a type: an instance becomes ``arg_type(*flatten(obj))``
        in the graph, its arguments traced (torchrec's ``NoWait`` pattern).

        Example::

            Tracer.register_arg_type(NoWait, lambda w: (w._obj,))
        """
        cls.arg_types = {**cls.arg_types, arg_type: lambda obj: tuple(flatten(obj))}
        if "create_arg" not in vars(cls):  # only tracers taught a type pay for the check
            # a method set on the class, for this tracer class alone
            cls.create_arg = _typed_create_arg(cls)  # type: ignore[method-assign,assignment]  # this class's own, set once

    def create_arg(self, a: object) -> Argument:
        # Every argument of every node passes here. The plain types go straight to
        # TracerBase's handler: torch.fx.Tracer's checks before it (a Python-level
        # isinstance against Parameter among them) cost 6-11 % of a trace and its
        # GraphModule (benchmarks/trace_instructions.py).
        if self._fx_torch_create_arg:
            handler = _PLAIN_ARG_HANDLERS.get(type(a))
            if handler is not None:
                return handler(self, a)
        return super().create_arg(a)  # type: ignore[misc]  # a mixin: the torch.fx.Tracer it precedes in the MRO has it

    def is_leaf_module(self, m: torch.nn.Module, module_qualified_name: str) -> bool:
        if self.fx_leaf_modules or _LEAF_REGISTRY:  # called for every module call while tracing
            specs = (*self.fx_leaf_modules, *_LEAF_REGISTRY)
            if any(leaf_spec_matches(spec, m, module_qualified_name) for spec in specs):
                return True
        return super().is_leaf_module(m, module_qualified_name)  # type: ignore[misc]  # a mixin: the torch.fx.Tracer it precedes in the MRO has it

    def path_of_module(self, mod: torch.nn.Module) -> str:
        try:
            return super().path_of_module(mod)  # type: ignore[misc]  # a mixin: the torch.fx.Tracer it precedes in the MRO has it
        except NameError:
            fx_path = getattr(mod, "_fx_path", None)
            if isinstance(fx_path, str):
                return fx_path
            raise

    def call_module(
        self,
        m: torch.nn.Module,
        forward: Callable[..., object],
        args: tuple[object, ...],
        kwargs: dict[str, object],
    ) -> object:
        paths = getattr(self, "submodule_paths", None)
        if paths and m in paths:  # installed (the usual case): no second lookup
            return super().call_module(m, forward, args, kwargs)  # type: ignore[misc]  # a mixin: the torch.fx.Tracer it precedes in the MRO has it
        try:
            self.path_of_module(m)
        except NameError:
            # Created inside forward (``nn.ReLU()(x)``): with no state of its own,
            # its ops mean the same inlined; with state there is nothing to refer to.
            if not _has_state(m):
                self.fx_inlined = (*self.fx_inlined, _created_at(m))
                return forward(*args, **kwargs)
            raise
        return super().call_module(m, forward, args, kwargs)  # type: ignore[misc]  # a mixin: the torch.fx.Tracer it precedes in the MRO has it

    def trace(
        self, root: torch.nn.Module | Callable[..., object], concrete_args: dict[str, object] | None = None
    ) -> torch.fx.Graph:
        added = _wrap_builtins(root, self.fx_builtins) if self.fx_builtins else []
        try:
            graph = super().trace(root, concrete_args)  # type: ignore[misc]  # a mixin: the torch.fx.Tracer it precedes in the MRO has it
        except NotImplementedError as exc:
            raise user_facing(exc) from None
        finally:
            _unwrap_builtins(added)
        if has_pytree_codegen(graph):
            # The flattened forward takes every input positionally, so placeholder
            # defaults are never used; torch 2.14 writes them into invalid code.
            for node in graph.nodes:
                if node.op == "placeholder":
                    node.args = ()
        return graph


def _created_at(module: torch.nn.Module) -> str:
    """``"nn.ReLU at models.py:12"``: the module and the user's statement that called it."""
    cls = type(module)
    name = f"nn.{cls.__name__}" if cls.__module__.startswith("torch.nn.") else cls.__name__
    frame = inspect.currentframe()
    while frame is not None and not is_user_frame(frame):
        frame = frame.f_back
    return f"{name} at {shown_path(frame.f_code.co_filename)}:{frame.f_lineno}" if frame is not None else name


def builtin_names(functions: Iterable[object]) -> tuple[str, ...]:
    """Names of the Python builtins (``len``) among ``functions``."""
    return tuple(name for f in functions if (name := getattr(f, "__name__", "")) and getattr(builtins, name, None) is f)


def _wrap_builtins(
    root: torch.nn.Module | Callable[..., object], names: tuple[str, ...]
) -> list[tuple[dict[str, object], str, Callable[..., object]]]:
    """Shadow the builtins ``names`` in the globals of every ``forward`` under ``root``
    with torch.fx's autowrap wrapper, so ``len(proxy)`` becomes a graph call.

    torch.fx autowraps functions it finds in those globals; a builtin is never there.
    Returns what was added, for the caller to take out again after the trace."""
    functions = (
        [root]
        if not isinstance(root, torch.nn.Module)
        else [type(module).forward for module in root.modules()]
    )
    namespaces = {id(g): g for f in functions if isinstance(g := getattr(f, "__globals__", None), dict)}
    added = []
    for namespace in namespaces.values():
        for name in names:
            if name not in namespace:  # a module's own global of that name is left alone
                wrapper = wrapped_function(getattr(builtins, name))
                namespace[name] = wrapper
                added.append((namespace, name, wrapper))
    return added


@cleanup
def _unwrap_builtins(added: list[tuple[dict[str, object], str, Callable[..., object]]]) -> None:
    """Take out what ``_wrap_builtins`` added (a time limit waits for it: ``cleanup``)."""
    for namespace, name, wrapper in added:
        if namespace.get(name) is wrapper:
            del namespace[name]


def _typed_create_arg(owner: type) -> Callable[[Any, object], Argument]:
    """``create_arg`` for a tracer class that was taught types with ``register_arg_type``."""

    def create_arg(self: Any, a: object) -> Argument:  # self: an owner, which torch.fx.Tracer's create_node types
        for arg_type, flatten in self.arg_types.items():
            if isinstance(a, arg_type):
                args = self.create_arg(flatten(a))
                return self.create_node("call_function", type(a), args, {})
        return super(owner, self).create_arg(a)  # type: ignore[arg-type]  # self: an instance of owner

    return create_arg


_CREATE_ARG_CODE = torch.fx.proxy.TracerBase.create_arg.__code__


def user_facing(exc: BaseException) -> BaseException:
    """``exc``, or for torch.fx's "argument of type: <class ...>" (an object the graph
    cannot hold) a TypeError that names the object and the fixes, with the same
    traceback, so the user's line is still found; its ``unrecordable`` is the object's type."""
    if not isinstance(exc, NotImplementedError):
        return exc
    tb, culprit = exc.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code is _CREATE_ARG_CODE:
            culprit = tb.tb_frame.f_locals.get("a", culprit)
        tb = tb.tb_next
    if culprit is None:
        return exc
    kind = type(culprit)
    error = TypeError(
        f"torch.fx cannot record a {kind.__module__}.{kind.__qualname__} object in the graph "
        "(as an output or an argument); use tensors, numbers, strings, None, or tuples, lists, "
        "dicts, dataclasses and namedtuples of them, or teach the tracer the type with "
        "pytest_fxtrace.Tracer.register_arg_type"
    )
    error.unrecordable = kind  # type: ignore[attr-defined]  # this TypeError's own note, read by the diagnosis
    return error.with_traceback(exc.__traceback__)


def only_torch_fx_and_ours_define(cls: type, *names: str) -> bool:
    """Whether no class of the tracer ``cls`` but torch.fx's ``Tracer`` and our features
    defines the methods ``names`` (so their behaviour is known)."""
    return all(c in (_TracerFeatures, torch.fx.Tracer) or vars(c).keys().isdisjoint(names) for c in cls.__mro__)


class Tracer(_TracerFeatures, torch.fx.Tracer):
    """``torch.fx.Tracer`` plus leaf modules by class, name or path, a leaf registry,
    an unregistered-module fallback and extensible ``create_arg``.

    Example::

        tracer = Tracer(leaf_modules=["FrozenBatchNorm2d", "backbone.body"])
        graph = tracer.trace(model)
    """

    def __init__(
        self,
        autowrap_modules: tuple[types.ModuleType | str, ...] = (math,),
        autowrap_functions: tuple[Callable[..., object] | str, ...] = (),
        param_shapes_constant: bool = False,
        leaf_modules: Iterable[type | str] = (),
    ) -> None:
        # the forms every entry point takes ("builtins:len", "pkg.mod:helper", module names)
        options = resolve_options(
            (
                "pytest_fxtrace.Tracer()",
                {
                    "autowrap_modules": autowrap_modules,
                    "autowrap_functions": autowrap_functions,
                    "param_shapes_constant": param_shapes_constant,
                    "leaf_modules": leaf_modules,
                },
            )
        )
        super().__init__(
            # torch annotates it Tuple[ModuleType] (a tuple of one); it takes any number
            autowrap_modules=options.autowrap_modules or (),  # type: ignore[arg-type]
            autowrap_functions=options.autowrap_functions,
            param_shapes_constant=options.param_shapes_constant,
        )
        self.fx_leaf_modules = options.leaf_modules
        self.fx_builtins = builtin_names(options.autowrap_functions)


_MIXED: dict[type, type] = {}


def _with_features(cls: type) -> type:
    if issubclass(cls, _TracerFeatures):
        return cls
    if cls not in _MIXED:
        _MIXED[cls] = type(cls.__name__, (_TracerFeatures, cls), {"__module__": cls.__module__})
    return _MIXED[cls]


_ACCEPTED: weakref.WeakKeyDictionary[type, dict[frozenset[str], frozenset[str]]] = weakref.WeakKeyDictionary()


def _accepted(cls: type, wanted: dict[str, object]) -> dict[str, object]:
    """``accepted_kwargs``, its signature inspection done once per tracer class
    (a check, and every region of a localization, builds a tracer)."""
    per_class = _ACCEPTED.setdefault(cls, {})
    names = per_class.get(frozenset(wanted))
    if names is None:
        names = per_class[frozenset(wanted)] = frozenset(accepted_kwargs(cls, wanted))
    return {name: value for name, value in wanted.items() if name in names}


def build_tracer(options: TraceOptions) -> torch.fx.Tracer:
    """An instance of the configured tracer class with our features mixed in.

    Example::

        build_tracer(TraceOptions(tracer=HFTracer, leaf_modules=("Pad",)))
    """
    cls = options.tracer or Tracer
    wanted: dict[str, object] = {}
    if options.autowrap_modules is not None:
        wanted["autowrap_modules"] = options.autowrap_modules
    if options.autowrap_functions:
        wanted["autowrap_functions"] = options.autowrap_functions
    if options.param_shapes_constant:
        wanted["param_shapes_constant"] = True
    kwargs = _accepted(cls, wanted)
    refused = sorted(set(wanted) - set(kwargs))
    if refused:
        raise OptionError(
            f"tracer {cls.__module__}.{cls.__qualname__} does not accept "
            f"{', '.join(refused)}; drop the option or use pytest_fxtrace.Tracer"
        )
    tracer = _with_features(cls)(**kwargs)
    tracer.fx_leaf_modules = tuple(options.leaf_modules)
    tracer.fx_builtins = builtin_names(options.autowrap_functions)
    return tracer


def _attribute_names(module: torch.nn.Module) -> tuple[set[str], ...]:
    return (set(module.__dict__), *(set(store) for store in module_stores(module)))


def trace_module(
    root: torch.nn.Module, tracer: torch.fx.Tracer, concrete_args: Mapping[str, object] | None = None
) -> torch.fx.GraphModule:
    """Trace ``root`` into a ``GraphModule`` without leaving anything on ``root``.

    ``torch.fx`` stores tensor constants it meets (``_tensor_constant0``) as
    attributes of the traced root; the GraphModule takes its own reference, then
    they are removed from the user's model again, whether tracing passed or failed.
    """
    before = _attribute_names(root)
    try:
        graph = tracer.trace(root, concrete_args=dict(concrete_args) if concrete_args else None)
        return torch.fx.GraphModule(tracer.root, graph, root.__class__.__name__)
    finally:
        _remove_added(root, before)


class _Store(Protocol):
    """A module's ``__dict__`` or one of its parameter / buffer / submodule dicts."""

    def pop(self, key: str, default: None, /) -> object: ...


@cleanup
def _remove_added(root: torch.nn.Module, before: tuple[set[str], ...]) -> None:
    """Take the attributes the trace added off ``root`` (a time limit waits for it)."""
    added = [now - then for now, then in zip(_attribute_names(root), before, strict=True)]
    stores: tuple[_Store, ...] = (root.__dict__, *module_stores(root))
    for store, names in zip(stores, added, strict=True):
        for name in names:
            store.pop(name, None)


def symbolic_trace(
    root: torch.nn.Module,
    concrete_args: Mapping[str, object] | None = None,
    leaf_modules: Iterable[type | str] | None = None,
    **tracer_options: object,
) -> torch.fx.GraphModule:
    """``torch.fx.symbolic_trace`` with pytest_fxtrace's tracer.

    ``tracer_options`` are the marker's tracer options (``tracer``,
    ``autowrap_functions``, ``autowrap_modules``, ``param_shapes_constant``), in
    the same forms: functions and tracers as objects or dotted paths
    (``"builtins:len"``, ``"pkg.mod:helper"``). A name that does not resolve is an
    ``OptionError`` naming it.

    Example::

        gm = pytest_fxtrace.symbolic_trace(model, leaf_modules=["DynamicPad"],
                                           autowrap_functions=["builtins:len"])
    """
    others = sorted(set(tracer_options) - _TRACER_OPTIONS)
    if others:
        raise OptionError(
            f"symbolic_trace(): {', '.join(others)} {'is not a tracer option' if len(others) == 1 else 'are not tracer options'}; "
            f"it takes concrete_args, leaf_modules and {', '.join(sorted(_TRACER_OPTIONS))} "
            "(check_traceable takes every option)"
        )
    layer = {**tracer_options, "leaf_modules": leaf_modules, "concrete_args": concrete_args}
    options = resolve_options(("symbolic_trace()", layer))
    return trace_module(root, build_tracer(options), options.concrete_args)


_TRACER_OPTIONS = frozenset({"tracer", "autowrap_functions", "autowrap_modules", "param_shapes_constant"})
