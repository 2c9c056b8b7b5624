"""The engine's entry points: where a check's calls come from.

``check_traceable`` (and ``check_model_backends``) run the model once and check that call
with each backend the options name; ``TestChecks`` gives the zero-code marker one
``ModelChecker`` per root module and backend, fed the test's own calls as ``recording``
captures them. Both hand the calls to ``check.ModelChecker`` and return its reports.
Knows nothing of pytest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, overload

import torch

from pytest_fxtrace.backends.base import Seams
from pytest_fxtrace.capture import CallObserver, CapturedCall
from pytest_fxtrace.check import ModelChecker, model_checkers, run_and_check
from pytest_fxtrace.inputs import NotAModule, not_a_module
from pytest_fxtrace.options import OptionError, TraceOptions, resolve_options
from pytest_fxtrace.tracereport import TraceReport, dotted_class, internal_error_report

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's from Python 3.11; the type checker's target is 3.10


def _options_from(options: Mapping[str, object], where: str) -> TraceOptions:
    if "options" in options and isinstance(options["options"], TraceOptions) and len(options) == 1:
        return options["options"]
    return resolve_options((where, options))


def check_model_backends(
    model: object,
    args: object,
    kwargs: Mapping[str, object] | None,
    options: TraceOptions,
    seams: Seams | None = None,
) -> list[TraceReport]:
    """Run ``model(*args, **kwargs)`` eagerly once and check it with each backend the
    options name (one report each, in order); the model, RNG and autograd state are as
    before afterwards. ``seams``: what the caller lends the checks (hooks, a dump
    folder, module trees)."""
    if not isinstance(model, torch.nn.Module):
        raise NotAModule(not_a_module(model))
    if not isinstance(args, tuple):
        args = tuple(args) if isinstance(args, list) else (args,)
    kwargs = dict(kwargs or {})
    return run_and_check(model, args, kwargs, options, seams)


@overload
def check_traceable(
    model: torch.nn.Module,
    args: object = (),
    kwargs: Mapping[str, object] | None = None,
    *,
    backend: str | tuple[str] = ...,
    **options: object,
) -> TraceReport: ...


@overload
def check_traceable(
    model: torch.nn.Module,
    args: object = (),
    kwargs: Mapping[str, object] | None = None,
    *,
    backend: tuple[str, str, Unpack[tuple[str, ...]]],
    **options: object,
) -> tuple[TraceReport, ...]: ...


@overload
def check_traceable(
    model: torch.nn.Module,
    args: object = (),
    kwargs: Mapping[str, object] | None = None,
    *,
    backend: Iterable[str],
    **options: object,
) -> TraceReport | tuple[TraceReport, ...]: ...


def check_traceable(
    model: torch.nn.Module,
    args: object = (),
    kwargs: Mapping[str, object] | None = None,
    **options: object,
) -> TraceReport | tuple[TraceReport, ...]:
    """Check that ``model`` traces and that the traced module computes what the model does.

    Returns a ``TraceReport``; never raises for a model's own faults (those are
    statuses: ``untraceable``, ``mismatch``, ``model-error``). Options are those of
    ``@pytest.mark.traceable``; ``backend=("fx", "export")`` checks with each backend in
    turn and returns a tuple of reports, one per backend. (To a type checker: no backend
    named, a name, or a tuple of one gives a ``TraceReport``; a tuple of two or more
    names a ``tuple[TraceReport, ...]``; names it cannot count, either. A string naming
    several, ``"fx,export"``, the ini's form, reads to it as one name.)

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

    def __init__(self, options: TraceOptions, seams: Seams | None = None) -> None:
        self.options = options
        self.seams = seams or Seams()
        self._checkers: dict[int, list[ModelChecker]] = {}
        self._failed: list[TraceReport] = []  # internal errors before a module had its checker
        self.usage_errors: list[OptionError] = []

    def observer_for(self, module: torch.nn.Module) -> CallObserver | None:
        checkers = self._checkers.get(id(module))
        if checkers is None:  # one checker per backend, each call fed to all of them
            checkers = self._checkers[id(module)] = model_checkers(module, self.options, self.seams)
        wanting = [checker for checker in checkers if checker.wants_more]
        if not wanting or self.usage_errors:
            return None
        return _GuardedObserver(wanting, self.usage_errors)

    def internal_error(self, module: torch.nn.Module, exc: Exception) -> None:
        """``recording``'s ``on_error``: pytest-fxtrace raised while recording ``module``'s
        call; the test still runs, and its verdict for ``module`` is ``internal-error``."""
        if isinstance(exc, OptionError):
            self.usage_errors.append(exc)
            return
        checkers = self._checkers.get(id(module), [])
        for checker in checkers:
            checker.internal_error(exc)
        if not checkers and not any(r.model == dotted_class(module) for r in self._failed):
            self._failed.append(internal_error_report(module, exc, self.options))

    def finish(self) -> list[TraceReport]:
        reports = [checker.finish() for checkers in self._checkers.values() for checker in checkers]
        reports += self._failed
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
