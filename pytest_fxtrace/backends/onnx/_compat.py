"""The ONNX backend's private torch names (``pytest_fxtrace/_compat.py`` keeps what several
parts use):

* ``torch.utils._pytree.tree_unflatten``: ONNX Runtime's flat outputs in the structure of the
  exported program's (``ExportedProgram.call_spec.out_spec``), as ``ep.module()`` returns them;
* ``torch.utils._pytree.arg_tree_leaves``: a call's inputs flattened as the program's
  placeholders take them (``tree_leaves((args, kwargs))`` where it is missing);
* ``torch.onnx._internal.exporter._core._prepare_exported_program_for_export``: the program
  as the exporter decomposes it, to find the statement behind an operator only a
  decomposition calls;
* ``torch.onnx._internal.exporter._core.export`` with ``_registration.ONNXRegistry``: the
  conversion with torchlib's registry built once per process (``onnx_export``).
"""

from __future__ import annotations

import functools
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
        from torch.onnx._internal.exporter import _core

        return _core._prepare_exported_program_for_export(exported, registry=_registry({}))
    except Exception:  # another torch's internals: the operator is then named without its statement
        return None


@functools.cache
def _torchlib_registry(opset: int) -> Any:
    from torch.onnx._internal.exporter import _registration

    return _registration.ONNXRegistry.from_torchlib(opset_version=opset)


def _registry(translations: Mapping[Any, Any]) -> Any:
    """torchlib's registry as ``torch.onnx.export`` builds it for the default opset, with
    ``translations`` (``custom_translation_table``) registered first; built once per process
    and copied per use, so one check's translations never reach another's."""
    from torch.onnx import _constants as onnx_constants
    from torch.onnx._internal.exporter import _constants, _registration

    opset = max(onnx_constants.ONNX_DEFAULT_OPSET, _constants.TORCHLIB_OPSET)
    base = _torchlib_registry(opset)
    registry = _registration.ONNXRegistry()
    registry._opset_version = base._opset_version
    registry.functions = {name: list(found) for name, found in base.functions.items()}
    for target, function in translations.items():
        registry.register_op(target, function, is_complex=False)
    return registry


def onnx_export(exported: Any, translations: Mapping[Any, Any]) -> Any:
    """``torch.onnx.export(exported, dynamo=True, custom_translation_table=translations)``
    for an ``ExportedProgram``, with torchlib's registry built once per process: torch builds
    it on every export (onnxscript parses the source of its ~1000 functions), 2.9 s of CPU per
    export on the development VM, 40 % of a small model's check and of each verification of a
    translation (measured with cProfile, torch 2.14.1, onnxscript 0.7.2). Torch's private
    ``_core.export`` with the registry, as ``torch.onnx.export`` calls it; the public call
    where this torch has neither."""
    import torch

    try:
        from torch.onnx import _constants as onnx_constants
        from torch.onnx._internal.exporter import _core

        registry = _registry(translations)
    except (ImportError, AttributeError):  # another torch's internals: the public call
        return torch.onnx.export(exported, dynamo=True, verbose=False, custom_translation_table=dict(translations) or None)
    return _core.export(exported, (), None, registry=registry, verbose=False, opset_version=onnx_constants.ONNX_DEFAULT_OPSET)
