"""The data types every step of a check passes on: statuses and categories (enums whose
values are the public ids of docs/categories.md), where a failure is (``Location``), why
(``Diagnosis``), what to do about it (``Suggestion``), and the one converter of option
values to their JSON / marker form.

Plain data, no behaviour of the check: this module imports neither torch nor pytest, so
the JSON report, the xdist controller and ``python -m pytest_fxtrace.merge`` can use it.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import types
from collections.abc import Mapping
from typing import Any, TypeAlias, overload

from pytest_fxtrace.paths import shown_path

# A value of the JSON report (and of an xdist worker's wire form): what json.loads gives
JSONValue: TypeAlias = None | bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"]
JSONObject: TypeAlias = dict[str, JSONValue]


class _Id(str, enum.Enum):
    """A public string id: equal to, hashed and printed as its value, so a status or
    category reads the same in a message, the JSON report and a ``dict`` key."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Status(_Id):
    """The verdict on one checked model (docs/categories.md, "Statuses and category ids")."""

    PASSED = "passed"
    UNTRACEABLE = "untraceable"  # capturing the graph raised
    MISMATCH = "mismatch"  # the captured graph computes something else than eager
    MODEL_ERROR = "model-error"  # the eager model itself raised
    SNAPSHOT_MISSING = "snapshot-missing"
    SNAPSHOT_MISMATCH = "snapshot-mismatch"
    XFAILED = "xfailed"
    XPASSED = "xpassed"
    TIMEOUT = "timeout"
    INTERNAL_ERROR = "internal-error"  # pytest-fxtrace itself raised
    NOTHING_CHECKED = "nothing-checked"  # a marked test called no module
    CRASHED = "crashed"  # an isolated check's process died


# the summary's count order and the HTML page's status filters (crashed is counted after
# them, as a status the page has no filter for)
STATUSES: tuple[str, ...] = tuple(s.value for s in Status if s is not Status.CRASHED)
EXPECTED = frozenset({Status.PASSED.value, Status.XFAILED.value})  # statuses that do not fail the test


class Category(_Id):
    """Why a check failed (docs/categories.md, "Statuses and category ids":
    stable, used by ``xfail=``)."""

    CONTROL_FLOW = "control-flow"
    ITERATION = "iteration"
    LEN = "len"
    TYPE_CONVERSION = "type-conversion"
    CONTAINS = "contains"
    TENSOR_CONSTRUCTOR = "tensor-constructor"
    MUTATION = "mutation"
    UNREGISTERED_MODULE = "unregistered-module"
    SPECIALIZATION = "specialization"
    BAKED_CONSTANT = "baked-constant"
    TRAINING_FLAG = "training-flag"
    HOOKS_DROPPED = "hooks-dropped"
    NUMERIC = "numeric"
    DATA_DEPENDENT = "data-dependent"
    UNSUPPORTED = "unsupported"
    MISSING_OPERATOR = "missing-operator"  # an operator the target format has no function for (ONNX)
    ARTIFACT = "artifact"  # the saved program (torch.export.save / load) fails a stage or answers otherwise
    # train=True: the captured program's backward differs from eager's (a gradient that differs,
    # a no_grad region or requires_grad change the capture lost, a custom backward it replaced)
    GRADIENT = "gradient"
    OTHER = "other"


# the ids ``xfail=`` takes: torch.fx's, and data-dependent / unsupported of the export backends
CATEGORIES: tuple[str, ...] = tuple(c.value for c in Category)


class ModuleStatus(_Id):
    """What localization learned about one submodule (a module tree's statuses)."""

    TRACED = "traced"  # inside a graph that traced
    LEAF = "leaf"  # called as a leaf
    FAILED = "failed"  # its call raised
    UNVISITED = "unvisited"  # no trace reached it
    UNUSED = "unused"  # the eager run never called it


MODULE_STATUSES: tuple[str, ...] = tuple(s.value for s in ModuleStatus)


@overload
def public_id(value: str) -> str: ...


@overload
def public_id(value: None) -> None: ...


@overload
def public_id(value: str | None) -> str | None: ...


def public_id(value: str | None) -> str | None:
    """A status or category as the plain string a record stores (None stays None)."""
    return str(value) if isinstance(value, _Id) else value


@dataclasses.dataclass(frozen=True)
class NodeFailure:
    """Why and where a module of a tree fails: its category id and the user's statement."""

    category: str | None  # a Category's id
    location: tuple[str, int] | None  # (path, line) of the statement


@dataclasses.dataclass(frozen=True)
class ModuleNode:
    """One module of a model's tree, in ``named_modules`` order (``TraceReport.modules``,
    ``CheckRecord.modules``, the HTML page's tree): its path, class name, status and
    parameter count (its own and its descendants'), and for a failing module why and
    where. ``to_json`` / ``from_json`` are its form in the JSON report and on the wire
    from an xdist worker: plain str / int / dict data (execnet refuses an enum).

    Example::

        ModuleNode("lin", "Linear", ModuleStatus.LEAF, 20).to_json()
        # {"path": "lin", "type": "Linear", "status": "leaf", "params": 20}
    """

    path: str  # qualified path, "" for the root
    type: str  # class name
    status: ModuleStatus
    params: int
    failure: NodeFailure | None = None  # its category and line (a failing module's, where known)

    def to_json(self) -> JSONObject:
        """``{"path", "type", "status", "params"}``, and ``"category"`` and ``"location"``
        (``{"path", "line"}`` or None) where ``failure`` says why it fails."""
        out: JSONObject = {"path": self.path, "type": self.type, "status": self.status.value, "params": self.params}
        if self.failure is not None:
            where = self.failure.location
            out["category"] = self.failure.category
            out["location"] = {"path": where[0], "line": where[1]} if where is not None else None
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModuleNode:
        """A node back from ``to_json``'s form."""
        failure = None
        if "category" in data or "location" in data:
            where = data.get("location")
            category = data.get("category")
            failure = NodeFailure(
                str(category) if category is not None else None,
                (str(where["path"]), int(where["line"])) if where else None,
            )
        status = ModuleStatus(data["status"])
        return cls(str(data.get("path", "")), str(data.get("type", "")), status, int(data.get("params") or 0), failure)


@dataclasses.dataclass(frozen=True)
class Location:
    """The user's statement: file, line and its source text."""

    path: str
    line: int
    source: str

    def __str__(self) -> str:
        # short in messages: a library's file by its import path (timm/models/nest.py)
        return f"{shown_path(self.path)}:{self.line}"


@dataclasses.dataclass(frozen=True)
class Suggestion:
    """A fix: what to change, whether applying it was verified, and the marker options
    that apply it (JSON form, ``@pytest.mark.traceable(**options)``).

    ``changes`` are the same options resolved (``TraceOptions.replace(**changes)``), for
    the fix search to try them; they never reach a report.

    Example::

        Suggestion("@pytest.mark.traceable(leaf_modules=['Gate'])", True, {"leaf_modules": ["Gate"]})
    """

    text: str
    verified: bool
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    changes: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False, repr=False)
    # False: the fix search found none (the text says what it tried: "none found; tried ...");
    # the category's own code fix is then all a report can offer
    found: bool = True
    # True: verified, but it leaves some of the failure (a compile fix that removes 5 of 8
    # break sites): applied, the check still fails
    partial: bool = False
    # a verified patch: the unified diff of the file that holds the failing statement, paths
    # relative to its import root (``patch -p1`` from there); None: an option fix, or advice
    patch: str | None = None
    # what the patch changes, in words, where it stands beside a verified fix of another kind
    # (``text`` says that one: an option, a decorator); None where ``text`` is the patch's own
    patch_text: str | None = None

    @classmethod
    def marker(cls, options: Mapping[str, Any], changes: Mapping[str, Any]) -> Suggestion:
        """An option fix not tried yet, its text the marker that applies it."""
        args = ", ".join(f"{name}={value!r}" for name, value in options.items())
        return cls(f"@pytest.mark.traceable({args})", False, options, changes)

    def with_patch(self, patched: Suggestion | None) -> Suggestion:
        """This fix with a verified patch found for the same finding: the patch in its place
        where this one is advice, or verified only in part; beside it (``patch_text`` says
        what it changes, ``patch`` holds the diff) where this one is a verified fix."""
        if patched is None:
            return self
        if not self.verified or self.partial:
            return patched
        return dataclasses.replace(self, patch=patched.patch, patch_text=patched.text)

    def verified_as(self, verified: bool, text: str | None = None) -> Suggestion:
        """This fix as a report keeps it: whether it was verified, without ``changes``."""
        return Suggestion(
            self.text if text is None else text, verified, self.options, found=self.found, patch=self.patch, patch_text=self.patch_text
        )


@dataclasses.dataclass(frozen=True)
class Diagnosis:
    """Why a check failed, in the user's terms: a capture that raised (``error``), or a
    cause of silent divergence (``reason`` completes "<model> traced, but ...")."""

    category: Category
    reason: str  # what happened, completing "<module> is not traceable: <source> at <loc> ..."
    location: Location | None = None
    module: str = ""  # qualified path of the failing submodule, "" for the root
    module_type: str | None = None
    error: str = ""  # original exception type and message (a capture that raised)
    code_fix: str | None = None
    last_node: str | None = None  # the node the partial graph ended on
    helpers: tuple[str, ...] = ()  # module-level functions on the failing stack, innermost first
    fix: Suggestion | None = None  # a code change found for this cause, where one is known
    operator: str | None = None  # missing-operator: the operator the backend has no translation for


@dataclasses.dataclass(frozen=True)
class Divergence:
    """Where a captured graph and eager first disagree, submodule by submodule, where a
    backend can tell (FX: ``backends/fx/divergence.first_divergence``)."""

    module: str  # qualified path of the first diverging submodule, "" for the root
    module_type: str | None
    node: str | None  # the graph node whose value first differs
    location: Location | None  # the user's statement that created that node
    max_abs_error: float | None
    max_rel_error: float | None

    def __str__(self) -> str:
        where = f"{self.module} ({self.module_type})" if self.module else f"the root ({self.module_type})"
        text = f"first diverges in {where}"
        if self.node:
            text += f" at node {self.node}"
        if self.location:
            text += f" ({self.location}: {self.location.source})"
        if self.max_abs_error is not None:
            text += f"; max abs error {self.max_abs_error:.3g}, max rel error {self.max_rel_error:.3g}"
        return text


@dataclasses.dataclass(frozen=True)
class GraphBreak:
    """One place where torch.compile splits the model into several graphs (a *site*: a
    statement that breaks every time, or in each enclosing frame, counts once), as the
    compile backend reports it.

    Example::

        GraphBreak(Location("m.py", 12, "if x.sum() > 0:"), "block", "Block", "Data-dependent branching",
                   "GB0170", "Detected data-dependent branching", "control-flow")
    """

    location: Location | None  # the user's statement; None: torch named no frame of theirs
    module: str  # the submodule whose forward holds it, "" for the model itself
    module_type: str | None
    type: str | None  # torch's graph-break type (gb_type)
    id: str | None  # its stable id in torch's registry ("GB0170")
    reason: str  # torch's reason, one line
    category: str  # the check's category id for it
    eager: bool = False  # Dynamo runs the rest of that function eagerly (no graph from there on)


@dataclasses.dataclass(frozen=True)
class Recompile:
    """One recompile over a compile check's recorded calls: the guard that failed, in the
    user's words, and the statement that made Dynamo guard on it where it is known."""

    reason: str  # "`self.step` was 1, now 2"
    location: Location | None
    counted: bool = True  # False: automatic dynamic shapes' one re-specialisation of a frame
    guard: str = ""  # torch's words for the failed guard


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What a step after the check says of one report: the snapshot's hold turns a
    passing check into ``snapshot-missing`` / ``snapshot-mismatch`` or adds that it wrote
    the file. The record takes the last word (``dataclasses.replace``)."""

    ok: bool
    status: Status
    message: str


@dataclasses.dataclass(frozen=True)
class Judgement:
    """The xfail / baseline policy's word on a test's reports: the test's outcome
    (``"pass"``, ``"fail"``, ``"xfail"``) and message, and the status the failing checks
    (``failed_as``) and the passing ones (``passed_as``) take, where it changes."""

    outcome: str
    message: str
    failed_as: Status | None = None
    passed_as: Status | None = None
    # reports (by their index in the test's list) whose status and message are settled one by
    # one: a baselined compile check some of whose break sites no longer break is xpassed
    settled: Mapping[int, tuple[Status, str]] = dataclasses.field(default_factory=dict)


def model_label(model_name: str, module: str = "", module_type: str | None = None) -> str:
    """``ResNet.layer1.0 (BasicBlock)``: the model, and the failing submodule if any."""
    if not module:
        return model_name
    kind = f" ({module_type})" if module_type else ""
    return f"{model_name}.{module}{kind}"


def option_json(value: Any, key: str | None = None) -> Any:
    """Marker options in JSON form: leaf module classes as class names, functions and
    tracers as dotted names, modules by name, tuples as lists; JSON values as they are.

    Example::

        option_json({"leaf_modules": (FrozenBatchNorm2d,)})  # {"leaf_modules": ["FrozenBatchNorm2d"]}
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): option_json(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [option_json(v, key) for v in value]
        return sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items
    if isinstance(value, type):
        if key == "leaf_modules":
            return value.__name__
        return f"{value.__module__}:{value.__qualname__}"
    if isinstance(value, types.ModuleType):
        return value.__name__
    to_json = getattr(value, "to_json", None)
    if dataclasses.is_dataclass(value) and not isinstance(value, type) and callable(to_json):
        return option_json(to_json())  # dims.DimRequest: presets, or {argument: {dim: name}}
    if inspect.isroutine(value):
        return f"{value.__module__}:{value.__qualname__}"
    return repr(value)


__all__ = [
    "CATEGORIES",
    "EXPECTED",
    "MODULE_STATUSES",
    "STATUSES",
    "Category",
    "Diagnosis",
    "Divergence",
    "GraphBreak",
    "JSONObject",
    "JSONValue",
    "Location",
    "ModuleNode",
    "ModuleStatus",
    "NodeFailure",
    "Recompile",
    "Status",
    "Suggestion",
    "Judgement",
    "Verdict",
    "model_label",
    "option_json",
    "public_id",
]
