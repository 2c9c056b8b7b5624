"""Adaptive-depth network: refines its features until the update is small.

How many steps it takes depends on the data, so it has no single graph: it is
not torch.fx traceable by design, and its test says so (xfail by category).
"""

from __future__ import annotations

import torch
from torch import nn


class AdaptiveDepthNet(nn.Module):
    def __init__(self, dim: int = 32, num_classes: int = 10, max_steps: int = 6, tol: float = 1e-2) -> None:
        super().__init__()
        self.max_steps = max_steps
        self.tol = tol
        self.stem = nn.Linear(dim, dim)
        self.refine = nn.Sequential(nn.Linear(dim, dim), nn.Tanh())
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        for _ in range(self.max_steps):
            update = 0.5 * self.refine(h)
            h = h + update
            if update.abs().mean() < self.tol:
                break
        return self.head(h)
