"""The exported program's saved forms (issue 41): ``artifact=("pt2",)``, saved with
torch.export.save and loaded back with torch.export.load, and ``artifact=("aoti",)``,
AOTInductor's package (aoti_compile_and_package, then aoti_load_package); every recorded call
run on the loaded form and compared with eager; each failure at its stage (save / compile,
load, run, answer), category ``artifact``. Each pt2 finding is plain torch's
(``test_the_save_failure_is_plain_torch_s``).

One test builds a real AOTInductor package (``test_the_command_line_asks_for_the_aoti_package_
and_the_record_says_it_passed``: tens of seconds, a C++ build); the others fake the compile and
the load at ``backends/export/_compat.py``, the one place that names torch._inductor."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import warnings

import pytest
import torch
from torch import nn

from pytest_fxtrace import check_traceable
from pytest_fxtrace.backends.export import _compat as export_compat
from pytest_fxtrace.backends.export import problem
from pytest_fxtrace.backends.export.artifact import NO_COMPILER, ArtifactSkipped, artifact_notes
from pytest_fxtrace.backends.export.options import artifacts_of
from pytest_fxtrace.capture import recording
from pytest_fxtrace.entry import TestChecks
from pytest_fxtrace.options import OptionError, resolve_options

if problem() is not None:  # below the export floor: nor does torch have the pytree calls used here
    pytest.skip(str(problem()), allow_module_level=True)


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 2)

    def forward(self, x):
        return self.lin(x).relu()


@dataclasses.dataclass
class Scored:
    logits: torch.Tensor
    top: torch.Tensor


# a pytree node without a serialized_type_name: torch.export.save cannot name it
torch.utils._pytree.register_dataclass(Scored)


class Structured(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 2)

    def forward(self, x):
        y = self.lin(x)
        return Scored(y, y.amax(1))


@dataclasses.dataclass
class NamedScored:
    logits: torch.Tensor
    top: torch.Tensor


# the change the finding gives: the same class registered with a name
torch.export.register_dataclass(NamedScored, serialized_type_name="test_artifact.NamedScored")


class NamedStructured(Structured):
    def forward(self, x):
        y = self.lin(x)
        return NamedScored(y, y.amax(1))


def check(model, *inputs, artifact=("pt2",), **options):
    return check_traceable(model, inputs, backend="export", artifact=artifact, **options)


def test_a_program_saved_and_loaded_back_matches_eager_and_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    saved, real = [], torch.export.save
    monkeypatch.setattr(torch.export, "save", lambda program, path, **kw: (saved.append(path), real(program, path, **kw)))
    report = check(Small(), torch.randn(2, 4))
    assert report.ok and report.status == "passed", report.describe()
    assert len(saved) == 1 and str(saved[0]).startswith(str(tmp_path))  # saved once, in a folder of its own
    assert not any(name.startswith("fxtrace-pt2-") for name in os.listdir(tmp_path))  # and removed


def test_a_program_torch_export_save_refuses_is_untraceable_at_the_save_stage():
    report = check(Structured(), torch.randn(2, 4))
    assert (report.status, report.category) == ("untraceable", "artifact"), report.describe()
    assert report.message.startswith("Structured exported, but torch.export.save refuses the program: NotImplementedError: ")
    assert "No registered serialization name for" in report.message
    assert "torch.export.register_dataclass(Scored, serialized_type_name='test_artifact.Scored')" in report.describe()
    assert check_traceable(Structured(), (torch.randn(2, 4),), backend="export").ok  # in memory it passes


def test_the_change_the_save_failure_gives_makes_the_saved_program_pass():
    report = check(NamedStructured(), torch.randn(2, 4))
    assert report.ok, report.describe()


def test_the_save_failure_is_plain_torch_s(tmp_path):
    program = torch.export.export(Structured(), (torch.randn(2, 4),), strict=False)
    with pytest.raises(NotImplementedError, match="No registered serialization name"):
        torch.export.save(program, tmp_path / "p.pt2")


def test_a_loaded_program_that_answers_otherwise_is_a_mismatch_at_the_answer(monkeypatch):
    real = torch.export.load

    def drifting(*args, **kwargs):  # a round trip that loses a weight's value
        program = real(*args, **kwargs)
        return _Shifted(program)

    monkeypatch.setattr(torch.export, "load", drifting)
    report = check(Small(), torch.randn(2, 4))
    assert (report.status, report.category) == ("mismatch", "artifact"), report.describe()
    assert "the program loaded back from torch.export.save answers otherwise than eager" in report.message


class _Shifted:
    def __init__(self, program):
        self.program = program

    def module(self):
        module = self.program.module()
        original = module.forward

        def forward(*args, **kwargs):
            return original(*args, **kwargs) + 1.0

        module.forward = forward
        return module


def across_a_step(artifact: str, step=lambda model: model.lin.weight.add_(1.0), model=None):
    """``Small`` (or ``model``) called twice under the marker's recording, ``step`` between the
    calls (a training step), checked by export with ``artifact=(artifact,)``: the report."""
    checks = TestChecks(resolve_options(("test", {"backend": "export", "artifact": (artifact,)})))
    model, x = model or Small(), torch.randn(2, 4)
    with recording(checks.observer_for, checks.internal_error):
        model(x)
        with torch.no_grad():
            step(model)
        model(x)
    (report,) = checks.finish()
    return report


def test_the_weights_a_test_trains_between_calls_are_the_loaded_program_s_too():
    report = across_a_step("pt2")
    assert report.ok and report.calls == 2, report.describe()


@pytest.mark.parametrize("value", ["pt3", ("pt2", "zip"), "aot"])
def test_an_unknown_saved_form_is_one_usage_error_naming_the_known(value):
    with pytest.raises(OptionError, match="is not a saved form the check knows; use 'pt2' .* or 'aoti' "):
        check_traceable(Small(), (torch.randn(2, 4),), backend="export", artifact=value)


def test_an_unknown_saved_form_in_the_ini_is_a_usage_error_naming_the_ini():
    """The ini's and the command line's value (comma-separated), resolved at startup: the
    plugin's usage error carries this message (``test_export_plugin``'s for other options)."""
    with pytest.raises(OptionError, match="^ini fxtrace_artifact: .*'aot' is not a saved form the check knows; use 'pt2'"):
        resolve_options(("ini fxtrace_artifact", {"artifact": "pt2, aot"}))
    assert artifacts_of(resolve_options(("--fx-artifact", {"artifact": "pt2,aoti"}))) == ("pt2", "aoti")


# -- aoti: AOTInductor's package -----------------------------------------------------------


class FakePackage:
    """What ``export_compat.load_package`` returns, over the exported program in memory: the names
    of the weights it holds, ``load`` of a call's, and a run (``shift`` added to its output,
    ``error`` raised instead)."""

    def __init__(self, exported, shift=0.0, error=None, names=None):
        self.module = exported.module()
        self.names = frozenset(exported.state_dict) if names is None else frozenset(names)
        self.shift, self.error, self.loaded = shift, error, []

    def load(self, weights):
        self.loaded.append({name: t.clone() for name, t in weights.items()})
        self.module.load_state_dict(weights, strict=False)

    def __call__(self, *args, **kwargs):
        if self.error is not None:
            raise self.error
        return self.module(*args, **kwargs) + self.shift


@pytest.fixture
def fake_aoti(monkeypatch, tmp_path):
    """The compile and the load faked (no C++ build), a compiler found; ``made`` lists the
    package paths compiled to (in ``tmp_path``), ``package`` sets what the load returns."""

    class Fake:
        made: list = []
        package = staticmethod(lambda exported: FakePackage(exported))

    def compile_package(exported, path):
        Fake.made.append(path)
        Fake.exported = exported
        with open(path, "wb") as file:
            file.write(b"package")

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(export_compat, "cpp_compiler", lambda: "/usr/bin/g++")
    monkeypatch.setattr(export_compat, "compile_package", compile_package)
    monkeypatch.setattr(export_compat, "load_package", lambda path: Fake.package(Fake.exported))
    return Fake


def aoti(model, *inputs, **options):
    return check_traceable(model, inputs, backend="export", artifact=("aoti",), **options)


def test_an_aoti_package_is_compiled_once_in_a_folder_removed_after_loading(fake_aoti, tmp_path):
    report = aoti(Small(), torch.randn(2, 4))
    assert report.ok and report.status == "passed", report.describe()
    (path,) = fake_aoti.made
    assert path.startswith(str(tmp_path)) and path.endswith(".pt2")
    assert not any(name.startswith("fxtrace-aoti-") for name in os.listdir(tmp_path))


def test_an_aoti_package_that_answers_otherwise_is_a_mismatch_at_the_answer(fake_aoti):
    fake_aoti.package = staticmethod(lambda exported: FakePackage(exported, shift=1.0))
    report = aoti(Small(), torch.randn(2, 4))
    assert (report.status, report.category) == ("mismatch", "artifact"), report.describe()
    assert report.message.startswith("Small exported, but the AOTInductor package answers otherwise than eager: ")
    assert check_traceable(Small(), (torch.randn(2, 4),), backend="export", artifact=("pt2",)).ok  # pt2 passes


def test_an_aoti_package_that_raises_is_a_mismatch_at_the_run(fake_aoti):
    error = RuntimeError("run_func_( container_handle_, ...) API call failed at model_container_runner.cpp\nmore")
    fake_aoti.package = staticmethod(lambda exported: FakePackage(exported, error=error))
    report = aoti(Small(), torch.randn(2, 4))
    assert (report.status, report.category) == ("mismatch", "artifact"), report.describe()
    assert report.message.startswith(
        "Small exported, but the AOTInductor package raises where the exported program ran: "
        "RuntimeError: run_func_( container_handle_, ...) API call failed at model_container_runner.cpp"
    )


def test_a_package_aoti_load_package_refuses_is_untraceable_at_the_load(fake_aoti, monkeypatch):
    def refuse(path):
        raise RuntimeError("Error in dlopen: model.so: undefined symbol: aoti_torch_cpu_foo")

    monkeypatch.setattr(export_compat, "load_package", refuse)
    report = aoti(Small(), torch.randn(2, 4))
    assert (report.status, report.category) == ("untraceable", "artifact"), report.describe()
    assert report.message.startswith(
        "Small exported, but torch._inductor.aoti_load_package refuses the package AOTInductor compiled: "
        "RuntimeError: Error in dlopen"
    )


def run_node(self, n):  # Inductor's GraphLowering.run_node(self, n): the node it lowers
    raise NotImplementedError(f"{n.target}: no lowering")


def test_a_program_aoti_cannot_compile_is_untraceable_at_the_compile_naming_the_user_line(fake_aoti, monkeypatch):
    def compile_package(exported, path):
        run_node(None, next(n for n in exported.graph.nodes if "relu" in str(n.target)))

    monkeypatch.setattr(export_compat, "compile_package", compile_package)
    report = aoti(Small(), torch.randn(2, 4))
    assert (report.status, report.category) == ("untraceable", "artifact"), report.describe()
    assert report.message.startswith(
        "Small exported, but AOTInductor cannot compile the program (torch._inductor.aoti_compile_and_package): "
        "NotImplementedError: aten.relu.default: no lowering"
    )
    assert report.location.path.endswith("test_artifact.py") and report.location.source == "return self.lin(x).relu()"


def test_a_c_compiler_s_error_is_the_reason_s_second_half(fake_aoti, monkeypatch):
    def compile_package(exported, path):
        raise RuntimeError("C++ compile error\n\nCommand:\ng++ model.cpp\n\nOutput:\nmodel.cpp:3:1: error: 'x' was not declared")

    monkeypatch.setattr(export_compat, "compile_package", compile_package)
    report = aoti(Small(), torch.randn(2, 4))
    assert "RuntimeError: C++ compile error (error: 'x' was not declared)" in report.message, report.describe()


def test_the_weights_a_test_trains_between_calls_are_loaded_into_the_aoti_package(fake_aoti):
    packages = []
    fake_aoti.package = staticmethod(lambda exported: packages.append(FakePackage(exported)) or packages[-1])
    model = Small()
    first = model.lin.weight.detach().clone()
    report = across_a_step("aoti", model=model)
    assert report.ok and report.calls == 2, report.describe()
    (package,) = packages  # compiled once, the weights loaded for each call
    assert [torch.equal(w["lin.weight"], first) for w in package.loaded] == [True, False]


def test_a_weight_the_package_cannot_replace_is_said_not_judged_where_a_call_changed_it(fake_aoti):
    fake_aoti.package = staticmethod(lambda exported: FakePackage(exported, names={"lin.weight"}))
    with pytest.warns(ArtifactSkipped, match="holds lin.bias as it was compiled and cannot take another value"):
        # lin.bias is inlined in the package's C++: it cannot take the new value
        report = across_a_step("aoti", step=lambda model: model.lin.bias.add_(1.0))
    assert report.ok and report.calls == 2, report.describe()


def test_without_a_cpp_compiler_aoti_is_skipped_with_a_note_and_the_rest_is_checked(monkeypatch):
    monkeypatch.setattr(export_compat, "cpp_compiler", lambda: None)
    monkeypatch.setattr(export_compat, "compile_package", lambda *a: pytest.fail("compiled without a compiler"))
    with pytest.warns(ArtifactSkipped, match="aoti: no C\\+\\+ compiler found"):
        report = aoti(Small(), torch.randn(2, 4))
    assert report.ok and report.status == "passed", report.describe()
    assert artifact_notes(resolve_options(("test", {"backend": "export", "artifact": ("aoti",)}))) == (NO_COMPILER,)
    assert NO_COMPILER in report.notes and f"note: {NO_COMPILER}" in report.describe()  # the report says so
    with pytest.warns(ArtifactSkipped):  # pt2, asked too, is still checked: and fails here
        saved = check(Structured(), torch.randn(2, 4), artifact=("aoti", "pt2"))
    assert (saved.status, saved.category) == ("untraceable", "artifact"), saved.describe()


def test_without_a_cpp_compiler_under_warnings_as_errors_the_check_still_passes(monkeypatch):
    monkeypatch.setattr(export_compat, "cpp_compiler", lambda: None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = aoti(Small(), torch.randn(2, 4))
    assert report.ok, report.describe()


def test_the_compiler_lookup_is_torch_s():
    from torch._inductor.cpp_builder import get_cpp_compiler

    try:
        expected = get_cpp_compiler()
    except Exception:
        expected = None
    found = export_compat.cpp_compiler()
    assert (found is None) == (expected is None)
    assert found is None or os.path.basename(found) == os.path.basename(expected)


USER_TESTS = """
import dataclasses, pytest, torch
from torch import nn

@dataclasses.dataclass
class Scored:
    logits: torch.Tensor
    top: torch.Tensor

torch.utils._pytree.register_dataclass(Scored)

class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 2)

    def forward(self, x):
        y = self.lin(x)
        return Scored(y, y.amax(1))

@pytest.mark.traceable(backend="export")
def test_head():
    Head()(torch.randn(2, 4))
"""


def test_the_command_line_asks_for_the_saved_form_and_the_summary_names_the_stage(pytester: pytest.Pytester):
    """The same model passes without ``artifact`` (``test_a_program_torch_export_save_refuses_...``
    checks it in memory); asked on the command line, its saved form fails the test."""
    pytester.makepyfile(test_user=USER_TESTS)
    saved = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly", "--fx-artifact=pt2")
    saved.assert_outcomes(failed=1)
    saved.stdout.fnmatch_lines(["*Head exported, but torch.export.save refuses the program*", "*artifact*"])


AOTI_TESTS = """
import pytest, torch
from torch import nn

@pytest.mark.traceable(backend="export")
def test_linear():
    nn.Linear(4, 4)(torch.randn(2, 4))
"""


@pytest.mark.skipif(export_compat.cpp_compiler() is None, reason="no C++ compiler: AOTInductor cannot build a package here")
def test_the_command_line_asks_for_the_aoti_package_and_the_record_says_it_passed(pytester: pytest.Pytester):
    """The suite's one real AOTInductor build (tens of seconds; a first build on a machine
    also fills Inductor's cache): the smallest model, pt2 and aoti asked on the command line,
    the test passes and its JSON record says so."""
    pytester.makepyfile(test_user=AOTI_TESTS)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly", "--fx-artifact=pt2,aoti", "--fx-report=r.json"
    )
    result.assert_outcomes(passed=1)
    (record,) = json.loads((pytester.path / "r.json").read_text())["results"]
    assert (record["backend"], record["status"]) == ("export", "passed"), record
    assert "matched eager on 1 recorded call" in record["message"]
