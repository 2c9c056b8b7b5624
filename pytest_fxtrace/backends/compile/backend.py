"""The torch.compile backend (``backend="compile"``): is the model compiled whole, or how
many graphs does TorchDynamo split it into, and how often does it compile it again?

``torch.compile(model, backend=<recording wrapper of compile_backend>, fullgraph=False)`` in
the check's own Dynamo state (``session.py``), then every recorded call in order through that
one compiled model. What is particular to compile, against the other backends:

* Dynamo compiles when a call reaches a frame, so a *capture* here is one recorded call run
  through the compiled model: it compiles what that call needs (first compiles, recompiles,
  the graph breaks they meet), and its output is what ``run`` hands the check to compare with
  eager. Every call is captured (``serves`` is False): Dynamo's guards, not the check, decide
  whether a call needs new code;
* over the calls, the distinct graph-break sites and the counted recompiles are held against
  ``max_graph_breaks`` / ``max_recompiles``; over budget, the capture fails (``untraceable``:
  the category of the first site, or ``specialization``), its message listing each one. Break
  sites fail the call that goes over; recompiles are judged once every recorded call ran
  (``failed_over_calls``), so the count is the calls' own and not the first over budget;
* a forward Dynamo runs eagerly as a whole (no graph captured) is a failed capture too;
* the report carries every site and recompile (``graph_breaks``, ``recompiles``), passing or not.

Knows no pytest and no checker; everything arrives as arguments.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from time import monotonic

import torch

from pytest_fxtrace.backends.base import (
    Backend,
    Captured,
    CaptureFailed,
    CheckContext,
    Explanation,
    Recheck,
    Replay,
    Seams,
)
from pytest_fxtrace.backends.compile import fixes, verdict
from pytest_fxtrace.backends.compile._compat import (
    DynamoCompile,
    DynamoEvents,
    constraint_violation,
    graphed_modules,
)
from pytest_fxtrace.backends.compile.breaks import user_frame
from pytest_fxtrace.backends.compile.dims import DimMarks, judge_dims
from pytest_fxtrace.backends.compile.options import CompileOptions
from pytest_fxtrace.backends.compile.session import CompileSession
from pytest_fxtrace.backends.compile.tally import Tally
from pytest_fxtrace.capture import CapturedCall
from pytest_fxtrace.diagnose import format_error
from pytest_fxtrace.dims import DimError, DimRequest, DimVerdict
from pytest_fxtrace.locate import is_user_file, statement_in, user_location
from pytest_fxtrace.options import OptionError, TraceOptions
from pytest_fxtrace.paths import shown_path
from pytest_fxtrace.probing import example_shapes
from pytest_fxtrace.sizes import resolve
from pytest_fxtrace.types import Category, Diagnosis, GraphBreak, Location, Recompile, Suggestion


class BudgetExceeded(Exception):
    """A compiled model's graph breaks or recompiles over the budget (no torch error)."""


@dataclasses.dataclass
class CompileCaptured(Captured):
    """The first graph Dynamo captured (an empty one where it captured none), and the run
    of the compiled model that captured it, which the check's first replay takes (the
    capture ran the call already)."""

    replay: Replay | None = None


class CompileBackend(Backend[CompileCaptured]):
    """``torch.compile``; one ``CompileSession`` per checked model.

    Example::

        checker = ModelChecker(model, resolve_options(("", {"backend": "compile"})), CompileBackend())
    """

    name = "compile"

    def __init__(self, seams: Seams | None = None) -> None:
        super().__init__(seams)
        self._session: CompileSession | None = None
        self._tally: Tally | None = None
        self._calls: list[CapturedCall] = []  # the calls the session ran, for a fix to run again
        self._forward_compiled = False  # a frame of the model's own forward was compiled
        self._over: tuple[CaptureFailed, CheckContext] | None = None  # recompiles over budget so far
        self._started = 0.0  # when the session's first call began (monotonic)
        self._first_seconds = 0.0  # what compiling it on the first call took: a fix's compile costs about as much
        self._marks: DimMarks | None = None  # the dimensions dynamic= asked for, marked on each call
        self._contexts: list[CheckContext] = []  # each call's, for the sizes tried after the last

    def code_fix(self, category: Category) -> str | None:
        return verdict.COMPILE_FIXES.get(category) or super().code_fix(category)

    def capture_key(self, context: CheckContext) -> str:
        return self.name  # one compiled model for every call: Dynamo's guards pick its code

    def serves(self, captured: CompileCaptured, context: CheckContext) -> bool:
        return False  # each call is run through the compiled model by capture

    # -- capture and run ------------------------------------------------------------------------

    def capture(self, context: CheckContext) -> CompileCaptured:
        call, options = context.call, context.options
        if self._session is None or self._session.model is not call.module:
            self._marks = self._dim_marks(context)
            self._session = self._new_session(call.module, options)
            self._tally, self._calls, self._contexts, self._over = Tally(call.module), [], [], None
        self._calls.append(call)
        self._contexts.append(context)
        started = monotonic()
        try:
            replay, events = self._run(call, options)
        except Exception as exc:  # the compiled model raised where eager did not
            raise CaptureFailed(exc, functools.partial(_compile_error, exc)) from exc
        finally:
            if call.state is not None:
                call.state.restore()  # forward's attribute writes, before a guard's value is read
            if len(self._calls) == 1:
                self._started, self._first_seconds = started, monotonic() - started
        session, tally = self._session, self._tally
        assert tally is not None
        tally.add(events, call)
        finding = self._judge(session, tally, events.compiles, context)
        if finding is not None:
            raise CaptureFailed(BudgetExceeded(finding.reason), lambda: finding)
        # recompiles are judged over every call (failed_over_calls): a later call may recompile too
        over = verdict.recompiles_over_budget(tally.recompiles, context.options, len(self._calls))
        self._over = None if over is None else (CaptureFailed(BudgetExceeded(over.reason), functools.partial(_same, over)), context)
        graphs = session.graph_modules
        graph = graphs[0] if graphs else _empty_graph()
        return CompileCaptured(graph, training=call.training, replay=replay)

    def _dim_marks(self, context: CheckContext) -> DimMarks | None:
        """The dimensions ``dynamic=`` asks for by name or preset, for the first call's
        inputs; one the call lacks is a usage error."""
        request, call = context.options.dynamic, context.call
        if not isinstance(request, DimRequest):
            return None
        try:
            return DimMarks(resolve(request, call.module, call.args, call.kwargs), call.module)
        except DimError as exc:
            raise OptionError(str(exc)) from None

    def _new_session(self, model: torch.nn.Module, options: TraceOptions) -> CompileSession:
        dynamic = None if self._marks is not None else options.dynamic
        return CompileSession(model, CompileOptions.of(options).compile_backend, dynamic, options.train)  # type: ignore[arg-type]  # not a DimRequest here

    def _run(self, call: CapturedCall, options: TraceOptions) -> tuple[Replay, DynamoEvents]:
        """``call`` through the compiled model, its requested dimensions marked dynamic. Where
        the code fixes (or narrows) a marked dimension, Dynamo refuses the compile: that is
        the dimension's verdict (``DimMarks.take``), and the model is compiled again without
        its mark (or within the range), the calls so far run through it again."""
        assert self._session is not None
        while True:
            try:
                return self._session.run(call, self._marks)
            except Exception as exc:
                message = constraint_violation(exc) if self._marks is not None else None
                if message is None or self._marks is None or not self._marks.take(message):
                    raise
            self._session = self._new_session(call.module, options)
            self._tally = Tally(call.module)
            for earlier in self._calls[:-1]:
                try:
                    _, events = self._session.run(earlier, self._marks)
                finally:
                    if earlier.state is not None:
                        earlier.state.restore()
                self._tally.add(events, earlier)

    def probe_dims_over_calls(self) -> tuple[DimVerdict, ...] | None:
        """Each requested dimension judged (``dims.judge_dims``) at sizes no recorded call had,
        from the latest call whose requested dimensions all have a size of 2 or more."""
        if self._marks is None or self._session is None or not self._contexts:
            return None
        marks = self._marks

        def general(context: CheckContext) -> bool:
            shapes = example_shapes(context.call.module, (context.call.args, context.call.kwargs))
            return all(shapes.get(s.input, (2,) * (s.dim + 1))[s.dim] >= 2 for s in marks.specs if s.dim < len(shapes.get(s.input, ())))

        context = next((c for c in reversed(self._contexts) if general(c)), self._contexts[-1])
        return tuple(judge_dims(marks, self._session, context))

    def _judge(
        self, session: CompileSession, tally: Tally, compiles: list[DynamoCompile], context: CheckContext
    ) -> Diagnosis | None:
        code = getattr(type(context.call.module).forward, "__code__", None)
        # torch's own forward (nn.Identity, an empty nn.Sequential) is no frame of its own:
        # Dynamo inlines it into the frame it compiles around the module's call
        own = getattr(inspect.unwrap(type(context.call.module).forward), "__code__", None)  # under a decorator
        torch_forward = own is not None and not is_user_file(own.co_filename)
        self._forward_compiled = self._forward_compiled or any(
            code is not None and c.filename == code.co_filename and c.firstlineno == code.co_firstlineno
            or torch_forward and c.failed is None
            for c in compiles
        )
        # Dynamo gave the model's forward up: a site it fell back to eager at, a frame it could
        # not compile, or forward itself never compiled (torch.compiler.disable, a skip rule)
        failed = next((c.failed for c in compiles if c.failed), None)
        eager = any(site.eager for site in tally.sites) or failed is not None or not self._forward_compiled
        quantized = verdict.quantized_modules(context.call.module) if tally.fake else []
        if not session.graph_modules and eager:
            return verdict.captured_nothing(context.call.module, tally.sites, failed, quantized)
        return verdict.breaks_over_budget(tally.sites, context.options, quantized)

    def capture_allowance(self, options: TraceOptions) -> tuple[float | None, float] | None:
        """What is left of ``timeout`` since the first call began, and what its compile took:
        another compile of the model (a patch's trial) costs about as much."""
        left = None if options.timeout is None else options.timeout - (monotonic() - self._started)
        return left, self._first_seconds

    def one_statement_can_fix(self) -> bool:
        """One break site at most: past that, one patched statement leaves the others breaking
        (torchvision's detection models break at 4 to 13)."""
        if self._tally is None:
            return True
        return len({(s.location.path, s.location.line) if s.location else None for s in self._tally.sites}) <= 1

    def failed_over_calls(self) -> tuple[CaptureFailed, CheckContext] | None:
        """Recompiles over ``max_recompiles``, counted over every recorded call."""
        return self._over

    def replay(self, captured: CompileCaptured, context: CheckContext) -> Replay:
        """The output of the call's capture (the compiled model's run on it); a second replay
        of one capture runs the compiled model again."""
        replay, captured.replay = captured.replay, None
        if replay is None:
            assert self._session is not None
            replay, _ = self._session.run(context.call)
        return replay

    def code(self, captured: CompileCaptured) -> str:
        """Every graph Dynamo captured over the calls so far, in order, then the break sites
        (what a compile snapshot holds)."""
        graphs = self._session.graph_modules if self._session is not None else [captured.graph_module]
        return verdict.snapshot_text(graphs, self._tally.sites if self._tally is not None else [])

    # -- what the report carries --------------------------------------------------------------

    def graph_breaks(self) -> tuple[GraphBreak, ...] | None:
        return tuple(self._tally.sites) if self._tally is not None else ()

    def graphed_modules(self) -> frozenset[str] | None:
        """Every module whose code ran in a graph Dynamo compiled over the calls, not only
        the first graph's (the module tree: a submodule after a break ran compiled)."""
        if self._session is None:
            return None
        return graphed_modules(self._session.model, self._session.graph_modules)

    def recompiles(self) -> tuple[Recompile, ...] | None:
        return tuple(self._tally.recompiles) if self._tally is not None else ()

    # -- explaining ---------------------------------------------------------------------------

    def explain_capture_failure(self, failure: CaptureFailed, context: CheckContext, recheck: Recheck) -> Explanation:
        """Over budget: the fixes an option or a decorator may make (``fixes.py``), each
        verified by compiling the model again with it over the calls so far; else the change
        in code for the first site or recompile."""
        diagnosis = failure.diagnosis
        tried: list[str] = []
        if isinstance(failure.error, BudgetExceeded) and self._tally is not None:
            timeout = context.options.timeout
            left = None if timeout is None else timeout - (monotonic() - self._started)
            found = fixes.search(diagnosis, self._tally, self._calls, context, fixes.Allowance(left, self._first_seconds), self._marks)
            if found.suggestion is not None and (found.passes or not diagnosis.code_fix):
                return Explanation(None, dataclasses.replace(found.suggestion, partial=not found.passes))
            if found.suggestion is None and diagnosis.category is Category.SPECIALIZATION:
                return Explanation(None, self._budget_fix(found.tried))
            if found.suggestion is not None:  # it leaves some: what the code change is for them
                rest = verdict.code_fix_after(found.rest, found.suggestion.text) or diagnosis.code_fix
                text = f"{found.suggestion.text}; for the rest, in code: {rest}"
                return Explanation(None, dataclasses.replace(found.suggestion, text=text, partial=True))
            tried = found.tried
        text = f"in code: {diagnosis.code_fix}" if diagnosis.code_fix else "none found"
        if tried:
            text = f"none found: {'; '.join(tried)}; {text}"
        return Explanation(None, Suggestion(text, False, found=bool(diagnosis.code_fix) and not tried))


    def _budget_fix(self, tried: list[str]) -> Suggestion:
        """The ``max_recompiles`` the recorded calls need, where no option removes a recompile:
        verified by the check itself, which ran each call through the compiled model and
        compared it with eager before judging the count (``failed_over_calls``)."""
        assert self._tally is not None
        needed, calls = len(self._tally.counted), len(self._calls)
        text = (
            f"allow them: max_recompiles={needed} (@pytest.mark.traceable(backend='compile', max_recompiles={needed}), "
            f"--fx-max-recompiles={needed}); each of the {calls} recorded call{'s' if calls != 1 else ''} ran through "
            "the compiled model and matched eager"
        )
        if tried:
            text += f"; tried first: {'; '.join(tried)}"
        return Suggestion(text, True, {"max_recompiles": needed})


def _same(diagnosis: Diagnosis) -> Diagnosis:
    return diagnosis


def _compile_error(exc: BaseException) -> Diagnosis:
    """torch.compile raised on a call the eager model ran: torch's graph-break type where
    the error carries one, at the user's innermost line."""
    gb_type = getattr(exc, "gb_type", None)
    location = user_location(exc)
    stack = getattr(exc, "real_stack", None)
    frame = user_frame(stack) if stack else None
    if location is None and frame is not None:
        location = Location(shown_path(frame.filename, imports=False), frame.lineno or 0, statement_in(frame.filename, frame.lineno or 0))
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return Diagnosis(
        Category.OTHER if gb_type is None else Category.UNSUPPORTED,
        f"torch.compile raised where the eager model did not: {first[:300]}",
        location,
        error=format_error(exc),
    )


def _empty_graph() -> torch.fx.GraphModule:
    """The graph of a call Dynamo captured nothing of (a forward with no tensor operation)."""
    graph = torch.fx.Graph()
    graph.output(None)
    return torch.fx.GraphModule(torch.nn.Module(), graph)
