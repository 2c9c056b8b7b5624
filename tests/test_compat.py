"""pytest_fxtrace._compat: the torch floor's start-up error, each shim on the running
torch (and its fallback), and that no other module of the package uses a private name
of torch, pytest or NumPy."""

from __future__ import annotations

import ast
import os
import re
import types
from pathlib import Path

import pytest
import torch
import torch.fx

import pytest_fxtrace
from pytest_fxtrace import _compat
from pytest_fxtrace.backends.export import _compat as export_compat

PACKAGE = Path(pytest_fxtrace.__file__).parent

# --- the floor ------------------------------------------------------------------------------


def fake_torch(pytester: pytest.Pytester, version: str) -> None:
    """A ``torch`` package of ``version`` first on the subprocess's path: it has no
    ``torch.fx``, so anything importing that before the version check fails loudly."""
    fake = pytester.mkdir("fake")
    (fake / "torch").mkdir()
    (fake / "torch" / "__init__.py").write_text(f"__version__ = {version!r}\n")
    (fake / "torch" / "version.py").write_text(f"__version__ = {version!r}\n")
    path = os.environ.get("PYTHONPATH")
    pytester._monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(fake), path])))


def test_an_older_torch_stops_the_session_at_start_up_with_one_error(pytester: pytest.Pytester) -> None:
    fake_torch(pytester, "1.13.1")
    pytester.makeconftest("import torch.fx  # a conftest importing torch.fx")
    pytester.makepyfile(
        """
        import pytest
        from pytest_fxtrace import check_traceable

        @pytest.mark.traceable
        def test_model():
            pass
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if line.startswith("ERROR:")]
    assert errors == ["ERROR: pytest-fxtrace needs torch >= 2.1; found 1.13.1"]
    assert "pip install 'torch>=2.1'" in result.stderr.str()
    assert "-p no:fxtrace" in result.stderr.str()
    assert "ImportError" not in result.stdout.str() + result.stderr.str()


def test_without_the_plugin_an_older_torch_does_not_stop_the_session(pytester: pytest.Pytester) -> None:
    fake_torch(pytester, "1.13.1")
    pytester.makepyfile("def test_plain():\n    assert 1\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:fxtrace")
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize("version", ["2.1.0", "2.1.0a0+git1234", "2.14.1+cpu", "3.0.0", None, "not installed"])
def test_supported_or_unknown_torch_versions_pass_the_floor(version: str | None) -> None:
    assert _compat.torch_too_old(version) is None


@pytest.mark.parametrize("version", ["1.13.1", "2.0.1+cu118", "2.0.0a0"])
def test_versions_below_the_floor_are_refused_by_name(version: str) -> None:
    problem = _compat.torch_too_old(version)
    assert problem is not None
    assert problem.splitlines()[0] == f"pytest-fxtrace needs torch >= 2.1; found {version}"


def test_the_running_torch_is_at_or_above_the_floor() -> None:
    assert _compat.torch_too_old(torch.__version__) is None


# --- torch.fx shims -------------------------------------------------------------------------


class WithConstants(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 3)
        self.register_buffer("offset", torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x) + self.offset + torch.tensor([1.0, 2.0, 3.0])
        return torch.cat((y, x), dim=-1).sum(dim=(0,), keepdim=True)


def test_plain_arg_handlers_never_cover_tensors_modules_or_constants() -> None:
    handlers = _compat.plain_arg_handlers()
    for kind in handlers:
        assert not issubclass(kind, (torch.Tensor, torch.nn.Module, torch.ScriptObject))
    if handlers:  # the shortcut is taken on this torch: the usual plain types are there
        assert {tuple, list, dict, torch.fx.Proxy} <= set(handlers)


def test_our_tracer_gives_torch_fx_s_graph_for_parameters_buffers_and_constants() -> None:
    model = WithConstants()
    ours = pytest_fxtrace.symbolic_trace(model)
    theirs = torch.fx.symbolic_trace(WithConstants())
    assert ours.code == theirs.code
    x = torch.randn(2, 3)
    torch.testing.assert_close(ours(x), model(x))


def uses_len(x: torch.Tensor) -> torch.Tensor:
    return x * len(x)


@pytest.mark.parametrize("make", [_compat.wrapped_function, _compat._own_wrapped_function], ids=["running", "fallback"])
def test_wrapped_function_records_a_call_when_given_a_proxy(make) -> None:
    wrapped = make(len)
    assert wrapped([1, 2, 3]) == 3  # plain arguments: the function itself runs
    tracer = torch.fx.Tracer()
    graph = tracer.trace(lambda x: x * wrapped(x))
    calls = [n.target for n in graph.nodes if n.op == "call_function"]
    assert len in calls


def test_builtins_among_autowrap_functions_become_graph_calls() -> None:
    class Net(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return uses_len(x)

    gm = pytest_fxtrace.symbolic_trace(Net(), autowrap_functions=(len,))
    assert len in [n.target for n in gm.graph.nodes if n.op == "call_function"]
    x = torch.randn(4, 2)
    torch.testing.assert_close(gm(x), x * 4)


def pair_sum(x: dict[str, torch.Tensor]) -> torch.Tensor:
    return x["a"] + x["b"]


def test_pytree_graphs_are_recognised_and_take_flattened_inputs() -> None:
    plain = torch.fx.symbolic_trace(pair_sum)
    flat = torch.fx.symbolic_trace(pair_sum, concrete_args={"x": {"a": torch.fx.PH, "b": torch.fx.PH}})
    assert not _compat.has_pytree_codegen(plain.graph)
    assert _compat.has_pytree_codegen(flat.graph)
    a, b = torch.randn(2), torch.randn(2)
    inputs = _compat.flat_inputs(flat, [{"a": a, "b": b}])
    assert [id(t) for t in inputs] == [id(a), id(b)]
    torch.testing.assert_close(torch.fx.Interpreter(flat).run(*inputs), a + b)
    assert _compat.flat_inputs(plain, [a]) == [a]


def test_lazy_graph_modules_are_recognised_where_torch_has_them() -> None:
    gm = torch.fx.symbolic_trace(WithConstants())
    assert not _compat.is_lazy_graph_module(WithConstants())
    lazy = _compat._private_class("torch.fx._lazy_graph_module", "_LazyGraphModule")
    if lazy is None:
        assert not _compat.is_lazy_graph_module(gm)
        return
    assert _compat.is_lazy_graph_module(lazy(gm, gm.graph))
    assert not _compat.is_lazy_graph_module(torch.fx.GraphModule(gm, gm.graph))


def test_placeholders_last_node_and_erased_nodes() -> None:
    graph = torch.fx.Graph()
    assert _compat.last_node(graph) is None
    x, y = graph.placeholder("x"), graph.placeholder("y")
    add = graph.call_function(torch.add, (x, y))
    assert _compat.placeholders(graph) == [x, y]
    assert _compat.placeholders(types.SimpleNamespace(nodes=graph.nodes)) == [x, y]  # no find_nodes
    assert _compat.last_node(graph) is add
    assert not _compat.node_erased(add)
    graph.erase_node(add)
    assert _compat.node_erased(add)
    assert _compat.last_node(graph) is y
    assert not _compat.node_erased(None)


def test_tree_leaves_and_tree_map() -> None:
    tree = {"a": (1, [2, 3]), "b": None}
    assert sorted(_compat.tree_leaves(tree), key=str) == sorted([1, 2, 3, None], key=str)
    assert _compat.tree_map(lambda v: v * 2 if isinstance(v, int) else v, tree) == {"a": (2, [4, 6]), "b": None}


@pytest.mark.parametrize(
    "dtype",
    [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128, torch.int64, torch.bool],
)
def test_default_tolerances_are_assert_close_s_documented_ones(dtype: torch.dtype) -> None:
    assert tuple(_compat.default_tolerances(dtype)) == _compat.documented_tolerances(dtype)


def test_module_stores_hooks_and_write_counts() -> None:
    model = torch.nn.Sequential(torch.nn.BatchNorm1d(3))
    norm = model[0]
    params, buffers, modules = _compat.module_stores(norm)
    assert params["weight"] is norm.weight and buffers["running_mean"] is norm.running_mean and modules == {}
    assert _compat.buffers_of(norm) is buffers
    assert _compat.children(model)["0"] is norm
    assert _compat.forward_hooks(norm) == ({}, {})
    handle = norm.register_forward_hook(lambda *args: None)
    assert len(_compat.forward_hooks(norm)[1]) == 1
    handle.remove()
    before = _compat.write_count(norm.running_mean)
    with torch.no_grad():
        norm.running_mean.add_(1)
    assert _compat.write_count(norm.running_mean) == before + 1
    assert {_compat.PARAMETERS, _compat.BUFFERS, _compat.MODULES} <= set(vars(norm))


def test_tmp_path_factory_is_the_session_s(request: pytest.FixtureRequest, tmp_path_factory) -> None:
    assert _compat.tmp_path_factory(request.config) is tmp_path_factory


# --- no private names elsewhere ----------------------------------------------------------------

# Private names of other libraries the package may use outside _compat, each with its reason.
NOT_PRIVATE = {
    "_fields": "namedtuple's public protocol (the underscore avoids field-name clashes)",
    "_fx_path": "torchrec's attribute, read when a module is not installed (a convention, not torch's)",
}


def _own_private_names(trees: list[ast.Module]) -> set[str]:
    """``_names`` pytest-fxtrace itself defines: functions, classes, attributes it sets."""
    own: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, (ast.Attribute, ast.Name)) and isinstance(node.ctx, ast.Store):
                own.add(node.attr if isinstance(node, ast.Attribute) else node.id)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                own.add(node.target.id)
    return {name for name in own if name.startswith("_")}


def _may_touch_private_names(name: str) -> bool:
    """The root ``_compat.py`` and a backend's own ``backends/<name>/_compat.py``, nothing else."""
    return name == "_compat.py" or re.fullmatch(r"backends/[a-z_]+/_compat\.py", name) is not None


def _private_name_uses(files: dict[str, ast.Module]) -> list[str]:
    """``file:line: what`` for each private name of another library touched outside the compat
    modules (``files``: the package's modules by path relative to the package)."""
    own = _own_private_names(list(files.values()))
    found = []
    for name, tree in files.items():
        if _may_touch_private_names(name):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                if isinstance(node, ast.ImportFrom) and node.level or all(
                    m == "pytest_fxtrace" or m.startswith("pytest_fxtrace.") for m in modules
                ):
                    continue  # our own modules
                names = [a.name for a in node.names] if isinstance(node, ast.ImportFrom) else []
                for part in [p for m in modules for p in m.split(".")] + names:
                    if part.startswith("_") and not part.startswith("__"):
                        found.append(f"{name}:{node.lineno}: import of {part}")
                continue
            attr = None
            if isinstance(node, ast.Attribute):
                attr = node.attr
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr", "setattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                attr = node.args[1].value
            if attr and attr.startswith("_") and not attr.startswith("__") and attr not in own | NOT_PRIVATE.keys():
                found.append(f"{name}:{node.lineno}: .{attr}")
    return found


def test_no_module_but_compat_touches_a_private_name_of_torch_pytest_or_numpy() -> None:
    # every module of the package, in every folder (backends/, snapshot/, plugin/, ...)
    files = {path.relative_to(PACKAGE).as_posix(): ast.parse(path.read_text()) for path in sorted(PACKAGE.rglob("*.py"))}
    assert "backends/export/backend.py" in files and "plugin/session.py" in files
    assert "backends/compile/_compat.py" in files  # a backend's own private names, in its folder
    assert _private_name_uses(files) == []


def test_a_private_name_anywhere_but_a_compat_module_is_found() -> None:
    reach = "import torch\nfrom torch._dynamo import config\nflag = torch._C._get_tracing_state()\n"
    places = [
        "_compat.py",
        "backends/compile/_compat.py",
        "backends/compile/session.py",
        "backends/compile/dynamo/_compat.py",
        "plugin/_compat.py",
        "compat.py",
    ]
    found = _private_name_uses({place: ast.parse(reach) for place in places})
    assert found == [
        f"{place}:{line}: {what}"
        for place in places[2:]
        for line, what in ((2, "import of _dynamo"), (3, "._get_tracing_state"), (3, "._C"))
    ]


def test_compiling_check_is_true_only_inside_a_compiled_frame() -> None:
    is_compiling = _compat.compiling_check()

    def f(x: torch.Tensor) -> torch.Tensor:
        return x + 1 if is_compiling() else x

    x = torch.zeros(2)
    assert not is_compiling()
    torch.testing.assert_close(f(x), x)
    torch.testing.assert_close(torch.compile(f, backend="eager")(x), x + 1)


# --- golden snapshots across torch releases ------------------------------------------------------

FLAGGED_MODEL = """
import pytest, torch

class Net(torch.nn.Module):
    def forward(self, x, mask=None):
        if mask is not None:
            x = x * mask
        return (x.relu() + 1).sum(-1)

@pytest.mark.traceable(snapshot=True)
def test_net():
    Net()(torch.randn(2, 3))
"""


def _snapshot_file(pytester: pytest.Pytester) -> Path:
    (path,) = pytester.path.glob("**/*.fx.txt")
    return path


def test_a_snapshot_differing_only_in_freed_variables_compares_equal(pytester: pytest.Pytester) -> None:
    # torch 2.1 writes `;  mask_1 = None` where 2.14 writes `;  mask_1 = _assert_is_none = None`
    pytester.makepyfile(test_m=FLAGGED_MODEL)
    assert pytester.runpytest_subprocess("-p", "no:cacheprovider", "--fx-snapshot-update").ret == 0
    path = _snapshot_file(pytester)
    text = path.read_text()
    other_release = text.replace("= _assert_is_none = None", "= None").replace("relu = None", "relu = add = None")
    assert other_release != text
    path.write_text(other_release)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert path.read_text() == other_release  # not rewritten


def test_a_snapshot_from_another_torch_that_differs_says_so(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_m=FLAGGED_MODEL)
    assert pytester.runpytest_subprocess("-p", "no:cacheprovider", "--fx-snapshot-update").ret == 0
    path = _snapshot_file(pytester)
    text = path.read_text()
    path.write_text(text.replace(f"# torch: {torch.__version__}", "# torch: 2.1.2").replace("relu", "sigmoid"))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [f"*the snapshot was written on torch 2.1.2, this is torch {torch.__version__}: torch releases can generate*"]
    )
    path.write_text(text.replace("relu", "sigmoid"))  # the same torch: no such line
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    assert "the snapshot was written on torch" not in result.stdout.str()


def test_fx_cleanup_codes_are_torch_fx_s_patcher_clean_up() -> None:
    codes = _compat.fx_cleanup_codes()
    names = {code.co_name for code in codes}
    assert names <= {"_new_patcher", "revert_all_patches", "__exit__"}
    assert all(code.co_filename.endswith("_symbolic_trace.py") for code in codes)
    assert "revert_all_patches" in names or "__exit__" in names  # every supported torch has _Patcher


def test_module_stack_entries_read_the_running_torch_s_form_and_torch_2_1_s() -> None:
    class Inner(torch.nn.Module):
        def forward(self, x):
            return x + 1

    class Outer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Inner()

        def forward(self, x):
            return self.inner(x)

    gm = torch.fx.symbolic_trace(Outer())
    (add,) = [n for n in gm.graph.nodes if n.op == "call_function"]
    entries = _compat.module_stack_entries(add.meta["nn_module_stack"])
    assert [(path, kind) for _, path, kind in entries][-1] == ("inner", Inner)
    assert _compat.module_stack_entries({"inner": Inner}) == [("inner", "inner", Inner)]  # torch 2.1
    assert _compat.module_stack_entries(None) == []


def test_graph_break_id_is_read_from_the_running_torch_s_dynamo_error() -> None:
    assert export_compat.graph_break_id(RuntimeError("plain")) is None
    if _compat.export_problem() is not None:
        pytest.skip(str(_compat.export_problem()))

    class Branch(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x
            return -x

    with pytest.raises(Exception) as caught:
        torch.export.export(Branch(), (torch.randn(2, 2),), strict=True)
    # every torch from the export floor (2.12) sets the graph-break type on the error
    assert getattr(caught.value, "gb_type", None) == "Data-dependent branching"
    assert export_compat.graph_break_id(caught.value) == "GB0170"
