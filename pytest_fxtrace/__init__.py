"""pytest-fxtrace: gate pull requests on PyTorch models staying torch.fx traceable."""

from .check import TraceReport, check_traceable
from .tracer import Tracer, register_leaf, symbolic_trace, unregister_leaf

__all__ = [
    "TraceReport",
    "Tracer",
    "check_traceable",
    "register_leaf",
    "symbolic_trace",
    "unregister_leaf",
]
