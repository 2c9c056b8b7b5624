"""pytest-fxtrace: gate pull requests on PyTorch models staying torch.fx traceable."""

from .check import TraceReport, check_traceable
from .localize import GraphCollection, recursive_trace
from .tracer import Tracer, register_leaf, symbolic_trace, unregister_leaf

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
