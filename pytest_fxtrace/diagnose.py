"""Why a trace failed and where: category, the user's statement, the failing submodule.

Classification looks at the exception *and* the frames it went through (which
``torch.fx`` hook raised it, which Python construct the user's line uses), not
at message text alone: messages change across torch versions, and several
failures surface as a plain TypeError in the user's own frame.
"""

from __future__ import annotations

import ast
import functools
import inspect
import linecache
import os
import re
import sysconfig
import textwrap
import types
from typing import Any

import torch
import torch.fx

from ._compat import last_node, module_stack_entries
from .types import Category, Diagnosis, Location

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
    Category.BAKED_CONSTANT: "draw random values from the input (torch.randn_like(x)), create tensors "
    "inside forward rather than updating one in place, and keep changing state in a registered "
    "buffer updated with tensor ops, so the graph records it",
    Category.TRAINING_FLAG: "trace in the mode the model is used in, or make the mode-dependent part a leaf",
    Category.HOOKS_DROPPED: "make the hooked module a leaf, or move the hook's work into forward",
}


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


def is_user_frame(frame: types.FrameType) -> bool:
    """A frame of the user's model code: in a user file (``is_user_file``) and not the
    tracer's machinery -- a method of a tracer (the project's own, HF's) or a function
    holding one (HF's wrappers of patched functions) -- which runs *for* the traced line
    rather than being it. Model code never holds the tracer, only its proxies."""
    if not is_user_file(frame.f_code.co_filename):
        return False
    return not any(isinstance(value, torch.fx.proxy.TracerBase) for value in frame.f_locals.values())


def _frames(tb: types.TracebackType | None) -> list[types.FrameType]:
    frames = []
    while tb is not None:
        frames.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return frames  # type: ignore[return-value]


def user_location(exc: BaseException) -> Location | None:
    """The innermost frame of ``exc``'s traceback that is the user's code."""
    for frame, lineno in reversed(_frames(exc.__traceback__)):  # type: ignore[misc]
        if is_user_frame(frame):
            filename = frame.f_code.co_filename
            return Location(display_path(filename), lineno, statement_at(frame.f_code, lineno))
    return None


def _without_comment(line: str) -> str:
    import io
    import tokenize

    if "#" not in line:
        return line.strip()
    try:
        for token in tokenize.generate_tokens(io.StringIO(line.strip() + "\n").readline):
            if token.type == tokenize.COMMENT:
                return line.strip()[: token.start[1]].rstrip()
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return line.strip()


_COMPOUND = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If, ast.For, ast.While, ast.With, ast.Try)


@functools.lru_cache(maxsize=256)
def _file_index(filename: str, mtime: float) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Spans of the simple statements of a file, and of its ``if isinstance(...)``
    blocks; parsed once per file (diagnosing a large model hits the same files often)."""
    try:
        tree = ast.parse("".join(linecache.getlines(filename)))
    except (SyntaxError, ValueError):
        return [], []
    statements, guards = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and any(
            isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == "isinstance"
            for c in ast.walk(node.test)
        ):
            guards.append((node.lineno, node.end_lineno or node.lineno))
        if isinstance(node, ast.stmt) and not isinstance(node, _COMPOUND):
            statements.append((node.lineno, node.end_lineno or node.lineno))
    return statements, guards


def _index(filename: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    try:
        mtime = os.path.getmtime(filename)
    except OSError:
        return [], []
    return _file_index(filename, mtime)


def statement_at(code: types.CodeType, lineno: int, limit: int = 120) -> str:
    """The whole statement around ``lineno`` (several lines joined), e.g.
    ``torch._assert(len(val) == 2, ...)`` rather than its middle line."""
    line = _without_comment(linecache.getline(code.co_filename, lineno))
    spans = [(a, b) for a, b in _index(code.co_filename)[0] if a <= lineno <= b]
    if not spans:
        return line
    first, last = min(spans, key=lambda span: span[1] - span[0])
    if first == last:
        return line
    text = " ".join(_without_comment(linecache.getline(code.co_filename, n)) for n in range(first, last + 1))
    text = text.replace("( ", "(").replace(" )", ")").replace(", )", ")")
    return text if len(text) <= limit else text[: limit - 3] + "..."


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


def _user_frame(exc: BaseException) -> types.FrameType | None:
    for frame, _ in reversed(_frames(exc.__traceback__)):  # type: ignore[misc]
        if is_user_frame(frame):
            return frame
    return None


def _raised_in_user_frame(exc: BaseException) -> bool:
    frames = _frames(exc.__traceback__)
    return bool(frames) and is_user_frame(frames[-1][0])  # type: ignore[index]


def _innermost_user_line(exc: BaseException) -> tuple[types.CodeType, int] | None:
    tb = exc.__traceback__
    found = None
    while tb is not None:
        if is_user_frame(tb.tb_frame):
            found = (tb.tb_frame.f_code, tb.tb_lineno)
        tb = tb.tb_next
    return found


def isinstance_guard(code: types.CodeType, lineno: int | None = None) -> Location | None:
    """The ``if isinstance(...)`` of a user's function that picked the wrong branch: a
    traced value is a Proxy, not a Tensor, so the guard picks the branch meant for
    something else. With ``lineno`` (a failing line): the guard enclosing it; without
    (a traced-through ``forward`` whose graph diverged): the function's first guard."""
    if lineno is not None:
        return _enclosing_isinstance(code, lineno)
    try:
        lines, first = inspect.getsourcelines(code)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.IfExp)) and "isinstance" in called_names(ast.unparse(node.test)):
            line = node.lineno + first - 1
            return Location(display_path(code.co_filename), line, f"if {ast.unparse(node.test)}:")
    return None


def called_names(source: str) -> set[str]:
    """The names of the functions a statement calls (``torch.randn(4)`` -> ``randn``)."""
    try:
        tree = ast.parse(source.strip().rstrip(":").removeprefix("if ").removeprefix("return "))
    except SyntaxError:
        return set(re.findall(r"(\w+)\(", source))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.id if isinstance(func, ast.Name) else getattr(func, "attr", ""))
    return names


def _enclosing_isinstance(code: types.CodeType, lineno: int) -> Location | None:
    guards = [
        a for a, b in _index(code.co_filename)[1] if a <= lineno <= b and a >= code.co_firstlineno
    ]
    if not guards:
        return None
    best, path = max(guards), code.co_filename
    return Location(display_path(path), best, _without_comment(linecache.getline(path, best)))


def classify(exc: BaseException, location: Location | None) -> tuple[str, str]:
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
    failing = _innermost_user_line(exc)
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
) -> tuple[str, str]:
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
        if constructors and ("torch" in (location.source if location else "") or not innermost):
            return Category.TENSOR_CONSTRUCTOR, f"passes a traced value to torch.{sorted(constructors)[0]}"
        conversions = called & {"int", "float", "bool", "complex", "range", "asarray", "array", "item"}
        if conversions or _raised_in_user_frame(exc) or "Proxy" in text:
            if has_in and "not iterable" in text:
                return Category.CONTAINS, "tests membership (`in`) on a traced value"
            if "not iterable" in text:
                return Category.ITERATION, "iterates over a traced value"
            what = f"{sorted(conversions)[0]}()" if conversions else "a Python conversion"
            return Category.TYPE_CONVERSION, f"converts a traced value to a Python number with {what}"
    return Category.OTHER, f"raised {type(exc).__name__}"


def describe_node(node: Any) -> str | None:
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
    for frame, _ in reversed(_frames(exc.__traceback__)):  # type: ignore[misc]
        code = frame.f_code
        if not is_user_frame(frame) or code.co_name in ("forward", "<module>"):
            continue
        func = frame.f_globals.get(code.co_name)
        module = frame.f_globals.get("__name__")
        if getattr(func, "__code__", None) is code and module and module != "__main__":
            found.append(f"{module}:{code.co_name}")
    return tuple(dict.fromkeys(found))


def failing_module(tracer: Any) -> tuple[str, str | None]:
    """Qualified path and class name of the module being traced when tracing stopped."""
    stack = getattr(tracer, "module_stack", None)
    if stack:
        _, path, module_type = module_stack_entries(stack)[-1]
        name = module_type.__name__ if isinstance(module_type, type) else None
        return path or "", name
    root = getattr(tracer, "root", None)
    return "", type(root).__name__ if root is not None else None


def failure_context(tracer: Any) -> tuple[str, str | None, Any]:
    """What ``tracer`` was doing when tracing stopped: the failing module's path and
    class name, and the last node of the partial graph. Cheap; the tracer moves on
    afterwards, so take it right away and diagnose later (``diagnose_exception``)."""
    module, module_type = failing_module(tracer)
    graph = getattr(tracer, "graph", None)
    last = last_node(graph) if isinstance(graph, torch.fx.Graph) else None
    return module, module_type, last


def diagnose_exception(exc: BaseException, context: tuple[str, str | None, Any]) -> Diagnosis:
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
        code_fix=CODE_FIXES.get(category),
        last_node=describe_node(last),
        helpers=_helpers(exc),
    )


def diagnose_trace_failure(exc: BaseException, tracer: Any) -> Diagnosis:
    """A ``Diagnosis`` for ``exc``, raised by ``tracer.trace``."""
    return diagnose_exception(exc, failure_context(tracer))


def format_error(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {first[0] if first else ''}".rstrip(": ")


__all__ = [
    "CODE_FIXES",

    "Diagnosis",
    "Location",
    "classify",
    "describe_node",
    "diagnose_trace_failure",
    "user_location",
]
