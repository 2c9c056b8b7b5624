"""python -m pytest_fxtrace.merge --operators-table: the checks per backend by outcome and the
operators a backend has no translation for, over a registry, as Markdown
(report/operatorstable.py). Records only: fast."""

from __future__ import annotations

import json

from pytest_fxtrace.report.merge import main
from pytest_fxtrace.report.operatorstable import operators_table
from pytest_fxtrace.report.records import REPORT_VERSION, CheckRecord


def record(model: str, status: str = "passed", category: str | None = None, operator: str | None = None) -> CheckRecord:
    return CheckRecord(
        nodeid=f"zoo/timm::{model}", model=f"timm.{model}", status=status, category=category, backend="onnx",
        operator=operator,
    )  # fmt: skip


RECORDS = [
    record("a"),
    record("b", "untraceable", "missing-operator", "aten.cummax.default"),
    record("c", "untraceable", "missing-operator", "aten.cummax.default"),
    record("d", "untraceable", "missing-operator", "aten.kthvalue.default"),
    record("e", "untraceable", "control-flow"),
    record("f", "mismatch", "numeric"),
]


def test_outcomes_per_backend_then_operators_by_the_models_they_stop():
    lines = operators_table(RECORDS)
    assert lines[:3] == [
        "| backend | checks | passed | not passed, by category |",
        "|---|---|---|---|",
        "| onnx | 6 | 1 | `missing-operator` 3, `control-flow` 1, `numeric` 1 |",
    ]
    assert lines[6:] == [
        "| `aten.cummax.default` | onnx | 2 | `b`, `c` |",
        "| `aten.kthvalue.default` | onnx | 1 | `d` |",
    ]


def test_a_registry_no_operator_stops_says_so_and_no_record_is_no_table():
    assert operators_table([record("a")])[-1] == "no operator stopped a check (no `missing-operator`)"
    assert operators_table([]) == []


def test_the_operator_goes_through_the_json_report_and_merge(tmp_path, capsys):
    document = {
        "version": REPORT_VERSION, "torch": "2.14.1", "results": [r.to_json() for r in RECORDS], "summary": {},
    }  # fmt: skip
    assert [r.get("operator") for r in document["results"]][:3] == [None, "aten.cummax.default", "aten.cummax.default"]
    (tmp_path / "r.json").write_text(json.dumps(document))
    assert main([str(tmp_path / "r.json"), "--operators-table"]) == 1  # as the run would exit: checks failed
    assert "| `aten.cummax.default` | onnx | 2 | `b`, `c` |" in capsys.readouterr().out
