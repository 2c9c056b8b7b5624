"""The RNG streams a forward may draw from, captured before a call and put back after.

A check replays a recorded call under the streams eager drew from, and leaves them
as the test left them (``state.ModelState`` does the same for the model).
"""

from __future__ import annotations

import dataclasses
import random
import sys
from typing import Any

import torch

from pytest_fxtrace.timelimit import cleanup


@dataclasses.dataclass
class RngState:
    """Every RNG a forward may draw from: torch CPU, initialised CUDA devices, Python, NumPy."""

    torch_cpu: torch.Tensor
    torch_cuda: list[torch.Tensor] | None
    python: Any
    numpy: Any  # numpy.random.get_state() of NumPy's legacy global generator

    @classmethod
    def capture(cls) -> RngState:
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        numpy = sys.modules.get("numpy")
        return cls(torch.get_rng_state(), cuda, random.getstate(), _numpy_state(numpy) if numpy is not None else None)

    @cleanup
    def restore(self) -> None:
        torch.set_rng_state(self.torch_cpu)
        if self.torch_cuda is not None:
            torch.cuda.set_rng_state_all(self.torch_cuda)
        random.setstate(self.python)
        numpy = sys.modules.get("numpy")
        if self.numpy is not None and numpy is not None:
            _set_numpy_state(numpy, self.numpy)


def _numpy_state(numpy: Any) -> Any:
    return numpy.random.get_state()


def _set_numpy_state(numpy: Any, state: Any) -> None:
    numpy.random.set_state(state)
