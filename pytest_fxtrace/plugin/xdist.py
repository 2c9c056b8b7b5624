"""pytest-xdist's controller side: merge the records each worker hands over
(``config.workeroutput``, or the test reports a crashed worker sent before dying),
raise a worker's usage error as the controller's own, and name the tests whose results
a crashed worker took with it. Registered only when xdist is installed, whose hooks
pytest would otherwise reject."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_fxtrace.plugin.session import TORCH_KEY, USAGE_KEY, WORKEROUTPUT_KEY, FxSession
from pytest_fxtrace.report.records import CheckRecord, Unfinished


class XdistController:
    """xdist-only hooks: merge worker records, and account for workers that crashed."""

    def __init__(self, session: FxSession) -> None:
        self.session = session
        self._merged: set[int] = set()
        self._received: dict[int, list[Any]] = {}  # worker -> records its test reports carried

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        node = getattr(report, "node", None)
        records = getattr(report, "fxtrace_records", None)
        if node is not None and records:
            self._received.setdefault(id(node), []).extend(records)
            self._torch(getattr(report, TORCH_KEY, None))

    def _torch(self, version: Any) -> None:
        if isinstance(version, str) and version:
            self.session.worker_torch = version

    def pytest_testnodedown(self, node: Any, error: object | None) -> None:
        output = getattr(node, "workeroutput", None)
        if output is not None and output.get(USAGE_KEY):
            # a worker's own UsageError reaches xdist as a bare INTERNALERROR without its
            # message; raised here, pytest prints it and exits as for a serial run
            raise pytest.UsageError(output[USAGE_KEY])
        if id(node) in self._merged:
            return
        received = self._received.pop(id(node), [])
        if output is not None:
            self._torch(output.get(TORCH_KEY))
        if output is not None and WORKEROUTPUT_KEY in output:
            self._merged.add(id(node))
            self.session.records.extend(CheckRecord.from_wire(d) for d in output[WORKEROUTPUT_KEY])
        elif error is not None:
            # the worker died without handing its results over: keep what its test
            # reports carried (the test it crashed in is named by pytest_handlecrashitem)
            self._merged.add(id(node))
            self.session.records.extend(CheckRecord.from_wire(d) for d in received)

    def pytest_handlecrashitem(self, crashitem: str, report: Any, sched: Any) -> None:
        worker = getattr(getattr(report, "node", None), "gateway", None)
        name = f" {worker.id}" if worker is not None else ""
        self.session.unfinished.append(Unfinished(crashitem, f"worker{name} crashed while running it"))


def register(config: pytest.Config, session: FxSession) -> None:
    """On xdist's controller (xdist installed, this process no worker): the controller side."""
    manager = config.pluginmanager
    if manager.hasplugin("xdist") and not session.is_worker:
        controller = XdistController(session)
        manager.register(controller, "fxtrace-xdist")
        config.add_cleanup(lambda: manager.unregister(controller))
