"""How the benchmarks time two or three ways of doing one thing: interleaved, in CPU time.

The machines are shared and noisy, so every ratio the benchmarks quote compares runs made
in turn in one process: each round runs every way once, the order rotating so that each
goes first, middle and last in turn; the first round is a warm-up; the figure is the
median of the rest, in CPU seconds of this process (``time.process_time``).
"""

from __future__ import annotations

import contextlib
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
