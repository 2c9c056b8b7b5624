"""torch.export's backend (``backend.py``): its failure's diagnosis (``diagnose.py``),
localization (``localize.py``), dynamic shapes (``shapes.py``) and an exported
program's snapshot text (``code.py``).

``SPECS``: what the registry (``backends/__init__.py``) knows of it before loading it:
two names, ``export`` (non-strict) and ``export-strict`` (TorchDynamo), one backend."""

from pytest_fxtrace.backends.export.options import OPTIONS
from pytest_fxtrace.backends.spec import BackendSpec, Words, torch_problem


def problem() -> str | None:
    """Why this torch cannot run torch.export as the backend calls it (``_compat``)."""
    from pytest_fxtrace import _compat

    return torch_problem(_compat.export_problem, _compat.export_floor_problem)


def _words(mode: str) -> Words:
    return Words(
        able=f"exportable ({mode})",
        past="exported",
        graph="the exported program",
        doing="exporting",
        running="running the exported program",
    )


TITLE = "an exported program's graph code"
SPECS = (
    BackendSpec(
        "export",
        "pytest_fxtrace.backends.export.backend:ExportBackend",
        help="export (torch.export, non-strict)",
        words=_words("export"),
        problem=problem,
        options=OPTIONS,
        title=TITLE,
        order=10,
    ),
    BackendSpec(
        "export-strict",
        "pytest_fxtrace.backends.export.backend:ExportStrictBackend",
        help="export-strict (TorchDynamo)",
        words=_words("export-strict"),
        problem=problem,
        options=OPTIONS,
        title=TITLE,
        order=11,
    ),
)
