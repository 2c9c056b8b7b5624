"""E1: the torch.export check against the bare export harness.

The bare harness is what a test suite writes by hand::

    expected = model(x)
    ep = torch.export.export(model, (x,))
    torch.testing.assert_close(ep.module()(x), expected)

The check does the same export, replay and comparison, plus what it adds: the model's
and RNG state kept and restored, buffers lent to the replay, torch's output held back,
the program's code text for a snapshot. Both run in this process, interleaved (for each
repetition every model runs both, the order alternating; the first repetition is a
warm-up), CPU time of one intra-op thread, median per model; the figure is the median
of the per-model ratios.

    python benchmarks/export_overhead.py [--reps 5] [--models resnet18,...]
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import check_against_bare  # noqa: E402

MODELS = (
    "resnet18",
    "mobilenet_v3_small",
    "squeezenet1_1",
    "shufflenet_v2_x0_5",
    "mnasnet0_5",
    "regnet_x_400mf",
    "efficientnet_b0",
    "googlenet",
)


def bare(model: torch.nn.Module, x: torch.Tensor) -> None:
    expected = model(x)
    ep = torch.export.export(model, (x,))
    torch.testing.assert_close(ep.module()(x), expected)


def main() -> None:
    check_against_bare("E1", __doc__.splitlines()[0], MODELS, bare, "export")


if __name__ == "__main__":
    main()
