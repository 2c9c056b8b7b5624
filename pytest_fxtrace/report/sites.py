"""A compile check's graph-break sites and recompiles as the reports show them, and a site's
identity: what ``--fx-baseline`` compares to tell a new site from a known one.

Works on the JSON form the records carry (``CheckRecord.graph_breaks`` and ``.recompiles``:
``{"path", "line", "module", "type", "id", "category", "reason", "statement"}`` and
``{"reason", "path", "line", "counted"}``, paths relative to the rootdir), so a merged report
reads as one run. Pytest-free and torch-free.

A site's identity is its file, the submodule whose ``forward`` holds it and its statement's
text (whitespace collapsed, comments already left out), not its line number: a line inserted
above a break moves it and leaves it the same break, and a baseline keyed by line would call
that one site fixed and another new. Nor is torch's graph-break type part of it: a statement
breaks the graph once (sites are distinct statements), and torch rewords its types between
releases. Two sites with the same text in one submodule's file are told apart by counting.
A site with no line of the user's is known by its submodule and torch's type.

Example::

    site_key({"path": "m.py", "line": 12, "module": "block", "statement": "if x.sum() > 0:"}, "/repo")
    # ("m.py", "block", "if x.sum() > 0:")
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_fxtrace.paths import shown_path

SiteKey = tuple[str | None, str, str]


def site_path(path: str | None, rootdir: str | os.PathLike[str]) -> str | None:
    """A record's site path as a baseline keeps it: relative to the rootdir, else a library's
    file by its import path (``torchvision/models/x.py``: the same on every machine, where
    the absolute path the JSON report keeps is not)."""
    if path is None:
        return None
    return shown_path(os.path.join(rootdir, path), rootdir)


def site_key(site: Mapping[str, Any], rootdir: str | os.PathLike[str]) -> SiteKey:
    """What tells one break site from another across runs and edits (the module docstring)."""
    statement = " ".join(str(site.get("statement") or "").split())
    if not statement:
        return (site_path(site.get("path"), rootdir), str(site.get("module") or ""), f"<{site.get('type') or 'graph break'}>")
    return (site_path(site.get("path"), rootdir), str(site.get("module") or ""), statement)


def where(item: Mapping[str, Any]) -> str:
    """``path:line`` as a message shows it (a library's file by its import path:
    ``torchvision/ops/boxes.py:151``, as the table and the failure message read), or ``""``
    where torch named no line of the user's."""
    return f"{shown_path(item['path'])}:{item['line']}" if item.get("path") and item.get("line") else ""


def break_kind(site: Mapping[str, Any]) -> str:
    """``data-dependent, Unsupported Tensor.item() call [GB0124]``: the category and torch's type."""
    kind = site.get("type") or "graph break"
    kind = f"{kind} [{site['id']}]" if site.get("id") else kind
    return f"{site['category']}, {kind}" if site.get("category") else kind


def break_text(site: Mapping[str, Any]) -> str:
    """One site on one line: ``m.py:12 block: `if x.sum() > 0:` (control-flow, ... [GB0170])``."""
    place = where(site) or "(no line of yours)"
    module = site.get("module") or "forward"
    statement = f" `{site['statement']}`" if site.get("statement") else ""
    return f"{place} {module}:{statement} ({break_kind(site)})"


def recompile_text(item: Mapping[str, Any]) -> str:
    """One recompile on one line: its reason, where Dynamo guarded, and whether it counts."""
    place = f" (guarded at {where(item)})" if where(item) else ""
    return f"{item.get('reason') or 'recompiled'}{place}"


def counted(recompiles: Sequence[Mapping[str, Any]] | None) -> int:
    """The recompiles held against ``max_recompiles``."""
    return sum(1 for item in recompiles or () if item.get("counted", True))


def compile_counts(breaks: Sequence[Mapping[str, Any]] | None, recompiles: Sequence[Mapping[str, Any]] | None) -> str:
    """``3 graph-break sites, 1 recompile``."""
    sites = len(breaks or ())
    count = counted(recompiles)
    return (
        f"{sites} graph-break site{'s' if sites != 1 else ''}, "
        f"{count} recompile{'s' if count != 1 else ''}"
    )


__all__ = [
    "SiteKey",
    "break_kind",
    "break_text",
    "compile_counts",
    "counted",
    "recompile_text",
    "site_key",
    "site_path",
    "where",
]
