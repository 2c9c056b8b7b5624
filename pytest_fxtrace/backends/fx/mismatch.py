"""Why one traced call diverges: the detectors of ``divergence.py`` composed for a
recorded call -- right after a trace (``static_finding``), when outputs differ
(``explain_mismatch``), when the GraphModule raises (``explain_replay_failure``) -- and
the dropout fix verified for a frozen training flag.

Takes what it needs as arguments (the ``CheckContext``, the tracer factory, the
``FxCaptured`` graph); knows nothing of the checker or its verdict, nor of pytest.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import torch.fx

from pytest_fxtrace import _compat
from pytest_fxtrace.backends.base import CheckContext, Comparator, DumpDir
from pytest_fxtrace.backends.fx.captured import FxCaptured
from pytest_fxtrace.backends.fx.detectors import (
    TypeCheck,
    accumulation,
    baked_constants,
    buffers_written_while_tracing,
    hooks_dropped,
    inplace_on_constants,
    python_state,
    traced_type_check,
    training_flag,
    watching_type_checks,
)
from pytest_fxtrace.backends.fx.divergence import (
    failing_node,
    first_divergence,
    graph_node_locations,
    traced_with_stack_traces,
)
from pytest_fxtrace.backends.fx.dropout import dropout_fix
from pytest_fxtrace.binding import input_signature, record_eager
from pytest_fxtrace.capture import suspended
from pytest_fxtrace.locate import is_user_file, isinstance_guard, module_of_node, node_location
from pytest_fxtrace.options import TraceOptions
from pytest_fxtrace.paths import shown_path
from pytest_fxtrace.state import ModelState, lend, return_buffers
from pytest_fxtrace.types import Category, Diagnosis, Divergence, Location, Suggestion, option_json

if TYPE_CHECKING:
    from pytest_fxtrace.binding import BoundInputs
    from pytest_fxtrace.capture import CapturedCall

TracerFactory = Callable[[TraceOptions], torch.fx.Tracer]


def _training_location(model: torch.nn.Module) -> tuple[Location | None, str, str | None]:
    for path, module in model.named_modules():
        try:
            lines, first = inspect.getsourcelines(type(module).forward)
            filename = inspect.getsourcefile(type(module).forward) or ""
        except (OSError, TypeError):
            continue
        if not is_user_file(filename):
            continue
        for offset, line in enumerate(lines):
            if "self.training" in line or "training=" in line:
                return Location(shown_path(filename, imports=False), first + offset, line.strip()), path, type(module).__name__
    return None, "", None


def _forward_guard(module: torch.nn.Module) -> Location | None:
    try:
        code = type(module).forward.__code__
    except AttributeError:
        return None
    return isinstance_guard(code)


def static_finding(
    context: CheckContext, make_tracer: TracerFactory, gm: torch.fx.GraphModule, sibling: torch.fx.GraphModule | None
) -> Diagnosis | None:
    """Risks that are certain right after a trace: dropped hooks, train/eval graphs
    that differ (``sibling``: the same call traced in the other mode), in-place
    updates of traced constants that accumulate."""
    call, bound = context.call, context.bound
    model = call.module
    finding = hooks_dropped(model, gm, call.state.modules if call.state is not None else None)
    if finding is not None:
        return finding
    if sibling is not None:
        finding = training_flag(sibling, gm, {})
        if finding is not None:
            location, path, kind = _training_location(model)
            fix = dropout_fix(context, sibling if sibling.training else gm)
            return dataclasses.replace(finding, location=location, module=path, module_type=kind, fix=fix)
    finding = frozen_python_state(model, call, bound, gm, context.compare)
    if finding is not None:
        return finding
    if inplace_on_constants(model, gm):
        def replay() -> object:
            if call.state is not None:
                call.state.restore()
            call.rng.restore()
            with torch.no_grad(), lend(call.state, gm):
                return bound.call(gm)

        finding = accumulation(model, gm, replay, context.compare)
        if finding is not None:
            locations = graph_node_locations(located(context, make_tracer))
            node = inplace_on_constants(model, gm)[0]
            return dataclasses.replace(finding, location=locations.get(node.name))
    return None


def frozen_python_state(
    model: torch.nn.Module, call: CapturedCall, bound: BoundInputs, gm: torch.fx.GraphModule, compare: Comparator
) -> Diagnosis | None:
    """The trace ran forward's Python once: a number it changed (``self.calls += 1``)
    and whose new value the graph holds as a literal may be frozen there. Confirmed
    by running the model once more from that state: the graph must disagree."""
    if call.state is None:
        return None
    literals: set[object] | None = None  # built only once a number changed: this runs after every trace
    # modules whose attributes are equal to the captured ones (the usual case) are skipped in C
    for module, now, attrs in call.state.attribute_changes():
        for name, before in attrs.items():
            if name.startswith("_") or name == "training" or type(before) not in (int, float):
                continue
            after = now.get(name)
            if after == before:
                continue
            if literals is None:
                literals = {
                    a for n in gm.graph.nodes for a in _compat.tree_leaves((n.args, n.kwargs))
                    if type(a) in (int, float)
                }
            if after in literals:
                path = next((p for p, m in model.named_modules() if m is module), "")
                if _next_call_differs(model, call, call.state, bound, gm, compare, module, name, after):
                    return python_state(model, [(path, name, before, after)])
    return None


def _next_call_differs(
    model: torch.nn.Module, call: CapturedCall, state: ModelState, bound: BoundInputs, gm: torch.fx.GraphModule,
    compare: Comparator, module: torch.nn.Module, name: str, value: object,
) -> bool:
    try:
        state.restore()
        setattr(module, name, value)  # as the next call finds it
        call.rng.restore()
        with suspended(), torch.no_grad(), state.lent_buffers(model):
            expected = model(*call.args, **call.kwargs)
        state.restore()
        call.rng.restore()
        with torch.no_grad(), state.lent_buffers(gm):
            actual = bound.call(gm)
        return compare(actual, expected, rtol=None, atol=None) is not None
    except Exception:
        return False
    finally:
        state.restore()


def is_specialization_error(exc: BaseException) -> bool:
    """Whether a GraphModule raised because an input disagrees with a concrete arg it
    was traced with (torch.fx's guard: "... has been specialized to have value ...")."""
    return "has been specialized" in str(exc)


def located(context: CheckContext, make_tracer: TracerFactory) -> torch.fx.GraphModule | None:
    """``traced_with_stack_traces`` of the recorded call's model. Tracing runs
    forward's Python for real, so it gets lent buffers, as the check's own trace;
    the GraphModule is pointed back at the user's buffers afterwards."""
    call = context.call
    with lend(call.state, call.module) as lent:
        graph_module = traced_with_stack_traces(call.module, make_tracer, context.options, context.bound.concrete)
    if graph_module is not None and lent:
        return_buffers(graph_module, lent)
    return graph_module


def _located_quietly(context: CheckContext, make_tracer: TracerFactory) -> torch.fx.GraphModule | None:
    """``located``, its warnings silenced, with the model's attributes as captured
    before and after (tracing runs forward's Python)."""
    state = context.call.state
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if state is not None:
            state.restore()
        graph_module = located(context, make_tracer)
        if state is not None:
            state.restore()
    return graph_module


def dump_graph(gm: torch.fx.GraphModule, dump_dir: DumpDir | None, name: str) -> str | None:
    """``GraphModule.to_folder`` under ``dump_dir`` (a path or a callable giving one)."""
    if dump_dir is None:
        return None
    try:
        base = dump_dir() if callable(dump_dir) else dump_dir
        folder = os.path.join(os.fspath(base), name)
        n = 1
        while os.path.exists(folder):
            n += 1
            folder = os.path.join(os.fspath(base), f"{name}_{n}")
        os.makedirs(os.path.dirname(folder), exist_ok=True)
        gm.to_folder(folder, name)
        return folder
    except Exception:  # a dump is a convenience; never let it hide the verdict
        return None


def explain_mismatch(
    context: CheckContext, make_tracer: TracerFactory, captured: FxCaptured
) -> tuple[Diagnosis | None, Divergence | None, str | None]:
    """Why the traced outputs differ: a named cause, the first diverging submodule, a dump."""
    call, bound, options, gm = context.call, context.bound, context.options, captured.graph_module
    model = call.module
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eager = record_eager(model, call.args, call.kwargs, call.state, call.rng)
    with watching_type_checks() as type_checks:  # the diagnostic trace also shows the isinstance tests
        located_gm = _located_quietly(context, make_tracer)
    locations = graph_node_locations(located_gm)

    def before() -> None:
        call.rng.restore()

    divergence = None
    if not bound.var_kwargs:
        with lend(call.state, gm):
            divergence = first_divergence(
                gm, list(bound.inputs_for(gm)), eager, locations, options.rtol, options.atol, before
            )
    finding = None
    guards = captured.guards
    traced_on = captured.inputs
    now = input_signature(bound)
    if guards:
        finding = Diagnosis(
            Category.SPECIALIZATION,
            f"argument {', '.join(f'`{g}`' for g in guards)} was specialized while tracing and torch.fx "
            "could not add a guard for it: the graph only computes what the traced value computes",
        )
    elif traced_on is not None and traced_on != now:
        finding = Diagnosis(
            Category.SPECIALIZATION,
            f"the graph was traced from a call with inputs ({traced_on}) and is valid only for those: "
            f"this call ({now}) disagrees",
        )
    finding = (
        finding
        or buffers_written_while_tracing(model, captured.written)
        or baked_constants(gm, locations)
        or python_state(model, eager.changed)
    )
    finding = finding or _type_check_finding(context, make_tracer, type_checks)
    if finding is None and divergence is not None:
        module = dict(model.named_modules()).get(divergence.module)
        guard = _forward_guard(module) if module is not None else None
        if guard is not None:
            finding = Diagnosis(
                Category.CONTROL_FLOW,
                f"`{guard.source}` is False for a traced value (a Proxy, not a Tensor), so the graph "
                "recorded the branch meant for other inputs",
                guard,
                divergence.module,
                divergence.module_type,
            )
    name = f"{type(model).__name__}_traced"
    return finding, divergence, dump_graph(gm, context.dump_dir, name)


def _type_check_finding(context: CheckContext, make_tracer: TracerFactory, checks: list[TypeCheck]) -> Diagnosis | None:
    finding = traced_type_check(context.call.module, checks)
    return dataclasses.replace(finding, fix=type_check_fix(context, make_tracer, checks)) if finding else None


def type_check_fix(context: CheckContext, make_tracer: TracerFactory, checks: list[TypeCheck]) -> Suggestion | None:
    """The options that keep failed ``isinstance`` tests out of the graph, so they run on
    real tensors: an autowrap of each helper function holding one, else a leaf of the
    submodule whose forward holds it. A test in the root's own forward leaves only the
    change in code, which the diagnosis states (the root cannot be a leaf). Verified by
    checking the call again with them (``CheckContext.recheck``: traced, replayed, compared)."""
    options, model = context.options, context.call.module
    functions: list[Callable[..., object]] = []
    leaves: list[str] = []
    for check in checks:
        if check.function is not None:
            functions += [check.function] if check.function not in functions else []
        elif check.owner is not None and check.owner is not model:
            leaves += [type(check.owner).__name__] if type(check.owner).__name__ not in leaves else []
        else:
            return None
    changes: dict[str, object] = {}
    if functions:
        changes["autowrap_functions"] = (*options.autowrap_functions, *functions)
    if leaves:
        changes["leaf_modules"] = (*options.leaf_modules, *leaves)
    candidate = Suggestion.marker({key: option_json(value, key) for key, value in changes.items()}, changes)
    if context.recheck is None:  # inside a verification: nothing is explained
        return None
    passed, why = context.recheck(options.replace(**changes))
    if passed:
        return candidate.verified_as(True)
    return Suggestion(f"none found; tried {candidate.text} ({why})", False, found=False)


def explain_replay_failure(
    context: CheckContext, make_tracer: TracerFactory, exc: BaseException
) -> tuple[Category, Location | None, str, str | None]:
    """(category, location, module, module_type) of a GraphModule that raised on replay."""
    call, bound = context.call, context.bound
    model = call.module
    with_stacks = _located_quietly(context, make_tracer)
    node = None
    if with_stacks is not None and not bound.var_kwargs:
        call.rng.restore()
        with lend(call.state, with_stacks):
            node, _ = failing_node(with_stacks, list(bound.inputs_for(with_stacks)))
    location = node_location(node) if node is not None else None
    module, module_type = module_of_node(node) if node is not None else ("", None)
    if module and module_type is None:
        module_type = type(dict(model.named_modules()).get(module, model)).__name__
    if is_specialization_error(exc):
        return Category.SPECIALIZATION, location, module, module_type
    target = dict(model.named_modules()).get(module, model)
    guard = _forward_guard(target)
    if guard is not None:
        return Category.CONTROL_FLOW, guard, module, module_type or type(target).__name__
    return Category.OTHER, location, module, module_type
