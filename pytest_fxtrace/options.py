"""One dataclass of options, and the one function that resolves them.

Precedence (PRODUCT.md): marker / call kwargs > command line > ini > defaults.
Everything a user writes as a string (a tracer path, a function path) is imported
here, once, so a typo is a usage error that names where it was written instead of
a failure deep inside a check.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

CATEGORIES = (
    "control-flow",
    "iteration",
    "len",
    "type-conversion",
    "contains",
    "tensor-constructor",
    "mutation",
    "unregistered-module",
    "specialization",
    "baked-constant",
    "training-flag",
    "hooks-dropped",
    "numeric",
    "other",
)


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

    def replace(self, **changes: Any) -> TraceOptions:
        return dataclasses.replace(self, **changes)


OPTION_NAMES = tuple(f.name for f in dataclasses.fields(TraceOptions))


def import_object(path: str, what: str) -> Any:
    """Import ``"pkg.mod:attr"`` or ``"pkg.mod.attr"``; raise OptionError naming ``what``."""
    if not isinstance(path, str) or not path.strip():
        raise OptionError(f"{what}: expected a dotted path like 'pkg.module:Name', got {path!r}")
    path = path.strip()
    if ":" in path:
        module_name, _, attr_path = path.partition(":")
    else:
        module_name, _, attr_path = path.rpartition(".")
    if not module_name or not attr_path:
        raise OptionError(f"{what}: {path!r} is not a dotted path like 'pkg.module:Name'")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise OptionError(
            f"{what}: cannot import module {module_name!r} from {path!r} ({exc}). "
            "Check the spelling and that the package is installed in this environment."
        ) from None
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
            except ImportError as exc:
                raise OptionError(f"{what}: cannot import module {item!r} ({exc})") from None
        if not isinstance(item, types.ModuleType):
            raise OptionError(f"{what}: {item!r} is not a Python module")
        out.append(item)
    return tuple(out)


def _resolve_leaves(value: Any, what: str) -> tuple[Any, ...]:
    out = []
    for item in _as_tuple(value, what):
        if isinstance(item, type) and issubclass(item, torch.nn.Module):
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
            if name not in _RESOLVERS:
                raise OptionError(
                    f"{where}: unknown option {name!r}; valid options: {', '.join(OPTION_NAMES)}"
                )
            values[name] = _RESOLVERS[name](raw, f"{where}: {name}")
    return TraceOptions(**values)


def accepted_kwargs(cls: type, candidates: Mapping[str, Any]) -> dict[str, Any]:
    """The subset of ``candidates`` that ``cls.__init__`` accepts by name."""
    try:
        params = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        return {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(candidates)
    return {k: v for k, v in candidates.items() if k in params}
