"""The session's record of every check, and the pytest hooks that present it.

``FxSession`` collects a ``CheckRecord`` per checked model (through our own
``pytest_fxtrace_check_finished``), adds the junit-xml properties, and on the
controller writes ``--fx-report``, the terminal summary and the GitHub Actions
annotations. Under pytest-xdist each worker hands its records over in
``config.workeroutput[WORKEROUTPUT_KEY]``; ``plugin/xdist.py`` merges them on the
controller, and ``plugin/pytest_html.py`` adds pytest-html's column.

Imports no torch (nor the engine): an xdist controller, or a session that checks no
model, runs all of this. The report's torch version is this process's torch if it
imported one, else what the workers reported, else the installed one.
"""

from __future__ import annotations

import os
import re
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_fxtrace.report import document as fxdocument
from pytest_fxtrace.report import records as fxreport
from pytest_fxtrace.report import summary
from pytest_fxtrace.report.annotations import annotation_lines, find_repo_root
from pytest_fxtrace.report.records import CheckRecord, Unfinished

if TYPE_CHECKING:
    from pytest_fxtrace.tracereport import TraceReport

WORKEROUTPUT_KEY = "fxtrace_reports"
TORCH_KEY = "fxtrace_torch"  # a worker's torch.__version__, when it imported torch
USAGE_KEY = "fxtrace_usage_error"  # a usage error a worker found at collection
SESSION = pytest.StashKey["FxSession"]()
_UNSENT = pytest.StashKey[list[CheckRecord]]()
# the selection's order before --fx-resume deselected what its journal holds: the journal's
# records and this run's sort as in one uninterrupted run
FULL_ORDER = pytest.StashKey[dict[str, int]]()


def output_path(config: pytest.Config, flag: str, ini: str | None, example: str) -> Path | None:
    """Where a report goes: the command line's ``--<flag>`` relative to where pytest was
    invoked, else the ini option ``ini`` relative to the ini file's folder; None when
    neither asks for one; a usage error naming what was written when unusable."""
    value = config.getoption(flag.lstrip("-").replace("-", "_"), None)
    written, base = f"{flag}={value}", config.invocation_params.dir
    if value is None and ini is not None:
        value = config.getini(ini) or None
        written, base = f"ini {ini} = {value}", config.inipath.parent if config.inipath else config.rootpath
    if value is None:
        return None
    if not str(value).strip():
        raise pytest.UsageError(f"{written}: needs a file name, e.g. {flag}={example}")
    path = Path(base, os.path.expanduser(os.path.expandvars(value)))
    if path.is_dir():
        raise pytest.UsageError(
            f"{written}: {path} is a directory; give a file name, "
            f"e.g. {flag}={os.path.join(value, example)}"
        )
    return Path(os.path.normpath(path))


def report_path(config: pytest.Config) -> Path | None:
    """``--fx-report``; see ``output_path``."""
    return output_path(config, "--fx-report", None, "fx-report.json")


def patch_dir(config: pytest.Config) -> Path | None:
    """``--fx-patch-dir``: the folder each verified patch is written to (relative to where
    pytest was invoked); None when not asked for; a usage error when it is a file."""
    value = config.getoption("fx_patch_dir", None)
    if value is None:
        return None
    if not str(value).strip():
        raise pytest.UsageError("--fx-patch-dir=: needs a folder, e.g. --fx-patch-dir=fx-patches")
    path = Path(config.invocation_params.dir, os.path.expanduser(os.path.expandvars(value)))
    if path.exists() and not path.is_dir():
        raise pytest.UsageError(f"--fx-patch-dir={value}: {path} is a file; give a folder, e.g. --fx-patch-dir=fx-patches")
    return Path(os.path.normpath(path))


def patch_name(record: CheckRecord) -> str:
    """The file a record's patch is written to: its test, model and backend, as a file name."""
    model = (record.model or "").rpartition(".")[2]
    return re.sub(r"[^\w.-]+", "_", f"{record.nodeid}.{model}.{record.backend}").strip("_") + ".patch"


def html_path(config: pytest.Config) -> Path | None:
    """``--fx-html`` (ini ``fxtrace_html``); see ``output_path``."""
    return output_path(config, "--fx-html", "fxtrace_html", "fx-report.html")


class FxSession:
    """Per-session state and the session-level hooks (both controller and workers)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.records: list[CheckRecord] = []
        self.unfinished: list[Unfinished] = []
        self.path = report_path(config)
        self.html_path = html_path(config)
        self.patch_dir = patch_dir(config)
        self.is_worker = hasattr(config, "workerinput")
        self.written: Path | None = None
        self.html_written: Path | None = None
        self.worker_torch: str | None = None  # the torch version workers reported
        self._order: dict[str, int] = {}
        self._per_item: dict[str, int] = {}
        # each test's seconds, its setup, call and teardown summed as pytest-split sums them
        self.durations: dict[str, float] = {}

    @property
    def module_trees(self) -> bool:
        """Whether checks give their per-module statuses (``TraceReport.modules``): only
        for a report that shows them, as walking every model costs a little per check."""
        return self.path is not None or self.html_path is not None

    # -- where tests run ------------------------------------------------------------------

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # every xdist worker collects the same items, so indices agree across processes
        self._order = self.config.stash.get(FULL_ORDER, {}) or {
            item.nodeid: index for index, item in enumerate(session.items)
        }

    @pytest.hookimpl(trylast=True)
    def pytest_fxtrace_check_finished(self, item: pytest.Item, report: TraceReport) -> None:
        seq = self._per_item.get(item.nodeid, 0)
        self._per_item[item.nodeid] = seq + 1
        test_file, test_line0, _ = item.location
        record = CheckRecord.from_report(
            report,
            nodeid=item.nodeid,
            rootdir=self.config.rootpath,
            test_file=self.config.rootpath / test_file,
            test_line=test_line0 + 1 if test_line0 is not None else None,
            order=(self._order.get(item.nodeid, len(self._order)), seq),
        )
        self.records.append(record)
        item.user_properties.extend(fxdocument.junit_properties(record))
        if self.is_worker:
            item.stash.setdefault(_UNSENT, []).append(record)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        """On an xdist worker, each test report also carries that test's records, so the
        controller keeps them even if this worker later crashes and never hands over
        ``workeroutput``."""
        report = yield
        unsent = item.stash.get(_UNSENT, [])
        if self.is_worker and unsent:
            report.fxtrace_records = [record.to_wire() for record in unsent]
            setattr(report, TORCH_KEY, fxdocument.loaded_torch_version())
            unsent.clear()
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # on xdist's controller too: the workers' reports of every phase come through here
        self.durations[report.nodeid] = self.durations.get(report.nodeid, 0.0) + report.duration

    # -- end of session ---------------------------------------------------------------------

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.is_worker:
            self.config.workeroutput[WORKEROUTPUT_KEY] = [r.to_wire() for r in self.records]  # type: ignore[attr-defined]  # pytest-xdist's, on a worker's config
            self.config.workeroutput[TORCH_KEY] = fxdocument.loaded_torch_version()  # type: ignore[attr-defined]  # pytest-xdist's, on a worker's config
            return
        if self.path is not None:
            document = fxdocument.report_json(self.records, self.torch_version(), self.unfinished, self.durations)
            if self._write("--fx-report", self.path, fxdocument.dump_json(document)):
                self.written = self.path
        patches = [(r, (r.suggestion or {}).get("patch")) for r in self.records if (r.suggestion or {}).get("patch")]
        if self.patch_dir is not None and patches:  # each verified patch, a file that patch -p1 takes
            try:
                self.patch_dir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                warnings.warn(pytest.PytestWarning(f"pytest-fxtrace: could not make --fx-patch-dir={self.patch_dir}: {exc}"), stacklevel=1)
            else:
                for record, patch in patches:
                    self._write("--fx-patch-dir", self.patch_dir / patch_name(record), str(patch))
        if self.html_path is not None:
            from pytest_fxtrace.report.html import render_html

            created = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
            page = render_html(self.records, self.torch_version(), self.unfinished, created)
            if self._write("--fx-html", self.html_path, page):
                self.html_written = self.html_path
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary and (self.records or self.unfinished):
            from pytest_fxtrace.report.stepsummary import append_step_summary

            html = str(self.html_written) if self.html_written else None
            try:
                append_step_summary(summary, self.records, html_path=html, unfinished=self.unfinished)
            except OSError as exc:
                warnings.warn(
                    pytest.PytestWarning(f"pytest-fxtrace: could not append to GITHUB_STEP_SUMMARY={summary}: {exc}"),
                    stacklevel=1,
                )

    def _write(self, flag: str, path: Path, text: str) -> bool:
        try:
            fxreport.write_atomic(path, text)
        except OSError as exc:
            warnings.warn(pytest.PytestWarning(f"pytest-fxtrace: could not write {flag}={path}: {exc}"), stacklevel=1)
            return False
        return True

    def torch_version(self) -> str:
        """The report's ``torch``: the same in a serial and an xdist run, and no reason
        to import torch."""
        return fxdocument.loaded_torch_version() or self.worker_torch or fxdocument.installed_torch_version()

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.is_worker:
            return
        verbosity = self.config.get_verbosity()
        lines = summary.summary_lines(
            self.records,
            verbosity=verbosity,
            width=self._width(),
            unfinished=self.unfinished,
            report_path=str(self.written) if self.written else None,
            html_path=str(self.html_written) if self.html_written else None,
        )
        if lines:
            if verbosity >= 0:
                terminalreporter.write_sep("=", "fxtrace summary")
            for line in lines:
                for span in line:
                    terminalreporter.write(span.text, **({span.style: True} if span.style else {}))
                terminalreporter.line("")
        if os.environ.get("GITHUB_ACTIONS") == "true":
            root = find_repo_root(self.config.rootpath)
            for command in annotation_lines(self.records, root, self.config.rootpath):
                terminalreporter.write_line(command)


    def _width(self) -> int | None:
        """The terminal's width; None (nothing shortened) for a CI log, which has no width,
        unless COLUMNS asks for one."""
        if "COLUMNS" not in os.environ and not _is_terminal(sys.__stdout__):
            return None
        return self.config.get_terminal_writer().fullwidth


def _is_terminal(stream: Any) -> bool:
    try:
        return stream is not None and os.isatty(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return False


def usage_error(config: pytest.Config, message: str) -> pytest.UsageError:
    """The ``UsageError`` to raise for ``message``; on an xdist worker, also handed to the
    controller (``XdistController`` raises it there)."""
    output = getattr(config, "workeroutput", None)
    if output is not None:
        output[USAGE_KEY] = message
    return pytest.UsageError(message)


def register(config: pytest.Config) -> FxSession:
    """Called from ``plugin.pytest_configure``; the plugins that serve xdist's
    controller and pytest-html are registered beside it there."""
    session = FxSession(config)
    config.stash[SESSION] = session
    manager = config.pluginmanager
    manager.register(session, "fxtrace-session")
    config.add_cleanup(lambda: manager.unregister(session))
    return session
