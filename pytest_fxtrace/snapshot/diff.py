"""Comparing a snapshot with the code generated now: equality that ignores what torch
releases vary in, and a capped unified diff.

Knows text; nothing of files or pytest.
"""

from __future__ import annotations

import dataclasses
import difflib

# --- comparing --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Diff:
    """A unified diff of expected -> actual, cut to ``max_lines`` (``cut`` lines left out)."""

    text: str
    cut: int
    removed: int  # lines removed / added in the whole diff
    added: int

    def counts(self) -> str:
        """How much changed, in words: ``1 line removed, 2 added``."""
        return f"{counted(self.removed, 'line')} removed, {self.added} added"

    def left_out(self) -> str:
        """What the cap left out, in words: ``1 more diff line cut``."""
        return f"{counted(self.cut, 'more diff line')} cut"


def counted(count: int, noun: str) -> str:
    """``count`` and ``noun``, plural but for one: ``1 line``, ``2 lines``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _hunk_range(start: int, stop: int) -> str:
    length = stop - start
    if length == 1:
        return str(start + 1)
    return f"{start + 1 if length else start},{length}"


def _diff_lines(old: list[str], new: list[str], fromfile: str, tofile: str) -> list[str]:
    """A unified diff whose replaced lines come in pairs (-old, +new, -old, +new): still a
    valid patch, and a capped diff shows the new lines next to the old ones instead of
    forty removals and none of their replacements."""
    groups = list(difflib.SequenceMatcher(None, old, new).get_grouped_opcodes(3))
    if not groups:
        return []
    lines = [f"--- {fromfile}", f"+++ {tofile}"]
    for group in groups:
        first, last = group[0], group[-1]
        lines.append(f"@@ -{_hunk_range(first[1], last[2])} +{_hunk_range(first[3], last[4])} @@")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                lines.extend(" " + line for line in old[i1:i2])
                continue
            removed, added = old[i1:i2], new[j1:j2]
            for k in range(max(len(removed), len(added))):
                lines.extend("-" + line for line in removed[k : k + 1])
                lines.extend("+" + line for line in added[k : k + 1])
    return lines


def unified_diff(expected: str, actual: str, fromfile: str, tofile: str, max_lines: int | None = 40) -> Diff:
    """A unified diff of two bodies, capped at ``max_lines`` (None: whole).

    Example::

        diff = unified_diff(old, new, "snapshot", "actual")
        print(diff.text, f"... {diff.cut} more lines" if diff.cut else "")
    """
    lines = _diff_lines(expected.splitlines(), actual.splitlines(), fromfile, tofile)
    removed = sum(1 for line in lines[2:] if line[:1] == "-")
    added = sum(1 for line in lines[2:] if line[:1] == "+")
    if max_lines is None or len(lines) <= max_lines:
        return Diff("\n".join(lines), 0, removed, added)
    return Diff("\n".join(lines[:max_lines]), len(lines) - max_lines, removed, added)
