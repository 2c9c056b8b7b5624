"""O1: the ONNX check against the bare ONNX harness (issue 40's cost).

The bare harness is what a test suite writes by hand to learn whether a model exports to
ONNX and answers as eager does in ONNX Runtime::

    expected = model(x)
    ep = torch.export.export(model, (x,))
    onnx_program = torch.onnx.export(ep, dynamo=True)
    torch.testing.assert_close(onnx_program(x)[0], expected)

The check (``check_traceable(model, (x,), backend="onnx")``) does the eager call, the same
export (non-strict, as ``torch.export.export`` defaults to on torch 2.14), conversion, ONNX
Runtime session and run, and the comparison, plus what it adds: the model's and RNG state
kept and restored, torch's output held back, the ONNX graph's text for a snapshot. Both run
in this process, interleaved (for each repetition every model runs both, the order
alternating; the first repetition a warm-up), CPU time of this process (ONNX Runtime's
threads included, one torch intra-op thread), median per model; the figure is the median of
the per-model ratios, as E1's and C1's.

    python benchmarks/onnx_overhead.py [--reps 5] [--models resnet18,...]
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
from export_overhead import MODELS  # noqa: E402  (the same 8 classifiers as E1)


def bare(model: torch.nn.Module, x: torch.Tensor) -> None:
    expected = model(x)
    ep = torch.export.export(model, (x,))
    onnx_program = torch.onnx.export(ep, dynamo=True, verbose=False)
    assert onnx_program is not None
    torch.testing.assert_close(onnx_program(x)[0], expected)


def checked(model: torch.nn.Module, x: torch.Tensor) -> None:
    from pytest_fxtrace import check_traceable

    report = check_traceable(model, (x,), backend="onnx")
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
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    print(f"{'model':24} {'bare s':>8} {'check s':>8} {'ratio':>6}")
    for name in names:
        model, x = build(name), example_input()
        runs = {"bare": bare, "check": checked}
        medians, _ = interleaved({label: functools.partial(run, model, x) for label, run in runs.items()}, options.reps)
        b, c = medians["bare"], medians["check"]
        ratios.append(c / b)
        print(f"{name:24} {b:8.3f} {c:8.3f} {c / b:6.3f}", flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    print(f"O1 median ratio check / bare over {len(names)} models: {statistics.median(ratios):.3f} (target <= 1.10)")


if __name__ == "__main__":
    main()
