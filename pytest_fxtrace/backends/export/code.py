"""An exported program as the text a golden file holds (``<test>.<Model>.export.txt``).

Each graph input with its kind, dtype and shape, the range of each dynamic dimension,
then the graph module's code: what a reviewer needs to see change, stable from run to
run. The snapshot layer normalises it like FX code (``snapshot/normalize.py``).
"""

from __future__ import annotations

from typing import Any

from pytest_fxtrace._compat import placeholders


def export_code(exported: Any) -> str:
    """The exported program as reviewable text: each graph input (a parameter, a buffer, a
    user input) with its dtype and shape, the range of each dynamic dimension, then the
    graph module's code. Stable from run to run (no addresses, no object ids, symbols
    named from their inputs by torch)."""
    values = {node.name: node.meta.get("val") for node in placeholders(exported.graph)}
    lines = ["# inputs of the exported graph"]
    for spec in exported.graph_signature.input_specs:
        kind = getattr(spec.kind, "name", str(spec.kind)).lower().replace("_", " ")
        name = getattr(spec.arg, "name", str(spec.arg))
        target = f" {spec.target}" if getattr(spec, "target", None) else ""
        lines.append(f"#   {name}: {kind}{target} {_value_text(values.get(name))}".rstrip())
    constraints = getattr(exported, "range_constraints", {}) or {}
    if constraints:
        lines.append("# dynamic dimensions")
        for symbol, bounds in sorted(constraints.items(), key=lambda item: str(item[0])):
            lines.append(f"#   {symbol} in {_range_text(bounds)}")
    code = exported.graph_module.code.strip("\n")
    return "\n".join(lines) + "\n\n" + code + "\n"


_SHORT_DTYPES = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16", "int64": "i64", "int32": "i32", "bool": "b8"}


def _value_text(value: Any) -> str:
    """``f32[s34, 2]`` for a (fake) tensor, ``= 3`` for a constant input."""
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        name = str(dtype).removeprefix("torch.")
        return f"{_SHORT_DTYPES.get(name, name)}[{', '.join(str(size) for size in shape)}]"
    return "" if value is None else f"= {value!r}"


def _range_text(bounds: Any) -> str:
    lower, upper = getattr(bounds, "lower", None), getattr(bounds, "upper", None)
    if lower is None or upper is None:
        return str(bounds)
    top = "inf)" if not str(upper).lstrip("-").isdigit() else f"{upper}]"
    return f"[{lower}, {top}"
