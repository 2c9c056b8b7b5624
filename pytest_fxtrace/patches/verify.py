"""Find a verified patch: each candidate rewrite of the failing statement applied in memory,
the class rebuilt from it in its module's namespace, and the patched model tried through a
``PatchTrial`` (the caller's: eager equality, then the same check).

Only a class defined at a module's top level, undecorated, is rebuilt (its source is one block
of its file, and nothing but the class statement runs again);
the modules of exactly that class get the rebuilt class, a subclass's instances are not
touched (the patch is then not verified). The user's files are never written, the user's model
is never patched: the trial works on copies.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import sys
from collections.abc import Callable

import torch

from pytest_fxtrace.patches.diff import unified_diff
from pytest_fxtrace.patches.rewrites import rewrites
from pytest_fxtrace.types import Diagnosis, Suggestion

# the caller's trial of a patched model: given what turns a copy of the model (as before the
# call) into the patched one, (passed, what happened): eager answered as before and the check passed
PatchTrial = Callable[[Callable[[torch.nn.Module], torch.nn.Module]], "tuple[bool, str]"]


@dataclasses.dataclass(frozen=True)
class _Source:
    cls: type
    file: str
    lines: list[str]
    start: int  # the class's first line in its file


def _defining_class(model: torch.nn.Module, diagnosis: Diagnosis) -> _Source | None:
    """The class whose source holds the failing statement: the failing submodule's class or
    one of its bases, defined at a module's top level."""
    location = diagnosis.location
    if location is None:
        return None
    try:
        owner = model.get_submodule(diagnosis.module) if diagnosis.module else model
    except AttributeError:
        return None
    for cls in type(owner).__mro__:
        if cls.__module__.startswith("torch.") or "." in cls.__qualname__:
            continue
        try:
            file = inspect.getsourcefile(cls)
            lines, start = inspect.getsourcelines(cls)
        except (OSError, TypeError):
            continue
        if file is None or not _same_file(file, location.path):
            continue
        if start <= location.line < start + len(lines):
            # a decorated class is not rebuilt: a decorator run again may register the copy
            # in a library's registry (timm's register_notrace_module), or build another class
            return _Source(cls, file, lines, start) if not lines[0].lstrip().startswith("@") else None
    return None


def _same_file(file: str, shown: str) -> bool:
    return os.path.abspath(file) == os.path.abspath(shown) or os.path.abspath(file).endswith(os.sep + shown.replace("/", os.sep))


def _rebuilt(cls: type, source: str, file: str) -> type:
    """``cls`` defined again from ``source`` in a copy of its module's namespace."""
    module = sys.modules[cls.__module__]
    namespace = dict(vars(module))
    exec(compile(source, f"{file} (patched by pytest-fxtrace)", "exec"), namespace)  # the user's own class, rewritten
    rebuilt = namespace[cls.__name__]
    if not isinstance(rebuilt, type):
        raise TypeError(f"{cls.__name__} is not a class in the patched source")
    rebuilt.__module__ = cls.__module__
    return rebuilt


def _swap(cls: type, rebuilt: type) -> Callable[[torch.nn.Module], torch.nn.Module]:
    def make(model: torch.nn.Module) -> torch.nn.Module:
        modules = list(model.modules())
        if any(isinstance(m, cls) and type(m) is not cls for m in modules):
            raise TypeError(f"a subclass of {cls.__name__} would keep the old code")
        for module in modules:
            if type(module) is cls:
                module.__class__ = rebuilt
        return model

    return make


def find_patch(model: torch.nn.Module, diagnosis: Diagnosis, trial: PatchTrial) -> Suggestion | None:
    """The first candidate rewrite of ``diagnosis``'s statement that ``trial`` passes, as a
    verified suggestion carrying its diff; None: no candidate, or none passed."""
    found = _defining_class(model, diagnosis)
    if found is None or diagnosis.location is None:
        return None
    if not isinstance(sys.modules[found.cls.__module__].__dict__.get("torch"), type(torch)):
        return None  # the rewrites call torch.*: a module that does not import torch as torch
    source = "".join(found.lines)
    for rewrite in rewrites(source, diagnosis.location.line - found.start + 1):
        try:
            rebuilt = _rebuilt(found.cls, rewrite.source, found.file)
        except Exception:  # a rewrite that does not compile is just not a patch
            continue
        passed, _ = trial(_swap(found.cls, rebuilt))
        if not passed:
            continue
        diff = unified_diff(found.file, found.cls.__module__, found.lines, rewrite.source, found.start)
        statement = diagnosis.location.source.strip()
        return Suggestion(
            f"patch `{statement}` at {diagnosis.location}: {rewrite.what} (applied to a copy, "
            "the check passed and eager answered as before)",
            True,
            patch=diff,
        )
    return None
