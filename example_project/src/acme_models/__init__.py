"""ACME's model zoo: the models our products ship, kept torch.fx traceable."""

from typing import Any

from .adaptive import AdaptiveDepthNet
from .detector import Detections, TinyDetector
from .encoder import TextEncoder
from .pooling import FramePooler
from .segmentation import PadToMultiple, TinySegmenter
from .transformer import MultiHeadSelfAttention, TransformerBlock
from .vit import PatchClassifier, sinusoidal_positions

__all__ = [
    "AdaptiveDepthNet",
    "Detections",
    "FramePooler",
    "ImageClassifier",
    "MultiHeadSelfAttention",
    "PadToMultiple",
    "PatchClassifier",
    "TextEncoder",
    "TinyDetector",
    "TinySegmenter",
    "TransformerBlock",
    "sinusoidal_positions",
]


def __getattr__(name: str) -> Any:
    # ImageClassifier needs torchvision (the ``vision`` extra): imported on first use,
    # so the other models work with torch alone.
    if name == "ImageClassifier":
        from .classifier import ImageClassifier

        return ImageClassifier
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
