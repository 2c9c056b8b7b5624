"""torch.fx's backend: symbolic tracing with the configured tracer (``tracer.py``), its
failure's diagnosis and localization (``localize.py``), the verified fixes it tries
(``fixes.py``), and the detectors that name the cause of a traced/eager mismatch
(``mismatch.py``, ``divergence.py``, ``detectors.py``).

``SPECS``: what the registry (``backends/__init__.py``) knows of it before loading it."""

from pytest_fxtrace.backends.spec import BackendSpec, Words

SPECS = (
    BackendSpec(
        "fx",
        "pytest_fxtrace.backends.fx.backend:FxBackend",
        help="fx (default)",
        words=Words(),
        title="generated torch.fx code",
        lists_attributes=True,  # its code calls the GraphModule's submodules and attributes
        order=0,
    ),
)
