"""pytest-html's results table, with a column for pytest-fxtrace: each checked test's
model statuses, each linked to its check in the ``--fx-html`` page."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_fxtrace.plugin.session import FxSession
from pytest_fxtrace.report.records import CheckRecord


class HtmlResultsColumn:
    """pytest-html (when installed and ``--html`` given): its results table gains a
    column with each checked test's model statuses, each linked to that check in the
    ``--fx-html`` page. Registered on the controller only, as pytest-html writes there."""

    def __init__(self, session: FxSession, html_results: str) -> None:
        self.session = session
        self.results_dir = Path(session.config.invocation_params.dir, html_results).parent
        self.by_test: dict[str, list[CheckRecord]] = {}
        self._from_workers: set[str] = set()
        self._folded = 0

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        records = getattr(report, "fxtrace_records", None)  # sent by an xdist worker
        if records:
            self._from_workers.add(report.nodeid)
            self.by_test.setdefault(report.nodeid, []).extend(CheckRecord.from_wire(d) for d in records)

    def records_for(self, nodeid: str) -> list[CheckRecord]:
        records = self.session.records
        for record in records[self._folded :]:  # this process's own checks
            if record.nodeid not in self._from_workers:
                self.by_test.setdefault(record.nodeid, []).append(record)
        self._folded = len(records)
        return self.by_test.get(nodeid, [])

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_header(self, cells: list[str]) -> None:
        cells.insert(2, '<th class="sortable" data-column-type="fxtrace">fxtrace</th>')

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_row(self, report: pytest.TestReport, cells: list[str]) -> None:
        import html
        from urllib.parse import quote

        from pytest_fxtrace.report.html import record_key

        page = self.session.html_path
        href = quote(Path(os.path.relpath(page, self.results_dir)).as_posix()) if page is not None else None
        parts = []
        for record in self.records_for(report.nodeid):
            status = html.escape(f"{record.model_name}: {record.status}")
            if href is None:
                parts.append(status)
            else:
                link = html.escape(f"{href}#{quote(record_key(record), safe='')}", quote=True)
                parts.append(f'<a href="{link}">{status}</a>')
        cells.insert(2, f'<td class="col-fxtrace">{", ".join(parts)}</td>')


def register(config: pytest.Config, session: FxSession) -> None:
    """With pytest-html's ``--html``, on the controller: the column."""
    html_results = config.getoption("htmlpath", None)
    if html_results and not session.is_worker:
        column = HtmlResultsColumn(session, html_results)
        manager = config.pluginmanager
        manager.register(column, "fxtrace-pytest-html")
        config.add_cleanup(lambda: manager.unregister(column))
