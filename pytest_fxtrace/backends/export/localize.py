"""Which submodules export, how much of the model that is, and a verified fix.

When a model does not export, each submodule is exported on its own, on the inputs it
really received in an eager run of the recorded call (as the FX localization traces
them), so a detection model whose root fails still shows its backbone as exportable.
Like ``torch._export.tools.report_exportability`` a module that exports is not looked
into further; unlike it:

* the modules on the failing stack are known to fail from the root's own failure (they
  run the failing statement), so they are not exported again -- only their children;
* a module whose class, configuration and inputs equal one already exported takes its
  result, instead of being skipped unreported (every module has a status);
* each failure gets the full diagnosis (category, statement, fix), and the result is a
  ``GraphCollection``: coverage, the deepest failures, the per-module table.

The export backend (``backends/export/backend.py``) calls it and searches the fixes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch.nn.modules.module import register_module_forward_hook

from pytest_fxtrace.backends.export.diagnose import diagnose_export_failure, is_interface_error
from pytest_fxtrace.backends.export.shapes import leaves
from pytest_fxtrace.binding import EagerRecord, record_eager
from pytest_fxtrace.capture import CapturedCall, suspended
from pytest_fxtrace.collection import GraphCollection, ModuleRecord, is_under
from pytest_fxtrace.rng import RngState
from pytest_fxtrace.state import ModelState, named_modules
from pytest_fxtrace.types import Category, Diagnosis, ModuleStatus


def _chain(path: str) -> set[str]:
    """``path`` and every module above it: ``{"", "a", "a.b"}`` for ``"a.b"``."""
    parts = path.split(".") if path else []
    return {".".join(parts[:i]) for i in range(len(parts) + 1)}


def _signature(module: torch.nn.Module, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """Equal for two modules that export alike: the same classes and configuration all
    the way down (``repr``, and every plain attribute), the same input kinds and sizes."""
    try:
        inputs = [(leaf.name, leaf.kind, leaf.shape) for leaf in leaves(module, args, kwargs)]
    except TypeError:  # inputs the forward's signature does not bind
        return None
    settings = [
        (type(inner), sorted((k, v) for k, v in vars(inner).items() if type(v) in (int, float, bool, str, type(None))))
        for inner in module.modules()
    ]
    return (repr(module), repr(settings), repr(inputs))


@contextlib.contextmanager
def completed_calls(model: torch.nn.Module) -> Iterator[set[str]]:
    """Within the block, the paths of ``model``'s submodules whose ``forward`` ran to its
    end are collected (a global forward hook, removed afterwards). Non-strict export runs
    the model's Python for real: a submodule it got through before failing was exported,
    on the inputs it really received, as part of the root's own trace."""
    paths = {id(module): path for path, module in model.named_modules() if path}
    done: set[str] = set()

    def hook(module: torch.nn.Module, args: Any, output: Any) -> None:
        path = paths.get(id(module))
        if path is not None:
            done.add(path)

    handle = register_module_forward_hook(hook)
    try:
        yield done
    finally:
        handle.remove()


def localize_export(
    model: torch.nn.Module,
    call: CapturedCall,
    root: Diagnosis,
    strict: bool,
    completed: Collection[str] = (),
) -> GraphCollection:
    """Per-module export results for a model whose own export failed with ``root``;
    ``completed``: the submodules the failing export got through (``completed_calls``),
    which are not exported again.

    Example::

        collection = localize_export(model, call, diagnosis, strict=False)
        collection.coverage, [r.path for r in collection.deepest_failures()]
    """
    start = time.perf_counter()
    walk = _ExportWalk(model, call, root, strict, completed)
    rng = RngState.capture()
    try:
        walk.records[""] = ModuleRecord("", type(model).__name__, ModuleStatus.FAILED, _diagnosis=root)
        with suspended():
            walk.visit("")
    finally:
        walk.state.restore()
        rng.restore()
    walk.mark("", ModuleStatus.UNVISITED)
    ordered = {path: walk.records[path] for path in walk.modules}
    return GraphCollection(model, ordered, {}, time.perf_counter() - start, verb="exported")


class _ExportWalk:
    """``localize_export``'s walk down from the root: what each submodule's export found,
    the eager inputs it is exported with, and the model's attributes to put back after
    each export."""

    def __init__(
        self, model: torch.nn.Module, call: CapturedCall, root: Diagnosis, strict: bool, completed: Collection[str]
    ) -> None:
        self.model, self.call, self.root, self.strict, self.completed = model, call, root, strict, completed
        self.modules = named_modules(model)
        self.recorded: list[EagerRecord] = []
        self.state = ModelState.attributes_of(list(dict.fromkeys(self.modules.values())))
        self.failing = _chain(root.module)
        self.records: dict[str, ModuleRecord] = {}
        self.known: dict[tuple[Any, ...], Diagnosis | None] = {}  # by call signature

    def inputs(self) -> dict[str, Any]:
        """Each submodule's first inputs in an eager run, recorded on first need."""
        if not self.recorded:
            call = self.call
            self.recorded.append(record_eager(self.model, call.args, call.kwargs, call.state, call.rng))
            self.state.restore()
        return self.recorded[0].inputs

    def mark(self, path: str, status: ModuleStatus) -> None:
        for inner in self.modules:
            if is_under(inner, path) and inner not in self.records:
                self.records[inner] = ModuleRecord(inner, type(self.modules[inner]).__name__, status)

    def visit(self, path: str) -> None:
        prefix = f"{path}." if path else ""
        module = self.modules[path]
        for name, child in module.named_children():
            inner = prefix + name
            if inner not in self.modules or self.modules[inner] is not child or inner in self.records:
                continue  # a module reached under another path first
            found = self.status_of(inner, child)
            if found is None:  # exported whole: everything under it with it
                self.mark(inner, ModuleStatus.TRACED)
                continue
            status, diagnosis = found
            self.records[inner] = ModuleRecord(inner, type(child).__name__, status, _diagnosis=diagnosis)
            self.visit(inner)

    def status_of(self, inner: str, child: torch.nn.Module) -> tuple[ModuleStatus, Diagnosis | None] | None:
        """The status of the submodule at ``inner``, whose children are visited next;
        None when it exported whole."""
        if inner in self.failing:
            return ModuleStatus.FAILED, self.root
        if inner in self.completed:  # exported within the root's own trace, before it failed
            return ModuleStatus.TRACED, None  # what it called was exported with it; what it did not, was not reached
        if inner not in self.inputs():  # never called itself; a container (ModuleList) holds modules that were
            return ModuleStatus.UNUSED, None
        diagnosis = self.export(inner, child)
        if diagnosis is None:
            return None
        if diagnosis is INTERFACE:  # not exportable on its own; its children may be
            return ModuleStatus.UNVISITED, None
        return ModuleStatus.FAILED, diagnosis

    def export(self, inner: str, child: torch.nn.Module) -> Diagnosis | None:
        """``child`` exported alone with its eager inputs, once per call signature."""
        args, kwargs = self.inputs()[inner]
        key = _signature(child, args, kwargs)
        if key is not None and key in self.known:
            diagnosis = self.known[key]
            if diagnosis is not None and diagnosis is not INTERFACE:
                diagnosis = dataclasses.replace(diagnosis, module=inner)
            return diagnosis
        diagnosis = _export_alone(child, inner, args, kwargs, self.strict)
        self.state.restore()
        if key is not None:
            self.known[key] = diagnosis
        return diagnosis


# a submodule export cannot take on its own: its inputs or outputs are objects export
# does not flatten (torchvision's ImageList) -- a limit of exporting it alone, not a fault
INTERFACE = Diagnosis(Category.UNSUPPORTED, "its inputs or outputs are not exportable types")


def _export_alone(
    module: torch.nn.Module, path: str, args: Sequence[Any], kwargs: Mapping[str, Any], strict: bool
) -> Diagnosis | None:
    """None when ``module`` exports on these inputs, ``INTERFACE`` when export refuses
    its inputs or outputs, else why not (paths of the model)."""
    try:
        torch.export.export(module, tuple(args), dict(kwargs), strict=strict)
    except Exception as exc:
        if is_interface_error(exc):
            return INTERFACE
        return diagnose_export_failure(exc, module, strict, prefix=path)
    return None
