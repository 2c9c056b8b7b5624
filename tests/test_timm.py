"""timm models: where a model does not trace, the verified fix the diagnosis prints is one
that timm itself keeps out of tracing (``timm.layers.get_notrace_modules()`` /
``get_notrace_functions()``, the lists its own fx feature extraction uses) -- found from
the failure, without knowing timm's lists."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import optional
import pytest
import torch

import pytest_fxtrace

timm = optional.require("timm")
from timm.layers import get_notrace_functions, get_notrace_modules  # noqa: E402

# (model, input size, the failing module, what the fix names); NesT is built for 64 px
# (img_size=), its check then costs half its CPU time at 224 (2.9 -> 1.5 s)
UNTRACEABLE = {
    "tf_efficientnet_b0": (64, "conv_stem", "Conv2dSame"),  # padding from x.shape in Python
    "twins_svt_small": (64, "blocks.0.0.attn", "LocallyGroupedAttn"),  # `if pad_r > 0` on a traced value
    "crossvit_tiny_240": (240, "", "scale_image"),  # the root's own helper: autowrapped
    "nest_tiny": (64, "levels.0", "deblockify"),  # int() in a helper: autowrapped, not NestLevel a leaf
}
SIZED = {"nest_tiny", "nest_tiny_jx"}  # built for the input size


def create(name, size):
    sized = {"img_size": size} if name in SIZED else {}
    return timm.create_model(name, pretrained=False, num_classes=10, **sized).eval()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(UNTRACEABLE))
def test_the_verified_fix_for_a_timm_model_is_what_timm_keeps_out_of_tracing(name):
    size, module, named = UNTRACEABLE[name]
    model = create(name, size)
    x = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(0))
    report = pytest_fxtrace.check_traceable(model, (x,))
    assert (report.status, report.module) == ("untraceable", module), report.describe()
    assert report.suggestion is not None and report.suggestion.verified, report.describe()
    notrace = {cls.__name__ for cls in get_notrace_modules()} | {f.__name__ for f in get_notrace_functions()}
    (values,) = report.suggestion.options.values()
    fixed = {value.rpartition(":")[2].rpartition(".")[2] for value in values}
    assert fixed == {named} and named in notrace, report.suggestion
    # and the marker line it prints passes the check
    assert pytest_fxtrace.check_traceable(model, (x,), **report.suggestion.options).ok


@pytest.mark.slow
def test_a_timm_model_that_traces_passes_the_marker(pytester: pytest.Pytester):
    pytester.makepyfile(
        """
        import pytest, timm, torch

        @pytest.mark.traceable
        def test_convnext():
            model = timm.create_model("convnext_atto", pretrained=False).eval()
            assert model(torch.randn(1, 3, 64, 64)).shape == (1, 1000)

        @pytest.mark.traceable
        def test_tf_efficientnet():
            timm.create_model("tf_efficientnet_b0", pretrained=False).eval()(torch.randn(1, 3, 64, 64))
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*EfficientNet.conv_stem (Conv2dSame) is not traceable: * at *timm/layers/padding.py:* "
            "uses a traced value in control flow*",
            "*fix (verified): @pytest.mark.traceable(leaf_modules=[[]'Conv2dSame'[]])",
            "*or patch (verified): patch `return max(*`torch.fx.wrap(\"get_same_padding\")` after the function*",
            "*--- a/timm/layers/padding.py",
            "*+++ b/timm/layers/padding.py",
            "*+torch.fx.wrap(\"get_same_padding\")  # traced as one call*",
        ]
    )


@pytest.mark.slow
def test_two_kinds_of_failing_module_get_their_own_fixes_combined():
    # NestLevel: int() in the helper deblockify; MaxPool2dSame (pad_type "same"): control flow
    # on a traced size in timm's padding helpers. Neither fix alone traces; together they do.
    model = create("nest_tiny_jx", 64)
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    report = pytest_fxtrace.check_traceable(model, (x,))
    assert report.status == "untraceable" and report.suggestion.verified, report.describe()
    assert report.suggestion.options == {
        "autowrap_functions": ["timm.models.nest:deblockify"],
        "leaf_modules": ["MaxPool2dSame"],
    }
    notrace = {cls.__name__ for cls in get_notrace_modules()} | {f.__name__ for f in get_notrace_functions()}
    assert {"deblockify", "MaxPool2dSame"} <= notrace
    assert pytest_fxtrace.check_traceable(model, (x,), **report.suggestion.options).ok


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("patch") is None, reason="needs the patch program")
def test_timm_s_written_patches_apply_to_a_pristine_copy_of_timm_which_then_traces_with_plain_torch(pytester: pytest.Pytester):
    # two of the patches the zoo figures count: a helper of timm's layers wrapped for torch.fx
    # (Conv2dSame's padding, 69 models) and an `if` left out of a class's forward (MobileViT v2)
    pytester.makepyfile(
        """
        import pytest, timm, torch

        @pytest.mark.traceable
        def test_tf_efficientnet():
            timm.create_model("tf_efficientnet_b0", pretrained=False).eval()(torch.randn(1, 3, 64, 64))

        @pytest.mark.traceable
        def test_mobilevit():
            timm.create_model("mobilevitv2_050", pretrained=False).eval()(torch.randn(1, 3, 64, 64))
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "--fx-patch-dir=patches")
    result.assert_outcomes(failed=2)
    written = sorted((pytester.path / "patches").iterdir())
    assert [p.name for p in written] == [
        "test_timm_s_written_patches_apply_to_a_pristine_copy_of_timm_which_then_traces_with_plain_torch.py_test_mobilevit.ByobNet.fx.patch",
        "test_timm_s_written_patches_apply_to_a_pristine_copy_of_timm_which_then_traces_with_plain_torch.py_test_tf_efficientnet.EfficientNet.fx.patch",
    ], written
    installed = Path(timm.__file__).parent
    pristine = pytester.path / "pristine"
    shutil.copytree(installed, pristine / "timm", ignore=shutil.ignore_patterns("__pycache__"))
    for patch in written:  # each against timm as installed, from its import root
        subprocess.run(["patch", "-p1", "-s", "-i", str(patch)], cwd=pristine, check=True)
    plain = (
        "import timm, torch\n"
        "import sys; assert timm.__file__.startswith(sys.argv[1]), timm.__file__\n"
        "for name in ('tf_efficientnet_b0', 'mobilevitv2_050'):\n"
        "    model = timm.create_model(name, pretrained=False).eval(); x = torch.randn(1, 3, 64, 64)\n"
        "    gm = torch.fx.symbolic_trace(model)\n"
        "    torch.testing.assert_close(gm(x), model(x))\n"
        "print('plain torch: traced and equal')\n"
    )
    run = subprocess.run([sys.executable, "-c", plain, str(pristine)], cwd=pristine, capture_output=True, text=True)
    assert run.returncode == 0 and "traced and equal" in run.stdout, run.stderr
    unpatched = subprocess.run([sys.executable, "-c", plain, str(installed)], capture_output=True, text=True)
    assert unpatched.returncode != 0 and "TraceError" in unpatched.stderr, "timm as installed traced: the patches proved nothing"
