"""An ONNX model as its snapshot holds it: the graph's inputs, nodes and outputs as normalised
text, one line each, with the weights named and shaped but not written out, and nothing that
changes with the exporter's run (doc strings, the producer's version, metadata).

Example of a line: ``mul_1 = Mul(mul, scalar_tensor_default_1)``.
"""

from __future__ import annotations

from typing import Any


def _type(value: Any) -> str:
    import onnx

    tensor = value.type.tensor_type
    dtype = onnx.TensorProto.DataType.Name(tensor.elem_type).lower()
    dims = [d.dim_param or str(d.dim_value) for d in tensor.shape.dim]
    return f"{dtype}[{', '.join(dims)}]"


def _attribute(attribute: Any) -> str:
    import onnx

    value = onnx.helper.get_attribute_value(attribute)
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if isinstance(value, onnx.TensorProto):
        value = f"tensor {onnx.TensorProto.DataType.Name(value.data_type).lower()}{list(value.dims)}"
    elif isinstance(value, onnx.GraphProto):
        value = f"graph {value.name}"
    return f"{attribute.name}={value!r}" if isinstance(value, str) else f"{attribute.name}={value}"


def onnx_code(model: Any) -> str:
    """``model`` (an ``onnx.ModelProto``) as normalised text."""
    import onnx

    graph = model.graph
    opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import)
    lines = [f"opset {opsets}", "inputs:"]
    lines += [f"  {value.name}: {_type(value)}" for value in graph.input]
    lines.append("weights:")
    lines += [
        f"  {tensor.name}: {onnx.TensorProto.DataType.Name(tensor.data_type).lower()}[{', '.join(map(str, tensor.dims))}]"
        for tensor in graph.initializer
    ]
    lines.append("nodes:")
    for node in graph.node:
        attributes = ", ".join(_attribute(a) for a in node.attribute)
        domain = f"{node.domain}." if node.domain else ""
        call = f"{domain}{node.op_type}({', '.join(node.input)})" + (f" {{{attributes}}}" if attributes else "")
        lines.append(f"  {', '.join(node.output)} = {call}")
    lines.append("outputs:")
    lines += [f"  {value.name}: {_type(value)}" for value in graph.output]
    return "\n".join(lines) + "\n"
