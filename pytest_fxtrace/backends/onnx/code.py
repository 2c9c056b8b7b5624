"""An ONNX model as its snapshot holds it: the graph's inputs, weights, nodes and outputs as
normalised text, one line each, and nothing that changes with the exporter's run (doc
strings, the producer's version, metadata).

The model's parameters and buffers are named and shaped, not written out (a test's weights
are random). A constant the conversion made (a scale, the axes of a reduction, a tensor made
in ``forward``) is written out where it is small: it is the model's code, so a changed
``x * 2.0`` is a diff, as it is in FX's code.

Read from the ONNX program's graph (``onnx_ir``), not from its ``ModelProto``: serialising
the proto copies every weight, on every check (the snapshot text is made for each capture).

Example of a line: ``mul = Mul(mean, val_3)``; of a constant: ``val_3: float[] = 2.0``.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

# a constant of at most this many elements is written out; a larger one is named and shaped
# (its values may be computed while converting, to the last bit otherwise on another machine)
MAX_WRITTEN = 16


def _number(value: object) -> str:
    """A float as float32 holds it (``0.1``, not ``0.10000000149011612``), else as is."""
    if isinstance(value, float):
        text = format(value, ".7g")
        return text if any(c in text for c in ".ein") else f"{text}.0"
    return repr(value)


def _values(tensor: Any) -> str:
    """`` = <values>`` of a small tensor, else nothing."""
    try:
        if tensor is None or tensor.size > MAX_WRITTEN:
            return ""
        values = tensor.numpy().tolist()
    except Exception:  # a dtype numpy cannot hold: named and shaped only
        return ""

    def text(item: object) -> str:
        return f"[{', '.join(text(i) for i in item)}]" if isinstance(item, list) else _number(item)

    return f" = {text(values)}"


def _dims(shape: Any) -> str:
    return "?" if shape is None else ", ".join(str(dim) for dim in shape)


def _type(value: Any) -> str:
    dtype = value.dtype.name.lower() if value.dtype is not None else "?"
    return f"{dtype}[{_dims(value.shape)}]"


def _attribute(attribute: Any) -> str:
    import onnx_ir as ir

    kind, value = attribute.type, attribute.value
    if kind == ir.AttributeType.TENSOR:
        shown = f"tensor {value.dtype.name.lower()}[{_dims(value.shape)}]{_values(value)}"
    elif kind == ir.AttributeType.GRAPH:
        shown = f"graph {value.name}"
    elif kind == ir.AttributeType.STRING:
        shown = repr(value.decode(errors="replace") if isinstance(value, bytes) else value)
    elif kind in (ir.AttributeType.FLOATS, ir.AttributeType.INTS):
        shown = f"[{', '.join(_number(v) for v in value)}]"
    else:
        shown = _number(value)
    return f"{attribute.name}={shown}"


def onnx_code(model: Any, state: Collection[str]) -> str:
    """``model`` (an ONNX program's ``onnx_ir.Model``) as normalised text; ``state``: the
    names of the model's parameters and buffers (shaped, never written out).

    Example::

        onnx_code(onnx_program.model, {"lin.weight", "lin.bias"})
    """
    graph = model.graph
    opsets = ", ".join(f"{domain or 'ai.onnx'} {version}" for domain, version in model.opset_imports.items())
    lines = [f"opset {opsets}", "inputs:"]
    lines += [f"  {value.name}: {_type(value)}" for value in graph.inputs]
    lines.append("weights:")
    for name, value in graph.initializers.items():
        written = "" if name in state else _values(value.const_value)
        lines.append(f"  {name}: {_type(value)}{written}")
    lines.append("nodes:")
    for node in graph:
        attributes = ", ".join(_attribute(a) for a in node.attributes.values())
        domain = f"{node.domain}." if node.domain else ""
        inputs = ", ".join(value.name if value is not None else "" for value in node.inputs)
        call = f"{domain}{node.op_type}({inputs})" + (f" {{{attributes}}}" if attributes else "")
        lines.append(f"  {', '.join(value.name for value in node.outputs)} = {call}")
    lines.append("outputs:")
    lines += [f"  {value.name}: {_type(value)}" for value in graph.outputs]
    return "\n".join(lines) + "\n"
