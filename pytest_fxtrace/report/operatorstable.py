"""The operators a backend has no translation for over a whole registry, as Markdown (issue 40):
the checks per backend by outcome (passed, each failing category), then each operator with
the number of models it stops and some of them.

    python -m pytest_fxtrace.merge zoo-*.json --operators-table

Pytest-free and torch-free: it reads the ``CheckRecord`` s' ``status``, ``category`` and
``operator`` (set where the category is ``missing-operator``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from pytest_fxtrace.report.records import CheckRecord

EXAMPLES = 3  # models named per operator


def operators_table(records: Sequence[CheckRecord], top: int = 20) -> list[str]:
    """The Markdown lines: per backend the checks, how many passed and how many failed in
    each category (most first); then the ``top`` operators by the models they stop, with up
    to ``EXAMPLES`` of them; ``[]`` when there is no record."""
    checked = [record for record in records if record.model is not None]
    if not checked:
        return []
    lines = ["| backend | checks | passed | not passed, by category |", "|---|---|---|---|"]
    for backend in sorted({record.backend for record in checked}):
        own = [record for record in checked if record.backend == backend]
        passed = sum(record.status == "passed" for record in own)
        failing = Counter(record.category or record.status for record in own if record.status != "passed")
        by_category = ", ".join(f"`{category}` {count}" for category, count in failing.most_common()) or "none"
        lines.append(f"| {backend} | {len(own)} | {passed} | {by_category} |")
    stopped: dict[tuple[str, str], list[str]] = {}
    for record in checked:
        if record.operator:
            models = stopped.setdefault((record.operator, record.backend), [])
            name = record.model_name.rpartition(":")[2] or record.nodeid
            if name not in models:
                models.append(name)
    if not stopped:
        lines += ["", "no operator stopped a check (no `missing-operator`)"]
        return lines
    lines += ["", "| operator | backend | models | e.g. |", "|---|---|---|---|"]
    for (operator, backend), models in sorted(stopped.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:top]:
        shown = ", ".join(f"`{m}`" for m in models[:EXAMPLES]) + (", ..." if len(models) > EXAMPLES else "")
        lines.append(f"| `{operator}` | {backend} | {len(models)} | {shown} |")
    return lines
