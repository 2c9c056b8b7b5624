"""One model's check: capture -> run -> compare -> TraceReport, through a backend.

``ModelChecker`` holds what one model's check has learned across its recorded
calls (the captured graphs, the verdict so far). ``entry.py`` feeds it: the zero-code
marker the test's own calls (``TestChecks``), ``check_traceable`` one call it makes itself.

Talks to the capture backend through its interface only (``backends.base``); knows
nothing of how a graph is captured or explained, nor of pytest.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import io
import time
import weakref
from collections.abc import Callable, Hashable, Iterator
from traceback import walk_tb
from typing import TYPE_CHECKING, TypeVar

import torch
import torch.fx

from pytest_fxtrace import _compat, training
from pytest_fxtrace.backends import build_backend
from pytest_fxtrace.backends.base import (
    Backend,
    Captured,
    CaptureFailed,
    CheckContext,
    Recheck,
    Seams,
    run_grad,
)
from pytest_fxtrace.backends.spec import DEFAULT_BACKEND
from pytest_fxtrace.binding import bind_call
from pytest_fxtrace.capture import (
    CallObserver,
    CapturedCall,
    InputsBefore,
    InputWatch,
    autocast_mode,
    grad_mode,
    suspended,
)
from pytest_fxtrace.collection import module_tree
from pytest_fxtrace.compare import Difference
from pytest_fxtrace.diagnose import format_error
from pytest_fxtrace.dims import DimVerdict, dim_code_fix, dims_failure
from pytest_fxtrace.gcpause import collection_paused
from pytest_fxtrace.inputs import device_mismatch
from pytest_fxtrace.locate import user_location
from pytest_fxtrace.options import OptionError, TraceOptions
from pytest_fxtrace.patches import PatchTrial, find_patch
from pytest_fxtrace.rng import RngState
from pytest_fxtrace.state import ModelState, lend, lent_values
from pytest_fxtrace.statediff import buffer_differences, buffer_finding, parameter_differences
from pytest_fxtrace.timelimit import CheckTimeout, time_limit
from pytest_fxtrace.tracereport import TraceReport, dotted_class, internal_error_report, model_error_report
from pytest_fxtrace.training import (
    GradientDifference,
    Gradients,
    LossFailed,
    backward,
    grad_inputs,
    gradient_differences,
)
from pytest_fxtrace.types import (
    Category,
    Diagnosis,
    Location,
    Status,
    model_label,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is 3.11+; the package supports 3.10

    from pytest_fxtrace.tracereport import ReportFields, ReportFindings


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """A patch's trial prints nothing: the model's own prints (run again on copies) and torch's
    (a GraphModule that raises writes its generated line to stderr) are a candidate's, not the
    user's."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


def _sharing_parameters(model: torch.nn.Module) -> torch.nn.Module:
    """A deep copy of ``model`` that holds the very same parameters (its buffers, attributes
    and modules its own): a patch's trial makes three, and three copies of a 300-million-
    parameter ViT took timm's zoo run past 8 GB (6 models). A parameter a forward writes is
    put back by the call's state, as the check's own replays on the user's parameters are."""
    return copy.deepcopy(model, memo={id(p): p for p in model.parameters()})


class ModelChecker(CallObserver):
    """The check of one model: capture once per distinct call kind, replay each call.

    ``backend`` captures and explains (``backends.base.Backend``, built by the caller
    with the ``Seams`` it lends: the plugin's hooks, a dump folder, module trees).

    Example::

        checker = ModelChecker(model, options, build_backend(DEFAULT_BACKEND, Seams()))
        ...feed CapturedCall objects to checker.observe...
        report = checker.finish()
    """

    def __init__(
        self,
        model: torch.nn.Module,
        options: TraceOptions,
        backend: Backend,
        diagnose: bool = True,
        keep_mode: bool = False,
    ) -> None:
        self.model = model
        # train mode with each module's training flag as the call had it (a test that ran
        # backward on a recorded output: ``_judge_backward``), not model.train()'s
        self.keep_mode = keep_mode
        self.options = options
        self.backend = backend
        self.words = backend.words(options)
        compare = backend.seams.comparator()
        # the backend's tolerances where the user sets none, in every comparison of its runs
        self.compare = functools.partial(compare, defaults=backend.tolerances) if backend.tolerances else compare
        self.diagnose = diagnose  # localize and verify fixes on failure (off inside a verification)
        self.dump_dir = backend.seams.dump_dir  # where to write a mismatching graph
        self.module_tree = backend.seams.module_tree  # give the report its per-module statuses
        # the verdict so far, field by field; finish() builds the TraceReport from it, once
        name = options.backend[0] if len(options.backend) == 1 else backend.name
        start = TraceReport(ok=True, status=Status.PASSED, model=dotted_class(model), options=options, backend=name)
        self._found = start  # frozen: each step replaces it (_note, _fail)
        self._model_name = start.model_name
        self._final: TraceReport | None = None  # set when pytest-fxtrace itself failed
        self._captured: dict[tuple[bool, Hashable], Captured] = {}
        self._probed: set[int] = set()  # the captures whose requested dimensions were judged
        # the calls whose output the test may run backward on, each with what tells it did
        self._backward: list[tuple[CapturedCall, _BackwardSeen]] = []
        self._call_started = 0.0  # when the check of the current call began (perf_counter)

    @property
    def wants_more(self) -> bool:
        return self._final is None and self._found.ok and self._found.calls < self.options.max_replays

    def observe(self, call: CapturedCall) -> None:
        """Judge one recorded call; the model and RNG are left as the eager call left them."""
        # the caller's: the call's own, or the zoo's no_grad; train mode runs every call with grad
        self._note_grad_mode("grad" if self.options.train else grad_mode())
        autocast = autocast_mode()  # the call's autocast region, if any: captured and replayed in it
        if autocast is not None and autocast not in (self._found.autocast or "").split("; "):
            self._note(autocast="; ".join(filter(None, [self._found.autocast, autocast])))
        if not self.options.train and len(self._backward) < self.options.max_replays:
            seen = _BackwardSeen.watch(call.output)  # checked forward and backward at the end, if it runs
            if seen is not None and call.state is not None:
                self._backward.append((dataclasses.replace(call, output=None), seen))
        self._call_started = time.perf_counter()
        with collection_paused():  # our allocations, not the user's forward
            # the same dicts as the state before the call (no walk, no buffer values)
            after = call.state.snapshot() if call.state is not None else ModelState.capture(call.module, values=False)
            flags_after = call.state.grad_flags_now() if self.options.train and call.state is not None else []
            rng_after = RngState.capture()
            try:
                with suspended(), time_limit(self.options.timeout):
                    self._check_call(call)
            except CheckTimeout as exc:
                self._timed_out(exc)
            except OptionError:
                raise  # a usage error: reported as such by the caller
            except Exception as exc:  # the model's faults are statuses by now: this one is ours
                self.internal_error(exc)
            finally:
                after.restore()
                if call.parameters_after and call.state is not None:  # as eager left them (the test goes on)
                    call.state.put_parameters(call.parameters_after)
                ModelState.put_grad_flags(flags_after)  # a forward that sets requires_grad, run again
                rng_after.restore()

    def _check_call(self, call: CapturedCall) -> None:
        call = call.fresh()  # inputs as before the call, where its forward wrote into one
        step: Gradients | None = None
        if self.options.train:  # eager forward and backward in train mode: the reference
            trained = self._train_step(call)
            if trained is None:
                return
            call, step = trained
        bound = bind_call(call.module, call.args, call.kwargs, self.options.concrete_args)
        recheck = self._recheck(call) if self.diagnose else None
        context = CheckContext(call, bound, self.options, self.compare, self.dump_dir, recheck)
        key = (call.training, self.backend.capture_key(context))
        captured = self._captured.get(key)
        if captured is not None and not (
            self.backend.still_holds(captured, call.module) and self.backend.serves(captured, context)
        ):
            # the test rebound a tensor or submodule since the capture, or the capture cannot
            # take this call (an exported program fixed other sizes): capture again
            captured = None
        if captured is None:
            if call.state is not None:
                call.state.restore()
                ModelState.put_grad_flags(call.state.grad_flags)
            with run_grad(self.options) if self.options.train else contextlib.nullcontext():
                captured = self._capture(context)
            if captured is None:
                return
            self._captured[key] = captured
        if call.state is not None:
            call.state.restore()
            ModelState.put_grad_flags(call.state.grad_flags)
        call.rng.restore()
        start = time.perf_counter()
        own = self._own_inputs(context)
        try:
            replay = self.backend.replay(captured, own)
        except Exception as exc:  # the traced module fails where eager did not
            self._replay_failed(exc, context, captured)
            return
        finally:
            self._note(replay_seconds=self._found.replay_seconds + time.perf_counter() - start)
        self._note(calls=self._found.calls + 1)
        lost = parameter_differences(call, replay.parameters, self.compare, self.options, self.words.graph)  # a parameter write the graph drops explains its output too
        difference = None if lost else self.compare(
            replay.output, call.output, rtol=self.options.rtol, atol=self.options.atol
        )
        if difference is not None:
            self._mismatch(context, captured, difference)
            return
        differing = lost + buffer_differences(call, replay.buffers, self.compare, self.options, self.words.graph)
        if differing:
            self._buffer_mismatch(context, captured, differing)
            return
        if step is not None:  # train mode: the program's backward against eager's
            gradients = self._program_gradients(replay.output, own)
            if gradients is None:
                return
            found = gradient_differences(step, gradients, self.compare, self.options.rtol, self.options.atol)
            if found:
                self._gradient_mismatch(context, found)
                return
        saved = self.backend.artifact_failure(captured, context)  # artifact=: its saved forms too
        if saved is not None:
            status, diagnosis = saved
            self._fail(
                status,
                diagnosis.category,
                f"{self._model_name} {self.words.past}, but {diagnosis.reason}{_where(diagnosis.location)}",
                location=diagnosis.location,
                error=diagnosis.error or None,
                code_fix=diagnosis.code_fix,
            )
            return
        if id(captured) not in self._probed:  # the dimensions dynamic= asked for, at new sizes
            self._probed.add(id(captured))
            self._judge_dims(self.backend.probe_dims(captured, context), context.call)

    def _judge_dims(self, verdicts: tuple[DimVerdict, ...] | None, call: CapturedCall | None = None) -> None:
        """The requested dimensions' verdicts on the report (one line each in its message); a
        ``specialized`` or ``unsound`` one fails the check: the user asked for it dynamic. A
        rewrite of the statement that pinned it, verified on ``call``, is its fix."""
        if not verdicts:
            return
        self._note(dims=(*(self._found.dims or ()), *verdicts))
        failed = dims_failure(verdicts)
        if failed is not None:
            what, first = failed
            if self.diagnose and call is not None and first.location is not None and self._room_for_a_trial():
                pinned = Diagnosis(Category.SPECIALIZATION, what, location=first.location)
                patched = find_patch(call.module, pinned, self._patch_trial(call), self.backend.proxies)
                if patched is not None:
                    self._note(suggestion=patched)
            self._fail(
                Status.MISMATCH,
                Category.SPECIALIZATION,
                f"{self._model_name} {self.words.past}, but {what}",
                location=first.location,
                code_fix=dim_code_fix(first),
            )

    def _train_step(self, call: CapturedCall) -> tuple[CapturedCall, Gradients] | None:
        """``call`` as a train-mode check judges it: the model in training mode (as recorded
        where it was, else as ``model.train()`` leaves it), its inputs that require grad
        detached into leaves of their own, and eager's own forward and backward on it, from
        the state, ``requires_grad`` flags and RNG before the call (buffers lent): its output,
        buffer updates and gradients are the reference. None: eager itself raised (the
        report says so)."""
        if not self.backend.trains:
            raise OptionError(
                f"train=True: the {self.backend.name} backend runs no backward; check train mode with "
                "backend='fx', 'export' or 'compile'"
            )
        state = call.state if self.keep_mode or call.state is None else call.state.in_training()
        if state is None:
            raise OptionError("train=True needs the model's state before each call (a recorded call without one)")
        args, kwargs, inputs = grad_inputs(call.module, call.args, call.kwargs)
        call = dataclasses.replace(call, args=args, kwargs=kwargs, state=state, training=call.training or not self.keep_mode)
        state.restore()
        ModelState.put_grad_flags(state.grad_flags)
        call.rng.restore()
        try:
            with lend(state, state.places) as lent:
                with torch.enable_grad():
                    output, raised = _run_model(lambda: call.module(*args, **kwargs))
                # every buffer as eager leaves it, compared by value: batch norm's kernel updates its
                # running statistics without moving their count of writes (torch 2.14)
                buffers = lent_values(state.places, lent)
            parameters = state.parameter_changes() if state.parameters else {}
            if raised is None:
                parameters_now = dict(call.module.named_parameters())
                gradients, raised = _run_model(lambda: backward(output, parameters_now, inputs, self.options.loss_fn))
        except LossFailed as exc:
            raise OptionError(f"train=True: {exc}") from None
        finally:
            state.restore()
        if raised is not None:  # the model's own: eager raises in train mode where the test's call did not
            hint = "in train mode (train=True: the model in train(), forward and backward with grad)"
            self._final = dataclasses.replace(model_error_report(call.module, raised, self.options, hint), train=True)
            return None
        assert gradients is not None
        output = _compat.tree_map(lambda t: t.detach() if isinstance(t, torch.Tensor) else t, output)
        return dataclasses.replace(call, output=output, buffers_after=buffers, parameters_after=parameters), gradients

    def _program_gradients(self, output: object, context: CheckContext) -> Gradients | None:
        """The captured program's gradients on ``context``'s call (the replay's output)."""
        call = context.call
        _, _, inputs = grad_inputs(call.module, call.args, call.kwargs, detach=False)  # the run's own leaves
        return backward(output, dict(call.module.named_parameters()), inputs, self.options.loss_fn)

    def _gradient_mismatch(self, context: CheckContext, found: list[GradientDifference]) -> None:
        """The outputs and buffers agreed, but a backward through the capture gives other
        gradients: the first named with its cause and statement, the others listed."""
        first, others = found[0], found[1:]
        diagnosis = training.explain(context.call.module, first, self.words.graph)
        also = f"; {len(others)} more differ ({', '.join(o.name for o in others[:4])}{', ...' if len(others) > 4 else ''})" if others else ""
        self._fail(
            Status.MISMATCH,
            diagnosis.category,
            f"{self._model_name} {self.words.past} and its output matched eager, but in train mode on recorded call "
            f"{self._found.calls}: {diagnosis.reason}{_where(diagnosis.location)}{also}",
            difference=first.difference,
            location=diagnosis.location,
            module=diagnosis.module,
            module_type=diagnosis.module_type,
            code_fix=diagnosis.code_fix,
        )

    def _own_inputs(self, context: CheckContext) -> CheckContext:
        """``context`` with copies of the call's inputs where its forward writes into an
        input: the replay writes into its own, and a diagnosis after it starts from the
        inputs eager started from."""
        if context.call.inputs_before is None:  # (train mode: the inputs are the check's own leaves already)
            return context
        call = context.call.fresh()
        bound = bind_call(call.module, call.args, call.kwargs, self.options.concrete_args)
        return dataclasses.replace(context, call=call, bound=bound)

    def _recheck(self, call: CapturedCall) -> Recheck:
        """The check of ``call`` again with other options, nothing explained: how the
        backend verifies a fix. (passed, what happened). It holds the backend weakly: a
        backend keeps the contexts it was given (compile, for the sizes tried after the last
        call), and a cycle through them would keep each checked model, and Dynamo's cache
        entries on its forward, alive past its check while collection is paused."""
        backend_ref = weakref.ref(self.backend)

        def recheck(options: TraceOptions) -> tuple[bool, str]:
            backend = backend_ref()
            if backend is None:
                return False, "the check is over"
            trial = ModelChecker(call.module, options, backend, diagnose=False)
            try:
                trial._check_call(call)
            except Exception as exc:  # a fix that breaks differently is just not verified
                return False, f"{type(exc).__name__}: {exc}"
            report = trial.finish()
            if report.ok and report.calls:
                return True, "traced and matched eager"
            first = report.message.splitlines()[0] if report.message else report.status
            return False, f"{report.status}: {first}"

        return recheck

    def _room_for_a_trial(self) -> bool:
        """Whether a patch's trial (one more capture of the model) fits in what is left of
        ``timeout``, by the backend's clock where it keeps one (a fix search it declined for
        time is not run by another door), else by this call's so far."""
        allowance = self.backend.capture_allowance(self.options)
        if allowance is None:
            timeout = self.options.timeout
            left = None if timeout is None else timeout - (time.perf_counter() - self._call_started)
            allowance = (left, self._found.trace_seconds)
        left, needed = allowance
        return left is None or needed < left

    def _patch_trial(self, call: CapturedCall) -> PatchTrial:
        """How a patch is verified on ``call``: copies of the model as it was before the call,
        one patched; both run eagerly from the call's RNG state, their outputs and buffers must
        agree; then the same check (backend, options), unexplained, must pass on a third copy.
        The user's model, buffers and RNG are untouched (the caller puts the RNG back)."""
        options = self.options.replace(backend=(self.backend.name,))
        seams = self.backend.seams

        def trial(patch: Callable[[torch.nn.Module], torch.nn.Module], check: bool) -> tuple[bool, str]:
            try:
                if call.state is not None:
                    call.state.restore()
                with lend(call.state, call.module):  # the buffers as before the call
                    original = _sharing_parameters(call.module)
                patched = patch(_sharing_parameters(original))
                probe = _sharing_parameters(patched)
                args, kwargs = call.args, call.kwargs
                inputs = InputsBefore(args, kwargs)  # each run on copies: a forward may write its input
                with torch.no_grad(), _quiet():  # its prints, twice more
                    call.rng.restore()
                    expected = original(*inputs.copies()[0], **inputs.copies()[1])
                    call.rng.restore()
                    actual = patched(*inputs.copies()[0], **inputs.copies()[1])
            except Exception as exc:  # a copy torch cannot make, a patched forward that raises
                return False, f"{type(exc).__name__}: {exc}"
            finally:
                if call.state is not None:
                    call.state.restore()
            if self.compare(actual, expected, rtol=options.rtol, atol=options.atol) is not None:
                return False, "the patched eager model answers otherwise"
            if self.compare(dict(patched.state_dict()), dict(original.state_dict()), rtol=0.0, atol=0.0) is not None:
                return False, "the patched eager model leaves its buffers otherwise"
            if not check:
                return True, "eager answered as before"
            call.rng.restore()
            with _quiet():  # and torch.fx's own print of a candidate's graph that raised
                (report,) = run_and_check(probe, args, kwargs, options, seams, diagnose=False)
            return report.ok, report.message.partition("\n")[0]

        return trial

    def _mismatch(self, context: CheckContext, captured: Captured, difference: Difference) -> None:
        finding = divergence = dump = None
        if self.diagnose:
            explained = self.backend.explain_mismatch(captured, context)
            finding, divergence, dump = explained.diagnosis, explained.divergence, explained.dump_path
        what = f"differs from eager on recorded call {self._found.calls}"
        words = self.words
        if finding is not None:
            where = _where(finding.location)
            message = f"{self._model_name} {words.past}, but {words.graph}'s output {what}: {finding.reason}{where}"
        else:
            message = f"{self._model_name} {words.past}, but {words.graph}'s output {what}: {difference.message}"
        self._fail(
            Status.MISMATCH,
            finding.category if finding is not None else Category.NUMERIC,
            message,
            difference=difference,
            divergence=divergence,
            dump_path=dump,
            location=finding.location if finding is not None else (divergence.location if divergence else None),
            module=(finding.module if finding is not None else divergence.module if divergence else ""),
            module_type=(
                finding.module_type if finding is not None else divergence.module_type if divergence else None
            ),
            code_fix=finding.code_fix if finding is not None else None,
        )
        if finding is not None and finding.fix is not None:
            self._note(suggestion=finding.fix)

    def _buffer_mismatch(
        self, context: CheckContext, captured: Captured, differing: list[tuple[torch.nn.Module, str, Difference]]
    ) -> None:
        """The output agreed, but the graph's run leaves buffers otherwise than eager: an
        update it loses (``self.calls += 1`` run once while capturing) shows on later calls
        only, or never in an output, so each buffer and its statement are named now (the
        first one's cause in full, then the others')."""
        paths = {m: p for p, m in context.call.module.named_modules()}
        explain = self.backend.explain_buffer if self.diagnose else None
        named = [buffer_finding(explain, self.words.graph, captured, context, paths, *found) for found in differing]
        (who, difference, finding), others = named[0], named[1:]
        what = f"{self.words.graph}'s {who} differs from eager after recorded call {self._found.calls}"
        also = "".join(
            f"; {self.words.graph} also loses the update of the {other}{_where(found.location)}"
            for other, _, found in others
        )
        self._fail(
            Status.MISMATCH,
            finding.category,
            f"{self._model_name} {self.words.past}, but {what}: {finding.reason}{_where(finding.location)}{also}",
            difference=difference,
            location=finding.location,
            module=finding.module,
            module_type=finding.module_type,
        )

    def _capture(self, context: CheckContext) -> Captured | None:
        start = time.perf_counter()
        try:
            captured = self.backend.capture(context)
        except CaptureFailed as failure:
            self._note(trace_seconds=self._found.trace_seconds + time.perf_counter() - start)
            self._untraceable(failure, context)
            return None
        self._note(trace_seconds=self._found.trace_seconds + time.perf_counter() - start)
        code = self.backend.code(captured)
        finding = None
        if self.diagnose:
            call, key = context.call, self.backend.capture_key(context)
            sibling = next(
                (c for (training, k), c in self._captured.items() if k == key and training != call.training), None
            )
            finding = self.backend.findings(captured, context, sibling)
        if finding is not None:
            self._fail(
                Status.MISMATCH,
                finding.category,
                f"{self._model_name} {self.words.past}, but {finding.reason}{_where(finding.location)}",
                location=finding.location,
                module=finding.module,
                module_type=finding.module_type,
                graph_module=captured.graph_module,
                code=code,
                nodes=captured.nodes,
                error=finding.error or None,
                code_fix=finding.code_fix,
            )
            if finding.fix is not None:
                self._note(suggestion=finding.fix)
            return None
        notes = tuple(dict.fromkeys((*self._found.notes, *self.backend.notes(captured))))
        self._note(graph_module=captured.graph_module, code=code, nodes=captured.nodes, coverage=1.0, notes=notes)
        return captured

    def _untraceable(self, failure: CaptureFailed, context: CheckContext) -> None:
        diagnosis = failure.diagnosis
        self._note(
            module=diagnosis.module,
            module_type=diagnosis.module_type,
            location=diagnosis.location,
            last_node=diagnosis.last_node,
        )
        if self.diagnose:
            assert context.recheck is not None
            explained = self.backend.explain_capture_failure(failure, context, context.recheck)
            collection = explained.collection
            coverage = collection.coverage if collection is not None else None
            suggestion = explained.suggestion
            if self.backend.one_statement_can_fix() and self._room_for_a_trial():  # a rewrite of the statement, verified: beside an option fix, or in its place
                patched = find_patch(context.call.module, diagnosis, self._patch_trial(context.call), self.backend.proxies)
                suggestion = suggestion.with_patch(patched)
            self._note(localization=collection, coverage=coverage, suggestion=suggestion)
        label = model_label(self._model_name, self._found.module, self._found.module_type)
        where = ""
        if diagnosis.location is not None:
            where = f" `{diagnosis.location.source}` at {diagnosis.location}"
        self._fail(
            Status.UNTRACEABLE,
            diagnosis.category,
            f"{label} is not {self.words.able}:{where} {diagnosis.reason}",
            error=diagnosis.error,
            code_fix=diagnosis.code_fix,
            operator=diagnosis.operator,
        )

    def _replay_failed(self, exc: Exception, context: CheckContext, captured: Captured) -> None:
        if self.diagnose and id(captured) not in self._probed:  # a requested dimension's size refused:
            self._probed.add(id(captured))  # the dimensions' verdicts say which, and where
            self._judge_dims(self.backend.probe_dims(captured, context), context.call)
            if not self._found.ok:
                return
        category = self.backend.run_failure_category(exc)
        self._note(location=user_location(exc))
        reason = ""
        if self.diagnose:
            diagnosis = self.backend.explain_run_failure(captured, context, exc)
            category = diagnosis.category
            self._note(
                location=diagnosis.location or self._found.location,
                module=diagnosis.module,
                module_type=diagnosis.module_type,
                code_fix=diagnosis.code_fix,
            )
            if diagnosis.fix is not None:
                self._note(suggestion=diagnosis.fix)
            reason = f": {diagnosis.reason}{_where(diagnosis.location)}" if diagnosis.reason else ""
        self._fail(
            Status.MISMATCH,
            category,
            f"{self._model_name} {self.words.past}, but {self.words.graph} raised on recorded call "
            f"{self._found.calls + 1} where the eager model did not{reason}",
            error=format_error(exc),
        )

    def _judge_backward(self) -> None:
        """The test ran backward on a recorded output: those calls checked in train mode too,
        each module's training flag as the call had it, with the parameters as the test left
        them (an optimizer may have stepped since); a failure there is the verdict."""
        calls = [call for call, seen in self._backward if seen.ran]
        self._backward = []
        if not calls:
            return
        trial = ModelChecker(
            self.model, self.options.replace(train=True), build_backend(self.backend.name, self.backend.seams),
            self.diagnose, keep_mode=True,
        )
        for call in calls:
            if not trial.wants_more:
                break
            state = call.state
            assert state is not None
            # as the test left them, put back when the check of the call ends
            now = {key: parameter.detach().clone() for key, (parameter, _) in state.parameters.items()}
            trial.observe(dataclasses.replace(call, parameters_after=now))
        report = trial.finish()
        why = "the test ran backward on a recorded output, so its calls were checked forward and backward too"
        if not report.ok:
            self._final = dataclasses.replace(report, message=f"{report.message}\n  note: {why}")
            return
        self._note(train=True, notes=(*self._found.notes, why))

    def _judge_over_calls(self) -> None:
        """What the backend judges over every call: a failure (``failed_over_calls``),
        explained as one at a call is; then, still passing, the requested dimensions
        (``probe_dims_over_calls``)."""
        late = self.backend.failed_over_calls()
        if late is not None:
            failure, context = late
            self._as_test_left(context.call.state, lambda: self._untraceable(failure, context))
        if self._found.ok and self._final is None:
            self._as_test_left(None, lambda: self._judge_dims(self.backend.probe_dims_over_calls()))

    def _as_test_left(self, state: ModelState | None, step: Callable[[], None]) -> None:
        """``step`` under the check's timeout; the model, its parameters and RNG left as the
        test left them."""
        after = state.snapshot() if state is not None else ModelState.capture(self.model, values=False)
        parameters = {key: p.detach().clone() for key, (p, _) in state.parameters.items()} if state is not None else {}
        rng_after = RngState.capture()
        try:
            with suspended(), time_limit(self.options.timeout):
                step()
        except CheckTimeout as exc:
            self._timed_out(exc)
        except Exception as exc:  # explaining is ours: the model's faults are statuses by now
            self.internal_error(exc)
        finally:
            after.restore()
            if parameters and state is not None:
                state.put_parameters(parameters)
            rng_after.restore()

    def _timed_out(self, exc: CheckTimeout) -> None:
        tracing = any(frame.f_code is ModelChecker._capture.__code__ for frame, _ in walk_tb(exc.__traceback__))
        location = None if exc.deferred else user_location(exc)
        where = f", interrupted at {location}: {location.source}" if location else ""
        # deferred: the limit ran out in clean-up and was raised after it, so where it was
        # raised says nothing about which step took the time
        step = "the check" if exc.deferred else self.words.doing if tracing else self.words.running
        self._fail(
            Status.TIMEOUT,
            None,
            f"{self._model_name}: {step} did not "
            f"finish within timeout={exc.seconds:g} s{where}; raise the limit (timeout=, --fx-timeout, "
            "ini fxtrace_timeout) or make the model a leaf",
            location=location,
        )

    def internal_error(self, exc: BaseException) -> None:
        """pytest-fxtrace itself raised while checking this model: the verdict says so."""
        self._final = internal_error_report(self.model, exc, self.options)

    def _note(self, **fields: Unpack[ReportFields]) -> None:
        """What the check found so far, field by field (the verdict is a frozen TraceReport)."""
        self._found = dataclasses.replace(self._found, **fields)

    def _note_grad_mode(self, mode: str) -> None:
        seen = self._found.grad_mode.split(", ") if self._found.grad_mode else []
        if mode not in seen:
            self._note(grad_mode=", ".join([*seen, mode]))

    def _fail(self, status: Status, category: Category | None, message: str, **fields: Unpack[ReportFindings]) -> None:
        self._note(ok=False, status=status, category=category, message=message, **fields)

    def finish(self) -> TraceReport:
        """The report, built once; a passing one says how many calls agreed."""
        if self._final is None and self._found.ok:
            self._judge_over_calls()
        if self._final is None and self._found.ok:
            self._judge_backward()
        if self._final is not None:
            return self._final
        found = dataclasses.replace(
            self._found, graph_breaks=self.backend.graph_breaks(), recompiles=self.backend.recompiles()
        )
        if not found.ok and found.code_fix is None and found.category is not None:
            found = dataclasses.replace(found, code_fix=self.backend.code_fix(found.category))
        if self.options.train:
            found = dataclasses.replace(found, train=True)
        if found.ok:
            calls = "call" if found.calls == 1 else "calls"
            how = " forward and backward (train mode)" if found.train else ""
            message = (
                f"{self._model_name} {self.words.past} ({found.nodes} nodes) and matched eager{how} on "
                f"{found.calls} recorded {calls}"
            )
            found = dataclasses.replace(found, message=message)
        if found.notes:
            found = dataclasses.replace(found, message="\n".join([found.message, *(f"  note: {n}" for n in found.notes)]))
        if self.module_tree:
            # where a traced model went wrong (an untraceable one's failures are localization's)
            failing = None if found.ok or found.localization is not None else (
                found.module, found.category, found.location
            )  # fmt: skip
            try:
                graphed = self.backend.graphed_modules()
                modules = module_tree(self.model, found.localization, found.graph_module, failing, graphed)
            except Exception as exc:  # our own walk of the model: pytest-fxtrace's bug, not the model's
                return internal_error_report(self.model, exc, self.options)
            found = dataclasses.replace(found, modules=modules)
        return found


def run_and_check(
    model: torch.nn.Module,
    args: tuple[object, ...],
    kwargs: dict[str, object],
    options: TraceOptions,
    seams: Seams | None = None,
    diagnose: bool = True,
) -> list[TraceReport]:
    """Run ``model(*args, **kwargs)`` eagerly once (under ``no_grad``, on copies of the
    inputs, buffers lent) and check that call with each backend the options name; the model
    and RNG are as before afterwards (``entry.check_model_backends``, and a patch's trial)."""
    before = ModelState.capture(model)
    rng_before = RngState.capture()
    # eager runs on copies: a forward that writes into its input (x += 1) leaves the caller's as they were
    inputs = InputsBefore(args, kwargs)
    run_args, run_kwargs = inputs.copies()
    watch = InputWatch(run_args, run_kwargs)
    try:
        with suspended(), torch.no_grad(), before.lent_buffers(model) as lent:
            try:
                output = model(*run_args, **run_kwargs)
            except Exception as exc:
                report = model_error_report(model, exc, options, hint=device_mismatch(model, args, kwargs))
                return [dataclasses.replace(report, backend=name) for name in options.backend]
            after = before.buffer_changes(lent)  # the eager run's buffers, before they go back
        written = inputs if watch.written() is not None else None
        params = before.parameter_changes() if before.parameters else {}
        call = CapturedCall(model, args, kwargs, output, before, rng_before, model.training, after, written, params)
        reports = []
        for checker in model_checkers(model, options, seams or Seams(), diagnose):
            checker.observe(call)
            reports.append(checker.finish())
        return reports
    finally:
        before.restore()
        rng_before.restore()


def model_checkers(model: torch.nn.Module, options: TraceOptions, seams: Seams, diagnose: bool = True) -> list[ModelChecker]:
    """One checker per backend the options name, in order, each built with ``seams``:
    the one place a check fans out over backends (the marker, the fixture,
    ``check_traceable``, zoo items and the isolated child all come through here).

    Example::

        fx, export = model_checkers(model, options.replace(backend=("fx", "export")), Seams())
    """
    return [
        ModelChecker(model, options.replace(backend=(name,)), build_backend(name, seams), diagnose)
        for name in options.backend or (DEFAULT_BACKEND,)
    ]


class _BackwardSeen:
    """Whether autograd ran backward through a recorded output: a hook on its ``grad_fn``
    (it returns nothing, so no gradient changes), holding only this flag."""

    def __init__(self) -> None:
        self.ran = False

    @classmethod
    def watch(cls, output: object) -> _BackwardSeen | None:
        """A watch on each of ``output``'s tensors with a ``grad_fn``; None: no backward can run."""
        nodes = {
            id(leaf.grad_fn): leaf.grad_fn
            for leaf in _compat.tree_leaves(output)
            if isinstance(leaf, torch.Tensor) and leaf.grad_fn is not None
        }
        if not nodes:
            return None
        seen = cls()
        for node in nodes.values():
            node.register_hook(seen._ran)
        return seen

    def _ran(self, grad_inputs: object, grad_outputs: object) -> None:
        self.ran = True


T = TypeVar("T")


def _run_model(run: Callable[[], T]) -> tuple[T | None, Exception | None]:
    """``run()``'s result, or the exception the user's model (its forward, its backward)
    raised: the model's, not ours (``LossFailed`` is the user's loss function: a usage error)."""
    try:
        return run(), None
    except LossFailed:
        raise
    except Exception as exc:
        return None, exc


def _where(location: Location | None) -> str:
    """Where a finding's statement is, for the first line of its message: the statement
    and its place, so ``describe`` does not repeat them on a line of their own."""
    if location is None:
        return ""
    return f": `{location.source}` at {location}" if location.source else f" at {location}"
