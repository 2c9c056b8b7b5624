"""python -m pytest_fxtrace.merge --skips-table: the checks that did not pass as a Markdown
table a maintainer pastes into their skip list (report/skips.py). Records only: fast."""

from __future__ import annotations

import json

from pytest_fxtrace.report.merge import main
from pytest_fxtrace.report.records import REPORT_VERSION, CheckRecord
from pytest_fxtrace.report.skips import one_line, skips_table

EXPORTED = CheckRecord(nodeid="zoo/transformers::BertModel", model="transformers.BertModel", status="passed", backend="export")
CACHED = CheckRecord(
    nodeid="zoo/transformers::GPT2Model",
    model="transformers.models.gpt2.modeling_gpt2.GPT2Model",
    status="untraceable",
    category="unsupported",
    backend="export",
    text="GPT2Model is not exportable (export): returns a DynamicCache object | which export cannot flatten\n  error: ...",
    suggestion={"text": "use_cache=False in its config, so that its output holds no DynamicCache", "verified": True},
)
BRANCHY = CheckRecord(
    nodeid="zoo/transformers::FunnelModel",
    model="transformers.FunnelModel",
    status="untraceable",
    category="control-flow",
    backend="compile",
    location=("/venv/lib/python3.11/site-packages/transformers/models/funnel/modeling_funnel.py", 412),
    module="encoder.blocks.0",
    text="FunnelModel is not traceable: `if x.sum() > 0:` at modeling_funnel.py:412 uses a traced value " + "in control flow " * 12,
    suggestion={"text": "none found", "verified": False},
)
UNBUILT = CheckRecord(
    nodeid="zoo/transformers::BrosModel",
    model="transformers:BrosModel",
    status="model-error",
    text="BrosModel: example_inputs failed: forward(input_ids (2, 8)) raised ValueError: You have to specify bbox",
)


def test_a_row_per_check_that_did_not_pass_sorted_by_class_and_backend():
    lines = skips_table([EXPORTED, UNBUILT, CACHED, BRANCHY])
    assert lines[:2] == [
        "| class | backend | category | file:line | submodule | reason | verified fix |",
        "|---|---|---|---|---|---|---|",
    ]
    assert [line.split(" | ")[0] for line in lines[2:]] == ["| `BrosModel`", "| `FunnelModel`", "| `GPT2Model`"]


def test_a_row_has_the_library_file_by_import_path_the_submodule_and_the_verified_fix_only():
    lines = skips_table([CACHED, BRANCHY])
    funnel = next(line for line in lines if "FunnelModel" in line)
    assert "| control-flow | `transformers/models/funnel/modeling_funnel.py:412` | `encoder.blocks.0` |" in funnel
    assert funnel.endswith("|  |")  # its fix was not verified: no fix in the table
    gpt2 = next(line for line in lines if "GPT2Model" in line)
    assert "| returns a DynamicCache object \\| which export cannot flatten |" in gpt2  # a | is escaped
    assert gpt2.endswith("| use_cache=False in its config, so that its output holds no DynamicCache |")


def test_a_model_error_has_its_status_for_a_category_and_the_reason_on_one_line():
    (row,) = skips_table([UNBUILT])[2:]
    assert "| `BrosModel` | fx | model-error |  |  | BrosModel: example_inputs failed:" in row
    reason = one_line(BRANCHY.text)
    assert reason.startswith("`if x.sum() > 0:` at modeling_funnel.py:412") and len(reason) <= 120
    assert reason.endswith("…")
    compiled = "Sam3Model.detr_decoder (Sam3DetrDecoder) is not compilable (torch.compile): `coords_h = torch.arange(0, h)`"
    assert one_line(compiled) == "`coords_h = torch.arange(0, h)`"  # the submodule has its own column


def test_the_merge_tool_prints_it_for_a_report_and_exits_as_the_run_would(tmp_path, capsys):
    document = {"version": REPORT_VERSION, "torch": "2.14.1", "results": [r.to_json() for r in (EXPORTED, CACHED)]}
    (tmp_path / "r.json").write_text(json.dumps(document))
    assert main([str(tmp_path / "r.json"), "--skips-table"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and out[2].startswith("| `GPT2Model` | export | unsupported |")
    document["results"] = [EXPORTED.to_json()]
    (tmp_path / "r.json").write_text(json.dumps(document))
    assert main([str(tmp_path / "r.json"), "--skips-table"]) == 0
    assert capsys.readouterr().out == "every check passed: no skips\n"


def test_an_onnx_check_s_subject_is_cut_off_its_reason_too():
    """The ONNX backend's words ("is not exportable to ONNX (torch.onnx, dynamo=True)",
    "exported to ONNX, but") leave only the reason, as the other backends' do."""
    untraceable = "Nest.levels.0.attn is not exportable to ONNX (torch.onnx, dynamo=True): `x = F.sdpa(q, k, v)` at nest.py:93"
    assert one_line(untraceable) == "`x = F.sdpa(q, k, v)` at nest.py:93"
    assert one_line("EfficientNet exported to ONNX, but the ONNX model's output differs") == "the ONNX model's output differs"
