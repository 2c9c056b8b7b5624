"""The compile backend's private TorchDynamo names, behind one module with a fallback where
torch moved them (the root ``pytest_fxtrace/_compat.py`` keeps what several parts use, and the
compile backend's torch floor, which the options check before the backend is imported).

What the compile backend reads of TorchDynamo, and how a check leaves Dynamo as it found it
(``torch._dynamo.reset()`` would drop every compiled function of the process, the user's
too, so it is never called):

* ``torch.compile(..., isolate_recompiles=True)`` (public, torch >= 2.13): the check's cache
  entries live in a region of their own on each code object, so the user's compiled
  functions neither see nor count them against their ``recompile_limit``; what the check
  leaves is invalidated when it ends (``DynamoScope.release``: ``_get_cache_entries_for_region``
  and ``_ExtraState.invalidate``, what Dynamo itself does when a guarded object dies). An
  isolated region still *reads* the default region's entries: a model the test itself
  compiled with ``torch.compile`` can hit them (its frames are then not compiled again).
* ``InstructionTranslatorBase.log_graph_break``: the one method every graph break passes
  through with its exception (``gb_type``, ``real_stack``: the user's stack), wrapped for
  the length of a check's call; ``torch._dynamo.explain`` and ``graph_break_reasons`` miss a
  break whose graph before it is empty (``print`` first in ``forward``);
* ``torch._dynamo.utils.get_compilation_metrics``: one record per frame Dynamo compiled,
  with its ``recompile_reason`` (the failed guard, in torch's words) -- the recompiles;
* the process-wide bookkeeping a compile adds to -- ``counters``, ``graph_break_reasons``,
  ``guard_failures``, the compilation metrics -- is put back after each call;
* ``torch._dynamo.pgo``'s code state (what automatic dynamic shapes learned of each
  function's sizes) is the check's own: swapped in for its calls, swapped out after;
* ``torch.nn.Module._wrapped_call_impl``: torch's own ``nn.Module.__call__``, put back while
  the check compiles and runs (the recorder's wrapper would be compiled as the top frame).
* a size a branch made constant again (``size_specializations``): the ``ShapeEnv`` of a
  graph's fake inputs, whose ``replacements_slocs`` name the user's statement;
* a fix being verified (backends/compile/fixes.py) changes Dynamo for one more compile:
  ``torch._dynamo.config.patch`` (its own context manager, so every option is put back),
  ``torch._dynamo.mark_dynamic`` on the recorded inputs (the marks it leaves on a tensor
  are put back after: ``marked_dynamic``).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import sys
import types
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any


def module_call() -> Callable[..., Any]:
    """torch's own ``nn.Module.__call__`` (whatever wraps it now)."""
    import torch

    return torch.nn.Module._wrapped_call_impl


def dynamo_backend(name: str) -> Callable[..., Any]:
    """The Dynamo backend ``name`` as a compiler function ``(gm, example_inputs) -> callable``:
    "eager" runs each graph as captured; others come from Dynamo's registry."""
    if name == "eager":
        return lambda gm, example_inputs: gm.forward
    import torch._dynamo

    return torch._dynamo.lookup_backend(name)


def automatic_dynamic_shapes() -> bool:
    """Whether Dynamo makes a size dynamic once it varies (``torch._dynamo.config``)."""
    import torch._dynamo

    return bool(getattr(torch._dynamo.config, "automatic_dynamic_shapes", False))


def dynamo_option(name: str) -> Any:
    """The value of ``torch._dynamo.config.<name>`` (None where this torch has no such option)."""
    import torch._dynamo

    return getattr(torch._dynamo.config, name, None)


def dynamo_options(**changes: Any) -> contextlib.AbstractContextManager[Any]:
    """``torch._dynamo.config`` with ``changes`` for a block, every option as before after it
    (Dynamo's own ``config.patch``)."""
    import torch._dynamo

    return torch._dynamo.config.patch(**changes)  # type: ignore[no-any-return]  # torch types it as Any


# what torch._dynamo.mark_dynamic leaves on a tensor (torch/_dynamo/decorators.py)
_DIM_MARKS = ("_dynamo_dynamic_indices", "_dynamo_dynamic_range", "_dynamo_hint_overrides", "_specialize_on", "_has_dynamo_dim_marking")


@contextlib.contextmanager
def marked_dynamic(dims: Iterable[tuple[Any, int] | tuple[Any, int, int | None, int | None]]) -> Iterator[None]:
    """``torch._dynamo.mark_dynamic(tensor, dim)`` for each of ``dims`` (with ``min=`` /
    ``max=`` where a mark gives them) for a block; each tensor's marks as before after it
    (a test's own marks stay, ours go)."""
    import copy

    import torch._dynamo

    dims = list(dims)
    saved = {}
    for tensor, *_ in dims:
        saved[id(tensor)] = (tensor, {name: copy.copy(vars(tensor)[name]) for name in _DIM_MARKS if name in vars(tensor)})
    try:
        for tensor, dim, *span in dims:
            # min=None / max=None spelled out trips torch 2.14 ("not simple sympy type")
            bounds = {key: value for key, value in zip(("min", "max"), span, strict=False) if value is not None}
            torch._dynamo.mark_dynamic(tensor, dim, **bounds)
        yield
    finally:
        for tensor, marks in saved.values():
            for name in _DIM_MARKS:
                vars(tensor).pop(name, None)
            vars(tensor).update(marks)


def constraint_violation(exc: BaseException) -> str | None:
    """torch's words where ``exc`` (or what it was raised from) is the constraint violation
    Dynamo raises when code fixes or narrows a dimension marked dynamic ("Constraints
    violated (L['x'].size()[0])! ... specialized it to be a constant (8) ... User stack:");
    None otherwise."""
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError

    from pytest_fxtrace.diagnose import exception_chain

    return next((str(error) for error in exception_chain(exc) if isinstance(error, ConstraintViolationError)), None)


def graph_break_type_id(gb_type: str | None) -> str | None:
    """TorchDynamo's stable id (``"GB0170"``) of a graph-break type, from its registry;
    None where the type or the registry is unknown."""
    if not gb_type:
        return None
    try:
        from torch._dynamo.exc import _load_gb_type_to_gb_id_map

        found = _load_gb_type_to_gb_id_map().get(gb_type)
    except Exception:  # no registry in this torch, or unreadable
        return None
    return found if isinstance(found, str) and found else None


def graphed_modules(model: Any, graphs: Iterable[Any]) -> frozenset[str]:
    """The paths of ``model``'s modules whose code Dynamo put in ``graphs``: each node's
    ``nn_module_stack``, keyed by ``id`` of the module (torch >= 2.2; before, by its name),
    else read from its source (``L['self'].a.lin``) where that is the model."""
    paths = {str(id(module)): path for path, module in model.named_modules(remove_duplicate=False)}
    known = set(paths.values())
    found = set()
    for graph in graphs:
        for node in graph.graph.nodes:
            for key, value in (node.meta.get("nn_module_stack") or {}).items():
                path = paths.get(str(key))
                if path is None and isinstance(value, tuple) and isinstance(value[0], str):
                    source = value[0].removeprefix("L['self']").removeprefix(".")
                    path = source if source in known else None
                if path is not None:
                    found.add(path)
    return frozenset(found)


def size_specializations(graph: Any) -> dict[str, str]:
    """The sizes Dynamo made constant again while compiling ``graph`` (a branch on a size that
    had gone dynamic: ``if x.shape[0] == 4``), by their source (``L['x'].size()[0]``), each
    with the statement torch names for it (``if x.shape[0] == 4:  # m.py:5 in forward``): the
    ``ShapeEnv`` of the graph's fake inputs (``replacements``, ``replacements_slocs``,
    ``var_to_sources``). Empty where torch keeps no such record."""
    found: dict[str, str] = {}
    try:
        values = (node.meta.get("example_value") for node in graph.graph.nodes if node.op == "placeholder")
        env = next((v.fake_mode.shape_env for v in values if getattr(getattr(v, "fake_mode", None), "shape_env", None)), None)
        if env is None:
            return found
        slocs = getattr(env, "replacements_slocs", {})
        for symbol, value in env.replacements.items():
            sloc = slocs.get(symbol)
            if sloc is None or not getattr(value, "is_number", False):
                continue
            where = getattr(sloc, "maybe_user_loc", None) or str(sloc)  # a string in older torch
            for source in env.var_to_sources.get(symbol, ()):
                name = source.name() if callable(source.name) else source.name
                found[str(name)] = where
    except Exception:  # a torch that keeps another record: no statement rather than a failure
        return {}
    return found


@dataclasses.dataclass
class DynamoBreak:
    """One graph break as Dynamo logged it."""

    gb_type: str | None  # torch's graph-break type ("Data-dependent branching"); None: not told
    message: str  # torch's message: the type, "Explanation: ...", hints
    stack: list[Any]  # traceback.FrameSummary of the user's stack at the break, outermost first
    skipped: bool  # Dynamo gave up the frame: it runs eagerly from its start
    # the modules running around the break, innermost first (``calling_modules``)
    callers: list[Any] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class DynamoCompile:
    """One frame Dynamo compiled (``CompilationMetrics``)."""

    filename: str
    firstlineno: int
    name: str
    recompile_reason: str | None  # the guard that failed, in torch's words; None: a first compile
    failed: str | None  # why Dynamo could not compile the frame at all (it then runs eagerly)


@dataclasses.dataclass
class DynamoEvents:
    """What Dynamo did during a block of ``DynamoScope.observing``."""

    breaks: list[DynamoBreak] = dataclasses.field(default_factory=list)
    compiles: list[DynamoCompile] = dataclasses.field(default_factory=list)
    graphs: list[Any] = dataclasses.field(default_factory=list)  # the GraphModules compiled meanwhile


class DynamoScope:
    """One check's own TorchDynamo state: its cache region and its automatic-dynamic
    memory. ``observing()`` runs a block with them and reports what Dynamo did;
    ``release()`` invalidates what the check left in the caches.

    Example::

        scope = DynamoScope()
        compiled = scope.compile(model, my_backend)
        with scope.observing() as events:
            compiled(x)
        scope.release()
    """

    def __init__(self) -> None:
        from collections import defaultdict

        from torch._dynamo import pgo

        self.region: int | None = None
        self._code_state: defaultdict[Any, Any] = defaultdict(pgo.CodeState)
        self._compiles: collections.Counter[Any] = collections.Counter()  # compiles per Dynamo frame id

    def compile(self, model: Any, backend: Callable[..., Any], dynamic: bool | None = None) -> Any:
        import torch

        compiled = torch.compile(  # type: ignore[call-overload]  # torch 2.14's overloads omit isolate_recompiles
            model, backend=backend, fullgraph=False, dynamic=dynamic, isolate_recompiles=True
        )
        self.region = getattr(getattr(compiled, "dynamo_ctx", None), "_isolate_recompiles_id", None)
        return compiled

    @contextlib.contextmanager
    def observing(self) -> Iterator[DynamoEvents]:
        from torch._dynamo import pgo
        from torch._dynamo import utils as dynamo_utils
        from torch._dynamo.symbolic_convert import InstructionTranslatorBase

        _sweep()  # a safe point: no Dynamo frame of this thread is compiling
        events = DynamoEvents()
        compiled = _frame_compiles()
        counted = collections.Counter(compiled)
        counters = {name: collections.Counter(counter) for name, counter in dynamo_utils.counters.items()}
        reasons = len(dynamo_utils.graph_break_reasons)
        # warnings Dynamo gives once per process: the check's must not silence the user's
        warned = set(getattr(dynamo_utils, "warn_once_cache", ()))
        failures = {code: list(found) for code, found in dynamo_utils.guard_failures.items()}
        metrics = dynamo_utils.get_compilation_metrics()
        code_state = pgo._CODE_STATE, pgo._INIT_CODE_STATE
        original = InstructionTranslatorBase.log_graph_break
        # the same dict as "initial": Dynamo then never writes the check's sizes to a PGO cache
        pgo._CODE_STATE = pgo._INIT_CODE_STATE = self._code_state
        # wrapped for the length of the check's calls, put back after (a method, by design)
        InstructionTranslatorBase.log_graph_break = _logging_breaks(original, events)  # type: ignore[method-assign]
        try:
            yield events
        finally:
            InstructionTranslatorBase.log_graph_break = original  # type: ignore[method-assign]
            pgo._CODE_STATE, pgo._INIT_CODE_STATE = code_state
            known = {id(metric) for metric in metrics}
            after = dynamo_utils.get_compilation_metrics()
            events.compiles.extend(_compiled(metric) for metric in after if id(metric) not in known)
            _put_back(dynamo_utils, counters, reasons, failures, metrics)
            self._compiles.update(collections.Counter(compiled) - counted)
            if isinstance(getattr(dynamo_utils, "warn_once_cache", None), set):
                dynamo_utils.warn_once_cache.intersection_update(warned)

    def release(self) -> None:
        """Invalidate the entries the check's region holds on every code object Dynamo has
        seen (their compiled code and guards are freed), and take the check's compiles off
        each frame's count. Both counts, a frame's compiles and the entries on its code (dead
        ones too), are held against ``accumulated_recompile_limit`` (256) for every later
        compile of that code in the process: after 256 checks of one model class Dynamo would
        run its forward eagerly, the user's own ``torch.compile`` of it too. So a code left
        with dead entries only is queued to be cleared (``_sweep``, at the next check's start:
        this may run from the garbage collector, in the middle of a compile)."""
        compiled = _frame_compiles()
        for frame_id, count in self._compiles.items():
            compiled[frame_id] = max(0, compiled[frame_id] - count)
        self._compiles.clear()
        if self.region is None or self.region < 0:
            return
        try:
            from torch._dynamo.convert_frame import input_codes
            from torch._dynamo.eval_frame import _get_cache_entries_for_region
            from torch._dynamo.guards import DeletedGuardManagerWrapper

            codes = [ref() for ref in list(input_codes.seen)]
            for code in codes:
                if code is None:
                    continue
                for entry in _get_cache_entries_for_region(code, self.region):
                    _DEAD_CODES.add(code)
                    manager = entry.guard_manager
                    state = getattr(manager, "extra_state", None)
                    if state is not None and not isinstance(manager, DeletedGuardManagerWrapper):
                        state.invalidate(entry, DeletedGuardManagerWrapper("the pytest-fxtrace check ended"))
        except Exception:  # a torch that keeps its entries otherwise: they stay, isolated and unused
            return
        finally:
            self.region = None


_DEAD_CODES: weakref.WeakSet[Any] = weakref.WeakSet()  # codes a released check left entries on


def _sweep() -> None:
    """Clear the cache of each code in ``_DEAD_CODES`` that holds dead entries only (the
    released checks', and any Dynamo invalidated itself); a code with a live entry, the
    user's or another check's, keeps them all. Measured: without it, the 257th check of one
    model class ran its forward eagerly ("Dynamo recompile limit exceeded")."""
    if not _DEAD_CODES:
        return
    codes = list(_DEAD_CODES)
    _DEAD_CODES.clear()
    try:
        from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list, reset_code
        from torch._dynamo.guards import DeletedGuardManagerWrapper

        for code in codes:
            entries = _debug_get_cache_entry_list(code)
            if entries and all(isinstance(entry.guard_manager, DeletedGuardManagerWrapper) for entry in entries):
                reset_code(code)
    except Exception:  # a torch that keeps its caches otherwise: the entries stay, unused
        return


def _frame_compiles() -> collections.Counter[Any]:
    """Dynamo's count of compiles per frame (a code object's id in Dynamo's frame state),
    process-wide and never reset but by ``torch._dynamo.reset()``; an empty one where this
    torch keeps none."""
    try:
        from torch._dynamo import convert_frame
    except ImportError:  # pragma: no cover - no Dynamo
        return collections.Counter()
    found = getattr(convert_frame, "FRAME_COMPILE_COUNTER", None)
    return found if isinstance(found, collections.Counter) else collections.Counter()


def _logging_breaks(original: Callable[..., Any], events: DynamoEvents) -> Callable[..., Any]:
    def log_graph_break(tx: Any, code_options: Any, reason: str = "", exc: Any = None) -> Any:
        if exc is not None and not getattr(exc, "logged", False):
            from torch._guards import TracingContext

            stack = getattr(exc, "real_stack", None) or TracingContext.extract_stack()
            skipped = bool(getattr(exc, "skip_frame", False)) or str(reason).startswith(_FRAME_SKIPPED)
            message = str(getattr(exc, "msg", exc))
            callers = [*inlined_modules(exc), *calling_modules(tx)]
            events.breaks.append(DynamoBreak(getattr(exc, "gb_type", None), message, list(stack), skipped, callers))
        return original(tx, code_options, reason=reason, exc=exc)

    return log_graph_break


def calling_modules(tx: Any) -> list[Any]:
    """The ``nn.Module`` objects bound to ``self`` in the frame Dynamo is compiling and in
    the frames running around it, innermost first: the real Python stack, where Dynamo's
    record of the user's stack starts at the frame it compiles (a resumed function, a helper
    compiled on its own) and does not say which instance of a class it ran in."""
    import torch

    found: list[Any] = []
    torch_dir = os.path.dirname(torch.__file__) + os.sep
    try:
        compiled = getattr(getattr(tx, "output", None), "root_tx", tx)
        found.append(getattr(compiled, "f_locals", {}).get("self"))
        frame: types.FrameType | None = sys._getframe(1)
        while frame is not None:
            code = frame.f_code
            torchs = code.co_filename.startswith(torch_dir)  # only its module calls: Dynamo's own frames are many
            if code.co_argcount and code.co_varnames[0] == "self" and (not torchs or code.co_name in _MODULE_CALLS):
                found.append(frame.f_locals.get("self"))
            frame = frame.f_back
    except Exception:  # a torch whose translator keeps its frame otherwise: the stack Dynamo gives
        pass
    return [value for value in found if isinstance(value, torch.nn.Module)]


_MODULE_CALLS = frozenset({"_call_impl", "_wrapped_call_impl"})


def inlined_modules(exc: BaseException) -> list[Any]:
    """The ``nn.Module`` objects bound to ``self`` in the functions Dynamo was inlining when
    it raised ``exc``, innermost first: its translators, one per inlined call, are the
    ``self`` of the frames ``exc`` went through (``self.b(self.a(x))``: which block broke)."""
    import torch
    from torch._dynamo.symbolic_convert import InstructionTranslatorBase

    translators: list[Any] = []
    traceback = exc.__traceback__
    try:
        while traceback is not None:
            code = traceback.tb_frame.f_code
            if code.co_argcount and code.co_varnames[0] == "self":
                owner = traceback.tb_frame.f_locals.get("self")
                if isinstance(owner, InstructionTranslatorBase) and (not translators or translators[-1] is not owner):
                    translators.append(owner)
            traceback = traceback.tb_next
        local = (getattr(translator, "symbolic_locals", {}).get("self") for translator in reversed(translators))
        values = [getattr(getattr(vt, "_cache", vt), "value", None) for vt in local]
    except Exception:  # a torch whose translators keep their locals otherwise: the stacks then
        return []
    return [value for value in values if isinstance(value, torch.nn.Module)]


# how Dynamo words a break after which it runs the whole frame eagerly (symbolic_convert)
_FRAME_SKIPPED = "Failed to handle graph break gracefully"


def _compiled(metric: Any) -> DynamoCompile:
    return DynamoCompile(
        str(metric.co_filename or ""),
        int(metric.co_firstlineno or 0),
        str(metric.co_name or ""),
        metric.recompile_reason,
        metric.fail_reason if metric.fail_type else None,
    )


def _put_back(dynamo_utils: Any, counters: dict[str, Any], reasons: int, failures: dict[Any, list[Any]], metrics: list[Any]) -> None:
    """Dynamo's process-wide bookkeeping as before a block (``DynamoScope.observing``)."""
    dynamo_utils.counters.clear()
    dynamo_utils.counters.update(counters)
    del dynamo_utils.graph_break_reasons[reasons:]
    dynamo_utils.guard_failures.clear()
    dynamo_utils.guard_failures.update(failures)
    dynamo_utils.clear_compilation_metrics()
    for metric in metrics:
        dynamo_utils._compilation_metrics.append(metric)
