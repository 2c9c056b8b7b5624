"""A patch as a unified diff of the file that holds it, paths relative to the file's import
root (``a/acme_models/gate.py``), so ``patch -p1`` and ``git apply`` take it from there."""

from __future__ import annotations

import difflib
import os


def import_path(file: str, module: str) -> str:
    """``file``'s path below its import root, from its module's dotted name
    (``acme_models.gate`` -> ``acme_models/gate.py``; a package's ``__init__.py`` kept)."""
    parts = module.split(".")
    name = "__init__.py" if os.path.basename(file) == "__init__.py" else f"{parts.pop()}.py"
    return "/".join([*parts, name])


def unified_diff(file: str, module: str, old_class: list[str], new_class: str, start: int) -> str:
    """The diff of ``file`` with the class at ``start`` (its lines ``old_class``) replaced by
    ``new_class``; the file is read, never written."""
    with open(file, encoding="utf-8") as handle:
        text = handle.read().splitlines(keepends=True)
    first = start - 1
    new = [*text[:first], *new_class.splitlines(keepends=True), *text[first + len(old_class) :]]
    path = import_path(file, module)
    return "".join(difflib.unified_diff(text, new, f"a/{path}", f"b/{path}"))
