"""What Dynamo did over one compiled model's recorded calls, in the user's words: the distinct
graph-break sites (``breaks.py``) and the recompiles (``recompiles.py``), added call by call.
The check's own compile keeps one, and so does each compile a fix is verified by.
"""

from __future__ import annotations

import traceback

import torch

from pytest_fxtrace.backends.compile._compat import (
    DynamoEvents,
    automatic_dynamic_shapes,
    size_specializations,
)
from pytest_fxtrace.backends.compile.breaks import ForwardIndex, new_sites
from pytest_fxtrace.backends.compile.recompiles import Frames, call_arguments, recompile_of, symbolic_inputs
from pytest_fxtrace.capture import CapturedCall
from pytest_fxtrace.types import GraphBreak, Recompile

_FAKE = "fake tensor"  # torch's "Fake tensor propagation exception" (GB0064)


class Tally:
    """The sites and recompiles of one compiled model so far.

    Example::

        tally = Tally(model)
        replay, events = session.run(call)
        tally.add(events, call)
        tally.sites, tally.counted
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.index = ForwardIndex(model)
        self.sites: list[GraphBreak] = []
        self.frames: list[traceback.FrameSummary | None] = []  # the user's frame of each site
        self.recompiles: list[Recompile] = []
        self.first_graphs: int | None = None  # the graphs the first call compiled
        self._sized: set[tuple[str, int, str]] = set()
        self._specialized: dict[str, str] = {}  # sizes a branch made constant: the statement
        self.fake = False  # Dynamo's fake tensors failed on an operation (a quantized tensor...)

    def add(self, events: DynamoEvents, call: CapturedCall) -> None:
        """What Dynamo did on ``call`` (``CompileSession.run``'s events)."""
        self.fake = self.fake or any(
            _FAKE in (found.gb_type or "").lower() for found in events.breaks
        ) or any(_FAKE in (compiled.failed or "").lower() for compiled in events.compiles)
        for site, frame in new_sites(events.breaks, self.index, self.sites):
            self.sites.append(site)
            self.frames.append(frame)
        if self.first_graphs is None:
            self.first_graphs = len(events.graphs)
        arguments = call_arguments(call.module, call.args, call.kwargs)
        frames = Frames(self.index, call.module, arguments, self._sized, symbolic_inputs(events.graphs), self._specialized)
        automatic = automatic_dynamic_shapes()
        found = (recompile_of(compiled, frames, automatic) for compiled in events.compiles)
        self.recompiles.extend(item for item in found if item is not None)
        for graph in events.graphs:  # for a later call's recompile: this call's compiles had their own reason
            self._specialized.update(size_specializations(graph))

    @property
    def counted(self) -> list[Recompile]:
        """The recompiles held against ``max_recompiles``."""
        return [item for item in self.recompiles if item.counted]
