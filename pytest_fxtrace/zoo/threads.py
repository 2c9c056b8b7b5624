"""Each zoo check's share of the CPUs as torch's intra-op thread count.

Under ``pytest -n N`` every process that runs checks takes torch's default, a thread per
core: N of them oversubscribe the machine, and OpenMP's spinning barriers then make a
check many times slower (an 8-convolution loop: 7.7 s with two 2-thread processes on 2
cores at once, 0.36 s alone). The share is the CPUs this process may use divided by the
xdist workers. An isolated child gets it as ``OMP_NUM_THREADS`` (``plugin/isolate.py``);
a zoo item checked in pytest's own process gets it from ``cpu_share()`` for the length of
its check, torch's count put back after it. The user's own setting wins: an
``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS`` in the environment, or a thread count other
than torch's default (``torch.set_num_threads`` in a conftest or fixture), is left alone.

Pytest-free; torch is imported only by ``cpu_share``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

USER_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")  # what torch reads its count from


def child_threads(environ: Mapping[str, str] = os.environ) -> str:
    """torch's intra-op threads for one checking process: the CPUs this process may use,
    shared among the xdist workers (each checks in its own process, or keeps one child).

    Example::

        child_threads({"PYTEST_XDIST_WORKER_COUNT": "2"})  # "1" on a 2-CPU machine
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    workers = int(environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    return str(max(1, cpus // max(1, workers)))


def torch_defaults() -> set[int]:
    """The thread counts torch starts with when nothing sets them: one per physical core
    (what it reads through cpuinfo: ``/sys`` topology on Linux), or one per CPU."""
    counts = {os.cpu_count() or 1}
    cores = set()
    for topology in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/topology"):
        try:
            cores.add(((topology / "physical_package_id").read_text(), (topology / "core_id").read_text()))
        except OSError:
            continue
    if cores:
        counts.add(len(cores))
    return counts


@contextlib.contextmanager
def cpu_share(environ: Mapping[str, str] = os.environ) -> Iterator[int]:
    """torch's intra-op threads at this process's share of the CPUs while the block runs,
    unless the user chose a count; yields the count in force.

    Example::

        with cpu_share():
            run_case(registry, source, name, options)
    """
    import torch

    before = torch.get_num_threads()
    share = int(child_threads(environ))
    chosen = any(environ.get(name) for name in USER_VARIABLES) or before not in torch_defaults()
    if chosen or share >= before:
        yield before
        return
    torch.set_num_threads(share)
    try:
        yield share
    finally:
        torch.set_num_threads(before)


__all__ = ["USER_VARIABLES", "child_threads", "cpu_share", "torch_defaults"]
