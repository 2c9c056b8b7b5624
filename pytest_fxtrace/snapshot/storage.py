"""Snapshot files: the format (header, body), atomic writes, reading one back, the
files of a directory, and the ledger of which snapshots a run used (orphans).

Files are data: never imported, executed or unpickled. Knows nothing of pytest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import secrets
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pytest_fxtrace.snapshot.naming import DEFAULT_BACKEND, SnapshotId, is_snapshot_name
from pytest_fxtrace.snapshot.normalize import tidy

MAGIC = "# pytest-fxtrace snapshot of generated torch.fx code (the lines after the blank line)"
# the first line of a file we wrote says what code it holds; any such line makes it ours
_TITLE_START, _TITLE_END = "# pytest-fxtrace snapshot of ", " (the lines after the blank line)"
TEMP_PREFIX = ".fxtrace-"
TEMP_SUFFIX = ".tmp"


def title(backend: str) -> str:
    """A snapshot file's first line for ``backend``'s code, as its spec words it
    (``BackendSpec.title``): ``MAGIC`` for the default backend's (torch.fx's code). The
    registry is read where it is loaded (by whoever checked the code: the plugin, the
    engine), not imported: this package imports nothing outside itself."""
    registry = sys.modules.get("pytest_fxtrace.backends.spec")
    if registry is not None:
        return f"{_TITLE_START}{registry.snapshot_title(backend)}{_TITLE_END}"
    return MAGIC if backend == DEFAULT_BACKEND else f"{_TITLE_START}the {backend} backend's code{_TITLE_END}"


def _is_title(line: str) -> bool:
    return line.startswith(_TITLE_START) and line.endswith(_TITLE_END)


# --- files ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """A snapshot file's content: header fields and the compared body."""

    header: dict[str, str]
    body: str
    ours: bool = True  # written by pytest-fxtrace (starts with a title: MAGIC, or another backend's)
    title: str = MAGIC  # the first line: what code the file holds

    @property
    def owner(self) -> str | None:
        return self.header.get("test")

    def render(self) -> str:
        lines = [self.title]
        for key, value in self.header.items():
            flat = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
            lines.append(f"# {key}: {flat}")
        return "\n".join(lines) + "\n\n" + tidy(self.body)


def make_snapshot(snapshot_id: SnapshotId, model: str, torch_version: str, body: str) -> Snapshot:
    """The file content for ``body``; ``model`` is the dotted class name."""
    header = {"test": snapshot_id.owner, "model": model, "torch": torch_version}
    return Snapshot(header, tidy(body), title=title(snapshot_id.backend))


def parse_snapshot(text: str) -> Snapshot:
    """Split a file's text into header and body (a file not written by us is all body)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    first, newline, _ = text.partition("\n")
    if not (newline and _is_title(first)):
        return Snapshot({}, tidy(text), ours=False)
    head, _, body = text.partition("\n\n")
    header: dict[str, str] = {}
    for line in head.split("\n")[1:]:
        key, sep, value = line[2:].partition(": ")
        if line.startswith("# ") and sep:
            header[key] = value.replace("\\n", "\n").replace("\\r", "\r").replace("\\\\", "\\")
    return Snapshot(header, tidy(body), title=first)


class SnapshotFileError(ValueError):
    """A snapshot file that cannot be used as one; the message says how to repair it."""


def read_snapshot(path: Path) -> Snapshot | None:
    """The snapshot at ``path``, or None when there is none. Only ever read as text.

    Raises ``SnapshotFileError`` for a file that is there but is no text snapshot
    (unreadable, a directory, binary, empty), so it is never mistaken for one."""
    repair = "run pytest --fx-snapshot-update to write it again"
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise SnapshotFileError(f"cannot read the snapshot {path}: {exc.strerror or exc}; {repair}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or "\x00" in text:
        raise SnapshotFileError(f"the snapshot {path} is not a text file (binary or corrupt); {repair}")
    if not text.strip():
        raise SnapshotFileError(f"the snapshot {path} is empty; {repair}")
    return parse_snapshot(text)


def write_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` so that ``path`` is at every moment the old file or the
    new one, never a truncated mix: a temporary file in the same directory, flushed to
    disk, then ``os.replace``. A process killed in between leaves only a hidden
    ``.fxtrace-*.tmp`` file, which the next update run removes. The one writer of every
    file we write: reports, HTML pages, baselines, snapshots.

    The file gets the permissions any new file gets (0644 under umask 022), so a CI step
    running as another user can read it.

    Example::

        write_atomic("fx-report.json", dump_json(document))
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8")
    fd, tmp = _create_temp(path)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _create_temp(path: Path) -> tuple[int, str]:
    """A new, empty temporary file beside ``path``, open for writing. Created with mode
    0666 for the kernel to apply the umask (and a directory's default ACL) to, as for any
    new file: ``tempfile.mkstemp`` makes 0600, and reading the umask means setting it,
    which races with other threads."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = os.path.join(path.parent, f"{TEMP_PREFIX}{path.name}.{secrets.token_hex(4)}{TEMP_SUFFIX}")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, f"no unused temporary file name beside {path}")


def snapshot_files(directory: Path) -> Iterator[tuple[Path, Snapshot]]:
    """Our snapshot files in ``directory``'s module sub-directories, sorted; files that
    pytest-fxtrace did not write are not listed (and so never reported or deleted)."""
    if not directory.is_dir():
        return
    for path in sorted(directory.glob("*/*.txt")):
        if not is_snapshot_name(path.name):
            continue
        if path.name.startswith(".") or not path.is_file():
            continue
        try:
            snapshot = read_snapshot(path)
        except SnapshotFileError:
            continue  # not recognisably ours: never reported or deleted as an orphan
        if snapshot is not None and snapshot.ours and snapshot.owner:
            yield path, snapshot


def stale_temp_files(directory: Path) -> list[Path]:
    """Temporary files a killed update run left behind."""
    if not directory.is_dir():
        return []
    return sorted(directory.glob(f"*/{TEMP_PREFIX}*{TEMP_SUFFIX}"))



# --- orphans ----------------------------------------------------------------------------


_LEDGER_SETS = (
    "collected",  # test keys of every collected test (before -k/-m)
    "modules",  # module paths that were collected
    "broken_modules",  # module paths whose collection failed
    "passed",  # test keys whose call phase passed
    "used",  # snapshot paths compared, created or updated
    "created",
    "updated",
    "missing",
    "mismatched",
)


@dataclasses.dataclass
class Ledger:
    """What one run learnt about tests and snapshots; workers' ledgers merge into one.

    Paths are absolute POSIX strings; a test key is ``<module path>::<test id>``.

    Example::

        total = Ledger(); total.merge(Ledger.from_json(node.workeroutput["fxtrace_snapshots"]))
    """

    collected: set[str] = dataclasses.field(default_factory=set)
    modules: set[str] = dataclasses.field(default_factory=set)
    broken_modules: set[str] = dataclasses.field(default_factory=set)
    passed: set[str] = dataclasses.field(default_factory=set)
    used: set[str] = dataclasses.field(default_factory=set)
    created: set[str] = dataclasses.field(default_factory=set)
    updated: set[str] = dataclasses.field(default_factory=set)
    missing: set[str] = dataclasses.field(default_factory=set)
    mismatched: set[str] = dataclasses.field(default_factory=set)
    deselected: int = 0

    def merge(self, other: Ledger) -> None:
        for name in _LEDGER_SETS:
            getattr(self, name).update(getattr(other, name))
        self.deselected += other.deselected

    def to_json(self) -> dict[str, object]:
        """Sorted lists and an int: what ``config.workeroutput`` can carry."""
        data: dict[str, object] = {name: sorted(getattr(self, name)) for name in _LEDGER_SETS}
        data["deselected"] = self.deselected
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Ledger:
        """A ledger back from ``to_json``'s form (a worker's, through execnet)."""
        ledger = cls(deselected=int(data.get("deselected", 0)))
        for name in _LEDGER_SETS:
            getattr(ledger, name).update(str(value) for value in data.get(name, ()))
        return ledger


def owner_key(module_dir: str, owner: str) -> tuple[str, str]:
    """(module path, test key) of a header's ``test:`` value."""
    module_file, _, test = owner.partition("::")
    module = f"{module_dir}/{module_file}"
    return module, f"{module}::{test}"


def find_orphans(
    ledger: Ledger,
    files: Iterable[tuple[Path, str, Snapshot]],
    module_complete: bool = True,
) -> list[Path]:
    """Snapshot files no test owns any more.

    ``files`` are ``(path, module dir, snapshot)``. A file is an orphan when its test
    passed in this run without using it (the model was renamed or dropped), when its
    test module no longer exists, or -- if every collected module was collected whole
    (``module_complete``: no node ids) -- when its test was not collected.
    """
    orphans = []
    for path, module_dir, snapshot in files:
        key = path.as_posix()
        if key in ledger.used or snapshot.owner is None:
            continue
        module, test = owner_key(module_dir, snapshot.owner)
        if test in ledger.passed:
            orphans.append(path)
        elif module in ledger.broken_modules:
            continue
        elif not os.path.exists(module):
            orphans.append(path)
        elif module_complete and module in ledger.modules and test not in ledger.collected:
            orphans.append(path)
    return orphans
