"""Loading the plugin costs no torch import: only a run that checks a model pays for it.

pytest loads ``pytest_fxtrace.plugin`` in every run of an environment where
pytest-fxtrace is installed, including a project without a single model test and
the pytest-xdist controller, which collects and runs nothing. Importing torch there
(~3 s) delays every such run, and under ``-n`` it sits before the workers start.
Each project below records, per process, whether torch was imported by the end of
its session (``pytest_sessionfinish``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from forked_pytest import run_pytest

from pytest_fxtrace.importing import find_module
from pytest_fxtrace.options import OptionError, check_options
from pytest_fxtrace.report.document import installed_torch_version

# what a session imports is what most of this module checks: their sessions start as real
# processes. The usage errors' sessions are forked (tests/forked_pytest.py): what they check
# is the error, not the imports, and a fresh session paid a torch import in each process
# that collected test_net (both workers under -n 2)
fresh = pytest.mark.fresh_process

WHO_IMPORTED_TORCH = """
import json, sys
from pathlib import Path

def pytest_sessionfinish(session):
    config = session.config
    if hasattr(config, "workerinput"):
        who = config.workerinput["workerid"]
    else:
        who = "controller" if config.pluginmanager.hasplugin("dsession") else "serial"
    Path(__file__).with_name(f"torch-{who}.json").write_text(json.dumps("torch" in sys.modules))
"""

PLAIN_TEST = "def test_plain():\n    assert 1\n"

MARKED_TEST = """
import pytest, torch

class Net(torch.nn.Module):
    def forward(self, x):
        return x.relu() + 1

@pytest.mark.traceable
def test_net():
    Net()(torch.randn(2, 3))
"""

USER_TRACER = """
import torch.fx

class MyTracer(torch.fx.Tracer):
    pass
"""


def torch_imported(project: Path) -> dict[str, bool]:
    """``{process: whether it had imported torch}``: serial, controller, gw0, gw1."""
    return {path.stem[len("torch-") :]: json.loads(path.read_text()) for path in project.glob("torch-*.json")}


def report_without_timings(path: Path) -> dict:
    document = json.loads(path.read_text())
    for record in document["results"]:
        record.pop("trace_seconds")
    document.pop("durations", None)  # each test's measured seconds
    return document


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(WHO_IMPORTED_TORCH)
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    for old in pytester.path.glob("torch-*.json"):
        old.unlink()
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def run_forked(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """``run`` forked from the zygote (tests/forked_pytest.py) in a fresh-process test: for a
    reference run whose imports the test does not read (the zygote has torch imported)."""
    for old in pytester.path.glob("torch-*.json"):
        old.unlink()
    basetemp = pytester.path / f"forked-{len(list(pytester.path.glob('forked-*')))}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(pytester.path), os.environ.get("PYTHONPATH")]))}
    argv = ["-p", "no:cacheprovider", f"--basetemp={basetemp}", *args]
    done = run_pytest(argv, cwd=pytester.path, env=env, timeout=600)
    return pytest.RunResult(done.returncode, done.stdout.splitlines(), done.stderr.splitlines(), done.duration)


def test_importing_the_plugin_imports_no_torch():
    code = "import sys, pytest_fxtrace.plugin; print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]"


# the public API's names, then a check whose outputs equal eager's, in one process that
# imports torch once (a process paid ~3 CPU s to start and import torch): each step prints
# what its process had imported by its end, each test reads its step's output
FIRST_USES = """
import sys
import pytest_fxtrace
before = "torch" in sys.modules
from pytest_fxtrace import TraceReport, Tracer, check_traceable, symbolic_trace
print(before, "torch" in sys.modules, check_traceable.__module__, Tracer.__module__)
print(sorted(name for name in pytest_fxtrace.__all__ if not hasattr(pytest_fxtrace, name)))
print(STEP, flush=True)
import torch
report = check_traceable(torch.nn.Linear(3, 2), torch.ones(1, 3))
print(report.status, "torch.distributed.tensor" in sys.modules)
""".replace("STEP", repr("-- next step --"))

# the tests of the first uses share their process: one xdist worker runs them, under --dist
# loadgroup (tox's)
first_use = pytest.mark.xdist_group(f"{__name__}-first-uses")


@pytest.fixture(scope="module")
def first_uses() -> list[str]:
    """Each step's output."""
    proc = subprocess.run([sys.executable, "-c", FIRST_USES], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.split("-- next step --\n")


@first_use
def test_the_public_api_still_imports_the_engine_on_first_use(first_uses: list[str]):
    assert first_uses[0].splitlines() == ["False True pytest_fxtrace.entry pytest_fxtrace.backends.fx.tracer", "[]"]


@first_use
def test_a_check_whose_outputs_equal_eager_s_skips_assert_close_s_slow_first_import(first_uses: list[str]):
    # torch.testing.assert_close imports torch.distributed.tensor on its first call (1.4 s
    # of every process that checks a model); bit-identical outputs are told by torch.equal
    assert first_uses[1].split() == ["passed", "False"]


def test_a_mismatch_is_located_without_importing_torchdynamo(tmp_path: Path):
    # the node's stack traces the diagnosis reads are the plugin's own: torch.fx's
    # record_stack_traces imports torch._inductor and TorchDynamo on first use (4.5 s)
    script = tmp_path / "noisy.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys, torch
            from pytest_fxtrace import check_traceable

            class Noisy(torch.nn.Module):
                def forward(self, x):
                    return x * torch.rand(3)

            before = "torch._dynamo" in sys.modules
            report = check_traceable(Noisy(), torch.ones(1, 3))
            print(report.status, report.location, before or "torch._dynamo" not in sys.modules)
            """
        )
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert proc.stdout.split() == ["mismatch", "noisy.py:7", "True"], proc.stdout + proc.stderr


@fresh
def test_a_project_without_model_tests_never_imports_torch(project: pytest.Pytester):
    project.makepyfile(test_plain=PLAIN_TEST)
    result = run(project, "--fx-report=r.json")
    result.assert_outcomes(passed=1)
    assert torch_imported(project.path) == {"serial": False}
    # the report is still written, empty, naming the torch a check would have used
    assert json.loads((project.path / "r.json").read_text()) == {
        "version": 1,
        "torch": str(torch.__version__),
        "results": [],
    }


@fresh
def test_xdist_without_model_tests_imports_torch_nowhere(project: pytest.Pytester):
    project.makepyfile(test_plain=PLAIN_TEST)
    run(project, "--fx-report=serial.json").assert_outcomes(passed=1)
    result = run(project, "-n", "2", "--fx-report=n2.json")
    result.assert_outcomes(passed=1)
    assert torch_imported(project.path) == {"controller": False, "gw0": False, "gw1": False}
    assert (project.path / "n2.json").read_bytes() == (project.path / "serial.json").read_bytes()


@fresh
def test_the_xdist_controller_of_a_model_suite_imports_no_torch(project: pytest.Pytester):
    project.makepyfile(test_net=MARKED_TEST, test_plain=PLAIN_TEST)
    serial = run_forked(project, "--fx-report=serial.json")  # the reference: its imports are not read
    serial.assert_outcomes(passed=2)
    result = run(project, "-n", "2", "--fx-report=n2.json")
    result.assert_outcomes(passed=2)
    imported = torch_imported(project.path)
    assert imported.pop("controller") is False
    assert True in imported.values()  # the worker that ran test_net
    # the controller's report and summary say what the serial run's do, torch version included
    n2 = report_without_timings(project.path / "n2.json")
    assert n2 == report_without_timings(project.path / "serial.json")
    assert n2["torch"] == str(torch.__version__)
    assert [(r["nodeid"], r["status"]) for r in n2["results"]] == [("test_net.py::test_net", "passed")]
    result.stdout.fnmatch_lines(["*fxtrace summary*", "1 check: 1 passed"])


@fresh
def test_a_tracer_named_in_the_ini_file_is_imported_by_the_workers_only(project: pytest.Pytester):
    project.makepyfile(usertracers=USER_TRACER, test_net=MARKED_TEST)
    project.makeini("[pytest]\nfxtrace_tracer = usertracers:MyTracer\n")
    project.syspathinsert()
    result = run(project, "-n", "2")
    result.assert_outcomes(passed=1)
    assert torch_imported(project.path)["controller"] is False


# -- usage errors found where the options are resolved ------------------------------------


@pytest.mark.parametrize("mode", [(), ("-n", "2")], ids=["serial", "n2"])
def test_a_tracer_class_missing_from_its_module_is_a_usage_error(project: pytest.Pytester, mode):
    project.makepyfile(test_net=MARKED_TEST)
    project.makeini("[pytest]\nfxtrace_tracer = os:NoSuchTracer\n")  # the module exists
    result = run(project, *mode)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: pytest-fxtrace: ini fxtrace_tracer: tracer: module 'os' has no attribute 'NoSuchTracer'*"]
    )
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize("mode", [(), ("-n", "2")], ids=["serial", "n2"])
def test_an_unimportable_tracer_in_a_marker_is_a_usage_error_naming_the_test(project: pytest.Pytester, mode):
    project.makepyfile(
        test_m="import pytest\n@pytest.mark.traceable(tracer='nowhere.mod:Tracer')\ndef test_m():\n    pass\n"
    )
    result = run(project, *mode)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: test_m.py::test_m: @pytest.mark.traceable: tracer: cannot import module 'nowhere.mod'*"]
    )
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_a_misspelt_leaf_class_in_a_marker_is_a_usage_error_under_xdist(project: pytest.Pytester):
    project.makepyfile(
        test_m=MARKED_TEST.replace("@pytest.mark.traceable", "@pytest.mark.traceable(leaf_modules=['Relu'])")
    )
    result = run(project, "-n", "2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: test_m.py::test_net: @pytest.mark.traceable: leaf_modules: 'Relu' matches no nn.Module class*"]
    )


def test_a_missing_tracer_module_is_found_before_any_test_runs(project: pytest.Pytester):
    project.makepyfile(test_plain=PLAIN_TEST)
    project.makeini("[pytest]\nfxtrace_tracer = mypkg.tracers:MyTracer\n")
    project.mkpydir("mypkg")
    for mode in [(), ("-n", "2")]:
        result = run(project, *mode)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(
            ["ERROR: pytest-fxtrace: ini fxtrace_tracer: tracer: cannot import module 'mypkg.tracers' "
             "from 'mypkg.tracers:MyTracer' (No module named 'mypkg.tracers'). Check the spelling*"]
        )
        assert torch_imported(project.path) == {}  # stopped at configure: no session


# -- the engine side ---------------------------------------------------------------------


def test_find_module_runs_no_module_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    package = tmp_path / "noisypkg"
    package.mkdir()
    (package / "__init__.py").write_text("raise RuntimeError('imported noisypkg')\n")
    (package / "tracers.py").write_text("raise RuntimeError('imported noisypkg.tracers')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    find_module("noisypkg.tracers")
    with pytest.raises(ModuleNotFoundError, match=r"^No module named 'noisypkg.nope'$"):
        find_module("noisypkg.nope")
    with pytest.raises(ModuleNotFoundError, match=r"^No module named 'noisypkg.tracers.x'; 'noisypkg.tracers' is not a package$"):
        find_module("noisypkg.tracers.x")
    assert "noisypkg" not in sys.modules and "noisypkg.tracers" not in sys.modules


def test_check_options_says_what_resolve_options_says_short_of_importing(tmp_path: Path):
    assert check_options(("ini fxtrace_tracer", {"tracer": "os:NoSuchTracer"})) is None  # found at import
    for layer, message in [
        ({"tracer": "nowhere.mod:T"}, "x: tracer: cannot import module 'nowhere.mod' from 'nowhere.mod:T' "
         "(No module named 'nowhere')"),
        ({"tracer": "NoColonOrDot"}, "x: tracer: 'NoColonOrDot' is not a dotted path"),
        ({"autowrap_functions": ["nowhere:f"]}, "x: autowrap_functions: cannot import module 'nowhere'"),
        ({"autowrap_modules": ["nowhere"]}, "x: autowrap_modules: cannot import module 'nowhere'"),
        ({"rtol": "tight"}, "x: rtol: expected a number, got 'tight'"),
        ({"leaf_module": ["X"]}, "x: unknown option 'leaf_module'"),
    ]:
        with pytest.raises(OptionError) as excinfo:
            check_options(("x", layer))
        assert str(excinfo.value).startswith(message), (layer, str(excinfo.value))


def test_the_installed_torch_version_reads_as_torch_says_it():
    assert installed_torch_version() == str(torch.__version__)
