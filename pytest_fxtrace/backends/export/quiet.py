"""torch's own output while exporting -- the partial graph it prints on a failure, its log
records, its warnings -- held back from the test's output and handed to the caller
(``quiet_torch``), so a user reads our diagnosis, and torch's words only with ``-vv``."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import warnings
from collections.abc import Iterator

from pytest_fxtrace.backends.export._compat import export_hooks_removed
from pytest_fxtrace.torchlogs import torch_logs_to


@dataclasses.dataclass
class TorchOutput:
    """What torch printed, logged and warned while exporting, held back from the test."""

    stderr: str = ""
    records: list[logging.LogRecord] = dataclasses.field(default_factory=list)
    warnings: list[warnings.WarningMessage] = dataclasses.field(default_factory=list)

    def lines(self) -> list[str]:
        """All of it as text, for ``-vv``."""
        found = [record.getMessage() for record in self.records]
        found += [f"{w.category.__name__}: {w.message}" for w in self.warnings]
        found += self.stderr.splitlines()
        return [line for line in found if line.strip()]


class _Keep(logging.Handler):
    def __init__(self, output: TorchOutput) -> None:
        super().__init__(logging.DEBUG)
        self.output = output

    def emit(self, record: logging.LogRecord) -> None:
        self.output.records.append(record)


@contextlib.contextmanager
def quiet_torch() -> Iterator[TorchOutput]:
    """Within the block, torch's prints to ``sys.stderr`` (the partial graph of a failed
    export), its log records and its warnings are kept in the yielded ``TorchOutput``
    instead of reaching the test's output; every logger is as before afterwards.

    Example::

        with quiet_torch() as held:
            torch.export.export(model, (x,))
    """
    output = TorchOutput()
    stderr = io.StringIO()
    try:
        with (
            export_hooks_removed(),
            torch_logs_to(_Keep(output)),
            contextlib.redirect_stderr(stderr),
            warnings.catch_warnings(record=True) as caught,
        ):
            warnings.simplefilter("always")
            try:
                yield output
            finally:
                output.warnings = caught
    finally:
        output.stderr = stderr.getvalue()
