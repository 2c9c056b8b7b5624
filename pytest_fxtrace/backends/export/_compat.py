"""The export backend's private torch names, each with a fallback (the root
``pytest_fxtrace/_compat.py`` keeps what several parts use, and the export floor, which the
options check before the backend is imported):

* ``torch._dynamo.exc._load_gb_type_to_gb_id_map``: TorchDynamo's stable id of a graph
  break (``graph_break_id``), read from the docs link in the message where it is missing;
* ``torch._check_is_size``: whether the running torch deprecates it
  (``check_is_size_deprecated``), True where it is missing.
"""

from __future__ import annotations

import re

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
