"""The ONNX backend's floors (issue 40), told without running it: the torch of the export
backend it is built on, and its extra. Found by running: tests/test_onnx.py passes whole on
torch 2.12.1, 2.13.0 and 2.14.1 (tox envs tests-torch212, tests-torch213, tests), with onnx
1.23.2, onnxscript 0.7.2 and onnxruntime 1.32.0; below 2.12 the export stage itself is refused.
Not skipped where the extra is missing: that is one of the cases."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from pytest_fxtrace.backends.onnx import problem


def test_a_torch_below_the_export_floor_is_one_usage_error_naming_the_onnx_backend(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a, **k: object())  # the extra "installed"
    monkeypatch.setattr(torch, "__version__", "2.11.0")
    said = problem()
    assert said is not None and said.startswith("backend='onnx' (built on torch.export) needs torch >= 2.12"), said
    assert "found torch 2.11.0" in said


def test_a_missing_package_of_the_extra_names_it_and_the_extra(monkeypatch):
    # onnxscript alone missing, whatever this environment has installed
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a, **k: None if name == "onnxscript" else object())
    said = problem()
    assert said is not None and said.startswith("backend='onnx' needs onnxscript (not installed)"), said
    assert "pip install 'pytest-fxtrace[onnx]'" in said


def test_naming_the_backend_without_what_it_needs_is_one_usage_error_before_any_model(pytester: pytest.Pytester):
    pytester.makeconftest(
        "import importlib.util\n"
        "real = importlib.util.find_spec\n"
        "importlib.util.find_spec = lambda name, *a, **k: None if name == 'onnxruntime' else real(name, *a, **k)\n"
    )
    pytester.makepyfile(test_m="def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "--fx-backend=onnx")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines(["*backend='onnx' needs *onnxruntime (not installed)*", "*pip install 'pytest-fxtrace?onnx?'*"])
    result.stdout.no_fnmatch_line("*passed*")
