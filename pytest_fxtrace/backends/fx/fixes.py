"""Fix search: the option changes worth trying for a failure that localization
found (a library's own tracer, autowraps, leaf modules, concrete flags), and the
search that verifies them one by one through a ``recheck`` callable.

Knows the model, the localization (``GraphCollection``) and the options; knows nothing
of the checker, a backend's internals or pytest: a fix is verified by re-running the
check through the callable it is given.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING

import torch

from pytest_fxtrace.types import Category, Suggestion, option_json

if TYPE_CHECKING:
    from pytest_fxtrace.collection import GraphCollection, ModuleRecord
    from pytest_fxtrace.options import TraceOptions

# a fix's (TraceOptions changes, marker options)
_Changes = tuple[dict[str, object], dict[str, object]]


def _leaf_specs(model: torch.nn.Module, paths: list[str]) -> list[str]:
    """Class names where every module of that class is meant, else paths."""
    modules = dict(model.named_modules())
    specs = []
    for path in paths:
        cls = type(modules[path])
        same = [p for p, m in modules.items() if type(m) is cls]
        name = cls.__name__
        clash = any(type(m).__name__ == name and type(m) is not cls for m in modules.values())
        spec = name if set(same) <= set(paths) and not clash else path
        if spec not in specs:
            specs.append(spec)
    return specs


# Model libraries whose models are written for the library's own tracer: (module and
# name of the models' base class, the tracer's path). transformers >= 5 has no HFTracer.
LIBRARY_TRACERS = (("transformers.modeling_utils", "PreTrainedModel", "transformers.utils.fx:HFTracer"),)


def library_tracer(model: torch.nn.Module, options: TraceOptions) -> tuple[str, type] | None:
    """(path, class) of the tracer the model's library wrote it for, where the check
    used another one and that tracer can be imported."""
    from pytest_fxtrace.importing import import_object

    for cls in type(model).__mro__:
        for module, name, path in LIBRARY_TRACERS:
            if cls.__module__ == module and cls.__name__ == name:
                try:
                    tracer = import_object(path, "tracer")
                except Exception:
                    return None
                if isinstance(options.tracer, type) and issubclass(options.tracer, tracer):
                    return None
                return path, tracer
    return None


def fix_candidates(
    model: torch.nn.Module, collection: GraphCollection, options: TraceOptions, flags: dict[str, object] | None = None
) -> tuple[list[Suggestion], list[str]]:
    """Fixes worth trying, most specific first, and why other kinds were not tried.

    The tracer the model's library wrote it for (HF's ``HFTracer`` for a transformers
    model); an autowrap of ``len`` or of the helper function that failed, which keeps the
    rest of the failing module in the graph; leaf modules for the deepest failing
    submodules; concrete values for flag arguments of the root.
    """
    candidates: list[Suggestion] = []
    library = library_tracer(model, options)
    if library is not None:
        candidates.append(Suggestion.marker({"tracer": library[0]}, {"tracer": library[1]}))
    fixes = _Fixes(model, collection, options)
    candidates += fixes.autowrap_len()
    candidates += fixes.autowrap_helpers()
    if not fixes.root_failed:  # several kinds of failing module: each one's own fix, together
        tried = [candidate.options for candidate in candidates]
        for changes, opts in _combined_fixes(model, collection, options, fixes.leaf_candidate):
            if opts not in tried:
                tried.append(opts)
                candidates.append(Suggestion.marker(opts, changes))
    if fixes.children and not fixes.root_failed:  # after the autowraps: a leaf hides the most
        changes, opts = fixes.leaf_candidate(fixes.children)
        if opts not in [candidate.options for candidate in candidates]:
            candidates.append(Suggestion.marker(opts, changes))
    root = collection.records[""]
    if fixes.root_failed and flags and root.diagnosis and root.diagnosis.category in (
        Category.CONTROL_FLOW, Category.TYPE_CONVERSION, Category.ITERATION, Category.LEN
    ):
        concrete = {**dict(options.concrete_args or {}), **flags}
        candidates.append(Suggestion.marker({"concrete_args": option_json(concrete)}, {"concrete_args": concrete}))
    skipped: list[str] = []
    if fixes.root_failed and not candidates:
        where = f" at {root.diagnosis.location}" if root.diagnosis and root.diagnosis.location else ""
        skipped.append(
            f"the root's own forward fails{where}, which no leaf module can hide, and no helper "
            "function, len() or flag argument is involved"
        )
    return candidates, skipped


class _Fixes:
    """What ``fix_candidates``' kinds of fix share: the deepest failing submodules, whether
    the root's own forward failed, and the leaf modules already configured."""

    def __init__(self, model: torch.nn.Module, collection: GraphCollection, options: TraceOptions) -> None:
        self.model, self.collection, self.options = model, collection, options
        failures = collection.deepest_failures()
        self.root_failed: bool = collection.records[""].is_failed
        self.children: list[str] = [r.path for r in failures if r.path]
        self.leaves = list(options.leaf_modules)
        self.leaf_json = option_json(self.leaves, "leaf_modules")

    def leaf_candidate(self, paths: list[str]) -> _Changes:
        specs = _leaf_specs(self.model, paths)
        return {"leaf_modules": (*self.leaves, *specs)}, {"leaf_modules": [*self.leaf_json, *specs]}

    def autowrap_len(self) -> list[Suggestion]:
        """An autowrap of ``len``, where ``len(proxy)`` failed: recorded as a graph call it
        keeps the module in the graph, so it is tried before a leaf."""
        failed = self.collection.failed()
        len_failures = [r.path for r in failed if r.diagnosis and r.diagnosis.category == "len"]
        if not len_failures or len in self.options.autowrap_functions:
            return []
        if self.root_failed and "" not in len_failures:
            return []
        return [self._autowrap([("builtins:len", len)], len_failures)]

    def autowrap_helpers(self) -> list[Suggestion]:
        """An autowrap of the helper functions that failed, those that can be imported."""
        failed = self.collection.failed()
        helpers = {r.path: r.diagnosis.helpers[0] for r in failed if r.diagnosis and r.diagnosis.helpers}
        if not helpers:
            return []
        funcs = _importable(helpers.values())
        if not funcs or (self.root_failed and "" not in helpers):
            return []
        return [self._autowrap(funcs, helpers)]

    def _autowrap(self, funcs: list[tuple[str, Callable[..., object]]], handled: Collection[str]) -> Suggestion:
        """The autowrap of ``funcs``; the failing submodules it does not handle become leaves."""
        autowrapped = self.options.autowrap_functions
        changes: dict[str, object] = {"autowrap_functions": (*autowrapped, *(f for _, f in funcs))}
        opts: dict[str, object] = {"autowrap_functions": [*option_json(list(autowrapped)), *(d for d, _ in funcs)]}
        rest = [p for p in self.children if p not in handled]
        if rest:
            more_changes, more_opts = self.leaf_candidate(rest)
            changes.update(more_changes)
            opts.update(more_opts)
        return Suggestion.marker(opts, changes)


def _importable(helpers: Iterable[str]) -> list[tuple[str, Callable[..., object]]]:
    """``(dotted name, function)`` of each helper (once, in order) that can be imported:
    what an autowrap fix names and what it wraps."""
    from pytest_fxtrace.importing import import_object

    funcs = []
    for dotted in dict.fromkeys(helpers):
        try:
            funcs.append((dotted, import_object(dotted, "autowrap")))
        except Exception:  # not importable by that name (a local function): no autowrap for it
            continue
    return funcs


MAX_COMBINATIONS = 6  # each one tried costs a trace, a replay and a comparison


def _combined_fixes(
    model: torch.nn.Module,
    collection: GraphCollection,
    options: TraceOptions,
    leaf_candidate: Callable[[list[str]], _Changes],
) -> list[_Changes]:
    """When submodules of two or more classes fail (timm's ``nest_tiny_jx``: ``NestLevel``
    converts a size with ``int()``, ``MaxPool2dSame`` branches on one), each class gets
    its own fixes, in order: an autowrap of the helper its failures share (or of
    ``len``), then making its failing modules leaves. Returned: the combinations of one
    fix per class, most specific first (autowraps before leaves), at most
    ``MAX_COMBINATIONS``, as (``TraceOptions`` changes, marker options)."""
    kinds: dict[type, list[ModuleRecord]] = {}
    modules = dict(model.named_modules())
    for record in collection.failed():
        if record.path and record.path in modules:
            kinds.setdefault(type(modules[record.path]), []).append(record)
    if len(kinds) < 2:
        return []
    # each kind's fixes: (functions to autowrap, paths to make leaves), one of them empty
    per_kind: list[list[tuple[list[tuple[str, Callable[..., object]]], list[str]]]] = []
    for records in kinds.values():
        own: list[tuple[list[tuple[str, Callable[..., object]]], list[str]]] = []
        diagnoses = [record.diagnosis for record in records]
        if all(d is not None and d.category == Category.LEN for d in diagnoses) and len not in options.autowrap_functions:
            own.append(([("builtins:len", len)], []))
        elif all(d is not None and d.helpers for d in diagnoses):
            funcs = _importable(d.helpers[0] for d in diagnoses if d is not None)
            if funcs:
                own.append((funcs, []))
        own.append(([], [record.path for record in records]))
        per_kind.append(own)
    combined = []
    for choice in itertools.islice(itertools.product(*per_kind), MAX_COMBINATIONS + 1):
        funcs = [f for wrapped, _ in choice for f in wrapped]
        paths = [p for _, leaves in choice for p in leaves]
        changes: dict[str, object] = {}
        opts: dict[str, object] = {}
        if funcs:
            funcs = list(dict(funcs).items())  # each function once, in order
            changes["autowrap_functions"] = (*options.autowrap_functions, *(f for _, f in funcs))
            opts["autowrap_functions"] = [*option_json(list(options.autowrap_functions)), *(d for d, _ in funcs)]
        if paths:
            more_changes, more_opts = leaf_candidate(paths)
            changes.update(more_changes)
            opts.update(more_opts)
        combined.append((changes, opts))
    return combined[:MAX_COMBINATIONS]


def flag_arguments(model: torch.nn.Module, args: tuple[object, ...], kwargs: Mapping[str, object]) -> dict[str, object]:
    """Root arguments that are one-element bool/int tensors: flags that can be made concrete."""
    try:
        bound = inspect.signature(type(model).forward).bind(model, *args, **kwargs)
    except TypeError:
        return {}
    return {
        name: value.item()
        for name, value in list(bound.arguments.items())[1:]
        if isinstance(value, torch.Tensor)
        and value.numel() == 1
        and (value.dtype == torch.bool or not value.is_floating_point() and not value.is_complex())
    }




def search(
    candidates: list[Suggestion], skipped: list[str], recheck: Callable[[TraceOptions], tuple[bool, str]], options: TraceOptions
) -> Suggestion:
    """The first candidate that ``recheck`` passes, verified; else "none found" with
    what was tried (or why nothing could be)."""
    tried = []
    for candidate in candidates:
        ok, why = recheck(options.replace(**candidate.changes))
        if ok:
            return candidate.verified_as(True)
        tried.append(f"{candidate.text} ({why})")
    text = "none found; tried " + "; ".join(tried) if tried else "none found: " + "; ".join(skipped)
    return Suggestion(text, False, found=False)


__all__ = ["fix_candidates", "flag_arguments", "library_tracer", "search"]
