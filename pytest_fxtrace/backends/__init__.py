"""The registry of capture backends: a name (the ``backend=`` option value) -> the
``Backend`` subclass that implements it. ``base.py`` documents the interface and how to
add one; ``fx.py`` is torch.fx's.

Example::

    backend = get_backend("fx")(make_tracer=build_tracer)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import Backend

_REGISTRY: dict[str, type[Backend]] = {}


def _builtin() -> dict[str, type[Backend]]:
    # imported on first use: a backend imports its torch machinery, a plugin session
    # that checks nothing never pays for it
    if not _REGISTRY:
        from .export import ExportBackend, ExportStrictBackend
        from .fx import FxBackend

        for backend in (FxBackend, ExportBackend, ExportStrictBackend):
            _REGISTRY[backend.name] = backend
    return _REGISTRY


def register_backend(backend: type[Backend]) -> type[Backend]:
    """Make ``backend`` available under ``backend.name`` (usable as a class decorator)."""
    _builtin()[backend.name] = backend
    return backend


def get_backend(name: str) -> type[Backend]:
    """The backend registered as ``name``; a ``ValueError`` names the known ones."""
    registry = _builtin()
    try:
        return registry[name]
    except KeyError:
        known = ", ".join(repr(n) for n in sorted(registry))
        raise ValueError(f"no capture backend named {name!r}; known backends: {known}") from None


def backend_names() -> list[str]:
    return sorted(_builtin())


__all__ = ["backend_names", "get_backend", "register_backend"]
