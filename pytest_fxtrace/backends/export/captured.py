"""What an export check keeps of one export: the ``Program`` (the exported program, the
sizes it fixed, the tensors it was exported with, the call it came from) and the
``ExportCaptured`` the check holds, as ``backends/fx/captured.py`` does for a trace."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from pytest_fxtrace._compat import placeholders
from pytest_fxtrace.backends.base import Captured
from pytest_fxtrace.backends.export.shapes import Leaf, Specialized, _Sites, is_fixed


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
    sites: _Sites | None = None

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
