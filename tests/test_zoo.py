"""Zoo mode (--fx-zoo) end to end: a registry's models become tests in a directory
with no test file, select with -k / filters, take the ini and command line options,
write the same records as marked tests, and run under pytest-xdist."""

from __future__ import annotations

import json
import random
import textwrap

import optional
import pytest
import torch

from pytest_fxtrace.state import RngState
from pytest_fxtrace.zoo.registries import build_case

REGISTRY = textwrap.dedent(
    """
    import torch


    class Ctl(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x
            return -x


    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ctl = Ctl()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x):
            return self.ctl(self.lin(x))


    class Shifted(torch.nn.Module):
        def forward(self, x, *, shift=None):
            return x * 2 + shift


    class Registry:
        def names(self):
            return ["linear", "branchy", "broken", "kwargs_model"]

        def build(self, name):
            if name == "broken":
                raise RuntimeError("this model needs a config file")
            if name == "linear":
                return torch.nn.Linear(3, 2)
            if name == "kwargs_model":
                return Shifted()
            return Outer()

        def example_inputs(self, name, model):
            if name == "kwargs_model":
                return (torch.randn(2, 3),), {"shift": torch.ones(3)}
            return (torch.randn(2, 3),)


    REGISTRY = Registry()
    """
)


# alpha's verdict hangs on one random weight: model-error when it is not positive, passed
# when it is; omega, built before it, draws from the same global stream
GATED_REGISTRY = textwrap.dedent(
    """
    import torch


    class Gate(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(()))

        def forward(self, x):
            torch._assert(self.w > 0, "the gate is closed")
            return x * self.w


    class Registry:
        def names(self):
            return ["omega", "alpha"]

        def build(self, name):
            return torch.nn.Linear(64, 64) if name == "omega" else Gate()

        def example_inputs(self, name, model):
            return (torch.randn(2, 64),)


    REGISTRY = Registry()
    """
)


@pytest.fixture
def zoo_dir(pytester: pytest.Pytester) -> pytest.Pytester:
    """A directory holding only a registry module: no test file, no conftest."""
    pytester.makepyfile(zooreg=REGISTRY)
    pytester.syspathinsert()
    return pytester


def records(pytester: pytest.Pytester, name: str = "r.json") -> dict[str, dict]:
    document = json.loads((pytester.path / name).read_text())
    return {r["nodeid"]: r for r in document["results"]}


def test_zoo_checks_every_model_of_a_user_registry_without_test_files(zoo_dir):
    result = zoo_dir.runpytest_subprocess("--fx-zoo=zooreg:REGISTRY", "--fx-report=r.json")
    result.assert_outcomes(passed=2, failed=2)
    by_id = records(zoo_dir)
    assert sorted(by_id) == [
        "zoo/zooreg:REGISTRY::branchy",
        "zoo/zooreg:REGISTRY::broken",
        "zoo/zooreg:REGISTRY::kwargs_model",
        "zoo/zooreg:REGISTRY::linear",
    ]
    assert by_id["zoo/zooreg:REGISTRY::linear"]["status"] == "passed"
    assert by_id["zoo/zooreg:REGISTRY::kwargs_model"]["status"] == "passed"
    branchy = by_id["zoo/zooreg:REGISTRY::branchy"]
    assert (branchy["status"], branchy["category"], branchy["module"]) == ("untraceable", "control-flow", "ctl")
    assert branchy["location"]["path"] == "zooreg.py"
    assert by_id["zoo/zooreg:REGISTRY::broken"]["status"] == "model-error"
    result.stdout.fnmatch_lines(
        [
            "*zoo/zooreg:REGISTRY::broken*",
            "broken could not be built: RuntimeError: this model needs a config file*",
        ]
    )


def test_zoo_models_select_with_k_filter_and_exclude(zoo_dir):
    result = zoo_dir.runpytest_subprocess("--fx-zoo=zooreg:REGISTRY", "-k", "linear or branchy", "-v")
    result.assert_outcomes(passed=1, failed=1, deselected=2)
    result = zoo_dir.runpytest_subprocess(
        "--fx-zoo=zooreg:REGISTRY", "--fx-zoo-filter=*n*", "--fx-zoo-exclude=br*", "-v"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["zoo/zooreg:REGISTRY::linear PASSED*"])


def test_zoo_filters_and_excludes_split_on_commas_as_timm_users_write_them(zoo_dir):
    result = zoo_dir.runpytest_subprocess(
        "--fx-zoo=zooreg:REGISTRY", "--fx-zoo-filter=linear,branchy, broken", "--fx-zoo-exclude=broken,nothing",
        "--collect-only", "-q",
    )
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["zoo/zooreg:REGISTRY::linear", "zoo/zooreg:REGISTRY::branchy", "2 tests collected*"])
    zoo_dir.makeini("[pytest]\nfxtrace_zoo = zooreg:REGISTRY\nfxtrace_zoo_filter = linear, kwargs_model\n")
    result = zoo_dir.runpytest_subprocess("--collect-only", "-q")
    result.stdout.fnmatch_lines(["zoo/zooreg:REGISTRY::linear", "zoo/zooreg:REGISTRY::kwargs_model", "2 tests collected*"])


def test_a_zoo_filter_that_matches_no_model_says_so_with_the_source_and_a_close_match(zoo_dir):
    result = zoo_dir.runpytest_subprocess("--fx-zoo=zooreg:REGISTRY", "--fx-zoo-filter=lineer,resnet*")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines(
        [
            "*PytestCollectionWarning: pytest-fxtrace: --fx-zoo-filter 'lineer' matches none of the 4 models "
            "of --fx-zoo=zooreg:REGISTRY; close: linear",
            "*PytestCollectionWarning: pytest-fxtrace: --fx-zoo-filter 'resnet*' matches none of the 4 models "
            "of --fx-zoo=zooreg:REGISTRY",
        ]
    )
    # under -W error, a collection error of the registry with that line and none of our frames
    result = zoo_dir.runpytest_subprocess("--fx-zoo=zooreg:REGISTRY", "--fx-zoo-filter=linear,lineer", "-W", "error")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        ["*ERROR collecting zoo/zooreg:REGISTRY*", "pytest-fxtrace: --fx-zoo-filter 'lineer' matches none of the 4 *"]
    )
    assert "plugin/zoo.py" not in result.stdout.str()


def test_the_terminal_counts_the_zoo_s_models_as_collected_tests(zoo_dir):
    result = zoo_dir.runpytest_subprocess("--fx-zoo=zooreg:REGISTRY", "--collect-only", "-q")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["zoo/zooreg:REGISTRY::linear", "4 tests collected in *"])
    result = zoo_dir.runpytest_subprocess("--fx-zoo=zooreg:REGISTRY", "-k", "linear")
    result.stdout.fnmatch_lines(["collected 4 items / 3 deselected / 1 selected", "*1 passed, 3 deselected*"])


def test_zoo_from_ini_takes_the_ini_options(zoo_dir):
    zoo_dir.makeini(
        """
        [pytest]
        fxtrace_zoo = zooreg:REGISTRY
        fxtrace_zoo_filter =
            branchy
            linear
        fxtrace_leaf_modules = Ctl
        """
    )
    result = zoo_dir.runpytest_subprocess("-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["zoo/zooreg:REGISTRY::branchy PASSED*"])


def test_zoo_registry_options_apply_per_model(zoo_dir):
    zoo_dir.makepyfile(
        optreg="""
        from zooreg import Registry

        class WithOptions(Registry):
            def options(self, name):
                return {"leaf_modules": ["Ctl"]} if name == "branchy" else {}

        REGISTRY = WithOptions()
        """
    )
    result = zoo_dir.runpytest_subprocess("--fx-zoo=optreg:REGISTRY", "-k", "branchy")
    result.assert_outcomes(passed=1, deselected=3)


@pytest.mark.slow  # test_baseline.py and test_isolate.py run zoo items under -n 2 too
def test_zoo_records_are_the_same_under_xdist(zoo_dir):
    serial = zoo_dir.runpytest_subprocess("--fx-zoo=zooreg:REGISTRY", "--fx-report=a.json", "-p", "no:xdist")
    serial.assert_outcomes(passed=2, failed=2)
    parallel = zoo_dir.runpytest_subprocess("--fx-zoo=zooreg:REGISTRY", "--fx-report=b.json", "-n", "2")
    parallel.assert_outcomes(passed=2, failed=2)
    a, b = records(zoo_dir, "a.json"), records(zoo_dir, "b.json")
    for table in (a, b):
        for record in table.values():
            record.pop("trace_seconds")
    assert a == b


def test_zoo_source_that_is_not_a_registry_is_a_usage_error(zoo_dir):
    result = zoo_dir.runpytest_subprocess("--fx-zoo=zooreg:Registry.names")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--fx-zoo=zooreg:Registry.names is a function, not a registry: <function Registry*>",
            "a registry is an object (or a class) with names() -> list?str?, build(name) -> nn.Module and *",
        ]
    )
    result = zoo_dir.runpytest_subprocess("--fx-zoo=resnets")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--fx-zoo=resnets: not a registry; use timm, torchvision*"])


def test_a_dict_of_models_as_registry_is_one_short_usage_error_naming_its_type_and_the_three_methods(zoo_dir):
    zoo_dir.makepyfile(dictreg="MODELS = {f'model_{i}': 'torchvision.models.resnet18' for i in range(10_000)}")
    result = zoo_dir.runpytest_subprocess("--fx-zoo=dictreg:MODELS")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: pytest-fxtrace: --fx-zoo=dictreg:MODELS is a dict, not a registry: {'model_0': *...",
            "a registry is an object (or a class) with names() -> list[str], build(name) -> nn.Module "
            "and example_inputs(name, model) -> tuple | (args, kwargs)",
            "for a dict of models, wrap it in a class: names() returns its keys, build(name) builds one",
        ]
    )
    assert "model_9999" not in result.stderr.str()
    assert max(len(line) for line in result.stderr.lines) < 150, result.stderr.str()


# needs(), not importorskip: torchvision and timm import torch._dynamo, and pytester puts
# sys.modules back after the test, so a later import of it in this process would register
# torch's _inductor_test library twice (RuntimeError: Only a single TORCH_LIBRARY ...)
@pytest.mark.slow
@optional.needs("torchvision")
def test_zoo_torchvision_families_build_and_run_without_downloads(pytester):
    """One model per torchvision family, in an empty directory; none is a model-error
    (wrong input size, missing weights) and nothing is downloaded."""
    pytester.syspathinsert()
    picks = ["squeezenet1_1", "lraspp_mobilenet_v3_large", "ssdlite320_mobilenet_v3_large", "r3d_18",
             "raft_small", "quantized_mobilenet_v2"]
    filters = [f"--fx-zoo-filter={name}" for name in picks]
    result = pytester.runpytest_subprocess("--fx-zoo=torchvision", *filters, "--fx-report=r.json", "-n", "2")
    by_id = records(pytester)
    assert sorted(by_id) == sorted(f"zoo/torchvision::{name}" for name in picks), result.stdout.str()
    statuses = {nodeid: r["status"] for nodeid, r in by_id.items()}
    assert "model-error" not in statuses.values(), statuses


@pytest.mark.slow
@optional.needs("timm")
def test_zoo_timm_notrace_registry_as_options(pytester):
    """nest_tiny needs timm's autowrapped deblockify: untraceable without
    --fx-zoo-notrace, passed with it."""
    pytester.syspathinsert()
    plain = pytester.runpytest_subprocess("--fx-zoo=timm", "--fx-zoo-filter=nest_tiny", "--fx-report=a.json")
    assert records(pytester, "a.json")["zoo/timm::nest_tiny"]["status"] == "untraceable", plain.stdout.str()
    notrace = pytester.runpytest_subprocess(
        "--fx-zoo=timm", "--fx-zoo-filter=nest_tiny", "--fx-zoo-notrace", "--fx-report=b.json"
    )
    notrace.assert_outcomes(passed=1)


def test_zoo_snapshots_live_under_zoo_fx_snapshots(zoo_dir):
    result = zoo_dir.runpytest_subprocess(
        "--fx-zoo=zooreg:REGISTRY", "-k", "linear", "-o", "fxtrace_snapshot=true", "--fx-snapshot-update"
    )
    result.assert_outcomes(passed=1, deselected=3)
    written = [p.relative_to(zoo_dir.path).as_posix() for p in zoo_dir.path.rglob("*.fx.txt")]
    assert len(written) == 1 and written[0].startswith("zoo/fx_snapshots/zooreg.REGISTRY~"), written
    assert written[0].endswith("/linear.Linear.fx.txt")


def test_a_zoo_model_s_verdict_is_the_same_whichever_models_run_beside_it(pytester):
    """alpha alone, after omega, under -n 2 and in an isolated child: its weights and
    inputs come from its name, not from what was built before it."""
    pytester.makepyfile(gatereg=GATED_REGISTRY)
    pytester.syspathinsert()
    runs = {
        "alone": ("-k", "alpha"),
        "after_omega": ("-k", "alpha or omega"),
        "xdist": ("-n", "2"),
        "isolated": ("--fx-isolate",),
    }
    alpha = {}
    for run, extra in runs.items():
        pytester.runpytest_subprocess("--fx-zoo=gatereg:REGISTRY", f"--fx-report={run}.json", *extra)
        record = records(pytester, f"{run}.json")["zoo/gatereg:REGISTRY::alpha"]
        record.pop("trace_seconds")
        alpha[run] = record
    assert all(record == alpha["alone"] for record in alpha.values()), {r: a["status"] for r, a in alpha.items()}


class DrawingRegistry:
    """Every build and input draws from torch's, Python's and NumPy's global streams."""

    def names(self) -> list[str]:
        return ["alpha", "omega"]

    def build(self, name: str) -> torch.nn.Module:
        np = pytest.importorskip("numpy")
        model = torch.nn.Linear(4, 4)
        model.register_buffer("drawn", torch.tensor([random.random(), float(np.random.rand())]))
        return model

    def example_inputs(self, name: str, model: torch.nn.Module) -> tuple[torch.Tensor, ...]:
        return (torch.randn(2, 4),)


def test_build_case_gives_a_model_the_same_weights_whatever_was_built_before():
    registry = DrawingRegistry()
    first = build_case(registry, "alpha")
    build_case(registry, "omega")
    torch.randn(100), random.random()  # the test's own draws between two builds
    again = build_case(registry, "alpha")
    assert torch.equal(first.model.weight, again.model.weight)
    assert torch.equal(first.model.drawn, again.model.drawn)
    assert torch.equal(first.args[0], again.args[0])
    assert not torch.equal(first.model.weight, build_case(registry, "omega").model.weight)


def test_build_case_leaves_every_global_random_stream_where_it_was():
    np = pytest.importorskip("numpy")
    saved = RngState.capture()
    try:
        # torch's CPU generator alone: torch.manual_seed imports torch._dynamo (see above)
        torch.default_generator.manual_seed(7), random.seed(7), np.random.seed(7)
        expected = (torch.rand(3), random.random(), np.random.rand())
        torch.default_generator.manual_seed(7), random.seed(7), np.random.seed(7)
        build_case(DrawingRegistry(), "alpha")
        drawn = (torch.rand(3), random.random(), np.random.rand())
    finally:
        saved.restore()
    assert torch.equal(drawn[0], expected[0]) and drawn[1:] == expected[1:], (drawn, expected)
