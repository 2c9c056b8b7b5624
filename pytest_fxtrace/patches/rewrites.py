"""Candidate rewrites of one failing statement of a class's source, by what made it fail.

Each is text for text (the user's own expressions kept as written, from the source's
segments), at the statement's indentation:

* a branch on a tensor (``if cond:`` assigning one name, or returning, in each arm) becomes
  ``torch.where(cond, a, b)``, which every capture records;
* ``assert cond, msg`` becomes ``torch._assert(cond, msg)``, which torch.fx keeps as a call and
  export turns into a runtime assertion;
* ``print(...)`` / a logging call in forward is guarded by ``if not
  torch.compiler.is_compiling():``, so eager still prints and torch.compile skips it;
* a tensor made in forward from a traced size (``torch.zeros(x.shape[0], 8)``) is made from the
  input it is sized by (``x.new_zeros(x.shape[0], 8)``), which the capture records with its
  dtype and device;
* a tensor's value or size made a Python number (``int(x.shape[1])``, ``float(t)``,
  ``t.item()``) is left a size or a tensor, and ``len(x)`` becomes ``x.shape[0]``, which the
  capture records (each such call of the statement on its own, then all of them).

A candidate is only a proposal: ``verify.py`` decides whether it is shown.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import textwrap
import tokenize

_LOGGING = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "log"})


@dataclasses.dataclass(frozen=True)
class Rewrite:
    """A candidate: what it does, in words, and the class's whole new source."""

    what: str
    source: str


def rewrites(source: str, line: int) -> list[Rewrite]:
    """The candidates for the statement at ``line`` (1-based, within ``source``, a class's
    source as it stands in its file, at module level)."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return []
    lines = source.splitlines(keepends=True)
    found: list[Rewrite] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt) or node.lineno != line:
            continue
        if isinstance(node, ast.If):
            found += _branch(source, lines, node)
        elif isinstance(node, ast.Assert):
            found += _assert(source, lines, node)
        elif isinstance(node, ast.Expr) and _is_output_call(node.value):
            found += _guarded(source, lines, node)
        found += _constructors(source, lines, node)
        if not isinstance(node, (ast.If, ast.For, ast.While, ast.With, ast.FunctionDef, ast.ClassDef)):
            found += _unwrapped(source, lines, node)
    return found


def _segment(source: str, node: ast.AST) -> str:
    text = ast.get_source_segment(textwrap.dedent(source), node)
    if text is None:
        raise ValueError("no source segment")
    return text


def _replace(lines: list[str], node: ast.stmt, new: list[str], keep_comment: bool = True) -> str:
    """``lines`` with ``node``'s lines replaced by ``new`` (indented as ``node``); a comment
    at the end of its first line stays at the end of the first new line (``keep_comment``)."""
    first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
    indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
    comment = _comment(lines[first]) if keep_comment else ""
    texts = [f"{new[0]}  {comment}" if comment else new[0], *new[1:]]
    return "".join([*lines[:first], *(f"{indent}{text}\n" for text in texts), *lines[last + 1 :]])


def _comment(line: str) -> str:
    """The comment ending ``line`` (``# GATE-IF``), or ""."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(line.strip() + "\n").readline))
    except (tokenize.TokenError, SyntaxError):
        return ""
    return next((token.string for token in tokens if token.type == tokenize.COMMENT), "")


def _branch(source: str, lines: list[str], node: ast.If) -> list[Rewrite]:
    body, other = node.body, node.orelse
    if len(body) != 1 or len(other) > 1 or (other and isinstance(other[0], ast.If)):
        return []
    try:
        cond = _segment(source, node.test)
        (then,) = body
        if isinstance(then, ast.Return) and other and isinstance(other[0], ast.Return):
            if then.value is None or other[0].value is None:
                return []
            a, b = _segment(source, then.value), _segment(source, other[0].value)
            new = f"return torch.where({cond}, {a}, {b})"
        elif isinstance(then, ast.Assign) and len(then.targets) == 1 and isinstance(then.targets[0], ast.Name):
            name = then.targets[0].id
            a = _segment(source, then.value)
            if not other:
                b = name  # no else: the name keeps its value
            elif (
                isinstance(other[0], ast.Assign)
                and len(other[0].targets) == 1
                and isinstance(other[0].targets[0], ast.Name)
                and other[0].targets[0].id == name
            ):
                b = _segment(source, other[0].value)
            else:
                return []
            new = f"{name} = torch.where({cond}, {a}, {b})"
        else:
            return []
    except ValueError:
        return []
    where = Rewrite("the branch as torch.where(cond, a, b), which computes both arms and picks per element", _replace(lines, node, [new]))
    # torch.cond runs one arm (export and compile capture both as subgraphs; torch.fx cannot)
    cond_call = new.replace("torch.where(", "torch.cond(", 1)
    head, _, rest = cond_call.partition("torch.cond(")
    arms = f"torch.cond({cond}, lambda: {a}, lambda: {b})"
    one_arm = Rewrite("the branch as torch.cond(cond, true_fn, false_fn), which runs one arm as eager does", _replace(lines, node, [f"{head}{arms}"]))
    return [where, one_arm]


def _assert(source: str, lines: list[str], node: ast.Assert) -> list[Rewrite]:
    try:
        cond = _segment(source, node.test)
        message = _segment(source, node.msg) if node.msg is not None else repr("assertion failed")
    except ValueError:
        return []
    new = f"torch._assert({cond}, {message})"
    return [Rewrite("the assert as torch._assert(cond, message), which the capture keeps as a runtime check", _replace(lines, node, [new]))]


def _is_output_call(value: ast.expr) -> bool:
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    if isinstance(func, ast.Name):
        return func.id == "print"
    return isinstance(func, ast.Attribute) and func.attr in _LOGGING and isinstance(func.value, (ast.Name, ast.Attribute))


def _guarded(source: str, lines: list[str], node: ast.Expr) -> list[Rewrite]:
    first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
    statement = textwrap.dedent("".join(lines[first : last + 1])).rstrip("\n").splitlines()
    new = ["if not torch.compiler.is_compiling():", *(f"    {text}" for text in statement)]
    return [Rewrite("the call guarded by `if not torch.compiler.is_compiling():`: eager still makes it, the compiled graph skips it", _replace(lines, node, new, keep_comment=False))]


_NUMBER = frozenset({"int", "float"})


def _unwrapped(source: str, lines: list[str], node: ast.stmt) -> list[Rewrite]:
    """The statement with a Python number made of a tensor's value or size left a tensor or
    a symbolic size: ``int(e)`` / ``float(e)`` -> ``e``, ``e.item()`` -> ``e``, ``len(e)`` ->
    ``e.shape[0]``; one candidate per such call, then one with them all."""
    first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
    text = "".join(lines[first : last + 1])
    swaps: list[tuple[str, str]] = []
    for call in ast.walk(node):
        if not isinstance(call, ast.Call) or call.keywords:
            continue
        func = call.func
        try:
            if isinstance(func, ast.Name) and func.id in _NUMBER and len(call.args) == 1:
                swaps.append((_segment(source, call), _segment(source, call.args[0])))
            elif isinstance(func, ast.Name) and func.id == "len" and len(call.args) == 1:
                swaps.append((_segment(source, call), f"{_segment(source, call.args[0])}.shape[0]"))
            elif isinstance(func, ast.Attribute) and func.attr == "item" and not call.args:
                swaps.append((_segment(source, call), _segment(source, func.value)))
        except ValueError:
            continue
    swaps = [(old, new) for old, new in dict.fromkeys(swaps) if "\n" not in old and old in text]
    found = []
    for chosen in [[swap] for swap in swaps] + ([swaps] if len(swaps) > 1 else []):
        new_text = text
        for old, new in chosen:
            new_text = new_text.replace(old, new, 1)
        what = ", ".join(f"`{old}` as `{new}`" for old, new in chosen)
        whole = "".join([*lines[:first], new_text, *lines[last + 1 :]])
        found.append(Rewrite(f"{what}: a tensor or a symbolic size, which the capture records, not a Python number", whole))
    return found


_CONSTRUCTORS = {"zeros": "new_zeros", "ones": "new_ones", "empty": "new_empty", "full": "new_full"}


def _constructors(source: str, lines: list[str], node: ast.stmt) -> list[Rewrite]:
    """``torch.zeros(..., x.shape[0], ...)`` -> ``x.new_zeros(...)``: a tensor made from a size
    of ``x`` made from ``x`` (its dtype and device too, the verification says whether eager
    agrees)."""
    first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
    text = "".join(lines[first : last + 1])
    found = []
    for call in ast.walk(node):
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr in _CONSTRUCTORS
            and isinstance(call.func.value, ast.Name)
            and call.func.value.id == "torch"
        ):
            continue
        sized_by = next(
            (
                n.value.id
                for arg in call.args
                for n in ast.walk(arg)
                if isinstance(n, ast.Attribute) and n.attr in ("shape", "size") and isinstance(n.value, ast.Name)
            ),
            None,
        )
        if sized_by is None:
            continue
        try:
            old = _segment(source, call.func)
        except ValueError:
            continue
        new = f"{sized_by}.{_CONSTRUCTORS[call.func.attr]}"
        if old not in text:
            continue
        whole = "".join([*lines[:first], text.replace(old, new, 1), *lines[last + 1 :]])
        found.append(Rewrite(f"`{old}(...)` as `{new}(...)`: made from the tensor it is sized by, which the capture records", whole))
    return found
