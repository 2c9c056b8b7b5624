"""C1: the torch.compile check against the bare compile harness.

The bare harness is what a test suite writes by hand to learn a model's graph breaks and
check the compiled model::

    torch._dynamo.reset()
    expected = model(x)
    explanation = torch._dynamo.explain(model)(x)      # the breaks and their reasons
    torch.testing.assert_close(torch.compile(model, backend="eager")(x), expected)

The check (``check_traceable(model, (x,), backend="compile")``) does the eager call, one
compile in a Dynamo state of its own (no ``reset``: the process's other compiled functions
are kept), the replay and comparison, plus what it adds: every break site with the user's
line and submodule, each recompile in the user's words, the model's and RNG state kept and
restored, buffers lent, Dynamo's counters put back. Both run in this process, interleaved
(for each repetition every model runs each, the order rotated; the first repetition a
warm-up), each after a ``torch._dynamo.reset()`` outside its timing (the check's compiled
model reads the default cache region too, and would reuse what the harness's
``torch.compile`` left there), CPU time of one intra-op thread, median per model; the figure
is the median of the per-model ratios.

The harness above compiles twice (``explain`` compiles the model too), so the script also
times the harness without ``explain`` (``reset``, eager, one compile, ``assert_close``),
which finds no break site: check / that is the check's cost over one bare compile.

    python benchmarks/compile_overhead.py [--reps 5] [--models resnet18,...]
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
from _timing import checker, interleaved  # noqa: E402
from _zoo import build, example_input  # noqa: E402
from export_overhead import MODELS  # noqa: E402  (the same 8 classifiers as E1)


def bare(model: torch.nn.Module, x: torch.Tensor) -> None:
    torch._dynamo.reset()
    expected = model(x)
    torch._dynamo.explain(model)(x)
    torch.testing.assert_close(torch.compile(model, backend="eager")(x), expected)


def compile_only(model: torch.nn.Module, x: torch.Tensor) -> None:
    torch._dynamo.reset()
    expected = model(x)
    torch.testing.assert_close(torch.compile(model, backend="eager")(x), expected)


checked = checker("compile")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--models", default=",".join(MODELS))
    options = parser.parse_args()
    torch.set_num_threads(1)
    names = options.models.split(",")
    ratios, over_one = [], []
    print(f"torch {torch.__version__}, {len(names)} models, 1x3x64x64, {options.reps} reps (+1 warm-up)")
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    print(f"{'model':24} {'bare s':>8} {'check s':>8} {'ratio':>6} {'1 compile s':>11} {'ratio':>6}")
    for name in names:
        model, x = build(name), example_input()
        runs = {"bare": bare, "check": checked, "one": compile_only}
        # an empty cache before each: a check reads the default cache region too, and would
        # reuse what the harness's torch.compile left there
        medians, _ = interleaved(
            {label: functools.partial(run, model, x) for label, run in runs.items()},
            options.reps,
            before=torch._dynamo.reset,
        )
        b, c, one = medians["bare"], medians["check"], medians["one"]
        ratios.append(c / b)
        over_one.append(c / one)
        print(f"{name:24} {b:8.3f} {c:8.3f} {c / b:6.3f} {one:11.3f} {c / one:6.3f}", flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    print(f"C1 median ratio check / bare over {len(names)} models: {statistics.median(ratios):.3f} (target <= 1.10)")
    print(f"check / the harness without explain (one compile): {statistics.median(over_one):.3f}")


if __name__ == "__main__":
    main()
