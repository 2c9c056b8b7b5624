"""What every backend's diagnosis reads from source and errors: the statement of a
class's methods that writes an attribute (a buffer update a graph may lose), how it
writes it, and an exception in one line. Each backend's own classification of its
failures lives in its folder (``backends/fx/diagnose.py``, ``backends/export/diagnose.py``).
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Callable, Iterator
from typing import Any

from pytest_fxtrace.locate import is_user_file
from pytest_fxtrace.paths import shown_path
from pytest_fxtrace.types import Category, Location

# the change in code for a silent divergence, whatever captured the graph: a value or a
# mode frozen at capture, hooks the graph does not run (each backend adds its own)
DIVERGENCE_FIXES: dict[str, str] = {
    Category.BAKED_CONSTANT: "draw random values from the input (torch.randn_like(x)), create tensors "
    "inside forward rather than updating one in place, and keep changing state in a registered "
    "buffer updated with tensor ops, so the graph records it",
    Category.TRAINING_FLAG: "trace in the mode the model is used in, or make the mode-dependent part a leaf",
    Category.HOOKS_DROPPED: "make the hooked module a leaf, or move the hook's work into forward",
}


def attribute_write(cls: type, attr: str) -> Location | None:
    """The first statement of ``cls.forward`` that writes ``self.<attr>``: assigns it
    (``self.n = self.n + 1``, ``self.n += 1``) or updates it in place (a chain of methods
    ending in ``_`` on it: ``self.mean.mul_(0.9).add_(m)``); else of another method of
    ``cls`` (a helper forward calls), ``__init__`` aside. None in library code we do not
    show (torch's) or where the source cannot be read.

    Example::

        attribute_write(Counter, "calls")  # Location('models.py', 12, 'self.calls += 1')
    """
    forward = getattr(cls, "forward", None)
    helpers = [f for name, f in vars(cls).items() if inspect.isfunction(f) and name not in ("__init__", "forward")]
    for function in [forward, *helpers] if forward is not None else helpers:
        found = _attribute_write_in(function, attr)
        if found is not None:
            return found
    return None


def statement_where(function: Callable[..., Any], wanted: Callable[[ast.AST], bool]) -> tuple[ast.AST, Location] | None:
    """The first node of ``function``'s source that ``wanted`` accepts, and where it is: the
    innermost statement on its line (``if c: self.n += 1`` shows the update, not the if).
    None in library code we do not show (torch's) or where the source cannot be read."""
    try:
        lines, first = inspect.getsourcelines(function)
        source = textwrap.dedent("".join(lines))
        tree = ast.parse(source)
        path = inspect.getsourcefile(function) or ""
    except (OSError, TypeError, SyntaxError):
        return None
    if not is_user_file(path):
        return None
    found = [n for n in ast.walk(tree) if wanted(n)]
    if not found:
        return None
    node = min(found, key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))
    lineno, col = getattr(node, "lineno", 1), getattr(node, "col_offset", 0)
    statements = [
        s for s in ast.walk(tree) if isinstance(s, ast.stmt) and s.lineno == lineno
        and not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.col_offset <= col
    ]
    statement = max(statements, key=lambda s: s.col_offset, default=node)
    return node, Location(shown_path(path, imports=False), lineno + first - 1, ast.get_source_segment(source, statement) or "")


def _attribute_write_in(function: Callable[..., Any], attr: str) -> Location | None:
    def on_attr(node: ast.AST) -> bool:
        while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            node = node.func.value  # down the chain: self.mean.mul_(..).add_(..)
        if isinstance(node, ast.Attribute) and node.attr == "data" and isinstance(node.value, ast.Attribute):
            node = node.value  # self.weight.data *= self.mask
        return isinstance(node, ast.Attribute) and node.attr == attr and isinstance(node.value, ast.Name) and (
            node.value.id == "self"
        )

    def writes(node: ast.AST) -> bool:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method = node.func.attr
            return method.endswith("_") and not method.startswith("_") and on_attr(node.func.value)
        if isinstance(node, ast.AugAssign):
            return on_attr(node.target)
        return isinstance(node, ast.Assign) and any(on_attr(target) for target in node.targets)

    found = statement_where(function, writes)
    return found[1] if found is not None else None


def write_kind(source: str) -> str:
    """How a statement writes an attribute: ``"assign"`` (``self.n = self.n + 1``: the
    attribute rebound), ``"augmented"`` (``self.n += 1``), else ``""`` (an in-place method,
    ``self.n.add_(1)``, or no statement)."""
    try:
        body = ast.parse(textwrap.dedent(source)).body
    except SyntaxError:
        return ""
    statement = body[0] if body else None
    return "assign" if isinstance(statement, ast.Assign) else "augmented" if isinstance(statement, ast.AugAssign) else ""


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then what it was raised from (or during), outermost first, each once."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def format_error(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {first[0] if first else ''}".rstrip(": ")


_WRITES = re.compile(
    r"self\.(\w+)(?:\.data\b|(?:\.\w+)*\.[a-z]\w*[a-z0-9]_\(|\s*(?:\[[^\]]*\])?\s*(?:[-+*/%&|^@]|//|\*\*|<<|>>)?=(?!=))"
)
_WRITTEN: dict[type, tuple[str, ...]] = {}


def written_parameters(cls: type) -> tuple[str, ...]:
    """Names ``cls``'s own source (forward and its other methods) writes as ``self.<name>``:
    through ``.data``, by an in-place method, an augmented or an item assignment; read once
    per class (torch's own modules write none of their parameters)."""
    found = _WRITTEN.get(cls)
    if found is None:
        found = ()
        if not cls.__module__.startswith("torch."):
            try:
                source = inspect.getsource(cls)
            except (OSError, TypeError):
                source = ""
            found = tuple(dict.fromkeys(_WRITES.findall(source)))
        _WRITTEN[cls] = found
    return found


__all__ = ["DIVERGENCE_FIXES", "attribute_write", "format_error", "write_kind", "written_parameters"]
