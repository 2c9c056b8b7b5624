"""An exported program converted to ONNX, and a conversion or session that fails, in the
user's words (issue 40).

``torch.onnx.export(program, dynamo=True)`` decomposes the exported program and translates
each ATen operator into ONNX functions. Where an operator has none, torch raises a
``DispatchError`` ("No ONNX function found for <OpOverload(op='aten.cummax', ...)>") wrapped
in its "step 3/3" ``ConversionError``: the diagnosis names the operator and every statement
of the user's that calls it, read from the program's nodes (their stack trace and module
stack), with the submodule of the first. ONNX Runtime refusing the model names the node and
its op type, whose statement the exporter keeps in the node's metadata.

Knows no pytest and no checker.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from pytest_fxtrace.backends.onnx._compat import decomposed_for_onnx
from pytest_fxtrace.diagnose import exception_chain, format_error
from pytest_fxtrace.locate import module_of_node, node_location
from pytest_fxtrace.types import Category, Diagnosis, Location

_NO_FUNCTION = re.compile(r"No ONNX function found for <OpOverload\(op='([\w.]+)', overload='(\w+)'\)>")
_NODE = re.compile(r"Error when translating node %(\w+)")
_STACK_FILE = re.compile(r'File "([^"]+)", line (\d+)')

# the change in code for an operator ONNX has no function for
MISSING_FIX = (
    "write it with operators ONNX has (the ONNX operator list: onnx.ai/onnx/operators), or give "
    "torch.onnx.export a translation of it: custom_translation_table={torch.ops.<op>: <an onnxscript "
    "function>}, or compute it outside the exported model"
)


def missing_operator(exc: BaseException) -> str | None:
    """The ATen operator torch.onnx found no ONNX function for (``aten.cummax.default``)."""
    for error in exception_chain(exc):
        found = _NO_FUNCTION.search(str(error))
        if found is not None:
            return f"{found.group(1)}.{found.group(2)}"
    return None


def failing_operator(exc: BaseException, exported: Any) -> str | None:
    """The operator a conversion failed on: the one ONNX has no function for, else the
    target of the program's node torch names ("Error when translating node %name")."""
    missing = missing_operator(exc)
    if missing is not None:
        return missing
    named = (_NODE.search(str(error)) for error in exception_chain(exc))
    name = next((match.group(1) for match in named if match is not None), None)
    node = next((n for n in exported.graph.nodes if n.name == name), None) if name else None
    return str(node.target) if node is not None and node.op == "call_function" else None


def _uses(exported: Any, operator: str) -> list[torch.fx.Node]:
    return [node for node in exported.graph.nodes if node.op == "call_function" and str(node.target) == operator]


def conversion_failure(exc: BaseException, exported: Any) -> Diagnosis:
    """The diagnosis of ``torch.onnx.export(exported, dynamo=True)`` raising ``exc``."""
    operator = missing_operator(exc)
    if operator is not None:
        uses, decomposed_from = _uses(exported, operator), ""
        if not uses:  # only a decomposition calls it (aten.cumprod -> prims.prod): find it there
            decomposed = decomposed_for_onnx(exported)
            uses = _uses(decomposed, operator) if decomposed is not None else []
            origins = list(dict.fromkeys(str(n.meta.get("original_aten")) for n in uses if n.meta.get("original_aten") is not None))
            decomposed_from = f" by the decomposition of {', '.join(f'`{o}`' for o in origins)}" if origins else ""
        located = [(node_location(node), module_of_node(node)) for node in uses]
        places = list(dict.fromkeys(f"`{where.source}` at {where}" for where, _ in located if where is not None))
        location, (path, kind) = next(((where, module) for where, module in located if where is not None), (None, ("", None)))
        times = f"{len(uses)} time{'s' if len(uses) != 1 else ''}{decomposed_from}" if uses else "by a decomposition"
        also = f"; every statement that calls it: {', '.join(places)}" if len(places) > 1 else ""
        return Diagnosis(
            Category.MISSING_OPERATOR,
            f"ONNX has no function for the operator `{operator}` (torch.onnx's conversion, step 3/3), called {times}{also}",
            location,
            path,
            kind,
            error=_plain(format_error(exc)),
            code_fix=MISSING_FIX.replace("torch.ops.<op>", f"torch.ops.{operator}"),
            operator=operator,
        )
    named = (_NODE.search(str(error)) for error in exception_chain(exc))
    node_name = next((match.group(1) for match in named if match is not None), None)
    node = next((n for n in exported.graph.nodes if n.name == node_name), None) if node_name else None
    location = node_location(node) if node is not None else None
    path, kind = module_of_node(node) if node is not None else ("", None)
    inner = list(exception_chain(exc))[-1]  # what torch's step-3 error wraps
    message = str(inner).strip()
    first = message.splitlines()[0] if message else type(inner).__name__
    return Diagnosis(
        Category.OTHER,
        f"torch.onnx could not convert the exported program (step 3/3){f' at node {node_name}' if node_name else ''}: "
        f"{type(inner).__name__}: {first[:300]}",
        location,
        path,
        kind,
        error=_plain(format_error(exc)),
    )


def _plain(text: str) -> str:
    """torch.onnx's message without its terminal colours."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


# how the ONNX checker and ONNX Runtime name what they refuse: a node and its op type, or
# an op type alone (the first node of it is meant)
_REFUSED_NODE = (
    re.compile(r"Name: (?P<name>\S+) OpType: (?P<op>\w+)"),  # onnx.checker: "Bad node spec for node. Name: n OpType: Relu"
    re.compile(r"Node \((?P<name>[^)]*)\)[^\n]*?Op \((?P<op>\w+)\)"),  # ONNX Runtime: "Node (n) Op (Relu) ..."
    re.compile(r"(?:(?P<domain>[\w.]+):)?(?P<op>\w+)\(-?\d+\) is not a registered function/op"),  # ONNX Runtime
    re.compile(r"[Nn]ode\(?\s*(?P<name>[\w./:-]+)\)?"),  # either, without the op type
)


def model_refusal(exc: BaseException, model: Any, who: str) -> Diagnosis:
    """``who`` (the ONNX checker, ONNX Runtime) refusing the converted ``model`` (an
    ``onnx.ModelProto``): the node and op type its message names, at the statement the
    exporter noted on that node."""
    text = str(exc).strip()
    found = next((m.groupdict() for m in (pattern.search(text) for pattern in _REFUSED_NODE) if m is not None), {})
    name, op_type = found.get("name"), found.get("op")
    node = next((n for n in model.graph.node if name and n.name == name), None) or next(
        (n for n in model.graph.node if not name and op_type and n.op_type == op_type and n.domain == (found.get("domain") or n.domain)),
        None,
    )
    if node is not None:
        name, op_type = node.name, node.op_type
    location = onnx_node_location(node) if node is not None else None
    what = f" at node {name}{f' ({op_type})' if op_type else ''}" if name else ""
    reason = " ".join(line.strip() for line in text.splitlines() if line.strip() and not line.startswith("==>"))
    return Diagnosis(
        Category.OTHER,
        f"{who} refuses the ONNX model{what}: {reason[:300] or type(exc).__name__}",
        location,
        error=format_error(exc),
    )


def check_model(model: Any) -> None:
    """The ONNX checker on the converted ``model`` (``onnx.checker.check_model``, with its
    shape inference: ``full_check``), as other runtimes than ONNX Runtime read the model;
    raises its ``ValidationError``. The weights are taken out of ``model`` first, in place
    (each an input of its type and shape instead: the graph the checker reads is the same):
    a model of 2 GB or more cannot be checked whole, and the check's copy of the model then
    holds no second copy of the weights while ONNX Runtime's session is made."""
    import onnx

    weights = [(w.name, w.data_type, list(w.dims)) for w in model.graph.initializer]
    del model.graph.initializer[:]
    model.graph.input.extend(onnx.helper.make_tensor_value_info(*weight) for weight in weights)
    onnx.checker.check_model(model, full_check=True)


def onnx_node_location(node: Any) -> Location | None:
    """The user's statement the exporter noted on an ONNX node (``pkg.torch.onnx.stack_trace``)."""
    return trace_location(next((p.value for p in node.metadata_props if p.key == "pkg.torch.onnx.stack_trace"), ""))


def trace_location(trace: str) -> Location | None:
    """The innermost frame of the user's in a stack trace the exporter noted on a node."""
    from pytest_fxtrace.locate import is_user_file, statement_in
    from pytest_fxtrace.paths import shown_path

    found = [(path, int(line)) for path, line in _STACK_FILE.findall(trace) if is_user_file(path)]
    if not found:
        return None
    path, line = found[-1]
    return Location(shown_path(path, imports=False), line, statement_in(path, line))
