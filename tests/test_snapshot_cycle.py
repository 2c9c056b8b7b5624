"""The golden-snapshot life cycle end to end, as a user meets it, three ways:
without pytest-xdist, with ``-n 0`` and with ``-n 2`` (``pytest_fxtrace.testing``)."""

import pytest

from pytest_fxtrace.testing import run_snapshot_cycle

MODES = {"no-xdist": ("-p", "no:xdist"), "n0": ("-n", "0"), "n2": ("-n", "2")}


@pytest.mark.parametrize("mode", list(MODES))
def test_snapshot_cycle_missing_update_change_orphan(pytester: pytest.Pytester, mode: str) -> None:
    result = run_snapshot_cycle(pytester, *MODES[mode])
    assert sorted(path.rsplit("/", 1)[1] for path in result.final) == [
        "test_pipeline.Encoder.fx.txt",
        "test_pipeline.Head.fx.txt",
    ]
