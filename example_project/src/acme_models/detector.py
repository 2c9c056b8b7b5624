"""A single-stage detector head whose output is nested: a dict holding a namedtuple."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn


class Detections(NamedTuple):
    boxes: torch.Tensor  # (batch, anchors, 4), xyxy in input pixels
    scores: torch.Tensor  # (batch, anchors, classes)


class TinyDetector(nn.Module):
    def __init__(self, num_classes: int = 3, anchors_per_cell: int = 2, width: int = 32) -> None:
        super().__init__()
        self.anchors_per_cell = anchors_per_cell
        self.num_classes = num_classes
        self.backbone = nn.Sequential(
            nn.Conv2d(3, width, 3, stride=4, padding=1),
            nn.ReLU(),
            nn.Conv2d(width, width, 3, stride=2, padding=1),
            nn.ReLU(),
        )
        self.box_head = nn.Conv2d(width, anchors_per_cell * 4, 1)
        self.cls_head = nn.Conv2d(width, anchors_per_cell * num_classes, 1)

    def forward(self, images: torch.Tensor) -> dict[str, object]:
        features = self.backbone(images)
        batch = features.shape[0]
        boxes = self.box_head(features).permute(0, 2, 3, 1).reshape(batch, -1, 4)
        scores = self.cls_head(features).permute(0, 2, 3, 1).reshape(batch, -1, self.num_classes)
        return {
            "detections": Detections(boxes=boxes.sigmoid() * images.shape[-1], scores=scores.softmax(-1)),
            "features": [features],
        }
