"""What a replay leaves in the model's parameters and buffers, against what eager left.

A forward may update state (batch-norm statistics, ``self.calls += 1``, a parameter
written through ``.data``); a captured graph can lose that update while its output still
matches. ``check.ModelChecker`` asks these after each replay, and names each difference.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from pytest_fxtrace._compat import PARAMETERS, write_count
from pytest_fxtrace.backends.base import Captured, CheckContext, Comparator
from pytest_fxtrace.capture import CapturedCall
from pytest_fxtrace.compare import Difference
from pytest_fxtrace.diagnose import attribute_write
from pytest_fxtrace.options import TraceOptions
from pytest_fxtrace.types import Category, Diagnosis


def parameter_differences(
    call: CapturedCall,
    replayed: dict[int, torch.Tensor] | None,
    compare: Comparator,
    options: TraceOptions,
    graph: str,
) -> list[tuple[torch.nn.Module, str, Difference]]:
    """Each parameter forward may write that the run (on the user's parameters, set
    to their values before the call) leaves otherwise than eager."""
    state = call.state
    if state is None or not state.parameters:
        return []
    found = []
    if replayed is None:
        replayed = state.parameter_changes()
    for module, name in state.parameter_places:
        parameter = vars(module)[PARAMETERS][name]
        key = id(parameter)
        before = state.parameters[key][1]
        expected, actual = call.parameters_after.get(key, before), replayed.get(key, before)
        if _equal(actual, expected):
            continue
        difference = compare(actual, expected, rtol=options.rtol, atol=options.atol)
        if difference is not None:
            found.append((module, name, _buffer_values(actual, expected, difference, graph)))
    return found

def buffer_differences(
    call: CapturedCall,
    buffers: dict[int, torch.Tensor] | None,
    compare: Comparator,
    options: TraceOptions,
    graph: str,
) -> list[tuple[torch.nn.Module, str, Difference]]:
    """Each buffer the run leaves otherwise than eager, in the model's order: one eager
    changed (in place or rebound) or the run wrote, whose values then differ. A buffer
    the run was not lent (the graph does not hold it) keeps its value from before the call."""
    state = call.state
    found: list[tuple[int, Difference]] = []
    if buffers is None or state is None or not state.originals:
        return []
    eager = call.buffers_after
    keys = dict.fromkeys([*eager, *(key for key, tensor in buffers.items() if _written(tensor))])
    for key in keys:
        expected = eager.get(key, state.originals[key])
        actual = buffers.get(key, state.buffer_values[key])
        if _equal(actual, expected):  # the usual case (batch-norm statistics), without a comparison's cost
            continue
        difference = compare(actual, expected, rtol=options.rtol, atol=options.atol)
        if difference is not None:
            index = state.place_keys.index(key)
            found.append((index, _buffer_values(actual, expected, difference, graph)))
    return [(*state.places[index], difference) for index, difference in sorted(found, key=lambda f: f[0])]


def _written(tensor: torch.Tensor) -> bool:
    """Whether a lent copy (which starts at no writes) was written in place by the run."""
    try:
        return write_count(tensor) > 0
    except RuntimeError:  # an inference tensor keeps no count
        return False


def _equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        return a.shape == b.shape and a.dtype == b.dtype and a.device == b.device and bool(torch.equal(a, b))
    except RuntimeError:
        return False


def _buffer_values(actual: torch.Tensor, expected: torch.Tensor, difference: Difference, graph: str) -> Difference:
    """The buffers' difference in words: their values where they are small, else the error."""
    if actual.shape == expected.shape and actual.numel() <= 4:
        shown = f"eager leaves it {expected.tolist()}, {graph} {actual.tolist()}"
    elif difference.max_abs_error is not None:
        shown = f"max abs error {difference.max_abs_error:.3g} against eager"
    else:
        shown = difference.message.partition(": ")[2] or difference.message
    return dataclasses.replace(difference, message=shown)


def buffer_finding(
    explain: Callable[[Captured, CheckContext, torch.nn.Module, str], Diagnosis | None] | None,
    graph: str,
    captured: Captured,
    context: CheckContext,
    paths: dict[torch.nn.Module, str],
    module: torch.nn.Module,
    name: str,
    difference: Difference,
) -> tuple[str, Difference, Diagnosis]:
    """(the buffer's name as the user writes it, the difference, why) for one buffer or
    parameter the run leaves otherwise than eager; ``explain``: the backend's own reason for
    a buffer (``Backend.explain_buffer``; None while verifying a fix), else the statement
    that writes it."""
    path = paths.get(module, "")
    who = f"{path}.{name}" if path else f"self.{name}"
    kind = "parameter" if name in vars(module)[PARAMETERS] else "buffer"
    finding = explain(captured, context, module, name) if explain is not None and kind == "buffer" else None
    if finding is None:
        finding = Diagnosis(
            Category.BAKED_CONSTANT,
            f"forward updates the {kind} {who}, and {graph} does not update it alike ({difference.message})",
            attribute_write(type(module), name),
            path,
            type(module).__name__,
        )
    return f"{kind} {who}", dataclasses.replace(difference, path=who), finding
