"""The journal (``--fx-journal=PATH``): each finished test's check records, appended to a
JSON-lines file as the test ends, so a run killed at a CI time limit (or by the OOM killer)
keeps what it finished; ``--fx-resume`` skips what the journal holds, and
``python -m pytest_fxtrace.merge`` reads it as a report.

The first line names the file (``{"fxtrace_journal": 1}``); then one line per finished
test: ``{"nodeid", "torch", "duration", "records"}``, ``records`` in the full form
``CheckRecord.to_wire`` gives (what an xdist worker hands over), so a resumed run's report
and HTML page are the same as one run's. Each line is one ``write`` and an ``fsync``: a
kill leaves at most a torn last line, which reading ignores.

Pytest-free and torch-free, like the rest of ``report/``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pytest_fxtrace.report.records import REPORT_VERSION, CheckRecord, sort_records

JOURNAL_VERSION = 1
HEADER = {"fxtrace_journal": JOURNAL_VERSION}


class JournalError(Exception):
    """A file that is not a journal this pytest-fxtrace can read; the message says why."""


@dataclasses.dataclass(frozen=True)
class Entry:
    """One finished test: its records, its seconds (setup + call + teardown) and the torch
    its checks ran with."""

    nodeid: str
    records: tuple[CheckRecord, ...]
    duration: float = 0.0
    torch: str | None = None

    def line(self) -> str:
        data = {
            "nodeid": self.nodeid,
            "torch": self.torch,
            "duration": round(self.duration, 6),
            "records": [record.to_wire() for record in self.records],
        }
        return json.dumps(data, separators=(",", ":")) + "\n"

    @classmethod
    def from_line(cls, data: dict[str, Any]) -> Entry:
        return cls(
            nodeid=str(data["nodeid"]),
            records=tuple(CheckRecord.from_wire(record) for record in data["records"]),
            duration=float(data.get("duration") or 0.0),
            torch=data.get("torch"),
        )


class JournalWriter:
    """Appends entries to ``path``, each on disk before ``write`` returns.

    Example::

        journal = JournalWriter(Path("fx-journal.jsonl"), append=False)
        journal.write(Entry("zoo/timm::resnet18", records, 1.2, "2.14.1"))
    """

    def __init__(self, path: Path, append: bool) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fresh = not append or not path.exists() or path.stat().st_size == 0
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if not append else 0)
        self.path = path
        self.fd: int | None = os.open(path, flags, 0o644)
        self.written = 0
        if fresh:
            self._append(json.dumps(HEADER) + "\n")
        elif not path.read_bytes().endswith(b"\n"):
            self._append("\n")  # after a line a kill cut short: the next entry starts a line of its own

    def write(self, entry: Entry) -> None:
        self._append(entry.line())
        self.written += 1

    def _append(self, text: str) -> None:
        if self.fd is None:
            return
        os.write(self.fd, text.encode("utf-8"))  # one write: a kill never leaves half of two lines
        os.fsync(self.fd)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def read_journal(path: Path) -> tuple[list[Entry], int]:
    """The entries of the journal at ``path`` (the last one of a test wins) and the number
    of lines that were cut short (a kill while writing: at most the last); ``([], 0)``
    when there is no file yet. JournalError for a file that is not a journal."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return [], 0
    except OSError as exc:
        raise JournalError(f"cannot read {path}: {exc}") from None
    lines = text.splitlines()
    if not lines:
        return [], 0
    try:
        header = json.loads(lines[0])
    except ValueError:
        header = None
    if not isinstance(header, dict) or "fxtrace_journal" not in header:
        raise JournalError(
            f"{path} is not a pytest-fxtrace journal (its first line is not {json.dumps(HEADER)})"
        )
    if header["fxtrace_journal"] != JOURNAL_VERSION:
        raise JournalError(
            f"{path}: journal version {header['fxtrace_journal']!r}, this pytest-fxtrace reads {JOURNAL_VERSION}"
        )
    entries: dict[str, Entry] = {}
    torn = 0
    for line in lines[1:]:
        try:
            entry = Entry.from_line(json.loads(line))
        except (ValueError, KeyError, TypeError):
            torn += 1
            continue
        entries.pop(entry.nodeid, None)
        entries[entry.nodeid] = entry
    return list(entries.values()), torn


def is_journal(text: str) -> bool:
    """Whether ``text`` (a file's start) is a journal's."""
    first = text.lstrip().partition("\n")[0]
    try:
        header = json.loads(first)
    except ValueError:
        return False
    return isinstance(header, dict) and "fxtrace_journal" in header


def journal_document(entries: Sequence[Entry]) -> dict[str, Any]:
    """The ``--fx-report`` document of what the journal holds, as the run would have
    written it had it finished with these tests."""
    records = sort_records(record for entry in entries for record in entry.records)
    torches = sorted({entry.torch for entry in entries if entry.torch})
    durations = {entry.nodeid: entry.duration for entry in entries}
    document: dict[str, Any] = {
        "version": REPORT_VERSION,
        "torch": ", ".join(torches),
        "results": [record.to_json() for record in records],
    }
    ordered = {r.nodeid: durations[r.nodeid] for r in records}
    if ordered:
        document["durations"] = ordered
    return document


def records_of(entries: Iterable[Entry]) -> list[CheckRecord]:
    return [record for entry in entries for record in entry.records]
