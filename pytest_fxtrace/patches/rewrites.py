"""Candidate rewrites of one failing statement of a class's source, by what made it fail.

Each is text for text (the user's own expressions kept as written, from the source's
segments), at the statement's indentation:

* a branch on a tensor (``if cond:`` assigning one name, or returning, in each arm) becomes
  ``torch.where(cond, a, b)``, which every capture records;
* ``assert cond, msg`` becomes ``torch._assert(cond, msg)``, which torch.fx keeps as a call and
  export turns into a runtime assertion, else ``torch._assert_async(cond, msg)`` for a condition on
  a tensor's values, which export keeps as an operator; ``and`` / ``or`` in such a condition (``assert`` or a
  ``torch._assert`` call) become ``&`` / ``|``, which a traced size takes;
* ``print(...)`` / a logging call in forward is guarded by ``if not
  torch.compiler.is_compiling():``, so eager still prints and torch.compile skips it;
* a tensor made in forward from a traced size (``torch.zeros(x.shape[0], 8)``) is made from the
  input it is sized by (``x.new_zeros(x.shape[0], 8)``), which the capture records with its
  dtype and device;
* a tensor's value or size made a Python number (``int(x.shape[1])``, ``float(t)``,
  ``t.item()``) is left a size or a tensor, and ``len(x)`` becomes ``x.shape[0]``, which the
  capture records (each such call of the statement on its own, then all of them);
* ``isinstance(v, torch.Tensor)`` deciding the statement (in it, or in the ``if`` around it)
  also accepts torch.fx's ``Proxy``, so a traced tensor takes the tensor's path (torch.fx only);
* a literal size in ``x.view(4, -1)`` / ``x.reshape(...)`` becomes the input's own
  (``x.shape[0]``), which a dynamic dimension keeps;
* a round trip through NumPy or a Python list (``torch.from_numpy(np.exp(x.numpy()))``,
  ``torch.tensor(t.tolist())``) stays a tensor (``torch.exp(x)``, ``t``), which the capture records;
* a Python loop over a tensor's first dimension that appends one expression per element and
  is then stacked (``torch.stack(out)``) becomes that expression on the whole tensor, where
  substituting the tensor for its element leaves no use of the index;
* an ``if`` on sizes with no ``else`` whose body changes nothing where the condition is false
  (``if pad: x = F.pad(x, (0, pad))``) becomes its body, run always; its evidence
  (``control``: the body never run) must answer as eager too, so a branch the recorded call
  took is not dropped;
* a module-level function (``fx_wrapped``) is wrapped with ``torch.fx.wrap("name")`` after it,
  so torch.fx records one call to it and its Python arithmetic on sizes runs when the graph
  runs (torch.fx only; what timm's ``register_notrace_function`` does for timm's tracer).

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
    """A candidate: what it does, in words, and the definition's whole new source; whether it
    only helps a capture that runs the model on proxies (torch.fx), and a source that must
    answer as eager too (its evidence)."""

    what: str
    source: str
    proxies_only: bool = False
    control: str | None = None


def rewrites(source: str, line: int) -> list[Rewrite]:
    """The candidates for the statement at ``line`` (1-based, within ``source``, a class's or
    function's source as it stands in its file, at module level)."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return []
    lines = source.splitlines(keepends=True)
    found: list[Rewrite] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt) or node.lineno != line:
            continue
        found += _proxy_accepted(source, lines, tree, node)
        if isinstance(node, ast.If):
            found += _branch(source, lines, node)
            found += _unconditional(source, lines, node)
        elif isinstance(node, ast.For):
            found += _vectorised(source, lines, tree, node)
        elif isinstance(node, ast.Assert):
            found += _assert(source, lines, node)
        elif isinstance(node, ast.Expr) and _is_output_call(node.value):
            found += _guarded(source, lines, node)
        found += _asserted(source, lines, node)
        found += _constructors(source, lines, node)
        if not isinstance(node, (ast.If, ast.For, ast.While, ast.With, ast.FunctionDef, ast.ClassDef)):
            found += _unwrapped(source, lines, node)
            found += _literal_sizes(source, lines, node)
            found += _round_trips(source, lines, node)
    return found


def wrapped_for_fx(source: str, name: str) -> Rewrite:
    """The module-level function ``name`` (``source``: its definition) followed by
    ``torch.fx.wrap("name")``: torch.fx then records each call to it from its module as one
    node, and the call runs when the graph runs."""
    line = f'torch.fx.wrap("{name}")  # traced as one call: its Python logic runs when the graph runs\n'
    return Rewrite(
        f'`torch.fx.wrap("{name}")` after the function: torch.fx records each call to it as one node, which runs it as eager does',
        f"{source.rstrip()}\n\n\n{line}",
        proxies_only=True,
    )


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


def _swapped(lines: list[str], node: ast.stmt, old: str, new: str) -> str | None:
    """The source with ``old`` written as ``new`` in ``node``'s lines (its first use); None
    where ``old`` is not there as written (a segment that spans lines)."""
    first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
    text = "".join(lines[first : last + 1])
    if old not in text:
        return None
    return "".join([*lines[:first], text.replace(old, new, 1), *lines[last + 1 :]])


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
    # an arm that returns a name as it is (`lambda: x`) aliases its input, which torch.cond refuses
    # ("Encountered aliasing during higher order op tracing"): it returns a copy
    arm_a, arm_b = (f"{arm}.clone()" if arm.isidentifier() else arm for arm in (a, b))
    arms = f"torch.cond({cond}, lambda: {arm_a}, lambda: {arm_b})"
    one_arm = Rewrite("the branch as torch.cond(cond, true_fn, false_fn), which runs one arm as eager does", _replace(lines, node, [f"{head}{arms}"]))
    return [where, one_arm]


def _assert(source: str, lines: list[str], node: ast.Assert) -> list[Rewrite]:
    try:
        cond = _segment(source, node.test)
        message = _segment(source, node.msg) if node.msg is not None else repr("assertion failed")
    except ValueError:
        return []
    found = [
        Rewrite(
            "the assert as torch._assert(cond, message), which the capture keeps as a runtime check",
            _replace(lines, node, [f"torch._assert({cond}, {message})"]),
        )
    ]
    # a condition on a tensor's values: export cannot decide it while tracing (torch._assert
    # asks for its truth), torch._assert_async keeps it an operator of the program
    found.append(
        Rewrite(
            "the assert as torch._assert_async(cond, message), which the program checks on the tensor's value when it runs",
            _replace(lines, node, [f"torch._assert_async({cond}, {message})"]),
        )
    )
    if isinstance(node.test, ast.BoolOp):
        bitwise = _bitwise(node.test)
        found.append(
            Rewrite(
                f"the assert as torch._assert({bitwise}, message): `and` / `or` as `&` / `|`, which a traced size takes",
                _replace(lines, node, [f"torch._assert({bitwise}, {message})"]),
            )
        )
    return found


def _bitwise(test: ast.BoolOp) -> str:
    """``a == 4 or b == 3`` as ``(a == 4) | (b == 3)``: the same truth for Python bools, and an
    expression torch.fx records where ``or`` would ask a traced value for its truth."""
    operator = " & " if isinstance(test.op, ast.And) else " | "
    return operator.join(f"({_bitwise(v) if isinstance(v, ast.BoolOp) else ast.unparse(v)})" for v in test.values)


def _asserted(source: str, lines: list[str], node: ast.stmt) -> list[Rewrite]:
    """``torch._assert(a or b, msg)`` (or a module's alias of it, timm's ``_assert``) with
    ``and`` / ``or`` in its condition, as ``&`` / ``|``."""
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and node.value.args):
        return []
    call, func = node.value, node.value.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    test = call.args[0]
    if name not in ("_assert", "_check") or not isinstance(test, ast.BoolOp):
        return []
    try:
        old = _segment(source, test)
    except ValueError:
        return []
    whole = _swapped(lines, node, old, _bitwise(test))
    return [] if whole is None else [Rewrite("the condition's `and` / `or` as `&` / `|`, which a traced size takes", whole)]


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
        if _assigns_itself(new_text):  # `h, w = int(h), int(w)` -> `h, w = h, w`: the statement goes
            new_text, what = "", f"{what}, so the statement, which then assigns each name itself, is left out"
        whole = "".join([*lines[:first], new_text, *lines[last + 1 :]])
        found.append(Rewrite(f"{what}: a tensor or a symbolic size, which the capture records, not a Python number", whole))
    return found


def _assigns_itself(text: str) -> bool:
    """Whether ``text`` is one assignment of names to themselves (``a, b = a, b``)."""
    try:
        (node,) = ast.parse(textwrap.dedent(text)).body
    except (SyntaxError, ValueError):
        return False
    return (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and all(isinstance(n, (ast.Name, ast.Tuple)) for n in ast.walk(node.targets[0]) if not isinstance(n, ast.expr_context))
        and ast.dump(node.targets[0]).replace("Store()", "Load()") == ast.dump(node.value)
    )


_CONSTRUCTORS = {"zeros": "new_zeros", "ones": "new_ones", "empty": "new_empty", "full": "new_full"}


def _constructors(source: str, lines: list[str], node: ast.stmt) -> list[Rewrite]:
    """``torch.zeros(..., x.shape[0], ...)`` -> ``x.new_zeros(...)``: a tensor made from a size
    of ``x`` made from ``x`` (its dtype and device too, the verification says whether eager
    agrees)."""
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
        whole = _swapped(lines, node, old, new)
        if whole is None:
            continue
        found.append(Rewrite(f"`{old}(...)` as `{new}(...)`: made from the tensor it is sized by, which the capture records", whole))
    return found


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}


def _is_tensor_type(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "Tensor" and isinstance(node.value, ast.Name) and node.value.id == "torch") or (
        isinstance(node, ast.Name) and node.id == "Tensor"
    )


def _proxy_accepted(source: str, lines: list[str], tree: ast.AST, node: ast.stmt) -> list[Rewrite]:
    """``isinstance(v, torch.Tensor)`` in the statement or in the test of an ``if`` around
    it, the type widened to ``(torch.Tensor, torch.fx.Proxy)`` (each such test, innermost
    first)."""
    parents = _parents(tree)
    tests: list[ast.AST] = [node]
    at: ast.AST | None = node
    while at is not None:
        parent = parents.get(at)
        if isinstance(parent, (ast.If, ast.While)) and at is not parent.test:
            tests.append(parent.test)
        at = parent
    found = []
    for test in tests:
        for call in ast.walk(test):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "isinstance" and len(call.args) == 2):
                continue
            kind = call.args[1]
            if _is_tensor_type(kind):
                widened = "(torch.Tensor, torch.fx.Proxy)"
            elif isinstance(kind, ast.Tuple) and any(_is_tensor_type(e) for e in kind.elts):
                widened = f"({', '.join([*(ast.unparse(e) for e in kind.elts), 'torch.fx.Proxy'])})"
            else:
                continue
            row = kind.lineno - 1
            if kind.end_lineno != kind.lineno:
                continue
            shift = len(lines[row]) - len(textwrap.dedent(source).splitlines(keepends=True)[row])  # columns count dedented
            text = lines[row]
            start, end = kind.col_offset + shift, (kind.end_col_offset or 0) + shift
            new = [*lines[:row], text[:start] + widened + text[end:], *lines[row + 1 :]]
            found.append(
                Rewrite(
                    f"`isinstance(..., {ast.unparse(kind)})` as `isinstance(..., {widened})`: a traced tensor takes the tensor's path",
                    "".join(new),
                    proxies_only=True,
                )
            )
    return found


def _literal_sizes(source: str, lines: list[str], node: ast.stmt) -> list[Rewrite]:
    """``x.view(4, -1)`` -> ``x.view(x.shape[0], -1)``: a literal size in a view or reshape of
    a named tensor as that tensor's size at the same place (one candidate per literal)."""
    found = []
    for call in ast.walk(node):
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr in ("view", "reshape")
            and isinstance(call.func.value, ast.Name)
            and not call.keywords
        ):
            continue
        name = call.func.value.id
        for place, arg in enumerate(call.args):
            if not (isinstance(arg, ast.Constant) and isinstance(arg.value, int) and not isinstance(arg.value, bool) and arg.value > 0):
                continue
            try:
                old = _segment(source, call)
            except ValueError:
                continue
            args = [ast.unparse(a) for a in call.args]
            args[place] = f"{name}.shape[{place}]"
            new = f"{name}.{call.func.attr}({', '.join(args)})"
            whole = _swapped(lines, node, old, new)
            if whole is None:
                continue
            found.append(Rewrite(f"the literal size {arg.value} as `{name}.shape[{place}]`: the input's own size, which a dynamic dimension keeps", whole))
    return found


def _sized_loop(loop: ast.For) -> tuple[str, ast.expr] | None:
    """``for i in range(len(x))`` / ``range(x.shape[0])`` / ``range(x.size(0))``: (i, x);
    ``for row in x``: (row, x) with the element itself the loop variable."""
    if not isinstance(loop.target, ast.Name):
        return None
    it = loop.iter
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and len(it.args) == 1:
        size = it.args[0]
        if isinstance(size, ast.Call) and isinstance(size.func, ast.Name) and size.func.id == "len" and len(size.args) == 1:
            return loop.target.id, size.args[0]
        if isinstance(size, ast.Subscript) and isinstance(size.value, ast.Attribute) and size.value.attr == "shape":
            if isinstance(size.slice, ast.Constant) and size.slice.value == 0:
                return loop.target.id, size.value.value
        if isinstance(size, ast.Call) and isinstance(size.func, ast.Attribute) and size.func.attr == "size":
            if len(size.args) == 1 and isinstance(size.args[0], ast.Constant) and size.args[0].value == 0:
                return loop.target.id, size.func.value
        return None
    if isinstance(it, (ast.Name, ast.Attribute)):
        return "", it  # the element is the loop variable itself
    return None


class _Element(ast.NodeTransformer):
    """``x[i]`` (or the loop variable itself, ``row``) as ``x``."""

    def __init__(self, index: str, element: str, tensor: ast.expr) -> None:
        self.index, self.element, self.tensor = index, element, tensor

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        if self.index and isinstance(node.slice, ast.Name) and node.slice.id == self.index and ast.dump(node.value) == ast.dump(self.tensor):
            return self.tensor
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return self.tensor if self.element and node.id == self.element else node


def _vectorised(source: str, lines: list[str], tree: ast.AST, loop: ast.For) -> list[Rewrite]:
    """``out = []`` / ``for i in range(len(x)): out.append(f(x[i]))`` / ``... torch.stack(out)``
    as ``... f(x)``: the loop's one expression on the whole tensor (the verification says
    whether it is elementwise)."""
    sized = _sized_loop(loop)
    parent = _parents(tree).get(loop)
    if sized is None or parent is None or loop.orelse or len(loop.body) != 1:
        return []
    body = getattr(parent, "body", [])
    if loop not in body:
        return []
    at = body.index(loop)
    (append,) = loop.body
    if not (
        at > 0
        and at + 1 < len(body)
        and isinstance(append, ast.Expr)
        and isinstance(append.value, ast.Call)
        and isinstance(append.value.func, ast.Attribute)
        and append.value.func.attr == "append"
        and isinstance(append.value.func.value, ast.Name)
        and len(append.value.args) == 1
    ):
        return []
    out = append.value.func.value.id
    made = body[at - 1]
    if not (
        isinstance(made, ast.Assign)
        and len(made.targets) == 1
        and isinstance(made.targets[0], ast.Name)
        and made.targets[0].id == out
        and isinstance(made.value, ast.List)
        and not made.value.elts
    ):
        return []
    index, tensor = sized
    assert isinstance(loop.target, ast.Name)  # _sized_loop said so
    loop_variable = loop.target.id
    element = "" if index else loop_variable
    expression = _Element(index, element, tensor).visit(ast.parse(ast.unparse(append.value.args[0]), mode="eval").body)
    if any(isinstance(n, ast.Name) and n.id == loop_variable for n in ast.walk(expression)):
        return []  # the index is still used: not one expression on the whole tensor
    then = body[at + 1]
    stacks = [
        n
        for n in ast.walk(then)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "stack"
        and isinstance(n.func.value, ast.Name)
        and n.func.value.id == "torch"
        and n.args
        and isinstance(n.args[0], ast.Name)
        and n.args[0].id == out
        and (len(n.args) == 1 or (isinstance(n.args[1], ast.Constant) and n.args[1].value == 0))
        and all(k.arg == "dim" and isinstance(k.value, ast.Constant) and k.value.value == 0 for k in n.keywords)
    ]
    uses = sum(isinstance(n, ast.Name) and n.id == out for later in body[at + 1 :] for n in ast.walk(later))
    if len(stacks) != 1 or uses != 1:
        return []
    try:
        old = _segment(source, stacks[0])
    except ValueError:
        return []
    first, last = made.lineno - 1, (then.end_lineno or then.lineno) - 1
    then_first = then.lineno - 1
    then_text = "".join(lines[then_first:last + 1])
    if old not in then_text:
        return []
    whole_value = getattr(then, "value", None) is stacks[0]  # `return torch.stack(out)`: no parentheses needed
    vector = ast.unparse(expression) if whole_value else f"({ast.unparse(expression)})"
    new_then = then_text.replace(old, vector, 1)
    whole = "".join([*lines[:first], new_then, *lines[last + 1 :]])
    return [Rewrite(f"the loop as `{ast.unparse(expression)}` on the whole tensor: one expression the capture records, not one per element", whole)]


def _unconditional(source: str, lines: list[str], node: ast.If) -> list[Rewrite]:
    """``if cond: body`` (no else) as ``body``, run always; the evidence (``control``) is the
    statement left out, body never run: both must answer as eager does, so the body changes
    nothing where it did not run."""
    if node.orelse or any(isinstance(n, (ast.Return, ast.Raise, ast.Break, ast.Continue)) for n in node.body):
        return []
    first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
    body_first = node.body[0].lineno - 1
    if body_first == first:
        return []  # `if cond: x = ...` on one line
    block = textwrap.dedent("".join(lines[body_first : last + 1]))
    indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
    body = "".join(f"{indent}{text}" if text.strip() else text for text in block.splitlines(keepends=True))
    always = "".join([*lines[:first], body, *lines[last + 1 :]])
    never = "".join([*lines[:first], f"{indent}pass\n", *lines[last + 1 :]])
    return [
        Rewrite(
            "the `if` left out, its body run always: on the recorded call the body changes nothing where the condition is false "
            "(the model answered as eager with the body always run and never run)",
            always,
            control=never,
        )
    ]


_TO_TENSOR = frozenset({"tensor", "as_tensor", "from_numpy"})
_NUMPY_FUNCTIONS = frozenset({"exp", "log", "sqrt", "abs", "tanh", "sin", "cos", "floor", "ceil", "round", "sign"})


def _left_torch(call: ast.expr) -> str | None:
    """``x.numpy()`` / ``x.tolist()`` (after ``.cpu()`` / ``.detach()``) as ``x``, and
    ``np.exp(x.numpy())`` as ``torch.exp(x)``: the tensor the round trip started from, or None."""
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and not call.args and not call.keywords:
        if call.func.attr in ("numpy", "tolist"):
            inner = call.func.value
            while (
                isinstance(inner, ast.Call)
                and isinstance(inner.func, ast.Attribute)
                and inner.func.attr in ("cpu", "detach")
                and not inner.args
            ):
                inner = inner.func.value
            return ast.unparse(inner)
    if (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id in ("np", "numpy")
        and call.func.attr in _NUMPY_FUNCTIONS
        and len(call.args) == 1
        and not call.keywords
    ):
        started = _left_torch(call.args[0])
        return None if started is None else f"torch.{call.func.attr}({started})"
    return None


def _round_trips(source: str, lines: list[str], node: ast.stmt) -> list[Rewrite]:
    """``torch.from_numpy(np.exp(x.numpy()))`` -> ``torch.exp(x)``, ``torch.tensor(t.tolist())``
    -> ``t``: a tensor's values through NumPy or a Python list and back, left a tensor (one
    candidate per round trip; the verification says whether dtype and values agree)."""
    found = []
    for call in ast.walk(node):
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Name)
            and call.func.value.id == "torch"
            and call.func.attr in _TO_TENSOR
            and len(call.args) == 1
            and not call.keywords
        ):
            continue
        inner = _left_torch(call.args[0])
        if inner is None:
            continue
        try:
            old = _segment(source, call)
        except ValueError:
            continue
        whole = _swapped(lines, node, old, inner)
        if whole is not None:
            found.append(Rewrite(f"`{old}` as `{inner}`: the values stay a tensor, which the capture records, not NumPy's or a list", whole))
    return found
