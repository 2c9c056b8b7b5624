"""Hook specifications of pytest-fxtrace (hookspecs only, like pytest-xdist's newhooks.py).

Implement any of these in a ``conftest.py`` or a plugin. pytest-fxtrace's own
implementations are ``trylast``, so yours run first; for ``firstresult`` hooks the
first non-None result wins and the rest are not called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import torch

    from pytest_fxtrace.compare import Difference, Tolerances
    from pytest_fxtrace.options import TraceOptions
    from pytest_fxtrace.tracereport import TraceReport


@pytest.hookspec(firstresult=True)
def pytest_fxtrace_make_tracer(options: TraceOptions, config: pytest.Config) -> torch.fx.Tracer | None:
    """Return the ``torch.fx.Tracer`` instance to trace one model with.

    Called once per traced model, before tracing, with the resolved options.
    ``firstresult``: the first non-None tracer is used; the default builds the
    configured tracer class with pytest-fxtrace's features mixed in.

    Example::

        def pytest_fxtrace_make_tracer(options, config):
            return MyTracer(leaf_modules=options.leaf_modules)
    """


@pytest.hookspec(firstresult=True)
def pytest_fxtrace_compare(
    actual: object,
    expected: object,
    rtol: float | None,
    atol: float | None,
    config: pytest.Config,
    defaults: Tolerances,
) -> Difference | None | bool:
    """Compare a traced output (``actual``) with the eager one (``expected``).

    ``rtol``/``atol``: the user's (None where unset); ``defaults``: the backend's
    ``pytest_fxtrace.compare.Tolerance`` by dtype where the user sets none (``{}``:
    assert_close's; ONNX Runtime sums float32 in another order than torch, and the ONNX
    backend allows rounding of the output's scale). An implementation may leave out the
    arguments it does not use.

    Called after every replay. ``firstresult``: return ``True`` for "equal", a
    ``pytest_fxtrace.compare.Difference`` (or ``False``) for "different", or None to
    leave the decision to the next implementation (the default: nested
    ``torch.testing.assert_close``). Implementations in a conftest.py apply to the
    tests below it, as for every hook here.

    Example::

        def pytest_fxtrace_compare(actual, expected, rtol, atol, config):
            if isinstance(expected, Detections):
                return True if same_boxes(actual, expected) else Difference("output", "boxes differ")
    """


@pytest.hookspec
def pytest_fxtrace_normalize_code(code: str, config: pytest.Config) -> str | None:
    """Normalise a snapshot's body before it is held against its golden file.

    ``code`` is the whole body: the generated code, then the list of submodules the
    graph calls and tensors it reads (class, configuration, shape, dtype). Called for
    each snapshot, after the built-in normalisation, in hook order; each
    implementation receives the previous one's result and returns the new text
    (None: unchanged).

    Example::

        def pytest_fxtrace_normalize_code(code, config):
            return re.sub(r"_tensor_constant\\d+", "_tensor_constant", code)
    """


@pytest.hookspec
def pytest_fxtrace_check_finished(item: pytest.Item, report: TraceReport) -> None:
    """Observe each finished check (one per checked model) for custom reporting.

    Called on the process that ran the test (an xdist worker included), right
    after the verdict for that model is known, before the test's outcome is final.
    A marked test that called no module gets one report with status
    ``nothing-checked`` and ``model`` None.

    Example::

        def pytest_fxtrace_check_finished(item, report):
            RESULTS.append((item.nodeid, report.status, report.trace_seconds))
    """
