"""One compile check's compiled model, and what TorchDynamo did while it ran the recorded calls.

Dynamo compiles lazily: a frame is compiled on the call that first reaches it, and again
(a recompile) when a later call fails one of its guards. So a session runs each recorded call
through the same compiled model, in order, and keeps what each call made Dynamo do: the
graphs it handed the backend, the graph breaks it logged, the frames it (re)compiled.

The session's Dynamo state is its own (``_compat.DynamoScope``): a cache region, the memory of
automatic dynamic shapes, Dynamo's counters put back after every call; its cache entries are
invalidated when the session is freed.

Knows no pytest and no checker.
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import logging
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import torch

from pytest_fxtrace.backends.base import Replay
from pytest_fxtrace.backends.compile._compat import (
    DynamoEvents,
    DynamoScope,
    dynamo_backend,
    marked_dynamic,
    module_call,
)
from pytest_fxtrace.capture import CapturedCall
from pytest_fxtrace.state import lend, lent_values
from pytest_fxtrace.torchlogs import torch_logs_to


class Marks(Protocol):
    """The input dimensions a run marks dynamic (``dims.DimMarks``)."""

    def on(
        self, model: torch.nn.Module, args: Sequence[object], kwargs: dict[str, object]
    ) -> list[tuple[torch.Tensor, int, int | None, int | None]]: ...


class _Graphs:
    """The graphs Dynamo handed the backend; held weakly by the recorder, which Dynamo keeps
    in its cache entries after the session is gone."""

    def __init__(self) -> None:
        self.found: list[torch.fx.GraphModule] = []


def recording_backend(graphs: _Graphs, inner: Callable[..., Any]) -> Callable[..., Any]:
    """A Dynamo backend that notes each graph, then compiles it with ``inner``."""
    holder = weakref.ref(graphs)

    def record(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        found = holder()
        if found is not None:
            found.found.append(gm)
        return inner(gm, example_inputs)

    return record


class CompileSession:
    """The model compiled once (``torch.compile(model, backend=<recording>, fullgraph=False)``),
    and each recorded call run through it.

    Example::

        session = CompileSession(model, "eager")  # dynamic: torch.compile's (None: automatic)
        replay, events = session.run(call)
    """

    def __init__(
        self, model: torch.nn.Module, compile_backend: str, dynamic: bool | None = None, train: bool = False
    ) -> None:
        self.model = model
        self.train = train  # runs with grad (their backward is compared: train=True), else under no_grad
        self.graphs = _Graphs()
        self.scope = DynamoScope()
        with _torch_module_call():
            self.compiled = self.scope.compile(
                model, recording_backend(self.graphs, dynamo_backend(compile_backend)), dynamic
            )
        weakref.finalize(self, self.scope.release)

    @property
    def graph_modules(self) -> list[torch.fx.GraphModule]:
        return self.graphs.found

    def run(self, call: CapturedCall, marks: Marks | None = None) -> tuple[Replay, DynamoEvents]:
        """The compiled model on ``call``'s inputs, from the model state and RNG as before
        the call, with copies of its buffers lent (the user's tensors are never written);
        its output, the buffers as it left them, and what Dynamo did meanwhile. ``marks``:
        the input dimensions to mark dynamic for the run (``dims.DimMarks``), unmarked after."""
        if call.state is not None:
            call.state.restore()
        call.rng.restore()
        places = call.state.places if call.state is not None else []
        known = len(self.graphs.found)
        lending = lend(call.state, places)
        marking = marked_dynamic(marks.on(call.module, call.args, call.kwargs) if marks is not None else ())
        grad = torch.enable_grad() if self.train else torch.no_grad()
        with self.scope.observing() as events, _torch_module_call(), quiet(), grad, marking, lending as lent:
            output = self.compiled(*call.args, **call.kwargs)
            buffers = lent_values(places, lent)
        events.graphs.extend(self.graphs.found[known:])
        parameters = call.state.parameter_changes() if call.state is not None and call.state.parameters else None
        return Replay(output, buffers, parameters), events


@contextlib.contextmanager
def _torch_module_call() -> Iterator[None]:
    """``nn.Module.__call__`` as torch has it, for the block: the recorder's wrapper
    (``capture.recording``) would otherwise be the frame Dynamo compiles first and inlines
    for every submodule call, so breaks and guards would differ from the unmarked test's.
    A module called on another thread meanwhile goes unrecorded (the recorder only records
    the test's own thread anyway)."""
    current = torch.nn.Module.__call__
    own = module_call()
    if current is own:
        yield
        return
    # torch's own __call__ for the length of the block, the one found put back after
    torch.nn.Module.__call__ = own  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.nn.Module.__call__ = current  # type: ignore[method-assign]


_QUIET: contextvars.ContextVar[bool] = contextvars.ContextVar("fxtrace_compile_quiet", default=False)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """torch's log records and warnings (Dynamo warns of each ``.item()`` break), and what
    the model prints (its ``print`` runs again when the compiled model runs), kept from the
    test's output within the block; every logger is as before afterwards."""
    if _QUIET.get():
        yield
        return
    token = _QUIET.set(True)
    sink = io.StringIO()
    try:
        with (
            torch_logs_to(logging.NullHandler()),
            contextlib.redirect_stderr(sink),
            contextlib.redirect_stdout(sink),
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore")
            yield
    finally:
        _QUIET.reset(token)
