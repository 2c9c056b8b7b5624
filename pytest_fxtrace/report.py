"""What a session's checks look like to people and machines: the terminal summary,
the JSON report, junit-xml properties and GitHub Actions annotations.

Pytest-free: everything here works on ``CheckRecord``, one plain record per checked
model, built where the test ran (an xdist worker included) and merged on the
controller. The pytest side (``_session.py``) only collects records and prints.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib.util
import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._paths import shown_path
from .snapshot import write_atomic  # one atomic writer for reports and snapshots
from .types import EXPECTED, STATUSES, model_label, option_json, public_id

if TYPE_CHECKING:  # the engine imports torch; an xdist controller only merges records
    from .tracereport import TraceReport

REPORT_VERSION = 1

JSON_FIELDS = (
    "nodeid",
    "model",
    "status",
    "category",
    "location",
    "module",
    "nodes",
    "coverage",
    "suggestion",
    "trace_seconds",
    "modules",
    # beyond PRODUCT.md's fields: what a person reads, so a merged report
    # (python -m pytest_fxtrace.merge) draws the same HTML page as one run
    "module_type",
    "statement",
    "message",
)
# JSON name -> CheckRecord attribute, where they differ
_JSON_ATTRIBUTES = {"statement": "source", "message": "text"}


@dataclasses.dataclass(frozen=True)
class CheckRecord:
    """One checked model of one test, as the session reports it.

    The first fields are the JSON report's (PRODUCT.md); the rest are what the
    summary table and the annotations need. Paths in ``location`` are relative to
    pytest's rootdir (like node ids); ``file`` and ``test_file`` are absolute.

    Example::

        record = CheckRecord.from_report(report, nodeid="tests/test_m.py::test_resnet",
                                         rootdir=Path.cwd())
        record.to_json()["status"]  # "passed"
    """

    nodeid: str
    model: str | None  # None: the test checked no model (status nothing-checked)
    status: str
    category: str | None = None
    location: tuple[str, int] | None = None
    module: str = ""
    nodes: int | None = None
    coverage: float | None = None
    suggestion: Mapping[str, Any] | None = None
    trace_seconds: float = 0.0
    # every module: path, type, status, params (+ category, location); TraceReport.modules
    modules: list[dict[str, Any]] | None = None
    # presentation only
    module_type: str | None = None
    source: str | None = None  # the failing statement (location's source line)
    text: str = ""  # what the test failure said (TraceReport.describe())
    file: str | None = None  # absolute path of the failing line's file
    shown_file: str | None = None  # that file for people: rootdir- or site-packages-relative
    test_file: str | None = None  # absolute path of the test's file
    test_line: int | None = None  # 1-based line of the test's definition
    order: tuple[int, int] = (0, 0)  # (collection index, index within the test)

    @classmethod
    def from_report(
        cls,
        report: TraceReport,
        nodeid: str,
        rootdir: str | os.PathLike[str],
        test_file: str | os.PathLike[str] | None = None,
        test_line: int | None = None,
        order: tuple[int, int] = (0, 0),
    ) -> CheckRecord:
        location = None
        file = source = shown_file = None
        if report.location is not None:
            file = os.path.abspath(report.location.path)
            location = (relative_path(file, rootdir), int(report.location.line))
            source = report.location.source or None
            shown_file = shown_path(file, rootdir)  # here: the sys.path the check ran with
        return cls(
            nodeid=nodeid,
            model=report.model,
            status=public_id(report.status),
            category=public_id(report.category),
            location=location,
            module=report.module,
            nodes=report.nodes,
            coverage=report.coverage,
            suggestion=suggestion_json(report.suggestion),
            trace_seconds=round(float(report.trace_seconds), 6),
            modules=_relative_modules(getattr(report, "modules", None), rootdir),
            module_type=report.module_type,
            source=source,
            text=_text(report),
            file=file,
            shown_file=shown_file,
            test_file=os.path.abspath(test_file) if test_file is not None else None,
            test_line=test_line,
            order=order,
        )

    @property
    def model_name(self) -> str:
        return (self.model or "").rpartition(".")[2]

    @property
    def failed(self) -> bool:
        """Whether this check fails its test."""
        return self.status not in EXPECTED

    @property
    def where(self) -> str:
        return f"{self.location[0]}:{self.location[1]}" if self.location else ""

    @property
    def shown_where(self) -> str:
        """``where`` for the summary table: a library's file by its import path."""
        if self.location and self.shown_file:
            return f"{self.shown_file}:{self.location[1]}"
        return self.where

    @property
    def verified_fix(self) -> bool:
        return bool(self.suggestion and self.suggestion.get("verified"))

    def to_json(self) -> dict[str, Any]:
        """The record as PRODUCT.md's JSON report has it."""
        out: dict[str, Any] = {name: getattr(self, _JSON_ATTRIBUTES.get(name, name)) for name in JSON_FIELDS}
        out["location"] = {"path": self.location[0], "line": self.location[1]} if self.location else None
        out["suggestion"] = dict(self.suggestion) if self.suggestion is not None else None
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CheckRecord:
        """A record back from its ``--fx-report`` form (``to_json``); fields a report of an
        older release lacks keep their defaults."""
        location = data.get("location")
        return cls(
            nodeid=data["nodeid"],
            model=data.get("model"),
            status=data["status"],
            category=data.get("category"),
            location=(str(location["path"]), int(location["line"])) if location else None,
            module=data.get("module") or "",
            nodes=data.get("nodes"),
            coverage=data.get("coverage"),
            suggestion=data.get("suggestion"),
            trace_seconds=float(data.get("trace_seconds") or 0.0),
            modules=data.get("modules"),
            module_type=data.get("module_type"),
            source=data.get("statement"),
            text=data.get("message") or "",
        )

    def to_wire(self) -> dict[str, Any]:
        """Plain data for ``config.workeroutput`` (what execnet can send)."""
        out = {field.name: getattr(self, field.name) for field in _FIELDS}
        out["location"] = list(self.location) if self.location else None
        out["order"] = list(self.order)
        out["suggestion"] = dict(self.suggestion) if self.suggestion is not None else None
        return out

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> CheckRecord:
        values = {field.name: data[field.name] for field in _FIELDS if field.name in data}
        if values.get("location") is not None:
            path, line = values["location"]
            values["location"] = (str(path), int(line))
        values["order"] = tuple(values.get("order") or (0, 0))
        return cls(**values)


def _relative_modules(modules: list[dict[str, Any]] | None, rootdir: str | os.PathLike[str]) -> list[dict[str, Any]] | None:
    """``TraceReport.modules`` with each failing line's path relative to the rootdir,
    as ``location`` is."""
    if modules is None:
        return None
    out = []
    for entry in modules:
        where = entry.get("location")
        if where is not None:
            path = relative_path(os.path.abspath(where["path"]), rootdir)
            entry = {**entry, "location": {"path": path, "line": where["line"]}}
        out.append(entry)
    return out


def _text(report: TraceReport) -> str:
    """What the test's failure says about this model."""
    if report.status == "xpassed" and not report.options.xfail:  # --fx-baseline's entry
        return f"baselined as failing, but {report.message}; delete its entry from the baseline file"
    if report.status == "xpassed":
        expected = ", ".join(report.options.xfail) or "a failure"
        return (
            f"expected a traceability failure ({expected}), but {report.message}; "
            "remove xfail= from the marker"
        )
    return report.message if report.status == "passed" else report.describe(0)


_FIELDS = dataclasses.fields(CheckRecord)


@dataclasses.dataclass(frozen=True)
class Unfinished:
    """A test whose results never reached the controller, and why."""

    nodeid: str
    reason: str


def relative_path(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> str:
    """``path`` relative to ``root`` in POSIX form, or absolute when outside it."""
    path = os.path.abspath(path)
    try:
        rel = os.path.relpath(path, os.path.abspath(root))
    except ValueError:  # another drive on Windows
        return Path(path).as_posix()
    if rel == os.pardir or rel.startswith(os.pardir + os.sep):
        return Path(path).as_posix()
    return Path(rel).as_posix()


# -- JSON ------------------------------------------------------------------------------


def suggestion_json(suggestion: Any) -> dict[str, Any] | None:
    """``{"text", "verified", "options"}`` of a ``Suggestion``, or None."""
    if suggestion is None:
        return None
    return {
        "text": str(suggestion.text),
        "verified": bool(suggestion.verified),
        "options": option_json(dict(suggestion.options or {})),
    }


def sort_records(records: Iterable[CheckRecord]) -> list[CheckRecord]:
    """Collection order, whichever worker ran what."""
    return sorted(records, key=lambda r: (r.order, r.nodeid))


def report_json(
    records: Iterable[CheckRecord], torch_version: str, unfinished: Sequence[Unfinished] = ()
) -> dict[str, Any]:
    """The ``--fx-report`` document; ``unfinished`` appears only when a worker lost results."""
    document: dict[str, Any] = {
        "version": REPORT_VERSION,
        "torch": torch_version,
        "results": [record.to_json() for record in sort_records(records)],
    }
    if unfinished:
        document["unfinished"] = [dataclasses.asdict(u) for u in unfinished]
    return document


def loaded_torch_version() -> str | None:
    """``torch.__version__`` if this process has imported torch, else None."""
    torch = sys.modules.get("torch")
    version = getattr(torch, "__version__", None)
    return str(version) if version is not None else None


def installed_torch_version() -> str:
    """What ``torch.__version__`` would say, found without importing torch (a session
    that checked no model never imports it): the literal in the installed
    ``torch/version.py``, else the distribution's version, else ``"not installed"``."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        try:
            tree = ast.parse(Path(folder, "version.py").read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in tree.body:
            target = node.target if isinstance(node, ast.AnnAssign) else None
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
            value = getattr(node, "value", None)
            if (
                isinstance(target, ast.Name)
                and target.id == "__version__"
                and isinstance(value, ast.Constant)
                and isinstance(value.value, str)
            ):
                return value.value
    from importlib import metadata  # rarely needed; not worth its import time at start-up

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "not installed"


def dump_json(document: Mapping[str, Any]) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


# -- junit-xml -------------------------------------------------------------------------


def junit_properties(record: CheckRecord) -> list[tuple[str, str]]:
    """``<property>`` pairs for one checked model; a test checking two models has two
    groups, each starting at ``fx_model``."""
    return [
        ("fx_model", record.model or ""),
        ("fx_status", record.status),
        ("fx_category", record.category or ""),
        ("fx_location", record.where),
        ("fx_module", record.module),
    ]


# -- terminal summary ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Span:
    """A piece of a summary line and its colour (a TerminalWriter markup name)."""

    text: str
    style: str | None = None


Line = list[Span]

SHORT_ROWS = 10  # table rows shown without -v
_GAP = "  "
_HEADERS = ("test", "model", "status", "category", "location", "submodule", "fix")
# (column, narrowest width) in the order they give way: the test id first, then the
# others, then the test id again; narrower than that a cell says nothing, so a very
# narrow terminal wraps the row. Test ids and paths keep their end.
_SHRINKABLE = ((0, 28), (4, 20), (5, 14), (1, 10), (0, 16), (4, 14))
_KEEP_END = frozenset({0, 4})


def status_style(status: str) -> str:
    if status == "passed":
        return "green"
    if status == "xfailed":
        return "yellow"
    return "red"


def counts_line(records: Sequence[CheckRecord], prefix: str = "") -> Line:
    """``12 checks: 9 passed, 2 untraceable, 1 mismatch`` with colours."""
    counts: dict[str, int] = {}
    for record in records:
        counts[record.status] = counts.get(record.status, 0) + 1
    order = [s for s in STATUSES if s in counts] + sorted(set(counts) - set(STATUSES))
    noun = "check" if len(records) == 1 else "checks"
    line: Line = [Span(f"{prefix}{len(records)} {noun}: ", "bold")]
    for i, status in enumerate(order):
        if i:
            line.append(Span(", "))
        line.append(Span(f"{counts[status]} {status}", status_style(status)))
    return line


def _submodule(record: CheckRecord) -> str:
    if not record.module:
        return "-"
    return f"{record.module} ({record.module_type})" if record.module_type else record.module


def table_row(record: CheckRecord) -> tuple[str, ...]:
    return (
        record.nodeid,
        record.model_name or "-",
        record.status,
        record.category or "-",
        record.shown_where or "-",
        _submodule(record),
        "yes" if record.verified_fix else "no",
    )


def _shorten(text: str, width: int, keep_end: bool) -> str:
    if len(text) <= width:
        return text
    if width <= 3:
        return text[-width:] if keep_end else text[:width]
    return "..." + text[-(width - 3) :] if keep_end else text[: width - 3] + "..."


def _fit(widths: list[int], total_width: int) -> list[int]:
    """Narrow the long columns (test id first) until the row fits the terminal, or
    every column is as narrow as it can usefully be."""
    widths = list(widths)
    excess = sum(widths) + len(_GAP) * (len(widths) - 1) - total_width
    for column, narrowest in _SHRINKABLE:
        if excess <= 0:
            break
        give = min(excess, max(0, widths[column] - narrowest))
        widths[column] -= give
        excess -= give
    return widths


def table_lines(records: Sequence[CheckRecord], width: int | None) -> list[Line]:
    """The table of ``records``; ``width=None`` keeps every cell whole."""
    rows = [table_row(r) for r in records]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(_HEADERS)]
    if width is not None:
        widths = _fit(widths, width)

    def cells(row: Sequence[str], styles: Sequence[str | None]) -> Line:
        line: Line = []
        for i, (text, style) in enumerate(zip(row, styles, strict=True)):
            text = _shorten(text, widths[i], i in _KEEP_END)
            last = i == len(row) - 1
            line.append(Span(text if last else text.ljust(widths[i]), style))
            if not last:
                line.append(Span(_GAP))
        return line

    lines = [cells(_HEADERS, ["bold"] * len(_HEADERS))]
    for record, row in zip(records, rows, strict=True):
        styles: list[str | None] = [None] * len(row)
        styles[2] = status_style(record.status)
        lines.append(cells(row, styles))
    return lines


def summary_lines(
    records: Sequence[CheckRecord],
    *,
    verbosity: int = 0,
    width: int = 80,
    unfinished: Sequence[Unfinished] = (),
    report_path: str | None = None,
    html_path: str | None = None,
) -> list[Line]:
    """The body of the ``fxtrace`` terminal summary section.

    Default: counts per status, then up to ``SHORT_ROWS`` non-passing checks (failures
    first, then expected failures) fitted to ``width``. ``verbosity >= 1``: every row,
    nothing shortened. ``-q``: counts and failing rows only. ``-qq``: the counts line.

    Example::

        for line in summary_lines(records, verbosity=0, width=120):
            print("".join(span.text for span in line))
    """
    records = sort_records(records)
    if not records and not unfinished:
        return []
    lines: list[Line] = [counts_line(records, prefix="fxtrace: " if verbosity < 0 else "")]
    if verbosity <= -2:
        return lines
    failing = [r for r in records if r.failed]
    expected = [r for r in records if r.status == "xfailed"]
    rows = failing if verbosity < 0 else failing + expected
    if rows:
        shown = rows if verbosity >= 1 else rows[:SHORT_ROWS]
        lines.extend(table_lines(shown, None if verbosity >= 1 else width))
        if len(shown) < len(rows):
            lines.append([Span(f"... and {len(rows) - len(shown)} more (-v shows every check)")])
    if unfinished:
        lines.append([Span(f"{len(unfinished)} test(s) with no recorded result:", "yellow")])
        for entry in unfinished:
            lines.append([Span(f"  {entry.nodeid}: {entry.reason}")])
    if report_path:
        lines.append([Span(f"JSON report: {report_path}")])
    if html_path:
        lines.append([Span(f"HTML report: {html_path}")])
    return lines


def plain(line: Line) -> str:
    return "".join(span.text for span in line)


# -- GitHub Actions ----------------------------------------------------------------------


def escape_data(text: str) -> str:
    """A workflow command's message, as actions/toolkit escapes it."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value (``file=``, ``title=``)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def workflow_command(command: str, message: str, **properties: Any) -> str:
    """``::command key=value,...::message``; None-valued properties are left out.

    Example::

        workflow_command("error", "boom", file="m.py", line=3)  # '::error file=m.py,line=3::boom'
    """
    props = ",".join(
        f"{key}={escape_property(str(value))}" for key, value in properties.items() if value is not None
    )
    return f"::{command}{' ' + props if props else ''}::{escape_data(message)}"


def find_repo_root(start: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> Path:
    """The enclosing git checkout of ``start``; else ``$GITHUB_WORKSPACE``; else ``start``."""
    start = Path(start).resolve()
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    workspace = (os.environ if environ is None else environ).get("GITHUB_WORKSPACE")
    return Path(workspace).resolve() if workspace else start


@functools.lru_cache(maxsize=4096)
def _inside(path: str, root: Path) -> str | None:
    try:
        return Path(path).resolve().relative_to(root).as_posix()
    except ValueError:
        return None


def annotation_lines(records: Iterable[CheckRecord], repo_root: str | os.PathLike[str]) -> list[str]:
    """One ``::error`` per failing check, at the user's failing line when it lies in the
    repository, else at the test's definition (and the message names the real line).

    Example::

        annotation_lines(records, "/repo")
        # ['::error file=models/block.py,line=42,title=...::Block is not traceable: ...']
    """
    root = Path(repo_root).resolve()
    lines = []
    for record in sort_records(records):
        if not record.failed:
            continue
        file = line = None
        if record.file is not None and record.location is not None:
            file = _inside(record.file, root)
            line = record.location[1] if file is not None else None
        if file is None and record.test_file is not None:
            file = _inside(record.test_file, root)
            line = record.test_line if file is not None else None
        subject = model_label(record.model_name, record.module, record.module_type)
        kind = f"{record.status} ({record.category})" if record.category else record.status
        title = f"pytest-fxtrace: {subject} {kind}" if subject else f"pytest-fxtrace: {kind}"
        message = f"{record.nodeid}\n{record.text}".rstrip()
        lines.append(workflow_command("error", message, file=file, line=line, title=title))
    return lines


__all__ = [
    "CheckRecord",
    "Span",
    "Unfinished",
    "annotation_lines",
    "dump_json",
    "escape_data",
    "escape_property",
    "find_repo_root",
    "installed_torch_version",
    "junit_properties",
    "loaded_torch_version",
    "report_json",
    "summary_lines",
    "workflow_command",
    "write_atomic",
]
