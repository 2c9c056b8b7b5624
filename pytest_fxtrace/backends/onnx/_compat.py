"""The ONNX backend's private torch names (``pytest_fxtrace/_compat.py`` keeps what several
parts use):

* ``torch.utils._pytree.tree_unflatten``: ONNX Runtime's flat outputs in the structure of the
  exported program's (``ExportedProgram.call_spec.out_spec``), as ``ep.module()`` returns them;
* ``torch.utils._pytree.arg_tree_leaves``: a call's inputs flattened as the program's
  placeholders take them (``tree_leaves((args, kwargs))`` where it is missing);
* ``torch.onnx._internal.exporter._core._prepare_exported_program_for_export``: the program
  as the exporter decomposes it, to find the statement behind an operator only a
  decomposition calls.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def unflatten(flat: list[Any], spec: Any) -> Any:
    """``flat`` in the structure ``spec`` describes."""
    from torch.utils import _pytree

    return _pytree.tree_unflatten(flat, spec)


def call_leaves(args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[Any]:
    """The leaves of a call's positional, then keyword, inputs."""
    from torch.utils import _pytree

    flatten = getattr(_pytree, "arg_tree_leaves", None)
    if flatten is not None:
        return list(flatten(*args, **kwargs))
    return list(_pytree.tree_leaves((tuple(args), dict(kwargs))))


def decomposed_for_onnx(exported: Any) -> Any:
    """The exported program as torch.onnx decomposes it before translating (step 3/3):
    ATen operators ONNX has no function for broken into others (``aten.cumprod`` into
    ``prims.prod``), each node keeping the stack trace, module stack and ``original_aten`` of
    the node it came from. torch.onnx's private ``_prepare_exported_program_for_export`` with
    torchlib's registry; None where this torch has neither."""
    try:
        from torch.onnx._internal.exporter import _core, _registration

        return _core._prepare_exported_program_for_export(exported, registry=_registration.ONNXRegistry.from_torchlib())
    except Exception:  # another torch's internals: the operator is then named without its statement
        return None
