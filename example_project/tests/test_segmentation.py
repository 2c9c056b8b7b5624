"""TinySegmenter: any input size, thanks to PadToMultiple (a leaf, see pyproject.toml)."""

import pytest
import torch
from acme_models import PadToMultiple, TinySegmenter


@pytest.mark.traceable
@pytest.mark.parametrize("height, width", [(64, 64), (60, 52)])
def test_logits_match_the_input_size(height, width):
    model = TinySegmenter(num_classes=5).eval()
    logits = model(torch.randn(1, 3, height, width))
    assert logits.shape == (1, 5, height, width)


@pytest.mark.traceable(snapshot=True)
def test_one_graph_serves_every_input_size():
    model = TinySegmenter().eval()
    for size in (64, 60, 41):
        assert model(torch.randn(1, 3, size, size)).shape[-1] == size


def test_pad_is_kept_as_a_single_call(fxtrace):
    report = fxtrace(TinySegmenter().eval(), torch.randn(1, 3, 60, 52))
    assert "self.pad(" in report.code
    assert "pad_h" not in report.code


def test_pad_to_multiple_pads_only_when_needed():
    pad = PadToMultiple(8)
    assert pad(torch.zeros(1, 1, 16, 16)).shape == (1, 1, 16, 16)
    assert pad(torch.zeros(1, 1, 17, 9)).shape == (1, 1, 24, 16)
