"""The exported program's saved form (issue 41, ``artifact=("pt2",)``): saved with
torch.export.save, loaded back with torch.export.load, every recorded call run on it and
compared with eager; each failure at its stage (save, load, run, answer), category
``artifact``. Each finding is plain torch's (``test_the_save_failure_is_plain_torch_s``)."""

from __future__ import annotations

import dataclasses
import os
import tempfile

import pytest
import torch
from torch import nn

from pytest_fxtrace import check_traceable
from pytest_fxtrace.backends.export import problem
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


def check(model, *inputs, **options):
    return check_traceable(model, inputs, backend="export", artifact=("pt2",), **options)


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


def test_the_weights_a_test_trains_between_calls_are_the_loaded_program_s_too():
    checks = TestChecks(resolve_options(("test", {"backend": "export", "artifact": ("pt2",)})))
    model, x = Small(), torch.randn(2, 4)
    with recording(checks.observer_for, checks.internal_error):
        model(x)
        with torch.no_grad():
            model.lin.weight.add_(1.0)  # a training step between the calls
        model(x)
    (report,) = checks.finish()
    assert report.ok and report.calls == 2, report.describe()


@pytest.mark.parametrize("value", ["pt3", ("pt2", "zip")])
def test_an_unknown_saved_form_is_one_usage_error_naming_the_known(value):
    with pytest.raises(OptionError, match="is not a saved form the check knows; use 'pt2'"):
        check_traceable(Small(), (torch.randn(2, 4),), backend="export", artifact=value)


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
