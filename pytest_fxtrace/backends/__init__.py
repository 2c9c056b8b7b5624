"""The registry of capture backends: a name (the ``backend=`` option value) -> its
``BackendSpec`` (``spec.py``: how backends are found, availability, options, snapshot
title, words) and the ``Backend`` subclass that implements it (``base.py``: the interface).

A spec is light; the ``Backend`` it names is imported here on first use, so a session that
checks nothing never pays for torch. This module, ``spec.py`` and ``base.py`` are the core's
side of the seam: none imports a backend's folder by name.

Example::

    backend = build_backend("fx", Seams(module_tree=True))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_fxtrace.backends.spec import (
    DEFAULT_BACKEND,
    GROUP,
    BackendSpec,
    add_spec,
    as_specs,
    backend_names,
    backend_words,
    get_spec,
)
from pytest_fxtrace.importing import import_object

if TYPE_CHECKING:
    from pytest_fxtrace.backends.base import Backend, Seams

_LOADED: dict[str, type[Backend]] = {}


def register_backend(backend: type[Backend]) -> type[Backend]:
    """Make ``backend`` available under ``backend.name`` (usable as a class decorator); a
    package's entry point in the group ``pytest_fxtrace.backends`` does the same without
    being imported first, and can name the options it adds (a ``BackendSpec``)."""
    (spec,) = as_specs(backend, f"register_backend({backend!r})")
    add_spec(spec)
    _LOADED[spec.name] = backend
    return backend


def get_backend(name: str) -> type[Backend]:
    """The ``Backend`` subclass of ``name`` (imported on first use); a ``ValueError`` names
    the known ones."""
    if name not in _LOADED:
        target = get_spec(name).backend
        _LOADED[name] = import_object(target, f"backend {name!r}") if isinstance(target, str) else target
    return _LOADED[name]


def build_backend(name: str, seams: Seams) -> Backend:
    """The backend ``name``, built with what the caller lends it."""
    return get_backend(name)(seams)


__all__ = [
    "DEFAULT_BACKEND",
    "GROUP",
    "BackendSpec",
    "backend_names",
    "backend_words",
    "build_backend",
    "get_backend",
    "get_spec",
    "register_backend",
]
