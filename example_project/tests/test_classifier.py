"""ImageClassifier (torchvision ResNet-18 trunk). These tests predate the gate:
the module-level marker below is the only line pytest-fxtrace needed."""

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
