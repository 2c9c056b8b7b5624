"""Divergence detectors: each names one cause of a traced graph computing something
else than the model (dropped hooks, a frozen training flag, accumulating or baked
constants, Python state or buffer writes frozen at trace time) and where it came from,
as a ``Diagnosis``.

Each takes the model and the graph (and what it needs to replay, as callables); knows
nothing of the check, the backend interface or pytest. ``mismatch.py`` composes them
for one recorded call.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import inspect
import sys
import textwrap
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal, TypeAlias

import torch
import torch.fx

from pytest_fxtrace._compat import forward_hooks
from pytest_fxtrace.collection import is_under
from pytest_fxtrace.compare import Difference
from pytest_fxtrace.diagnose import attribute_write, write_kind
from pytest_fxtrace.locate import called_names, is_user_file, module_of_node, statement_at
from pytest_fxtrace.paths import shown_path
from pytest_fxtrace.state import modules_of
from pytest_fxtrace.types import Category, Diagnosis, Location

# sys.settrace's function type, as typeshed writes it (its own alias lives in the private
# _typeshed, which the package does not import: tests/test_compat.py)
_Event = Literal["call", "line", "return", "exception", "opcode"]  # what a trace function is told
TraceFunction: TypeAlias = Callable[[types.FrameType, _Event, Any], Any]  # returns the next one, or None

NONDETERMINISTIC = frozenset(
    {"rand", "randn", "randint", "randperm", "normal", "bernoulli", "multinomial", "rand_like",
     "randn_like", "randint_like", "uniform_", "normal_", "dropout"}
)  # fmt: skip

# -- static detectors (cheap; run after every trace) ------------------------------------


def leaf_paths(gm: torch.fx.GraphModule) -> set[str]:
    return {str(n.target) for n in gm.graph.nodes if n.op == "call_module"}


def hooks_dropped(
    model: torch.nn.Module, gm: torch.fx.GraphModule, modules: list[torch.nn.Module] | None = None
) -> Diagnosis | None:
    """Forward (pre-)hooks on modules the graph traced through: the GraphModule never runs them.

    ``modules``: ``model``'s modules, where the caller has them (no walk)."""
    if not any(any(forward_hooks(m)) for m in modules or modules_of(model)):
        return None  # the usual case, found without building any path
    leaves = leaf_paths(gm)
    for path, module in model.named_modules():
        # hooks first: is_under scans every leaf, and this runs after every trace
        pre_hooks, hooks_after = forward_hooks(module)
        if not (pre_hooks or hooks_after) or any(is_under(path, leaf) for leaf in leaves if leaf):
            continue
        for kind, hooks in (("forward pre-hook", pre_hooks), ("forward hook", hooks_after)):
            for hook in hooks.values():
                fn = inspect.unwrap(getattr(hook, "__func__", hook))
                code = getattr(fn, "__code__", None)
                location = None
                if code is not None and is_user_file(code.co_filename):
                    location = Location(
                        shown_path(code.co_filename, imports=False),
                        code.co_firstlineno,
                        statement_at(code, code.co_firstlineno),
                    )
                name = getattr(fn, "__qualname__", type(hook).__name__)
                label = f"{path} ({type(module).__name__})" if path else f"the root ({type(module).__name__})"
                return Diagnosis(
                    Category.HOOKS_DROPPED,
                    f"the {kind} `{name}` on {label} is not run by the GraphModule, which traces "
                    f"through {path or 'the root'}'s forward instead of calling it",
                    location,
                    path,
                    type(module).__name__,
                )
    return None


def inplace_on_constants(model: torch.nn.Module, gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """In-place ops whose target tensor is a constant the tracer created (not one of
    the model's buffers): the GraphModule keeps the result between calls."""
    found = []
    for node in gm.graph.nodes:
        if node.op not in ("call_method", "call_function"):
            continue
        name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
        if not name.endswith("_") or name.startswith("_"):
            continue
        receiver = node.args[0] if node.args else None
        if isinstance(receiver, torch.fx.Node) and receiver.op == "get_attr":
            found.append(node)
    if not found:  # the usual case: the model's own names are only needed for a candidate
        return found
    own = {name for name, _ in model.named_buffers()} | {name for name, _ in model.named_parameters()}
    return [node for node in found if _receiver(node).target not in own]


def _receiver(node: torch.fx.Node) -> torch.fx.Node:
    """The ``get_attr`` node an in-place op of ``inplace_on_constants`` writes."""
    receiver = node.args[0]
    assert isinstance(receiver, torch.fx.Node)  # inplace_on_constants keeps only those
    return receiver


def accumulation(
    model: torch.nn.Module,
    gm: torch.fx.GraphModule,
    replay: Callable[[], object],
    compare: Callable[..., Difference | None],
) -> Diagnosis | None:
    """Replay the same call twice; if the second result differs, the in-place update of a
    traced constant accumulates. The constants are put back afterwards."""
    nodes = inplace_on_constants(model, gm)
    if not nodes:
        return None
    saved = {}
    for node in nodes:
        target = str(_receiver(node).target)  # a get_attr's target: the attribute's qualified name
        value = gm.get_buffer(target) if target in dict(gm.named_buffers()) else getattr(gm, target, None)
        if isinstance(value, torch.Tensor):
            saved[target] = (value, value.detach().clone())
    try:
        first = replay()
        second = replay()
    except Exception:
        return None
    finally:
        with torch.no_grad():
            for value, copy in saved.values():
                value.copy_(copy)
    difference = compare(second, first, rtol=None, atol=None)
    if difference is None:
        return None
    node = nodes[0]
    method = node.target if isinstance(node.target, str) else node.target.__name__
    return Diagnosis(
        Category.BAKED_CONSTANT,
        f"`{method}` updates a tensor created while tracing ({_receiver(node).target}) in place; the "
        "GraphModule keeps it between calls, so the same input gives a different result the second time",
        None,
        *module_of_node(node),
    )


def training_flag(
    gm_a: torch.fx.GraphModule, gm_b: torch.fx.GraphModule, locations: Mapping[str, Location]
) -> Diagnosis | None:
    """The graphs traced in train and in eval mode differ: the mode is frozen into each."""
    if gm_a.code == gm_b.code:
        return None
    a = [(n.op, str(n.target)) for n in gm_a.graph.nodes]
    b = [(n.op, str(n.target)) for n in gm_b.graph.nodes]
    index = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    nodes_a, nodes_b = list(gm_a.graph.nodes), list(gm_b.graph.nodes)
    candidates = [n for n in (nodes_a[index:index + 1] + nodes_b[index:index + 1]) if n.op != "output"]
    location = next((locations[n.name] for n in candidates if n.name in locations), None)
    module, module_type = module_of_node(candidates[0]) if candidates else ("", None)
    modes = f"{'train' if gm_a.training else 'eval'} and {'train' if gm_b.training else 'eval'}"
    return Diagnosis(
        Category.TRAINING_FLAG,
        f"the graphs traced in {modes} mode differ (self.training or training= is frozen into each "
        "graph), so a GraphModule traced in one mode computes the wrong thing in the other",
        location,
        module,
        module_type,
    )


# -- explaining a mismatch -----------------------------------------------------------------


def baked_constants(gm: torch.fx.GraphModule, locations: Mapping[str, Location]) -> Diagnosis | None:
    """A nondeterministic constructor (``torch.randn(4, 4)``) evaluated once while tracing."""
    for node in gm.graph.nodes:
        if node.op != "get_attr" or not str(node.target).startswith("_tensor_constant"):
            continue
        for user in node.users:
            location = locations.get(user.name)
            if location is None:
                continue
            called = called_names(location.source)
            random = sorted(called & NONDETERMINISTIC)
            if random:
                return Diagnosis(
                    Category.BAKED_CONSTANT,
                    f"torch.{random[0]}(...) was evaluated once while tracing and its values were frozen "
                    f"into the graph as {node.target}: the GraphModule reuses the same values on every call",
                    location,
                    *module_of_node(user),
                )
    return None


def python_state(model: torch.nn.Module, changed: list[tuple[str, str, object, object]]) -> Diagnosis | None:
    """Python attributes the forward changes (``self.calls += 1``): frozen at trace time."""
    if not changed:
        return None
    modules = dict(model.named_modules())
    path, attr, before, after = changed[0]
    module = modules[path]
    location = attribute_write(type(module), attr)
    who = f"{path}.{attr}" if path else f"self.{attr}"
    return Diagnosis(
        Category.BAKED_CONSTANT,
        f"forward changes Python state ({who}: {before!r} -> {after!r} in one call); tracing "
        f"evaluated it once and froze {after!r} into the graph as a constant",
        location,
        path,
        type(module).__name__,
    )


def buffers_written_while_tracing(model: torch.nn.Module, written: list[tuple[torch.nn.Module, str]]) -> Diagnosis | None:
    """Buffers the forward wrote in place or rebound with no traced value involved
    (``self.running_mean.mul_(0.9)``, ``self.calls += 1``, ``self.calls = self.calls + 1``):
    torch.fx ran the statement once while tracing instead of recording it, so the
    GraphModule skips that update on every call. ``written``: ``(module, buffer name)``
    whose lent copy the trace wrote or replaced (``FxBackend.capture``): the first one's
    cause in full, then each other's statement."""
    if not written:
        return None
    paths = {m: p for p, m in model.named_modules()}
    module, name = written[0]
    path = paths.get(module, "")
    who = f"{path}.{name}" if path else f"self.{name}"
    location = attribute_write(type(module), name)
    source = location.source if location is not None else ""
    kind = write_kind(source)
    if kind == "assign":
        how = f"rebinds the buffer {who} to a tensor computed without a traced value, which torch.fx computed once while tracing"
    else:
        how = f"updates the buffer {who} in place by an op on the buffer alone, which torch.fx ran once while tracing instead of recording it"
    if kind:  # a counter, a state set from constants
        fix = f"Update it in place with a traced value so the graph records it (self.{name}.add_(x.new_ones(())) rather than `{source}`)"
    else:
        fix = "Give the op a traced value so the graph records it (buf.lerp_(new, 0.1) rather than buf.mul_(0.9).add_(new, alpha=0.1))"
    also = ""
    for other, other_name in written[1:]:
        other_path = paths.get(other, "")
        where = attribute_write(type(other), other_name)
        shown = f": `{where.source}` at {where}" if where is not None and where.source else ""
        also += f"; it skips the update of the buffer {other_path + '.' if other_path else 'self.'}{other_name} too{shown}"
    return Diagnosis(
        Category.BAKED_CONSTANT,
        f"forward {how}: the GraphModule skips that update, so later calls see another buffer than eager{also}. {fix}",
        location,
        path,
        type(module).__name__,
    )


@dataclasses.dataclass(frozen=True)
class TypeCheck:
    """An ``isinstance(x, torch.Tensor)`` of the user's code that a traced value failed
    while tracing: the statement, the name it tests, the module-level function holding
    it (an autowrap keeps the check on real tensors), and the module whose forward ran it."""

    location: Location
    name: str
    function: Callable[..., object] | None
    owner: torch.nn.Module | None


# a test's type check, as read from the source: (the name tested, the types expression)
_Tests = dict[int, list[tuple[str, ast.expr]]]


@contextlib.contextmanager
def watching_type_checks() -> Iterator[list[TypeCheck]]:
    """While the block traces, each ``if`` / ``while`` / ``assert`` / conditional of the
    user's code that tests ``isinstance(name, <types a Tensor is>)`` on a traced value
    (a Proxy, which is no Tensor: the test is False where eager's is True) is noted.

    A Python trace function, on this thread and only for the block (the one that was set,
    a coverage tool's, keeps running): it sees the test's operands just before the line
    runs, which no graph node records when the branch it skips was the only one using them.
    """
    found: list[TypeCheck] = []
    tests: dict[types.CodeType, _Tests] = {}
    previous: TraceFunction | None = sys.gettrace()

    def on_line(frame: types.FrameType, event: _Event, arg: object) -> TraceFunction:
        if event == "line":
            pending = tests[frame.f_code].get(frame.f_lineno)
            if pending:
                _note_type_checks(frame, pending, found)
        return on_line

    def on_call(frame: types.FrameType, event: _Event, arg: object) -> TraceFunction | None:
        chained = previous(frame, event, arg) if previous is not None else None
        code = frame.f_code
        own = tests.get(code)
        if own is None:
            own = tests[code] = _type_tests(code) if is_user_file(code.co_filename) else {}
        if not own:
            return chained
        return on_line if chained is None else _both(chained, on_line)

    sys.settrace(on_call)
    try:
        yield found
    finally:
        sys.settrace(previous)


def _both(first: TraceFunction | None, second: TraceFunction) -> TraceFunction:
    """A frame's trace function that calls another's (kept as it returns itself) and ours."""

    def trace(frame: types.FrameType, event: _Event, arg: object) -> TraceFunction:
        nonlocal first
        if first is not None:
            first = first(frame, event, arg)
        second(frame, event, arg)
        return trace

    return trace


def _type_tests(code: types.CodeType) -> _Tests:
    """``{line: [(name, types expression)]}`` of the ``isinstance(name, ...)`` calls that
    decide a branch or an assert in ``code``'s function."""
    try:
        lines, first = inspect.getsourcelines(code)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return {}
    found: _Tests = {}
    for node in ast.walk(tree):
        if not isinstance(node, (ast.If, ast.While, ast.Assert, ast.IfExp)):
            continue
        for call in ast.walk(node.test):
            if (
                isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "isinstance"
                and len(call.args) == 2 and isinstance(call.args[0], ast.Name)
            ):
                found.setdefault(node.lineno + first - 1, []).append((call.args[0].id, call.args[1]))
    return found


def _note_type_checks(frame: types.FrameType, pending: list[tuple[str, ast.expr]], found: list[TypeCheck]) -> None:
    for name, kinds in pending:
        value = frame.f_locals.get(name)
        if not isinstance(value, torch.fx.Proxy):
            continue
        try:
            classes = _resolved(kinds, frame)
            flat = classes if isinstance(classes, tuple) else (classes,)
            tensor_passes = any(isinstance(c, type) and issubclass(torch.Tensor, c) for c in flat)
            if not tensor_passes or isinstance(value, classes):
                continue
        except Exception:  # a types expression we do not read without running code
            continue
        code = frame.f_code
        location = Location(shown_path(code.co_filename, imports=False), frame.f_lineno, statement_at(code, frame.f_lineno))
        function = frame.f_globals.get(code.co_name)
        is_helper = getattr(function, "__code__", None) is code and frame.f_globals.get("__name__") != "__main__"
        found.append(TypeCheck(location, name, function if is_helper else None, _forward_owner(frame)))


def _resolved(node: ast.expr, frame: types.FrameType) -> Any:
    """The value of a types expression (names, dotted names, tuples of them), read
    without calling anything; LookupError otherwise."""
    if isinstance(node, ast.Name):
        for scope in (frame.f_locals, frame.f_globals, frame.f_builtins):
            if node.id in scope:
                return scope[node.id]
        raise LookupError(node.id)
    if isinstance(node, ast.Attribute):
        base = _resolved(node.value, frame)
        if not isinstance(base, (types.ModuleType, type)):  # reading a Proxy's or module's attribute traces
            raise LookupError(node.attr)
        return getattr(base, node.attr)
    if isinstance(node, ast.Tuple):
        return tuple(_resolved(item, frame) for item in node.elts)
    raise LookupError(ast.dump(node))


def _forward_owner(frame: types.FrameType | None) -> torch.nn.Module | None:
    """The module whose ``forward`` is running at ``frame`` or called the function there."""
    while frame is not None:
        owner = frame.f_locals.get("self") if frame.f_code.co_name == "forward" else None
        if isinstance(owner, torch.nn.Module):
            return owner
        frame = frame.f_back
    return None


def traced_type_check(model: torch.nn.Module, checks: list[TypeCheck]) -> Diagnosis | None:
    """The first ``isinstance`` test a traced value failed while tracing (``watching_type_checks``):
    a branch decided at trace time, the graph holding the one meant for other inputs."""
    if not checks:
        return None
    check = checks[0]
    path = next((p for p, m in model.named_modules() if m is check.owner), "")
    kind = type(check.owner).__name__ if check.owner is not None else None
    name = check.name
    where = f"the helper {check.function.__name__}" if check.function is not None else "forward"
    others = list(dict.fromkeys(str(other.location) for other in checks[1:] if other.location != check.location))
    more = f" (so did the tests at {', '.join(others[:3])})" if others else ""
    return Diagnosis(
        Category.CONTROL_FLOW,
        f"{where} tests isinstance({name}, ...) while tracing, where {name} is a traced value (a torch.fx "
        "Proxy standing for the Tensor, not a Tensor), so the test was False and the graph recorded the "
        f"branch meant for other inputs{more}",
        check.location,
        path,
        kind,
        code_fix=(
            f"let the test pass for the traced value too: isinstance({name}, (torch.Tensor, torch.fx.Proxy)); "
            "or keep the check out of the graph: torch.fx.wrap the helper that holds it (autowrap_functions), "
            "or make its module a leaf (leaf_modules)"
        ),
    )


__all__ = [
    "TypeCheck",
    "accumulation",
    "baked_constants",
    "buffers_written_while_tracing",
    "hooks_dropped",
    "inplace_on_constants",
    "python_state",
    "traced_type_check",
    "training_flag",
    "watching_type_checks",
]
