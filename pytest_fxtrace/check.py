"""check_traceable: capture -> run -> compare -> TraceReport, through a backend.

``ModelChecker`` holds what one model's check has learned across its recorded
calls (the captured graphs, the verdict so far); the zero-code marker feeds it the
test's own calls (``TestChecks``), ``check_traceable`` feeds it one call it makes itself.

Talks to the capture backend through its interface only (``backends.base``); knows
nothing of how a graph is captured or explained, nor of pytest.
"""

from __future__ import annotations

import dataclasses
import time
import types
from collections.abc import Callable, Mapping
from traceback import walk_tb
from typing import Any

import torch
import torch.fx

from .backends import get_backend
from .backends.base import Backend, Captured, CaptureFailed, CheckContext, Recheck
from .binding import bind_call
from .capture import CallObserver, CapturedCall, ModelState, RngState, suspended
from .collection import module_tree
from .compare import Difference, compare_outputs
from .diagnose import format_error
from .guards import CheckTimeout, NotAModule, collection_paused, device_mismatch, not_a_module, time_limit
from .locate import user_location
from .options import OptionError, TraceOptions, resolve_options
from .tracer import build_tracer
from .tracereport import TraceReport, dotted_class, internal_error_report, model_error_report
from .types import Category, Location, Status, model_label

TracerFactory = Callable[[TraceOptions], torch.fx.Tracer]
Comparator = Callable[..., "Difference | None"]


class ModelChecker(CallObserver):
    """The check of one model: capture once per distinct call kind, replay each call.

    ``backend`` captures and explains (``backends.base.Backend``; FX by default, built
    with ``make_tracer``); ``make_tracer`` and ``compare`` are seams for the plugin's hooks.

    Example::

        checker = ModelChecker(model, TraceOptions())
        ...feed CapturedCall objects to checker.observe...
        report = checker.finish()
    """

    def __init__(
        self,
        model: torch.nn.Module,
        options: TraceOptions,
        make_tracer: TracerFactory = build_tracer,
        compare: Comparator = compare_outputs,
        diagnose: bool = True,
        dump_dir: Any = None,
        module_tree: bool = False,
        backend: Backend | None = None,
    ) -> None:
        self.model = model
        self.options = options
        if backend is None:
            backend = get_backend(options.backend[0] if options.backend else "fx")(make_tracer=make_tracer)
        self.backend = backend
        self.words = backend.words(options)
        self.compare = compare
        self.diagnose = diagnose  # localize and verify fixes on failure (off inside a verification)
        self.dump_dir = dump_dir  # where to write a mismatching graph (a path, or a callable giving one)
        self.module_tree = module_tree  # give the report its per-module statuses (TraceReport.modules)
        # the verdict so far, field by field; finish() builds the TraceReport from it, once
        name = options.backend[0] if len(options.backend) == 1 else backend.name
        start = TraceReport(ok=True, status=Status.PASSED, model=dotted_class(model), options=options, backend=name)
        self._found = types.SimpleNamespace(**{f.name: getattr(start, f.name) for f in dataclasses.fields(start)})
        self._model_name = start.model_name
        self._final: TraceReport | None = None  # set when pytest-fxtrace itself failed
        self._captured: dict[tuple[bool, str], Captured] = {}

    @property
    def wants_more(self) -> bool:
        return self._final is None and self._found.ok and self._found.calls < self.options.max_replays

    def observe(self, call: CapturedCall) -> None:
        """Judge one recorded call; the model and RNG are left as the eager call left them."""
        with collection_paused():  # our allocations, not the user's forward
            # the same dicts as the state before the call (no walk, no buffer values)
            after = call.state.snapshot() if call.state is not None else ModelState.capture(call.module, values=False)
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
                rng_after.restore()

    def _check_call(self, call: CapturedCall) -> None:
        bound = bind_call(call.module, call.args, call.kwargs, self.options.concrete_args)
        context = CheckContext(call, bound, self.options, self.compare, self.dump_dir)
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
            captured = self._capture(context)
            if captured is None:
                return
            self._captured[key] = captured
        if call.state is not None:
            call.state.restore()
        call.rng.restore()
        start = time.perf_counter()
        try:
            traced_output = self.backend.run(captured, context)
        except Exception as exc:  # the traced module fails where eager did not
            self._replay_failed(exc, context, captured)
            return
        finally:
            self._found.replay_seconds += time.perf_counter() - start
        self._found.calls += 1
        difference = self.compare(
            traced_output, call.output, rtol=self.options.rtol, atol=self.options.atol
        )
        if difference is not None:
            self._mismatch(context, captured, difference)

    def _recheck(self, call: CapturedCall) -> Recheck:
        """The check of ``call`` again with other options, nothing explained: how the
        backend verifies a fix. (passed, what happened)."""

        def recheck(options: TraceOptions) -> tuple[bool, str]:
            trial = ModelChecker(call.module, options, compare=self.compare, diagnose=False, backend=self.backend)
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
        )

    def _capture(self, context: CheckContext) -> Captured | None:
        start = time.perf_counter()
        try:
            captured = self.backend.capture(context)
        except CaptureFailed as failure:
            self._found.trace_seconds += time.perf_counter() - start
            self._untraceable(failure, context)
            return None
        self._found.trace_seconds += time.perf_counter() - start
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
                self._found.suggestion = finding.fix
            return None
        self._found.graph_module = captured.graph_module
        self._found.code = code
        self._found.nodes = captured.nodes
        self._found.coverage = 1.0
        return captured

    def _untraceable(self, failure: CaptureFailed, context: CheckContext) -> None:
        diagnosis = failure.diagnosis
        self._found.module = diagnosis.module
        self._found.module_type = diagnosis.module_type
        self._found.location = diagnosis.location
        self._found.last_node = diagnosis.last_node
        if self.diagnose:
            explained = self.backend.explain_capture_failure(failure, context, self._recheck(context.call))
            collection = explained.collection
            self._found.localization = collection
            self._found.coverage = collection.coverage if collection is not None else None
            self._found.suggestion = explained.suggestion
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
        )

    def _replay_failed(self, exc: Exception, context: CheckContext, captured: Captured) -> None:
        text = str(exc)
        category = Category.SPECIALIZATION if "has been specialized" in text else Category.OTHER
        self._found.location = user_location(exc)
        reason = ""
        if self.diagnose:
            diagnosis = self.backend.explain_run_failure(captured, context, exc)
            category = diagnosis.category
            self._found.location = diagnosis.location or self._found.location
            self._found.module, self._found.module_type = diagnosis.module, diagnosis.module_type
            self._found.code_fix = diagnosis.code_fix
            if diagnosis.fix is not None:
                self._found.suggestion = diagnosis.fix
            reason = f": {diagnosis.reason}{_where(diagnosis.location)}" if diagnosis.reason else ""
        self._fail(
            Status.MISMATCH,
            category,
            f"{self._model_name} {self.words.past}, but {self.words.graph} raised on recorded call "
            f"{self._found.calls + 1} where the eager model did not{reason}",
            error=format_error(exc),
        )

    def _timed_out(self, exc: CheckTimeout) -> None:
        tracing = any(frame.f_code is ModelChecker._capture.__code__ for frame, _ in walk_tb(exc.__traceback__))
        location = None if exc.deferred else user_location(exc)
        where = f", interrupted at {location}: {location.source}" if location else ""
        # deferred: the limit ran out in clean-up and was raised after it, so where it was
        # raised says nothing about which step took the time
        step = "the check" if exc.deferred else "tracing" if tracing else "checking the traced module"
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

    def _fail(self, status: Status, category: str | None, message: str, **fields: Any) -> None:
        found = self._found
        found.ok, found.status, found.category, found.message = False, status, category, message
        for name, value in fields.items():
            setattr(found, name, value)

    def finish(self) -> TraceReport:
        """The report, built once; a passing one says how many calls agreed."""
        if self._final is not None:
            return self._final
        found = types.SimpleNamespace(**vars(self._found))
        if found.ok:
            calls = "call" if found.calls == 1 else "calls"
            found.message = (
                f"{self._model_name} {self.words.past} ({found.nodes} nodes) and matched eager on "
                f"{found.calls} recorded {calls}"
            )
        if self.module_tree:
            # where a traced model went wrong (an untraceable one's failures are localization's)
            failing = None if found.ok or found.localization is not None else (
                found.module, found.category, found.location
            )  # fmt: skip
            try:
                found.modules = module_tree(self.model, found.localization, found.graph_module, failing)
            except Exception as exc:  # our own walk of the model: pytest-fxtrace's bug, not the model's
                return internal_error_report(self.model, exc, self.options)
        return TraceReport(**vars(found))


def _where(location: Location | None) -> str:
    """Where a finding's statement is, for the first line of its message: the statement
    and its place, so ``describe`` does not repeat them on a line of their own."""
    if location is None:
        return ""
    return f": `{location.source}` at {location}" if location.source else f" at {location}"


def _options_from(options: Mapping[str, Any], where: str) -> TraceOptions:
    if "options" in options and isinstance(options["options"], TraceOptions) and len(options) == 1:
        return options["options"]
    return resolve_options((where, options))


def check_model_call(
    model: Any,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any] | None,
    options: TraceOptions,
    make_tracer: TracerFactory = build_tracer,
    compare: Comparator = compare_outputs,
    dump_dir: Any = None,
    module_tree: bool = False,
) -> TraceReport:
    """``check_model_backends`` for the first backend the options name."""
    first = options.replace(backend=options.backend[:1])
    return check_model_backends(model, args, kwargs, first, make_tracer, compare, dump_dir, module_tree)[0]


def check_model_backends(
    model: Any,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any] | None,
    options: TraceOptions,
    make_tracer: TracerFactory = build_tracer,
    compare: Comparator = compare_outputs,
    dump_dir: Any = None,
    module_tree: bool = False,
) -> list[TraceReport]:
    """Run ``model(*args, **kwargs)`` eagerly once and check it with each backend the
    options name (one report each, in order); the model, RNG and autograd state are as
    before afterwards. A mismatching graph is written under ``dump_dir`` (a path or a
    callable giving one), when given; ``module_tree`` fills the reports' ``modules``."""
    if not isinstance(model, torch.nn.Module):
        raise NotAModule(not_a_module(model))
    if not isinstance(args, tuple):
        args = tuple(args) if isinstance(args, list) else (args,)
    kwargs = dict(kwargs or {})
    before = ModelState.capture(model)
    rng_before = RngState.capture()
    try:
        with suspended(), torch.no_grad(), before.lent_buffers(model):
            try:
                output = model(*args, **kwargs)
            except Exception as exc:
                report = model_error_report(model, exc, options, hint=device_mismatch(model, args, kwargs))
                return [dataclasses.replace(report, backend=name) for name in options.backend]
        reports = []
        for name in options.backend:
            checker = ModelChecker(
                model, options.replace(backend=(name,)), make_tracer, compare, dump_dir=dump_dir, module_tree=module_tree
            )
            checker.observe(CapturedCall(model, args, kwargs, output, before, rng_before, model.training))
            reports.append(checker.finish())
        return reports
    finally:
        before.restore()
        rng_before.restore()


def check_traceable(
    model: torch.nn.Module,
    args: Any = (),
    kwargs: Mapping[str, Any] | None = None,
    **options: Any,
) -> Any:
    """Check that ``model`` traces and that the traced module computes what the model does.

    Returns a ``TraceReport``; never raises for a model's own faults (those are
    statuses: ``untraceable``, ``mismatch``, ``model-error``). Options are those of
    ``@pytest.mark.traceable``; ``backend=("fx", "export")`` checks with each backend in
    turn and returns a tuple of reports, one per backend.

    Example::

        report = check_traceable(resnet18(), (torch.randn(1, 3, 64, 64),))
        assert report.ok, report.describe()
        fx, export = check_traceable(model, (x,), backend=("fx", "export"))
    """
    resolved = _options_from(options, "check_traceable()")
    if resolved.snapshot:
        raise OptionError(
            "check_traceable(snapshot=True): a golden file is named after the pytest test that "
            "holds it, and check_traceable has none; use @pytest.mark.traceable(snapshot=True) or "
            "the fxtrace fixture (fxtrace.check(model, args, snapshot=True)) inside a test"
        )
    reports = check_model_backends(model, args, kwargs, resolved)
    return reports[0] if len(reports) == 1 else tuple(reports)


class TestChecks:
    """The checks of one test in zero-code mode: a ``ModelChecker`` per root module.

    Example::

        checks = TestChecks(options)
        with recording(checks.observer_for):
            run_the_test()
        reports = checks.finish()
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        options: TraceOptions,
        make_tracer: TracerFactory = build_tracer,
        compare: Comparator = compare_outputs,
        dump_dir: Any = None,
        module_tree: bool = False,
    ) -> None:
        self.options = options
        self.make_tracer = make_tracer
        self.compare = compare
        self.dump_dir = dump_dir
        self.module_tree = module_tree
        self._checkers: dict[tuple[int, str], ModelChecker] = {}
        self._failed: list[TraceReport] = []  # internal errors before a module had its checker
        self.usage_errors: list[OptionError] = []

    def observer_for(self, module: torch.nn.Module) -> CallObserver | None:
        wanting = []
        for name in self.options.backend:  # one checker per backend, each call fed to all of them
            checker = self._checkers.get((id(module), name))
            if checker is None:
                checker = ModelChecker(
                    module, self.options.replace(backend=(name,)), self.make_tracer, self.compare,
                    dump_dir=self.dump_dir, module_tree=self.module_tree,
                )  # fmt: skip
                self._checkers[(id(module), name)] = checker
            if checker.wants_more:
                wanting.append(checker)
        if not wanting or self.usage_errors:
            return None
        return _GuardedObserver(wanting, self.usage_errors)

    def internal_error(self, module: torch.nn.Module, exc: Exception) -> None:
        """``recording``'s ``on_error``: pytest-fxtrace raised while recording ``module``'s
        call; the test still runs, and its verdict for ``module`` is ``internal-error``."""
        if isinstance(exc, OptionError):
            self.usage_errors.append(exc)
            return
        checkers = [c for (key, _), c in self._checkers.items() if key == id(module)]
        for checker in checkers:
            checker.internal_error(exc)
        if not checkers and not any(r.model == dotted_class(module) for r in self._failed):
            self._failed.append(internal_error_report(module, exc, self.options))

    def finish(self) -> list[TraceReport]:
        reports = [checker.finish() for checker in self._checkers.values()] + self._failed
        self._checkers.clear()
        self._failed = []
        return reports


class _GuardedObserver(CallObserver):
    """Keeps a configuration error out of the test's own module call; the plugin
    reports it once the test body is done."""

    def __init__(self, checkers: list[ModelChecker], errors: list[OptionError]) -> None:
        self.checkers = checkers
        self.errors = errors

    def observe(self, call: CapturedCall) -> None:
        for checker in self.checkers:  # each leaves the model and RNG as the eager call left them
            try:
                checker.observe(call)
            except OptionError as exc:
                self.errors.append(exc)
                return
