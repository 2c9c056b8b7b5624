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

import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import check_against_bare  # noqa: E402
from export_overhead import MODELS  # noqa: E402  (the same 8 classifiers as E1)


def bare(model: torch.nn.Module, x: torch.Tensor) -> None:
    expected = model(x)
    ep = torch.export.export(model, (x,))
    onnx_program = torch.onnx.export(ep, dynamo=True, verbose=False)
    assert onnx_program is not None
    torch.testing.assert_close(onnx_program(x)[0], expected)


def main() -> None:
    check_against_bare("O1", __doc__.splitlines()[0], MODELS, bare, "onnx")


if __name__ == "__main__":
    main()
