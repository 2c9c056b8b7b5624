"""A small segmenter that accepts any input size."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class PadToMultiple(nn.Module):
    """Pads height and width up to a multiple of ``multiple`` (the encoder downsamples 8x).

    It decides *whether* to pad from the input's size, which a symbolic trace cannot
    know: the project keeps it a leaf (``fxtrace_leaf_modules`` in pyproject.toml).
    """

    def __init__(self, multiple: int = 8) -> None:
        super().__init__()
        self.multiple = multiple

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pad_h = -x.shape[-2] % self.multiple
        pad_w = -x.shape[-1] % self.multiple
        if pad_h or pad_w:
            x = F.pad(x, (0, pad_w, 0, pad_h), mode="replicate")
        return x


def _conv(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class TinySegmenter(nn.Module):
    def __init__(self, num_classes: int = 5, width: int = 16) -> None:
        super().__init__()
        self.pad = PadToMultiple(8)
        self.encoder = nn.Sequential(
            _conv(3, width, 2), _conv(width, 2 * width, 2), _conv(2 * width, 4 * width, 2)
        )
        self.classifier = nn.Conv2d(4 * width, num_classes, 1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        height, width = images.shape[-2], images.shape[-1]
        logits = self.classifier(self.encoder(self.pad(images)))
        logits = F.interpolate(logits, scale_factor=8.0, mode="bilinear", align_corners=False)
        return logits[..., :height, :width]
