"""The torchvision classification models the benchmarks check, and how to build them.

Untrained (``weights=None``: nothing to download), eval mode, one 1x3x64x64 input
each, seeded so every process builds the same numbers.
"""

from __future__ import annotations

import os
import sys

import torch

# P1/P1b: one of each architecture family torchvision's classification zoo has
OVERHEAD_MODELS = (
    "resnet18",
    "resnet50",
    "mobilenet_v2",
    "mobilenet_v3_small",
    "squeezenet1_1",
    "shufflenet_v2_x0_5",
    "efficientnet_b0",
    "densenet121",
    "regnet_x_400mf",
    "mnasnet0_5",
    "googlenet",
    "convnext_tiny",
)

# P3: 40 distinct models at 1x3x64x64 (every classification builder that takes a
# 64x64 input, smallest first, up to ~30M parameters). The largest two are among the
# first five, so a later peak above the fifth test's is accumulation, not a bigger model.
MEMORY_MODELS = (
    "resnet18",
    "efficientnet_b5",
    "mobilenet_v2",
    "densenet161",
    "squeezenet1_0",
    "squeezenet1_1",
    "shufflenet_v2_x0_5",
    "mnasnet0_5",
    "shufflenet_v2_x1_0",
    "mobilenet_v3_small",
    "mnasnet0_75",
    "shufflenet_v2_x1_5",
    "regnet_y_400mf",
    "mnasnet1_0",
    "efficientnet_b0",
    "mobilenet_v3_large",
    "regnet_x_400mf",
    "mnasnet1_3",
    "regnet_y_800mf",
    "googlenet",
    "regnet_x_800mf",
    "shufflenet_v2_x2_0",
    "efficientnet_b1",
    "densenet121",
    "efficientnet_b2",
    "regnet_x_1_6gf",
    "regnet_y_1_6gf",
    "efficientnet_b3",
    "densenet169",
    "regnet_x_3_2gf",
    "efficientnet_b4",
    "regnet_y_3_2gf",
    "densenet201",
    "efficientnet_v2_s",
    "resnet34",
    "resnext50_32x4d",
    "resnet50",
    "swin_t",
    "swin_v2_t",
    "convnext_tiny",
)

# P4: every other one of those
SCALING_MODELS = MEMORY_MODELS[::2]

_EXTRA = {"googlenet": {"aux_logits": False, "init_weights": False}}


def build(name: str) -> torch.nn.Module:
    """``torchvision.models.get_model(name, weights=None)`` in eval mode, seeded."""
    import torchvision

    torch.manual_seed(0)
    return torchvision.models.get_model(name, weights=None, **_EXTRA.get(name, {})).eval()


def example_input() -> torch.Tensor:
    return torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))


def single_threaded_env() -> dict[str, str]:
    """The environment for a measured subprocess: one intra-op thread, so CPU time is
    the work itself and not spinning threads on a shared machine."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONHASHSEED="0")
    here = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH", "")) if p)
    return env


PYTHON = sys.executable
