"""pytest-split's durations file from ``--fx-report`` documents, so the next CI run splits a
zoo by what each model really cost (``python -m pytest_fxtrace.merge ... --durations PATH``).

pytest-split (``--splits N --group k``) reads ``.test_durations``: one JSON object, node id
-> seconds, each test's setup, call and teardown summed, written with ``json.dump(...,
sort_keys=True, indent=4)``; a test it has no entry for counts as the average. The report's
``"durations"`` are those sums for the checked tests, as pytest measured them, so the file
written here holds the bytes pytest-split's own ``--store-durations`` writes for the same
tests. Entries of tests the reports do not hold are kept, as pytest-split keeps them.

Pytest-free and torch-free.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path


class DurationsError(ValueError):
    """A durations file that is not pytest-split's format; the message says where."""


def read_durations(path: Path) -> dict[str, float]:
    """The entries of an existing durations file (none when there is no file); pytest-split's
    older list-of-pairs form is read too."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    try:
        data = json.loads(text)
        if isinstance(data, list):
            data = dict(data)
    except (ValueError, TypeError) as exc:
        raise DurationsError(f"{path}: not a pytest-split durations file: {exc}") from None
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) for k, v in data.items()
    ):
        raise DurationsError(f'{path}: not a pytest-split durations file (one JSON object: {{"node id": seconds}})')
    return {key: float(value) for key, value in data.items()}


def durations_text(durations: Mapping[str, float]) -> str:
    """The file's text, as pytest-split writes it.

    Example::

        durations_text({"zoo/timm::resnet50": 3.25})  # '{\\n    "zoo/timm::resnet50": 3.25\\n}'
    """
    return json.dumps(dict(durations), sort_keys=True, indent=4)


def updated_durations(path: Path, durations: Mapping[str, float]) -> tuple[str, int]:
    """The file at ``path`` with ``durations`` written over its entries: (text, entries)."""
    merged = {**read_durations(path), **durations}
    return durations_text(merged), len(merged)


__all__ = ["DurationsError", "durations_text", "read_durations", "updated_durations"]
