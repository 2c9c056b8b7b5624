"""``--fx-baseline=PATH``: adopt the gate on a zoo that is not clean yet, and ratchet.

The file lists the known non-passing checks, one entry each (``nodeid``, ``backend``,
``model``, ``status``, ``category``). A check that fails as its entry says is
``xfailed`` (baselined); a failure with no entry, or of another status or category,
fails the test; a check that now passes while its test has an entry is ``xpassed``
and the test fails naming the entry to delete. ``--fx-baseline-update`` rewrites the
file from the run instead: entries of the tests that ran are replaced by what they
did, entries of tests that did not run (deselected, another shard) are kept. The file
is written once, by the controller under xdist, atomically, sorted, so a serial and
an ``-n 2`` run write the same bytes.

Works for every check (marked tests, the fixture, zoo items); a test with its own
``xfail=`` option is judged by that option, not by the baseline. Imports no torch.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_fxtrace.report.records import write_atomic
from pytest_fxtrace.types import EXPECTED, Judgement, Status

if TYPE_CHECKING:
    from pytest_fxtrace.options import TraceOptions
    from pytest_fxtrace.tracereport import TraceReport

VERSION = 1
BACKEND = "fx"
BASELINE = pytest.StashKey["Baseline | None"]()


@dataclasses.dataclass(frozen=True)
class Entry:
    """One known non-passing check."""

    nodeid: str
    backend: str
    model: str
    status: str
    category: str | None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def sort_key(self) -> tuple[str, str, str, str, str]:
        # null sorts first (None and a string do not compare)
        return (self.nodeid, self.backend, self.model or "", self.status, self.category or "")

    def describe(self) -> str:
        category = f" ({self.category})" if self.category else ""
        backend = f", {self.backend}" if self.backend != BACKEND else ""
        return f"{self.nodeid} [{self.model}{backend}]: {self.status}{category}"


EXAMPLE = (
    '{"version": 1, "entries": [{"nodeid": "tests/test_models.py::test_resnet", "backend": "fx", '
    '"model": "models.ResNet", "status": "untraceable", "category": "control-flow"}]}'
)


class BaselineFormatError(ValueError):
    """What in a baseline file is not as the format says, and where."""


def parse_entries(document: object) -> list[Entry]:
    """The entries of a baseline file's JSON ``document`` (docs/zoo.md, "Baseline file
    format"); ``BaselineFormatError`` says what is wrong and where."""
    if not isinstance(document, dict):
        raise BaselineFormatError(f"it holds {_kind(document)}, not an object with \"version\" and \"entries\"")
    if "entries" not in document:
        raise BaselineFormatError('it has no "entries"')
    listed = document["entries"]
    if not isinstance(listed, list):
        raise BaselineFormatError(f'"entries" is {_kind(listed)}, not a list')
    return [_entry(e, f"entries[{i}]") for i, e in enumerate(listed)]


def _entry(value: object, where: str) -> Entry:
    if not isinstance(value, dict):
        raise BaselineFormatError(f"{where} is {_kind(value)}, not an object")
    for key in ("nodeid", "status"):
        if key not in value:
            raise BaselineFormatError(f'{where} has no "{key}"')
    fields: dict[str, str | None] = {}
    for key in ("nodeid", "backend", "model", "status", "category"):
        found = value.get(key)
        required = key in ("nodeid", "status")
        if not (isinstance(found, str) and (found or not required) or found is None and not required):
            wanted = "a non-empty string" if required else "a string or null"
            raise BaselineFormatError(f'{where}["{key}"] is {_kind(found)}, not {wanted}')
        fields[key] = found
    return Entry(
        nodeid=str(fields["nodeid"]),
        backend=fields["backend"] or BACKEND,
        model=fields["model"] or "",
        status=str(fields["status"]),
        category=fields["category"] or None,
    )


def _kind(value: object) -> str:
    """How a JSON value reads in a message: 'a list', 'null', 'the string ""'."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return f"the string {json.dumps(value)}"
    names = {dict: "an object", list: "a list", bool: "a boolean", int: "a number", float: "a number"}
    return names.get(type(value), type(value).__name__)


class Baseline:
    """The entries of one baseline file, and the verdicts they give."""

    def __init__(self, path: Path, entries: Iterable[Entry], update: bool) -> None:
        self.path = path
        self.update = update
        self.entries = sorted(set(entries), key=Entry.sort_key)
        self._by_test: dict[tuple[str, str], list[Entry]] = {}
        for entry in self.entries:
            self._by_test.setdefault((entry.nodeid, entry.backend), []).append(entry)
        self.written: str | None = None

    @classmethod
    def load(cls, path: Path, update: bool, option: str = "--fx-baseline") -> Baseline:
        """The baseline at ``path``; a usage error, naming ``option`` (where the path was
        given), for a file that is missing or not in the format."""
        where = f"{option}={path}"
        if not path.exists():
            if update:
                return cls(path, (), update)
            raise pytest.UsageError(
                f"{where}: no such file; create it from this run with "
                f"--fx-baseline={path} --fx-baseline-update"
            )
        try:
            entries = parse_entries(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            if isinstance(exc, OSError):
                problem = f"cannot be read: {exc.strerror or exc}"
            elif isinstance(exc, json.JSONDecodeError):
                problem = f"is not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
            elif isinstance(exc, UnicodeDecodeError):
                problem = "is not UTF-8 text"
            else:
                problem = f"is not a pytest-fxtrace baseline: {exc}"
            raise pytest.UsageError(
                f"{where}: the file {problem}.\n"
                f"  A baseline is one JSON object, e.g. {EXAMPLE}\n"
                "  (nodeid and status required; docs/zoo.md, \"Baseline file format\"). Correct it, "
                f"or delete it and write it from a run with --fx-baseline={path} --fx-baseline-update"
            ) from None
        return cls(path, entries, update)

    def entries_for(self, nodeid: str, backend: str = BACKEND) -> list[Entry]:
        return self._by_test.get((nodeid, backend), [])

    def _entry_for(self, report: TraceReport, entries: Sequence[Entry]) -> Entry | None:
        for entry in entries:
            if entry.model == report.model:
                return entry
        return entries[0] if len(entries) == 1 else None

    def judge(self, nodeid: str, reports: list[TraceReport], verbose: int) -> Judgement | None:
        """The baseline's judgement of a test's reports, or None when it has nothing to
        say (no entry and nothing failed). Entries are per backend: a check is judged by
        the entries of its own backend."""
        backends = list(dict.fromkeys(getattr(r, "backend", BACKEND) for r in reports)) or [BACKEND]
        entries = [entry for backend in backends for entry in self.entries_for(nodeid, backend)]
        failures = [r for r in reports if not r.ok]
        if not entries and not failures:
            return None
        if self.update:
            if failures:
                return Judgement("xfail", f"recorded in the baseline {self.path}: " + "; ".join(
                    f"{r.status} ({r.category})" if r.category else r.status for r in failures
                ))
            return Judgement("pass", "")
        unexpected = []
        matched: set[Entry] = set()
        for report in failures:
            entry = self._entry_for(report, [e for e in entries if e.backend == getattr(report, "backend", BACKEND)])
            if entry is None:
                unexpected.append(f"{report.describe(verbose)}\n  (not in the baseline {self.path})")
                continue
            matched.add(entry)
            if (entry.status, entry.category) != (report.status, report.category):
                unexpected.append(
                    f"{report.describe(verbose)}\n  (the baseline {self.path} expects "
                    f"{entry.status}{f' ({entry.category})' if entry.category else ''}: the failure changed)"
                )
        if unexpected:
            return Judgement("fail", "\n\n".join(unexpected))
        stale = [e for e in entries if e not in matched]
        if stale:
            names = "\n".join(f"  {entry.describe()}" for entry in stale)
            return Judgement(
                "fail",
                f"[XPASS(strict)] baselined as failing, but it passes now: delete this entry from "
                f"{self.path} (or run --fx-baseline-update):\n{names}",
                failed_as=Status.XFAILED,
                passed_as=Status.XPASSED,
            )
        message = f"baselined in {self.path}: " + "; ".join(r.message for r in failures)
        return Judgement("xfail", message, failed_as=Status.XFAILED)

    def rewrite(self, records: Iterable[Any]) -> tuple[int, int, int]:
        """Write the file from the run's records; (entries, added, removed)."""
        records = list(records)
        ran = {(r.nodeid, r.backend) for r in records}
        kept = [e for e in self.entries if (e.nodeid, e.backend) not in ran]
        fresh = [
            Entry(r.nodeid, r.backend, r.model, r.status, r.category)
            for r in records
            if r.status not in EXPECTED and r.status != "xpassed"
        ]
        entries = sorted(set(kept + fresh), key=Entry.sort_key)
        document = {"version": VERSION, "entries": [e.to_json() for e in entries]}
        write_atomic(self.path, json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
        before = set(self.entries)
        return len(entries), len(set(entries) - before), len(before - set(entries))


# -- pytest ---------------------------------------------------------------------------


def addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fxtrace")
    group.addoption(
        "--fx-baseline",
        metavar="PATH",
        default=None,
        help="a JSON file of known non-passing checks: those xfail, new ones fail, fixed ones xpass",
    )
    group.addoption(
        "--fx-baseline-update",
        action="store_true",
        default=False,
        help="rewrite the --fx-baseline file from this run (entries of tests not run are kept)",
    )
    parser.addini("fxtrace_baseline", "see --fx-baseline", default="")


def register(config: pytest.Config) -> None:
    """Called from ``plugin.pytest_configure``."""
    value = config.getoption("fx_baseline") or config.getini("fxtrace_baseline") or None
    update = bool(config.getoption("fx_baseline_update"))
    if value is None:
        if update:
            raise pytest.UsageError("--fx-baseline-update needs --fx-baseline=PATH (or ini fxtrace_baseline)")
        config.stash[BASELINE] = None
        return
    from_option = bool(config.getoption("fx_baseline"))
    root = config.invocation_params.dir if from_option else config.rootpath
    path = Path(os.path.normpath(Path(root, os.path.expanduser(str(value)))))
    baseline = Baseline.load(path, update, "--fx-baseline" if from_option else "ini fxtrace_baseline")
    config.stash[BASELINE] = baseline
    if update and not hasattr(config, "workerinput"):
        writer = BaselineWriter(config, baseline)
        config.pluginmanager.register(writer, "fxtrace-baseline")
        config.add_cleanup(lambda: config.pluginmanager.unregister(writer))


def judge(item: pytest.Item, reports: list[TraceReport], options: TraceOptions, verbose: int) -> Judgement | None:
    """The baseline's verdict on a test's reports (None: judge them as usual)."""
    baseline = item.config.stash.get(BASELINE, None)
    if baseline is None or options.xfail:
        return None
    return baseline.judge(item.nodeid, reports, verbose)


class BaselineWriter:
    """Controller only: rewrites the file once every record is in."""

    def __init__(self, config: pytest.Config, baseline: Baseline) -> None:
        self.config = config
        self.baseline = baseline
        self.line = ""

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        from pytest_fxtrace.plugin.session import SESSION

        records = self.config.stash[SESSION].records
        try:
            total, added, removed = self.baseline.rewrite(records)
        except OSError as exc:
            self.line = f"fxtrace baseline: could not write {self.baseline.path}: {exc}"
            return
        self.line = f"fxtrace baseline: wrote {self.baseline.path} ({total} entries, {added} added, {removed} removed)"

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.line:
            terminalreporter.write_line(self.line)
