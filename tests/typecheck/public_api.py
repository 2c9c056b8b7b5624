"""What a type checker reads of the public API: ``tox -e lint`` runs mypy on this file (it
is never run or collected), and each ``assert_type`` fails the lint run when a public
name's type drifts from the documented public contract (docs/marker.md, docs/reports.md; to ``Any``, say)."""

from __future__ import annotations

import torch
from typing_extensions import assert_type  # typing's from Python 3.11; mypy's target is 3.10

from pytest_fxtrace import TraceReport, check_traceable


def check_traceable_returns_a_report(model: torch.nn.Module, x: torch.Tensor, names: tuple[str, ...]) -> None:
    assert_type(check_traceable(model, (x,)), TraceReport)
    assert_type(check_traceable(model, (x,), leaf_modules=["Gate"]), TraceReport)
    assert_type(check_traceable(model, (x,), backend="export"), TraceReport)
    assert_type(check_traceable(model, (x,), backend=("export",)), TraceReport)
    # several backends: one report each
    assert_type(check_traceable(model, (x,), backend=("fx", "export")), tuple[TraceReport, ...])
    assert_type(check_traceable(model, (x,), backend=names), TraceReport | tuple[TraceReport, ...])
