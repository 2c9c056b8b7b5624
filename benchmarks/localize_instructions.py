"""Localization cost in CPU instructions: pytest_fxtrace.recursive_trace vs modelopt's.

The noise-free companion of ``localize_vs_modelopt.py`` (whose CPU times move by a few
per cent between runs on a shared machine): each tool runs in its own process under
valgrind's callgrind, with instrumentation switched on only around ``--runs`` calls on
fresh copies of the model (after two warm-up calls), and the instructions executed are
divided by the number of calls. Needs ``valgrind`` (``callgrind_control``) on PATH and
``pip install -e .[bench]``; takes about two minutes per model and tool.

    python benchmarks/localize_instructions.py [--models raft_small,retinanet_resnet50_fpn] [--runs 3]

Instructions are not time (cache misses, branch mispredictions are not in them), but a
ratio of instruction counts on the same model is a stable measure of the work each does.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r'''
import copy, gc, os, subprocess, sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, {benchmarks!r})
import torch
torch.set_num_threads(1)
from localize_vs_modelopt import models
tool, name, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
model = next(m for n, m, _, _ in models() if n == name)
if tool == "modelopt":
    from modelopt.torch.trace import recursive_trace as localize
else:
    from pytest_fxtrace import recursive_trace as localize
copies = [copy.deepcopy(model) for _ in range(runs + 2)]
for m in copies[:2]:
    localize(m)
gc.collect()
control = lambda what: subprocess.run(["callgrind_control", "-i", what, str(os.getpid())], capture_output=True)
control("on")
for m in copies[2:]:
    localize(m)
control("off")
'''


def instructions(tool: str, name: str, runs: int) -> float:
    with tempfile.TemporaryDirectory(prefix="fxbench-callgrind-") as tmp:
        child = Path(tmp, "child.py")
        child.write_text(CHILD.format(benchmarks=str(Path(__file__).resolve().parent)))
        out = Path(tmp, "callgrind.out")
        proc = subprocess.run(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
             sys.executable, str(child), tool, name, str(runs)],
            capture_output=True, text=True,
        )
        match = re.search(r"^totals: (\d+)", out.read_text() if out.exists() else "", re.M)
        if proc.returncode != 0 or match is None:
            sys.exit(f"callgrind run of {tool} on {name} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        return int(match.group(1)) / runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="raft_small", help="comma-separated names from localize_vs_modelopt.py")
    parser.add_argument("--runs", type=int, default=3, help="measured calls per tool (default 3)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("needs valgrind's callgrind (valgrind and callgrind_control on PATH)")
    print(f"{'model':40} {'modelopt MIr':>13} {'ours MIr':>10} {'ratio':>6}")
    for name in args.models.split(","):
        theirs = instructions("modelopt", name, args.runs)
        ours = instructions("ours", name, args.runs)
        print(f"{name:40} {theirs / 1e6:13.1f} {ours / 1e6:10.1f} {ours / theirs:6.3f}", flush=True)
    print(f"(callgrind, {args.runs} calls per tool after 2 warm-up calls, fresh model copies; "
          f"python {sys.version.split()[0]}, pid {os.getpid()})")


if __name__ == "__main__":
    main()
