"""``--fx-journal=PATH`` and ``--fx-resume``: a killed run keeps what it finished.

The process that reports (the xdist controller, or the only one) appends each finished
test's records to the journal as its teardown report arrives (``report/journal.py``).
``--fx-resume`` reads the journal first: its tests are deselected (after ``-k``, ``-m``
and sharding plugins chose, so a shard resumes its own tests), their records go into this
run's report, summary and HTML page as if they had run, and the exit status counts their
failures; what this run finishes is appended to the same journal, so it can be resumed
again. A journal that does not exist yet is an empty one: a CI job can pass ``--fx-resume``
on its first attempt and its retries alike.
"""

from __future__ import annotations

import warnings
from collections.abc import Generator
from pathlib import Path

import pytest

from pytest_fxtrace.plugin.session import FULL_ORDER, TORCH_KEY, FxSession, output_path
from pytest_fxtrace.report.document import loaded_torch_version
from pytest_fxtrace.report.journal import Entry, JournalError, JournalWriter, read_journal
from pytest_fxtrace.report.records import CheckRecord


def addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fxtrace")
    group.addoption(
        "--fx-journal",
        metavar="PATH",
        default=None,
        help="append each finished test's check records to PATH (JSON lines) as it ends, "
        "so a killed run keeps them (ini fxtrace_journal)",
    )
    group.addoption(
        "--fx-resume",
        action="store_true",
        default=False,
        help="with --fx-journal: skip the tests the journal already holds and report their records",
    )
    parser.addini("fxtrace_journal", "see --fx-journal (relative to the ini file)", default="")


class Journal:
    """Writes the journal (on the reporting process) and resumes from it (everywhere)."""

    def __init__(self, config: pytest.Config, session: FxSession, path: Path, resume: bool) -> None:
        self.config = config
        self.session = session
        self.path = path
        self.resume = resume
        self.done: dict[str, Entry] = {}
        self.torn = 0
        if resume:
            try:
                entries, self.torn = read_journal(path)
            except JournalError as exc:
                raise pytest.UsageError(f"pytest-fxtrace: --fx-resume: {exc}") from None
            self.done = {entry.nodeid: entry for entry in entries}
        self.writer = None if session.is_worker else JournalWriter(path, append=resume)
        self.kept: list[Entry] = []  # the journal's tests this run did not run again
        self._records: dict[str, list[CheckRecord]] = {}
        self._seconds: dict[str, float] = {}
        self._cursor = 0  # serial runs: FxSession.records up to here are journalled
        self._torch: str | None = None

    @pytest.hookimpl(wrapper=True)
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> Generator[None, object, object]:
        result = yield  # every other selection first: -k, -m, pytest-split, pytest-shard
        if self.done:
            config.stash[FULL_ORDER] = {item.nodeid: index for index, item in enumerate(items)}
            skipped = [item for item in items if item.nodeid in self.done]
            if skipped:
                items[:] = [item for item in items if item.nodeid not in self.done]
                config.hook.pytest_deselected(items=skipped)
        return result

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.writer is None:
            return
        nodeid = report.nodeid
        self._seconds[nodeid] = self._seconds.get(nodeid, 0.0) + report.duration
        carried = getattr(report, "fxtrace_records", None)  # from an xdist worker
        if carried:
            self._records.setdefault(nodeid, []).extend(CheckRecord.from_wire(d) for d in carried)
            self._torch = getattr(report, TORCH_KEY, None) or self._torch
        if report.when != "teardown":
            return
        records = self._records.pop(nodeid, []) + self._serial_records(nodeid)
        seconds = self._seconds.pop(nodeid, 0.0)
        if records:
            entry = Entry(nodeid, tuple(records), seconds, self._torch or loaded_torch_version())
            try:
                self.writer.write(entry)
            except OSError as exc:
                self._stop(exc)

    def _serial_records(self, nodeid: str) -> list[CheckRecord]:
        """This process's records of ``nodeid`` since the last test's (a run without xdist)."""
        new = self.session.records[self._cursor :]
        self._cursor = len(self.session.records)
        return [record for record in new if record.nodeid == nodeid]

    def _stop(self, exc: OSError) -> None:
        warnings.warn(
            pytest.PytestWarning(f"pytest-fxtrace: could not append to --fx-journal={self.path}: {exc}"),
            stacklevel=1,
        )
        if self.writer is not None:
            self.writer.close()
        self.writer = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Before the report is written: the journal's tests this run did not run again
        join its records, and their failures its exit status."""
        if self.session.is_worker or not self.done:
            return
        ran = {record.nodeid for record in self.session.records}
        self.kept = [entry for nodeid, entry in self.done.items() if nodeid not in ran]
        for entry in self.kept:
            self.session.records.extend(entry.records)
            self.session.durations.setdefault(entry.nodeid, entry.duration)
            if entry.torch and not self.session.worker_torch:
                self.session.worker_torch = entry.torch
        failed = any(record.failed for entry in self.kept for record in entry.records)
        if failed and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        elif self.kept and session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
            session.exitstatus = pytest.ExitCode.OK  # every test had finished before

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.session.is_worker:
            return
        written = self.writer.written if self.writer is not None else 0
        line = f"fxtrace journal: {self.path} ({written} tests appended)"
        if self.resume:
            line += f"; --fx-resume kept {len(self.kept)} tests' records from it without running them"
        if self.torn:
            line += f"; {self.torn} line cut short by the kill was ignored (its test ran again)"
        terminalreporter.write_line(line)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def register(config: pytest.Config, session: FxSession) -> None:
    """Called from ``plugin.pytest_configure``; nothing happens without a journal."""
    path = output_path(config, "--fx-journal", "fxtrace_journal", "fx-journal.jsonl")
    resume = bool(config.getoption("fx_resume"))
    if path is None:
        if resume:
            raise pytest.UsageError(
                "pytest-fxtrace: --fx-resume needs the journal to resume from: --fx-journal=PATH (ini fxtrace_journal)"
            )
        return
    journal = Journal(config, session, path, resume)
    config.pluginmanager.register(journal, "fxtrace-journal")
    config.add_cleanup(journal.close)
    config.add_cleanup(lambda: config.pluginmanager.unregister(journal))
