"""PatchClassifier: the position table is built by a helper traced as a single call."""

import pytest
import torch
from acme_models import PatchClassifier, sinusoidal_positions

# sinusoidal_positions builds tensors from the token count: record it as one call.
autowrapped = pytest.mark.traceable(autowrap_functions=["acme_models.vit:sinusoidal_positions"])


@autowrapped
@pytest.mark.traceable(snapshot=True)
def test_logits_shape(images):
    assert PatchClassifier(num_classes=10).eval()(images).shape == (2, 10)


@autowrapped
def test_other_resolutions_give_other_token_counts():
    model = PatchClassifier(patch=8).eval()
    for size in (32, 64):
        assert model(torch.randn(1, 3, size, size)).shape == (1, 10)


def test_positions_alternate_sin_and_cos():
    table = sinusoidal_positions(torch.zeros(1, 16, 64))
    assert table.shape == (16, 64)
    torch.testing.assert_close(table[0, 0::2], torch.zeros(32))
    torch.testing.assert_close(table[0, 1::2], torch.ones(32))
