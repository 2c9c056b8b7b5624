"""One dataclass of options, and the one function that resolves them.

Precedence (docs/options.md): marker / call kwargs > command line > ini > defaults.
Everything a user writes as a string (a tracer path, a function path) is imported
here, once, so a typo is a usage error that names where it was written instead of
a failure deep inside a check.

Imports no torch: the plugin validates the ini file and command line with
``check_options`` in every pytest run (an xdist controller's, a torch-free project's),
and only a run that checks a model pays for importing torch and the user's tracer.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import sys
import types
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pytest_fxtrace.backends.spec import (
    DEFAULT_BACKEND,
    BackendOption,
    backend_names,
    backend_options,
    backend_problem,
    broken_backend,
)
from pytest_fxtrace.dims import DimError, DimRequest, parse_request
from pytest_fxtrace.importing import (
    OptionError,
    check_import_path,
    did_you_mean,
    failed_import,
    find_module,
    import_object,
    is_missing_module,
)
from pytest_fxtrace.types import CATEGORIES


@dataclasses.dataclass(frozen=True)
class TraceOptions:
    """Everything that changes how a model is traced and judged.

    Example::

        TraceOptions(leaf_modules=("FrozenBatchNorm2d",), rtol=1e-4, atol=1e-5)
    """

    tracer: type | None = None  # None: pytest_fxtrace.Tracer
    leaf_modules: tuple[type | str, ...] = ()  # classes, class names, submodule paths
    autowrap_functions: tuple[Callable[..., object], ...] = ()
    autowrap_modules: tuple[types.ModuleType, ...] | None = None  # None: the tracer's default (math)
    concrete_args: Mapping[str, object] | None = None
    param_shapes_constant: bool = False
    rtol: float | None = None
    atol: float | None = None
    snapshot: bool = False
    xfail: tuple[str, ...] = ()
    max_replays: int = 8  # recorded calls replayed per traced module in zero-code mode
    timeout: float | None = None  # seconds per recorded call's check (trace, replay, compare); None: no limit
    # what checks the model: the names of backends (backends/spec.py), the default
    # backend's alone where none is named; several are checked in turn, one record per
    # model per backend
    backend: tuple[str, ...] = (DEFAULT_BACKEND,)
    # export: which input dimensions are dynamic -- None: those that vary between the
    # recorded calls; False: none (a program per input size); True: all of them.
    # compile: torch.compile's dynamic= (None: automatic dynamic shapes)
    # or a DimRequest: the dimensions asked by name, or presets (batch, seq, spatial): dims.py
    dynamic: bool | DimRequest | None = None
    # train mode (issue 41): the model in train(), each recorded call run forward and backward
    # on eager and on the captured program, outputs, gradients and buffer updates compared;
    # loss_fn(output) -> the scalar to differentiate (None: the sum of the output's floating values)
    train: bool = False
    loss_fn: Callable[[Any], object] | None = None
    # the options backends add (BackendSpec.options), (name, value) sorted by name; read as
    # attributes (``options.max_graph_breaks``: its value, or the backend's default)
    extra: tuple[tuple[str, object], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "extra", tuple(sorted(dict(self.extra).items())))

    if not TYPE_CHECKING:  # typed code reads a backend's option with value() (or its own typed view)

        def __getattr__(self, name: str) -> object:
            # only asked where no field has the name: a backend's option, or an error
            if name.startswith("__") or name == "extra":
                raise AttributeError(name)
            return self.value(name)

    def value(self, name: str) -> object:
        """The option ``name`` a backend adds: as resolved, or the backend's default.

        Example: ``TraceOptions().value("max_graph_breaks") == 0``.
        """
        for key, value in self.extra:
            if key == name:
                return value
        option = added_options().get(name)
        if option is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return option.default

    def replace(self, **changes: Any) -> TraceOptions:
        """A copy with ``changes``; a backend's option is set by its name too."""
        added = {name: changes.pop(name) for name in list(changes) if name not in FIELD_NAMES}
        unknown = sorted(set(added) - set(added_options()))
        if unknown:
            raise TypeError(f"{type(self).__name__}.replace() got unknown options: {', '.join(unknown)}")
        if added:
            changes["extra"] = (*dict(changes.get("extra", self.extra)).items(), *added.items())
        return dataclasses.replace(self, **changes)


FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(TraceOptions))
OPTION_NAMES = tuple(f.name for f in dataclasses.fields(TraceOptions) if f.name != "extra")  # the core's


def added_options() -> dict[str, BackendOption]:
    """The options the backends add (``BackendSpec.options``), by name; one that takes a
    core option's name is not added."""
    return {name: option for name, option in backend_options().items() if name not in FIELD_NAMES}


def option_names() -> tuple[str, ...]:
    """Every option a marker may name: the core's, then those the backends add."""
    return OPTION_NAMES + tuple(added_options())


def _as_tuple(value: object, what: str) -> tuple[object, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, type)) or callable(value) and not isinstance(value, Iterable):
        return (value,)
    if isinstance(value, Iterable):
        return tuple(value)
    raise OptionError(f"{what}: expected a list, got {type(value).__name__}")


def _resolve_tracer(value: object, what: str) -> type | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        value = import_object(value, what)
    import torch.fx  # a tracer is being resolved: the run checks models

    if not (isinstance(value, type) and issubclass(value, torch.fx.Tracer)):
        raise OptionError(
            f"{what}: expected a torch.fx.Tracer subclass (or its dotted path), got {value!r}"
        )
    return value


def _resolve_functions(value: object, what: str) -> tuple[Callable[..., object], ...]:
    out: list[Callable[..., object]] = []
    for item in _as_tuple(value, what):
        if isinstance(item, str):
            item = import_object(item, what)
        if not callable(item):
            raise OptionError(f"{what}: {item!r} is not a function")
        out.append(item)
    return tuple(out)


def _resolve_modules(value: object, what: str) -> tuple[types.ModuleType, ...] | None:
    if value is None:
        return None
    out = []
    for item in _as_tuple(value, what):
        if isinstance(item, str):
            name = item
            try:
                item = importlib.import_module(name)
            except Exception as exc:
                if not is_missing_module(name, exc):
                    raise failed_import(what, name, name, exc) from None
                raise OptionError(f"{what}: cannot import module {name!r} ({exc})") from None
        if not isinstance(item, types.ModuleType):
            raise OptionError(f"{what}: {item!r} is not a Python module")
        out.append(item)
    return tuple(out)


def _is_module_class(cls: type) -> bool:
    torch = sys.modules.get("torch")  # an nn.Module class means torch is imported already
    return torch is not None and issubclass(cls, torch.nn.Module)


def _resolve_leaves(value: object, what: str) -> tuple[type | str, ...]:
    out: list[type | str] = []
    for item in _as_tuple(value, what):
        if isinstance(item, type) and _is_module_class(item):
            out.append(item)
        elif isinstance(item, str) and item.strip():
            out.append(item.strip())
        else:
            raise OptionError(
                f"{what}: {item!r} is neither an nn.Module class, a class name "
                "('FrozenBatchNorm2d') nor a submodule path ('backbone.body')"
            )
    return tuple(out)


def _resolve_float(value: Any, what: str) -> float | None:
    if value is None or value == "":
        return None
    try:
        result = float(value)
    except (TypeError, ValueError):
        raise OptionError(f"{what}: expected a number, got {value!r}") from None
    if result < 0:
        raise OptionError(f"{what}: must not be negative, got {value!r}")
    return result


def _resolve_bool(value: object, what: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("", "0", "false", "no", "off"):
        return False
    raise OptionError(f"{what}: expected true or false, got {value!r}")


def _resolve_xfail(value: object, what: str) -> tuple[str, ...]:
    ids = _as_tuple(value, what)
    for category in ids:
        if category not in CATEGORIES:
            raise OptionError(
                f"{what}: {category!r} is not a category id{did_you_mean(str(category), CATEGORIES)}; "
                f"use one of: {', '.join(CATEGORIES)}"
            )
    return tuple(str(category) for category in ids)


def _resolve_backend(value: Any, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        names = tuple(name.strip() for name in value.replace(",", " ").split())
    elif isinstance(value, Iterable):
        names = tuple(value)
    else:
        names = (value,)
    known = backend_names()
    if not names:
        raise OptionError(f"{what}: name at least one backend: {', '.join(map(repr, known))}")
    for name in names:
        broken = broken_backend(name) if isinstance(name, str) else None
        if broken is not None:
            raise OptionError(f"{what}: {broken}")
        if name not in known:
            raise OptionError(
                f"{what}: {name!r} is not a backend{did_you_mean(str(name), known)}; use one of {', '.join(map(repr, known))}, "
                f"or a tuple of them, e.g. backend={tuple(known[:2])!r}"
            )
    for name in dict.fromkeys(names):
        problem = backend_problem(name)
        if problem is not None:
            raise OptionError(f"{what}: {problem}")
    return tuple(dict.fromkeys(names))


def _resolve_dynamic(value: object, what: str) -> bool | DimRequest | None:
    if value is None or isinstance(value, str) and value.strip().lower() in ("", "auto", "none"):
        return None
    if isinstance(value, DimRequest):
        return value
    if isinstance(value, str) and value.strip().lower() not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
        try:
            return parse_request(value, what)  # presets: batch, seq, spatial
        except DimError as exc:
            raise OptionError(str(exc)) from None
    if isinstance(value, Mapping):
        try:
            return parse_request(value, what)
        except DimError as exc:
            raise OptionError(str(exc)) from None
    try:
        return _resolve_bool(value, what)
    except OptionError:
        raise OptionError(
            f"{what}: expected True (every dimension dynamic), False (a program per input size), "
            f"None / 'auto' (the dimensions that vary between the recorded calls), presets "
            f"('batch', 'batch,seq', 'spatial') or a dict of argument -> {{dimension: name}} "
            f"({{'x': {{0: 'batch'}}}}), got {value!r}"
        ) from None


def _resolve_concrete(value: object, what: str) -> Mapping[str, object] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise OptionError(f"{what}: expected a dict of argument name -> value, got {value!r}")
    return dict(value)


def _resolve_loss_fn(value: object, what: str) -> Callable[[Any], object] | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        value = import_object(value, what)
    if not callable(value):
        raise OptionError(f"{what}: expected a function of the model's output that returns the loss (or its 'pkg.mod:func' path), got {value!r}")
    return value  # type: ignore[no-any-return]  # a callable: its signature is the user's


def _resolve_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise OptionError(f"{what}: expected a positive integer, got {value!r}")
    return value


_RESOLVERS: dict[str, Callable[[object, str], object]] = {
    "tracer": _resolve_tracer,
    "leaf_modules": _resolve_leaves,
    "autowrap_functions": _resolve_functions,
    "autowrap_modules": _resolve_modules,
    "concrete_args": _resolve_concrete,
    "param_shapes_constant": _resolve_bool,
    "rtol": _resolve_float,
    "atol": _resolve_float,
    "snapshot": _resolve_bool,
    "xfail": _resolve_xfail,
    "max_replays": _resolve_int,
    "timeout": _resolve_float,
    "backend": _resolve_backend,
    "dynamic": _resolve_dynamic,
    "train": _resolve_bool,
    "loss_fn": _resolve_loss_fn,
}


def _resolver(name: str, where: str) -> Callable[[object, str], object]:
    """The resolver of the option ``name``: the core's, or that of the backend that adds it."""
    if name in _RESOLVERS:
        return _RESOLVERS[name]
    option = added_options().get(name)
    if option is None:
        names = option_names()
        raise OptionError(f"{where}: unknown option {name!r}{did_you_mean(name, names)}; valid options: {', '.join(names)}")
    return option.resolve


def resolve_options(*layers: tuple[str, Mapping[str, object]]) -> TraceOptions:
    """Merge option layers, lowest precedence first, into one ``TraceOptions``.

    Each layer is ``(where, {name: value})``; ``where`` is how the user wrote it
    ("ini fxtrace_tracer", "@pytest.mark.traceable in tests/test_a.py::test_x"),
    so an error can point there. Values already resolved (a ``TraceOptions``
    field value) pass through unchanged.

    Example::

        resolve_options(("ini", {"rtol": "1e-4"}), ("marker", {"leaf_modules": ["Pad"]}))
    """
    values: dict[str, Any] = {}
    extra: dict[str, object] = {}
    for where, layer in layers:
        for name, raw in layer.items():
            value = _resolver(name, where)(raw, f"{where}: {name}")
            (values if name in _RESOLVERS else extra)[name] = value
    return TraceOptions(**values, extra=tuple(extra.items()))


def _check_importing(name: str, raw: object, what: str) -> None:
    """``_RESOLVERS[name]``'s errors for an option naming code, short of importing it."""
    if name in ("tracer", "loss_fn"):
        if isinstance(raw, str) and raw != "":
            check_import_path(raw, what)
        else:
            _RESOLVERS[name](raw, what)
        return
    if raw is None:
        return
    for item in _as_tuple(raw, what):
        if not isinstance(item, str):
            _resolver(name, what)((item,), what)
        elif name == "autowrap_functions":
            check_import_path(item, what)
        else:
            try:
                find_module(item)
            except ImportError as exc:
                raise OptionError(f"{what}: cannot import module {item!r} ({exc})") from None


IMPORTING = frozenset({"tracer", "autowrap_functions", "autowrap_modules", "loss_fn"})  # options naming code


def check_options(*layers: tuple[str, Mapping[str, object]]) -> None:
    """``resolve_options``'s errors, found without importing anything (no torch, no
    user module): every option name and value is checked, except that a dotted path
    (``tracer``, ``autowrap_functions``, ``autowrap_modules``) is only checked for its
    form and that its module exists. ``resolve_options`` imports them later, when a
    model is checked.

    Example::

        check_options(("ini fxtrace_tracer", {"tracer": "nowhere.mod:Tracer"}))  # OptionError
    """
    for where, layer in layers:
        for name, raw in layer.items():
            resolve = _resolver(name, where)
            what = f"{where}: {name}"
            if name in IMPORTING:
                _check_importing(name, raw, what)
            else:
                resolve(raw, what)


def accepted_kwargs(cls: type, candidates: Mapping[str, object]) -> dict[str, object]:
    """The subset of ``candidates`` that ``cls.__init__`` accepts by name."""
    try:
        params = inspect.signature(cls.__init__).parameters  # type: ignore[misc]  # the class's own __init__
    except (TypeError, ValueError):
        return {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(candidates)
    return {k: v for k, v in candidates.items() if k in params}
