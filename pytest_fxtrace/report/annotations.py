"""GitHub Actions: workflow commands (``::error file=...::message``) for failing checks,
escaped as the Actions runner parses them, with paths relative to the repository root.

Reads ``CheckRecord``s only; knows nothing of the engine or pytest. (Not named
``annotations``: ``from . import annotations`` would give ``__future__``'s feature, a
name every module of the package binds.)
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pytest_fxtrace.backends.spec import DEFAULT_BACKEND
from pytest_fxtrace.report import sites
from pytest_fxtrace.report.records import CheckRecord, sort_records
from pytest_fxtrace.types import model_label

# -- GitHub Actions ----------------------------------------------------------------------


def escape_data(text: str) -> str:
    """A workflow command's message, as actions/toolkit escapes it."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value (``file=``, ``title=``)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def workflow_command(command: str, message: str, **properties: Any) -> str:
    """``::command key=value,...::message``; None-valued properties are left out.

    Example::

        workflow_command("error", "boom", file="m.py", line=3)  # '::error file=m.py,line=3::boom'
    """
    props = ",".join(
        f"{key}={escape_property(str(value))}" for key, value in properties.items() if value is not None
    )
    return f"::{command}{' ' + props if props else ''}::{escape_data(message)}"


def find_repo_root(start: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> Path:
    """The enclosing git checkout of ``start``; else ``$GITHUB_WORKSPACE``; else ``start``."""
    start = Path(start).resolve()
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    workspace = (os.environ if environ is None else environ).get("GITHUB_WORKSPACE")
    return Path(workspace).resolve() if workspace else start


@functools.lru_cache(maxsize=4096)
def _inside(path: str, root: Path) -> str | None:
    try:
        return Path(path).resolve().relative_to(root).as_posix()
    except ValueError:
        return None


def annotation_lines(
    records: Iterable[CheckRecord], repo_root: str | os.PathLike[str], rootdir: str | os.PathLike[str] | None = None
) -> list[str]:
    """One ``::error`` per failing check, at the user's failing line when it lies in the
    repository, else at the test's definition (and the message names the real line). A
    compile check failing on its graph breaks has one per break site, each at its line
    (``rootdir``: what the sites' paths are relative to; default ``repo_root``). A check
    ``xpassed`` by the baseline sits on its test: its message says what to delete.

    Example::

        annotation_lines(records, "/repo")
        # ['::error file=models/block.py,line=42,title=...::Block is not traceable: ...']
    """
    root = Path(repo_root).resolve()
    base = Path(rootdir) if rootdir is not None else root
    lines = []
    for record in sort_records(records):
        if not record.failed:
            continue
        if record.graph_breaks and record.status == "untraceable" and record.category != "specialization":
            lines.extend(_site_lines(record, root, base))
            continue
        at = None if record.status == "xpassed" else record.file
        file, line = _place(record, at, record.location[1] if record.location else None, root)
        subject = model_label(record.model_name, record.module, record.module_type)
        kind = f"{record.status} ({record.category})" if record.category else record.status
        if record.backend != DEFAULT_BACKEND:  # which check failed, where a model is checked by several
            kind = f"{kind} [{record.backend}]"
        title = f"pytest-fxtrace: {subject} {kind}" if subject else f"pytest-fxtrace: {kind}"
        message = f"{record.nodeid}\n{record.text}".rstrip()
        lines.append(workflow_command("error", message, file=file, line=line, title=title))
    return lines


def _place(record: CheckRecord, file: str | None, line: int | None, root: Path) -> tuple[str | None, int | None]:
    """Where an annotation sits: ``file:line`` when inside the repository, else the test."""
    inside = _inside(file, root) if file is not None and line is not None else None
    if inside is not None:
        return inside, line
    if record.test_file is not None:
        test = _inside(record.test_file, root)
        return test, record.test_line if test is not None else None
    return None, None


def _site_lines(record: CheckRecord, root: Path, base: Path) -> list[str]:
    """A compile check's annotations: one per graph-break site, at its line."""
    breaks = record.graph_breaks or []
    lines = []
    for number, site in enumerate(breaks, 1):
        file = str(base / site["path"]) if site.get("path") else None
        at = _place(record, file, site.get("line"), root)
        subject = model_label(record.model_name, site.get("module") or "")
        title = f"pytest-fxtrace: {subject} graph break ({site.get('category') or 'unsupported'}) [{record.backend}]"
        message = (
            f"{record.nodeid}\n{record.model_name} breaks the graph here: site {number} of {len(breaks)}\n"
            f"  {sites.break_text(site)}\n  {site.get('reason') or ''}"
        )
        lines.append(workflow_command("error", message.rstrip(), file=at[0], line=at[1], title=title))
    return lines
