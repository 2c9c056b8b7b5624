"""The torch.compile check as an engine (no pytest plugin): every graph-break site with the
user's line, its submodule, torch's type and id, counted against torch._dynamo.explain;
recompiles in the user's words, counted against a counting backend; the budget; and the
user's model, compiled functions, Dynamo bookkeeping, RNG and grad mode as before."""

from __future__ import annotations

import warnings

import pytest
import torch

from pytest_fxtrace import _compat, check_traceable
from pytest_fxtrace.capture import recording
from pytest_fxtrace.entry import TestChecks
from pytest_fxtrace.options import OptionError, resolve_options

pytestmark = pytest.mark.skipif(_compat.compile_problem() is not None, reason=str(_compat.compile_problem()))

import compile_models as m  # noqa: E402  (tests/ is on sys.path: conftest)

MODELS_FILE = "compile_models.py"


def check(model, *args, **options):
    return check_traceable(model, args, backend="compile", **options)


def check_calls(model, inputs, before=None, **options):
    """Zero-code mode: the calls a marked test makes (``before(model, i)`` ahead of call i)."""
    checks = TestChecks(resolve_options(("test", {"backend": "compile", **options})))
    with recording(checks.observer_for, checks.internal_error):
        for i, x in enumerate(inputs):
            if before is not None:
                before(model, i)
            model(x)
    (report,) = checks.finish()
    return report


def lines(sites) -> set[int]:
    return {site.location.line for site in sites}


def explained_sites(model, *args) -> tuple[set[int], int]:
    """torch's own account: the distinct innermost lines of explain's break reasons (in the
    models' file), and explain's graph_break_count."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Dynamo warns of a builtin it cannot trace
        explained = torch._dynamo.explain(model)(*args)
    found = {
        frame.lineno
        for reason in explained.break_reasons
        for frame in reason.user_stack[-1:]
        if frame.filename.endswith(MODELS_FILE)
    }
    return found, explained.graph_break_count


# --- graph breaks, each named -----------------------------------------------------------------

BREAKS = [
    (m.DataBranch, "C-BRANCH", "control-flow", "GB0170"),
    (m.ItemScale, "C-ITEM", "data-dependent", "GB0124"),
    (m.IntOfData, "C-INT", "type-conversion", "GB0124"),
    (m.PrintInForward, "C-PRINT", "unsupported", "GB0059"),
    (m.CFunction, "C-CFUNC", "unsupported", "GB0007"),
]


@pytest.mark.parametrize(("model", "marker", "category", "gb_id"), BREAKS, ids=[b[0].__name__ for b in BREAKS])
def test_a_graph_break_names_the_user_s_line_category_and_torch_s_id(model, marker, category, gb_id) -> None:
    x = torch.randn(2, 4)
    report = check(model(), x)
    assert (report.status, report.category) == ("untraceable", category), report.describe()
    assert report.location.path.endswith(MODELS_FILE) and report.location.line == m.line_of(marker)
    first = report.message.splitlines()[0]
    assert first.startswith(f"{model.__name__} is not compilable (torch.compile): `{report.location.source}` at ")
    assert f"[{gb_id}]" in first and "1 graph-break site, max_graph_breaks=0" in first
    (site,) = report.graph_breaks
    assert (site.location.line, site.id, site.category, site.module) == (m.line_of(marker), gb_id, category, "")
    assert "torch/" not in report.message  # never a torch frame
    assert explained_sites(model(), x)[0] == {m.line_of(marker)}


def test_a_break_in_a_submodule_is_one_site_named_after_the_submodule() -> None:
    x = torch.randn(2, 4)
    report = check(m.BreakInSubmodule(), x)
    (site,) = report.graph_breaks
    assert (site.module, site.module_type, site.location.line) == ("block", "Block", m.line_of("C-SUBMODULE"))
    assert report.message.startswith("BreakInSubmodule.block (Block) is not compilable (torch.compile): `gain = ")
    # torch's own counts disagree: explain counts graphs - 1 (the parent frames break at the
    # call too, and each resumed frame is a graph), its break reasons name one line
    lines_found, count = explained_sites(m.BreakInSubmodule(), x)
    assert lines_found == {m.line_of("C-SUBMODULE")} and count > 1


def test_several_sites_are_counted_like_explain_and_listed_deepest_first() -> None:
    x = torch.randn(2, 4)
    report = check(m.SeveralBreaks(), x)
    assert lines(report.graph_breaks) == explained_sites(m.SeveralBreaks(), x)[0]
    assert [site.location.line for site in report.graph_breaks][0] == m.line_of("C-SEVERAL-PRINT")  # first met
    assert report.category == "unsupported" and "3 graph-break sites" in report.message.splitlines()[0]
    listed = report.message.splitlines()[2:5]
    assert listed[0].strip().startswith("block (Block): `gain = ")  # deepest first
    assert {line.split(":")[0].strip() for line in listed[1:]} == {"forward"}


def test_each_site_names_the_instance_it_broke_in_also_where_dynamo_compiled_a_resumed_function() -> None:
    x = torch.randn(2, 4)
    report = check(m.Siblings(), x)
    found = {site.location.line: site.module for site in report.graph_breaks}
    assert found == {
        m.line_of("C-CHATTY-HELPER"): "quiet",  # met inlining quiet.forward, then its helper
        m.line_of("C-CHATTY-AGAIN"): "quiet",  # met in the helper's resumed function, compiled alone
        m.line_of("C-CHATTY-FIRST"): "loud",  # only loud prints; the line calls both
        m.line_of("C-CHATTY-SECOND"): "loud",
    }, report.describe()
    assert set(found) == explained_sites(m.Siblings(), x)[0]
    # disabling both methods leaves the model nothing to compile: said so, not "differs"
    assert "`Chatty.forward` (" in report.suggestion.text
    assert "Dynamo captures no graph (nothing left to compile)" in report.suggestion.text


def test_a_break_before_any_tensor_operation_is_counted_where_explain_misses_it() -> None:
    class PrintFirst(torch.nn.Module):
        def forward(self, x):
            print("starting")
            return x.relu()

    report = check(PrintFirst(), torch.randn(3))
    assert report.status == "untraceable" and len(report.graph_breaks) == 1
    assert report.graph_breaks[0].id == "GB0059"
    assert torch._dynamo.explain(PrintFirst())(torch.randn(3)).graph_break_count == 0  # torch's count: none


def test_code_that_looks_breaking_but_that_dynamo_traces_passes_with_no_site() -> None:
    model = m.LooksBreakingButTraces()
    report = check_calls(model, [torch.randn(2, 4), torch.randn(2, 4)])
    assert report.status == "passed", report.describe()
    assert report.graph_breaks == () and report.calls == 2
    assert explained_sites(model, torch.randn(2, 4)) == (set(), 0)


def test_breaks_within_the_budget_pass_and_are_reported() -> None:
    x = torch.randn(2, 4)
    report = check(m.SeveralBreaks(), x, max_graph_breaks=3)
    assert report.status == "passed", report.describe()
    assert lines(report.graph_breaks) == {m.line_of(k) for k in ("C-SEVERAL-PRINT", "C-SEVERAL-BRANCH", "C-SUBMODULE")}
    assert check(m.SeveralBreaks(), x, max_graph_breaks=2).status == "untraceable"


def test_a_forward_dynamo_runs_eagerly_as_a_whole_is_a_finding_not_a_pass() -> None:
    report = check(m.Disabled(), torch.randn(2, 4))
    assert (report.status, report.category) == ("untraceable", "unsupported")
    assert "runs eagerly as a whole: Dynamo captured no graph of Disabled" in report.message
    assert report.location.line == m.line_of("@torch.compiler.disable")
    assert "remove torch.compiler.disable" in report.suggestion.text


def test_a_forward_with_nothing_to_compile_passes() -> None:
    report = check(m.Identity(), torch.randn(2, 4))
    assert report.status == "passed" and report.graph_breaks == ()


class EmptySequential(torch.nn.Sequential):
    pass


@pytest.mark.parametrize("model", [torch.nn.Identity, EmptySequential], ids=["identity", "empty-sequential"])
def test_torch_s_own_module_with_nothing_to_compile_passes(model) -> None:
    # Dynamo inlines torch's forward into the frame it compiles around the call: no frame of
    # its own, yet nothing ran eagerly (was: "runs eagerly as a whole")
    torch.testing.assert_close(torch.compile(model(), backend="eager", fullgraph=True)(torch.ones(2)), torch.ones(2))
    report = check(model(), torch.randn(2, 4))
    assert report.status == "passed", report.describe()


# --- recompiles, each explained --------------------------------------------------------------


def counted_recompiles(model, inputs, before=None) -> int:
    """torch's count: frames a counting backend compiled beyond the first of each."""
    counter = torch._dynamo.testing.CompileCounter()
    compiled = torch.compile(model, backend=counter)
    for i, x in enumerate(inputs):
        if before is not None:
            before(model, i)
        compiled(x)
    return counter.frame_count - 1


def set_step(model, i) -> None:
    model.step = i + 1


def test_python_state_read_in_forward_recompiles_with_its_old_and_new_value() -> None:
    inputs = [torch.ones(2)] * 3
    report = check_calls(m.StepScaled(), inputs, set_step)
    assert (report.status, report.category) == ("untraceable", "specialization")
    assert report.location.line == m.line_of("C-STEP")
    # every call is run before judging: torch's count of the three calls, not the first over budget
    assert "recompiles: `self.step` was 1, now 2; 2 recompiles over the 3 recorded calls, max_recompiles=0" in report.message
    raised = check_calls(m.StepScaled(), inputs, set_step, max_recompiles=1)
    assert (raised.status, raised.category) == ("untraceable", "specialization")
    assert "2 recompiles over the 3 recorded calls, max_recompiles=1" in raised.message
    allowed = check_calls(m.StepScaled(), inputs, set_step, max_recompiles=2)
    assert allowed.status == "passed"
    assert [r.reason for r in allowed.recompiles] == ["`self.step` was 1, now 2", "`self.step` was 2, now 3"]
    assert len(allowed.recompiles) == counted_recompiles(m.StepScaled(), inputs, set_step) == 2


def test_a_helper_recompiled_for_another_rank_names_the_helper_and_its_def() -> None:
    report = check(m.RankVaries(), torch.randn(2, 4))
    (recompile,) = report.recompiles
    assert recompile.reason == "`t`'s rank was 2, now 3 in `rescale`"  # torch: "expected 2, actual 3"
    assert (recompile.location.line, recompile.location.source) == (m.line_of("C-RESCALE-DEF"), "def rescale(t):")
    assert recompile.counted


def test_an_eager_mode_quantized_model_is_said_so_and_no_fix_is_compiled(monkeypatch) -> None:
    from torch.ao.quantization import DeQuantStub, QuantStub

    from pytest_fxtrace.backends.compile import fixes

    class Quantized(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.quant, self.fc, self.dequant = QuantStub(), torch.nn.Linear(4, 4), DeQuantStub()

        def forward(self, x):
            return self.dequant(self.fc(self.quant(x)))

    model = Quantized().eval()
    model.qconfig = torch.ao.quantization.get_default_qconfig(torch.backends.quantized.engine)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation notes
        torch.ao.quantization.prepare(model, inplace=True)
        model(torch.randn(8, 4))
        torch.ao.quantization.convert(model, inplace=True)
    trials = []
    monkeypatch.setattr(fixes, "compile_again", lambda *args: trials.append(args))
    report = check(model, torch.randn(2, 4))
    assert report.status == "untraceable", report.describe()
    assert (
        "Dynamo captured no graph of Quantized, since it cannot trace the quantized tensors of its "
        "eager-mode quantized modules (quant (Quantize), fc (Linear), dequant (DeQuantize))"
    ) in report.message
    assert report.suggestion.text.startswith("in code: compile the float model"), report.suggestion.text
    assert trials == []


def test_sizes_that_vary_recompile_once_and_that_one_is_not_counted() -> None:
    inputs = [torch.ones(n, 3) for n in (2, 4, 6)]
    report = check_calls(m.Sizes(), inputs)
    assert report.status == "passed", report.describe()
    (only,) = report.recompiles
    assert not only.counted and only.reason.startswith("`x.shape[0]` went from 2 to 4")
    assert counted_recompiles(m.Sizes(), inputs) == 1


def test_a_shape_branch_the_calls_cross_recompiles_at_the_user_s_if() -> None:
    inputs = [torch.ones(n, 3) for n in (2, 3, 5)]
    report = check_calls(m.ShapeBranch(), inputs)
    assert (report.status, report.category) == ("untraceable", "specialization"), report.describe()
    counted = [r for r in report.recompiles if r.counted]
    assert len(counted) == 1 and counted[0].location.line == m.line_of("C-SHAPE")
    assert counted[0].reason.startswith("`x.shape[0]` is 5, outside `2 <= x.shape[0] <= 3`")
    assert len(report.recompiles) == counted_recompiles(m.ShapeBranch(), inputs) == 2


@pytest.mark.filterwarnings("ignore:Pred is a Python constant")  # torch.cond on the first, static size
def test_a_branch_that_makes_a_size_constant_again_names_its_if_and_the_budget_that_passes() -> None:
    from pytest_fxtrace.backends.compile.verdict import SIZE_BRANCH_FIX

    inputs = [torch.ones(n, 3) for n in (2, 4, 6)]
    report = check_calls(m.SizeEquals(), inputs)
    assert (report.status, report.category) == ("untraceable", "specialization"), report.describe()
    assert report.location.line == m.line_of("C-SIZE-EQ")  # torch's guard is a plain size one
    counted = [r for r in report.recompiles if r.counted]
    assert [r.location.line for r in counted] == [m.line_of("C-SIZE-EQ")]
    assert len(report.recompiles) == counted_recompiles(m.SizeEquals(), inputs) == 2
    # mark_dynamic is tried and fails (the branch specializes the size): not recommended
    assert report.suggestion.verified and report.suggestion.options == {"max_recompiles": 1}
    assert report.suggestion.text.startswith("allow them: max_recompiles=1 "), report.suggestion.text
    assert "compiled again with mark_dynamic" in report.suggestion.text
    assert report.code_fix == SIZE_BRANCH_FIX and "mark_dynamic" not in report.code_fix
    # both fixes, applied, pass: the budget, and the branch in torch.cond
    assert check_calls(m.SizeEquals(), inputs, max_recompiles=1).status == "passed"
    assert check_calls(m.SizeEqualsCond(), inputs).status == "passed"
    assert counted_recompiles(m.SizeEqualsCond(), inputs) == 1  # torch: automatic dynamic's one


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x).relu()


class _PrintBetween(torch.nn.Module):
    """A graph break between two submodules: ``after`` is in Dynamo's second graph."""

    def __init__(self):
        super().__init__()
        self.before, self.after, self.spare = _Block(), _Block(), _Block()

    def forward(self, x):
        x = self.before(x)
        print("between")  # a graph break
        return self.after(x)


@pytest.mark.parametrize("max_graph_breaks", [1, 0])
def test_the_module_tree_holds_what_ran_in_every_graph_not_only_the_first(max_graph_breaks, capsys) -> None:
    from pytest_fxtrace.backends.base import Seams
    from pytest_fxtrace.entry import check_model_backends

    options = resolve_options(("test", {"backend": "compile", "max_graph_breaks": max_graph_breaks}))
    model = _PrintBetween()
    (report,) = check_model_backends(model, (torch.randn(2, 4),), {}, options, Seams(module_tree=True))
    assert report.ok == (max_graph_breaks == 1), report.describe()
    statuses = {node.path: node.status.value for node in report.modules}
    # ``after`` was "unvisited" (not reached): only Dynamo's first graph was read
    root = "traced" if report.ok else "failed"  # the print is the model's own forward's
    assert statuses == {
        "": root, "before": "traced", "before.lin": "traced", "after": "traced", "after.lin": "traced",
        "spare": "unvisited", "spare.lin": "unvisited",
    }  # fmt: skip
    gms = []
    torch.compile(_PrintBetween(), backend=lambda gm, _: gms.append(gm) or gm.forward)(torch.randn(2, 4))
    assert len(gms) == 2  # plain torch.compile: two graphs, ``after``'s in the second


# --- what a check leaves as it was ------------------------------------------------------------


def test_the_user_s_compiled_function_keeps_its_cache_and_dynamo_s_counters_are_as_before() -> None:
    from torch._dynamo import utils as dynamo_utils

    counter = torch._dynamo.testing.CompileCounter()
    users = torch.compile(m.SeveralBreaks(), backend=counter)  # the same class the check compiles
    x = torch.randn(2, 4)
    users(x)
    compiled = counter.frame_count
    counters = {name: dict(found) for name, found in dynamo_utils.counters.items()}
    reasons = len(dynamo_utils.graph_break_reasons)
    entries = len(_default_entries(m.SeveralBreaks.forward))

    assert check(m.SeveralBreaks(), x).status == "untraceable"

    assert {name: dict(found) for name, found in dynamo_utils.counters.items()} == counters
    assert len(dynamo_utils.graph_break_reasons) == reasons
    assert len(_default_entries(m.SeveralBreaks.forward)) == entries  # the user's entries, untouched
    users(x)
    assert counter.frame_count == compiled  # its cache still serves: nothing compiled again


def _default_entries(function):
    from torch._dynamo.eval_frame import _get_cache_entries_for_region

    return _get_cache_entries_for_region(function.__code__, -1)


def test_the_check_s_cache_entries_are_invalidated_when_it_ends() -> None:
    import gc

    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    from torch._dynamo.guards import DeletedGuardManagerWrapper

    check(m.Sizes(), torch.randn(2, 3))
    gc.collect()
    entries = [e for e in _debug_get_cache_entry_list(m.Sizes.forward.__code__) if e.isolate_recompiles_id >= 0]
    assert entries and all(isinstance(e.guard_manager, DeletedGuardManagerWrapper) for e in entries)


def test_checks_of_one_model_class_never_use_up_dynamo_s_recompile_limit() -> None:
    class Small(torch.nn.Module):  # a code object of its own: no other test's entries on it
        def forward(self, x):
            return x.relu() * 2

    x = torch.randn(2, 3)
    with torch._dynamo.config.patch(accumulated_recompile_limit=4):  # 256 by default
        statuses = [check(Small(), x).status for _ in range(8)]
        graphs = []

        def counting(gm, example_inputs):
            graphs.append(gm)
            return gm.forward

        torch.compile(Small(), backend=counting)(x)  # and the user's own compile of it, after
    assert statuses == ["passed"] * 8  # was: the 5th "runs eagerly as a whole" (recompile limit)
    assert len(graphs) == 1


def test_the_model_rng_and_grad_mode_are_as_without_the_check() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), torch.nn.Dropout(0.5))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    check_calls(model, [torch.randn(3, 4)])
    rng = torch.get_rng_state()
    torch.manual_seed(0)
    plain = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), torch.nn.Dropout(0.5))
    plain(torch.randn(3, 4))
    assert torch.equal(torch.get_rng_state(), rng)  # the check drew nothing from the stream
    for name, value in plain.state_dict().items():
        assert torch.equal(model.state_dict()[name], value), name  # one eager update, not two
    assert not all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert torch.is_grad_enabled()


def test_what_the_model_prints_and_torch_logs_stay_out_of_the_test_s_output(capfd) -> None:
    check(m.ItemScale(), torch.randn(2, 4))
    check(m.PrintInForward(), torch.randn(2, 4))
    out, err = capfd.readouterr()
    assert "Graph break" not in err and "capture_scalar_outputs" not in err
    assert out.count("forward got") == 1  # check_traceable's own eager call; the compiled run is quiet


# --- options ----------------------------------------------------------------------------------


def test_the_budget_options_resolve_from_strings_and_refuse_what_is_not_a_count() -> None:
    options = resolve_options(("ini", {"max_graph_breaks": "2", "max_recompiles": "0", "compile_backend": "aot_eager"}))
    assert (options.max_graph_breaks, options.max_recompiles, options.compile_backend) == (2, 0, "aot_eager")
    with pytest.raises(OptionError, match="max_graph_breaks: expected a whole number of at least 0, got -1"):
        resolve_options(("marker", {"max_graph_breaks": -1}))
    with pytest.raises(OptionError, match="'tvm' is not a torch.compile backend the check knows"):
        resolve_options(("marker", {"compile_backend": "tvm"}))


def test_aot_eager_compiles_and_matches_eager() -> None:
    report = check(m.LooksBreakingButTraces(), torch.randn(2, 4), compile_backend="aot_eager")
    assert report.status == "passed", report.describe()


def test_naming_the_backend_below_the_floor_is_a_usage_error_naming_the_version() -> None:
    problem = _compat.compile_floor_problem("2.12.0")
    assert problem.startswith("backend='compile' needs torch >= 2.13") and "found torch 2.12.0" in problem
    assert _compat.compile_floor_problem("2.13.0") is None and _compat.compile_floor_problem("2.14.1") is None
