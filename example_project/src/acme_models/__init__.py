"""ACME's model zoo: the models our products ship, kept torch.fx traceable."""

from .adaptive import AdaptiveDepthNet
from .classifier import ImageClassifier
from .detector import Detections, TinyDetector
from .encoder import TextEncoder
from .segmentation import PadToMultiple, TinySegmenter
from .transformer import MultiHeadSelfAttention, TransformerBlock
from .vit import PatchClassifier, sinusoidal_positions

__all__ = [
    "AdaptiveDepthNet",
    "Detections",
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
