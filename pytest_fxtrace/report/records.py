"""What a session's checks look like to people and machines: the terminal summary,
the JSON report, junit-xml properties and GitHub Actions annotations.

Pytest-free: everything here works on ``CheckRecord``, one plain record per checked
model, built where the test ran (an xdist worker included) and merged on the
controller. The pytest side (``plugin/session.py``) only collects records and prints.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pytest_fxtrace.backends.spec import DEFAULT_BACKEND
from pytest_fxtrace.dims import DimVerdict
from pytest_fxtrace.paths import shown_path
from pytest_fxtrace.report.trees import modules_from_json, shared_json
from pytest_fxtrace.snapshot import write_atomic  # one atomic writer for reports and snapshots
from pytest_fxtrace.types import EXPECTED, JSONObject, ModuleNode, option_json, public_id

if TYPE_CHECKING:  # the engine imports torch; an xdist controller only merges records
    from pytest_fxtrace.tracereport import TraceReport
    from pytest_fxtrace.types import GraphBreak, Location, Recompile

REPORT_VERSION = 1

JSON_FIELDS = (
    "nodeid",
    "model",
    "backend",
    "status",
    "category",
    "location",
    "module",
    "nodes",
    "coverage",
    "suggestion",
    "trace_seconds",
    "modules",
    "grad_mode",
    # beyond the schema's first fields (docs/reports.md): what a person reads, so a merged report
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

    The first fields are the JSON report's (docs/reports.md, its schema); the rest are what the
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
    # every module: path, type, status, params (+ category, location); TraceReport.modules,
    # failing lines' paths relative to rootdir
    modules: tuple[ModuleNode, ...] | None = None
    backend: str = DEFAULT_BACKEND  # what checked the model (the backend= option's name)
    grad_mode: str | None = None  # the autograd mode of the capture: grad, no_grad, inference_mode
    operator: str | None = None  # missing-operator: the operator the backend has no translation for
    autocast: str | None = None  # the autocast regions the calls ran in: cpu:bfloat16
    train: bool = False  # the calls ran forward and backward, gradients compared (train mode)
    # presentation only
    module_type: str | None = None
    source: str | None = None  # the failing statement (location's source line)
    text: str = ""  # what the test failure said (TraceReport.describe())
    file: str | None = None  # absolute path of the failing line's file
    shown_file: str | None = None  # that file for people: rootdir- or site-packages-relative
    test_file: str | None = None  # absolute path of the test's file
    test_line: int | None = None  # 1-based line of the test's definition
    order: tuple[int, int] = (0, 0)  # (collection index, index within the test)
    # compile checks only (None for the other backends, whose JSON keeps its keys): every
    # graph-break site {path, line, module, type, id, category, reason, statement} and every
    # recompile {reason, path, line, counted}, paths relative to rootdir
    graph_breaks: list[dict[str, Any]] | None = None
    recompiles: list[dict[str, Any]] | None = None
    # the dimensions dynamic= asked for by name or preset, each judged (dims.DimVerdict.to_json:
    # input, dim, name, verdict, value, range, multiple_of, path, line, statement, sizes); None:
    # none asked for (the JSON then keeps its keys)
    dims: list[dict[str, object]] | None = None
    # --fx-baseline judged the check (xfailed as its entry says, or xpassed for break sites
    # that no longer break): the entry's status is the check's own (report/baseline.py)
    baselined: bool = False

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
            location = (shown_path(file, rootdir, imports=False), int(report.location.line))
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
            modules=_relative_modules(report.modules, rootdir),
            backend=report.backend,
            grad_mode=report.grad_mode,
            operator=report.operator,
            autocast=report.autocast,
            train=report.train,
            module_type=report.module_type,
            source=source,
            text=_text(report),
            file=file,
            shown_file=shown_file,
            test_file=os.path.abspath(test_file) if test_file is not None else None,
            test_line=test_line,
            order=order,
            graph_breaks=breaks_json(getattr(report, "graph_breaks", None), rootdir),
            recompiles=_recompiles_json(getattr(report, "recompiles", None), rootdir),
            dims=_dims_json(report.dims, rootdir),
            baselined=_baselined(report),
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
        """The record as the JSON report has it (docs/reports.md)."""
        out: dict[str, Any] = {name: getattr(self, _JSON_ATTRIBUTES.get(name, name)) for name in JSON_FIELDS}
        out["location"] = {"path": self.location[0], "line": self.location[1]} if self.location else None
        out["suggestion"] = dict(self.suggestion) if self.suggestion is not None else None
        out["modules"] = shared_json(self.modules) if self.modules is not None else None
        if self.graph_breaks is not None:
            out["graph_breaks"] = [dict(item) for item in self.graph_breaks]
        if self.recompiles is not None:
            out["recompiles"] = [dict(item) for item in self.recompiles]
        if self.dims is not None:
            out["dims"] = [dict(item) for item in self.dims]
        if self.operator is not None:
            out["operator"] = self.operator
        if self.autocast is not None:
            out["autocast"] = self.autocast
        if self.train:  # only where the calls ran forward and backward
            out["train"] = True
        if self.baselined:  # only where --fx-baseline judged the check
            out["baselined"] = True
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
            modules=modules_from_json(data.get("modules")),
            backend=data.get("backend") or DEFAULT_BACKEND,
            grad_mode=data.get("grad_mode"),
            operator=data.get("operator"),
            autocast=data.get("autocast"),
            train=bool(data.get("train")),
            module_type=data.get("module_type"),
            source=data.get("statement"),
            text=data.get("message") or "",
            graph_breaks=data.get("graph_breaks"),
            recompiles=data.get("recompiles"),
            dims=data.get("dims"),
            baselined=bool(data.get("baselined")),
        )

    def to_wire(self) -> dict[str, Any]:
        """Plain data for ``config.workeroutput`` (what execnet can send)."""
        out = {field.name: getattr(self, field.name) for field in _FIELDS}
        out["location"] = list(self.location) if self.location else None
        out["order"] = list(self.order)
        out["suggestion"] = dict(self.suggestion) if self.suggestion is not None else None
        out["modules"] = _modules_json(self.modules)
        return out

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> CheckRecord:
        values = {field.name: data[field.name] for field in _FIELDS if field.name in data}
        if values.get("location") is not None:
            path, line = values["location"]
            values["location"] = (str(path), int(line))
        values["order"] = tuple(values.get("order") or (0, 0))
        values["modules"] = _modules_from(values.get("modules"))
        return cls(**values)


def _relative_modules(
    modules: Sequence[ModuleNode] | None, rootdir: str | os.PathLike[str]
) -> tuple[ModuleNode, ...] | None:
    """``TraceReport.modules`` with each failing line's path relative to the rootdir, as
    ``location`` is."""
    if modules is None:
        return None
    out = []
    for node in modules:
        where = node.failure.location if node.failure is not None else None
        if node.failure is not None and where is not None:
            relative = (shown_path(where[0], rootdir, imports=False), where[1])
            node = dataclasses.replace(node, failure=dataclasses.replace(node.failure, location=relative))
        out.append(node)
    return tuple(out)


def _modules_json(modules: Sequence[ModuleNode] | None) -> list[JSONObject] | None:
    """A record's module tree as the JSON report and the wire carry it."""
    return [node.to_json() for node in modules] if modules is not None else None


def _modules_from(data: Sequence[Mapping[str, Any]] | None) -> tuple[ModuleNode, ...] | None:
    return tuple(ModuleNode.from_json(entry) for entry in data) if data is not None else None


def _baselined(report: TraceReport) -> bool:
    """Whether ``--fx-baseline`` judged a failing check (a marker's ``xfail=`` judges its
    test's checks itself, and then the baseline does not)."""
    return not report.ok and report.status in ("xfailed", "xpassed") and not report.options.xfail


def _text(report: TraceReport) -> str:
    """What the test's failure says about this model."""
    if report.status == "xpassed" and not report.ok:  # --fx-baseline's break sites that no longer break
        return report.message
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


def _place(location: Location | None, rootdir: str | os.PathLike[str]) -> JSONObject:
    if location is None:
        return {"path": None, "line": None}
    return {"path": shown_path(location.path, rootdir, imports=False), "line": int(location.line)}


def _dims_json(dims: Sequence[DimVerdict] | None, rootdir: str | os.PathLike[str]) -> list[dict[str, object]] | None:
    """The requested dimensions' verdicts as the JSON report has them, paths as the rest of
    the record's (relative to rootdir)."""
    if dims is None:
        return None
    return [{**verdict.to_json(), **_place(verdict.location, rootdir)} if verdict.location else verdict.to_json() for verdict in dims]


def breaks_json(sites: Sequence[GraphBreak] | None, rootdir: str | os.PathLike[str]) -> list[JSONObject] | None:
    """A compile check's graph-break sites as the JSON report has them (docs/reports.md);
    ``statement`` is the site's source text, what a baseline knows it by (``report/sites.py``)."""
    if sites is None:
        return None
    return [
        {
            **_place(site.location, rootdir),
            "module": site.module,
            "type": site.type,
            "id": site.id,
            "category": public_id(site.category),
            "reason": site.reason,
            "statement": (site.location.source or None) if site.location is not None else None,
        }
        for site in sites
    ]


def _recompiles_json(found: Sequence[Recompile] | None, rootdir: str | os.PathLike[str]) -> list[JSONObject] | None:
    if found is None:
        return None
    return [{"reason": item.reason, **_place(item.location, rootdir), "counted": item.counted} for item in found]


# -- JSON ------------------------------------------------------------------------------


def suggestion_json(suggestion: Any) -> dict[str, Any] | None:
    """``{"text", "verified", "options"}`` of a ``Suggestion`` (and ``"partial": true`` for
    a verified fix that leaves some of the failure), or None."""
    if suggestion is None:
        return None
    found = {
        "text": str(suggestion.text),
        "verified": bool(suggestion.verified),
        "options": option_json(dict(suggestion.options or {})),
    }
    if getattr(suggestion, "partial", False):
        found["partial"] = True
    if getattr(suggestion, "patch", None) is not None:
        found["patch"] = suggestion.patch
    if getattr(suggestion, "patch_text", None) is not None:  # the patch beside a fix of another kind
        found["patch_text"] = suggestion.patch_text
    return found


def several_backends(records: Iterable[CheckRecord]) -> bool:
    """Whether more than one backend checked ``records``: the summaries then show a backend column."""
    return len({record.backend for record in records}) > 1


def sort_records(records: Iterable[CheckRecord]) -> list[CheckRecord]:
    """Collection order, whichever worker ran what."""
    return sorted(records, key=lambda r: (r.order, r.nodeid))


__all__ = [
    "CheckRecord",
    "Unfinished",
    "breaks_json",
    "write_atomic",
]
