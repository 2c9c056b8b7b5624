"""Tracing cost in CPU instructions: pytest_fxtrace.symbolic_trace vs torch.fx.symbolic_trace.

Both trace each model (``_zoo.OVERHEAD_MODELS``: untrained, eval) and build its
``GraphModule`` -- the first half of the raw harness P1 compares against, and the part of
a check that dominates it at 1x3x64x64. One process under valgrind's callgrind: both are
called twice per model to warm up, then once each, alternating, with counting switched on
around exactly that call (client requests, the helper of ``localize_instructions.py``).
Needs valgrind and a C compiler; about 5 minutes for the twelve models.

    python benchmarks/trace_instructions.py [--models resnet18,densenet121]

The graphs are the same (``tests/test_tracer.py`` compares the code and each node's
module stack); the difference is our tracer's ``create_arg``, which sends plain
arguments straight to torch.fx's own handler for them.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import _zoo
from localize_instructions import build_helper, callgrind, dump_total

CHILD = r"""
import ctypes, gc, json, sys
sys.path.insert(0, {benchmarks!r})
import torch, pytest_fxtrace, _zoo
torch.set_num_threads(1)
names, helper, order_file = sys.argv[1].split(","), sys.argv[2], sys.argv[3]
lib = ctypes.CDLL(helper)
tools = (("torch.fx", torch.fx.symbolic_trace), ("pytest_fxtrace", pytest_fxtrace.symbolic_trace))
order = []
for name in names:
    model = _zoo.build(name)
    for _ in range(2):
        for _, trace in tools:
            trace(model)
    for tool, trace in tools:
        gc.collect()
        lib.fxbench_on()
        trace(model)
        lib.fxbench_off()
        order.append((name, tool))
with open(order_file, "w") as f:
    json.dump(order, f)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(_zoo.OVERHEAD_MODELS))
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("needs valgrind's callgrind on PATH")
    with tempfile.TemporaryDirectory(prefix="fxbench-trace-") as tmp:
        helper = build_helper(tmp)
        if not helper:
            sys.exit("needs a C compiler and valgrind's headers (valgrind/callgrind.h)")
        child, order_file, out = Path(tmp, "child.py"), Path(tmp, "order.json"), Path(tmp, "callgrind.out")
        child.write_text(CHILD.format(benchmarks=str(Path(__file__).resolve().parent)))
        proc = subprocess.run(
            [*callgrind(out), _zoo.PYTHON, str(child), args.models, helper, str(order_file)],
            capture_output=True, text=True, env=_zoo.single_threaded_env(),
        )  # fmt: skip
        if proc.returncode != 0:
            sys.exit(f"the callgrind run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        counts: dict[str, dict[str, int]] = {}
        for k, (name, tool) in enumerate(json.loads(order_file.read_text()), 1):  # the k-th call is dump k
            counts.setdefault(name, {})[tool] = dump_total(f"{out}.{k}")
    print(f"{'model':20s} {'torch.fx M':>11s} {'ours M':>8s} {'ratio':>6s}")
    ratios = []
    for name, c in counts.items():
        ratios.append(c["pytest_fxtrace"] / c["torch.fx"])
        print(f"{name:20s} {c['torch.fx'] / 1e6:11.1f} {c['pytest_fxtrace'] / 1e6:8.1f} {ratios[-1]:6.3f}")
    print(f"median ratio (trace + GraphModule, instructions): {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
