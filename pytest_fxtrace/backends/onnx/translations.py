"""ONNX translations of ATen operators torch.onnx has no ONNX function for (onnxscript 0.7.2's
torchlib lacks them), written with ONNX operators only (``onnxscript.opset18``): what a
``missing-operator`` finding offers as its fix, and verifies by exporting the model again with
``torch.onnx.export(..., custom_translation_table={torch.ops.<op>: <function>})`` and running
the recorded calls in ONNX Runtime against eager.

Each is a plain function the exporter traces (its inputs are the operator's, in its schema's
order), so a user copies it as it is into their own export code. They trade memory for
having no loop: ``cummax``/``cummin`` compare every position with every earlier one (n x n
along the dimension), ``searchsorted`` every value with every boundary. One translates an
operator torchlib has, for the calls torchlib refuses: ``scaled_dot_product_attention`` on
query, key and value of another rank than 4.

Example::

    torch.onnx.export(model, (x,), dynamo=True,
                      custom_translation_table={torch.ops.aten.cummax.default: cummax})
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from onnxscript import opset18

# the exporter traces these with Python ints and lists as ONNX inputs (onnxscript makes them
# constants), which the opset's typed signatures do not list
op: Any = opset18


def _cumulative(self: Any, dim: int, largest: bool) -> tuple[Any, Any]:
    rank = len(self.shape)
    d = dim % rank
    n = op.Squeeze(op.Shape(self, start=d, end=d + 1))
    positions = op.Range(op.Constant(value_int=0), n, op.Constant(value_int=1))
    tail = list(range(2, 1 + rank - d))  # the dimensions after ``dim``, kept broadcastable
    at = op.Unsqueeze(positions, [1, *tail])  # i: the position of the result, along dim
    before = op.Unsqueeze(positions, [0, *tail])  # j: every position, along dim + 1
    seen = op.LessOrEqual(before, at)  # j <= i
    values_j = op.Unsqueeze(self, [d])  # x[j] against every i
    bound = op.CastLike(op.Constant(value_float=float("-inf") if largest else float("inf")), self)
    candidates = op.Where(seen, values_j, bound)
    reduce = op.ReduceMax if largest else op.ReduceMin
    values = reduce(candidates, op.Constant(value_ints=[d + 1]), keepdims=0)
    hit = op.And(seen, op.Equal(values_j, op.Unsqueeze(values, [d + 1])))
    # torch's index: the last position at which the running extreme was reached
    index = op.Where(hit, op.Expand(before, op.Shape(hit)), op.Constant(value_int=-1))
    return values, op.ReduceMax(index, op.Constant(value_ints=[d + 1]), keepdims=0)


def cummax(self: Any, dim: int) -> tuple[Any, Any]:
    """``aten.cummax.default``: the running maximum along ``dim`` and its last index."""
    return _cumulative(self, dim, largest=True)


def cummin(self: Any, dim: int) -> tuple[Any, Any]:
    """``aten.cummin.default``: the running minimum along ``dim`` and its last index."""
    return _cumulative(self, dim, largest=False)


def kthvalue(self: Any, k: int, dim: int = -1, keepdim: bool = False) -> tuple[Any, Any]:
    """``aten.kthvalue.default``: the ``k``-th smallest value along ``dim`` (ONNX TopK)."""
    d = dim % len(self.shape)
    values, indices = op.TopK(self, op.Constant(value_ints=[k]), axis=d, largest=0, sorted=1)
    pick = op.Constant(value_ints=[k - 1])
    values, indices = op.Gather(values, pick, axis=d), op.Gather(indices, pick, axis=d)
    if not keepdim:
        values, indices = op.Squeeze(values, [d]), op.Squeeze(indices, [d])
    return values, indices


def median_dim(self: Any, dim: int, keepdim: bool = False) -> tuple[Any, Any]:
    """``aten.median.dim``: the lower median along ``dim`` (torch's: the ``(n - 1) // 2``-th
    smallest), by ONNX TopK over the first half."""
    d = dim % len(self.shape)
    n = op.Shape(self, start=d, end=d + 1)
    k = op.Add(op.Div(op.Sub(n, op.Constant(value_ints=[1])), op.Constant(value_ints=[2])), op.Constant(value_ints=[1]))
    values, indices = op.TopK(self, k, axis=d, largest=0, sorted=1)
    pick = op.Sub(k, op.Constant(value_ints=[1]))
    values, indices = op.Gather(values, pick, axis=d), op.Gather(indices, pick, axis=d)
    if not keepdim:
        values, indices = op.Squeeze(values, [d]), op.Squeeze(indices, [d])
    return values, indices


def searchsorted(
    sorted_sequence: Any, self: Any, *, out_int32: bool = False, right: bool = False, side: Any = None, sorter: Any = None
) -> Any:
    """``aten.searchsorted.Tensor``: for each value, the number of boundaries (the innermost
    dimension of ``sorted_sequence``, sorted) below it (``right``: at or below it)."""
    if sorter is not None:
        raise NotImplementedError("searchsorted with sorter=")
    right = right or side == "right"
    boundaries = op.Unsqueeze(sorted_sequence, [-2])  # [..., 1, m]
    values = op.Unsqueeze(self, [-1])  # [..., n, 1]
    below = op.LessOrEqual(boundaries, values) if right else op.Less(boundaries, values)
    count = op.ReduceSum(op.Cast(below, to=7), op.Constant(value_ints=[-1]), keepdims=0)  # 7: int64
    return op.Cast(count, to=6) if out_int32 else count  # 6: int32


def scaled_dot_product_attention(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Any:
    """``aten.scaled_dot_product_attention.default`` at any rank (torchlib's takes 4-D query,
    key and value only): ``softmax(q @ k^T * scale + mask) @ v`` over the last two
    dimensions, a boolean mask or ``is_causal`` as -inf where a position may not look."""
    if dropout_p != 0.0 or enable_gqa:
        raise NotImplementedError("scaled_dot_product_attention with dropout_p or enable_gqa")
    rank = len(query.shape)
    perm = [*range(rank - 2), rank - 1, rank - 2]
    if scale is None:
        size = op.Cast(op.Shape(query, start=-1), to=1)  # 1: float
        factor = op.Div(op.Constant(value_float=1.0), op.Sqrt(size))
    else:
        factor = op.Constant(value_floats=[scale])
    scores = op.Mul(op.MatMul(query, op.Transpose(key, perm=perm)), op.CastLike(factor, query))
    low = op.CastLike(op.Constant(value_float=float("-inf")), scores)
    if is_causal:  # position i looks at positions j <= i
        square = op.Concat(op.Shape(query, start=-2, end=-1), op.Shape(key, start=-2, end=-1), axis=0)
        scores = op.Where(op.Cast(op.Trilu(op.Expand(op.Constant(value_int=1), square), upper=0), to=9), scores, low)
    elif attn_mask is not None:
        boolean = attn_mask.dtype is not None and int(attn_mask.dtype) == 9  # 9: bool
        scores = op.Where(attn_mask, scores, low) if boolean else op.Add(scores, attn_mask)
    return op.MatMul(op.Softmax(scores, axis=-1), value)


# operator (as a finding names it) -> its translation: one ONNX has no function for, or one
# whose torchlib translation refuses the call (scaled_dot_product_attention off 4-D)
KNOWN: dict[str, Callable[..., Any]] = {
    "aten.cummax.default": cummax,
    "aten.cummin.default": cummin,
    "aten.kthvalue.default": kthvalue,
    "aten.median.dim": median_dim,
    "aten.searchsorted.Tensor": searchsorted,
    "aten.scaled_dot_product_attention.default": scaled_dot_product_attention,
}


def path_of(function: Callable[..., Any]) -> str:
    """The import path the ``onnx_translations`` option names ``function`` by."""
    return f"{function.__module__}:{function.__qualname__}"


def source_of(function: Callable[..., Any]) -> str:
    """``function``'s source, with the private helper it calls, as a user copies it."""
    parts = [inspect.getsource(function)]
    if function in (cummax, cummin):
        parts.insert(0, inspect.getsource(_cumulative))
    return "\n\n".join(parts)
