"""The line of a corpus file that holds a marker comment (``# STE-APPLY``): how a test names
the statement a finding must point at without hard-coding line numbers."""

from __future__ import annotations


def line_of(path: str, marker: str) -> int:
    """The first line of the file at ``path`` that holds ``marker`` (outside a ``line_of`` call)."""
    with open(path) as source:
        for number, line in enumerate(source, 1):
            if marker in line and "line_of" not in line:
                return number
    raise LookupError(f"{marker!r} is in no line of {path}")
