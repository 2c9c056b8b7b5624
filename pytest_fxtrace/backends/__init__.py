"""The registry of capture backends: a name (the ``backend=`` option value) -> the
``Backend`` subclass that implements it. ``base.py`` documents the interface and how to
add one; each backend is a folder beside it (``fx/``, ``export/``).

The built-in backends are named by where they live and imported on first use: a
backend imports its torch machinery, and a session that checks nothing never pays for
it. This module and ``base.py`` are the core's side of the seam: neither imports a
backend's folder.

Example::

    backend = build_backend("fx", Seams(module_tree=True))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_fxtrace.importing import import_object

if TYPE_CHECKING:
    from pytest_fxtrace.backends.base import Backend, Seams, Words

BUILTIN = {
    "fx": "pytest_fxtrace.backends.fx.backend:FxBackend",
    "export": "pytest_fxtrace.backends.export.backend:ExportBackend",
    "export-strict": "pytest_fxtrace.backends.export.backend:ExportStrictBackend",
    "compile": "pytest_fxtrace.backends.compile.backend:CompileBackend",
}
_REGISTERED: dict[str, type[Backend]] = {}


def register_backend(backend: type[Backend]) -> type[Backend]:
    """Make ``backend`` available under ``backend.name`` (usable as a class decorator)."""
    _REGISTERED[backend.name] = backend
    return backend


def get_backend(name: str) -> type[Backend]:
    """The backend registered as ``name``; a ``ValueError`` names the known ones."""
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name not in BUILTIN:
        known = ", ".join(repr(n) for n in backend_names())
        raise ValueError(f"no capture backend named {name!r}; known backends: {known}")
    backend: type[Backend] = import_object(BUILTIN[name], f"backend {name!r}")
    _REGISTERED[name] = backend
    return backend


def build_backend(name: str, seams: Seams) -> Backend:
    """The backend ``name``, built with what the caller lends it."""
    return get_backend(name)(seams)


def backend_words(name: str) -> Words:
    """How messages speak of the backend ``name``'s capture ("compiled", "the compiled
    model"), for a report that holds only its name; the FX words where it cannot be loaded
    here (a merged report from a machine with another backend installed).

    Example: ``backend_words("export").past == "exported"``.
    """
    from pytest_fxtrace.backends.base import Words
    from pytest_fxtrace.options import TraceOptions

    try:
        return get_backend(name)().words(TraceOptions(backend=(name,)))
    except Exception:  # not installed here, or not loadable: the words of the default backend
        return Words()


def backend_names() -> list[str]:
    return sorted({*BUILTIN, *_REGISTERED})


__all__ = ["BUILTIN", "backend_names", "backend_words", "build_backend", "get_backend", "register_backend"]
