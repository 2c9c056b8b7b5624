"""A progress line for long zoo runs: pytest's dots say neither how far a run of 1,200
models has got nor how long it has left.

Every ``--fx-zoo-progress`` seconds (ini ``fxtrace_zoo_progress``; default 60, 0 for never)
the process that reports (the xdist controller, or the only one) prints, as a zoo model
finishes::

    fxtrace zoo: 412/1205 models (34%), 37 failed, 9 min 12 s so far, about 17 min left

The estimate is the time so far per model times the models left. A run shorter than the
interval prints nothing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pytest

DEFAULT_INTERVAL = 60.0  # seconds


def addoption(group: Any, parser: pytest.Parser) -> None:
    group.addoption(
        "--fx-zoo-progress",
        metavar="SECONDS",
        default=None,
        help=f"print a zoo progress line (done / total, failures, time left) at most every SECONDS "
        f"(default {DEFAULT_INTERVAL:g}; 0: never)",
    )
    parser.addini("fxtrace_zoo_progress", "see --fx-zoo-progress (seconds)", default="")


def interval(config: pytest.Config) -> float:
    raw = config.getoption("fx_zoo_progress")
    written = f"--fx-zoo-progress={raw}"
    if raw is None:
        raw = config.getini("fxtrace_zoo_progress") or None
        written = f"ini fxtrace_zoo_progress = {raw}"
    if raw is None:
        return DEFAULT_INTERVAL
    try:
        seconds = float(raw)
        if seconds < 0 or seconds != seconds:
            raise ValueError
    except ValueError:
        raise pytest.UsageError(
            f"{written}: expected seconds (0 or more), e.g. --fx-zoo-progress=30"
        ) from None
    return seconds


def duration(seconds: float) -> str:
    """``seconds`` as a person reads a span: ``8 s``, ``9 min 12 s``, ``1 h 5 min``.

    Example::

        duration(552)  # '9 min 12 s'
    """
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


class ZooProgress:
    """Counts the zoo's models as their reports arrive and prints a line now and then."""

    def __init__(self, config: pytest.Config, prefixes: Sequence[str], every: float) -> None:
        self.config = config
        self.prefixes = tuple(prefixes)  # "zoo/<source>::": a zoo model's node id starts so
        self.every = every
        self.total = 0
        self.done = 0
        self.failed: set[str] = set()
        self.start: float | None = None
        self.last = 0.0

    def _zoo(self, nodeids: Sequence[str]) -> int:
        return sum(1 for nodeid in nodeids if nodeid.startswith(self.prefixes))

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.total = self._zoo([item.nodeid for item in session.items])

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: Sequence[str]) -> None:
        self.total = max(self.total, self._zoo(ids))  # each worker collects the same items

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not report.nodeid.startswith(self.prefixes):
            return
        now = time.monotonic()
        if self.start is None:
            self.start = self.last = now
        if report.failed:
            self.failed.add(report.nodeid)
        if report.when != "teardown":
            return
        self.done += 1
        if now - self.last >= self.every and self.done < self.total:
            self.last = now
            self._print(now - self.start)

    def line(self, elapsed: float) -> str:
        share = f"{100 * self.done // self.total}%" if self.total else "?"
        left = elapsed / self.done * (self.total - self.done)
        return (
            f"fxtrace zoo: {self.done}/{self.total} models ({share}), {len(self.failed)} failed, "
            f"{duration(elapsed)} so far, about {duration(left)} left"
        )

    def _print(self, elapsed: float) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        reporter.ensure_newline()  # after a serial run's dots
        if self.config.get_terminal_writer().width_of_current_line:
            reporter.line("")  # after xdist's dots, which ensure_newline does not know of
        reporter.write_line(self.line(elapsed))


def register(config: pytest.Config, sources: Sequence[str], zoo_dir: str) -> None:
    """On the reporting process of a zoo run, unless the interval is 0."""
    every = interval(config)
    if not every or hasattr(config, "workerinput"):
        return
    progress = ZooProgress(config, [f"{zoo_dir}/{source}::" for source in sources], every)
    config.pluginmanager.register(progress, "fxtrace-zoo-progress")
    config.add_cleanup(lambda: config.pluginmanager.unregister(progress))
