"""The ONNX backend (``backend.py``): ``torch.onnx.export(..., dynamo=True)`` of the exported
program, run in ONNX Runtime and compared with eager; a conversion's failure at the user's
statement (``convert.py``); the ONNX graph's snapshot text (``code.py``).

``SPECS``: what the registry knows of it before loading it. It needs the ``onnx`` extra
(``pip install 'pytest-fxtrace[onnx]'``: onnx, onnxscript, onnxruntime) and the export
backend's torch (``torch.onnx.export(dynamo=True)`` is built on ``torch.export``)."""

from pytest_fxtrace.backends.onnx.options import OPTIONS
from pytest_fxtrace.backends.spec import BackendSpec, Words

# what the extra installs, by import name
EXTRA = ("onnx", "onnxscript", "onnxruntime")


def problem() -> str | None:
    """Why this environment cannot run the ONNX backend: a package of the extra missing,
    or a torch the export backend refuses."""
    import importlib.util

    missing = [name for name in EXTRA if importlib.util.find_spec(name) is None]
    if missing:
        return (
            f"backend='onnx' needs {', '.join(missing)} (not installed)\n"
            "  install the extra: pip install 'pytest-fxtrace[onnx]' (onnx, onnxscript, onnxruntime)"
        )
    from pytest_fxtrace.backends.export import problem as export_problem

    found = export_problem()
    return None if found is None else found.replace("backend='export'", "backend='onnx' (built on torch.export)")


SPECS = (
    BackendSpec(
        "onnx",
        "pytest_fxtrace.backends.onnx.backend:OnnxBackend",
        help="onnx (torch.onnx.export(dynamo=True), run in ONNX Runtime)",
        words=Words(
            able="exportable to ONNX (torch.onnx, dynamo=True)",
            past="exported to ONNX",
            graph="the ONNX model (ONNX Runtime)",
            doing="exporting to ONNX",
            running="running the ONNX model in ONNX Runtime",
        ),
        problem=problem,
        options=OPTIONS,
        title="an ONNX model's graph",
        order=30,
    ),
)
