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

import argparse
import functools
import os
import statistics
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import interleaved  # noqa: E402
from _zoo import build, example_input  # noqa: E402

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


def checked(model: torch.nn.Module, x: torch.Tensor) -> None:
    from pytest_fxtrace import check_traceable

    report = check_traceable(model, (x,), backend="export")
    if not report.ok:
        raise SystemExit(report.describe())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--models", default=",".join(MODELS))
    options = parser.parse_args()
    torch.set_num_threads(1)
    names = options.models.split(",")
    ratios = []
    print(f"torch {torch.__version__}, {len(names)} models, 1x3x64x64, {options.reps} reps (+1 warm-up)")
    print(f"{'model':24} {'bare s':>8} {'check s':>8} {'ratio':>6}")
    for name in names:
        model, x = build(name), example_input()
        medians, _ = interleaved(
            {"bare": functools.partial(bare, model, x), "check": functools.partial(checked, model, x)}, options.reps
        )
        b, c = medians["bare"], medians["check"]
        ratios.append(c / b)
        print(f"{name:24} {b:8.3f} {c:8.3f} {c / b:6.3f}", flush=True)
    print(f"E1 median ratio check / bare over {len(names)} models: {statistics.median(ratios):.3f} (target <= 1.10)")


if __name__ == "__main__":
    main()
