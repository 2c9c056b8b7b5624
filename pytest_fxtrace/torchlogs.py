"""torch's loggers sent to one handler of ours for the length of a block: a capture's
or a diagnosis's log records (torch's logging set-up gives ``torch._dynamo``,
``torch.export`` and others a stderr handler of their own and stops them propagating)
kept out of the test's output, each logger as before afterwards. The export backend
keeps the records for ``-vv``; the compile backend drops them.

Imports no torch: loggers are found by name.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

_LOGGERS: tuple[int, list[logging.Logger]] = (-1, [])


def torch_loggers() -> list[logging.Logger]:
    """``torch`` and every logger under it that has handlers of its own. Found again
    only when loggers were added since."""
    global _LOGGERS
    known = logging.root.manager.loggerDict
    if _LOGGERS[0] != len(known):
        found = [logging.getLogger("torch")]
        for name, logger in list(known.items()):
            if name.startswith("torch.") and isinstance(logger, logging.Logger):
                found.append(logger)
        _LOGGERS = (len(known), found)
    return [logger for logger in _LOGGERS[1] if logger.handlers or logger.name == "torch"]


@contextlib.contextmanager
def torch_logs_to(handler: logging.Handler) -> Iterator[None]:
    """Within the block, ``handler`` alone gets the records of ``torch_loggers()`` (none
    propagates further).

    Example::

        with torch_logs_to(logging.NullHandler()):
            compiled(x)
    """
    saved = [(logger, logger.handlers[:], logger.propagate) for logger in torch_loggers()]
    try:
        for logger, _, _ in saved:
            logger.handlers = [handler]
            logger.propagate = False
        yield
    finally:
        for logger, handlers, propagate in saved:
            logger.handlers = handlers
            logger.propagate = propagate


__all__ = ["torch_loggers", "torch_logs_to"]
