"""The dynamic-shape gate on torch.compile (issue 39, item 4): the requested dimensions marked
with ``torch._dynamo.mark_dynamic`` on the recorded inputs and on the sizes tried, a
constraint violation a finding at the user's line, recompiles across the sizes counted and
explained. Each finding is plain torch's (``test_each_compile_finding_is_plain_torch_s``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pytest_fxtrace import _compat, check_traceable
from pytest_fxtrace.dims import RECOMPILED, DimSpec, DimVerdict, SizeResult
from pytest_fxtrace.options import OptionError

pytestmark = pytest.mark.skipif(_compat.compile_problem() is not None, reason=str(_compat.compile_problem()))

import dim_models as m  # noqa: E402  (tests/ is on sys.path: conftest)


def check(model, *inputs, dynamic):
    return check_traceable(model, inputs, backend="compile", dynamic=dynamic)


def only(report) -> DimVerdict:
    assert report.dims is not None and len(report.dims) == 1, report.describe()
    return report.dims[0]


def test_a_fixed_size_tensor_made_in_forward_is_dynamo_s_constraint_violation_at_its_line():
    report = check(m.FixedTensor(), torch.randn(8, 16), dynamic={"x": {0: "batch"}})
    assert (report.status, report.category) == ("mismatch", "specialization")
    verdict = only(report)
    assert (verdict.verdict, verdict.value, verdict.location.line) == ("specialized", 8, m.line_of("FIXED-TENSOR"))
    assert report.message.startswith("FixedTensor compiled, but the dimension asked to stay dynamic does not: ")
    assert "`x` dim 0 (batch): specialized to 8 by `return x + torch.ones(8, 16)`" in report.describe()
    assert report.code_fix.startswith("make the tensor from the input's size: `x.new_ones(x.shape)`")


def test_a_fixed_slice_pins_the_sequence_and_the_rest_is_still_judged():
    report = check(m.FixedSlice(), torch.randn(2, 16, 16), dynamic={"x": {0: "batch", 1: "seq"}})
    verdicts = {v.spec.name: v for v in report.dims}
    assert (verdicts["seq"].verdict, verdicts["seq"].value) == ("specialized", 16)
    assert verdicts["seq"].location.line == m.line_of("FIXED-SLICE")
    # compiled again without the sequence's mark: the batch is judged at its own sizes
    assert verdicts["batch"].verdict == "dynamic", verdicts["batch"].line()
    assert [(s.size, s.result) for s in verdicts["batch"].sizes] == [(1, RECOMPILED), (3, "ok"), (4, "ok"), (5, "ok")]


def test_a_view_of_a_literal_size_recorded_at_one_is_pinned_where_the_size_is_tried():
    """Recorded at batch 1 (left unmarked: Dynamo specializes 0 and 1); at batch 2, marked,
    Dynamo refuses the compile: ``view(2, -1)`` fixes the batch."""
    verdict = only(check(m.PairView(), torch.randn(1, 16), dynamic={"x": {0: "batch"}}))
    assert (verdict.verdict, verdict.value, verdict.location.line) == ("specialized", 2, m.line_of("PAIR-VIEW"))


def test_a_table_s_length_constrains_the_sequence_by_the_compiled_guard_and_passes():
    report = check(m.TableLength(), torch.randn(2, 8, 16), dynamic={"x": {1: "seq"}})
    verdict = only(report)
    assert report.ok, report.describe()
    assert (verdict.verdict, verdict.range, verdict.location.line) == ("constrained", (2, 32), m.line_of("TABLE-LENGTH"))


def test_a_size_the_compiled_model_compiles_again_for_is_counted_and_explained():
    """``view(4, -1)`` at batch 8 makes Dynamo guard the batch a multiple of 4; batch 9, which
    eager runs, makes it compile again: counted at that size, the guard and the statement named
    (the guard of the entry that kept the batch symbolic, not the size-1 entry's)."""
    report = check(m.LiteralView(), torch.randn(8, 16), dynamic={"x": {0: "batch"}})
    verdict = only(report)
    assert report.ok, report.describe()
    assert [(s.size, s.result) for s in verdict.sizes][:2] == [(1, RECOMPILED), (9, RECOMPILED)], verdict.line()
    assert (verdict.verdict, verdict.multiple_of, verdict.location.line) == ("constrained", 4, m.line_of("LITERAL-VIEW"))
    assert "compiled again at size 9 ((x.size()[0] % 4) == 0)" in verdict.line()


def test_an_int_of_a_size_stays_symbolic_under_compile():
    """Export fixes ``int(x.shape[0])`` (``test_dims``); Dynamo traces it as a symbolic size."""
    verdict = only(check(m.IntOfShape(), torch.randn(8, 16), dynamic={"x": {0: "batch"}}))
    assert verdict.verdict == "dynamic", verdict.line()
    assert [s.result for s in verdict.sizes] == [RECOMPILED, "ok", "ok", "ok"]  # 1: Dynamo's 0/1 specialization


def test_a_clean_sequence_model_keeps_batch_and_sequence_dynamic_under_compile():
    report = check(m.CleanSequence(), *m.tokens(), dynamic="batch,seq")
    assert report.ok, report.describe()
    assert {(v.spec.input, v.spec.name, v.verdict) for v in report.dims} == {
        ("input_ids", "batch", "dynamic"), ("attention_mask", "batch", "dynamic"),
        ("input_ids", "seq", "dynamic"), ("attention_mask", "seq", "dynamic"),
    }  # fmt: skip
    assert all(s.result == "ok" for v in report.dims for s in v.sizes if s.size > 1), report.describe()
    assert report.recompiles == ()  # the sizes tried are the dimensions', not the recorded calls'


def test_an_answer_other_than_eager_s_at_a_size_is_unsound():
    from pytest_fxtrace.backends.compile.dims import DimMarks, _verdict

    spec = DimSpec("x", 0, "batch")
    sizes = (SizeResult(1, RECOMPILED), SizeResult(3, "differs", "max abs diff 1.0"), SizeResult(4, "ok"))
    verdict = _verdict(spec, sizes, DimMarks([spec], m.CleanConv()), {})
    assert verdict.verdict == "unsound" and verdict.failing
    assert "the compiled model answers otherwise than eager at size 3 (max abs diff 1.0)" in verdict.line()


def test_the_check_leaves_the_inputs_unmarked_and_the_model_and_rng_as_found():
    model = m.CleanConv()
    x = torch.randn(2, 3, 8, 8)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(3)
    expected = torch.rand(1)
    torch.manual_seed(3)
    report = check(model, x, dynamic="batch,spatial")
    assert report.ok, report.describe()
    assert torch.equal(torch.rand(1), expected)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not hasattr(x, "_dynamo_dynamic_indices")  # mark_dynamic's marks gone from the user's tensor


def test_an_argument_the_model_lacks_is_a_usage_error_under_compile():
    with pytest.raises(OptionError, match="forward takes no argument 'images'"):
        check(m.CleanConv(), torch.randn(2, 3, 8, 8), dynamic={"images": {0: "batch"}})


def test_each_compile_finding_is_plain_torch_s():
    import torch._dynamo
    from torch._dynamo.testing import CompileCounter
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError

    torch._dynamo.reset()
    x = torch.randn(8, 16)
    torch._dynamo.mark_dynamic(x, 0)
    with pytest.raises(ConstraintViolationError, match="specialized it to be a constant \\(8\\)") as raised:
        torch.compile(m.FixedTensor(), backend="eager")(x)
    assert f"dim_models.py\", line {m.line_of('FIXED-TENSOR')}" in str(raised.value)

    for model, example, bigger, compiles in ((m.LiteralView(), 8, 10, 2), (m.TableLength(), 8, 16, 1)):
        torch._dynamo.reset()
        counter = CompileCounter()
        compiled = torch.compile(model, backend=counter)
        shape = (example, 16) if isinstance(model, m.LiteralView) else (2, example, 16)
        dim = 0 if isinstance(model, m.LiteralView) else 1
        for size in (example, bigger):
            t = torch.randn(*shape[:dim], size, *shape[dim + 1 :])
            torch._dynamo.mark_dynamic(t, dim)
            compiled(t)
        assert counter.frame_count == compiles, model  # batch 10 compiles again; seq 16 does not
    torch._dynamo.reset()


TESTS = """
import pytest, torch
import dim_models as m

@pytest.mark.traceable(backend="compile", dynamic={"x": {0: "batch"}})
def test_pinned():
    m.FixedTensor()(torch.randn(8, 16))

@pytest.mark.traceable(backend="compile")
def test_conv():
    m.CleanConv()(torch.randn(2, 3, 8, 8))
"""


def test_compile_dimensions_reach_the_message_and_the_json_record(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(dim_models=(Path(__file__).parent / "dim_models.py").read_text(), test_dims_user=TESTS)
    pytester.syspathinsert()
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:xdist", "--fx-report=fx.json", "--fx-dynamic=batch"
    )
    outcomes = result.parseoutcomes()
    assert (outcomes.get("failed"), outcomes.get("passed")) == (1, 1), result.stdout.str()
    out = result.stdout.str()
    assert "FixedTensor compiled, but the dimension asked to stay dynamic does not" in out
    assert f"`x` dim 0 (batch): specialized to 8 by `return x + torch.ones(8, 16)` at dim_models.py:{m.line_of('FIXED-TENSOR')}" in out
    records = {r["nodeid"].rpartition("::")[2]: r for r in json.loads((pytester.path / "fx.json").read_text())["results"]}
    pinned = records["test_pinned"]["dims"][0]
    assert (pinned["verdict"], pinned["value"], pinned["line"]) == ("specialized", 8, m.line_of("FIXED-TENSOR"))
    conv = records["test_conv"]["dims"]  # the preset: the batch only
    assert [(d["input"], d["dim"]) for d in conv] == [("x", 0)]
    assert [(s["size"], s["result"]) for s in conv[0]["sizes"]][0] == (1, "recompiled")


def test_a_fix_is_verified_with_the_requested_dimensions_marked():
    """A graph break's fix is compiled again with the check's marks: ``.item()`` with the batch
    asked dynamic gets ``capture_scalar_outputs``, verified so."""
    import compile_models as cm

    report = check(cm.ItemScale(), torch.randn(4, 8), dynamic={"x": {0: "batch"}})
    assert (report.status, report.category) == ("untraceable", "data-dependent"), report.describe()
    assert report.suggestion is not None and report.suggestion.verified, report.describe()
    assert "capture_scalar_outputs" in report.suggestion.text


def test_a_recorded_batch_of_one_is_compiled_at_two_first_and_one_is_still_tried():
    """Zoo mode records a batch of 1, which is left unmarked (Dynamo specializes it): the
    model is compiled at 2, marked, before the sizes are tried, so 2's compile is not a
    recompile of the dimension (every torchvision model read `constrained` before)."""
    report = check(m.CleanSequence(), *m.tokens(batch=1), dynamic={"input_ids": {0: "batch"}, "attention_mask": {0: "batch"}})
    assert report.ok, report.describe()
    assert [v.verdict for v in report.dims] == ["dynamic", "dynamic"], report.describe()
    assert [(s.size, s.result) for s in report.dims[0].sizes] == [(1, "ok"), (3, "ok"), (4, "ok"), (5, "ok")]
