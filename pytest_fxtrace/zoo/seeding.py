"""Seeds for zoo models: a stable seed per model and step, and a block run with every global
random stream seeded and put back after. Used by the registries (``registries.build_case``,
``run_case``) and transformers' ladder of shrinks; pytest-free."""

from __future__ import annotations

import contextlib
import random
import sys
import zlib
from collections.abc import Iterator


def name_seed(name: str, step: str) -> int:
    """The seed of one step ("build", "inputs", "check") of model ``name``: a stable hash
    (not ``hash()``, which differs between processes), so a model's weights and inputs are
    the same whichever models ran before it, in any selection, order, worker or child.

    Example::

        name_seed("resnet18", "build") == name_seed("resnet18", "build")  # in every process
    """
    return zlib.crc32(f"{step}:{name}".encode())


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run the block with every global RNG seeded with ``seed``, and put each back after,
    so seeding a model changes no other stream (the test's, the next model's)."""
    import torch

    from pytest_fxtrace.rng import RngState

    saved = RngState.capture()
    try:
        # the CPU generator alone: torch.manual_seed would queue a seed for an uninitialised
        # CUDA, applied when CUDA starts, after we have restored everything else
        torch.default_generator.manual_seed(seed)
        if torch.cuda.is_initialized():
            torch.cuda.manual_seed_all(seed)
        random.seed(seed)
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            numpy.random.seed(seed)
        yield
    finally:
        saved.restore()
