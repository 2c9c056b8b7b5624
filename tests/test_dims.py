"""The dynamic-shape gate (issue 39): dimensions asked for by name or preset, each judged
after the program and eager ran at sizes no recorded call had. Every finding here is the
plain torch one (tests/test_dims.py::test_each_finding_is_plain_torch_s re-runs them)."""

from __future__ import annotations

import pytest
import torch

from pytest_fxtrace import _compat, check_traceable
from pytest_fxtrace.dims import (
    DimRequest,
    DimSpec,
    DimVerdict,
    Input,
    parse_request,
    preset_dims,
    probe_sizes,
)
from pytest_fxtrace.options import OptionError

pytestmark = pytest.mark.skipif(_compat.export_problem() is not None, reason=str(_compat.export_problem()))

import dim_models as m  # noqa: E402  (tests/ is on sys.path: conftest)


def check(model, *inputs, dynamic):
    return check_traceable(model, inputs, backend="export", dynamic=dynamic)


def only(report) -> DimVerdict:
    assert report.dims is not None and len(report.dims) == 1, report.describe()
    return report.dims[0]


# -- the option ------------------------------------------------------------------------------


def test_dimensions_are_asked_for_by_name_or_by_preset():
    assert parse_request({"x": {0: "batch"}}, "dynamic") == DimRequest(specs=(DimSpec("x", 0, "batch"),))
    assert parse_request({"ids": ["batch", None, "seq"]}, "dynamic").specs == (
        DimSpec("ids", 0, "batch"), DimSpec("ids", 2, "seq")
    )  # fmt: skip
    assert parse_request("batch, seq", "--fx-dynamic").presets == ("batch", "seq")
    seq = torch.export.Dim("seq", min=4, max=32)
    assert parse_request({"x": {1: seq}}, "dynamic").specs == (DimSpec("x", 1, "seq", 4, 32),)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("batch,sequence", "unknown preset 'sequence'"),
        ({"x": {-1: "batch"}}, "a whole number of at least 0"),
        ({"x": {0: 3}}, "expected a name ('batch') or a torch.export.Dim"),
        ({"x": "batch"}, "takes a dict of dimension -> name"),
    ],
)
def test_a_malformed_request_is_one_usage_error_naming_it(value, words):
    with pytest.raises(OptionError, match="dynamic") as caught:
        check(m.CleanConv(), torch.randn(2, 3, 8, 8), dynamic=value)
    assert words in str(caught.value)


def test_an_argument_or_dimension_the_model_lacks_is_a_usage_error():
    with pytest.raises(OptionError, match=r"forward takes no argument 'images' \(its arguments: x\)"):
        check(m.CleanConv(), torch.randn(2, 3, 8, 8), dynamic={"images": {0: "batch"}})
    with pytest.raises(OptionError, match=r"'x' has 4 dimensions \(shape \[2, 3, 8, 8\]\), so no dimension 4"):
        check(m.CleanConv(), torch.randn(2, 3, 8, 8), dynamic={"x": {4: "batch"}})
    with pytest.raises(OptionError, match="no input has a seq dimension"):
        check(m.CleanConv(), torch.randn(2, 3, 8, 8), dynamic="seq")


def test_presets_map_to_dimensions_by_each_input_s_layout():
    image = Input("x", (2, 3, 8, 8), "float32")
    ids, mask = Input("input_ids", (2, 6), "int64"), Input("attention_mask", (2, 6), "int64")
    assert preset_dims(["batch", "spatial"], [image]) == [
        DimSpec("x", 0, "batch"), DimSpec("x", 2, "height"), DimSpec("x", 3, "width")
    ]  # fmt: skip
    assert preset_dims(["batch", "seq"], [ids, mask]) == [
        DimSpec("input_ids", 0, "batch"), DimSpec("attention_mask", 0, "batch"),
        DimSpec("input_ids", 1, "seq"), DimSpec("attention_mask", 1, "seq"),
    ]  # fmt: skip


def test_unseen_sizes_are_one_an_odd_an_even_and_a_larger_one_inside_the_range():
    assert probe_sizes(8) == [1, 9, 10, 16]
    assert probe_sizes(7) == [1, 8, 9, 14]
    assert probe_sizes(8, high=12) == [1, 9, 10, 12]
    assert probe_sizes(8, low=4) == [4, 9, 10, 16]


# -- the verdicts ----------------------------------------------------------------------------


def test_a_fixed_size_tensor_made_in_forward_pins_the_dimension_at_its_line():
    report = check(m.FixedTensor(), torch.randn(8, 16), dynamic={"x": {0: "batch"}})
    assert (report.status, report.category) == ("mismatch", "specialization")
    verdict = only(report)
    assert (verdict.verdict, verdict.value, verdict.location.line) == ("specialized", 8, m.line_of("FIXED-TENSOR"))
    assert report.location.line == m.line_of("FIXED-TENSOR")
    assert report.message.startswith("FixedTensor exported, but the dimension asked to stay dynamic does not: ")
    assert "`x` dim 0 (batch): specialized to 8 by `return x + torch.ones(8, 16)`" in report.describe()


def test_a_fixed_slice_pins_the_sequence():
    verdict = only(check(m.FixedSlice(), torch.randn(2, 16, 16), dynamic={"x": {1: "seq"}}))
    assert (verdict.verdict, verdict.value, verdict.location.line) == ("specialized", 16, m.line_of("FIXED-SLICE"))


def test_an_int_of_a_size_pins_the_batch_though_eager_runs_every_size():
    verdict = only(check(m.IntOfShape(), torch.randn(8, 16), dynamic={"x": {0: "batch"}}))
    assert (verdict.verdict, verdict.value, verdict.location.line) == ("specialized", 8, m.line_of("INT-SHAPE"))
    assert {s.result for s in verdict.sizes} == {"refused"}  # eager runs them all


def test_a_literal_view_leaves_a_program_that_refuses_sizes_eager_runs():
    report = check(m.LiteralView(), torch.randn(8, 16), dynamic={"x": {0: "batch"}})
    verdict = only(report)
    assert verdict.verdict == "unsound" and report.status == "mismatch"
    assert [(s.size, s.result) for s in verdict.sizes] == [(1, "refused"), (9, "refused"), (10, "refused"), (16, "ok")]
    assert verdict.location.line == m.line_of("LITERAL-VIEW")
    assert "% 4 == 0" in verdict.guard


def test_a_branch_on_a_batch_of_one_is_a_program_that_answers_otherwise_at_one():
    verdict = only(check(m.BatchOneBranch(), torch.randn(8, 16), dynamic={"x": {0: "batch"}}))
    assert verdict.verdict == "unsound"
    assert [(s.size, s.result) for s in verdict.sizes][0] == (1, "differs")
    assert verdict.location.line == m.line_of("BATCH-ONE")


def test_a_table_s_length_constrains_the_sequence_and_passes():
    report = check(m.TableLength(), torch.randn(2, 8, 16), dynamic={"x": {1: "seq"}})
    verdict = only(report)
    assert report.ok, report.describe()
    assert (verdict.verdict, verdict.range, verdict.location.line) == ("constrained", (2, 32), m.line_of("TABLE-LENGTH"))


def test_divisibility_eager_keeps_too_is_a_constraint_not_a_failure():
    report = check(m.Divisible(), torch.randn(2, 8, 16), dynamic={"x": {1: "seq"}})
    verdict = only(report)
    assert report.ok, report.describe()
    assert (verdict.verdict, verdict.multiple_of) == ("constrained", 4)
    assert [(s.size, s.result) for s in verdict.sizes] == [(1, "model-limit"), (9, "model-limit"), (10, "model-limit"), (16, "ok")]


def test_a_clean_conv_net_keeps_batch_and_image_size_dynamic_at_every_size():
    report = check(m.CleanConv(), torch.randn(2, 3, 8, 8), dynamic="batch,spatial")
    assert report.ok, report.describe()
    assert [(v.spec.name, v.verdict) for v in report.dims] == [("batch", "dynamic"), ("height", "dynamic"), ("width", "dynamic")]
    assert all(s.result == "ok" for v in report.dims for s in v.sizes)


def test_a_clean_sequence_model_keeps_batch_and_sequence_dynamic():
    report = check(m.CleanSequence(), *m.tokens(), dynamic="batch,seq")
    assert report.ok, report.describe()
    assert {(v.spec.input, v.spec.name, v.verdict) for v in report.dims} == {
        ("input_ids", "batch", "dynamic"), ("attention_mask", "batch", "dynamic"),
        ("input_ids", "seq", "dynamic"), ("attention_mask", "seq", "dynamic"),
    }  # fmt: skip


def test_a_recorded_batch_of_one_is_exported_at_two_and_one_is_still_tried():
    report = check(m.CleanConv(), torch.randn(1, 3, 8, 8), dynamic={"x": {0: "batch"}})
    verdict = only(report)
    assert report.ok and verdict.verdict == "dynamic", report.describe()
    assert [s.size for s in verdict.sizes] == [1, 3, 4, 5]  # around the example export ran at (2)


def test_a_verdict_reads_back_from_its_json_form():
    verdict = only(check(m.FixedTensor(), torch.randn(8, 16), dynamic={"x": {0: "batch"}}))
    data = verdict.to_json()
    assert data["verdict"] == "specialized" and data["line"] == m.line_of("FIXED-TENSOR")
    assert list(data) == ["input", "dim", "name", "verdict", "value", "range", "multiple_of", "path", "line", "statement", "sizes"]
    again = DimVerdict.from_json(data)
    assert again.to_json() == data


def test_the_check_leaves_the_model_and_the_rng_as_it_found_them():
    model = m.CleanConv()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(3)
    expected = torch.rand(1)
    torch.manual_seed(3)
    check(model, torch.randn(2, 3, 8, 8), dynamic="batch,spatial")
    torch.manual_seed(3)  # the draws of the check do not move the user's stream
    assert torch.equal(torch.rand(1), expected)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_each_finding_is_plain_torch_s():
    """What the gate says, reproduced without it: the program of ``Dim.AUTO`` refuses
    batch 9 of the literal view and answers (1, 16) against eager's (16,) at batch 1."""
    auto = torch.export.Dim.AUTO
    view = torch.export.export(m.LiteralView(), (torch.randn(8, 16),), dynamic_shapes={"x": {0: auto}}, strict=False)
    with pytest.raises(Exception, match="% 4 == 0"):
        view.module()(torch.randn(9, 16))
    assert m.LiteralView()(torch.randn(9, 16)).shape == (36,)  # eager runs it
    one = torch.export.export(m.BatchOneBranch(), (torch.randn(8, 16),), dynamic_shapes={"x": {0: auto}}, strict=False)
    x = torch.randn(1, 16)
    assert one.module()(x).shape == (1, 16) and m.BatchOneBranch()(x).shape == (16,)


@pytest.mark.parametrize(
    ("model", "x", "dims", "fix"),
    [
        (m.LiteralView, (8, 16), {0: "batch"}, "write the size from the input (`x.shape[0]`, or -1"),
        (m.FixedTensor, (8, 16), {0: "batch"}, "make the tensor from the input's size: `x.new_ones(x.shape)`"),
        (m.FixedSlice, (2, 16, 16), {1: "seq"}, "slice by the input's size (`self.pos[:, : x.shape[1]]`)"),
        (m.IntOfShape, (8, 16), {0: "batch"}, "keep the size symbolic"),
        (m.BatchOneBranch, (8, 16), {0: "batch"}, "no branch on a size"),
    ],
    ids=lambda v: v.__name__ if isinstance(v, type) else None,
)
def test_a_pinned_or_broken_dimension_gets_the_change_in_code_for_its_statement(model, x, dims, fix):
    report = check(model(), torch.randn(*x), dynamic={"x": dims})
    assert report.code_fix is not None and report.code_fix.startswith(fix), report.code_fix
    if model is m.IntOfShape:  # a verified patch of its statement stands in the advice's place
        assert "fix (verified patch)" in report.describe() and "+        n = x.shape[0]  # INT-SHAPE" in report.describe()
    else:
        assert f"fix in code: {fix}" in report.describe()


def test_a_call_by_keywords_is_resized_and_replayed_by_keywords():
    """A program exported from keyword inputs takes keywords: the unseen sizes are passed as the
    recorded call passed them (transformers' models are called so)."""
    ids, mask = m.tokens()
    report = check_traceable(
        m.CleanSequence(), (), {"input_ids": ids, "attention_mask": mask}, backend="export", dynamic="batch,seq"
    )
    assert report.ok, report.describe()
    assert all(s.result == "ok" for v in report.dims for s in v.sizes), report.describe()


def test_a_constrained_dimension_is_spelled_as_the_dim_torch_takes_and_exported_so():
    table = only(check(m.TableLength(), torch.randn(2, 8, 16), dynamic={"x": {1: "seq"}}))
    assert (table.as_dim, table.as_dim_verified) == ('Dim("seq", min=2, max=32)', True)
    assert 'as a Dim: Dim("seq", min=2, max=32) (exported so: verified)' in table.line()
    heads = only(check(m.Divisible(), torch.randn(2, 8, 16), dynamic={"x": {1: "seq"}}))
    assert (heads.as_dim, heads.as_dim_verified) == ('4 * Dim("_seq", min=1)', True)
    # plain torch: the bare Dim a user would write is refused, the spelled one exported
    Dim = torch.export.Dim
    with pytest.raises(Exception, match="seq"):
        torch.export.export(m.TableLength(), (torch.randn(2, 8, 16),), dynamic_shapes={"x": {1: Dim("seq")}})
    torch.export.export(m.TableLength(), (torch.randn(2, 8, 16),), dynamic_shapes={"x": {1: Dim("seq", min=2, max=32)}})


def test_a_spelled_dim_export_refuses_is_shown_not_verified():
    import dataclasses

    from pytest_fxtrace.backends.export.probes import spelled_as_dims

    report = check(m.TableLength(), torch.randn(2, 8, 16), dynamic={"x": {1: "seq"}})
    wrong = dataclasses.replace(only(report), range=(2, 64))  # past the table: export refuses it

    class Context:
        class call:  # noqa: N801  (a stand-in for CheckContext.call)
            state = None

    (again,) = spelled_as_dims([wrong], m.TableLength(), (torch.randn(2, 8, 16),), {}, Context())
    assert (again.as_dim, again.as_dim_verified) == ('Dim("seq", min=2, max=64)', False)


def test_a_recorded_call_the_program_refuses_is_judged_by_its_dimension_not_by_a_static_fix():
    """Recorded at batch 1, exported at 2 (export would fix 1): the program refuses the recorded
    call. The dimension's verdict says so, and no `dynamic=False` fix contradicts the request."""
    report = check(m.PairView(), torch.randn(1, 16), dynamic={"x": {0: "batch"}})
    verdict = only(report)
    assert report.status == "mismatch" and verdict.verdict in ("specialized", "unsound"), report.describe()
    assert report.suggestion is None or "dynamic=False" not in report.suggestion.text
    assert verdict.location is not None and verdict.location.line == m.line_of("PAIR-VIEW")


def test_a_statement_of_no_known_pattern_gets_the_fix_that_holds_for_any_never_dynamic_false():
    from pytest_fxtrace.dims import SPECIALIZED, dim_code_fix
    from pytest_fxtrace.types import Location

    where = Location("raft.py", 492, "fmaps = self.feature_encoder(torch.cat([image1, image2], dim=0))")
    fix = dim_code_fix(DimVerdict(DimSpec("image1", 0, "batch"), SPECIALIZED, location=where))
    assert fix.startswith("write the statement so it holds at every size of the dimension")
    assert "dynamic=False" not in fix and fix.endswith("(`fmaps = self.feature_encoder(torch.cat([image1, image2], dim=0))`)")


def test_a_large_multiple_at_a_long_example_is_found():
    verdict = only(check(m.Patches(), torch.randn(1, 512, 4), dynamic={"x": {1: "seq"}}))
    assert (verdict.verdict, verdict.multiple_of) == ("constrained", 128), verdict.line()


def test_a_guard_on_two_inputs_of_one_name_is_found_with_both_at_the_size():
    """RAFT's pattern: the guard names both batches, so the statement that added it is found
    only with both at the size tried (each alone named the first decided condition instead)."""
    report = check(m.PairedChunk(), torch.randn(2, 4), torch.randn(2, 4), dynamic="batch")
    assert [(v.spec.input, v.verdict) for v in report.dims] == [("a", "unsound"), ("b", "unsound")], report.describe()
    assert {v.location.line for v in report.dims} == {m.line_of("PAIRED-CHUNK")}
    assert all([(s.size, s.result) for s in v.sizes][0] == (1, "refused") for v in report.dims)
