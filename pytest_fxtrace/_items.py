"""What a checked pytest item does with the engine, shared by marked tests, the
``fxtrace`` fixture (plugin.py) and zoo items (zoo.py): the engine's seams routed through
our hooks, where a mismatching graph is written, and the verdict that fails or xfails
the item once its reports are in.

pytest-facing: the engine never imports this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pytest

from . import _session, baseline
from ._compat import tmp_path_factory
from ._snapshot_session import hold_snapshots
from .options import OptionError, TraceOptions
from .types import Status

if TYPE_CHECKING:
    from .check import Comparator, TraceReport, TracerFactory

Layer = tuple[str, Mapping[str, Any]]
BASE_LAYERS = pytest.StashKey[list[Layer]]()  # the ini file's and command line's options
ITEM_OPTIONS = pytest.StashKey[TraceOptions]()  # a marked test's options, resolved at collection
ITEM_REPORTS = pytest.StashKey["list[TraceReport]"]()  # the item's checks so far


def dump_dir(item: pytest.Item) -> Any:
    """Where a mismatching graph is written: a fresh folder under pytest's basetemp,
    made only when there is something to write."""
    return lambda: tmp_path_factory(item.config).mktemp("fxtrace")


def engine_seams(item: pytest.Item) -> tuple[TracerFactory, Comparator]:
    """The engine's tracer factory and comparator, routed through our hooks.

    ``item.ihook``: a conftest.py's implementations apply to the tests below it only,
    as pytest's own hooks do."""
    import torch.fx

    from .compare import Difference

    config = item.config

    def make_tracer(options: TraceOptions) -> Any:
        tracer = item.ihook.pytest_fxtrace_make_tracer(options=options, config=config)
        if isinstance(tracer, type):
            raise OptionError(
                f"pytest_fxtrace_make_tracer returned the class {tracer.__module__}.{tracer.__qualname__}; "
                f"return an instance, e.g. {tracer.__name__}()"
            )
        if not isinstance(tracer, torch.fx.Tracer):
            raise OptionError(
                f"pytest_fxtrace_make_tracer returned {tracer!r}; return a torch.fx.Tracer instance, "
                "or None to leave the choice to the next implementation"
            )
        return tracer

    def compare(actual: Any, expected: Any, rtol: float | None, atol: float | None) -> Difference | None:
        result = item.ihook.pytest_fxtrace_compare(
            actual=actual, expected=expected, rtol=rtol, atol=atol, config=config
        )
        if isinstance(result, Difference):
            return result
        if result is False:
            return Difference("output", "output: judged different (a pytest_fxtrace_compare hook returned False)")
        if result is True:
            return None
        raise OptionError(
            f"pytest_fxtrace_compare returned {result!r}; return True (equal), False or a "
            "pytest_fxtrace.compare.Difference (different), or None (no opinion)"
        )

    return make_tracer, compare


def module_trees(item: pytest.Item) -> bool:
    return item.config.stash[_session.SESSION].module_trees


def verbosity(item: pytest.Item) -> int:
    return int(item.config.get_verbosity())


def record(item: pytest.Item, reports: list[TraceReport], options: TraceOptions) -> None:
    """Settle the reports' statuses, tell observers, then fail or xfail the test."""
    item.stash.setdefault(ITEM_REPORTS, []).extend(reports)
    hold_snapshots(item, reports, options)  # a passing check can still fail on its snapshot
    judged = baseline.judge(item, reports, options, verbosity(item))
    outcome, message = judged or _verdict(reports, options, verbosity(item))
    for report in reports:
        item.ihook.pytest_fxtrace_check_finished(item=item, report=report)
    if outcome == "xfail":
        pytest.xfail(message)
    if outcome == "fail":
        pytest.fail(message, pytrace=False)


def _verdict(reports: list[TraceReport], options: TraceOptions, verbose: int) -> tuple[str, str]:
    """("pass" | "fail" | "xfail", message); marks expected failures xfailed/xpassed."""
    failures = [r for r in reports if not r.ok]
    if options.xfail:
        expected = ", ".join(options.xfail)
        if failures and all(r.category in options.xfail for r in failures):
            for report in failures:
                report.status = Status.XFAILED
            return "xfail", f"expected {expected}: " + "; ".join(r.message for r in failures)
        if not failures:
            for report in reports:
                report.status = Status.XPASSED
            return "fail", (
                f"[XPASS(strict)] expected a traceability failure ({expected}), but every "
                "model traced and matched; remove xfail= from the marker"
            )
        got = ", ".join(sorted({str(r.category) for r in failures}))
        return "fail", (
            f"expected a traceability failure of category {expected}, but got {got}:\n"
            + "\n\n".join(r.describe(verbose) for r in failures)
        )
    if failures:
        return "fail", "\n\n".join(r.describe(verbose) for r in failures)
    return "pass", ""
