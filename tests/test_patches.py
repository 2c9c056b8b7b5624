"""Verified patches (issue 42): a rewrite of the failing statement, shown as a unified diff only
after it was applied to an in-memory copy of the class, the model rebuilt with the same state,
the same check passed and the patched eager model answered as the original on the recorded
call. The user's files are never written; ``--fx-patch-dir`` writes one ``.patch`` per finding
that ``patch -p1`` applies from the file's import root."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import patch_models as m
import pytest
import torch
from markers import line_of as _line_of

from pytest_fxtrace import check_traceable
from pytest_fxtrace.backends.compile import problem as compile_problem
from pytest_fxtrace.backends.export import problem as export_problem
from pytest_fxtrace.types import Category, Status

MODELS = Path(m.__file__)
EXPORT = pytest.mark.skipif(export_problem() is not None, reason=str(export_problem()))
COMPILE = pytest.mark.skipif(compile_problem() is not None, reason=str(compile_problem()))


def line_of(marker: str) -> int:
    return _line_of(str(MODELS), marker)


def x() -> torch.Tensor:
    return torch.ones(2, 4)


def built(cls: type[torch.nn.Module]) -> torch.nn.Module:
    torch.manual_seed(0)
    return cls()


@pytest.mark.parametrize("backend", ["fx", pytest.param("export", marks=EXPORT), pytest.param("compile", marks=COMPILE)])
def test_a_branch_on_a_tensor_gets_a_verified_torch_where_patch(backend: str) -> None:
    source = MODELS.read_text()
    report = check_traceable(built(m.Gate), (x(),), backend=backend)
    assert report.status == Status.UNTRACEABLE and report.category == Category.CONTROL_FLOW, report.describe()
    patch = report.suggestion.patch
    assert report.suggestion.verified and patch is not None
    assert patch.startswith("--- a/patch_models.py\n+++ b/patch_models.py\n")
    assert "-        if h.sum() > 0:  # GATE-IF\n" in patch
    assert "+        out = torch.where(h.sum() > 0, h.relu(), -h)  # GATE-IF\n" in patch  # its comment kept
    assert "fix (verified patch)" in report.describe() and "+        out = torch.where" in report.describe()
    assert MODELS.read_text() == source, "the user's file was written"


def test_a_branch_that_returns_in_each_arm_is_one_return_of_torch_where() -> None:
    report = check_traceable(built(m.GateReturn), (x(),))
    assert "+            return torch.where(x.mean() > 0, x * 2, x - 1)\n" not in (report.suggestion.patch or "")
    assert "+        return torch.where(x.mean() > 0, x * 2, x - 1)  # RETURN-IF\n" in report.suggestion.patch, report.describe()


def test_an_assert_on_a_tensor_becomes_torch_assert() -> None:
    report = check_traceable(built(m.AssertPositive), (x(),))
    assert report.location.line == line_of("ASSERT")
    assert '+        torch._assert(x.abs().sum() >= 0, "negative norm")  # ASSERT\n' in report.suggestion.patch, report.describe()


@EXPORT
def test_an_assert_on_a_tensor_s_value_is_kept_by_export_as_torch_assert_async() -> None:
    report = check_traceable(built(m.AssertPositive), (x(),), backend="export")
    assert report.location.line == line_of("ASSERT"), report.describe()
    assert '+        torch._assert_async(x.abs().sum() >= 0, "negative norm")  # ASSERT\n' in report.suggestion.patch, report.describe()


def test_a_size_made_a_python_int_is_left_a_size() -> None:
    report = check_traceable(built(m.FlattenTo), (torch.ones(2, 3, 4),))
    assert report.category == Category.TYPE_CONVERSION and report.location.line == line_of("INT-SHAPE"), report.describe()
    assert "+        n = x.shape[1] * x.shape[2]  # INT-SHAPE\n" in report.suggestion.patch


def test_a_round_trip_through_numpy_stays_a_tensor() -> None:
    report = check_traceable(built(m.NumpyExp), (torch.randn(2, 4),))
    assert report.location.line == line_of("NUMPY"), report.describe()
    assert "+        y = torch.exp(x)  # NUMPY\n" in report.suggestion.patch, report.describe()


def test_a_round_trip_through_a_list_stays_a_tensor() -> None:
    report = check_traceable(built(m.ListScale), (torch.randn(2, 4),))
    assert report.location.line == line_of("TOLIST"), report.describe()
    assert "+        scale = x.abs().sum(1)  # TOLIST\n" in report.suggestion.patch, report.describe()


def test_a_statement_that_only_made_sizes_python_ints_goes() -> None:
    report = check_traceable(built(m.HeightWidth), (torch.randn(2, 3, 4),))
    assert report.location.line == line_of("INT-PAIR"), report.describe()
    patch = report.suggestion.patch
    added = [line for line in patch.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert "-        h, w = int(h), int(w)  # INT-PAIR\n" in patch and not added, patch  # removed, nothing added
    assert "is left out" in report.suggestion.text


def test_a_tensor_value_made_a_python_float_is_left_a_tensor() -> None:
    report = check_traceable(built(m.NormalizeByMax), (torch.randn(2, 4),))
    assert report.location.line == line_of("FLOAT"), report.describe()
    assert "+        scale = x.abs().max() + 1.0  # FLOAT\n" in report.suggestion.patch, report.describe()


@COMPILE
def test_a_print_that_breaks_the_compiled_graph_is_guarded_not_removed(capsys: pytest.CaptureFixture[str]) -> None:
    report = check_traceable(built(m.Talks), (x(),), backend="compile")
    assert report.suggestion.verified, report.describe()
    assert "+        if not torch.compiler.is_compiling():\n+            print(" in report.suggestion.patch
    capsys.readouterr()


@COMPILE
def test_no_patch_is_tried_where_the_compiled_graph_breaks_at_two_statements(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import pytest_fxtrace.check as check

    tried = []
    monkeypatch.setattr(check, "find_patch", lambda *args: tried.append(args) or None)
    report = check_traceable(built(m.TalksTwice), (x(),), backend="compile", max_graph_breaks=0)
    assert report.status == Status.UNTRACEABLE and not tried, report.describe()
    check_traceable(built(m.Talks), (x(),), backend="compile", max_graph_breaks=0)
    assert len(tried) == 1  # one break site: tried
    capsys.readouterr()


def test_a_rewrite_that_changes_eager_s_answer_is_not_shown() -> None:
    report = check_traceable(built(m.NoisyGate), (x(),))
    assert report.category == Category.CONTROL_FLOW and report.location.line == line_of("NOISY-IF"), report.describe()
    assert report.suggestion is None or report.suggestion.patch is None, report.describe()
    assert "verified patch" not in report.describe()


@COMPILE
def test_where_torch_where_would_change_the_answer_torch_cond_runs_one_arm_and_is_shown() -> None:
    torch.manual_seed(0)
    report = check_traceable(built(m.NoisyGate), (x(),), backend="compile")
    patch = report.suggestion.patch
    assert patch is not None and "torch.where" not in patch, report.describe()
    assert "+        h = torch.cond(x.sum() > 0, lambda: x.clone(), lambda: x + torch.randn_like(x))  # NOISY-IF\n" in patch


@EXPORT
def test_torch_cond_s_arm_that_returns_its_input_returns_a_copy_which_export_takes() -> None:
    # `lambda: x` aliases the input: export refuses it ("aliasing during higher order op tracing")
    report = check_traceable(built(m.NoisyGate), (x(),), backend="export")
    assert "+        h = torch.cond(x.sum() > 0, lambda: x.clone(), lambda: x + torch.randn_like(x))  # NOISY-IF\n" in report.suggestion.patch, report.describe()


def test_a_tensor_made_from_a_traced_size_is_made_from_its_input() -> None:
    report = check_traceable(built(m.PadColumn), (torch.randn(2, 3),))
    assert report.category == Category.TENSOR_CONSTRUCTOR and report.location.line == line_of("ZEROS"), report.describe()
    assert "+        pad = x.new_zeros(x.shape[0], 1)  # ZEROS\n" in report.suggestion.patch


def test_the_check_of_a_patch_leaves_the_model_and_rng_as_they_were() -> None:
    net = built(m.NoisyGate)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    torch.manual_seed(3)
    rng = torch.get_rng_state()
    check_traceable(net, (x(),))
    assert torch.equal(torch.get_rng_state(), rng)
    assert type(net) is m.NoisyGate and net.training
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())


def test_a_helper_function_below_forward_is_wrapped_for_torch_fx_after_its_definition() -> None:
    report = check_traceable(built(m.Grid), (torch.randn(2, 9, 3),))
    assert report.category == Category.TYPE_CONVERSION and report.location.line == line_of("SQRT"), report.describe()
    # the option fix and the patch beside it, both verified
    assert report.suggestion.options == {"autowrap_functions": ["patch_models:square_grid"]}
    assert report.suggestion.text == "@pytest.mark.traceable(autowrap_functions=['patch_models:square_grid'])"
    assert report.suggestion.verified and report.suggestion.patch_text.startswith("patch `side = int(math.sqrt(tokens.shape[1]))`")
    assert "  or patch (verified): patch `side = int(" in report.describe()
    assert '+torch.fx.wrap("square_grid")  # traced as one call' in report.suggestion.patch
    assert m.square_grid is m.to_grid.__globals__["square_grid"], "the user's module was changed"


def test_the_torch_fx_wrap_a_patch_tried_is_forgotten_after_its_trial() -> None:
    from torch.fx import _symbolic_trace as fx

    report = check_traceable(built(m.Grid), (torch.randn(2, 9, 3),))
    assert report.suggestion.patch is not None
    # the patch's torch.fx.wrap("square_grid") ran in a copy of the module's namespace; it is
    # not registered after (a graph's own code registers its wrapped calls under its names)
    assert not [key for key in fx._wrapped_fns_to_patch if key[1] == "square_grid"]
    with pytest.raises(TypeError, match="Proxy"):  # and the user's own module is wrapped by nothing: plain torch.fx fails as before
        torch.fx.symbolic_trace(m.Grid())


def test_a_helper_imported_from_another_module_is_wrapped_in_the_module_that_calls_it() -> None:
    report = check_traceable(built(m.GridOfHelper), (torch.randn(2, 9, 3),))
    assert report.location.path.endswith("patch_helpers.py"), report.describe()
    patch = report.suggestion.patch
    assert patch.startswith("--- a/patch_models.py\n+++ b/patch_models.py\n"), patch  # the caller's file
    assert patch.rstrip().endswith('+torch.fx.wrap("grid_side")  # traced as one call: its Python logic runs when the graph runs'), patch


def test_a_candidate_whose_graph_raises_is_passed_over_without_a_word_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    report = check_traceable(built(m.PadSame), (torch.randn(2, 6),))
    assert report.location.line == line_of("SAME-PAD"), report.describe()
    assert '+torch.fx.wrap("same_pad")' in report.suggestion.patch and "torch.fx.Proxy" not in report.suggestion.patch
    assert capsys.readouterr().err == ""  # the isinstance candidate's graph raised: torch.fx printed its line into the trial


def test_an_isinstance_tensor_test_also_accepts_the_traced_tensor() -> None:
    report = check_traceable(built(m.Tempered), (torch.randn(2, 4),))
    assert report.location.line == line_of("MAX"), report.describe()
    patch = report.suggestion.patch
    assert "+    if isinstance(t, (torch.Tensor, torch.fx.Proxy)):  # ISINSTANCE\n" in patch, report.describe()


def test_an_if_whose_body_changes_nothing_where_it_did_not_run_is_left_out() -> None:
    report = check_traceable(built(m.PadToEven), (torch.randn(2, 4),))
    assert report.location.line == line_of("PAD-IF"), report.describe()
    assert "-        if pad:  # PAD-IF\n-            x = F.pad(x, (0, pad))\n+        x = F.pad(x, (0, pad))\n" in report.suggestion.patch
    assert "fix (verified patch)" in report.describe()


def test_an_if_the_recorded_call_took_is_not_left_out() -> None:
    # recorded at an odd size the pad ran: with the body never run, eager answers otherwise
    report = check_traceable(built(m.PadToEven), (torch.randn(2, 3),))
    assert report.location.line == line_of("PAD-IF"), report.describe()
    assert report.suggestion is None or report.suggestion.patch is None, report.describe()


def test_a_loop_over_the_batch_becomes_its_expression_on_the_whole_tensor() -> None:
    report = check_traceable(built(m.RowScale), (torch.randn(3, 4),))
    assert report.location.line == line_of("LOOP"), report.describe()
    patch = report.suggestion.patch
    assert "-        for i in range(x.shape[0]):  # LOOP\n" in patch and "+        return x * self.scale + 1\n" in patch, patch


def test_a_loop_whose_expression_is_not_elementwise_is_not_vectorised() -> None:
    report = check_traceable(built(m.RowGram), (torch.randn(3, 4),))
    assert report.location.line == line_of("GRAM-LOOP"), report.describe()
    assert report.suggestion is None or report.suggestion.patch is None, report.describe()


def test_an_assert_of_sizes_joined_by_or_becomes_torch_assert_of_their_bitwise_or() -> None:
    report = check_traceable(built(m.TwoWidths), (torch.randn(2, 4),))
    assert report.location.line == line_of("OR-ASSERT"), report.describe()
    assert '+        torch._assert((x.shape[1] == 4) | (x.shape[1] == 8), "width 4 or 8")  # OR-ASSERT\n' in report.suggestion.patch


@EXPORT
def test_a_literal_view_size_that_pins_a_dynamic_batch_becomes_the_input_s_own() -> None:
    report = check_traceable(built(m.Rows), (torch.randn(4, 2, 8),), backend="export", dynamic={"x": {0: "batch"}})
    assert report.status == Status.MISMATCH and report.category == Category.SPECIALIZATION, report.describe()
    assert "+        return self.fc(x.view(x.shape[0], -1))  # VIEW-LITERAL\n" in report.suggestion.patch, report.describe()
    assert "fix (verified patch)" in report.describe()


def test_a_registering_decorator_is_left_out_of_the_rebuild_and_registers_nothing_more() -> None:
    registered = list(m.REGISTERED)
    report = check_traceable(built(m.RegisteredGate), (x(),))
    patch = report.suggestion.patch
    assert not [line for line in patch.splitlines() if line.startswith(("-@", "+@"))], patch  # the decorator as it was
    assert "+        return torch.where(x.sum() > 0, x * 2, x - 1)  # REGISTERED-IF\n" in patch
    assert m.REGISTERED == registered


def test_a_class_its_decorator_adds_to_gets_no_patch() -> None:
    report = check_traceable(built(m.ScaledGate), (x(),))
    assert report.location.line == line_of("SCALED-IF"), report.describe()
    assert report.suggestion is None or report.suggestion.patch is None, report.describe()


# -- through pytest: the message, the JSON record, --fx-patch-dir, and the patch applied ------------


@pytest.mark.skipif(shutil.which("patch") is None, reason="needs the patch program")
def test_a_written_patch_applies_with_patch_p1_and_the_model_then_traces_with_plain_torch(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(patch_models=MODELS.read_text(), patch_helpers=(MODELS.parent / "patch_helpers.py").read_text())
    pytester.makepyfile(
        test_user="""
import pytest, torch
import patch_models as m

@pytest.mark.traceable
def test_gate():
    m.Gate()(torch.ones(2, 4))

@pytest.mark.traceable
def test_assert():
    m.AssertPositive()(torch.ones(2, 4))
"""
    )
    installed = (pytester.path / "patch_models.py").read_text()
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly", "--fx-report=fx.json", "--fx-patch-dir=patches"
    )
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*fix (verified patch): patch `if h.sum() > 0:*", "*+        out = torch.where(h.sum() > 0, h.relu(), -h)*"])
    records = json.loads((pytester.path / "fx.json").read_text())["results"]
    assert all(r["suggestion"]["verified"] and r["suggestion"]["patch"].startswith("--- a/patch_models.py") for r in records)
    written = sorted((pytester.path / "patches").iterdir())
    assert [p.name for p in written] == [
        "test_user.py_test_assert.AssertPositive.fx.patch",
        "test_user.py_test_gate.Gate.fx.patch",
    ]
    pristine = pytester.path / "pristine"
    pristine.mkdir()
    for name in ("patch_models.py", "patch_helpers.py"):
        shutil.copy(pytester.path / name, pristine / name)
    for patch in written:  # each against the file as installed, from its import root
        subprocess.run(["patch", "-p1", "-s", "-i", str(patch)], cwd=pristine, check=True)
    plain = (
        "import torch, patch_models as m\n"
        "for cls in (m.Gate, m.AssertPositive):\n"
        "    torch.manual_seed(0); model = cls(); x = torch.ones(2, 4)\n"
        "    gm = torch.fx.symbolic_trace(model)\n"
        "    torch.testing.assert_close(gm(x), model(x))\n"
        "print('plain torch: traced and equal')\n"
    )
    run = subprocess.run([sys.executable, "-c", plain], cwd=pristine, capture_output=True, text=True)
    assert run.returncode == 0 and "traced and equal" in run.stdout, run.stderr
    assert (pytester.path / "patch_models.py").read_text() == installed, "the user's file was written"


def test_fx_patch_dir_that_is_a_file_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makefile(".txt", patches="not a folder")
    pytester.makepyfile(test_user="def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "--fx-patch-dir=patches.txt")
    assert result.ret != 0
    assert "--fx-patch-dir=patches.txt" in result.stderr.str() and "is a file; give a folder" in result.stderr.str()


def test_the_html_page_shows_a_verified_patch_under_its_row_and_whole_in_its_details(browser_page, tmp_path: Path) -> None:
    from pytest_fxtrace.report.html import render_html
    from pytest_fxtrace.report.records import CheckRecord

    diff = "--- a/pkg/gate.py\n+++ b/pkg/gate.py\n@@ -1,4 +1,1 @@\n" + "".join(f"-    line {i}\n" for i in range(20)) + "+    out = torch.where(c, a, b)\n"
    suggestion = {"text": "patch `if c:` at pkg/gate.py:3: ...", "verified": True, "options": {}, "patch": diff}
    record = CheckRecord(nodeid="t.py::test_gate", model="pkg.Gate", status="untraceable", category="control-flow", suggestion=suggestion)
    (tmp_path / "page.html").write_text(render_html([record], "2.14.1"), encoding="utf-8")
    page = browser_page
    page.goto((tmp_path / "page.html").as_uri())
    under = page.locator("tr.subrow pre.patch").inner_text()
    assert under.startswith("--- a/pkg/gate.py") and under.endswith("... 9 more lines (details)")
    page.locator("tr.row", has_text="test_gate").click()
    whole = page.locator("tr.detail pre.patch").inner_text()
    assert "+    out = torch.where(c, a, b)" in whole and "more lines" not in whole
    assert page.events == []
