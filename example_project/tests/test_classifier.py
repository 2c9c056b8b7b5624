"""ImageClassifier (torchvision ResNet-18 trunk). These tests predate the gate:
the module-level marker below is the only line pytest-fxtrace needed."""

import importlib.util

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("torchvision", reason="ImageClassifier's trunk is torchvision's ResNet-18 (extra 'vision')")

from acme_models import ImageClassifier  # noqa: E402

# Every model these tests call must stay traceable and compute the same when traced.
pytestmark = pytest.mark.traceable


@pytest.fixture
def model() -> ImageClassifier:
    return ImageClassifier(num_classes=10)


@pytest.mark.traceable(snapshot=True)  # the graph is reviewed: tests/fx_snapshots/
def test_logits_have_one_score_per_class(model, images):
    model.eval()
    with torch.no_grad():
        logits = model(images)
    assert logits.shape == (2, 10)
    assert torch.isfinite(logits).all()


# This test runs backward on the classifier's outputs, so pytest-fxtrace checks those calls
# forward and backward too: every parameter's gradient through the traced graph against eager's.
def test_training_steps_reduce_the_loss(model):
    images, labels = torch.randn(2, 3, 32, 32), torch.tensor([3, 7])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model.train()
    losses = []
    for _ in range(3):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_eval_mode_is_deterministic(model, images):
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(images), model(images))


# The classifier also ships as ONNX (ONNX Runtime on the edge devices): this test's model must
# convert with torch.onnx and score in ONNX Runtime as in eager. Needs pytest-fxtrace[onnx].
@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="the ONNX check needs pytest-fxtrace[onnx]")
@pytest.mark.traceable(backend="onnx")
def test_the_deployed_onnx_model_scores_as_eager(model, images):
    model.eval()
    with torch.no_grad():
        assert model(images).argmax(1).shape == (2,)
