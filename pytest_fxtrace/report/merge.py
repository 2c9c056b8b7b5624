"""Merge the ``--fx-report`` JSON files of several CI shards into one report and one
summary, as if one job had run every test.

    python -m pytest_fxtrace.merge shard-0.json shard-1.json -o fx-report.json --html fx-report.html
    python -m pytest_fxtrace.merge shard-*.json --baseline fx-baseline.json   # as one --fx-baseline-update
    python -m pytest_fxtrace.merge shard-*.json --durations .test_durations   # for pytest-split
    python -m pytest_fxtrace.merge shard-*.json --skips-table                 # the failing checks, as Markdown
    python -m pytest_fxtrace.merge shard-*.json --dims-table                  # dimensions asked dynamic, as Markdown
    python -m pytest_fxtrace.merge zoo-*.json --operators-table               # outcomes, and operators no backend translates
    python -m pytest_fxtrace.merge fx-journal.jsonl -o fx-report.json         # what a killed run finished

Records are ordered by node id (each test's own records keep their order), so the
result does not depend on how the tests were split. A test found in two reports (the
shards overlapped) is an error; reports of different torch versions are an error
unless ``--allow-mixed-torch``. Exit status: 0 when every merged check passed or
xfailed, 1 when one failed (as the pytest run would have), 2 for bad input.
Imports no torch.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_fxtrace.report.baseline import baseline_text, read_entries, updated_entries
from pytest_fxtrace.report.dimstable import dims_table
from pytest_fxtrace.report.document import dump_json
from pytest_fxtrace.report.durations import DurationsError, updated_durations
from pytest_fxtrace.report.html import render_html
from pytest_fxtrace.report.journal import JournalError, is_journal, journal_document, read_journal
from pytest_fxtrace.report.operatorstable import operators_table
from pytest_fxtrace.report.records import REPORT_VERSION, CheckRecord, Unfinished, write_atomic
from pytest_fxtrace.report.skips import skips_table
from pytest_fxtrace.report.summary import plain, summary_lines


class MergeError(Exception):
    """Reports that cannot be merged; the message says which and why."""


def merge(documents: Sequence[tuple[str, dict[str, Any]]], allow_mixed_torch: bool = False) -> dict[str, Any]:
    """One report document from ``(name, document)`` pairs.

    Example::

        merge([("a.json", json.load(open("a.json"))), ("b.json", json.load(open("b.json")))])
    """
    if not documents:
        raise MergeError("no reports to merge")
    versions = {name: doc.get("version") for name, doc in documents}
    for name, version in versions.items():
        if version != REPORT_VERSION:
            raise MergeError(f"{name}: report version {version!r}, this pytest-fxtrace writes {REPORT_VERSION}")
    torches = {doc.get("torch") for _, doc in documents}
    if len(torches) > 1 and not allow_mixed_torch:
        raise MergeError(
            "the reports come from different torch versions ("
            + ", ".join(f"{name}: {doc.get('torch')}" for name, doc in documents)
            + "); pass --allow-mixed-torch to merge them anyway"
        )
    owner: dict[str, tuple[int, str]] = {}
    results: list[dict[str, Any]] = []
    unfinished: list[dict[str, Any]] = []
    durations: dict[str, float] = {}
    for index, (name, doc) in enumerate(documents):
        for record in doc.get("results", []):
            nodeid = record["nodeid"]
            if nodeid in owner and owner[nodeid][0] != index:
                raise MergeError(f"{nodeid} is in both {owner[nodeid][1]} and {name}: the shards overlap")
            owner[nodeid] = (index, name)
            results.append(record)
        unfinished.extend(doc.get("unfinished", []))
        durations.update(doc.get("durations") or {})
    results.sort(key=lambda r: r["nodeid"])  # stable: a test's own records keep their order
    document: dict[str, Any] = {
        "version": REPORT_VERSION,
        "torch": ", ".join(sorted(str(t) for t in torches)),
        "results": results,
    }
    if durations:
        document["durations"] = dict(sorted(durations.items()))
    if unfinished:
        document["unfinished"] = sorted(unfinished, key=lambda u: u["nodeid"])
    return document


def records(document: dict[str, Any]) -> list[CheckRecord]:
    """The merged document's records in its order; a test's second model gets its own
    index (its anchor in the HTML page), as in one run."""
    seen: collections.Counter[str] = collections.Counter()
    out = []
    for index, data in enumerate(document["results"]):
        record = CheckRecord.from_json(data)
        out.append(dataclasses.replace(record, order=(index, seen[record.nodeid])))
        seen[record.nodeid] += 1
    return out


def summary(document: dict[str, Any], verbosity: int = 0, report_path: str | None = None) -> list[str]:
    """The terminal summary of a merged report, as pytest prints it."""
    unfinished = [Unfinished(u["nodeid"], u["reason"]) for u in document.get("unfinished", [])]
    return [
        plain(line)
        for line in summary_lines(
            records(document), verbosity=verbosity, width=None, unfinished=unfinished, report_path=report_path
        )
    ]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_fxtrace.merge",
        description="Merge pytest-fxtrace JSON reports (--fx-report) of CI shards into one.",
    )
    parser.add_argument(
        "reports", nargs="+", type=Path, help="the shards' --fx-report files, or --fx-journal files (JSON lines)"
    )
    parser.add_argument("-o", "--output", type=Path, default=None, help="write the merged report here")
    parser.add_argument("--html", type=Path, default=None, help="write the merged HTML page here (as --fx-html)")
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        metavar="PATH",
        help="rewrite this --fx-baseline file (the one the shards ran with) from the reports, "
        "as one unsharded --fx-baseline-update would",
    )
    parser.add_argument(
        "--durations",
        type=Path,
        default=None,
        metavar="PATH",
        help="write the checked tests' durations here, as pytest-split's .test_durations (its other entries kept)",
    )
    parser.add_argument(
        "--skips-table",
        action="store_true",
        help="print the checks that did not pass as a Markdown table (class, backend, category, file:line, "
        "submodule, reason, verified fix) instead of the summary",
    )
    parser.add_argument(
        "--dims-table",
        action="store_true",
        help="print the dimensions asked to stay dynamic (dynamic=, --fx-dynamic) as Markdown: checks per "
        "dimension and verdict, and the statements that pin or break one most often, instead of the summary",
    )
    parser.add_argument(
        "--operators-table",
        action="store_true",
        help="print the checks per backend by outcome (passed, each failing category) and the operators a "
        "backend has no translation for (missing-operator), by the models they stop, as Markdown, instead of the summary",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="every check in the summary")
    parser.add_argument("--allow-mixed-torch", action="store_true", help="merge reports of different torch versions")
    return parser


def _updated_baseline(path: Path, document: dict[str, Any]) -> tuple[str, int, int, int]:
    """The text of the baseline at ``path`` rewritten from the merged records, and its
    (entries, added, removed); paths of break sites are taken relative to this folder, as
    the shards' rootdir."""
    try:
        before = set(read_entries(path))
        entries = updated_entries(before, records(document), Path.cwd())
    except (OSError, ValueError) as exc:  # a file that is no baseline; an entry it lacks
        raise MergeError(f"--baseline {path}: {exc}") from None
    return baseline_text(entries), len(entries), len(set(entries) - before), len(before - set(entries))


def _read(paths: Sequence[Path]) -> list[tuple[str, dict[str, Any]]]:
    documents = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
            if is_journal(text):  # a killed run's journal: the report of what it finished
                entries, torn = read_journal(path)
                if torn:
                    print(f"pytest-fxtrace merge: {path}: ignored {torn} line cut short (a killed writer)", file=sys.stderr)
                documents.append((str(path), journal_document(entries)))
            else:
                documents.append((str(path), json.loads(text)))
        except (OSError, ValueError, JournalError) as exc:
            raise MergeError(f"cannot read {path}: {exc}") from None
    return documents


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:  # every input read and checked before anything is written
        try:
            document = merge(_read(args.reports), allow_mixed_torch=args.allow_mixed_torch)
        except (KeyError, TypeError) as exc:
            raise MergeError(str(exc)) from None
        durations = updated_durations(args.durations, document.get("durations") or {}) if args.durations else None
        baseline = _updated_baseline(args.baseline, document) if args.baseline else None
    except (MergeError, DurationsError) as exc:
        where = "--durations " if isinstance(exc, DurationsError) else ""
        print(f"pytest-fxtrace merge: {where}{exc}", file=sys.stderr)
        return 2
    if args.output is not None:
        write_atomic(args.output, dump_json(document))
    if args.html is not None:
        unfinished = [Unfinished(u["nodeid"], u["reason"]) for u in document.get("unfinished", [])]
        write_atomic(args.html, render_html(records(document), document["torch"], unfinished))
    if args.skips_table:
        lines = skips_table(records(document)) or ["every check passed: no skips"]
    elif args.dims_table:
        lines = dims_table(records(document)) or ["no check judged a dimension (ask with dynamic= or --fx-dynamic)"]
    elif args.operators_table:
        lines = operators_table(records(document)) or ["no check in the reports"]
    else:
        lines = summary(document, args.verbose, str(args.output) if args.output else None)
    if durations is not None:
        write_atomic(args.durations, durations[0])
        lines.append(f"durations: wrote {args.durations} ({durations[1]} tests)")
    if baseline is not None:
        write_atomic(args.baseline, baseline[0])
        lines.append(f"baseline: wrote {args.baseline} ({baseline[1]} entries, {baseline[2]} added, {baseline[3]} removed)")
    for line in lines:
        print(line)
    failed = any(record.failed for record in records(document)) or bool(document.get("unfinished"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
