"""Text encoder with an optional hidden-state output (HF-style flag argument)."""

from __future__ import annotations

import torch
from torch import nn

from .transformer import TransformerBlock


class TextEncoder(nn.Module):
    def __init__(self, vocab_size: int = 1000, dim: int = 64, depth: int = 2, heads: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.layers = nn.ModuleList(TransformerBlock(dim, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)

    def forward(
        self,
        tokens: torch.Tensor,
        mask: torch.Tensor | None = None,
        return_hidden_states: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        x = self.embed(tokens)
        hidden_states = []
        for layer in self.layers:
            x = layer(x, mask)
            hidden_states.append(x)
        x = self.norm(x)
        if return_hidden_states:
            return x, tuple(hidden_states)
        return x
