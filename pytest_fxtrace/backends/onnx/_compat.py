"""The ONNX backend's private torch names (``pytest_fxtrace/_compat.py`` keeps what several
parts use):

* ``torch.utils._pytree.tree_unflatten``: ONNX Runtime's flat outputs in the structure of the
  exported program's (``ExportedProgram.call_spec.out_spec``), as ``ep.module()`` returns them;
* ``torch.utils._pytree.arg_tree_leaves``: a call's inputs flattened as the program's
  placeholders take them (``tree_leaves((args, kwargs))`` where it is missing).
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
