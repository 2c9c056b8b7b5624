"""The ONNX backend (issue 40): ``torch.onnx.export(dynamo=True)`` of the exported program, run
in ONNX Runtime and compared with eager; each failure at its stage with the user's line. Each
finding is plain torch's (``test_each_onnx_finding_is_plain_torch_s``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from pytest_fxtrace import check_traceable
from pytest_fxtrace.backends.onnx import problem
from pytest_fxtrace.capture import recording
from pytest_fxtrace.entry import TestChecks
from pytest_fxtrace.options import resolve_options

PROBLEM = problem()
pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=str(PROBLEM))

import onnx_models as m  # noqa: E402  (tests/ is on sys.path: conftest)


def check(model, *inputs, **options):
    return check_traceable(model, inputs, backend="onnx", **options)


def test_a_clean_cnn_runs_in_onnx_runtime_and_matches_eager():
    report = check(m.CleanCNN(), torch.randn(2, 3, 8, 8))
    assert report.ok and report.status == "passed", report.describe()
    assert report.message.startswith("CleanCNN exported to ONNX")
    assert report.backend == "onnx"


def test_an_operator_onnx_lacks_is_missing_operator_at_its_statement():
    report = check(m.CumMax(), torch.randn(2, 4))
    assert (report.status, report.category) == ("untraceable", "missing-operator"), report.describe()
    assert report.location.line == m.line_of("CUMMAX")
    assert "ONNX has no function for the operator `aten.cummax.default` (torch.onnx's conversion, step 3/3)" in report.message
    assert "custom_translation_table={torch.ops.aten.cummax.default:" in report.describe()
    assert "\x1b[" not in report.describe()  # torch's terminal colours left out


def test_an_operator_onnx_lacks_in_a_nested_submodule_names_the_submodule():
    report = check(m.NestedCumMax(), torch.randn(2, 4))
    assert report.category == "missing-operator"
    assert (report.module, report.location.line) == ("block.1", m.line_of("CUMMAX"))
    assert report.message.startswith("NestedCumMax.block.1 is not exportable to ONNX")


def test_every_statement_that_calls_the_operator_is_named():
    report = check(m.TwiceCumMax(), torch.randn(2, 4))
    assert "called 2 times; every statement that calls it:" in report.message, report.message
    for marker in ("CUMMAX-A", "CUMMAX-B"):
        assert f"onnx_models.py:{m.line_of(marker)}" in report.message


def test_a_failure_at_the_export_stage_is_the_export_backend_s_diagnosis():
    report = check(m.DataBranch(), torch.randn(2, 4))
    assert (report.status, report.category) == ("untraceable", "control-flow"), report.describe()
    assert report.location.line == m.line_of("DATA-BRANCH")


def test_an_answer_onnx_runtime_gives_otherwise_is_a_mismatch():
    report = check(m.TopTies(), m.ties())
    assert report.status == "mismatch", report.describe()
    assert "the ONNX model (ONNX Runtime)" in report.message


def test_a_mismatch_names_the_first_diverging_onnx_node_its_statement_and_submodule():
    report = check(m.MidTies(), m.ties())
    assert report.status == "mismatch", report.describe()
    assert (report.module, report.module_type) == ("body.1.pick", "TiePicker"), report.describe()
    assert report.location.line == m.line_of("PICK-TIES")
    assert report.divergence.node == "node_topk__1 (TopK) -> getitem_1"
    shown = report.describe()
    assert "first diverges in body.1.pick (TiePicker) at node node_topk__1 (TopK) -> getitem_1" in shown, shown
    assert f"onnx_models.py:{m.line_of('PICK-TIES')}: return torch.topk(x.round(), 2, dim=1).indices" in shown
    # plain torch: its own verification names that value first, with these figures
    x = m.ties()
    program = torch.onnx.export(torch.export.export(m.MidTies(), (x,), strict=False), dynamo=True, verbose=False)
    infos = torch.onnx.verification.verify_onnx_program(program, (x,), compare_intermediates=True)
    first = next(info for info in infos if info.max_abs_diff > 0)
    assert first.name == "getitem_1" and infos[-1].max_abs_diff > 0  # the later values carry it
    assert (report.divergence.max_abs_error, report.divergence.max_rel_error) == (first.max_abs_diff, first.max_rel_diff)


def test_a_mismatch_at_the_top_level_is_the_root_s():
    report = check(m.TopTies(), m.ties())
    assert (report.module, report.module_type, report.location.line) == ("", "TopTies", m.line_of("TOP-TIES"))
    assert "first diverges in the root (TopTies) at node" in report.describe()


def test_structured_outputs_and_keyword_inputs_are_compared_as_eager_gives_them():
    report = check_traceable(m.Structured(), (torch.randn(2, 4),), {"scale": torch.tensor(2.0)}, backend="onnx")
    assert report.ok, report.describe()


def test_a_later_call_s_keywords_in_another_order_reach_their_own_inputs():
    checks = TestChecks(resolve_options(("test", {"backend": "onnx"})))
    model, (x, a, b) = m.Keywords(), torch.randn(3, 2, 4)
    with recording(checks.observer_for, checks.internal_error):
        model(x, a=a, b=b)
        model(x, b=b, a=a)
    (report,) = checks.finish()
    assert report.ok and report.calls == 2, report.describe()


def test_a_requested_batch_kept_and_one_pinned():
    kept = check(m.CleanCNN(), torch.randn(2, 3, 8, 8), dynamic="batch")
    assert kept.ok and [v.verdict for v in kept.dims] == ["dynamic"], kept.describe()
    assert [(s.size, s.result) for s in kept.dims[0].sizes] == [(1, "ok"), (3, "ok"), (4, "ok"), (5, "ok")]
    pinned = check(m.FixedBatch(), torch.randn(2, 4), dynamic="batch")
    assert pinned.status == "mismatch" and pinned.dims[0].verdict == "specialized", pinned.describe()
    assert pinned.dims[0].location.line == m.line_of("FIXED-BATCH")


def test_the_snapshot_text_is_the_onnx_graph_without_its_weights():
    from pytest_fxtrace.backends.base import Seams
    from pytest_fxtrace.backends.onnx.backend import OnnxBackend
    from pytest_fxtrace.backends.onnx.code import onnx_code

    model, x = m.CleanCNN(), torch.randn(2, 3, 8, 8)
    program = torch.onnx.export(torch.export.export(model, (x,), strict=False), dynamo=True, verbose=False)
    state = {"conv.weight", "conv.bias", "head.weight", "head.bias"}
    text = onnx_code(program.model, state)
    assert "inputs:\n  x: float[2, 3, 8, 8]\n" in text and "Conv(" in text
    assert "conv.weight: float[4, 3, 3, 3]\n" in text and "conv.bias: float[4]\n" in text
    assert onnx_code(program.model, state) == text
    assert OnnxBackend(Seams()).name == "onnx"


def test_each_onnx_finding_is_plain_torch_s():
    exported = torch.export.export(m.CumMax(), (torch.randn(2, 4),), strict=False)
    with pytest.raises(Exception, match="No ONNX function found for <OpOverload\\(op='aten.cummax'"):
        torch.onnx.export(exported, dynamo=True, verbose=False)
    ties = m.ties()
    program = torch.onnx.export(torch.export.export(m.TopTies(), (ties,), strict=False), dynamo=True, verbose=False)
    assert not torch.equal(program(ties)[0], m.TopTies()(ties))


TESTS = """
import pytest, torch
import onnx_models as m

@pytest.mark.traceable(backend="onnx")
def test_clean():
    m.CleanCNN()(torch.randn(2, 3, 8, 8))

@pytest.mark.traceable(backend="onnx")
def test_cummax():
    m.NestedCumMax()(torch.randn(2, 4))

@pytest.mark.traceable(backend="onnx", onnx_translations={"aten.cummax.default": "pytest_fxtrace.backends.onnx.translations:cummax"})
def test_cummax_translated():
    m.NestedCumMax()(torch.randn(2, 4))
"""


def test_the_marker_checks_with_onnx_and_the_record_says_so(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(onnx_models=(Path(__file__).parent / "onnx_models.py").read_text(), test_onnx_user=TESTS)
    pytester.syspathinsert()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:xdist", "--fx-report=fx.json")
    assert (result.parseoutcomes().get("failed"), result.parseoutcomes().get("passed")) == (1, 2), result.stdout.str()
    result.stdout.fnmatch_lines([f"*NestedCumMax.block.1 is not exportable to ONNX*onnx_models.py:{m.line_of('CUMMAX')}*"])
    records = {r["nodeid"].rpartition("::")[2]: r for r in json.loads((pytester.path / "fx.json").read_text())["results"]}
    assert (records["test_cummax"]["backend"], records["test_cummax"]["category"]) == ("onnx", "missing-operator")
    assert records["test_cummax"]["operator"] == "aten.cummax.default"
    assert records["test_clean"]["status"] == "passed" and "operator" not in records["test_clean"]
    table = pytester.run(sys.executable, "-m", "pytest_fxtrace.merge", "fx.json", "--operators-table")
    assert records["test_cummax_translated"]["status"] == "passed"  # the marker's translation
    table.stdout.fnmatch_lines(["| onnx | 3 | 2 | `missing-operator` 1 |", "| `aten.cummax.default` | onnx | 1 | `*NestedCumMax` |"])


SNAPSHOT_MODEL = """
import torch, torch.nn as nn

class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x).relu() * 2.0
"""

SNAPSHOT_TESTS = """
import pytest, torch
import snap_model

@pytest.mark.traceable(backend="onnx", snapshot=True)
def test_snap():
    snap_model.Scaled()(torch.randn(2, 4))
"""


def test_an_onnx_snapshot_is_missing_then_written_then_held_and_a_changed_constant_is_a_diff(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(snap_model=SNAPSHOT_MODEL, test_m=SNAPSHOT_TESTS)
    pytester.syspathinsert()

    def run(*args: str) -> pytest.RunResult:
        return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:xdist", *args)

    missing = run()
    missing.assert_outcomes(failed=1)
    missing.stdout.fnmatch_lines(
        [
            "*Scaled exported to ONNX and matched eager, but has no golden snapshot*test_snap.Scaled.onnx.txt*",
            "*create it with: pytest --fx-snapshot-update test_m.py::test_snap*",
        ]
    )
    run("--fx-snapshot-update").assert_outcomes(passed=1)
    (golden,) = (pytester.path / "fx_snapshots" / "test_m").iterdir()
    assert golden.name == "test_snap.Scaled.onnx.txt"
    text = golden.read_text()
    assert text.startswith("# pytest-fxtrace snapshot of an ONNX model's graph (the lines after the blank line)\n")
    assert "  lin.weight: float[4, 4]\n  lin.bias: float[4]\n" in text and "Gemm(x, lin.weight, lin.bias)" in text
    run().assert_outcomes(passed=1)  # new random weights, the same text
    pytester.makepyfile(snap_model=SNAPSHOT_MODEL.replace("* 2.0", "* 3.0"))
    changed = run()
    changed.assert_outcomes(failed=1)
    changed.stdout.fnmatch_lines(
        [
            "*the generated code differs from the golden snapshot*test_snap.Scaled.onnx.txt*",
            "*-  val_*: float[] = 2.0",
            "*+  val_*: float[] = 3.0",
            "*accept the change with: pytest --fx-snapshot-update test_m.py::test_snap*",
        ]
    )


def test_a_requested_dimension_the_onnx_graph_fixes_is_found_in_its_inputs():
    """pytorch#157621's case (a dynamic batch exported as a fixed one): read off the ONNX
    graph's inputs, a symbol where the program keeps one, a size where it does not."""
    from pytest_fxtrace.backends.onnx.backend import fixed_input_dims
    from pytest_fxtrace.dims import DimSpec

    x = torch.randn(2, 3, 8, 8)
    batch = [DimSpec("x", 0, "batch")]
    static = torch.onnx.export(torch.export.export(m.CleanCNN(), (x,), strict=False), dynamo=True, verbose=False)
    assert fixed_input_dims(static.model_proto, batch) == {("x", 0): 2}
    auto = {"x": {0: torch.export.Dim.AUTO}}
    dynamic = torch.onnx.export(torch.export.export(m.CleanCNN(), (x,), dynamic_shapes=auto, strict=False), dynamo=True, verbose=False)
    assert fixed_input_dims(dynamic.model_proto, batch) == {}


def test_a_batch_the_conversion_fixes_is_specialized_though_the_program_keeps_it(monkeypatch):
    """The conversion fixing a dimension the exported program keeps symbolic fails the check,
    the size read off the ONNX graph's input (here the conversion is made to drop the symbol)."""

    def fixing(model):
        model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 2  # as #157621 did

    _converting_to(fixing, monkeypatch)
    report = check(m.CleanCNN(), torch.randn(2, 3, 8, 8), dynamic="batch")
    assert report.status == "mismatch" and report.dims[0].verdict == "specialized", report.describe()
    assert report.dims[0].value == 2
    assert "specialized to 2 (the ONNX graph's input has this dimension fixed" in report.describe()


def _converting_to(break_model, monkeypatch):
    """The check's conversion as torch's, then ``break_model(onnx.ModelProto)`` on its model."""
    import onnx
    import onnx_ir

    from pytest_fxtrace.backends.onnx import backend

    real = backend.onnx_export

    def converting(*args, **kwargs):
        program = real(*args, **kwargs)
        model = onnx.ModelProto()
        model.CopyFrom(program.model_proto)
        break_model(model)
        return type(program)(onnx_ir.from_proto(model), program.exported_program)

    monkeypatch.setattr(backend, "onnx_export", converting)


def _relu(model):
    return next(node for node in model.graph.node if node.op_type == "Relu")


def test_a_model_the_onnx_checker_refuses_names_the_node_its_op_and_the_statement(monkeypatch):
    """A converted model that breaks the ONNX spec (here an attribute Relu does not have) is
    refused by the checker, as runtimes that read the spec would: the node, its op type and
    the user's statement the exporter noted on it."""
    import onnx

    _converting_to(lambda model: _relu(model).attribute.append(onnx.helper.make_attribute("bogus", 1)), monkeypatch)
    report = check(m.CleanCNN(), torch.randn(2, 3, 8, 8))
    assert (report.status, report.category) == ("untraceable", "other"), report.describe()
    assert "the ONNX checker refuses the ONNX model at node node_relu (Relu): Unrecognized attribute: bogus" in report.message
    assert report.location.line == m.line_of("CLEAN-RELU")


def test_a_model_onnx_runtime_refuses_names_the_node_its_op_and_the_statement(monkeypatch):
    """A model the checker passes but ONNX Runtime cannot load (an operator of a domain it
    has no kernel for): ONNX Runtime's refusal, at the node and the statement."""

    def unknown_domain(model):
        _relu(model).domain = "com.example"
        model.opset_import.add(domain="com.example", version=1)

    _converting_to(unknown_domain, monkeypatch)
    report = check(m.CleanCNN(), torch.randn(2, 3, 8, 8))
    assert (report.status, report.category) == ("untraceable", "other"), report.describe()
    assert report.message.startswith("CleanCNN is not exportable to ONNX"), report.message
    assert "ONNX Runtime refuses the ONNX model at node node_relu (Relu)" in report.message
    assert report.location.line == m.line_of("CLEAN-RELU")


def _wide_cancel():
    torch.manual_seed(0)
    return m.WideCancel().eval(), torch.randn(2, 3, 8, 8)


def test_float32_rounding_of_the_output_s_scale_passes_where_assert_close_s_default_fails():
    """ONNX Runtime's fused Conv+BatchNorm rounds otherwise than torch: at the small values
    the wide ones cancel to, the difference is over assert_close's atol, yet a few float32
    epsilons of the output's scale -- and torch's own float32 answer is as far from the exact
    (float64) one: rounding, not a wrong answer. A user's atol is kept as given."""
    import copy

    from pytest_fxtrace.compare import compare_outputs

    model, x = _wide_cancel()
    with torch.no_grad():
        eager = model(x)
        exact = copy.deepcopy(model).double()(x.double())
    program = torch.onnx.export(torch.export.export(model, (x,), strict=False), dynamo=True, verbose=False)
    onnx_answer = program(x)[0]
    assert compare_outputs(onnx_answer, eager) is not None  # plain assert_close calls it a mismatch
    eps_of_scale = torch.finfo(torch.float32).eps * float(exact.abs().max())
    assert float((onnx_answer.double() - exact).abs().max()) < 8 * eps_of_scale
    assert float((eager.double() - exact).abs().max()) < 8 * eps_of_scale

    report = check(model, x)
    assert report.status == "passed", report.describe()
    strict = check(model, x, atol=1e-5)
    assert strict.status == "mismatch", strict.describe()
    assert "up to 1e-05 allowed" in strict.describe()


def test_the_scale_tolerance_is_the_onnx_backend_s_alone():
    """The other backends keep assert_close's defaults: the same answers, compared as the
    export backend compares, differ."""
    from pytest_fxtrace.backends.export.backend import ExportBackend
    from pytest_fxtrace.backends.onnx.backend import OnnxBackend
    from pytest_fxtrace.compare import compare_outputs

    eager = torch.tensor([1000.0, 0.001])
    rounded = eager + torch.tensor([0.0, 1.2e-4])  # one float32 epsilon of 1000
    assert compare_outputs(rounded, eager, defaults=ExportBackend.tolerances) is not None
    assert compare_outputs(rounded, eager, defaults=OnnxBackend.tolerances) is None
    assert compare_outputs(eager + torch.tensor([0.0, 0.1]), eager, defaults=OnnxBackend.tolerances) is not None


CUMMAX = {"aten.cummax.default": "pytest_fxtrace.backends.onnx.translations:cummax"}


def test_a_missing_operator_s_translation_is_verified_by_exporting_again_and_running_it():
    """The translation this package has for the operator, exported again in the table and run
    in ONNX Runtime on the recorded call, matches eager: a verified fix, the marker option
    that applies it and the table entry for the user's own export."""
    report = check(m.NestedCumMax(), torch.randn(2, 4))
    assert report.category == "missing-operator"
    assert report.suggestion.verified and report.suggestion.options == {"onnx_translations": CUMMAX}, report.describe()
    text = report.describe()
    assert "fix (verified): @pytest.mark.traceable(onnx_translations={'aten.cummax.default': " in text
    assert "custom_translation_table={torch.ops.aten.cummax.default: cummax}" in text
    applied = check(m.NestedCumMax(), torch.randn(2, 4), onnx_translations=CUMMAX)
    assert applied.status == "passed", applied.describe()


def test_the_verified_translation_is_plain_torch_s():
    """The fix without the plugin: torch.onnx.export with the table, run in ONNX Runtime,
    gives eager's values and indices (ties included: torch's last index)."""
    from pytest_fxtrace.backends.onnx.translations import cummax

    model, x = m.CumMax(), torch.tensor([[1.0, 3.0, 2.0, 3.0], [4.0, 4.0, 5.0, 1.0]])
    program = torch.onnx.export(
        torch.export.export(model, (x,), strict=False), dynamo=True, verbose=False,
        custom_translation_table={torch.ops.aten.cummax.default: cummax},
    )  # fmt: skip
    assert torch.equal(program(x)[0], model(x))
    values, indices = torch.onnx.export(
        torch.export.export(m.TwoCumMax(), (x,), strict=False), dynamo=True, verbose=False,
        custom_translation_table={torch.ops.aten.cummax.default: cummax},
    )(x)  # fmt: skip
    assert torch.equal(values, torch.cummax(x, 1).values) and torch.equal(indices, torch.cummax(x, 1).indices)


def test_a_translation_that_answers_otherwise_on_the_recorded_call_is_not_shown_as_verified():
    report = check(m.KthTies(), torch.tensor([[2.0, 2.0, 1.0, 1.0, 5.0]]))  # the 2nd smallest: 1, twice
    assert report.category == "missing-operator" and report.operator == "aten.kthvalue.default"
    assert not report.suggestion.verified, report.describe()
    assert "tried the translation pytest_fxtrace.backends.onnx.translations:kthvalue:" in report.suggestion.text
    clean = check(m.KthTies(), torch.tensor([[1.0, 3.0, 2.0, 0.0]]))  # no tie: it verifies
    assert clean.suggestion.verified, clean.describe()


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ({"cummax": "pytest_fxtrace.backends.onnx.translations:cummax"}, "'cummax' is not an operator as torch names it"),
        ("aten.cummax.default", "is not operator=module:function"),
        ({"aten.cummax.default": "no_such_module_x:cummax"}, "no_such_module_x"),
        ({"aten.nosuchop.default": "pytest_fxtrace.backends.onnx.translations:cummax"}, "torch has no operator aten.nosuchop.default"),
    ],
)
def test_a_wrong_translation_option_is_one_usage_error_naming_it(value, said):
    from pytest_fxtrace.options import OptionError

    with pytest.raises(OptionError, match="onnx_translations") as raised:
        check(m.CumMax(), torch.randn(2, 4), onnx_translations=value)
    assert said in str(raised.value)


def test_an_operator_only_a_decomposition_calls_is_found_at_the_statement_it_came_from():
    report = check(m.CumProd(), torch.randn(2, 4))
    assert (report.category, report.operator) == ("missing-operator", "prims.prod.default"), report.describe()
    assert "called 1 time by the decomposition of `aten.cumprod.default`" in report.message
    assert report.location.line == m.line_of("CUMPROD")


SDPA = {"aten.scaled_dot_product_attention.default": "pytest_fxtrace.backends.onnx.translations:scaled_dot_product_attention"}


def test_a_call_torchlib_s_translation_refuses_gets_this_package_s_translation_verified():
    """torchlib converts scaled_dot_product_attention for 4-D query, key and value only (timm's
    hiera, nest and twins call it on 3-D ones): the failure is at the user's statement, and the
    translation for any rank, exported again and run in ONNX Runtime, matches eager."""
    report = check(m.Attention3D(), torch.randn(2, 5, 8))
    assert (report.status, report.category) == ("untraceable", "other"), report.describe()
    assert "at node scaled_dot_product_attention: AssertionError: only 4D query, key, and value are supported" in report.message
    assert report.location.line == m.line_of("SDPA-3D")
    assert report.suggestion.verified and report.suggestion.options == {"onnx_translations": SDPA}, report.describe()
    assert check(m.Attention3D(), torch.randn(2, 5, 8), onnx_translations=SDPA).ok


@pytest.mark.parametrize("kind", ["plain", "causal", "boolean-mask"])
def test_the_attention_translation_is_plain_torch_s(kind):
    """torch.onnx.export with the translation in its table, run in ONNX Runtime, gives
    eager's attention on 3-D inputs, causal and with a boolean mask."""
    from pytest_fxtrace.backends.onnx.translations import scaled_dot_product_attention

    F = torch.nn.functional
    calls = {
        "plain": lambda q, k, v, mask: F.scaled_dot_product_attention(q, k, v),
        "causal": lambda q, k, v, mask: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "boolean-mask": lambda q, k, v, mask: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
    }

    class Attend(torch.nn.Module):
        def forward(self, q, k, v, mask):
            return calls[kind](q, k, v, mask)

    torch.manual_seed(0)
    inputs = (*torch.randn(3, 2, 5, 8), torch.rand(5, 5) > 0.3)
    program = torch.onnx.export(
        torch.export.export(Attend(), inputs, strict=False), dynamo=True, verbose=False,
        custom_translation_table={torch.ops.aten.scaled_dot_product_attention.default: scaled_dot_product_attention},
    )  # fmt: skip
    torch.testing.assert_close(program(*inputs)[0], Attend()(*inputs))


def test_the_check_s_conversion_is_torch_onnx_export_s_and_its_translations_stay_its_own():
    """The conversion with torchlib's registry built once (``_compat.onnx_export``) gives the
    graph torch.onnx.export gives, and one conversion's translations do not reach the next."""
    from pytest_fxtrace.backends.onnx._compat import onnx_export
    from pytest_fxtrace.backends.onnx.translations import cummax

    x = torch.randn(2, 3, 8, 8)
    program = torch.export.export(m.CleanCNN(), (x,), strict=False)
    ours, torch_s = onnx_export(program, {}), torch.onnx.export(program, dynamo=True, verbose=False)
    assert [n.op_type for n in ours.model_proto.graph.node] == [n.op_type for n in torch_s.model_proto.graph.node]
    cummax_program = torch.export.export(m.CumMax(), (torch.randn(2, 4),), strict=False)
    assert onnx_export(cummax_program, {torch.ops.aten.cummax.default: cummax}) is not None
    with pytest.raises(Exception, match="aten.cummax"):
        onnx_export(cummax_program, {})


def test_an_onnx_check_leaves_the_model_and_the_rng_as_they_were():
    """Export, conversion, the checker, the session and a translation's verification touch
    neither the user's tensors nor torch's random stream."""
    model = m.NestedCumMax()
    model.block.append(torch.nn.BatchNorm1d(4))
    model.eval()  # the eager call itself then writes nothing either
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(2, 4)
    rng = torch.get_rng_state()
    report = check(model, x)
    assert report.category == "missing-operator" and report.suggestion.verified, report.describe()
    assert torch.equal(torch.get_rng_state(), rng)
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
