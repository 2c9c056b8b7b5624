"""TinyDetector returns {"detections": Detections(boxes, scores), "features": [...]}."""

import pytest
import torch
from acme_models import Detections, TinyDetector


@pytest.fixture
def detector() -> TinyDetector:
    return TinyDetector(num_classes=3, anchors_per_cell=2).eval()


@pytest.mark.traceable(snapshot=True)
def test_every_anchor_gets_a_box_and_class_scores(detector, images):
    out = detector(images)
    detections = out["detections"]
    assert isinstance(detections, Detections)
    assert detections.boxes.shape == (2, 8 * 8 * 2, 4)
    torch.testing.assert_close(detections.scores.sum(-1), torch.ones(2, 128))
    assert 0 <= detections.boxes.min() and detections.boxes.max() <= 64


def test_traced_detector_returns_the_same_structure(fxtrace, detector, images):
    report = fxtrace(detector, images)
    traced = report.graph_module(images)
    assert isinstance(traced["detections"], Detections)
    assert len(traced["features"]) == 1
