"""What a backend author's type checker reads of the backend seam (``backends/base.py``):
each backend names its own ``Captured`` type (``Backend[FxCaptured]``), and mypy (``tox -e
lint``) checks every method against it. Never run or collected."""

from __future__ import annotations

import dataclasses

import torch
from typing_extensions import assert_type  # typing's from Python 3.11; mypy's target is 3.10

from pytest_fxtrace.backends.base import (
    Backend,
    Captured,
    CaptureFailed,
    CheckContext,
    Explanation,
    Recheck,
    Replay,
)
from pytest_fxtrace.backends.compile.backend import CompileBackend, CompileCaptured
from pytest_fxtrace.backends.export.backend import ExportBackend, ExportStrictBackend, Program
from pytest_fxtrace.backends.fx.backend import FxBackend
from pytest_fxtrace.backends.fx.captured import FxCaptured
from pytest_fxtrace.types import Suggestion


@dataclasses.dataclass
class MyCaptured(Captured):
    program: str


class MyBackend(Backend[MyCaptured]):
    name = "mine"

    def capture(self, context: CheckContext) -> MyCaptured:
        graph_module = torch.fx.symbolic_trace(context.call.module)
        return MyCaptured(graph_module, training=context.call.training, program=graph_module.code)

    def replay(self, captured: MyCaptured, context: CheckContext) -> Replay:
        return Replay(context.bound.call(captured.graph_module))  # run() is replay(...).output

    def code(self, captured: MyCaptured) -> str:
        return captured.program  # its own field, which the checker knows

    def explain_capture_failure(self, failure: CaptureFailed, context: CheckContext, recheck: Recheck) -> Explanation:
        return Explanation(None, Suggestion("no fix known", False))


def each_backend_captures_its_own_type(context: CheckContext) -> None:
    assert_type(FxBackend().capture(context), FxCaptured)
    assert_type(FxBackend().capture(context).written, list[tuple[torch.nn.Module, str]])
    assert_type(ExportBackend().capture(context).program, Program)
    assert_type(ExportStrictBackend().capture(context).program, Program)
    assert_type(CompileBackend().capture(context), CompileCaptured)
    assert_type(MyBackend().capture(context), MyCaptured)
