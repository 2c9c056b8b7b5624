"""What an export check keeps of one export: the ``Program`` (the exported program, the
sizes it fixed, the tensors it was exported with, the call it came from) and the
``ExportCaptured`` the check holds, as ``backends/fx/captured.py`` does for a trace; the
recorded calls of one kind (``Kind``) a program must serve (``refused_earlier``)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from pytest_fxtrace._compat import placeholders
from pytest_fxtrace.backends.base import Captured
from pytest_fxtrace.backends.export.quiet import quiet_torch
from pytest_fxtrace.backends.export.shapes import Leaf, ShapeSites, Specialized, is_fixed
from pytest_fxtrace.capture import CapturedCall
from pytest_fxtrace.rng import RngState
from pytest_fxtrace.state import buffer_places, lend


@dataclasses.dataclass(eq=False)
class Program:
    """One export of the model, for the calls of one kind."""

    exported: Any  # torch.export.ExportedProgram
    module: torch.nn.Module  # exported.module(), built once
    fixed: dict[str, dict[int, int]]  # input place -> {dimension: the size the program takes}
    held: list[tuple[str, torch.Tensor]]  # the model's parameters and buffers it was exported with
    example: tuple[tuple[Any, ...], dict[str, Any]]  # the call it was exported from
    dims: dict[str, tuple[int, ...]]  # the dimensions asked to be dynamic, by input place
    specialized: list[Specialized] = dataclasses.field(default_factory=list)  # asked dynamic, fixed anyway
    refused: tuple[list[Leaf], BaseException] | None = None  # an earlier call of its kind it refuses
    # the shape environment's log of this export (non-strict, dimensions asked for by name): where
    # each dimension was fixed and each guard added, so judging them needs no second export
    sites: ShapeSites | None = None

    def serves(self, call_leaves: Sequence[Leaf]) -> bool:
        """Whether every dimension this program fixed has the call's size."""
        for leaf in call_leaves:
            for dim, size in self.fixed.get(leaf.name, {}).items():
                if leaf.shape is None or dim >= len(leaf.shape) or leaf.shape[dim] != size:
                    return False
        return True

    def holds_what(self, model: torch.nn.Module) -> bool:
        """Whether the model still holds the tensors the program was exported with (a test
        may load other weights by rebinding, or swap a submodule, between calls)."""
        now = dict(model_tensors(model))
        return len(now) == len(self.held) and all(now.get(name) is tensor for name, tensor in self.held)


@dataclasses.dataclass
class ExportCaptured(Captured):
    """An export of the model (``graph_module``: ``exported.module()``), with the program
    it came from and where its buffers are (lent to each run without a walk)."""

    program: Program
    buffer_places: list[tuple[torch.nn.Module, str]]
    saved: dict[str, Any] = dataclasses.field(default_factory=dict)  # artifact= form -> artifact.Saved
    notes: tuple[str, ...] = ()  # what a passing report says of it (a saved form not judged, and why)


def model_tensors(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    return [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]


def fixed_sizes(exported: Any, call_leaves: Sequence[Leaf]) -> dict[str, dict[int, int]]:
    """Each tensor input's dimensions that ``exported`` takes at one size only."""
    user_inputs = set(getattr(exported.graph_signature, "user_inputs", ()))
    values = [node.meta.get("val") for node in placeholders(exported.graph) if node.name in user_inputs]
    if len(values) != len(call_leaves):  # read otherwise: every recorded size is fixed
        return {leaf.name: dict(enumerate(leaf.shape)) for leaf in call_leaves if leaf.shape is not None}
    fixed: dict[str, dict[int, int]] = {}
    for leaf, value in zip(call_leaves, values, strict=True):
        shape = getattr(value, "shape", None)
        if leaf.shape is None or shape is None:
            continue
        fixed[leaf.name] = {d: int(size) for d, size in enumerate(shape) if is_fixed(size)}
    return fixed


@dataclasses.dataclass
class Kind:
    """The recorded calls of one kind so far (their inputs' places and sizes, and the
    inputs themselves: an export's example, and what a program made later must serve)."""

    calls: list[tuple[list[Leaf], tuple[Any, ...], dict[str, Any]]] = dataclasses.field(default_factory=list)
    # the CapturedCall objects noted (held, so that an id is never another call's)
    noted: list[CapturedCall] = dataclasses.field(default_factory=list)


def refused_earlier(program: Program, kind: Kind, call: CapturedCall) -> tuple[list[Leaf], BaseException] | None:
    """A program made for a new size must serve the earlier calls of its kind too: it
    runs once on each of their inputs (buffers lent, output dropped; their outputs
    were judged already). The first it refuses, with the error."""
    args, kwargs = program.example
    places = buffer_places(program.module)
    for call_leaves, earlier_args, earlier_kwargs in kind.calls:
        if earlier_args is args or earlier_args is call.args:
            continue
        rng = RngState.capture()
        try:
            with torch.no_grad(), lend(call.state, places), quiet_torch():
                program.module(*earlier_args, **earlier_kwargs)
        except Exception as exc:
            return call_leaves, exc
        finally:
            rng.restore()
    return None


def module_of(model: torch.nn.Module, module: torch.nn.Module | None) -> tuple[str, str | None]:
    """(path, class name) of ``module`` in ``model``; ("", None) when it is not one of its
    submodules (or is the model itself)."""
    if module is None or module is model:
        return "", None
    for path, inner in model.named_modules():
        if inner is module:
            return path, type(inner).__name__
    return "", None


@contextlib.contextmanager
def as_before(call: CapturedCall) -> Iterator[None]:
    """The model's attributes as before ``call`` within the block, and after it (one more
    export, for diagnosis, runs forward's Python for real)."""
    if call.state is not None:
        call.state.restore()
    try:
        yield
    finally:
        if call.state is not None:
            call.state.restore()
