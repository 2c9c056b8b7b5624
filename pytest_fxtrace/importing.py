"""Importing what an option names by its path (``"pkg.mod:Class"``, ``"pkg.mod.func"``),
and the error a wrong option raises.

A name that cannot be imported is an ``OptionError`` that tells a module that does not
exist (a typo, a package not installed) from one that exists but whose own code fails
to import, and says where that code raised. ``check_import_path`` answers the first
question without running any module's code (``find_module``), so the plugin can check
the ini file and command line at start-up without importing torch or the user's package.
"""

from __future__ import annotations

import builtins
import difflib
import importlib
import os
import sys
import types
from collections.abc import Iterable
from typing import Any


class OptionError(ValueError):
    """A user-written option is wrong; the message names it and says how to fix it."""


def did_you_mean(word: str, choices: Iterable[str], n: int = 3) -> str:
    """`` (did you mean 'x'?)`` for the ``choices`` close to a misspelt ``word``, else ``""``.

    Example: ``did_you_mean("exprot", ["fx", "export"]) == " (did you mean 'export'?)"``.
    Case, ``_`` and ``-`` are ignored in the comparison (``control_flow``, ``Timm``).
    """
    folded = {choice.lower().replace("_", "-"): choice for choice in choices}
    close = difflib.get_close_matches(word.lower().replace("_", "-"), list(folded), n=n, cutoff=0.6)
    return f" (did you mean {', '.join(repr(folded[c]) for c in close)}?)" if close else ""


def _split_path(path: Any, what: str) -> tuple[str, str]:
    """``(module, attribute path)`` of ``"pkg.mod:attr"`` or ``"pkg.mod.attr"``."""
    if not isinstance(path, str) or not path.strip():
        raise OptionError(f"{what}: expected a dotted path like 'pkg.module:Name', got {path!r}")
    path = path.strip()
    if ":" in path:
        module_name, _, attr_path = path.partition(":")
    else:
        module_name, _, attr_path = path.rpartition(".")
    if not module_name or not attr_path:
        builtin = f"; for the builtin {path}, write 'builtins:{path}'" if hasattr(builtins, path) else ""
        raise OptionError(f"{what}: {path!r} is not a dotted path like 'pkg.module:Name'{builtin}")
    return module_name, attr_path


def _cannot_import(what: str, module_name: str, path: str, exc: BaseException) -> OptionError:
    return OptionError(
        f"{what}: cannot import module {module_name!r} from {path!r} ({exc}). "
        "Check the spelling and that the package is installed in this environment."
    )


def is_missing_module(module_name: str, exc: BaseException) -> bool:
    """Whether importing ``module_name`` raised ``exc`` because no such module exists
    (it, or a package above it), rather than because its own code failed (an
    ``import torchvision`` inside it included)."""
    missing = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    return bool(missing) and (module_name == missing or module_name.startswith(f"{missing}."))


def _raised_at(exc: BaseException) -> str:
    """``file:line`` of the innermost Python frame ``exc`` went through (not importlib's)."""
    where = ""
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not filename.startswith("<"):
            path = os.path.abspath(filename)
            rel = os.path.relpath(path) if path.startswith(os.getcwd() + os.sep) else path
            where = f"{rel}:{tb.tb_lineno}"
        tb = tb.tb_next
    return where


def failed_import(what: str, module_name: str, path: str, exc: BaseException) -> OptionError:
    """The error for a module that exists but whose own code raised on import."""
    at = _raised_at(exc)
    missing = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    fix = (
        f"install {missing!r} in this environment (a dependency of {module_name!r})"
        if missing
        else f"fix the error in {module_name!r} (or what it imports)"
    )
    return OptionError(
        f"{what}: module {module_name!r}{'' if path == module_name else f' (from {path!r})'} failed to import: "
        f"{type(exc).__name__}: {exc}{f' (raised at {at})' if at else ''}. "
        f"The name is right, but importing it fails: {fix}."
    )


def import_module(module_name: str, what: str, path: str) -> types.ModuleType:
    """``importlib.import_module``; an ``OptionError`` naming ``what`` that tells a
    module that does not exist from one that exists but fails to import."""
    try:
        return importlib.import_module(module_name)
    except Exception as exc:
        if is_missing_module(module_name, exc):
            raise _cannot_import(what, module_name, path, exc) from None
        raise failed_import(what, module_name, path, exc) from None


def find_module(name: str) -> None:
    """Raise ``ModuleNotFoundError`` (worded as ``import`` words it) when no module
    ``name`` can be found; run no module's code to find out.

    The finders on ``sys.meta_path`` locate each dotted prefix in its parent's
    ``__path__`` without executing the parent, so checking ``pkg.tracers`` does not
    import ``pkg`` (nor the torch it imports). Whether the module then imports, and
    has the attribute named, is only known by importing it (``import_object``).
    """
    path: Any = None
    prefix = ""
    for part in name.split("."):
        parent, prefix = prefix, f"{prefix}.{part}" if prefix else part
        if parent and path is None:
            raise ModuleNotFoundError(f"No module named {prefix!r}; {parent!r} is not a package", name=prefix)
        module = sys.modules.get(prefix)
        if module is not None:
            path = getattr(module, "__path__", None)
            continue
        for finder in sys.meta_path:
            find_spec = getattr(finder, "find_spec", None)
            spec = find_spec(prefix, path, None) if find_spec is not None else None
            if spec is not None:
                break
        else:
            raise ModuleNotFoundError(f"No module named {prefix!r}", name=prefix)
        path = spec.submodule_search_locations


def check_import_path(path: Any, what: str) -> None:
    """``import_object``'s errors that can be told without importing: the path's form
    and whether its module exists (see ``find_module``)."""
    module_name, _ = _split_path(path, what)
    try:
        find_module(module_name)
    except ImportError as exc:
        raise _cannot_import(what, module_name, path.strip(), exc) from None


def import_object(path: str, what: str) -> Any:
    """Import ``"pkg.mod:attr"`` or ``"pkg.mod.attr"``; raise OptionError naming ``what``."""
    module_name, attr_path = _split_path(path, what)
    path = path.strip()
    obj: Any = import_module(module_name, what, path)
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise OptionError(
                f"{what}: module {module_name!r} has no attribute {attr_path!r} (from {path!r})."
            ) from None
    return obj
