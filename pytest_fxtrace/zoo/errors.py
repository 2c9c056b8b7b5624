"""The zoo's own failure to make a model: ``model-error`` with its message, a finding about
the registry, not the model's traceability."""

from __future__ import annotations


class ZooError(Exception):
    """A model could not be built or given inputs; ``model-error`` with this message."""
