import pytest
import torch


@pytest.fixture(autouse=True)
def seeded() -> None:
    torch.manual_seed(0)


@pytest.fixture
def images() -> torch.Tensor:
    return torch.randn(2, 3, 64, 64)
