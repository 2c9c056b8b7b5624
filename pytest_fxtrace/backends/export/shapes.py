"""Dynamic shapes from the recorded calls: one exported program for all of them.

A test that calls its model with two batch sizes, or two image sizes, shows which
dimensions vary. Those become dynamic (``torch.export.Dim.AUTO``), every other
dimension stays as recorded; an input's place is named the way the user wrote it
(``x``, ``images[0]``, ``targets['boxes']``), over nested args and kwargs.

A dimension export fixes anyway is a ``specialization``: the exported program is
read back for it, and one more export with the shape environment's log kept finds
the user's statement that fixed it (the log record is emitted while that statement
runs, so the Python stack at that moment holds the user's frame).
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import inspect
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

from pytest_fxtrace._compat import placeholders
from pytest_fxtrace.locate import is_user_file, statement_at
from pytest_fxtrace.paths import shown_path
from pytest_fxtrace.sizes import forward_parameters
from pytest_fxtrace.types import Location

SHAPE_LOG = "torch.fx.experimental.symbolic_shapes"  # the logger of torch's shape environment


@dataclasses.dataclass(frozen=True)
class Leaf:
    """One input value of a call: where it is (``x``, ``targets[0]['boxes']``), its
    shape and dtype when a tensor, else its value's repr."""

    name: str
    shape: tuple[int, ...] | None
    kind: str  # "Tensor[float32, cpu]" / "int=3" / "None"


def bind(model: torch.nn.Module, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The call's values by forward's parameter names, as export's ``dynamic_shapes``
    takes them: ``*args`` as a tuple, ``**kwargs`` as a dict; defaults not filled in
    (export only sees what the call passed)."""
    bound = forward_parameters(model).bind(*args, **kwargs)
    return dict(bound.arguments)


def _walk(value: Any, name: str) -> Iterator[tuple[str, Any]]:
    """Leaves of ``value`` in torch's pytree order (tuples, lists, dicts in insertion
    order, namedtuples by field), each with its place."""
    if value is None:
        return
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        for field in value._fields:
            yield from _walk(getattr(value, field), f"{name}.{field}")
    elif isinstance(value, (tuple, list)):
        for index, item in enumerate(value):
            yield from _walk(item, f"{name}[{index}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(item, f"{name}[{key!r}]" if name else str(key))
    else:
        yield name, value


def _named(model: torch.nn.Module, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Iterator[tuple[str, Any, str]]:
    """(parameter name, value, the place's name) of each bound parameter; keywords taken by
    ``**kwargs`` are each their own place, named as the call wrote them."""
    variadic = {p.name for p in forward_parameters(model).parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD}
    for name, value in bind(model, args, kwargs).items():
        if name in variadic:
            for key, item in value.items():
                yield name, {key: item}, ""
        else:
            yield name, value, name


def leaves(model: torch.nn.Module, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[Leaf]:
    """Every input value of a call, in the order export flattens them."""
    found = []
    for _, value, place_of in _named(model, args, kwargs):
        for place, leaf in _walk(value, place_of):
            if isinstance(leaf, torch.Tensor):
                found.append(Leaf(place, tuple(leaf.shape), f"Tensor[{leaf.dtype}, {leaf.device.type}, {leaf.dim()}d]"))
            else:
                found.append(Leaf(place, None, f"{type(leaf).__name__}={leaf!r}"))
    return found


def varying_dims(calls: Sequence[Sequence[Leaf]]) -> dict[str, tuple[int, ...]]:
    """The dimensions whose size differs between calls of one key, by input place."""
    if len(calls) < 2:
        return {}
    varying: dict[str, tuple[int, ...]] = {}
    for index, first in enumerate(calls[0]):
        if first.shape is None:
            continue
        shapes = {call[index].shape for call in calls}
        dims = tuple(d for d in range(len(first.shape)) if len({shape[d] for shape in shapes if shape}) > 1)
        if dims:
            varying[first.name] = dims
    return varying


def dynamic_shapes(
    model: torch.nn.Module, args: Sequence[Any], kwargs: Mapping[str, Any], dims: Mapping[str, Sequence[int]]
) -> dict[str, Any] | None:
    """export's ``dynamic_shapes`` for a call: ``Dim.AUTO`` at ``dims`` (by place),
    every other dimension static; None when nothing varies."""
    if not dims:
        return None
    auto = torch.export.Dim.AUTO

    def spec(value: Any, name: str) -> Any:
        if value is None:
            return None
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            return type(value)(*(spec(getattr(value, f), f"{name}.{f}") for f in value._fields))
        if isinstance(value, (tuple, list)):
            return type(value)(spec(item, f"{name}[{i}]") for i, item in enumerate(value))
        if isinstance(value, dict):
            return {key: spec(item, f"{name}[{key!r}]" if name else str(key)) for key, item in value.items()}
        if isinstance(value, torch.Tensor):
            return {d: auto for d in dims.get(name, ())} or None
        return None

    shapes: dict[str, Any] = {}
    for name, value, place in _named(model, args, kwargs):
        if place:
            shapes[name] = spec(value, place)
        else:  # one keyword of **kwargs
            shapes.setdefault(name, {}).update(spec(value, ""))
    return shapes


@dataclasses.dataclass(frozen=True)
class Specialized:
    """A dimension the recorded calls vary that the exported program fixed."""

    place: str  # the input, as the user wrote it
    dim: int
    size: int  # the size it was fixed to
    location: Location | None = None  # the user's statement that fixed it
    module: torch.nn.Module | None = None  # the module whose forward runs that statement

    def describe(self) -> str:
        return f"dimension {self.dim} of `{self.place}` (fixed to {self.size})"


def specialized_dims(
    exported: Any, model: torch.nn.Module, args: Sequence[Any], kwargs: Mapping[str, Any], dims: Mapping[str, Sequence[int]]
) -> list[Specialized]:
    """The dimensions of ``dims`` that ``exported`` (an ``ExportedProgram``) fixed to one
    size: its user-input placeholders are the call's leaves in order, and a dynamic
    dimension is a symbol in their fake value's shape, a fixed one an int."""
    if not dims:
        return []
    user_inputs = set(getattr(exported.graph_signature, "user_inputs", ()))
    values = [node.meta.get("val") for node in placeholders(exported.graph) if node.name in user_inputs]
    call_leaves = leaves(model, args, kwargs)
    if len(values) != len(call_leaves):
        return []  # a structure export flattened otherwise: nothing is claimed
    found = []
    for leaf, value in zip(call_leaves, values, strict=True):
        for dim in dims.get(leaf.name, ()):
            shape = getattr(value, "shape", None)
            if shape is None or dim >= len(shape):
                continue
            if is_fixed(shape[dim]):
                found.append(Specialized(leaf.name, dim, int(shape[dim])))
    return found


def is_fixed(size: Any) -> bool:
    """Whether a size of an exported program's input is one number (a plain int, or a
    symbolic int whose expression is a constant) rather than a symbol."""
    if isinstance(size, int):
        return True
    try:
        from torch.fx.experimental.symbolic_shapes import is_concrete_int
    except ImportError:
        return str(size).lstrip("-").isdigit()
    return bool(is_concrete_int(size))


# --- where a dimension was fixed ------------------------------------------------------------

_SOURCE = re.compile(r"^L(\[.+\])\.size\(\)\[(\d+)\]$")
_FIRST_KEY = re.compile(r"^\['([^']+)'\]")


# the functions torch's shape guards are written with, on plain ints (Python semantics:
# torch's PythonMod / FloorDiv are Python's % and //)
_GUARD_FUNCTIONS: dict[str, Any] = {
    "Eq": lambda a, b: a == b,
    "Ne": lambda a, b: a != b,
    "Lt": lambda a, b: a < b,
    "Le": lambda a, b: a <= b,
    "Gt": lambda a, b: a > b,
    "Ge": lambda a, b: a >= b,
    "Mod": lambda a, b: a % b,
    "PythonMod": lambda a, b: a % b,
    "FloorDiv": lambda a, b: a // b,
    "CleanDiv": lambda a, b: a // b,
    "Max": max,
    "Min": min,
    "And": lambda *a: all(a),
    "Or": lambda *a: any(a),
    "Not": lambda a: not a,
}


def evaluate_guard(expression: str, values: Mapping[str, int]) -> bool | None:
    """``expression`` (a shape guard as torch prints it, ``Ne(PythonMod(-s53, 8), 0)``)
    with its symbols set to ``values``; None when it names anything else (another
    symbol, a function not listed). Read with ``ast`` and computed here: nothing of the
    text is executed."""
    import operator

    binary = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
    compare = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge}

    def value(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, bool)):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in values:
                return values[node.id]
            if node.id in ("True", "False"):
                return node.id == "True"
            raise LookupError(node.id)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not)):
            inner = value(node.operand)
            return -inner if isinstance(node.op, ast.USub) else not inner
        if isinstance(node, ast.BinOp) and type(node.op) in binary:
            return binary[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in compare:
            return compare[type(node.ops[0])](value(node.left), value(node.comparators[0]))
        if isinstance(node, ast.BoolOp):
            parts = [value(v) for v in node.values]
            return all(parts) if isinstance(node.op, ast.And) else any(parts)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _GUARD_FUNCTIONS and not node.keywords:
            return _GUARD_FUNCTIONS[node.func.id](*(value(arg) for arg in node.args))
        raise LookupError(ast.dump(node))

    try:
        result = value(_parsed(expression.strip()))
    except (LookupError, SyntaxError, ZeroDivisionError, TypeError, ValueError):
        return None
    return bool(result)


@functools.lru_cache(maxsize=4096)
def _parsed(expression: str) -> ast.expr:
    """A guard's expression read once: a dimension's multiple is found by evaluating every
    guard at up to ~2,000 sizes (``probes._multiple_of``)."""
    return ast.parse(expression, mode="eval").body


def source_place(source: str) -> tuple[str, int] | None:
    """``("y['p']", 0)`` for torch's source name ``L['y']['p'].size()[0]``."""
    match = _SOURCE.match(source)
    if match is None:
        return None
    path, dim = match.group(1), int(match.group(2))
    first = _FIRST_KEY.match(path)
    if first is None:
        return None
    return first.group(1) + path[first.end() :], dim


@dataclasses.dataclass(frozen=True)
class Site:
    """Where the shape environment was when it recorded something: the user's statement,
    and the module whose ``forward`` was running it (None: not known)."""

    location: Location | None
    module: torch.nn.Module | None = None


def _user_frame_now() -> Site:
    """The innermost frame of user or library code on the current Python stack, and the
    innermost module ``forward`` running around it."""
    frame = inspect.currentframe()
    location = None
    while frame is not None:
        code = frame.f_code
        if location is None and is_user_file(code.co_filename):
            location = Location(shown_path(code.co_filename, imports=False), frame.f_lineno, statement_at(code, frame.f_lineno))
        owner = frame.f_locals.get("self") if code.co_name == "forward" else None
        if location is not None and isinstance(owner, torch.nn.Module):
            return Site(location, owner)
        frame = frame.f_back
    return Site(location)


class ShapeSites(logging.Handler):
    """Reads the shape environment's log while export runs: which symbol stands for which
    input dimension, and where each symbol was replaced by a constant."""

    def __init__(self, decided: bool = False) -> None:
        super().__init__(logging.DEBUG if decided else logging.INFO)
        self.sources: dict[str, str] = {}  # symbol -> source name
        self.fixed: dict[str, Site] = {}  # symbol -> where it was replaced by a constant
        self.guards: list[tuple[str, Site]] = []  # (expression, where it was added)
        # with decided=True: where a size condition was decided from the range alone, no guard
        # kept (``if x.shape[0] == 1:`` on a dimension export assumes >= 2), in user code
        self.decided: list[Site] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.msg if isinstance(record.msg, str) else ""
        args = record.args if isinstance(record.args, tuple) else ()
        if message.startswith("create_symbol") and len(args) >= 3:
            self.sources[str(args[0])] = str(args[2])
        elif message.startswith("set_replacement") and len(args) >= 2:
            symbol, target = str(args[0]), args[1]
            if getattr(target, "is_Integer", False) or isinstance(target, int):
                self.fixed.setdefault(symbol, _user_frame_now())
        elif "[guard added]" in message and len(args) >= 2:
            self.guards.append((str(args[1]), _user_frame_now()))
        elif "[statically known]" in message and self.level <= logging.DEBUG:
            site = _user_frame_now()
            if site.location is not None and site.module is not None:  # inside a forward
                self.decided.append(site)

    def failing_guard(self, sizes: Mapping[tuple[str, int], int]) -> tuple[str, Site] | None:
        """The first guard recorded that another call's ``sizes`` (by input place and
        dimension) do not satisfy, with the statement that added it."""
        values: dict[str, int] = {}
        for symbol, source in self.sources.items():
            place = source_place(source)
            if place is not None and place in sizes:
                values[symbol] = sizes[place]
        if not values:
            return None
        for expression, site in self.guards:
            if evaluate_guard(expression, values) is False:
                return expression, site
        return None

    def places(self) -> dict[tuple[str, int], Site]:
        found: dict[tuple[str, int], Site] = {}
        for symbol, site in self.fixed.items():
            place = source_place(self.sources.get(symbol, ""))
            if place is not None:
                found.setdefault(place, site)
        return found


@contextlib.contextmanager
def reading_specializations(decided: bool = False) -> Iterator[ShapeSites]:
    """Within the block, where export fixes an input dimension is recorded (the shape
    environment's log at INFO, read and not passed on; at DEBUG with ``decided``: the
    conditions decided without a guard too); the logger is as before after."""
    logger = logging.getLogger(SHAPE_LOG)
    sites = ShapeSites(decided)
    level = logger.level
    logger.addHandler(sites)
    logger.setLevel(sites.level)
    try:
        yield sites
    finally:
        logger.removeHandler(sites)
        logger.setLevel(level)


def shape_log(
    model: torch.nn.Module,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    dims: Mapping[str, Sequence[int]],
    decided: bool = False,
) -> ShapeSites:
    """One more non-strict export of the call, with ``dims`` dynamic, reading where the
    shape environment fixed a dimension or added a guard. The user's Python runs for
    real in non-strict export, so its frame is on the stack at each of those moments.
    The caller keeps torch's output quiet and the model's state as it should be."""
    spec = dynamic_shapes(model, args, kwargs, dims)
    with reading_specializations(decided) as sites:
        try:
            torch.export.export(model, tuple(args), dict(kwargs), dynamic_shapes=spec, strict=False)
        except Exception:  # what was recorded before the failure still counts
            pass
    return sites


def locate_specializations(found: Sequence[Specialized], sites: ShapeSites) -> list[Specialized]:
    """``found`` with the user's statement that fixed each dimension, where known."""
    places = sites.places()
    located = []
    for item in found:
        site = places.get((item.place, item.dim))
        located.append(dataclasses.replace(item, location=site.location, module=site.module) if site else item)
    return located
