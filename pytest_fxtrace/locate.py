"""The user's statement: which frame of a traceback (or which line of a node's stack
trace) is the user's code -- never torch's, the standard library's or ours -- and its
whole statement, path and line (``Location``); the ``if isinstance(...)`` guard that
picked the wrong branch.

Knows files, frames and source; knows nothing of torch.fx's classification, the check
or pytest.
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

import torch

from pytest_fxtrace.paths import shown_path
from pytest_fxtrace.types import Location

TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


_OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


_STDLIB_DIRS = tuple(
    os.path.abspath(sysconfig.get_paths()[key]) + os.sep for key in ("stdlib", "platstdlib")
)


_SITE_DIRS = tuple(
    os.path.abspath(sysconfig.get_paths()[key]) + os.sep for key in ("purelib", "platlib")
)


def is_user_file(filename: str) -> bool:
    """Library model code (torchvision, timm) counts as the user's; torch, this plugin,
    the standard library and generated code do not."""
    if not filename or filename.startswith("<"):
        return False
    path = os.path.abspath(filename)
    if path.startswith(TORCH_DIR) or path.startswith(_OWN_DIR):
        return False
    if path.startswith(_STDLIB_DIRS) and not path.startswith(_SITE_DIRS):
        return False
    return True


def is_user_frame(frame: types.FrameType) -> bool:
    """A frame of the user's model code: in a user file (``is_user_file``) and neither
    the tracer's machinery -- a method of a tracer (the project's own, HF's) or of its proxy
    class (HF's ``HFProxy.__bool__``), or a function holding a tracer (HF's wrappers of
    patched functions) -- nor a decorator's wrapper (``is_pass_through_wrapper``): they run
    *for* the user's line rather than being it. Model code never holds the tracer, only its
    proxies, and is never a method of one."""
    if not is_user_file(frame.f_code.co_filename) or is_pass_through_wrapper(frame):
        return False
    local = frame.f_locals
    if isinstance(local.get("self"), torch.fx.Proxy):
        return False
    return not any(isinstance(value, torch.fx.proxy.TracerBase) for value in local.values())


def is_pass_through_wrapper(frame: types.FrameType) -> bool:
    """Whether ``frame`` is a decorator's wrapper handing the call on to the function it
    wraps -- ``def wrapper(*args, **kwargs): ... return func(*args, **kwargs)`` with
    ``func`` closed over, as ``typing_extensions.deprecated`` (on ``torch._check_is_size``)
    and most ``functools.wraps`` decorators write it. The statement that failed is its
    caller's, so that frame is the user's, not the wrapper's line in a library.

    Example: ``typing_extensions.py:3140 return arg(*args, **kwargs)`` -> True.
    """
    code = frame.f_code
    takes_anything = inspect.CO_VARARGS | inspect.CO_VARKEYWORDS
    if code.co_flags & takes_anything != takes_anything or not code.co_freevars:
        return False
    # a dead frame's f_lineno is the line it was running when the exception left it
    wrapped = called_names(statement_at(code, frame.f_lineno)) & set(code.co_freevars)
    return any(callable(frame.f_locals.get(name)) for name in wrapped)


def frames(tb: types.TracebackType | None) -> list[tuple[types.FrameType, int]]:
    """(frame, line) of each traceback entry, outermost first."""
    found = []
    while tb is not None:
        found.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return found


def user_location(exc: BaseException) -> Location | None:
    """The innermost frame of ``exc``'s traceback that is the user's code."""
    for frame, lineno in reversed(frames(exc.__traceback__)):
        if is_user_frame(frame):
            filename = frame.f_code.co_filename
            return Location(shown_path(filename, imports=False), lineno, statement_at(frame.f_code, lineno))
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
    return statement_in(code.co_filename, lineno, limit)


def statement_in(filename: str, lineno: int, limit: int = 120) -> str:
    """``statement_at`` for a file and line where no code object is at hand (a stack
    TorchDynamo kept as ``traceback.FrameSummary``)."""
    line = _without_comment(linecache.getline(filename, lineno))
    spans = [(a, b) for a, b in _index(filename)[0] if a <= lineno <= b]
    if not spans:
        return line
    first, last = min(spans, key=lambda span: span[1] - span[0])
    if first == last:
        return line
    text = " ".join(_without_comment(linecache.getline(filename, n)) for n in range(first, last + 1))
    text = text.replace("( ", "(").replace(" )", ")").replace(", )", ")")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def raised_in_user_frame(exc: BaseException) -> bool:
    found = frames(exc.__traceback__)
    return bool(found) and is_user_frame(found[-1][0])


def innermost_user_line(exc: BaseException) -> tuple[types.CodeType, int] | None:
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
            return Location(shown_path(code.co_filename, imports=False), line, f"if {ast.unparse(node.test)}:")
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
    return Location(shown_path(path, imports=False), best, _without_comment(linecache.getline(path, best)))


__all__ = [
    "called_names",
    "frames",
    "innermost_user_line",
    "is_user_file",
    "is_pass_through_wrapper",
    "is_user_frame",
    "isinstance_guard",
    "raised_in_user_frame",
    "statement_at",
    "user_location",
]


# -- where a graph's node came from ---------------------------------------------------------

_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def node_location(node: torch.fx.Node) -> Location | None:
    """The innermost user frame of a node's recorded stack trace."""
    trace = node.stack_trace or ""
    found = None
    for match in _FRAME.finditer(trace):
        path, line = match.group(1), int(match.group(2))
        if is_user_file(path):
            found = (path, line)
    if found is None:
        return None
    path, line = found
    return Location(shown_path(path, imports=False), line, linecache.getline(path, line).strip())


def module_of_node(node: torch.fx.Node) -> tuple[str, str | None]:
    """The path and class name of the submodule whose forward made ``node``."""
    stack = node.meta.get("nn_module_stack") or {}
    if node.op == "call_module":
        return str(node.target), None
    if not stack:
        return "", None
    from pytest_fxtrace._compat import module_stack_entries

    _, path, kind = module_stack_entries(stack)[-1]
    return path, getattr(kind, "__name__", None)
