"""What a checked pytest item does with the engine, shared by marked tests, the
``fxtrace`` fixture (plugin.py) and zoo items (zoo.py): the engine's seams routed through
our hooks, where a mismatching graph is written, and the verdict that fails or xfails
the item once its reports are in.

pytest-facing: the engine never imports this module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_fxtrace._compat import tmp_path_factory
from pytest_fxtrace.backends.base import DumpDir, Seams
from pytest_fxtrace.options import OptionError, TraceOptions
from pytest_fxtrace.plugin import baseline
from pytest_fxtrace.plugin import session as _session
from pytest_fxtrace.plugin.snapshot_session import hold_snapshots
from pytest_fxtrace.types import Judgement, Status

if TYPE_CHECKING:
    from pytest_fxtrace.compare import Tolerances
    from pytest_fxtrace.tracereport import TraceReport

Layer = tuple[str, Mapping[str, Any]]
BASE_LAYERS = pytest.StashKey[list[Layer]]()  # the ini file's and command line's options
ITEM_OPTIONS = pytest.StashKey[TraceOptions]()  # a marked test's options, resolved at collection
ITEM_REPORTS = pytest.StashKey["list[TraceReport]"]()  # the item's checks so far


def dump_dir(item: pytest.Item) -> DumpDir:
    """Where a mismatching graph is written: a fresh folder under pytest's basetemp,
    made only when there is something to write."""

    def make() -> Path:
        factory = tmp_path_factory(item.config)
        if factory is None:  # -p no:tmpdir: dump_graph takes any error as "no dump"
            raise RuntimeError("no basetemp: pytest's tmpdir plugin is disabled")
        return factory.mktemp("fxtrace")

    return make


def engine_seams(item: pytest.Item) -> Seams:
    """What the engine's checks borrow from pytest: the tracer factory and comparator
    routed through our hooks, a dump folder under basetemp, module trees for the HTML page.

    ``item.ihook``: a conftest.py's implementations apply to the tests below it only,
    as pytest's own hooks do."""
    import torch.fx

    from pytest_fxtrace.compare import Difference

    config = item.config

    def make_tracer(options: TraceOptions) -> torch.fx.Tracer:
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

    def compare(
        actual: object, expected: object, rtol: float | None, atol: float | None, defaults: Tolerances | None = None
    ) -> Difference | None:
        result = item.ihook.pytest_fxtrace_compare(
            actual=actual, expected=expected, rtol=rtol, atol=atol, config=config, defaults=defaults or {}
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

    # FX's own hook, lent by name: the neutral seam names no backend
    return Seams({"make_tracer": make_tracer}, compare, dump_dir(item), module_trees(item))


def module_trees(item: pytest.Item) -> bool:
    return item.config.stash[_session.SESSION].module_trees


def verbosity(item: pytest.Item) -> int:
    return int(item.config.get_verbosity())


def record(item: pytest.Item, reports: list[TraceReport], options: TraceOptions) -> list[TraceReport]:
    """Settle the reports' statuses, tell observers, then fail or xfail the test.

    The check's reports are final for the check; the snapshot's verdicts and then the
    baseline's or the marker's judgement (xfail=) give each its record, built here once.
    Returns the records (what the ``fxtrace`` fixture hands back)."""
    verdicts = hold_snapshots(item, reports, options)  # a passing check can still fail on its snapshot
    held = [
        report if verdict is None
        else dataclasses.replace(report, ok=verdict.ok, status=verdict.status, message=verdict.message)
        for report, verdict in zip(reports, verdicts, strict=True)
    ]  # fmt: skip
    judgement = baseline.judge(item, held, options, verbosity(item)) or _verdict(held, options, verbosity(item))
    records = [_settled(index, report, judgement) for index, report in enumerate(held)]
    item.stash.setdefault(ITEM_REPORTS, []).extend(records)
    for report in records:
        item.ihook.pytest_fxtrace_check_finished(item=item, report=report)
    if judgement.outcome == "xfail":
        pytest.xfail(judgement.message)
    if judgement.outcome == "fail":
        pytest.fail(judgement.message, pytrace=False)
    return records


def _settled(index: int, report: TraceReport, judgement: Judgement) -> TraceReport:
    if index in judgement.settled:
        settled, message = judgement.settled[index]
        return dataclasses.replace(report, status=settled, message=message)
    status = judgement.passed_as if report.ok else judgement.failed_as
    return report if status is None else dataclasses.replace(report, status=status)


def _verdict(reports: list[TraceReport], options: TraceOptions, verbose: int) -> Judgement:
    """The marker's judgement: expected failures (xfail=) xfail, an unexpected pass xpasses."""
    failures = [r for r in reports if not r.ok]
    if options.xfail:
        expected = ", ".join(options.xfail)
        if failures and all(r.category in options.xfail for r in failures):
            message = f"expected {expected}: " + "; ".join(r.message for r in failures)
            return Judgement("xfail", message, failed_as=Status.XFAILED)
        if not failures:
            return Judgement(
                "fail",
                f"[XPASS(strict)] expected a traceability failure ({expected}), but every "
                "model traced and matched; remove xfail= from the marker",
                passed_as=Status.XPASSED,
            )
        got = ", ".join(sorted({str(r.category) for r in failures}))
        return Judgement(
            "fail",
            f"expected a traceability failure of category {expected}, but got {got}:\n"
            + "\n\n".join(r.describe(verbose) for r in failures),
        )
    if failures:
        return Judgement("fail", "\n\n".join(r.describe(verbose) for r in failures))
    return Judgement("pass", "")
