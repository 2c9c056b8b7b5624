"""``FxCaptured``: a torch.fx trace as the FX backend keeps it, with what replaying and
explaining it needs (``backend.py`` makes and runs it, ``mismatch.py`` explains it)."""

from __future__ import annotations

import dataclasses

import torch

from pytest_fxtrace.backends.base import Captured


@dataclasses.dataclass
class FxCaptured(Captured):
    """A GraphModule traced from one recorded call.

    Example::

        captured = FxBackend().capture(context)
        captured.graph_module.code, captured.written
    """

    guards: tuple[str, ...] = ()  # arguments specialised without a guard (the user's concrete_args)
    inputs: str | None = None  # the signature of the call it was traced from (binding.input_signature)
    written: list[tuple[torch.nn.Module, str]] = dataclasses.field(default_factory=list)  # buffers the trace wrote for real
    inlined: tuple[str, ...] = ()  # stateless modules created inside forward, inlined: "nn.ReLU at m.py:7"
    # caches, filled on first use
    buffer_places: list[tuple[torch.nn.Module, str]] | None = None  # the GraphModule's buffers, lent to each replay
    targets: list[tuple[str, object]] | None = None  # each call_module / get_attr target and what the GraphModule holds there


__all__ = ["FxCaptured"]
