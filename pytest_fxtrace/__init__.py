"""pytest-fxtrace: gate pull requests on PyTorch models staying torch.fx traceable.

The public names below import the engine (and torch) on first use (PEP 562), so that
loading the pytest plugin (``pytest_fxtrace.plugin``, which imports this package
first) costs no torch import in a run that checks no model.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_fxtrace.backends.fx.recursive import recursive_trace
    from pytest_fxtrace.backends.fx.tracer import Tracer, register_leaf, symbolic_trace, unregister_leaf
    from pytest_fxtrace.collection import GraphCollection
    from pytest_fxtrace.entry import check_traceable
    from pytest_fxtrace.tracereport import TraceReport

_WHERE = {
    "GraphCollection": "collection",
    "TraceReport": "tracereport",
    "Tracer": "backends.fx.tracer",
    "check_traceable": "entry",
    "recursive_trace": "backends.fx.recursive",
    "register_leaf": "backends.fx.tracer",
    "symbolic_trace": "backends.fx.tracer",
    "unregister_leaf": "backends.fx.tracer",
}

__all__ = [
    "GraphCollection",
    "TraceReport",
    "Tracer",
    "check_traceable",
    "recursive_trace",
    "register_leaf",
    "symbolic_trace",
    "unregister_leaf",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
