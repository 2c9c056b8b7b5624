"""``TraceReport``: the verdict on one model, and how it reads (``describe``); the
reports of a model that fails eagerly and of pytest-fxtrace's own failure.

Built once (frozen): by the check, or with ``dataclasses.replace`` by the pytest layer's
policies. Knows no backend, no check step and no pytest.
"""

from __future__ import annotations

import dataclasses
import traceback
from typing import TypedDict

import torch
import torch.fx

from pytest_fxtrace.backends.spec import DEFAULT_BACKEND, backend_words
from pytest_fxtrace.collection import GraphCollection, coverage_text
from pytest_fxtrace.compare import Difference
from pytest_fxtrace.diagnose import format_error
from pytest_fxtrace.dims import DimVerdict
from pytest_fxtrace.locate import user_location
from pytest_fxtrace.options import TraceOptions
from pytest_fxtrace.types import (
    Category,
    Divergence,
    GraphBreak,
    Location,
    ModuleNode,
    Recompile,
    Status,
    Suggestion,
    model_label,
)

PATCH_LINES = 15  # the lines of a verified patch's diff a failure message shows


@dataclasses.dataclass(frozen=True)
class TraceReport:
    """The verdict on one model (its fields: docs/marker.md, "The fxtrace fixture"):
    built once, when the check and the pytest layer's policies (snapshot, xfail,
    baseline) are done; a copy with changes is ``dataclasses.replace(report, ...)``."""

    ok: bool
    status: Status
    model: str | None  # dotted class name of the checked model; None: none (nothing-checked)
    category: Category | None = None
    location: Location | None = None
    module: str = ""
    module_type: str | None = None
    message: str = ""
    error: str | None = None
    graph_module: torch.fx.GraphModule | None = None
    code: str | None = None
    nodes: int | None = None
    coverage: float | None = None
    suggestion: Suggestion | None = None
    difference: Difference | None = None
    calls: int = 0  # recorded calls replayed and compared
    trace_seconds: float = 0.0
    replay_seconds: float = 0.0
    options: TraceOptions = dataclasses.field(default_factory=TraceOptions)
    last_node: str | None = None  # the node the partial graph ended on (untraceable)
    localization: GraphCollection | None = None  # which modules capture (untraceable)
    divergence: Divergence | None = None  # where the graph first disagrees with eager (mismatch)
    dump_path: str | None = None  # GraphModule.to_folder of a mismatching graph
    # every module's path, class, status, parameters (+ category and line where it fails)
    # (collection.module_tree); filled when asked for (module_tree=True: an HTML report)
    modules: tuple[ModuleNode, ...] | None = None
    backend: str = DEFAULT_BACKEND  # what checked the model (the backend= option's name)
    code_fix: str | None = None  # the change in code that fixes the failure, in the backend's terms
    # torch.compile: every graph-break site and every recompile over the recorded calls (None:
    # a backend that neither splits graphs nor recompiles)
    graph_breaks: tuple[GraphBreak, ...] | None = None
    recompiles: tuple[Recompile, ...] | None = None
    # the autograd mode the calls were captured and replayed in: "grad", "no_grad" or
    # "inference_mode" (several, comma-separated, when a test's calls differ); None: no call
    grad_mode: str | None = None
    # where this check's capture differs from the plain torch API's (the FX tracer inlines a
    # stateless module created inside forward, which torch.fx.symbolic_trace refuses)
    notes: tuple[str, ...] = ()
    # missing-operator: the operator the backend has no translation for ("aten.cummax.default")
    operator: str | None = None
    # the autocast regions the calls ran in ("cpu:bfloat16"; a test's calls in several: "; "),
    # captured and replayed in them; None: none
    autocast: str | None = None
    # the calls were run forward and backward (train=True, or a test that ran backward on a
    # recorded output): outputs, gradients and buffer updates compared with eager's
    train: bool = False
    # each dimension dynamic= asked for by name, judged at sizes no recorded call had (dims.py);
    # None: none asked for
    dims: tuple[DimVerdict, ...] | None = None

    @property
    def model_name(self) -> str:
        return (self.model or "").rpartition(".")[2]

    def describe(self, verbose: int = 0) -> str:
        """What a user reads: what happened first, then where, then what traced, then
        the fix. At most ~40 lines; ``verbose >= 1`` adds the per-module table."""
        lines = [self.message]
        first = self.message.partition("\n")[0]
        if self.location is not None and self.location.source and f"at {self.location}" not in first:
            lines.append(f"  at {self.location}: {self.location.source}")
        if self.error and self.status == "internal-error":
            lines.append("  pytest-fxtrace's traceback:")
            lines.extend("    " + line for line in self.error.rstrip().splitlines())
        elif self.error and (self.status != "passed"):
            lines.append(f"  error: {self.error}")
        if self.category:
            lines.append(f"  category: {self.category}")
        if self.last_node:
            lines.append(f"  the partial graph ended on node {self.last_node}")
        if self.divergence is not None:
            lines.append(f"  {self.divergence}")
        elif self.difference is not None and self.difference.max_abs_error is not None:
            lines.append(
                f"  max abs error {self.difference.max_abs_error:.3g}, "
                f"max rel error {self.difference.max_rel_error:.3g}"
            )
        collection = self.localization
        lines.extend(self._coverage_lines())
        if self.dims:  # every dimension asked dynamic, the passing ones with their range
            lines.append("  dynamic dimensions:")
            lines.extend(f"    {verdict.line()}" for verdict in self.dims)
        if self.suggestion is not None:
            status = "verified" if self.suggestion.verified else "not verified"
            if self.suggestion.verified and self.suggestion.partial:  # applied, the check still fails
                status = "verified in part: it leaves some of the failure"
            if self.suggestion.patch is not None and self.suggestion.patch_text is None:
                status = "verified patch"
            lines.append(f"  fix ({status}): {self.suggestion.text}"[:600])
            if self.suggestion.patch_text is not None:  # a patch beside the fix
                lines.append(f"  or patch (verified): {self.suggestion.patch_text}"[:600])
            if self.suggestion.patch is not None:  # the diff itself, its first lines
                diff = self.suggestion.patch.splitlines()
                lines.extend(f"    {line}" for line in diff[:PATCH_LINES])
                if len(diff) > PATCH_LINES:
                    lines.append(f"    ... {len(diff) - PATCH_LINES} more lines (--fx-patch-dir, or the JSON report's suggestion.patch)")
        # a suggestion without options is a code change (an nn.Dropout submodule), unless the
        # search found none: then the category's own code fix is all there is
        code_fix = self.suggestion is not None and not self.suggestion.options and self.suggestion.found
        fix_in_code = self.code_fix
        shown = self.suggestion.text if self.suggestion is not None else ""
        if fix_in_code and not self.ok and not code_fix and fix_in_code not in shown:
            label = "or in code" if self.suggestion is not None and self.suggestion.verified else "fix in code"
            lines.append(f"  {label}: {fix_in_code}")
        if self.dump_path:
            lines.append(f"  traced module written to {self.dump_path}")
        if verbose >= 1 and collection is not None and not self.ok:
            lines.append("  per-module:")
            table = collection.table(limit=None if verbose >= 2 else 60)
            lines.extend("    " + line for line in table.splitlines())
        if verbose >= 2 and self.code:
            lines.append("  generated code:")
            lines.extend("    " + line for line in self.code.strip().splitlines())
        return "\n".join(lines)

    def _coverage_lines(self) -> list[str]:
        """``describe``'s coverage: the localization's summary and its deepest failures,
        or, a failure without one, what the backend counted."""
        collection = self.localization
        lines: list[str] = []
        if collection is not None and not self.ok:
            lines.append(f"  coverage: {collection.summary()}")
            deepest = collection.deepest_failures()
            if deepest:
                lines.append("  failing (deepest first):")
                for record in deepest[:5]:
                    diag = record.diagnosis
                    where = f" at {diag.location}" if diag and diag.location else ""
                    lines.append(f"    {record.label}: {diag.category if diag else '?'}{where}")
                if len(deepest) > 5:
                    lines.append(f"    ... {len(deepest) - 5} more (-v for the per-module table)")
        elif self.coverage is not None and self.status == Status.UNTRACEABLE:
            verb = backend_words(self.backend).past  # no localization: what it counted is not known
            lines.append(f"  coverage: {coverage_text(self.coverage, None, verb)}")
        return lines


def report_label(report: TraceReport) -> str:
    """``ResNet.layer1.0 (BasicBlock)``: the report's model, and its failing submodule if any."""
    return model_label(report.model_name, report.module, report.module_type)


def dotted_class(obj: object) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def model_error_report(
    model: torch.nn.Module, exc: BaseException, options: TraceOptions, hint: str | None = None
) -> TraceReport:
    """The verdict when the eager model itself raised (``hint``: what may be wrong with
    the inputs, e.g. a device mismatch)."""
    name = type(model).__name__
    location = user_location(exc)
    where = f" at {location}" if location else ""
    return TraceReport(
        ok=False,
        status=Status.MODEL_ERROR,
        model=dotted_class(model),
        location=location,
        message=f"{name} raised when run eagerly{where}: not a traceability problem, the model itself fails"
        + (f": {hint}" if hint else ""),
        error=format_error(exc),
        options=options,
        backend=options.backend[0] if options.backend else DEFAULT_BACKEND,
    )


def versions() -> str:
    """What a bug report about pytest-fxtrace needs: its version, torch's and Python's."""
    import platform
    from importlib import metadata

    try:
        ours = metadata.version("pytest-fxtrace")
    except metadata.PackageNotFoundError:
        ours = "(not installed)"
    return f"pytest-fxtrace {ours}, torch {torch.__version__}, python {platform.python_version()}"


def internal_error_report(model: object, exc: BaseException, options: TraceOptions | None = None) -> TraceReport:
    """The verdict when pytest-fxtrace itself raised: a bug of ours, never the model's."""
    name = type(model).__name__
    return TraceReport(
        ok=False,
        status=Status.INTERNAL_ERROR,
        model=dotted_class(model),
        message=(
            f"pytest-fxtrace failed while checking {name}: this is a bug in pytest-fxtrace, not in "
            f"your model or your test ({versions()}).\n  Please report it to pytest-fxtrace with "
            "the traceback below."
        ),
        error="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        options=options or TraceOptions(),
        backend=options.backend[0] if options is not None and options.backend else DEFAULT_BACKEND,
    )


__all__ = ["TraceReport", "internal_error_report", "model_error_report", "report_label", "versions"]


class ReportFindings(TypedDict, total=False):
    """The TraceReport fields a step of the check sets besides the verdict (``check.ModelChecker._fail``'s
    ``**fields``); their types are TraceReport's."""

    location: Location | None
    module: str
    module_type: str | None
    error: str | None
    graph_module: torch.fx.GraphModule | None
    code: str | None
    nodes: int | None
    coverage: float | None
    suggestion: Suggestion | None
    difference: Difference | None
    calls: int
    trace_seconds: float
    replay_seconds: float
    options: TraceOptions
    last_node: str | None
    localization: GraphCollection | None
    divergence: Divergence | None
    dump_path: str | None
    modules: tuple[ModuleNode, ...] | None
    backend: str
    code_fix: str | None
    graph_breaks: tuple[GraphBreak, ...] | None
    recompiles: tuple[Recompile, ...] | None
    grad_mode: str | None
    notes: tuple[str, ...]
    dims: tuple[DimVerdict, ...] | None
    operator: str | None
    autocast: str | None
    train: bool


class ReportFields(ReportFindings, total=False):
    """Any TraceReport field but ``model`` (``check.ModelChecker._note``'s ``**fields``): the findings and the
    verdict (ok, status, category, message)."""

    ok: bool
    status: Status
    category: Category | None
    message: str
