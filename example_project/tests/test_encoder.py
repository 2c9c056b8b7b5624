"""TextEncoder: `return_hidden_states` is a flag, so each value gets its own graph."""

import pytest
import torch
from acme_models import TextEncoder


@pytest.fixture
def encoder() -> TextEncoder:
    return TextEncoder(vocab_size=1000, dim=64, depth=2).eval()


@pytest.fixture
def tokens() -> torch.Tensor:
    return torch.randint(0, 1000, (2, 12))


@pytest.mark.traceable
def test_hidden_states_are_returned_on_request(encoder, tokens):
    pooled = encoder(tokens)
    final, hidden = encoder(tokens, return_hidden_states=True)
    assert len(hidden) == 2
    torch.testing.assert_close(pooled, final)


@pytest.mark.traceable(snapshot=True)
def test_padding_mask_is_honoured(encoder, tokens):
    mask = torch.ones(2, 12, dtype=torch.bool)
    mask[1, 8:] = False
    assert encoder(tokens, mask).shape == (2, 12, 64)


def test_hidden_state_graph_with_the_flag_pinned(fxtrace, encoder, tokens):
    report = fxtrace.check(
        encoder,
        args=(tokens,),
        kwargs={"return_hidden_states": True},
        concrete_args={"return_hidden_states": True},
    )
    assert report.ok


def test_a_plain_symbolic_trace_cannot_follow_the_flag(encoder):
    # Why this model needs concrete args: torch.fx alone turns the flag into a traced value.
    with pytest.raises(torch.fx.proxy.TraceError, match="control flow"):
        torch.fx.symbolic_trace(encoder)
