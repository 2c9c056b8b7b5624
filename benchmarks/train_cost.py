"""T1: a train-mode check (``train=True``) against a bare forward-and-backward harness of the
same backend (issue 41: at most 1.15x).

The bare harness is what a test suite writes by hand to hold a captured program's training
step to eager's: the call being checked (``check_traceable`` runs it once, under
``no_grad``, as the test's own call), eager forward and ``torch.autograd.grad`` of the sum of
the output, the capture, its forward and ``torch.autograd.grad``, outputs and gradients
compared::

    with torch.no_grad():
        model(x)
    model.train()
    torch.manual_seed(0); out = model(x); grads = torch.autograd.grad(out.sum(), params)
    program = torch.fx.symbolic_trace(model)  # export: torch.export.export(...).module(); compile: aot_eager
    torch.manual_seed(0); got = program(x); got_grads = torch.autograd.grad(got.sum(), params)
    torch.testing.assert_close((got, got_grads), (out, grads))

The check does the same, plus what it adds: the model's state, ``requires_grad`` flags and RNG
kept and restored, buffers lent to both runs (the harness writes the user's running
statistics), every buffer compared, the gradients of inputs that require grad, the findings'
words. Both run in this process, interleaved, CPU time of one intra-op thread, median per model;
the figure is the median of the per-model ratios. Batch 2 (batch norm in train mode).

    python benchmarks/train_cost.py --backend fx|export|compile [--reps 5] [--models resnet18,...]
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import check_against_bare  # noqa: E402

MODELS = ("resnet18", "mobilenet_v3_small", "squeezenet1_1", "shufflenet_v2_x0_5", "mnasnet0_5", "regnet_x_400mf")


def _step(run: object, model: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    params = [p for p in model.parameters() if p.requires_grad]
    torch.manual_seed(0)
    out = run(x)  # type: ignore[operator]
    return out.detach(), torch.autograd.grad(out.sum(), params)


def bare_for(backend: str):
    def bare(model: torch.nn.Module, x: torch.Tensor) -> None:
        with torch.no_grad():
            model(x)
        training = model.training
        model.train()
        try:
            expected = _step(model, model, x)
            if backend == "fx":
                program = torch.fx.symbolic_trace(model)
            elif backend == "export":
                program = torch.export.export(model, (x,)).module()
            else:  # (torch._dynamo.reset() runs ahead of both, outside the timing)
                program = torch.compile(model, backend="aot_eager")
            torch.testing.assert_close(_step(program, model, x), expected)
        finally:
            model.train(training)

    return bare


def main() -> None:
    backend = "fx"
    if "--backend" in sys.argv:
        at = sys.argv.index("--backend")
        backend = sys.argv[at + 1]
        del sys.argv[at : at + 2]
    check_against_bare(
        f"T1 ({backend})", __doc__.splitlines()[0], MODELS, bare_for(backend), backend,
        check_options={"train": True}, target=1.15, batch=2,
        before=torch._dynamo.reset if backend == "compile" else None,
    )


if __name__ == "__main__":
    main()
