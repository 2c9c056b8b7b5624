"""Where an ONNX model first computes something else than torch (issue 40's accuracy): the
ONNX node whose value first differs, in graph order, mapped back to the user's statement and
submodule, with the figures.

The converter names each ONNX value after the node of the exported program it translates, so
the values the two graphs share are compared as ``torch.onnx.verification.verify_onnx_program(
..., compare_intermediates=True)`` compares them: torch's from the program the ONNX model was
converted from, run node by node; ONNX Runtime's from the ONNX model with those values as its
outputs. The first that differs beyond the check's tolerances (its comparator, as the output
was judged) is the divergence; its figures are torch's (``VerificationInfo``). The ONNX node
that produces it holds the user's statement (``pkg.torch.onnx.stack_trace``) and submodule
(``pkg.torch.onnx.name_scopes``, ``pkg.torch.onnx.class_hierarchy``).

ONNX Runtime computes every shared value in one session here: ``verify_onnx_program`` makes a
session per value (measured, torch 2.14.1, 2 busy cores: 8.6 s for a model of 8 values, where
one session takes about 1 s), which a mismatch explanation of a real model cannot pay.

Knows no pytest and no checker.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any

import torch

from pytest_fxtrace.backends.base import Comparator
from pytest_fxtrace.backends.export.quiet import quiet_torch
from pytest_fxtrace.backends.onnx._compat import call_leaves
from pytest_fxtrace.backends.onnx.convert import trace_location
from pytest_fxtrace.capture import CapturedCall
from pytest_fxtrace.sizes import Call
from pytest_fxtrace.state import lend
from pytest_fxtrace.types import Divergence


def in_order(exported: Any, inputs: Call) -> Call:
    """``inputs`` with the keyword arguments in the order the program takes them (the
    ONNX model's inputs are the flattened ``(args, kwargs)`` of the export's example)."""
    args, kwargs = inputs
    spec = getattr(getattr(exported, "call_spec", None), "in_spec", None)
    try:
        order = list(spec.child(1).context) if spec is not None and kwargs else None
    except Exception:  # a spec of another shape: as given
        order = None
    if order is None or set(order) != set(kwargs):
        return args, kwargs
    return args, {name: kwargs[name] for name in order}


def _shared_values(graph: Any) -> dict[str, Any]:
    """The ONNX graph's values that a node produces, by name (``onnx_ir.Value``)."""
    return {value.name: value for node in graph for value in node.outputs if value.name}


def _torch_values(module: torch.fx.GraphModule, call: CapturedCall, inputs: Call, names: set[str]) -> dict[str, torch.Tensor]:
    """The tensor each node of ``module`` named in ``names`` computes on ``inputs``, in graph
    order (the model's buffers lent: a program in training mode writes them)."""
    values: dict[str, torch.Tensor] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            result = super().run_node(n)
            if n.op == "call_function" and n.name in names and isinstance(result, torch.Tensor):
                values[n.name] = result
            return result

    call.rng.restore()
    with torch.no_grad(), lend(call.state, module), quiet_torch():
        Recorder(module).run(*call_leaves(*inputs))
    return values


def _scopes(node: Any, key: str) -> list[str]:
    text = node.metadata_props.get(key, "")
    try:
        found = ast.literal_eval(text) if text else []
    except (ValueError, SyntaxError):
        return []
    return [str(item) for item in found] if isinstance(found, list) else []


def module_of_onnx_node(node: Any) -> tuple[str, str | None]:
    """The path and class name of the submodule whose forward made an ONNX node, from the
    exporter's scopes (``["", "body", "body.1", "<fx node>"]``): ``("body.1", "Gatherer")``."""
    paths, classes = _scopes(node, "pkg.torch.onnx.name_scopes"), _scopes(node, "pkg.torch.onnx.class_hierarchy")
    if len(paths) < 2:
        return "", None
    kind = classes[-2].rpartition(".")[2] if len(classes) == len(paths) else None
    return paths[-2], kind


def _differing(
    program: torch.onnx.ONNXProgram, call: CapturedCall, compare: Comparator, rtol: float | None, atol: float | None
) -> Iterator[tuple[str, torch.Tensor, torch.Tensor]]:
    """Each shared value ONNX Runtime computes otherwise than torch, in graph order: (name,
    torch's, ONNX Runtime's)."""
    exported = program.exported_program
    if exported is None:  # made from a program: never None here
        return
    shared = _shared_values(program.model.graph)
    inputs = in_order(exported, (call.args, call.kwargs))
    expected = _torch_values(exported.module(), call, inputs, set(shared))
    names = list(expected)
    if not names:
        return
    with quiet_torch():  # a session of its own, released after: the next run makes the check's again
        actual = program.compute_values(names, *inputs)
    for name, got in zip(names, actual, strict=True):
        if compare(got, expected[name], rtol=rtol, atol=atol) is not None:
            yield name, expected[name], got


def first_divergence(
    program: torch.onnx.ONNXProgram, call: CapturedCall, compare: Comparator, rtol: float | None, atol: float | None
) -> Divergence | None:
    """The first value of ``program`` (a ``torch.onnx.ONNXProgram``) that ONNX Runtime computes
    otherwise than torch on ``call``'s inputs: the ONNX node that produces it, its statement
    and submodule, torch's figures. None: none differs, or the values could not be computed.

    Example::

        first_divergence(onnx_program, call, compare_outputs, None, None)
        # Divergence("body.1.pick", "TiePicker", "node_topk__1 (TopK) -> getitem_1", ...)
    """
    from torch.onnx.verification import VerificationInfo

    try:
        found = next(_differing(program, call, compare, rtol, atol), None)
        if found is None:
            return None
        name, expected, got = found
        node = _shared_values(program.model.graph)[name].producer()
        info = VerificationInfo.from_tensors(name, expected, got)
    except Exception:  # an explanation must never hide the verdict it explains
        return None
    path, kind = module_of_onnx_node(node)
    if not path:
        kind = type(call.module).__name__
    location = trace_location(node.metadata_props.get("pkg.torch.onnx.stack_trace", ""))
    return Divergence(path, kind, f"{node.name} ({node.op_type}) -> {name}", location, float(info.max_abs_diff), float(info.max_rel_diff))
