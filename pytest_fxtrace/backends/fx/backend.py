"""The torch.fx backend: ``Tracer.trace`` (the configured tracer, through the
``make_tracer`` seam) captures, the recompiled ``GraphModule`` runs, its ``code`` is
the snapshot; localization, fix search and the divergence detectors explain failures.

Our ``Tracer``, ``symbolic_trace`` and the leaf registry (``tracer.py``) are the public
torch.fx API users extend; this module is what the check asks of them. It knows no
pytest and no checker: everything arrives as arguments (``CheckContext``, ``FxCaptured``,
``recheck``).
"""

from __future__ import annotations

import functools
import operator
import re
import warnings
from collections.abc import Mapping

import torch
import torch.fx

from pytest_fxtrace import _compat
from pytest_fxtrace.backends.base import (
    Backend,
    CaptureFailed,
    CheckContext,
    Explanation,
    MismatchExplanation,
    Recheck,
    Replay,
    Seams,
    run_grad,
)
from pytest_fxtrace.backends.fx.captured import FxCaptured
from pytest_fxtrace.backends.fx.detectors import buffers_written_while_tracing
from pytest_fxtrace.backends.fx.diagnose import (
    CODE_FIXES,
    diagnose_trace_failure,
    static_forward_failure,
    tracer_refuses,
    unsupported_by_tracer,
)
from pytest_fxtrace.backends.fx.fixes import fix_candidates, flag_arguments, search
from pytest_fxtrace.backends.fx.localize import localize
from pytest_fxtrace.backends.fx.mismatch import (
    TracerFactory,
    explain_mismatch,
    explain_replay_failure,
    is_specialization_error,
    static_finding,
)
from pytest_fxtrace.backends.fx.tracer import build_tracer, trace_module
from pytest_fxtrace.binding import BoundInputs, EagerRecord, input_signature, record_eager, static_forward
from pytest_fxtrace.options import TraceOptions
from pytest_fxtrace.state import buffer_places, lend, lent_values
from pytest_fxtrace.types import Category, Diagnosis

GUARD_WARNING = re.compile(r"Was not able to add assertion to guarantee correct input (\S+)")


class FxBackend(Backend[FxCaptured]):
    """Symbolic tracing with the configured ``torch.fx.Tracer``.

    Example::

        backend = FxBackend(Seams(hooks={"make_tracer": build_tracer}))
        captured = backend.capture(context)
        output = backend.run(captured, context)
    """

    name = "fx"
    proxies = True

    def __init__(self, seams: Seams | None = None) -> None:
        super().__init__(seams)
        self.make_tracer: TracerFactory = self.seams.hook("make_tracer") or build_tracer

    def capture(self, context: CheckContext) -> FxCaptured:
        call, bound = context.call, context.bound
        tracer = self.make_tracer(context.options)
        try:
            # Tracing runs forward's Python for real: `self.seen += 1` would write
            # into the user's buffer, so the trace gets lent copies too.
            places = call.state.places if call.state is not None else None
            with lend(call.state, places, reuse=True) as lent, warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                gm = trace_module(call.module, tracer, bound.concrete)
                written = _written(places, lent) if lent else []
            # one walk of the GraphModule: lent copies back to the user's buffers, and
            # where its buffers are, for lending to every replay without a walk
            places_in_graph = buffer_places(gm, lent) if lent else None
        except Exception as exc:
            if static_forward(call.module):
                raise CaptureFailed(exc, functools.partial(static_forward_failure, exc, call.module)) from exc
            if tracer_refuses(tracer, call.module, exc):
                raise CaptureFailed(exc, functools.partial(unsupported_by_tracer, exc, tracer, call.module)) from exc
            raise CaptureFailed(exc, functools.partial(diagnose_trace_failure, exc, tracer)) from exc
        gm.training = call.training  # only the GraphModule's own flag, not the user's modules
        return FxCaptured(
            gm,
            training=call.training,
            # torch.fx's "could not add a guard" warning is promoted into the report (specialization)
            guards=_guard_warnings(caught, bound, context.options),
            inputs=input_signature(bound),
            written=written,  # buffers the trace wrote for real: a mismatch's likely cause
            inlined=tuple(dict.fromkeys(getattr(tracer, "fx_inlined", ()))),
            buffer_places=places_in_graph,
        )

    def replay(self, captured: FxCaptured, context: CheckContext) -> Replay:
        """The GraphModule's output, and its buffers after the run: a buffer it does not
        hold (an update torch.fx ran while tracing) is not among them, as eager's is."""
        call = context.call
        places = captured.buffer_places
        if places is None and call.state is not None and call.state.originals:  # none lent to its trace
            places = captured.buffer_places = buffer_places(captured.graph_module)
        with run_grad(context.options), lend(call.state, places, reuse=True) as lent:
            output = context.bound.call(captured.graph_module)
            return Replay(output, lent_values(places or [], lent))

    def notes(self, captured: FxCaptured) -> tuple[str, ...]:
        return tuple(
            f"torch.fx.symbolic_trace refuses this model: {where} is a module created inside forward, not a "
            "registered submodule; pytest-fxtrace's tracer inlines its ops, as it holds no parameters or buffers "
            "(register it in __init__, or call torch.nn.functional, for plain torch.fx)"
            for where in captured.inlined
        )

    def still_holds(self, captured: FxCaptured, model: torch.nn.Module) -> bool:
        return _holds_what_model_holds(captured, model)

    def findings(self, captured: FxCaptured, context: CheckContext, sibling: FxCaptured | None) -> Diagnosis | None:
        other = sibling.graph_module if sibling is not None else None
        return static_finding(context, self.make_tracer, captured.graph_module, other)

    def explain_mismatch(self, captured: FxCaptured, context: CheckContext) -> MismatchExplanation:
        return MismatchExplanation(*explain_mismatch(context, self.make_tracer, captured))

    def explain_buffer(
        self, captured: FxCaptured, context: CheckContext, module: torch.nn.Module, name: str
    ) -> Diagnosis | None:
        """A buffer the trace wrote or rebound for real: the update ran once, while tracing."""
        if (module, name) not in captured.written:
            return None
        return buffers_written_while_tracing(context.call.module, [(module, name)])

    def explain_run_failure(self, captured: FxCaptured, context: CheckContext, error: BaseException) -> Diagnosis:
        category, location, module, module_type = explain_replay_failure(context, self.make_tracer, error)
        return Diagnosis(category, "", location, module, module_type)

    def code_fix(self, category: Category) -> str | None:
        return CODE_FIXES.get(category)

    def run_failure_category(self, error: BaseException) -> Category:
        return Category.SPECIALIZATION if is_specialization_error(error) else Category.OTHER

    def explain_capture_failure(self, failure: CaptureFailed, context: CheckContext, recheck: Recheck) -> Explanation:
        """Localize the failure and find a fix that is verified to work."""
        call, options = context.call, context.options
        model = call.module
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")

            def eager() -> EagerRecord:
                record = record_eager(model, call.args, call.kwargs, call.state, call.rng)
                if call.state is not None:
                    call.state.restore()
                return record

            # tracing runs forward's Python for real: it gets lent buffers, as the check's own trace
            with lend(call.state, model):
                collection = localize(model, options, self.make_tracer, context.bound.concrete, eager)
            candidates, skipped = fix_candidates(model, collection, options, flag_arguments(model, call.args, call.kwargs))
            suggestion = search(candidates, skipped, recheck, options)
        return Explanation(collection, suggestion)


def _holds_what_model_holds(captured: FxCaptured, model: torch.nn.Module) -> bool:
    """Whether every submodule the GraphModule calls and tensor it reads is still the
    object ``model`` holds at that path. The GraphModule took them from the model at
    its trace; a test may rebind them (``model.head = nn.Linear(...)``) between calls."""
    targets = captured.targets
    if targets is None:  # the GraphModule's side, once (it is ours: it does not change)
        gm = captured.graph_module
        targets = captured.targets = [
            (node.target, operator.attrgetter(node.target)(gm))
            for node in gm.graph.nodes
            if node.op in ("call_module", "get_attr")
        ]
    for target, held in targets:
        try:
            if operator.attrgetter(target)(model) is not held:
                return False
        except AttributeError:
            if "." in target:  # a path the model no longer has
                return False
            # a top-level name only the GraphModule has: a constant made by the trace
    return True


def _guard_warnings(
    caught: list[warnings.WarningMessage], bound: BoundInputs, options: TraceOptions
) -> tuple[str, ...]:
    """Arguments torch.fx specialized without a guard (other warnings are passed on).

    Arguments we made concrete ourselves are part of the graph's key -- a call with
    another value gets its own graph -- so only the user's own concrete_args count.
    """
    names = []
    for warning in caught:
        match = GUARD_WARNING.search(str(warning.message))
        if match:
            names.append(match.group(1))
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    return tuple(n for n in names if n in (options.concrete_args or {}))


def _written(places: list[tuple[torch.nn.Module, str]] | None, lent: Mapping[int, torch.Tensor]) -> list[tuple[torch.nn.Module, str]]:
    """``(module, name)`` of the buffers lent to a trace that it wrote in place or rebound.
    torch.fx records an in-place op on a Proxy without running it, so a write that reached
    the lent copy (its count of in-place writes moved off 0) was run once, not recorded;
    and a buffer can only be rebound to a real tensor (``self.n = self.n + 1``: a Proxy
    is refused), computed once while tracing, which the GraphModule never holds."""
    written = []
    for module, name in places or ():
        copy = _compat.buffers_of(module).get(name)
        if copy is None:
            continue
        if id(copy) not in lent:  # every place was lent a copy: this one was rebound
            written.append((module, name))
            continue
        try:
            if _compat.write_count(copy):
                written.append((module, name))
        except RuntimeError:  # an inference tensor keeps no count
            pass
    return written




