"""Why a trace failed and where: category, the user's statement, the failing submodule.

Classification looks at the exception *and* the frames it went through (which
``torch.fx`` hook raised it, which Python construct the user's line uses), not
at message text alone: messages change across torch versions, and several
failures surface as a plain TypeError in the user's own frame.
"""

from __future__ import annotations

import ast
import dataclasses
import linecache
import os
import sysconfig
import types
from typing import Any

import torch

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_STDLIB_DIRS = tuple(
    os.path.abspath(sysconfig.get_paths()[key]) + os.sep for key in ("stdlib", "platstdlib")
)
_SITE_DIRS = tuple(
    os.path.abspath(sysconfig.get_paths()[key]) + os.sep for key in ("purelib", "platlib")
)

TENSOR_CONSTRUCTORS = frozenset(
    {
        "zeros", "ones", "full", "empty", "arange", "range", "linspace", "logspace",
        "tensor", "as_tensor", "eye", "rand", "randn", "randint", "randperm", "normal",
        "zeros_like", "ones_like", "full_like", "empty_like", "rand_like", "randn_like",
    }
)  # fmt: skip

CODE_FIXES = {
    "control-flow": "branch without Python control flow: torch.where(cond, a, b) for values, "
    "torch._assert(cond, msg) for checks, or make the deciding argument a concrete arg",
    "iteration": "index explicitly (x[0], x[1]) or use torch.unbind/split, whose results the "
    "graph records; a loop over a concrete Python value is fine",
    "len": "use x.shape[0] (or x.size(0)) instead of len(x)",
    "type-conversion": "keep values as tensors (x.shape[0] stays symbolic; avoid int()/float()/"
    ".item()/numpy); or mark the helper with torch.fx.wrap / autowrap_functions",
    "contains": "compare with tensor ops ((x == v).any()) instead of `v in x`",
    "tensor-constructor": "derive the tensor from an input (torch.zeros_like(x), x.new_zeros(...)) "
    "instead of building it from a traced size",
    "mutation": "use the out-of-place op (x = x + y rather than x += y / x.add_(y))",
    "unregistered-module": "register the module in __init__ (self.act = nn.ReLU()) instead of "
    "creating it inside forward",
    "specialization": "pass the varying value as a tensor, or trace once per value",
    "baked-constant": "register the tensor as a buffer, or draw random values from the input "
    "(torch.randn_like(x)) so the graph records the call",
    "training-flag": "trace in the mode the model is used in, or make the mode-dependent part a leaf",
    "hooks-dropped": "make the hooked module a leaf, or move the hook's work into forward",
}


@dataclasses.dataclass(frozen=True)
class Location:
    """The user's statement: file, line and its source text."""

    path: str
    line: int
    source: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclasses.dataclass(frozen=True)
class Diagnosis:
    """Why a check failed, in the user's terms."""

    category: str
    location: Location | None
    module: str  # qualified path of the failing submodule, "" for the root
    module_type: str | None
    reason: str  # what happened, completing "<module> is not traceable: <source> at <loc> ..."
    error: str  # original exception type and message
    code_fix: str | None = None


def is_user_file(filename: str) -> bool:
    """Library model code (torchvision, timm) counts as the user's; torch, this plugin,
    the standard library and generated code do not."""
    if not filename or filename.startswith("<"):
        return False
    path = os.path.abspath(filename)
    if path.startswith(_TORCH_DIR) or path.startswith(_OWN_DIR):
        return False
    if path.startswith(_STDLIB_DIRS) and not path.startswith(_SITE_DIRS):
        return False
    return True


def _frames(tb: types.TracebackType | None) -> list[types.FrameType]:
    frames = []
    while tb is not None:
        frames.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return frames  # type: ignore[return-value]


def user_location(exc: BaseException) -> Location | None:
    """The innermost frame of ``exc``'s traceback that is the user's code."""
    for frame, lineno in reversed(_frames(exc.__traceback__)):  # type: ignore[misc]
        filename = frame.f_code.co_filename
        if is_user_file(filename):
            source = linecache.getline(filename, lineno).strip()
            return Location(display_path(filename), lineno, source)
    return None


def display_path(filename: str) -> str:
    """Relative to the working directory when inside it, else as is."""
    path = os.path.abspath(filename)
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def _torch_functions(exc: BaseException) -> list[str]:
    """Names of the torch.fx functions the exception passed through, innermost last."""
    names = []
    for frame, _ in _frames(exc.__traceback__):  # type: ignore[misc]
        if frame.f_code.co_filename.startswith(_TORCH_DIR):
            names.append(frame.f_code.co_name)
    return names


def _constructs(source: str) -> tuple[set[str], bool]:
    """Called names and whether an ``in`` test appears in one line of source."""
    try:
        tree = ast.parse(source.strip().rstrip(":").removeprefix("elif ").removeprefix("if ")
                         .removeprefix("while ").removeprefix("assert "), mode="exec")
    except SyntaxError:
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


def classify(exc: BaseException, location: Location | None) -> tuple[str, str]:
    """(category id, reason) for an exception raised while tracing."""
    fx_functions = _torch_functions(exc)
    innermost = fx_functions[-1] if fx_functions else ""
    called, has_in = _constructs(location.source) if location else (set(), False)
    text = str(exc)
    if "path_of_module" in fx_functions or "not installed as a submodule" in text:
        return "unregistered-module", "calls a module that is not a registered submodule"
    if "mutable operation" in text or innermost == "check_for_mutable_operation":
        return "mutation", "applies a mutable operation to a traced value"
    if innermost in ("to_bool", "__bool__") or "control flow" in text:
        if location and location.source.startswith("assert"):
            return "control-flow", "asserts on a traced value"
        return "control-flow", "uses a traced value in control flow"
    if has_in and (innermost in ("iter", "__iter__") or "not iterable" in text):
        return "contains", "tests membership (`in`) on a traced value"
    if innermost in ("iter", "__iter__", "keys") or "cannot be iterated" in text:
        return "iteration", "iterates over a traced value"
    if innermost == "__len__" or "'len' is not supported" in text:
        return "len", "calls len() on a traced value"
    if isinstance(exc, TypeError) and "Proxy" in text:
        constructors = called & TENSOR_CONSTRUCTORS
        if constructors:
            return "tensor-constructor", f"passes a traced value to torch.{sorted(constructors)[0]}"
        if "not iterable" in text:
            return "iteration", "iterates over a traced value"
        return "type-conversion", "converts a traced value to a Python number"
    return "other", f"raised {type(exc).__name__}"


def failing_module(tracer: Any) -> tuple[str, str | None]:
    """Qualified path and class name of the module being traced when tracing stopped."""
    stack = getattr(tracer, "module_stack", None)
    if stack:
        path, module_type = next(reversed(stack.values()))
        name = module_type.__name__ if isinstance(module_type, type) else None
        return path or "", name
    root = getattr(tracer, "root", None)
    return "", type(root).__name__ if root is not None else None


def diagnose_trace_failure(exc: BaseException, tracer: Any) -> Diagnosis:
    """A ``Diagnosis`` for ``exc``, raised by ``tracer.trace``."""
    location = user_location(exc)
    category, reason = classify(exc, location)
    module, module_type = failing_module(tracer)
    return Diagnosis(
        category=category,
        location=location,
        module=module,
        module_type=module_type,
        reason=reason,
        error=format_error(exc),
        code_fix=CODE_FIXES.get(category),
    )


def format_error(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {first[0] if first else ''}".rstrip(": ")


__all__ = [
    "CODE_FIXES",
    "Diagnosis",
    "Location",
    "classify",
    "diagnose_trace_failure",
    "user_location",
]
