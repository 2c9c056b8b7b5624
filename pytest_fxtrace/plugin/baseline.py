"""``--fx-baseline=PATH``: adopt the gate on a zoo that is not clean yet, and ratchet.

The file lists the known non-passing checks, one entry each (``nodeid``, ``backend``,
``model``, ``status``, ``category``; a compile check's entry also its graph-break
``sites``). A check that fails as its entry says is ``xfailed`` (baselined); a failure
with no entry, or of another status or category, fails the test; a check that now passes
while its test has an entry is ``xpassed`` and the test fails naming the entry to delete.

A compile check is judged by its break sites (``report/sites.py`` says what a site is known
by): a site its entry does not hold fails the test even when the count is unchanged (one
site fixed, another added), and a site of the entry that no longer breaks makes the check
``xpassed``, naming the site to delete. Its category follows the first site Dynamo meets, so
the sites, not the category, are compared (only a recompile failure, ``specialization``,
against a break failure is a changed category). An entry without ``sites`` (a file written
before they were) is judged by status and category, as every other backend's. ``--fx-baseline-update`` rewrites the
file from the run instead: entries of the tests that ran are replaced by what they
did, entries of tests that did not run (deselected, another shard) are kept. The file
is written once, by the controller under xdist, atomically, sorted, so a serial and
an ``-n 2`` run write the same bytes.

Works for every check (marked tests, the fixture, zoo items); a test with its own
``xfail=`` option is judged by that option, not by the baseline. Imports no torch.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_fxtrace.report.baseline import (
    BACKEND,
    EXAMPLE,
    Dim,
    Entry,
    Site,
    baseline_text,
    dims_of,
    entry_for,
    locked,
    parse_entries,
    read_entries,
    updated_entries,
)
from pytest_fxtrace.report.records import breaks_json, write_atomic
from pytest_fxtrace.report.sites import break_text, site_key, site_path
from pytest_fxtrace.types import Category, Judgement, Status

if TYPE_CHECKING:
    from pytest_fxtrace.options import TraceOptions
    from pytest_fxtrace.report.records import CheckRecord
    from pytest_fxtrace.tracereport import TraceReport

BASELINE = pytest.StashKey["Baseline | None"]()


class Baseline:
    """The entries of one baseline file, and the verdicts they give."""

    def __init__(self, path: Path, entries: Iterable[Entry], update: bool, rootdir: Path | None = None) -> None:
        self.path = path
        self.update = update
        self.rootdir = rootdir if rootdir is not None else path.parent
        self.entries = sorted(set(entries), key=Entry.sort_key)
        self._by_test: dict[tuple[str, str], list[Entry]] = {}
        for entry in self.entries:
            self._by_test.setdefault((entry.nodeid, entry.backend), []).append(entry)
        self.written: str | None = None

    @classmethod
    def load(cls, path: Path, update: bool, option: str = "--fx-baseline", rootdir: Path | None = None) -> Baseline:
        """The baseline at ``path``; a usage error, naming ``option`` (where the path was
        given), for a file that is missing or not in the format; ``rootdir``: what site
        paths are relative to (pytest's rootdir; default: the file's folder)."""
        where = f"{option}={path}"
        if not path.exists():
            if update:
                return cls(path, (), update, rootdir)
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
        return cls(path, entries, update, rootdir)

    def entries_for(self, nodeid: str, backend: str = BACKEND) -> list[Entry]:
        return self._by_test.get((nodeid, backend), [])

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
        fixed: dict[int, tuple[str, list[str]]] = {}  # report index -> what no longer fails, each in words
        for index, report in enumerate(reports):
            if report.ok:
                continue
            entry = entry_for(report.model, [e for e in entries if e.backend == getattr(report, "backend", BACKEND)])
            if entry is None:
                unexpected.append(f"{report.describe(verbose)}\n  (not in the baseline {self.path})")
                continue
            matched.add(entry)
            changed, gone = self._compare(entry, report)
            if changed:
                unexpected.append(f"{report.describe(verbose)}\n  {changed}")
            elif gone:
                fixed[index] = gone
        if unexpected:
            return Judgement("fail", "\n\n".join(unexpected))
        stale = [e for e in entries if e not in matched]
        if stale or fixed:
            return self._xpassed(stale, fixed)
        message = f"baselined in {self.path}: " + "; ".join(r.message for r in failures)
        return Judgement("xfail", message, failed_as=Status.XFAILED)

    def _compare(self, entry: Entry, report: TraceReport) -> tuple[str, tuple[str, list[str]] | None]:
        """How a failing check differs from its entry: what changed ("" if nothing did), and
        what of the entry no longer fails (its headline and items: break sites that no longer
        break, dimensions that stay dynamic now), or None."""
        dims = dims_of([d.to_json() for d in report.dims] if report.dims is not None else None)
        if entry.dims is not None and dims is not None:
            return self._compare_dims(entry, report, dims)
        changed, sites = self._compare_sites(entry, report)
        gone = (_gone_text(entry, sites, self.path), [_site_text(site) for site in sites]) if sites else None
        return changed, gone

    def _compare_dims(self, entry: Entry, report: TraceReport, now: tuple[Dim, ...]) -> tuple[str, tuple[str, list[str]] | None]:
        """A check of dimensions asked to stay dynamic, judged by them: one pinned or broken
        that its entry does not hold fails the test; one of the entry's that holds now is gone."""
        known = entry.dims or ()
        new = [d for d in now if d not in known]
        fixed = [d for d in known if d not in now]
        gone = None
        if fixed:
            many = len(fixed) != 1
            gone = (
                f"{len(fixed)} dimension{'s' if many else ''} baselined for {entry.nodeid} [{entry.model}, "
                f"{entry.backend}] no longer fail{'' if many else 's'}: delete {'them' if many else 'it'} from its "
                f"entry in {self.path} (or run --fx-baseline-update)",
                [d.text() for d in fixed],
            )
        if entry.status != report.status:
            return f"(the baseline {self.path} expects {_expected(entry)}: the failure changed)", gone
        if not new:
            return "", gone
        lines = "\n".join(f"    {d.text()}" for d in new)
        count = f"{len(new)} dimension{'s' if len(new) != 1 else ''} pinned or broken"
        return f"{count} not in the baseline {self.path} (its entry {entry.describe()}):\n{lines}", gone

    def _compare_sites(self, entry: Entry, report: TraceReport) -> tuple[str, list[Site]]:
        """A compile check judged by its break sites (others by status and category): what
        changed ("" if nothing did), and the entry's break sites that no longer break."""
        now = breaks_json(getattr(report, "graph_breaks", None), self.rootdir)
        if entry.sites is None or now is None:  # judged by status and category
            if (entry.status, entry.category) == (report.status, report.category):
                return "", []
            return f"(the baseline {self.path} expects {_expected(entry)}: the failure changed)", []
        new, gone = self._match(now, entry.sites)
        recompiling = Category.SPECIALIZATION.value
        if entry.status != report.status or (entry.category == recompiling) != (report.category == recompiling):
            return f"(the baseline {self.path} expects {_expected(entry)}: the failure changed)", gone
        if not new:
            return "", gone
        lines = [f"    {break_text({**site, 'path': site_path(site.get('path'), self.rootdir)})}" for site in new]
        lines += [f"    no longer breaks: {_site_text(site)}" for site in gone]
        count = f"{len(new)} new graph-break site{'s' if len(new) != 1 else ''}"
        return f"{count} not in the baseline {self.path} (its entry {entry.describe()}):\n" + "\n".join(lines), gone

    def _match(self, now: list[dict[str, Any]], known: Sequence[Site]) -> tuple[list[dict[str, Any]], list[Site]]:
        """(the sites of ``now`` not in ``known``, the sites of ``known`` not in ``now``), by
        identity (``site_key``); of several sites with one identity, one on the same line pairs first."""
        keys = [site_key(site.to_json(), self.rootdir) for site in known]
        left = list(range(len(known)))
        new = []
        unpaired = []
        for site in now:  # the same identity on the same line
            key = site_key(site, self.rootdir)
            same = next((i for i in left if keys[i] == key and known[i].line == site.get("line")), None)
            if same is None:
                unpaired.append((key, site))
            else:
                left.remove(same)
        for key, site in unpaired:  # the same identity elsewhere: a site that moved
            moved = next((i for i in left if keys[i] == key), None)
            if moved is None:
                new.append(site)
            else:
                left.remove(moved)
        return new, [known[i] for i in left]

    def _xpassed(self, stale: list[Entry], fixed: dict[int, tuple[str, list[str]]]) -> Judgement:
        """The test fails naming what to delete from the file: entries of checks that pass
        now, and break sites or dimensions that no longer fail (their checks are ``xpassed``)."""
        parts = []
        if stale:
            names = "\n".join(f"  {entry.describe()}" for entry in stale)
            parts.append(
                f"[XPASS(strict)] baselined as failing, but it passes now: delete this entry from "
                f"{self.path} (or run --fx-baseline-update):\n{names}"
            )
        settled = {}
        for index, (headline, items) in fixed.items():
            listed = "\n".join(f"    {item}" for item in items)
            parts.append(f"[XPASS(strict)] {headline}:\n{listed}")
            settled[index] = (Status.XPASSED, f"{headline}: " + "; ".join(items))
        return Judgement(
            "fail", "\n\n".join(parts), failed_as=Status.XFAILED, passed_as=Status.XPASSED, settled=settled
        )

    def rewrite(self, records: Iterable[CheckRecord]) -> tuple[int, int, int]:
        """Write the file from the run's records; (entries, added, removed). The file is read
        again under its lock: another shard may have written it since this run began, and
        its entries stand (report/baseline.py)."""
        with locked(self.path):
            before = set(read_entries(self.path))
            entries = updated_entries(before, records, self.rootdir)
            write_atomic(self.path, baseline_text(entries))
        return len(entries), len(set(entries) - before), len(before - set(entries))


def _expected(entry: Entry) -> str:
    return f"{entry.status}{f' ({entry.category})' if entry.category else ''}"


def _site_text(site: Site) -> str:
    return break_text({**site.to_json(), "id": None, "category": None})


def _gone_text(entry: Entry, gone: Sequence[Site], path: Path) -> str:
    count = f"{len(gone)} graph-break site{'s' if len(gone) != 1 else ''}"
    return (
        f"{count} baselined for {entry.nodeid} [{entry.model}, {entry.backend}] no longer "
        f"break{'s' if len(gone) == 1 else ''}: delete {'it' if len(gone) == 1 else 'them'} from its entry in "
        f"{path} (or run --fx-baseline-update)"
    )


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
    baseline = Baseline.load(path, update, "--fx-baseline" if from_option else "ini fxtrace_baseline", config.rootpath)
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
        except (OSError, ValueError) as exc:  # ValueError: another writer left no baseline there
            self.line = f"fxtrace baseline: could not write {self.baseline.path}: {exc}"
            return
        self.line = f"fxtrace baseline: wrote {self.baseline.path} ({total} entries, {added} added, {removed} removed)"

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.line:
            terminalreporter.write_line(self.line)
