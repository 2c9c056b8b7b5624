"""The torch.export check on real models: torchvision classifiers and timm models export
and match eager; a torchvision detection model does not, and is diagnosed in
torchvision's own source with its backbone exportable."""

from __future__ import annotations

import pytest
import torch

from pytest_fxtrace import _compat, check_traceable

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(_compat.export_problem() is not None, reason=str(_compat.export_problem())),
]


def check(model, *args, strict=False):
    return check_traceable(model, args, backend="export-strict" if strict else "export")


def test_a_torchvision_classifier_exports_and_matches_eager() -> None:
    torchvision = pytest.importorskip("torchvision")
    model = torchvision.models.resnet18(weights=None).eval()
    report = check(model, torch.randn(1, 3, 64, 64))
    assert report.ok, report.describe()
    assert report.nodes > 50 and "torch.ops.aten.conv2d" in report.code


def test_a_torchvision_detector_fails_in_torchvision_s_source_with_its_backbone_exportable() -> None:
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(
        weights=None, weights_backbone=None, num_classes=3
    ).eval()
    report = check(model, [torch.rand(3, 96, 96)])
    assert (report.status, report.category) == ("untraceable", "control-flow"), report.describe()
    assert report.location.path.replace("\\", "/").endswith("torchvision/ops/boxes.py"), report.location
    assert "torchvision/ops/boxes.py" in report.message  # shown by its import path
    assert report.module == "rpn" and report.module_type == "RegionProposalNetwork"
    collection = report.localization
    assert collection.records["backbone"].status == "traced"
    assert collection.records["rpn.head"].status == "traced"
    assert "exported: transform (GeneralizedRCNNTransform), backbone (BackboneWithFPN)" in report.describe()
    assert report.coverage > 0.9  # the backbone and the heads hold nearly all parameters
    assert "torch.cond" in report.suggestion.text


def test_timm_models_fx_cannot_trace_export() -> None:
    timm = pytest.importorskip("timm")
    model = timm.create_model("tf_efficientnet_b0", pretrained=False).eval()  # Conv2dSame
    x = torch.randn(1, 3, 64, 64)
    assert check_traceable(model, (x,)).status == "untraceable"
    report = check(model, x)
    assert report.ok, report.describe()
