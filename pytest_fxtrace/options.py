"""One dataclass of options, and the one function that resolves them.

Precedence (PRODUCT.md): marker / call kwargs > command line > ini > defaults.
Everything a user writes as a string (a tracer path, a function path) is imported
here, once, so a typo is a usage error that names where it was written instead of
a failure deep inside a check.

Imports no torch: the plugin validates the ini file and command line with
``check_options`` in every pytest run (an xdist controller's, a torch-free project's),
and only a run that checks a model pays for importing torch and the user's tracer.
"""

from __future__ import annotations

import builtins
import dataclasses
import importlib
import inspect
import os
import sys
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .types import CATEGORIES


class OptionError(ValueError):
    """A user-written option is wrong; the message names it and says how to fix it."""


@dataclasses.dataclass(frozen=True)
class TraceOptions:
    """Everything that changes how a model is traced and judged.

    Example::

        TraceOptions(leaf_modules=("FrozenBatchNorm2d",), rtol=1e-4, atol=1e-5)
    """

    tracer: type | None = None  # None: pytest_fxtrace.Tracer
    leaf_modules: tuple[Any, ...] = ()  # classes, class names, submodule paths
    autowrap_functions: tuple[Callable[..., Any], ...] = ()
    autowrap_modules: tuple[types.ModuleType, ...] | None = None  # None: the tracer's default (math)
    concrete_args: Mapping[str, Any] | None = None
    param_shapes_constant: bool = False
    rtol: float | None = None
    atol: float | None = None
    snapshot: bool = False
    xfail: tuple[str, ...] = ()
    max_replays: int = 8  # recorded calls replayed per traced module in zero-code mode
    timeout: float | None = None  # seconds per recorded call's check (trace, replay, compare); None: no limit
    # what checks the model: "fx", "export" (torch.export, non-strict), "export-strict"
    # (TorchDynamo); several are checked in turn, one record per model per backend
    backend: tuple[str, ...] = ("fx",)
    # export: which input dimensions are dynamic -- None: those that vary between the
    # recorded calls; False: none (a program per input size); True: all of them
    dynamic: bool | None = None

    def replace(self, **changes: Any) -> TraceOptions:
        return dataclasses.replace(self, **changes)


OPTION_NAMES = tuple(f.name for f in dataclasses.fields(TraceOptions))


def _split_path(path: Any, what: str) -> tuple[str, str]:
    """``(module, attribute path)`` of ``"pkg.mod:attr"`` or ``"pkg.mod.attr"``."""
    if not isinstance(path, str) or not path.strip():
        raise OptionError(f"{what}: expected a dotted path like 'pkg.module:Name', got {path!r}")
    path = path.strip()
    if ":" in path:
        module_name, _, attr_path = path.partition(":")
    else:
        module_name, _, attr_path = path.rpartition(".")
    if not module_name or not attr_path:
        builtin = f"; for the builtin {path}, write 'builtins:{path}'" if hasattr(builtins, path) else ""
        raise OptionError(f"{what}: {path!r} is not a dotted path like 'pkg.module:Name'{builtin}")
    return module_name, attr_path


def _cannot_import(what: str, module_name: str, path: str, exc: ImportError) -> OptionError:
    return OptionError(
        f"{what}: cannot import module {module_name!r} from {path!r} ({exc}). "
        "Check the spelling and that the package is installed in this environment."
    )


def is_missing_module(module_name: str, exc: BaseException) -> bool:
    """Whether importing ``module_name`` raised ``exc`` because no such module exists
    (it, or a package above it), rather than because its own code failed (an
    ``import torchvision`` inside it included)."""
    missing = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    return bool(missing) and (module_name == missing or module_name.startswith(f"{missing}."))


def _raised_at(exc: BaseException) -> str:
    """``file:line`` of the innermost Python frame ``exc`` went through (not importlib's)."""
    where = ""
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not filename.startswith("<"):
            path = os.path.abspath(filename)
            rel = os.path.relpath(path) if path.startswith(os.getcwd() + os.sep) else path
            where = f"{rel}:{tb.tb_lineno}"
        tb = tb.tb_next
    return where


def failed_import(what: str, module_name: str, path: str, exc: BaseException) -> OptionError:
    """The error for a module that exists but whose own code raised on import."""
    at = _raised_at(exc)
    missing = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    fix = (
        f"install {missing!r} in this environment (a dependency of {module_name!r})"
        if missing
        else f"fix the error in {module_name!r} (or what it imports)"
    )
    return OptionError(
        f"{what}: module {module_name!r}{'' if path == module_name else f' (from {path!r})'} failed to import: "
        f"{type(exc).__name__}: {exc}{f' (raised at {at})' if at else ''}. "
        f"The name is right, but importing it fails: {fix}."
    )


def import_module(module_name: str, what: str, path: str) -> types.ModuleType:
    """``importlib.import_module``; an ``OptionError`` naming ``what`` that tells a
    module that does not exist from one that exists but fails to import."""
    try:
        return importlib.import_module(module_name)
    except Exception as exc:
        if is_missing_module(module_name, exc):
            raise _cannot_import(what, module_name, path, exc) from None  # type: ignore[arg-type]
        raise failed_import(what, module_name, path, exc) from None


def find_module(name: str) -> None:
    """Raise ``ModuleNotFoundError`` (worded as ``import`` words it) when no module
    ``name`` can be found; run no module's code to find out.

    The finders on ``sys.meta_path`` locate each dotted prefix in its parent's
    ``__path__`` without executing the parent, so checking ``pkg.tracers`` does not
    import ``pkg`` (nor the torch it imports). Whether the module then imports, and
    has the attribute named, is only known by importing it (``import_object``).
    """
    path: Any = None
    prefix = ""
    for part in name.split("."):
        parent, prefix = prefix, f"{prefix}.{part}" if prefix else part
        if parent and path is None:
            raise ModuleNotFoundError(f"No module named {prefix!r}; {parent!r} is not a package", name=prefix)
        module = sys.modules.get(prefix)
        if module is not None:
            path = getattr(module, "__path__", None)
            continue
        for finder in sys.meta_path:
            find_spec = getattr(finder, "find_spec", None)
            spec = find_spec(prefix, path, None) if find_spec is not None else None
            if spec is not None:
                break
        else:
            raise ModuleNotFoundError(f"No module named {prefix!r}", name=prefix)
        path = spec.submodule_search_locations


def check_import_path(path: Any, what: str) -> None:
    """``import_object``'s errors that can be told without importing: the path's form
    and whether its module exists (see ``find_module``)."""
    module_name, _ = _split_path(path, what)
    try:
        find_module(module_name)
    except ImportError as exc:
        raise _cannot_import(what, module_name, path.strip(), exc) from None


def import_object(path: str, what: str) -> Any:
    """Import ``"pkg.mod:attr"`` or ``"pkg.mod.attr"``; raise OptionError naming ``what``."""
    module_name, attr_path = _split_path(path, what)
    path = path.strip()
    obj: Any = import_module(module_name, what, path)
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise OptionError(
                f"{what}: module {module_name!r} has no attribute {attr_path!r} (from {path!r})."
            ) from None
    return obj


def _as_tuple(value: Any, what: str) -> tuple[Any, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, type)) or callable(value) and not isinstance(value, Iterable):
        return (value,)
    if isinstance(value, Iterable):
        return tuple(value)
    raise OptionError(f"{what}: expected a list, got {type(value).__name__}")


def _resolve_tracer(value: Any, what: str) -> type | None:
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


def _resolve_functions(value: Any, what: str) -> tuple[Callable[..., Any], ...]:
    out = []
    for item in _as_tuple(value, what):
        if isinstance(item, str):
            item = import_object(item, what)
        if not callable(item):
            raise OptionError(f"{what}: {item!r} is not a function")
        out.append(item)
    return tuple(out)


def _resolve_modules(value: Any, what: str) -> tuple[types.ModuleType, ...] | None:
    if value is None:
        return None
    out = []
    for item in _as_tuple(value, what):
        if isinstance(item, str):
            try:
                item = importlib.import_module(item)
            except Exception as exc:
                if not is_missing_module(item, exc):
                    raise failed_import(what, item, item, exc) from None
                raise OptionError(f"{what}: cannot import module {item!r} ({exc})") from None
        if not isinstance(item, types.ModuleType):
            raise OptionError(f"{what}: {item!r} is not a Python module")
        out.append(item)
    return tuple(out)


def _is_module_class(cls: type) -> bool:
    torch = sys.modules.get("torch")  # an nn.Module class means torch is imported already
    return torch is not None and issubclass(cls, torch.nn.Module)


def _resolve_leaves(value: Any, what: str) -> tuple[Any, ...]:
    out = []
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


def _resolve_bool(value: Any, what: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("", "0", "false", "no", "off"):
        return False
    raise OptionError(f"{what}: expected true or false, got {value!r}")


def _resolve_xfail(value: Any, what: str) -> tuple[str, ...]:
    ids = _as_tuple(value, what)
    for category in ids:
        if category not in CATEGORIES:
            raise OptionError(
                f"{what}: {category!r} is not a category id; use one of: {', '.join(CATEGORIES)}"
            )
    return tuple(ids)


# the backends the package brings (backends/__init__.py registers them); a backend added
# with register_backend is known once its module is imported
BACKENDS = ("fx", "export", "export-strict")


def _known_backends() -> tuple[str, ...]:
    registry = sys.modules.get("pytest_fxtrace.backends")
    extra = tuple(registry.backend_names()) if registry is not None else ()
    return tuple(dict.fromkeys(BACKENDS + extra))


def _resolve_backend(value: Any, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        names = tuple(name.strip() for name in value.replace(",", " ").split())
    elif isinstance(value, Iterable):
        names = tuple(value)
    else:
        names = (value,)
    if not names:
        raise OptionError(f"{what}: name at least one backend: {', '.join(map(repr, _known_backends()))}")
    known = _known_backends()
    for name in names:
        if name not in known:
            raise OptionError(
                f"{what}: {name!r} is not a backend; use one of {', '.join(map(repr, known))}, "
                "or a tuple of them, e.g. backend=('fx', 'export')"
            )
    if any(name.startswith("export") for name in names):
        problem = _export_problem()
        if problem is not None:
            raise OptionError(f"{what}: {problem}")
    return tuple(dict.fromkeys(names))


def _export_problem() -> str | None:
    """Whether this torch can run the export backend: from its version alone while torch
    is not imported (the plugin checks options before any model is), in full once it is."""
    from . import _compat

    if "torch" in sys.modules:
        return _compat.export_problem()
    try:
        from importlib import metadata

        version = metadata.version("torch")
    except Exception:  # not installed as a distribution: decided once torch is imported
        return None
    return _compat.export_floor_problem(version)


def _resolve_dynamic(value: Any, what: str) -> bool | None:
    if value is None or isinstance(value, str) and value.strip().lower() in ("", "auto", "none"):
        return None
    try:
        return _resolve_bool(value, what)
    except OptionError:
        raise OptionError(
            f"{what}: expected True (every dimension dynamic), False (a program per input size) "
            f"or None / 'auto' (the dimensions that vary between the recorded calls), got {value!r}"
        ) from None


def _resolve_concrete(value: Any, what: str) -> Mapping[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise OptionError(f"{what}: expected a dict of argument name -> value, got {value!r}")
    return dict(value)


def _resolve_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise OptionError(f"{what}: expected a positive integer, got {value!r}")
    return value


_RESOLVERS: dict[str, Callable[[Any, str], Any]] = {
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
}


def resolve_options(*layers: tuple[str, Mapping[str, Any]]) -> TraceOptions:
    """Merge option layers, lowest precedence first, into one ``TraceOptions``.

    Each layer is ``(where, {name: value})``; ``where`` is how the user wrote it
    ("ini fxtrace_tracer", "@pytest.mark.traceable in tests/test_a.py::test_x"),
    so an error can point there. Values already resolved (a ``TraceOptions``
    field value) pass through unchanged.

    Example::

        resolve_options(("ini", {"rtol": "1e-4"}), ("marker", {"leaf_modules": ["Pad"]}))
    """
    values: dict[str, Any] = {}
    for where, layer in layers:
        for name, raw in layer.items():
            _known(name, where)
            values[name] = _RESOLVERS[name](raw, f"{where}: {name}")
    return TraceOptions(**values)


def _known(name: str, where: str) -> None:
    if name not in _RESOLVERS:
        raise OptionError(f"{where}: unknown option {name!r}; valid options: {', '.join(OPTION_NAMES)}")


def _check_importing(name: str, raw: Any, what: str) -> None:
    """``_RESOLVERS[name]``'s errors for an option naming code, short of importing it."""
    if name == "tracer":
        if isinstance(raw, str) and raw != "":
            check_import_path(raw, what)
        else:
            _resolve_tracer(raw, what)
        return
    if raw is None:
        return
    for item in _as_tuple(raw, what):
        if not isinstance(item, str):
            _RESOLVERS[name]((item,), what)
        elif name == "autowrap_functions":
            check_import_path(item, what)
        else:
            try:
                find_module(item)
            except ImportError as exc:
                raise OptionError(f"{what}: cannot import module {item!r} ({exc})") from None


IMPORTING = frozenset({"tracer", "autowrap_functions", "autowrap_modules"})  # options naming code


def check_options(*layers: tuple[str, Mapping[str, Any]]) -> None:
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
            _known(name, where)
            what = f"{where}: {name}"
            if name in IMPORTING:
                _check_importing(name, raw, what)
            else:
                _RESOLVERS[name](raw, what)


def accepted_kwargs(cls: type, candidates: Mapping[str, Any]) -> dict[str, Any]:
    """The subset of ``candidates`` that ``cls.__init__`` accepts by name."""
    try:
        params = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        return {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(candidates)
    return {k: v for k, v in candidates.items() if k in params}
