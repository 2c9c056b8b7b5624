"""Patch classifier (ViT-style) with fixed sin/cos position encodings."""

from __future__ import annotations

import math

import torch
from torch import nn

from .transformer import TransformerBlock


def sinusoidal_positions(tokens: torch.Tensor) -> torch.Tensor:
    """The sin/cos position table for however many tokens ``tokens`` holds.

    It builds tensors from the token count, which a symbolic trace only knows as a
    traced value: the tests trace it as one call (``autowrap_functions``).
    """
    count, dim = tokens.shape[-2], tokens.shape[-1]
    position = torch.arange(count, dtype=tokens.dtype, device=tokens.device)[:, None]
    frequency = torch.exp(
        torch.arange(0, dim, 2, dtype=tokens.dtype, device=tokens.device) * (-math.log(10000.0) / dim)
    )
    table = torch.zeros(count, dim, dtype=tokens.dtype, device=tokens.device)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency)
    return table


class PatchClassifier(nn.Module):
    def __init__(self, num_classes: int = 10, patch: int = 8, dim: int = 64, depth: int = 2) -> None:
        super().__init__()
        self.patchify = nn.Conv2d(3, dim, kernel_size=patch, stride=patch)
        self.blocks = nn.Sequential(*(TransformerBlock(dim, heads=4) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        tokens = self.patchify(images).flatten(2).transpose(1, 2)
        tokens = tokens + sinusoidal_positions(tokens)
        tokens = self.norm(self.blocks(tokens))
        return self.head(tokens.mean(dim=1))
