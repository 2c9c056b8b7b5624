"""D1: what judging the batch dimension at unseen sizes costs, against a one-size export check.

Both are ``check_traceable(model, (x,), backend="export")`` on the same model and input: the
one-size check (the program exported at the recorded size, replayed, compared), and the same
with ``dynamic="batch"`` (the batch exported with ``Dim.AUTO``, then the program and eager at
batch 1, 3, 4 and 5 around the example's 2, each compared; the shape log read once). In this
process, interleaved (each repetition runs both, the order alternating; the first repetition
is a warm-up), CPU time of one intra-op thread, median per model; the figure is the median of
the per-model ratios over the E1 torchvision classifiers at 2x3x64x64.

A third run, for what the gate itself adds: the bare harness a user writes for a dynamic batch
(``torch.export.export(model, (x,), dynamic_shapes={"x": {0: Dim.AUTO}})``, ``ep.module()(x)``,
``assert_close``). torch's export with a symbolic dimension costs about twice a static one by
itself (squeezenet1_1: 0.30 against 0.16 s), so D1's floor is set by torch, not by the probes.

    python benchmarks/dims_cost.py [--reps 3] [--models resnet18,...]
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
from _zoo import build  # noqa: E402
from export_overhead import MODELS  # noqa: E402


def checked(model: torch.nn.Module, x: torch.Tensor, dynamic: str | None) -> int:
    from pytest_fxtrace import check_traceable

    report = check_traceable(model, (x,), backend="export", dynamic=dynamic)
    if not report.ok:
        raise SystemExit(report.describe())
    return len(report.dims or ())


def bare_dynamic(model: torch.nn.Module, x: torch.Tensor) -> int:
    expected = model(x)
    ep = torch.export.export(model, (x,), dynamic_shapes={"x": {0: torch.export.Dim.AUTO}})
    torch.testing.assert_close(ep.module()(x), expected)
    return 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--models", default=",".join(MODELS))
    options = parser.parse_args()
    torch.set_num_threads(1)
    names = options.models.split(",")
    ratios, over_bare = [], []
    print(f"torch {torch.__version__}, {len(names)} models, 2x3x64x64, {options.reps} reps (+1 warm-up)")
    print(f"{'model':24} {'one size s':>10} {'batch s':>8} {'ratio':>6} {'bare dyn s':>10} {'/bare':>6}")
    for name in names:
        model = build(name)
        x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
        medians, results = interleaved(
            {
                "one": functools.partial(checked, model, x, None),
                "batch": functools.partial(checked, model, x, "batch"),
                "bare": functools.partial(bare_dynamic, model, x),
            },
            options.reps,
        )
        if results["batch"] != 1:
            raise SystemExit(f"{name}: expected one judged dimension, got {results['batch']}")
        one, batch, bare = medians["one"], medians["batch"], medians["bare"]
        ratios.append(batch / one)
        over_bare.append(batch / bare)
        print(f"{name:24} {one:10.3f} {batch:8.3f} {batch / one:6.3f} {bare:10.3f} {batch / bare:6.3f}", flush=True)
    print(f"D1 median ratio batch-judged / one-size over {len(names)} models: {statistics.median(ratios):.3f} (target <= 1.5)")
    print(f"   median ratio batch-judged / bare dynamic-batch export harness: {statistics.median(over_bare):.3f}")


if __name__ == "__main__":
    main()
