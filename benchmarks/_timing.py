"""How the benchmarks time two or three ways of doing one thing: interleaved, in CPU time.

The machines are shared and noisy, so every ratio the benchmarks quote compares runs made
in turn in one process: each round runs every way once, the order rotating so that each
goes first, middle and last in turn; the first round is a warm-up; the figure is the
median of the rest, in CPU seconds of this process (``time.process_time``).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import statistics
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

import torch

T = TypeVar("T")


def interleaved(
    runs: Mapping[str, Callable[[], T]],
    reps: int,
    *,
    before: Callable[[], None] | None = None,
    no_grad: bool = True,
) -> tuple[dict[str, float], dict[str, T]]:
    """(median CPU seconds of each run, each run's last result) over ``reps`` rounds after
    a warm-up round. ``before`` runs ahead of each run, outside its timing (e.g.
    ``torch._dynamo.reset``); ``no_grad`` times each under ``torch.no_grad()``."""
    labels = list(runs)
    times: dict[str, list[float]] = {label: [] for label in labels}
    results: dict[str, T] = {}
    for rep in range(reps + 1):
        for label in labels[rep % len(labels) :] + labels[: rep % len(labels)]:
            if before is not None:
                before()
            gc.collect()
            start = time.process_time()
            with torch.no_grad() if no_grad else contextlib.nullcontext():
                results[label] = runs[label]()
            if rep:
                times[label].append(time.process_time() - start)
    return {label: statistics.median(times[label]) for label in labels}, results


def checker(backend: str, **options: object) -> Callable[[torch.nn.Module, torch.Tensor], None]:
    """One check of ``model`` on ``x`` with ``backend`` and ``options`` (``check_traceable``);
    a check that does not pass stops the benchmark, saying why."""

    def checked(model: torch.nn.Module, x: torch.Tensor) -> None:
        from pytest_fxtrace import check_traceable

        report = check_traceable(model, (x,), backend=backend, **options)
        if not report.ok:
            raise SystemExit(report.describe())

    return checked


def check_against_bare(
    figure: str,
    description: str,
    models: tuple[str, ...],
    bare: Callable[[torch.nn.Module, torch.Tensor], None],
    backend: str,
    *,
    check_options: Mapping[str, object] | None = None,
    target: float = 1.10,
    batch: int = 1,
    before: Callable[[], None] | None = None,
) -> None:
    """The command line of a benchmark that times a backend's check against a bare harness
    (``--reps``, ``--models``), interleaved per model, one torch thread; prints each model's
    medians and ratio, then ``figure``'s median ratio over the models (against ``target``).
    ``options``: the check's (``train=True`` runs both with grad enabled); ``batch``: the
    input's batch size (train mode's batch norm needs two); ``before``: run ahead of each run,
    outside its timing (``torch._dynamo.reset``)."""
    import argparse
    import os

    from _zoo import build, example_input

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--models", default=",".join(models))
    options = parser.parse_args()
    torch.set_num_threads(1)
    names = options.models.split(",")
    ratios = []
    checked = checker(backend, **(check_options or {}))
    print(f"torch {torch.__version__}, {len(names)} models, {batch}x3x64x64, {options.reps} reps (+1 warm-up)")
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    print(f"{'model':24} {'bare s':>8} {'check s':>8} {'ratio':>6}")
    for name in names:
        model, x = build(name), example_input().expand(batch, -1, -1, -1).contiguous()
        runs = {"bare": bare, "check": checked}
        grad = bool((check_options or {}).get("train"))
        medians, _ = interleaved(
            {label: functools.partial(run, model, x) for label, run in runs.items()},
            options.reps,
            before=before,
            no_grad=not grad,
        )
        b, c = medians["bare"], medians["check"]
        ratios.append(c / b)
        print(f"{name:24} {b:8.3f} {c:8.3f} {c / b:6.3f}", flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    print(f"{figure} median ratio check / bare over {len(names)} models: {statistics.median(ratios):.3f} (target <= {target:.2f})")
