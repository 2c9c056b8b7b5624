"""Fixes of a compile check over its budget, verified: the model compiled again with each one
applied, in a Dynamo state of its own (``CompileSession``), on the calls the check ran, each
output compared with eager. A fix is verified where every output matches and it leaves fewer
break sites inside compiled code (or fewer counted recompiles) and no more of the other.

What is tried, only when a check fails and at most ``MAX_TRIALS`` compiles:

* breaks: ``torch._dynamo.config.capture_scalar_outputs = True`` for a value read out of a
  tensor (``.item()``, ``int(t)``; ``capture_dynamic_output_shape_ops`` too for an output of
  data-dependent size); ``@torch.compiler.disable`` on the function or submodule ``forward``
  that holds each site (never the model's own ``forward``: nothing would be compiled). The
  call of a disabled function is itself a break Dynamo reports (GB0099): a *known* one, at the
  call, which the fix's words count apart from the breaks inside compiled code;
* recompiles: ``allow_unspec_int_on_nn_module = True`` for a module's int attribute,
  ``torch._dynamo.mark_dynamic`` on the input dimensions that vary between the calls, and
  ``dynamic=True`` (a marker option: the check then compiles so, as the user would).

Each fix is applied for its own compile and put back after it: Dynamo's options by its own
``config.patch``, a decorator by replacing the function on its class or module and putting the
original back, the marks ``mark_dynamic`` leaves on the inputs removed. The user's model
object is never changed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import re
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch

from pytest_fxtrace.backends.base import CheckContext
from pytest_fxtrace.backends.compile import verdict
from pytest_fxtrace.backends.compile._compat import dynamo_option, dynamo_options, marked_dynamic
from pytest_fxtrace.backends.compile.options import CompileOptions
from pytest_fxtrace.backends.compile.recompiles import call_arguments
from pytest_fxtrace.backends.compile.session import CompileSession, Marks
from pytest_fxtrace.backends.compile.tally import Tally
from pytest_fxtrace.capture import CapturedCall
from pytest_fxtrace.dims import DimRequest
from pytest_fxtrace.paths import shown_path
from pytest_fxtrace.types import Category, Diagnosis, GraphBreak, Suggestion

MAX_TRIALS = 3  # compiles a failing check may spend verifying fixes

_SCALAR = (Category.DATA_DEPENDENT, Category.TYPE_CONVERSION)
_INT_ATTRIBUTE = re.compile(r"\s*(?:L\['self'\]|self)\S*\s*==\s*-?\d+(?:\s|$)")


@dataclasses.dataclass(frozen=True)
class Fix:
    """One fix to try: the change in the user's words, how it is applied around a compile,
    and the marker options that apply it (where it is one)."""

    name: str  # short, for "none found: <name> ..."
    text: str
    apply: Callable[[], contextlib.AbstractContextManager[Any]]
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    dynamic: bool | None = None  # torch.compile's dynamic= for its compile; None: the check's own
    covers: int = sys.maxsize  # the most failures it can remove (sys.maxsize: not known)


@dataclasses.dataclass(frozen=True)
class Found:
    """The best fix verified (None: none was), whether it leaves nothing over the budget but
    the known breaks it makes, and what was tried in vain."""

    suggestion: Suggestion | None
    tried: list[str]
    passes: bool = False
    rest: Category | None = None  # the category of the first break site the fix leaves


@dataclasses.dataclass(frozen=True)
class Allowance:
    """The time a fix search may take: the seconds left of the check's ``timeout`` (None: no
    limit) and what one compile is expected to cost (the check's own first compile)."""

    left: float | None = None
    compile_seconds: float = 0.0


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What the model compiled again with a fix did over the calls."""

    graphs: int  # the graphs its first call compiled
    inside: int  # break sites inside compiled code
    known: int  # break sites at a call of a disabled function
    counted: int  # recompiles held against the budget
    calls: int
    rest: Category | None = None  # the category of the first site left inside compiled code


def search(
    diagnosis: Diagnosis,
    tally: Tally,
    calls: Sequence[CapturedCall],
    context: CheckContext,
    allowance: Allowance = Allowance(),
    marks: Marks | None = None,
) -> Found:
    """The fix of a check over budget (``diagnosis``: breaks, or ``specialization`` for
    recompiles) that passes it, else the one that comes nearest, each verified by compiling
    again (``compile_again``); ``tally`` is what the check's own compile found over ``calls``.
    A compile that would run past the check's timeout is not started (``allowance``): the
    check's finding, every site with its line, is worth more than a fix that makes it a timeout."""
    options = context.options
    budgets = CompileOptions.of(options)
    recompiles = diagnosis.category is Category.SPECIALIZATION
    model = calls[-1].module
    dynamic = None if isinstance(options.dynamic, DimRequest) else options.dynamic  # (compile refuses a request)
    candidates = recompile_fixes(tally, calls, dynamic) if recompiles else break_fixes(tally, model)
    before = _outcome(tally, len(calls))
    needed = before.counted - budgets.max_recompiles if recompiles else before.inside - budgets.max_graph_breaks
    # a fix that can remove all it needs first; once one helps, only those: the one found is
    # the advice, so another compile could only replace it by a fix that passes (C2, the
    # failing check / explain: SeveralBreaks and a detection model compiled twice, now once)
    candidates = sorted(candidates, key=lambda fix: fix.covers < needed)
    best: Suggestion | None = None
    rest: Category | None = None
    tried = []
    spent = 0.0
    for fix in candidates[:MAX_TRIALS]:
        if best is not None and fix.covers < needed:
            continue
        if allowance.left is not None and spent + allowance.compile_seconds > allowance.left:
            tried.append(
                f"not compiled again with {fix.name}: a compile takes about {allowance.compile_seconds:.0f} s here, "
                f"past timeout={options.timeout:g} s"
            )
            break
        started = time.perf_counter()
        outcome = compile_again(fix, calls, context, marks)
        spent += time.perf_counter() - started
        if outcome is None or not outcome.graphs:
            why = "it fails or differs from eager" if outcome is None else "Dynamo captures no graph (nothing left to compile)"
            tried.append(f"compiled again with {fix.name}, {why}")
            continue
        if not _fewer(outcome, before, recompiles):
            tried.append(f"compiled again with {fix.name}, no fewer {'recompiles' if recompiles else 'break sites'}")
            continue
        budget = budgets.max_graph_breaks
        suggestion = Suggestion(f"{fix.text}; compiled again so: {_words(outcome, before, recompiles, budget)}", True, fix.options)
        # within budget but for the known breaks it makes (which the words give a budget for)
        if outcome.inside <= budget and outcome.counted <= budgets.max_recompiles:
            return Found(suggestion, tried, True)
        if best is None:
            best, rest = suggestion, outcome.rest
    return Found(best, tried, rest=rest)


def compile_again(fix: Fix, calls: Sequence[CapturedCall], context: CheckContext, marks: Marks | None = None) -> Outcome | None:
    """The model compiled again with ``fix`` applied, in a Dynamo state of its own, run on
    each of ``calls`` in order from its state and RNG before it, the dimensions the check
    marks dynamic (``marks``) marked too; None where a run raised or an output differs from
    eager's."""
    options = context.options
    model = calls[-1].module
    tally = Tally(model)
    try:
        with fix.apply():
            dynamic = None if isinstance(options.dynamic, DimRequest) else options.dynamic
            dims = fix.dynamic if fix.dynamic is not None else dynamic
            session = CompileSession(model, CompileOptions.of(options).compile_backend, dims, options.train)
            try:
                for call in calls:
                    try:
                        replay, events = session.run(call, marks)
                    finally:
                        if call.state is not None:
                            call.state.restore()
                    tally.add(events, call)
                    if context.compare(replay.output, call.output, rtol=options.rtol, atol=options.atol) is not None:
                        return None
            finally:
                session.scope.release()
    except Exception:  # a fix that fails differently is just not verified
        return None
    return _outcome(tally, len(calls))


def _outcome(tally: Tally, calls: int) -> Outcome:
    inside = [site for site in tally.sites if not known_break(site)]
    rest = Category(inside[0].category) if inside else None
    known = len(tally.sites) - len(inside)
    return Outcome(tally.first_graphs or 0, len(inside), known, len(tally.counted), calls, rest)


def known_break(site: GraphBreak) -> bool:
    """A break at the call of a function wrapped in ``torch.compiler.disable``: one the user
    chose, at the edge of compiled code rather than inside it."""
    return "torch.compiler.disable" in (site.type or "")


def _fewer(outcome: Outcome, before: Outcome, recompiles: bool) -> bool:
    if recompiles:
        return outcome.counted < before.counted and outcome.inside <= before.inside
    return outcome.inside < before.inside and outcome.counted <= before.counted


def _words(outcome: Outcome, before: Outcome, recompiles: bool, budget: int) -> str:
    calls = f"{outcome.calls} recorded call{'s' if outcome.calls != 1 else ''}"
    if recompiles:
        counted = f"{outcome.counted} recompile{'s' if outcome.counted != 1 else ''}"
        return f"{counted} over the {calls} (was {before.counted}), matches eager"
    inside = f"{outcome.inside} break{'s' if outcome.inside != 1 else ''}"
    if not outcome.known:  # (how many graphs may depend on the data: a branch on it taken or not)
        return f"{inside} (was {before.inside}), matches eager on {calls}"
    graphs = f"{outcome.graphs} graph{'s' if outcome.graphs != 1 else ''}"
    total = outcome.inside + outcome.known
    allow = f", which max_graph_breaks={total} accepts" if total > budget else ""
    return (
        f"{graphs}, {inside} inside compiled code (was {before.inside}), matches eager on {calls}; "
        f"the call of a disabled function is a known break{allow}"
    )


# --- the fixes of graph breaks ------------------------------------------------------------------


def break_fixes(tally: Tally, model: torch.nn.Module) -> list[Fix]:
    """Dynamo's options for values read out of tensors, then ``torch.compiler.disable`` on
    what holds each site."""
    if tally.fake and verdict.quantized_modules(model):
        return []  # Dynamo cannot trace quantized tensors: nothing to try (verdict.QUANTIZED_FIX)
    fixes = []
    changes = {}
    scalar = [site for site in tally.sites if site.category in _SCALAR]
    if scalar and not dynamo_option("capture_scalar_outputs"):
        changes["capture_scalar_outputs"] = True
    if any("dynamic shape" in (site.type or "").lower() for site in scalar) and not dynamo_option(
        "capture_dynamic_output_shape_ops"
    ):
        changes["capture_dynamic_output_shape_ops"] = True
    if changes:
        fixes.append(dataclasses.replace(config_fix(changes), covers=len(scalar)))
    holders, held = [], 0
    for site, frame in zip(tally.sites, tally.frames, strict=True):
        holder = holder_of(frame, model) if frame is not None and not known_break(site) else None
        held += holder is not None
        if holder is not None and holder not in holders:
            holders.append(holder)
    if holders:
        fixes.append(dataclasses.replace(disable_fix(holders), covers=held))
    return fixes


def config_fix(changes: Mapping[str, Any]) -> Fix:
    """``torch._dynamo.config`` options set (by ``config.patch``: put back after)."""
    settings = "; ".join(f"torch._dynamo.config.{name} = {value!r}" for name, value in changes.items())
    name = ", ".join(f"{name}={value!r}" for name, value in changes.items())
    return Fix(name, settings, lambda: dynamo_options(**changes))


Holder = tuple[Any, str]  # (a class or a module, the name of the function on it)


def holder_of(frame: traceback.FrameSummary, model: torch.nn.Module) -> Holder | None:
    """Where the function ``frame`` runs is defined: (class, name) of a method of one of the
    model's submodules, (module, name) of a module-level function; None for the model's own
    ``forward`` (disabling it compiles nothing) or a function not found so."""
    root = type(model)
    for cls in dict.fromkeys(type(module) for module in model.modules()):
        for klass in cls.__mro__:
            if _runs(vars(klass).get(frame.name), frame):
                return None if klass in root.__mro__ and frame.name == "forward" else (klass, frame.name)
    for module in list(sys.modules.values()):
        if getattr(module, "__file__", None) == frame.filename and _runs(vars(module).get(frame.name), frame):
            return (module, frame.name)
    return None


def _runs(function: Any, frame: traceback.FrameSummary) -> bool:
    code = getattr(function, "__code__", None) if inspect.isfunction(function) else None
    if code is None or code.co_filename != frame.filename:
        return False
    lines = [line for _, _, line in code.co_lines() if line is not None]
    return code.co_firstlineno <= (frame.lineno or 0) <= max(lines, default=code.co_firstlineno)


def disable_fix(holders: Sequence[Holder]) -> Fix:
    """``@torch.compiler.disable`` on each function of ``holders``."""
    names = [_holder_name(holder) for holder in holders]
    return Fix(
        f"torch.compiler.disable on {', '.join(names)}",
        f"decorate {' and '.join(names)} with @torch.compiler.disable (Dynamo runs it eagerly)",
        lambda: _disabled(holders),
    )


def _holder_name(holder: Holder) -> str:
    owner, name = holder
    function = vars(owner)[name]
    where = f"{shown_path(function.__code__.co_filename)}:{function.__code__.co_firstlineno}"  # a library's by import path
    named = f"{owner.__name__}.{name}" if isinstance(owner, type) else name
    return f"`{named}` ({where})"


@contextlib.contextmanager
def _disabled(holders: Sequence[Holder]) -> Iterator[None]:
    saved = []
    try:
        for owner, name in holders:
            original = vars(owner)[name]
            saved.append((owner, name, original))
            setattr(owner, name, torch.compiler.disable(original))
        yield
    finally:
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)


# --- the fixes of recompiles --------------------------------------------------------------------


def recompile_fixes(tally: Tally, calls: Sequence[CapturedCall], dynamic: bool | None) -> list[Fix]:
    """For a module's int attribute, Dynamo's option to keep it symbolic; for sizes, the
    varying input dimensions marked dynamic, then ``dynamic=True``."""
    fixes = []
    counted = tally.counted
    if any(_INT_ATTRIBUTE.match(item.guard) for item in counted) and not dynamo_option("allow_unspec_int_on_nn_module"):
        fixes.append(config_fix({"allow_unspec_int_on_nn_module": True}))
    if any(".shape[" in item.reason for item in counted):
        varying = varying_dims(calls)
        if varying:
            fixes.append(mark_dynamic_fix(varying, calls))
        if dynamic is not True:
            fixes.append(
                Fix(
                    "dynamic=True",
                    "compile with dynamic=True (torch.compile(model, dynamic=True)); the check compiles so "
                    "with @pytest.mark.traceable(backend='compile', dynamic=True)",
                    contextlib.nullcontext,
                    {"dynamic": True},
                    dynamic=True,
                )
            )
    return fixes


def varying_dims(calls: Sequence[CapturedCall]) -> dict[str, list[int]]:
    """The dimensions of each tensor argument of the model's ``forward`` whose size differs
    between ``calls`` (an argument every call passes as a tensor of one rank)."""
    bound = [call_arguments(call.module, call.args, call.kwargs) for call in calls]
    found: dict[str, list[int]] = {}
    for name, first in bound[0].items():
        values = [value for value in (arguments.get(name) for arguments in bound) if isinstance(value, torch.Tensor)]
        if not isinstance(first, torch.Tensor) or len(values) < len(bound) or any(v.dim() != first.dim() for v in values):
            continue
        dims = [dim for dim in range(first.dim()) if len({value.shape[dim] for value in values}) > 1]
        if dims:
            found[name] = dims
    return found


def mark_dynamic_fix(varying: Mapping[str, list[int]], calls: Sequence[CapturedCall]) -> Fix:
    """``torch._dynamo.mark_dynamic`` on each varying dimension of every call's inputs."""
    marks = [
        (value, dim)
        for call in calls
        for name, value in call_arguments(call.module, call.args, call.kwargs).items()
        for dim in varying.get(name, ())
    ]
    code = "; ".join(f"torch._dynamo.mark_dynamic({name}, {dim})" for name, dims in varying.items() for dim in dims)
    return Fix(
        "mark_dynamic",
        f"mark the sizes that vary dynamic before calling the compiled model: {code}",
        lambda: marked_dynamic(marks),
    )


__all__ = ["MAX_TRIALS", "Allowance", "Fix", "Found", "break_fixes", "compile_again", "known_break", "recompile_fixes", "search"]
