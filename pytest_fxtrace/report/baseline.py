"""The ``--fx-baseline`` file: its entries (one per known non-passing check), reading them
(``parse_entries``, ``read_entries``), and what ``--fx-baseline-update`` writes from a run's
records (``updated_entries``, ``baseline_text``): the entries of the tests the records hold
replaced by what they did, the others kept.

Pytest-free and torch-free: the plugin judges and rewrites with it (``plugin/baseline.py``),
and ``python -m pytest_fxtrace.merge --baseline`` rewrites a baseline from the shards'
reports, the bytes one unsharded ``--fx-baseline-update`` writes. A record the baseline
itself judged (``CheckRecord.baselined``: ``xfailed``, or ``xpassed`` for break sites that no
longer break) failed as its entry says, so the entry's status stands for the check's own.

Writers take a lock on the file's folder (``locked``) and read the file again under it, so
shards sharing a file system and writing one baseline at once each replace only their own
tests' entries.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_fxtrace.backends.spec import DEFAULT_BACKEND
from pytest_fxtrace.report.sites import site_path
from pytest_fxtrace.types import EXPECTED

if TYPE_CHECKING:
    from pytest_fxtrace.report.records import CheckRecord

VERSION = 1
BACKEND = DEFAULT_BACKEND


@dataclasses.dataclass(frozen=True)
class Site:
    """A graph-break site of a baselined compile check: what it is known by (its file, its
    submodule and its statement; ``report/sites.py``), and its line and torch's type, which
    the file keeps for people and the comparison leaves out (a line inserted above moves it)."""

    path: str | None
    line: int | None
    module: str
    type: str | None
    statement: str | None

    @classmethod
    def of(cls, site: Mapping[str, Any], rootdir: str | os.PathLike[str]) -> Site:
        """A record's site (``CheckRecord.graph_breaks``) as the baseline keeps it."""
        line = site.get("line")
        return cls(
            site_path(site.get("path"), rootdir),
            int(line) if line is not None else None,
            str(site.get("module") or ""),
            site.get("type"),
            site.get("statement"),
        )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def sort_key(self) -> tuple[str, int, str, str]:
        return (self.path or "", self.line or 0, self.module, self.statement or "")


@dataclasses.dataclass(frozen=True, order=True)
class Dim:
    """A requested dimension a baselined check fails on (``specialized`` or ``unsound``), known
    by its input, its dimension and its verdict (issue 39)."""

    input: str
    dim: int
    verdict: str

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def text(self) -> str:
        return f"`{self.input}` dim {self.dim} {self.verdict}"


@dataclasses.dataclass(frozen=True)
class Entry:
    """One known non-passing check; ``sites``: a compile check's graph-break sites (None: not
    a compile check, or an entry written before entries held them)."""

    nodeid: str
    backend: str
    model: str
    status: str
    category: str | None
    sites: tuple[Site, ...] | None = None
    # the dimensions asked to stay dynamic that the check fails on (None: it asked for none)
    dims: tuple[Dim, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if self.sites is None:  # the other backends' entries keep their five keys
            del out["sites"]
        if self.dims is None:
            del out["dims"]
        return out

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
    version = document.get("version", VERSION)
    if version != VERSION:
        raise BaselineFormatError(
            f'its "version" is {version!r}: this pytest-fxtrace reads version {VERSION} (a file written by '
            "another release of pytest-fxtrace, or edited by hand); rewrite it with --fx-baseline-update"
        )
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
        sites=_sites(value.get("sites"), where),
        dims=_dims(value.get("dims"), where),
    )


def _dims(value: object, where: str) -> tuple[Dim, ...] | None:
    """An entry's ``dims`` (absent or null: an entry without them)."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise BaselineFormatError(f'{where}["dims"] is {_kind(value)}, not a list')
    dims = []
    for i, item in enumerate(value):
        place = f'{where}["dims"][{i}]'
        if not isinstance(item, dict):
            raise BaselineFormatError(f"{place} is {_kind(item)}, not an object")
        name, dim, verdict = item.get("input"), item.get("dim"), item.get("verdict")
        if not isinstance(name, str) or not isinstance(verdict, str):
            raise BaselineFormatError(f'{place} needs "input" and "verdict" strings')
        if not isinstance(dim, int) or isinstance(dim, bool):
            raise BaselineFormatError(f'{place}["dim"] is {_kind(dim)}, not a whole number')
        dims.append(Dim(name, dim, verdict))
    return tuple(sorted(dims))


_SITE_KEYS = {"path": (str, type(None)), "line": (int, type(None)), "module": (str,), "type": (str, type(None)),
              "statement": (str, type(None))}  # fmt: skip


def _sites(value: object, where: str) -> tuple[Site, ...] | None:
    """An entry's ``sites`` (absent or null: an entry without them)."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise BaselineFormatError(f'{where}["sites"] is {_kind(value)}, not a list')
    sites = []
    for i, site in enumerate(value):
        place = f'{where}["sites"][{i}]'
        if not isinstance(site, dict):
            raise BaselineFormatError(f"{place} is {_kind(site)}, not an object")
        for key, kinds in _SITE_KEYS.items():
            found = site.get(key, "" if key == "module" else None)
            if not isinstance(found, kinds) or isinstance(found, bool):
                wanted = "a string" if key == "module" else "a whole number or null" if key == "line" else "a string or null"
                raise BaselineFormatError(f'{place}["{key}"] is {_kind(found)}, not {wanted}')
        sites.append(Site(site.get("path"), site.get("line"), site.get("module", ""), site.get("type"), site.get("statement")))
    return tuple(sites)


def _kind(value: object) -> str:
    """How a JSON value reads in a message: 'a list', 'null', 'the string ""'."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return f"the string {json.dumps(value)}"
    names = {dict: "an object", list: "a list", bool: "a boolean", int: "a number", float: "a number"}
    return names.get(type(value), type(value).__name__)



def entry_for(model: str | None, entries: Sequence[Entry]) -> Entry | None:
    """The entry of a check of ``model`` among its test's and backend's ``entries``: the one
    with its model, or the only one there is."""
    for entry in entries:
        if entry.model == model:
            return entry
    return entries[0] if len(entries) == 1 else None


def dims_of(dims: Sequence[Mapping[str, Any]] | None) -> tuple[Dim, ...] | None:
    """The failing requested dimensions of a record's ``dims`` (their JSON form), sorted; None
    when the check asked for none."""
    if dims is None:
        return None
    failing = {
        Dim(str(d.get("input", "")), int(d.get("dim", 0)), str(d.get("verdict", "")))
        for d in dims
        if d.get("verdict") in ("specialized", "unsound")
    }
    return tuple(sorted(failing))


def sites_of(record: Any, rootdir: str | os.PathLike[str]) -> tuple[Site, ...] | None:
    """A compile record's break sites as its entry keeps them, sorted (None: another backend)."""
    breaks = getattr(record, "graph_breaks", None)
    if breaks is None:
        return None
    return tuple(sorted((Site.of(site, rootdir) for site in breaks), key=Site.sort_key))


class BaselinedElsewhere(ValueError):
    """A record the baseline judged whose entry the given baseline does not hold."""


def updated_entries(
    previous: Iterable[Entry], records: Iterable[CheckRecord], rootdir: str | os.PathLike[str]
) -> list[Entry]:
    """What ``--fx-baseline-update`` writes after a run of ``records``: ``previous`` entries
    of tests (and backends) the records do not hold, and one entry per check that did not
    pass (``xfailed`` and ``xpassed`` ones are not failures), sorted, no duplicates.

    Example::

        updated_entries(read_entries(path), records, rootdir)
    """
    previous, records = list(previous), list(records)
    ran = {(r.nodeid, r.backend) for r in records}
    by_test: dict[tuple[str, str], list[Entry]] = {}
    for entry in previous:
        by_test.setdefault((entry.nodeid, entry.backend), []).append(entry)
    fresh = []
    for record in records:
        status = record.status
        if record.baselined:  # judged by its entry: it failed as the entry says
            judged_by = entry_for(record.model, by_test.get((record.nodeid, record.backend), []))
            if judged_by is None:
                raise BaselinedElsewhere(
                    f"{record.nodeid} [{record.backend}] was judged by a baseline entry this file does not hold: "
                    "give the baseline the run judged it by (its --fx-baseline)"
                )
            status = judged_by.status
        elif status in EXPECTED or status == "xpassed":
            continue
        model = record.model  # None for nothing-checked, as the file has always held it
        fresh.append(Entry(record.nodeid, record.backend, model, status, record.category, sites_of(record, rootdir), dims_of(record.dims)))  # type: ignore[arg-type]
    kept = [e for e in previous if (e.nodeid, e.backend) not in ran]
    return sorted(set(kept + fresh), key=Entry.sort_key)


def baseline_text(entries: Iterable[Entry]) -> str:
    """The file's text: sorted keys, two-space indent, a final newline (docs/zoo.md)."""
    document = {"version": VERSION, "entries": [e.to_json() for e in entries]}
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def read_entries(path: Path) -> list[Entry]:
    """The entries of the baseline at ``path``, none where there is no file; ``OSError``,
    ``ValueError`` (not JSON, not UTF-8) or ``BaselineFormatError`` where it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return parse_entries(json.loads(text))


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """The baseline at ``path`` for this process alone while the block runs: an exclusive
    lock on its folder (``flock``: released if the process dies), so writers sharing a file
    system take turns. Where there is no ``flock`` (Windows) the block runs unlocked."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        yield
    finally:
        os.close(folder)  # closing the descriptor releases the lock


__all__ = [
    "BACKEND",
    "EXAMPLE",
    "VERSION",
    "BaselineFormatError",
    "BaselinedElsewhere",
    "Entry",
    "Site",
    "baseline_text",
    "entry_for",
    "locked",
    "parse_entries",
    "read_entries",
    "sites_of",
    "dims_of",
    "Dim",
    "updated_entries",
]
