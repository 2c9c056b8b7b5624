"""The dimensions asked to stay dynamic over a whole registry, as Markdown (issue 39): how many
checks keep each dimension dynamic, constrained, specialized or unsound, and the statements
that pin or break one most often, with the models they do it in.

    python -m pytest_fxtrace.merge zoo-*.json --dims-table

Pytest-free and torch-free: it reads the ``CheckRecord`` s' ``dims``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from pytest_fxtrace.dims import CONSTRAINED, DYNAMIC, SPECIALIZED, UNSOUND
from pytest_fxtrace.report.records import CheckRecord

VERDICTS = (DYNAMIC, CONSTRAINED, SPECIALIZED, UNSOUND)
EXAMPLES = 3  # models named per statement


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def dims_table(records: Sequence[CheckRecord], top: int = 20) -> list[str]:
    """The Markdown lines: one row per dimension name and backend with the count of checks per
    verdict (and the checks that judged none: they failed before), then the ``top`` statements
    that pinned or broke a dimension in most checks; ``[]`` when no record judged a dimension."""
    counts: dict[tuple[str, str], Counter[str]] = {}
    statements: dict[tuple[str, str], list[str]] = {}
    verdicts_at: dict[tuple[str, str], Counter[str]] = {}
    for record in records:
        for item in record.dims or ():
            key = (str(item.get("name", "")), record.backend)
            counts.setdefault(key, Counter())[str(item.get("verdict", ""))] += 1
            if item.get("verdict") in (SPECIALIZED, UNSOUND) and item.get("line") is not None:
                path = str(item.get("path") or "").rpartition("site-packages/")[2]
                place = (f"{path}:{item['line']}", str(item.get("statement") or ""))
                models = statements.setdefault(place, [])
                name = record.model_name.rpartition(":")[2] or record.nodeid
                if name not in models:
                    models.append(name)
                verdicts_at.setdefault(place, Counter())[str(item["verdict"])] += 1
    if not counts:
        return []
    lines = ["| dimension | backend | " + " | ".join(VERDICTS) + " |", "|" + "---|" * (2 + len(VERDICTS))]
    for (name, backend), found in sorted(counts.items()):
        lines.append(f"| `{name}` | {backend} | " + " | ".join(str(found[v]) for v in VERDICTS) + " |")
    if statements:
        lines += ["", "| file:line | statement | models | verdicts | e.g. |", "|---|---|---|---|---|"]
        ranked = sorted(statements.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:top]
        for (where, statement), models in ranked:
            said = ", ".join(f"{v} {n}" for v, n in sorted(verdicts_at[(where, statement)].items()))
            shown = ", ".join(f"`{m}`" for m in models[:EXAMPLES]) + (", ..." if len(models) > EXAMPLES else "")
            lines.append(f"| `{where}` | `{_cell(statement)}` | {len(models)} | {said} | {shown} |")
    return lines
