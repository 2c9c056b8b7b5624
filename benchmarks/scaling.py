"""P4: a 20-model suite, serial vs ``pytest -n 2`` (pytest-xdist).

Twenty ``@pytest.mark.traceable`` tests (``_zoo.SCALING_MODELS``, untrained,
1x3x64x64), each building its model and calling it. The session's wall-clock time
(process start to exit, as a user waits for it) serial and with ``-n 2``,
alternating, median over repetitions. Both runs use one intra-op thread per process
(``OMP_NUM_THREADS=1``): with two workers on two cores, more threads only contend.

Figures:

* ``serial / -n 2`` wall time (target >= 1.7 on 2 cores) -- meaningful only on a
  machine whose two cores are otherwise idle;
* the same ratio in CPU time along the critical path: the serial process's CPU
  seconds over the busiest ``-n 2`` worker's (each process's own ``process_time`` at
  session end, imports included). That is the speed-up two free cores give, and
  it does not depend on what else the machine is running.

Usage::

    python benchmarks/scaling.py [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import _zoo

CONFTEST = '''
import os, time

def pytest_sessionfinish(session):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "serial")
    with open(os.path.join(os.environ["FXBENCH_CPU_DIR"], worker), "w") as f:
        f.write(repr(time.process_time()))
'''

TESTS = '''
import os
import pytest, torch
import _zoo

torch.set_num_threads(1)

@pytest.mark.traceable
@pytest.mark.parametrize("name", os.environ["FXBENCH_MODELS"].split(","))
def test_model(name):
    model = _zoo.build(name)
    out = model(_zoo.example_input())
    assert out.shape == (1, 1000)
'''


def session(root: Path, extra: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the busiest test process)"""
    cpu_dir = root / "cpu"
    cpu_dir.mkdir(exist_ok=True)
    for old in cpu_dir.iterdir():
        old.unlink()
    env = dict(
        _zoo.single_threaded_env(),
        FXBENCH_MODELS=",".join(_zoo.SCALING_MODELS),
        FXBENCH_CPU_DIR=str(cpu_dir),
    )
    cmd = [_zoo.PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra, str(root)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"the benchmark session failed (exit {proc.returncode}):\n{proc.stdout[-4000:]}{proc.stderr[-2000:]}")
    workers = {p.name: float(p.read_text()) for p in cpu_dir.iterdir() if p.name != "serial" or not extra}
    return wall, max(workers.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="sessions of each kind (default 3)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fxbench-scaling-") as tmp:
        root = Path(tmp)
        (root / "conftest.py").write_text(textwrap.dedent(CONFTEST))
        (root / "test_scaling.py").write_text(textwrap.dedent(TESTS))
        session(root, [])  # warm the file caches (imports) before measuring
        serial, parallel = [], []
        for _ in range(args.reps):
            serial.append(session(root, []))
            parallel.append(session(root, ["-n", "2"]))
    s, p = statistics.median(w for w, _ in serial), statistics.median(w for w, _ in parallel)
    sc, pc = statistics.median(c for _, c in serial), statistics.median(c for _, c in parallel)
    print(f"P4 scaling: {len(_zoo.SCALING_MODELS)} marked torchvision model tests, "
          f"{os.cpu_count()} CPUs, {args.reps} alternating sessions each")
    print(f"  serial  wall s: {', '.join(f'{t:.1f}' for t, _ in serial)}  (median {s:.1f}); "
          f"CPU s of the process: median {sc:.1f}")
    print(f"  -n 2    wall s: {', '.join(f'{t:.1f}' for t, _ in parallel)}  (median {p:.1f}); "
          f"CPU s of the busiest worker: median {pc:.1f}")
    print(f"  load average during the run: {os.getloadavg()[0]:.1f} (1 min)")
    print(f"P4 speed-up serial / -n 2, wall:                  {s / p:.2f}x   target >= 1.7x (idle cores)")
    print(f"P4 speed-up serial / -n 2, CPU on the critical path: {sc / pc:.2f}x")


if __name__ == "__main__":
    main()
