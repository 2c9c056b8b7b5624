"""The checks that did not pass, as a Markdown table a maintainer pastes into their skip
list (transformers' ``EXPORT_SKIPS``): per model class and backend, the category (or the
status where there is none), the failing ``file:line``, the submodule, a one-line reason
and the verified fix.

    python -m pytest_fxtrace.merge shard-*.json --skips-table

Pytest-free and torch-free: it reads ``CheckRecord`` s.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pytest_fxtrace.report.records import CheckRecord

REASON_WIDTH = 120
COLUMNS = ("class", "backend", "category", "file:line", "submodule", "reason", "verified fix")
# "LlamaModel is not exportable (export): " / "BertModel is not traceable: " / "X could not be built: " /
# "Sam3Model.detr_decoder (Sam3DetrDecoder) is not compilable (torch.compile): " /
# "Nest.levels.0.attn is not exportable to ONNX (torch.onnx, dynamo=True): " / "X exported to ONNX, but "
_LEAD = re.compile(r"^\S+(?: \(\w+\))? (?:is not [^:]+:|could not be built:|[\w ]+?, but) ")


def one_line(text: str, width: int = REASON_WIDTH) -> str:
    """The first line of a check's message without its subject, cut at a word to ``width``.

    Example::

        one_line("LlamaModel is not exportable (export): returns a DynamicCache object")
        # 'returns a DynamicCache object'
    """
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    first = _LEAD.sub("", first, count=1)
    if len(first) <= width:
        return first
    return first[: width - 1].rsplit(" ", 1)[0] + "…"


def _where(record: CheckRecord) -> str:
    if record.location is None:
        return ""
    path = record.location[0].rpartition("site-packages/")[2]  # a library's file by its import path
    return f"{path}:{record.location[1]}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def skips_table(records: Sequence[CheckRecord]) -> list[str]:
    """The Markdown lines: a header, then a row per check that did not pass, by class and
    backend; ``[]`` when every check passed."""
    rows = []
    for record in records:
        if record.status == "passed":
            continue
        fix = record.suggestion.get("text", "") if record.verified_fix and record.suggestion else ""
        rows.append(
            (
                record.model_name.rpartition(":")[2] or record.nodeid,  # a zoo's unbuilt "source:name"
                record.backend,
                record.category or record.status,
                _where(record),
                record.module,
                one_line(record.text),
                one_line(fix),
            )
        )
    if not rows:
        return []
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in sorted(rows):
        lines.append("| " + " | ".join(f"`{c}`" if i in (0, 3, 4) and c else _cell(c) for i, c in enumerate(row)) + " |")
    return lines
