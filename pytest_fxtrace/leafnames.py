"""``leaf_modules`` entries that name no class, found at collection instead of silently
tracing through (``LeafNameCheck``).

Imports no torch at import time (the plugin's collection uses it before it knows
whether the run checks any model); each function that needs torch imports it, and by
then the user's code has.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from pytest_fxtrace.importing import OptionError, failed_import, is_missing_module


def _module_classes() -> Iterator[type]:
    import torch

    seen: set[type] = set()
    stack = [torch.nn.Module]
    while stack:
        cls = stack.pop()
        for sub in type.__subclasses__(cls):
            if sub not in seen:
                seen.add(sub)
                stack.append(sub)
                yield sub


def _class_names() -> set[str]:
    names = {"Module"}
    for cls in _module_classes():
        names.update((cls.__name__, cls.__qualname__, f"{cls.__module__}.{cls.__qualname__}"))
    return names


def _names_a_class(spec: str) -> bool:
    """An entry whose last dotted part starts with a capital letter names a class
    (``FrozenBatchNorm2d``, ``torchvision.ops.misc.FrozenBatchNorm2d``); anything
    else is a submodule path (``backbone.body``, ``layer1.0``)."""
    return spec.rpartition(".")[2][:1].isupper()


def names_a_class_path(spec: Any) -> bool:
    """A string naming a class by its dotted path (``pkg.module.FrozenBatchNorm2d``):
    checking it imports ``pkg.module``."""
    return isinstance(spec, str) and "." in spec.strip() and _names_a_class(spec.strip())


def _importable_class(spec: str, what: str) -> bool:
    """Whether the dotted ``spec`` imports as an ``nn.Module`` class; an ``OptionError``
    naming ``what`` when a module it names exists but fails to import."""
    import torch

    module_name, _, attr = spec.rpartition(".")
    while module_name:
        try:
            obj: Any = importlib.import_module(module_name)
        except Exception as exc:
            if not is_missing_module(module_name, exc):
                raise failed_import(what, module_name, spec, exc) from None
            module_name, _, head = module_name.rpartition(".")
            attr = f"{head}.{attr}"
            continue
        for part in attr.split("."):
            obj = getattr(obj, part, None)
        return isinstance(obj, type) and issubclass(obj, torch.nn.Module)
    return False


class LeafNameCheck:
    """``leaf_modules`` entries that name a class no module class has, as a usage
    error naming where they were written (the marker, the ini line).

    A class-like entry (last dotted part capitalised) must be the name, qualified
    name or dotted path of a loaded ``nn.Module`` subclass, or an importable dotted
    path. Classes (not strings) and submodule paths are not judged: a path can only be
    matched against a model, and one ini line serves many models. Bare class names
    from the ini file are not judged either (``bare_names=False``): a run of a few
    test files need not import every class a project-wide ini line names.

    Example::

        LeafNameCheck().check([("@pytest.mark.traceable", {"leaf_modules": ["FrozenBN"]})])
    """

    def __init__(self) -> None:
        self._names: list[str] | None = None  # loaded nn.Module classes, computed once

    def names(self) -> list[str]:
        if self._names is None:
            self._names = sorted(_class_names())
        return self._names

    def unknown(
        self, specs: Iterable[Any], bare_names: bool = True, what: str = "leaf_modules"
    ) -> list[tuple[str, list[str]]]:
        """``[(entry, close matches)]`` for each entry that names no class; an
        ``OptionError`` naming ``what`` for a module that exists but fails to import."""
        found = []
        for spec in specs:
            if not isinstance(spec, str) or not _names_a_class(spec.strip()):
                continue
            spec = spec.strip()
            if "." not in spec and not bare_names:
                continue
            if spec in self.names() or ("." in spec and _importable_class(spec, what)):
                continue
            found.append((spec, difflib.get_close_matches(spec, self.names(), n=3, cutoff=0.6)))
        return found

    def check(self, layers: Iterable[tuple[str, Mapping[str, Any]]], bare_names: bool = True) -> None:
        """Raise ``OptionError`` for the first layer with an entry that names no class."""
        for where, layer in layers:
            value = layer.get("leaf_modules")
            specs = [value] if isinstance(value, (str, type)) else list(value or ())
            unknown = self.unknown(specs, bare_names, f"{where}: leaf_modules")
            if unknown:
                spec, close = unknown[0]
                hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
                raise OptionError(
                    f"{where}: leaf_modules: {spec!r} matches no nn.Module class{hint}. Write the "
                    "class name as defined ('FrozenBatchNorm2d'), its dotted path "
                    "('pkg.module.FrozenBatchNorm2d'), or a submodule path ('backbone.body')."
                )
