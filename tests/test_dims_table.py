"""python -m pytest_fxtrace.merge --dims-table: the dimensions asked to stay dynamic over a
registry, as Markdown (report/dimstable.py). Records only: fast."""

from __future__ import annotations

import json

from pytest_fxtrace.report.dimstable import dims_table
from pytest_fxtrace.report.merge import main
from pytest_fxtrace.report.records import REPORT_VERSION, CheckRecord


def dim(name: str, verdict: str, line: int | None = None, statement: str | None = None) -> dict:
    return {
        "input": "x", "dim": 0, "name": name, "verdict": verdict, "value": None, "range": None,
        "multiple_of": None, "path": "/venv/lib/python3.11/site-packages/timm/layers/pos.py" if line else None,
        "line": line, "statement": statement, "sizes": [],
    }  # fmt: skip


def record(model: str, *dims: dict, backend: str = "export") -> CheckRecord:
    failing = any(d["verdict"] in ("specialized", "unsound") for d in dims)
    return CheckRecord(
        nodeid=f"zoo/timm::{model}", model=f"timm.{model}", status="mismatch" if failing else "passed",
        category="specialization" if failing else None, backend=backend, dims=list(dims),
    )  # fmt: skip


POS = "x = x + self.pos_embed[:, :197]"
RECORDS = [
    record("vit_a", dim("batch", "dynamic"), dim("height", "specialized", 40, POS)),
    record("vit_b", dim("batch", "dynamic"), dim("height", "specialized", 40, POS)),
    record("resnet", dim("batch", "dynamic"), dim("height", "dynamic")),
    record("odd", dim("batch", "unsound", 7, "y = x.view(4, -1)"), dim("height", "constrained")),
    CheckRecord(nodeid="zoo/timm::plain", model="timm.plain", status="passed", backend="export"),
]


def test_counts_per_dimension_and_the_statements_that_pin_most_often_first():
    lines = dims_table(RECORDS)
    assert lines[:4] == [
        "| dimension | backend | dynamic | constrained | specialized | unsound |",
        "|---|---|---|---|---|---|",
        "| `batch` | export | 3 | 0 | 0 | 1 |",
        "| `height` | export | 1 | 1 | 2 | 0 |",
    ]
    assert lines[5:7] == ["| file:line | statement | models | verdicts | e.g. |", "|---|---|---|---|---|"]
    assert lines[7] == "| `timm/layers/pos.py:40` | `x = x + self.pos_embed[:, :197]` | 2 | specialized 2 | `vit_a`, `vit_b` |"
    assert lines[8].startswith("| `timm/layers/pos.py:7` | `y = x.view(4, -1)` | 1 | unsound 1 |")


def test_the_merge_tool_prints_it_and_says_so_when_no_dimension_was_asked_for(tmp_path, capsys):
    document = {"version": REPORT_VERSION, "torch": "2.14.1", "results": [r.to_json() for r in RECORDS]}
    (tmp_path / "r.json").write_text(json.dumps(document))
    assert main([str(tmp_path / "r.json"), "--dims-table"]) == 1  # as the run would exit: checks failed
    assert capsys.readouterr().out.splitlines()[2] == "| `batch` | export | 3 | 0 | 0 | 1 |"
    document["results"] = [RECORDS[-1].to_json()]
    (tmp_path / "r.json").write_text(json.dumps(document))
    assert main([str(tmp_path / "r.json"), "--dims-table"]) == 0
    assert capsys.readouterr().out == "no check judged a dimension (ask with dynamic= or --fx-dynamic)\n"
