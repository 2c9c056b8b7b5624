"""Localization cost in CPU instructions: pytest_fxtrace.recursive_trace vs modelopt's.

The noise-free companion of ``localize_vs_modelopt.py`` (whose CPU times move by a few
per cent between runs on a shared machine): each tool runs in its own process under
valgrind's callgrind, with instrumentation switched on only around ``--runs`` calls on
fresh copies of the model (after two warm-up calls), and the instructions executed are
divided by the number of calls. Needs ``valgrind`` (``callgrind_control``) on PATH and
``pip install -e .[bench]``; takes about two minutes per model, tool and seed.

    python benchmarks/localize_instructions.py [--models raft_small,retinanet_resnet50_fpn] [--runs 3] [--seeds 0]

Instrumentation is switched by callgrind's client requests from a tiny C helper built
on the fly (needs a C compiler and valgrind's headers), so exactly the calls are
counted; without them it falls back to ``callgrind_control`` (a few hundred thousand
instructions of its own polling get counted, varying run to run). Python's string
hashing is seeded (``--seeds``, PYTHONHASHSEED): dict layouts, and so the counts, move
by about 1 % between seeds, for both tools alike; with several seeds the mean is shown.

Instructions are not time (cache misses, branch mispredictions are not in them), but a
ratio of instruction counts on the same model is a stable measure of the work each does.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r'''
import copy, ctypes, gc, os, subprocess, sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, {benchmarks!r})
import torch
torch.set_num_threads(1)
from localize_vs_modelopt import models
tool, name, runs, helper = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
[(_, model, _, _)] = models([name])
if tool == "modelopt":
    from modelopt.torch.trace import recursive_trace as localize
else:
    from pytest_fxtrace import recursive_trace as localize
copies = [copy.deepcopy(model) for _ in range(runs + 2)]
for m in copies[:2]:
    localize(m)
gc.collect()
if helper:
    lib = ctypes.CDLL(helper)
    on, off = lib.fxbench_on, lib.fxbench_off
else:
    control = lambda what: subprocess.run(["callgrind_control", "-i", what, str(os.getpid())], capture_output=True)
    on, off = (lambda: control("on")), (lambda: control("off"))
on()
for m in copies[2:]:
    localize(m)
off()
'''

HELPER = r"""
#include <valgrind/callgrind.h>
void fxbench_on(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void fxbench_off(void) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS_AT("measured"); }
"""


def build_helper(folder: str) -> str:
    """The toggle helper's path, or "" where it cannot be built."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return ""
    source, library = Path(folder, "toggle.c"), Path(folder, "libtoggle.so")
    source.write_text(HELPER)
    built = subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", str(library), str(source)], capture_output=True)
    return str(library) if built.returncode == 0 else ""


def callgrind(out: Path | str) -> list[str]:
    """The command prefix that runs a program under callgrind with counting off until
    the helper (or ``callgrind_control``) turns it on; dumps go to ``out`` (``out.N``
    for the helper's N-th dump)."""
    return ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]


def dump_total(path: Path | str) -> int | None:
    """The instructions counted in one callgrind dump; None when there is none."""
    path = Path(path)
    found = re.search(r"^totals: (\d+)", path.read_text() if path.exists() else "", re.M)
    return int(found.group(1)) if found else None


def instructions(tool: str, name: str, runs: int, seed: int, helper: str) -> float:
    with tempfile.TemporaryDirectory(prefix="fxbench-callgrind-") as tmp:
        child = Path(tmp, "child.py")
        child.write_text(CHILD.format(benchmarks=str(Path(__file__).resolve().parent)))
        out = Path(tmp, "callgrind.out")
        proc = subprocess.run(
            [*callgrind(out), sys.executable, str(child), tool, name, str(runs), helper],
            capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": str(seed)},
        )
        total = dump_total(f"{out}.1" if helper else out)  # the helper's dump, or the one at exit
        if proc.returncode != 0 or total is None:
            sys.exit(f"callgrind run of {tool} on {name} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        return total / runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="raft_small", help="comma-separated names from localize_vs_modelopt.py")
    parser.add_argument("--runs", type=int, default=3, help="measured calls per tool (default 3)")
    parser.add_argument("--seeds", default="0", help="comma-separated PYTHONHASHSEED values (default 0)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("needs valgrind's callgrind (valgrind and callgrind_control on PATH)")
    seeds = [int(seed) for seed in args.seeds.split(",")]
    with tempfile.TemporaryDirectory(prefix="fxbench-helper-") as folder:
        helper = build_helper(folder)
        print(f"{'model':40} {'modelopt MIr':>13} {'ours MIr':>10} {'ratio':>6}")
        for name in args.models.split(","):
            theirs = [instructions("modelopt", name, args.runs, seed, helper) for seed in seeds]
            ours = [instructions("ours", name, args.runs, seed, helper) for seed in seeds]
            ratios = [o / t for o, t in zip(ours, theirs, strict=True)]
            spread = f"  (per seed {min(ratios):.3f}..{max(ratios):.3f})" if len(seeds) > 1 else ""
            mean_theirs, mean_ours = statistics.mean(theirs), statistics.mean(ours)
            print(f"{name:40} {mean_theirs / 1e6:13.1f} {mean_ours / 1e6:10.1f} {mean_ours / mean_theirs:6.3f}{spread}",
                  flush=True)
    toggles = "client requests" if helper else "callgrind_control"
    print(f"(callgrind, {args.runs} calls per tool after 2 warm-up calls, fresh model copies, "
          f"PYTHONHASHSEED {args.seeds}, toggled by {toggles}; python {sys.version.split()[0]})")


if __name__ == "__main__":
    main()
