"""The engine half of ``--fx-isolate``: what a spawned checking process runs.

``python -m pytest_fxtrace.zoo.child JOB_FD RESULT_FD`` imports torch and the engine
once, says "ready", then checks one ``Job`` after another (a zoo model by registry and
name, with the ini / command line option layers) and sends back each ``TraceReport``
without its GraphModule, as an ``IsolatedReport`` that carries its description. It
knows nothing of pytest: the pool that spawns, watches and replaces children is
``pytest_fxtrace.plugin.isolate``.
"""

from __future__ import annotations

import dataclasses
import pickle
import sys
import traceback
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from pytest_fxtrace.types import Status
from pytest_fxtrace.zoo import registries as zoo

if TYPE_CHECKING:
    from pytest_fxtrace.tracereport import TraceReport


@dataclasses.dataclass(frozen=True)
class Job:
    """One model to check, in plain data a fresh interpreter can rebuild everything from."""

    source: str
    name: str
    layers: tuple[tuple[str, Any], ...]  # plugin.BASE_LAYERS (raw ini / command line values)
    notrace: bool
    verbosity: int = 0
    module_tree: bool = False  # the report's per-module statuses, for an HTML page
    backend: str | None = None  # the one backend to check with, over every layer's choice




def _check(job: Job) -> tuple[TraceReport, str]:
    from pytest_fxtrace.backends.base import Seams
    from pytest_fxtrace.options import resolve_options

    registry = zoo.load_registry(job.source, notrace=job.notrace)
    options = resolve_options(*job.layers, (f"zoo {job.source} options", zoo.registry_options(registry, job.name)))
    if job.backend is not None:  # after the registry's options, which may name several
        options = options.replace(backend=(job.backend,))
    report = zoo.run_case(registry, job.source, job.name, options, Seams(module_tree=job.module_tree))
    return report, report.describe(job.verbosity)


# a report's fields the child does not send: graphs and tensors, and the options (the parent's own)
_UNSENT = ("graph_module", "localization", "divergence", "difference", "options")


def _sendable(job: Job) -> TraceReport:
    from pytest_fxtrace.tracereport import TraceReport

    try:
        checked, text = _check(job)
        fields = {f.name: getattr(checked, f.name) for f in dataclasses.fields(checked)}
        fields.update(dict.fromkeys(_UNSENT))
        report = _isolated_class()(**fields, text=text)  # pickled by reference to this module
        pickle.dumps(report)
        return report
    except BaseException as exc:  # ours to report, never the model's
        return TraceReport(
            ok=False,
            status=Status.INTERNAL_ERROR,
            model=f"{job.source}:{job.name}",
            message=f"pytest-fxtrace raised while checking {job.name} in its child process "
            f"(a bug in pytest-fxtrace, not in the model):\n{''.join(traceback.format_exception(exc))}",
        )


def _isolated_class() -> type:
    import pytest_fxtrace.zoo.child as this  # not __main__: the parent unpickles it from here

    return this.IsolatedReport


def main(job_fd: int, result_fd: int) -> None:
    jobs = Connection(job_fd, writable=False)
    results = Connection(result_fd, readable=False)
    import torch  # the cost every check would otherwise pay

    from pytest_fxtrace.entry import check_traceable

    check_traceable(torch.nn.Linear(2, 2), (torch.ones(1, 2),))  # the engine's lazy imports and first compile
    results.send("ready")
    while True:
        try:
            job = jobs.recv()
        except EOFError:
            return
        if job is None:
            return
        results.send(_sendable(job))


def _define_isolated_report() -> None:
    from pytest_fxtrace.tracereport import TraceReport

    @dataclasses.dataclass(frozen=True)
    class IsolatedReport(TraceReport):
        """A ``TraceReport`` from a child: its description was written there, where the
        localization and divergence objects it reads live."""

        text: str = ""

        def describe(self, verbose: int = 0) -> str:
            return self.text

    IsolatedReport.__module__ = "pytest_fxtrace.zoo.child"
    IsolatedReport.__qualname__ = "IsolatedReport"
    globals()["IsolatedReport"] = IsolatedReport


def __getattr__(name: str) -> Any:
    if name == "IsolatedReport":  # unpickling a child's report in the parent
        _define_isolated_report()
        return globals()[name]
    raise AttributeError(name)


if __name__ == "__main__":
    from pytest_fxtrace.zoo import child as _this

    _this.main(int(sys.argv[1]), int(sys.argv[2]))
