"""Image classifier: a torchvision ResNet-18 trunk with our own head."""

from __future__ import annotations

import torch
from torch import nn
from torchvision.models import resnet18


class ImageClassifier(nn.Module):
    def __init__(self, num_classes: int = 10, dropout: float = 0.2) -> None:
        super().__init__()
        trunk = resnet18(weights=None)
        trunk.fc = nn.Identity()
        self.trunk = trunk
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(512, num_classes))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(images))
