"""The golden-snapshot life cycle end to end, as a user meets it, two ways: in one
process and with ``-n 2`` (``pytest_fxtrace.testing``).

``-n 0`` is not a third way: with no workers it runs the one-process path below (no
``workeroutput``, the ledger kept in the controller), and a session with xdist's plugin
loaded but not distributing is covered by test_xdist.py's ``[n0]`` runs. Folding it
saved about 100 s of the suite's 2,870 s (--durations, 2026-11-26)."""

import pytest

from pytest_fxtrace.testing import run_snapshot_cycle

MODES = {"no-xdist": ("-p", "no:xdist"), "n2": ("-n", "2")}


@pytest.mark.parametrize("mode", list(MODES))
def test_snapshot_cycle_missing_update_change_orphan(pytester: pytest.Pytester, mode: str) -> None:
    result = run_snapshot_cycle(pytester, *MODES[mode])
    assert sorted(path.rsplit("/", 1)[1] for path in result.final) == [
        "test_pipeline.Encoder.fx.txt",
        "test_pipeline.Head.fx.txt",
    ]
