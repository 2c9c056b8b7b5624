"""The torch.compile backend (``backend="compile"``): backend.py (capture, run, explain);
session.py (one check's compiled model and what Dynamo did), breaks.py (graph-break sites),
recompiles.py (recompiles in the user's words), verdict.py (the budget and its messages).

``SPECS``: what the registry (``backends/__init__.py``) knows of it before loading it,
with the options it adds (``options.py``)."""

from pytest_fxtrace.backends.compile.options import OPTIONS
from pytest_fxtrace.backends.spec import BackendSpec, Words, torch_problem


def problem() -> str | None:
    """Why this torch cannot run torch.compile as the backend calls it (``_compat``)."""
    from pytest_fxtrace import _compat

    return torch_problem(_compat.compile_problem, _compat.compile_floor_problem)


SPECS = (
    BackendSpec(
        "compile",
        "pytest_fxtrace.backends.compile.backend:CompileBackend",
        help="compile (torch.compile: graph breaks and recompiles)",
        words=Words(
            able="compilable (torch.compile)",
            past="compiled",
            graph="the compiled model",
            doing="compiling",
            running="running the compiled model",
        ),
        problem=problem,
        options=OPTIONS,
        title="the graphs torch.compile captured and its graph breaks",
        order=20,
    ),
)
