"""The model libraries some tests check, which not every torch release has: tox.ini pins
them per torch (torch 2.13.0 has no torchvision release, and timm needs torchvision).
A test that needs one is skipped, with the reason, where it is not installed."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

import pytest

WHY = {
    "torchvision": "torchvision is not installed (no release matches this torch; tox.ini pins it per torch)",
    "timm": "timm is not installed (it requires torchvision, which has no release for this torch)",
    "transformers": "transformers is not installed (tox.ini pins a release that supports this torch)",
}


def missing(name: str) -> bool:
    return importlib.util.find_spec(name) is None


def needs(name: str) -> pytest.MarkDecorator:
    """Skip the test where the library ``name`` is not installed."""
    return pytest.mark.skipif(missing(name), reason=WHY[name])


def module(name: str) -> ModuleType | None:
    """The library, or None where it is not installed (tests using it are marked ``needs``)."""
    return None if missing(name) else importlib.import_module(name)


def require(name: str) -> ModuleType:
    """``pytest.importorskip`` with the reason: for a test module that needs the library throughout."""
    return pytest.importorskip(name, reason=WHY[name])
