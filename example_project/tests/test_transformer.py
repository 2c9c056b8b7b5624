"""TransformerBlock: shared by TextEncoder and PatchClassifier."""

import pytest
import torch
from acme_models import TransformerBlock


@pytest.fixture
def block() -> TransformerBlock:
    return TransformerBlock(dim=64, heads=4).eval()


@pytest.mark.traceable(snapshot=True)
def test_block_keeps_the_sequence_shape(block):
    x = torch.randn(2, 10, 64)
    assert block(x).shape == x.shape


@pytest.mark.traceable
def test_padding_mask_hides_padded_tokens(block):
    x = torch.randn(1, 6, 64)
    mask = torch.tensor([[True, True, True, True, False, False]])
    changed = x.clone()
    changed[:, 4:] = 100.0  # padded positions must not influence the real tokens
    torch.testing.assert_close(block(x, mask)[:, :4], block(changed, mask)[:, :4])


def test_block_traces_with_and_without_a_mask(fxtrace, block):
    x = torch.randn(2, 10, 64)
    unmasked = fxtrace(block, x)
    masked = fxtrace(block, x, mask=torch.ones(2, 10, dtype=torch.bool))
    # mask=None is specialised away; a real mask stays in the graph
    assert "masked_fill" not in unmasked.code
    assert "masked_fill" in masked.code


def test_block_in_training_mode_replays_dropout(fxtrace):
    block = TransformerBlock(dim=64, heads=4, dropout=0.5).train()
    report = fxtrace(block, torch.randn(2, 10, 64))
    assert report.calls == 1  # traced output matched eager under the same RNG state
