"""How a source path is shown to people: short, and still findable.

Imports no torch: the engine's messages and the session's summary table (an xdist
controller's included) both use it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def shown_path(
    path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None, *, imports: bool = True
) -> str:
    """``path`` relative to ``root`` (default: the working directory) when inside it; else
    relative to the ``sys.path`` entry it is imported from, so an installed library's file
    reads as its import path (``timm/models/nest.py``, not
    ``/home/ci/.venv/lib/python3.11/site-packages/timm/models/nest.py``); else absolute.
    POSIX separators. The one function that shapes a path for a message, a table or a
    report.

    ``imports=False``: never by its import path, only relative to ``root`` or absolute,
    the form that finds the file again (the JSON report's ``location``, a ``Location``).

    Example::

        shown_path(timm.models.nest.__file__)  # 'timm/models/nest.py'
        shown_path(timm.models.nest.__file__, imports=False)  # '/home/ci/.venv/lib/.../nest.py'
    """
    full = os.path.abspath(path)
    base = os.path.abspath(root if root is not None else os.getcwd())
    for folder in (base, _import_root(full) if imports else None):
        if folder and full.startswith(folder.rstrip(os.sep) + os.sep):
            return Path(os.path.relpath(full, folder)).as_posix()
    return Path(full).as_posix()


def _import_root(full: str) -> str | None:
    """The deepest directory on ``sys.path`` (site-packages, dist-packages, a ``src``
    folder) that holds ``full``."""
    best = None
    for entry in sys.path:
        if not isinstance(entry, str):
            continue
        folder = os.path.abspath(entry or os.getcwd())
        if full.startswith(folder.rstrip(os.sep) + os.sep) and (best is None or len(folder) > len(best)):
            best = folder
    return best
