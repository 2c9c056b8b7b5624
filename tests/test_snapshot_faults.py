"""Snapshot files that are broken, and snapshot directories that cannot be written:
one clear failure each, no traceback, no file lost or half-written."""

import textwrap
from pathlib import Path

import pytest

from pytest_fxtrace.snapshot import SnapshotFileError, read_snapshot


@pytest.mark.parametrize(
    "content, problem",
    [(b"\x89PNG\r\n\x1a\n\x00\x00", "not a text file"), (b"\xff\xfe\xfa", "not a text file"), (b"", "is empty")],
    ids=["binary", "not-utf8", "empty"],
)
def test_broken_snapshot_file_is_named_with_the_repair(tmp_path: Path, content: bytes, problem: str):
    path = tmp_path / "test_x.Net.fx.txt"
    path.write_bytes(content)
    with pytest.raises(SnapshotFileError, match=problem) as info:
        read_snapshot(path)
    assert "run pytest --fx-snapshot-update" in str(info.value)
    assert path.read_bytes() == content  # reading never changes it


def test_unreadable_snapshot_is_named(tmp_path: Path):
    path = tmp_path / "test_x.Net.fx.txt"
    path.mkdir()  # a directory where the file should be: reading fails like a permission error would
    with pytest.raises(SnapshotFileError, match="cannot read the snapshot"):
        read_snapshot(path)


def test_missing_snapshot_is_none(tmp_path: Path):
    assert read_snapshot(tmp_path / "absent.fx.txt") is None


PROJECT = textwrap.dedent(
    """
    import pytest, torch

    class Net(torch.nn.Module):
        def forward(self, x):
            return x.relu()

    @pytest.mark.traceable(snapshot=True)
    def test_net():
        Net()(torch.randn(2))
    """
)


def test_binary_snapshot_fails_the_test_with_the_repair(pytester: pytest.Pytester):
    pytester.makepyfile(test_m=PROJECT)
    assert pytester.runpytest_subprocess("--fx-snapshot-update").ret == pytest.ExitCode.OK
    (snapshot,) = (pytester.path / "fx_snapshots").rglob("*.fx.txt")
    snapshot.write_bytes(b"\x00\x01garbage")
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*Net: the snapshot *test_net.Net.fx.txt is not a text file (binary or corrupt)*"])
    assert "Traceback" not in result.stdout.str()
    assert snapshot.read_bytes() == b"\x00\x01garbage"
    assert pytester.runpytest_subprocess("--fx-snapshot-update").ret == pytest.ExitCode.OK
    assert snapshot.read_text().startswith("# pytest-fxtrace snapshot")


def test_unwritable_snapshot_directory_fails_with_what_to_do(pytester: pytest.Pytester):
    pytester.makepyfile(test_m=PROJECT)
    (pytester.path / "fx_snapshots").write_text("a file where the snapshot directory should be\n")
    result = pytester.runpytest_subprocess("--fx-snapshot-update")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*Net: cannot write the snapshot *make its directory writable*"])
    assert "Traceback" not in result.stdout.str()
    assert (pytester.path / "fx_snapshots").read_text() == "a file where the snapshot directory should be\n"
