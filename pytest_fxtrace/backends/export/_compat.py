"""The export backend's private torch names, each with a fallback (the root
``pytest_fxtrace/_compat.py`` keeps what several parts use, and the export floor, which the
options check before the backend is imported):

* ``torch._dynamo.exc._load_gb_type_to_gb_id_map``: TorchDynamo's stable id of a graph
  break (``graph_break_id``), read from the docs link in the message where it is missing;
* ``torch._check_is_size``: whether the running torch deprecates it
  (``check_is_size_deprecated``), True where it is missing;
* ``torch.nn.modules.module._global_buffer_registration_hooks``: the buffer hook a failed
  non-strict export leaves registered on torch 2.12 (``export_hooks_removed``); nothing
  to do where the table is missing.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

_GRAPH_BREAK_PAGE = re.compile(r"/gb/gb(\d+)\.html", re.IGNORECASE)


def graph_break_id(exc: BaseException) -> str | None:
    """TorchDynamo's stable id of a graph break (``"GB0170"``) for an exception that
    carries a graph-break type (``gb_type``): looked up in dynamo's registry
    (``torch._dynamo.exc._load_gb_type_to_gb_id_map``); else read from the docs link
    in the message; None for other exceptions, or a torch without ids."""
    gb_type = getattr(exc, "gb_type", None)
    if isinstance(gb_type, str) and gb_type:
        try:
            from torch._dynamo.exc import _load_gb_type_to_gb_id_map

            found = _load_gb_type_to_gb_id_map().get(gb_type)
        except Exception:  # no registry in this torch, or unreadable
            found = None
        if isinstance(found, str) and found:
            return found
    link = _GRAPH_BREAK_PAGE.search(str(exc))
    return f"GB{link.group(1)}" if link else None


def check_is_size_deprecated() -> bool:
    """Whether the running torch deprecates ``torch._check_is_size`` (torch 2.14 wraps it
    in ``typing_extensions.deprecated``, which marks it with PEP 702's ``__deprecated__``,
    and recommends ``torch._check(n >= 0)``); True where it is gone, so advice never names
    a function the user's torch lacks or warns about."""
    import torch

    check_is_size = getattr(torch, "_check_is_size", None)
    return check_is_size is None or getattr(check_is_size, "__deprecated__", None) is not None


# torch 2.12's non-strict export registers a global buffer-registration hook
# (torch._functorch._aot_autograd.utils.register_buffer_assignment_hook) and removes it only
# when the export succeeds (torch 2.13 removes it in a finally). A failed export leaves it:
# the exported model's own buffer assignments then fail in eager ("expected FakeTensor"),
# and every later strict export of any module that assigns a buffer stops at GB0007
# ("Attempted to call function marked as skipped": the hook).
_EXPORT_BUFFER_HOOK = "register_buffer_assignment_hook.<locals>."


@contextlib.contextmanager
def export_hooks_removed() -> Iterator[None]:
    """Within the block, torch.export may register global module hooks; the buffer
    hook export registers and a failed export left (torch 2.12) is removed afterwards."""
    from torch.nn.modules import module as nn_module

    hooks = getattr(nn_module, "_global_buffer_registration_hooks", None)
    before = set(hooks) if isinstance(hooks, dict) else set()
    try:
        yield
    finally:
        if isinstance(hooks, dict):
            for key in [key for key in hooks if key not in before]:
                if getattr(hooks[key], "__qualname__", "").startswith(_EXPORT_BUFFER_HOOK):
                    del hooks[key]
