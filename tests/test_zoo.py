"""Zoo mode (--fx-zoo) end to end: a registry's models become tests in a directory
with no test file, select with -k / filters, take the ini and command line options,
write the same records as marked tests, and run under pytest-xdist.

One project holds the registries; the sessions that several tests read (every registry
serially and under -n 2, a -k selection, filters as lists, the zoo from the ini) run once
for the module. The real-model tests (torchvision, timm) keep a directory of their own.
"""

from __future__ import annotations

import json
import random
import re
import textwrap
from pathlib import Path

import optional
import pytest
import torch
from shared_project import SharedProject, outcomes

from pytest_fxtrace.rng import RngState
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

# the tests of the shared project run in one xdist worker under --dist loadgroup (tox's)
shared = pytest.mark.xdist_group(__name__)


OPTIONS_REGISTRY = """
from zooreg import Registry

class WithOptions(Registry):
    def options(self, name):
        return {"leaf_modules": ["Ctl"]} if name == "branchy" else {}

REGISTRY = WithOptions()
"""

DICT_REGISTRY = "MODELS = {f'model_{i}': 'torchvision.models.resnet18' for i in range(10_000)}"

# every registry in one session: zooreg's four models, the gated pair, zooreg's with options
ALL = ("--fx-zoo=zooreg:REGISTRY", "--fx-zoo=gatereg:REGISTRY", "--fx-zoo=optreg:REGISTRY")
ZOO = "--fx-zoo=zooreg:REGISTRY"


def records(root: Path, name: str = "r.json") -> dict[str, dict]:
    document = json.loads((root / name).read_text())
    return {r["nodeid"]: r for r in document["results"]}


def zoo_records(root: Path, name: str, source: str = "zooreg:REGISTRY") -> dict[str, dict]:
    return {nodeid: r for nodeid, r in records(root, name).items() if nodeid.startswith(f"zoo/{source}::")}


def run(project: SharedProject, *args: str) -> pytest.RunResult:
    return project.runpytest_subprocess("-p", "no:cacheprovider", *args, env={"COLUMNS": "200"})


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> SharedProject:
    """A directory holding only registry modules: no test file, no conftest, no ini."""
    project = SharedProject(tmp_path_factory.mktemp("zoo"))
    project.makepyfile(
        zooreg=REGISTRY, gatereg=GATED_REGISTRY, optreg=OPTIONS_REGISTRY, dictreg=DICT_REGISTRY
    )
    return project


@pytest.fixture(scope="module")
def serial(project: SharedProject) -> pytest.RunResult:
    """Every registry's models in one process (-p no:xdist), -rA for each one's outcome."""
    return run(project, *ALL, "--fx-report=serial.json", "-p", "no:xdist", "-rA")


@pytest.fixture(scope="module")
def parallel(project: SharedProject) -> pytest.RunResult:
    return run(project, *ALL, "--fx-report=n2.json", "-n", "2", "-rA")


@pytest.fixture(scope="module")
def selected(project: SharedProject) -> pytest.RunResult:
    """-k over zooreg's models, with snapshots on and written."""
    return run(
        project, ZOO, "-k", "linear or branchy", "-o", "fxtrace_snapshot=true", "--fx-snapshot-update"
    )


@pytest.fixture(scope="module")
def listed(project: SharedProject) -> pytest.RunResult:
    """Filters and excludes written as timm users write them: commas, spaces."""
    return run(
        project,
        ZOO,
        "--fx-zoo-filter=linear,branchy, broken",
        "--fx-zoo-exclude=broken,nothing",
        "--collect-only",
        "-q",
    )


@pytest.fixture(scope="module")
def from_ini(project: SharedProject) -> pytest.RunResult:
    """The zoo from the ini: its filter a line list (one line holding two names) and the
    leaf modules that make branchy pass."""
    filters = "branchy\nlinear, kwargs_model"
    return run(
        project, "-o", "fxtrace_zoo=zooreg:REGISTRY", "-o", f"fxtrace_zoo_filter={filters}",
        "-o", "fxtrace_leaf_modules=Ctl", "-v",
    )  # fmt: skip


@shared
def test_zoo_checks_every_model_of_a_user_registry_without_test_files(project: SharedProject, serial) -> None:
    ran = outcomes(serial, nodeids=True)
    assert [ran[f"zoo/zooreg:REGISTRY::{name}"] for name in ("linear", "branchy", "broken", "kwargs_model")] == [
        "PASSED", "FAILED", "FAILED", "PASSED"
    ]  # fmt: skip
    by_id = zoo_records(project.path, "serial.json")
    assert sorted(by_id) == [
        "zoo/zooreg:REGISTRY::branchy",
        "zoo/zooreg:REGISTRY::broken",
        "zoo/zooreg:REGISTRY::kwargs_model",
        "zoo/zooreg:REGISTRY::linear",
    ]
    assert by_id["zoo/zooreg:REGISTRY::linear"]["status"] == "passed"
    assert by_id["zoo/zooreg:REGISTRY::kwargs_model"]["status"] == "passed"
    branchy = by_id["zoo/zooreg:REGISTRY::branchy"]
    assert (branchy["status"], branchy["category"], branchy["module"]) == (
        "untraceable",
        "control-flow",
        "ctl",
    )
    assert branchy["location"]["path"] == "zooreg.py"
    assert by_id["zoo/zooreg:REGISTRY::broken"]["status"] == "model-error"
    serial.stdout.fnmatch_lines(
        [
            "*zoo/zooreg:REGISTRY::broken*",
            "broken could not be built: RuntimeError: this model needs a config file*",
        ]
    )


@shared
def test_zoo_models_select_with_k_filter_and_exclude(project: SharedProject, selected) -> None:
    selected.assert_outcomes(passed=1, failed=1, deselected=2)
    result = run(project, ZOO, "--fx-zoo-filter=*n*", "--fx-zoo-exclude=br*", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["zoo/zooreg:REGISTRY::linear PASSED*"])


@shared
def test_zoo_filters_and_excludes_split_on_commas_as_timm_users_write_them(listed, from_ini) -> None:
    assert listed.ret == 0, listed.stdout.str()
    listed.stdout.fnmatch_lines(
        ["zoo/zooreg:REGISTRY::linear", "zoo/zooreg:REGISTRY::branchy", "2 tests collected*"]
    )
    from_ini.stdout.fnmatch_lines(
        ["zoo/zooreg:REGISTRY::linear PASSED*", "zoo/zooreg:REGISTRY::kwargs_model PASSED*"]
    )


@shared
def test_a_zoo_filter_that_matches_no_model_says_so_with_the_source_and_a_close_match(
    project: SharedProject,
) -> None:
    result = run(project, ZOO, "--fx-zoo-filter=lineer,resnet*")
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
    result = run(project, ZOO, "--fx-zoo-filter=linear,lineer", "-W", "error")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "*ERROR collecting zoo/zooreg:REGISTRY*",
            "pytest-fxtrace: --fx-zoo-filter 'lineer' matches none of the 4 *",
        ]
    )
    assert "plugin/zoo.py" not in result.stdout.str()


@shared
def test_the_terminal_counts_the_zoo_s_models_as_collected_tests(listed, selected) -> None:
    assert listed.ret == 0
    listed.stdout.fnmatch_lines(["zoo/zooreg:REGISTRY::linear", "2 tests collected in *"])
    selected.stdout.fnmatch_lines(
        ["collected 4 items / 2 deselected / 2 selected", "*1 failed, 1 passed, 2 deselected*"]
    )


@shared
def test_zoo_from_ini_takes_the_ini_options(from_ini) -> None:
    from_ini.assert_outcomes(passed=3)
    from_ini.stdout.fnmatch_lines(["zoo/zooreg:REGISTRY::branchy PASSED*"])


@shared
def test_zoo_registry_options_apply_per_model(serial) -> None:
    ran = outcomes(serial, nodeids=True)
    assert ran["zoo/optreg:REGISTRY::branchy"] == "PASSED"  # leaf_modules=["Ctl"] for branchy alone
    assert ran["zoo/zooreg:REGISTRY::branchy"] == ran["zoo/optreg:REGISTRY::broken"] == "FAILED"


@shared
@pytest.mark.slow  # test_baseline.py and test_isolate.py run zoo items under -n 2 too
def test_zoo_records_are_the_same_under_xdist(project: SharedProject, serial, parallel) -> None:
    assert outcomes(parallel, nodeids=True) == outcomes(serial, nodeids=True)
    ran = outcomes(serial, nodeids=True)
    assert (
        sorted(ran[nodeid] for nodeid in zoo_records(project.path, "serial.json"))
        == ["FAILED"] * 2 + ["PASSED"] * 2
    )
    a, b = records(project.path, "serial.json"), records(project.path, "n2.json")
    for table in (a, b):
        for record in table.values():
            record.pop("trace_seconds")
    assert a == b


@shared
def test_zoo_source_that_is_not_a_registry_is_a_usage_error(project: SharedProject) -> None:
    result = run(project, "--fx-zoo=zooreg:Registry.names")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--fx-zoo=zooreg:Registry.names is a function, not a registry: <function Registry*>",
            "a registry is an object (or a class) with names() -> list?str?, build(name) -> nn.Module and *",
        ]
    )
    result = run(project, "--fx-zoo=resnets")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--fx-zoo=resnets: not a registry; use timm, torchvision*"])


@shared
def test_a_dict_of_models_as_registry_is_one_short_usage_error_naming_its_type_and_the_three_methods(
    project: SharedProject,
) -> None:
    result = run(project, "--fx-zoo=dictreg:MODELS")
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
    picks = [
        "squeezenet1_1",
        "lraspp_mobilenet_v3_large",
        "ssdlite320_mobilenet_v3_large",
        "r3d_18",
        "raft_small",
        "quantized_mobilenet_v2",
    ]
    filters = [f"--fx-zoo-filter={name}" for name in picks]
    result = pytester.runpytest_subprocess("--fx-zoo=torchvision", *filters, "--fx-report=r.json", "-n", "2")
    by_id = records(pytester.path)
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
    assert records(pytester.path, "a.json")["zoo/timm::nest_tiny"]["status"] == "untraceable", (
        plain.stdout.str()
    )
    notrace = pytester.runpytest_subprocess(
        "--fx-zoo=timm", "--fx-zoo-filter=nest_tiny", "--fx-zoo-notrace", "--fx-report=b.json"
    )
    notrace.assert_outcomes(passed=1)


@shared
def test_zoo_snapshots_live_under_zoo_fx_snapshots(project: SharedProject, selected) -> None:
    selected.assert_outcomes(passed=1, failed=1, deselected=2)  # branchy fails: no snapshot
    written = [p.relative_to(project.path).as_posix() for p in project.path.rglob("*.fx.txt")]
    assert len(written) == 1 and written[0].startswith("zoo/fx_snapshots/zooreg.REGISTRY~"), written
    assert written[0].endswith("/linear.Linear.fx.txt")


# the rootdir's conftest.py hooks, each writing what it saw to a file: outside -s as under it
HOOKS_CONFTEST = """
from pathlib import Path


def pytest_fxtrace_compare(actual, expected, rtol, atol, config):
    with Path("hooks.txt").open("a") as seen:
        seen.write("compare\\n")


def pytest_fxtrace_check_finished(item, report):
    with Path("hooks.txt").open("a") as seen:
        seen.write(f"finished {item.nodeid} {report.status}\\n")
"""


def test_a_rootdir_conftest_s_hooks_run_for_zoo_models(tmp_path: Path) -> None:
    # the zoo's items sit in a virtual folder pytest never collects: its conftest lookup found none
    project = SharedProject(tmp_path)
    project.makepyfile(zooreg=REGISTRY)
    project.makeconftest(HOOKS_CONFTEST)
    run(project, ZOO, "-p", "no:xdist", "-k", "linear or broken")
    seen = (tmp_path / "hooks.txt").read_text().splitlines()
    assert seen == [
        "compare", "finished zoo/zooreg:REGISTRY::linear passed", "finished zoo/zooreg:REGISTRY::broken model-error"
    ], seen  # fmt: skip


@shared
def test_a_zoo_model_s_verdict_is_the_same_whichever_models_run_beside_it(
    project: SharedProject, serial, parallel
):
    """alpha alone, after omega (and the other registries' models), under -n 2 and in an
    isolated child: its weights and inputs come from its name, not from what was built
    before it."""
    run(project, "--fx-zoo=gatereg:REGISTRY", "--fx-report=alone.json", "-k", "alpha")
    run(project, "--fx-zoo=gatereg:REGISTRY", "--fx-report=isolated.json", "--fx-isolate")
    alpha = {}
    for name in ("alone", "serial", "n2", "isolated"):
        record = records(project.path, f"{name}.json")["zoo/gatereg:REGISTRY::alpha"]
        record.pop("trace_seconds")
        alpha[name] = record
    assert all(record == alpha["alone"] for record in alpha.values()), {
        r: a["status"] for r, a in alpha.items()
    }


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


@pytest.mark.parametrize(("source", "meant"), [("torchvison", "torchvision"), ("Timm", "timm"), ("transfomers", "transformers")])
def test_a_misspelt_zoo_source_is_a_usage_error_that_says_which_registry_was_meant(source, meant) -> None:
    from pytest_fxtrace.options import OptionError
    from pytest_fxtrace.zoo.registries import load_registry

    with pytest.raises(OptionError) as raised:
        load_registry(source)
    first = str(raised.value).splitlines()[0]
    assert first.startswith(f"--fx-zoo={source}: not a registry (did you mean {meant!r}?)"), first


@shared
def test_a_misspelt_zoo_source_says_did_you_mean_on_the_command_line(project: SharedProject) -> None:
    result = run(project, "--fx-zoo=torchvison")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--fx-zoo=torchvison: not a registry (did you mean 'torchvision'?); use timm, *"])


def test_progress_duration_reads_as_a_person_says_it() -> None:
    from pytest_fxtrace.plugin.progress import duration

    assert [duration(s) for s in (0.4, 8, 60, 552, 3600, 3900)] == ["0 s", "8 s", "1 min", "9 min 12 s", "1 h", "1 h 5 min"]


@shared
@pytest.mark.parametrize("workers", [("-p", "no:xdist"), ("-n", "2")], ids=["serial", "n2"])
def test_a_long_zoo_run_prints_progress_lines_without_v(project: SharedProject, workers) -> None:
    """With an interval shorter than a model's check, a line after each model but the last:
    models done / total, failures so far, time so far and left."""
    result = run(project, ZOO, "--fx-zoo-progress=0.000001", *workers)
    lines = [line for line in result.outlines if line.startswith("fxtrace zoo:")]
    assert [line.split(" models")[0] for line in lines] == [f"fxtrace zoo: {n}/4" for n in (1, 2, 3)], result.stdout.str()
    assert all(re.fullmatch(r"fxtrace zoo: \d/4 models \(\d+%\), [0-2] failed, \d+ s so far, about \d+ s left", line) for line in lines), lines
    assert lines[-1].startswith("fxtrace zoo: 3/4 models (75%)")
    assert "2 failed" in lines[-1] or "1 failed" in lines[-1]  # broken and branchy fail; the last may be either
    quiet = run(project, ZOO, "-p", "no:xdist")  # the default interval (60 s): a short run prints none
    assert not [line for line in quiet.outlines if line.startswith("fxtrace zoo:")]
    bad = run(project, ZOO, "--fx-zoo-progress=soon")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--fx-zoo-progress=soon: expected seconds (0 or more), e.g. --fx-zoo-progress=30"])
