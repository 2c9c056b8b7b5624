"""Why a trace failed: the category, the failing submodule, the helper functions on the
failing stack, as a ``Diagnosis`` (where: ``locate.py``), and the change in code each
category calls for (``CODE_FIXES``).

Classification looks at the exception *and* the frames it went through (which
``torch.fx`` hook raised it, which Python construct the user's line uses), not
at message text alone: messages change across torch versions, and several
failures surface as a plain TypeError in the user's own frame.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import inspect
import sys

import torch
import torch.fx

from pytest_fxtrace._compat import last_node, module_stack_entries
from pytest_fxtrace.diagnose import DIVERGENCE_FIXES, format_error
from pytest_fxtrace.locate import (
    TORCH_DIR,
    frames,
    innermost_user_line,
    is_user_frame,
    isinstance_guard,
    raised_in_user_frame,
    user_location,
)
from pytest_fxtrace.types import Category, Diagnosis, Location

TENSOR_CONSTRUCTORS = frozenset(
    {
        "zeros", "ones", "full", "empty", "arange", "range", "linspace", "logspace",
        "tensor", "as_tensor", "eye", "rand", "randn", "randint", "randperm", "normal",
        "zeros_like", "ones_like", "full_like", "empty_like", "rand_like", "randn_like",
    }
)  # fmt: skip

CODE_FIXES: dict[str, str] = {  # by category id (a Category is its id)
    Category.CONTROL_FLOW: "branch without Python control flow: torch.where(cond, a, b) for values, "
    "torch._assert(cond, msg) for checks, or make the deciding argument a concrete arg",
    Category.ITERATION: "index explicitly (x[0], x[1]) or use torch.unbind/split, whose results the "
    "graph records; a loop over a concrete Python value is fine",
    Category.LEN: "use x.shape[0] (or x.size(0)) instead of len(x)",
    Category.TYPE_CONVERSION: "keep values as tensors (x.shape[0] stays symbolic; avoid int()/float()/"
    ".item()/numpy); or mark the helper with torch.fx.wrap / autowrap_functions",
    Category.CONTAINS: "compare with tensor ops ((x == v).any()) instead of `v in x`",
    Category.TENSOR_CONSTRUCTOR: "derive the tensor from an input (torch.zeros_like(x), x.new_zeros(...)) "
    "instead of building it from a traced size",
    Category.MUTATION: "use the out-of-place op (x = x + y rather than x += y / x.add_(y))",
    Category.UNREGISTERED_MODULE: "register the module in __init__ (self.act = nn.ReLU()) instead of "
    "creating it inside forward",
    Category.SPECIALIZATION: "pass the varying value as a tensor, or trace once per value",
    **DIVERGENCE_FIXES,
}

# A ``for`` over ``range()`` of a traced size fails as a conversion (range() needs an int),
# but what the user has to change is the loop: the iteration advice, for a size.
LOOP_OVER_SIZE_FIX = (
    "a loop over a traced size cannot be unrolled: vectorise it (one tensor op over the whole "
    "dimension instead of a step per element), unpack a fixed number of slices (a, b = "
    "torch.unbind(x)), or loop over a concrete size (a constant or an attribute such as self.depth)"
)


def code_fix(category: str, location: Location | None) -> str | None:
    """The change in code for a failure of ``category`` at ``location``: the category's
    own, or the loop advice where the statement loops over ``range()`` of a size.

    Example: ``code_fix("type-conversion", <for i in range(x.shape[0]):>)`` -> the loop advice.
    """
    if category == Category.TYPE_CONVERSION and location is not None and loops_over_range(location.source):
        return LOOP_OVER_SIZE_FIX
    return CODE_FIXES.get(category)


def loops_over_range(source: str) -> bool:
    """Whether a statement loops over ``range(...)``: a ``for`` header or a comprehension."""
    tree = _parse_statement(source.strip().removeprefix("async "))
    loops = [node.iter for node in ast.walk(tree) if isinstance(node, (ast.For, ast.comprehension))] if tree else []
    return any(
        isinstance(loop, ast.Call) and isinstance(loop.func, ast.Name) and loop.func.id == "range" for loop in loops
    )


def _parse_statement(source: str) -> ast.Module | None:
    """One statement, or a compound statement's header alone (``for i in range(n):``)."""
    for text in (source, source.rstrip(":") + ": pass"):
        try:
            return ast.parse(text, mode="exec")
        except SyntaxError:
            continue
    return None


def _torch_functions(exc: BaseException) -> list[str]:
    """Names of the torch.fx functions the exception passed through, innermost last."""
    names = []
    for frame, _ in frames(exc.__traceback__):
        if frame.f_code.co_filename.startswith(TORCH_DIR):
            names.append(frame.f_code.co_name)
    return names


def _constructs(source: str) -> tuple[set[str], bool]:
    """Called names and whether an ``in`` test appears in one line of source."""
    tree = _parse_statement(source.strip().rstrip(":").removeprefix("elif ").removeprefix("if ")
                            .removeprefix("while ").removeprefix("assert "))
    if tree is None:
        return set(), " in " in f" {source} "
    called: set[str] = set()
    has_in = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                called.add(func.id)
            elif isinstance(func, ast.Attribute):
                called.add(func.attr)
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            has_in = True
    return called, has_in


def classify(exc: BaseException, location: Location | None) -> tuple[Category, str]:
    """(category id, reason) for an exception raised while tracing.

    Decided on the torch.fx hook the exception came through (``to_bool``,
    ``__iter__``, ``__len__``, ``path_of_module``...), on whether it was raised in
    the user's own frame, and on the Python construct of the user's statement;
    message text is only a fallback, since it changes across torch versions.
    """
    fx_functions = _torch_functions(exc)
    innermost = fx_functions[-1] if fx_functions else ""
    called, has_in = _constructs(location.source) if location else (set(), False)
    text = str(exc)
    failing = innermost_user_line(exc)
    guard = isinstance_guard(*failing) if failing is not None else None
    if guard is not None:
        category, reason = _classify(exc, location, fx_functions, innermost, called, has_in, text)
        return Category.CONTROL_FLOW, (
            f"{reason}: `{guard.source}` (line {guard.line}) is False for a traced value "
            "(a Proxy, not a Tensor), so tracing took the branch meant for other inputs"
        )
    return _classify(exc, location, fx_functions, innermost, called, has_in, text)


def _classify(
    exc: BaseException,
    location: Location | None,
    fx_functions: list[str],
    innermost: str,
    called: set[str],
    has_in: bool,
    text: str,
) -> tuple[Category, str]:
    kind = getattr(exc, "unrecordable", None)  # set by tracer.user_facing
    if kind is not None:
        return Category.OTHER, f"hands torch.fx a {kind.__qualname__} object, which a graph cannot record"
    if isinstance(exc, AssertionError) and "isinstance" in called:
        return Category.CONTROL_FLOW, (
            "asserts isinstance(...) on a traced value, which is a Proxy rather than a Tensor "
            "while tracing"
        )
    if "path_of_module" in fx_functions or "not installed as a submodule" in text:
        return Category.UNREGISTERED_MODULE, "calls a module that is not a registered submodule"
    if innermost == "check_for_mutable_operation" or "mutable operation" in text:
        return Category.MUTATION, "applies a mutable operation to a traced value"
    iterated = innermost in ("iter", "__iter__", "keys", "__contains__") or "cannot be iterated" in text
    if innermost in ("to_bool", "__bool__") or "control flow" in text and not iterated:
        if location and location.source.startswith("assert"):
            return Category.CONTROL_FLOW, "asserts on a traced value"
        return Category.CONTROL_FLOW, "uses a traced value in control flow"
    if has_in and iterated:
        return Category.CONTAINS, "tests membership (`in`) on a traced value"
    if iterated:
        return Category.ITERATION, "iterates over a traced value"
    if innermost == "__len__" or "'len' is not supported" in text:
        return Category.LEN, "calls len() on a traced value"
    if isinstance(exc, (TypeError, ValueError)):
        constructors = called & TENSOR_CONSTRUCTORS
        if location and loops_over_range(location.source):
            constructors -= {"range"}  # Python's range() of a loop, not torch.range
        if constructors and ("torch" in (location.source if location else "") or not innermost):
            return Category.TENSOR_CONSTRUCTOR, f"passes a traced value to torch.{sorted(constructors)[0]}"
        conversions = called & {"int", "float", "bool", "complex", "range", "asarray", "array", "item"}
        if conversions or raised_in_user_frame(exc) or "Proxy" in text:
            if has_in and "not iterable" in text:
                return Category.CONTAINS, "tests membership (`in`) on a traced value"
            if "not iterable" in text:
                return Category.ITERATION, "iterates over a traced value"
            what = f"{sorted(conversions)[0]}()" if conversions else "a Python conversion"
            return Category.TYPE_CONVERSION, f"converts a traced value to a Python number with {what}"
    return Category.OTHER, f"raised {type(exc).__name__}"


def describe_node(node: torch.fx.Node | None) -> str | None:
    """``add_1 = call_function add`` for the last node of a partial graph."""
    if node is None or getattr(node, "op", None) in (None, "root"):
        return None
    target = node.target
    name = getattr(target, "__name__", None) or str(target)
    return f"{node.name} ({node.op} {name})"


def _helpers(exc: BaseException) -> tuple[str, ...]:
    """Dotted names (``pkg.mod:func``) of module-level user functions on the failing
    stack, innermost first: candidates for ``autowrap_functions``."""
    found = []
    for frame, _ in reversed(frames(exc.__traceback__)):
        code = frame.f_code
        if not is_user_frame(frame) or code.co_name in ("forward", "<module>"):
            continue
        func = frame.f_globals.get(code.co_name)
        module = frame.f_globals.get("__name__")
        if getattr(func, "__code__", None) is code and module and module != "__main__":
            found.append(f"{module}:{code.co_name}")
    return tuple(dict.fromkeys(found))


# what a trace was doing when it stopped: the failing module's path and class name, and the
# last node of the partial graph (failure_context)
FailureContext = tuple[str, str | None, torch.fx.Node | None]


def failing_module(tracer: torch.fx.Tracer) -> tuple[str, str | None]:
    """Qualified path and class name of the module being traced when tracing stopped."""
    stack = getattr(tracer, "module_stack", None)
    if stack:
        _, path, module_type = module_stack_entries(stack)[-1]
        name = module_type.__name__ if isinstance(module_type, type) else None
        return path or "", name
    root = getattr(tracer, "root", None)
    return "", type(root).__name__ if root is not None else None


def failure_context(tracer: torch.fx.Tracer) -> FailureContext:
    """What ``tracer`` was doing when tracing stopped: the failing module's path and
    class name, and the last node of the partial graph. Cheap; the tracer moves on
    afterwards, so take it right away and diagnose later (``diagnose_exception``)."""
    module, module_type = failing_module(tracer)
    graph = getattr(tracer, "graph", None)
    last = last_node(graph) if isinstance(graph, torch.fx.Graph) else None
    return module, module_type, last


def diagnose_exception(exc: BaseException, context: FailureContext) -> Diagnosis:
    """A ``Diagnosis`` for ``exc`` in a ``failure_context``: the source and AST work."""
    module, module_type, last = context
    location = user_location(exc)
    category, reason = classify(exc, location)
    return Diagnosis(
        category=category,
        location=location,
        module=module,
        module_type=module_type,
        reason=reason,
        error=format_error(exc),
        code_fix=code_fix(category, location),
        last_node=describe_node(last),
        helpers=_helpers(exc),
    )


def diagnose_trace_failure(exc: BaseException, tracer: torch.fx.Tracer) -> Diagnosis:
    """A ``Diagnosis`` for ``exc``, raised by ``tracer.trace``."""
    return diagnose_exception(exc, failure_context(tracer))


def tracer_refuses(tracer: torch.fx.Tracer, model: torch.nn.Module, exc: BaseException) -> bool:
    """Whether ``exc`` is transformers' ``HFTracer`` failing before it reached any forward
    of a model it does not support (``transformers.utils.fx.is_model_supported``; its own
    ``symbolic_trace`` refuses such a model): its dummy inputs read what the config lacks.
    A failure inside the model's code is the model's, diagnosed as any other."""
    hf_fx = sys.modules.get("transformers.utils.fx")
    supported = getattr(hf_fx, "is_model_supported", None)
    hf_tracer = getattr(hf_fx, "HFTracer", None)
    if not (isinstance(hf_tracer, type) and isinstance(tracer, hf_tracer) and callable(supported)):
        return False
    in_forward = any(
        frame.f_code.co_name == "forward" and isinstance(frame.f_locals.get("self"), torch.nn.Module)
        for frame, _ in frames(exc.__traceback__)
    )
    return not in_forward and not supported(model)


def unsupported_by_tracer(exc: BaseException, tracer: torch.fx.Tracer, model: torch.nn.Module) -> Diagnosis:
    """``exc`` raised by an ``HFTracer`` tracing an architecture it does not support: said
    so first, where the failure itself (a config attribute its dummy inputs read, say) is
    a consequence."""
    name = type(model).__name__
    found = diagnose_trace_failure(exc, tracer)
    return dataclasses.replace(
        found,
        category=Category.UNSUPPORTED,
        location=None,
        reason=(
            f"is an architecture transformers' {type(tracer).__name__} does not support "
            f"(transformers.utils.fx.symbolic_trace refuses it: 'Model {name} is not supported yet'); "
            f"tracing it anyway raised {type(exc).__name__}"
        ),
        code_fix="check it with the default tracer (pytest_fxtrace.Tracer: leave tracer= unset) or with "
        "backend='export', which need no per-architecture support",
    )


def static_forward_failure(exc: BaseException, model: torch.nn.Module) -> Diagnosis:
    """``exc`` raised tracing a model whose ``forward`` is a ``@staticmethod``: torch.fx's
    ``Tracer.trace`` calls ``type(root).forward(root, *inputs)``, so the module itself
    arrives as forward's first input (plain ``torch.fx.symbolic_trace`` fails the same way;
    ``nn.Module.__call__``, export and torch.compile pass the inputs alone)."""
    forward = inspect.unwrap(type(model).forward)
    code = forward.__code__
    location = None
    with contextlib.suppress(OSError, TypeError):
        lines, first = inspect.getsourcelines(forward)
        offset = next((i for i, line in enumerate(lines) if line.lstrip().startswith("def ")), 0)
        location = Location(code.co_filename, first + offset, lines[offset].strip())
    first_input = code.co_varnames[0] if code.co_argcount else "its first input"
    name = type(model).__name__
    return Diagnosis(
        category=Category.UNSUPPORTED,
        location=location,
        reason=(
            f"makes forward a @staticmethod: torch.fx calls {name}.forward(module, *inputs), so the module "
            f"arrives as {first_input!r} ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
        ),
        module_type=name,
        error=format_error(exc),
        code_fix=f"make forward a regular method: def forward(self, {', '.join(code.co_varnames[: code.co_argcount])})",
    )


__all__ = [
    "CODE_FIXES",
    "classify",
    "code_fix",
    "describe_node",
    "diagnose_exception",
    "diagnose_trace_failure",
    "static_forward_failure",
    "tracer_refuses",
    "unsupported_by_tracer",
    "failure_context",
]
