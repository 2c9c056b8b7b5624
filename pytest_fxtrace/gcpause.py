"""Python's cyclic garbage collector held off while a check runs: a collection that
lands inside a check would bill the user's garbage to it (and walk the model's
reference cycles mid-trace)."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """No automatic cyclic garbage collection inside the block; the young generation
    is collected once at its end.

    Tracing and replaying allocate many objects that live until the check ends (graph
    nodes, proxies, state copies, tracebacks); with collection on, every few hundred
    allocations the collector walks all of them again (a few per cent of a
    localization). Collecting once at the end frees the same garbage, and the check,
    not the user's next line, pays for it. A collector the user turned off stays off.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect(0)


# -- clean-up the time limit must not interrupt -------------------------------------------
