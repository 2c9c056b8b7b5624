"""Where a snapshot lives: its file name from the test and the model (safe on every
file system, stable across runs and ``PYTHONHASHSEED``), and the snapshot directory.

Knows names and paths; knows nothing of a snapshot's content, files or pytest.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from pathlib import Path

# the backend of a check that names none, as backends/spec.py says it (this package imports
# nothing outside itself; tests/test_architecture.py holds the two equal)
DEFAULT_BACKEND = "fx"
SUFFIX = f".{DEFAULT_BACKEND}.txt"  # the default backend's code; another backend's files end in ".<backend>.txt"
DEFAULT_DIR = "fx_snapshots"
RESERVED_DIRS = ("__snapshots__",)  # syrupy's: it may delete files it does not know

MAX_COMPONENT = 96  # characters of a name kept before the hash suffix
HASH_LENGTH = 10
# Names made only of these characters are used as they are; every other name is
# sanitised and gets "~<hash of the original>", and "~" is outside this set, so a
# sanitised name never equals an untouched one and two ids never share a file.
_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-\[\]]")
_UNSAFE_NO_DOT = re.compile(r"[^A-Za-z0-9_\-\[\]]")
_WINDOWS_DEVICES = re.compile(r"^(con|prn|aux|nul|com[0-9]|lpt[0-9])(\.|$)", re.IGNORECASE)



# --- naming -----------------------------------------------------------------------------


def _digest(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_LENGTH]


def safe_component(
    raw: str, *, allow_dot: bool = True, max_length: int = MAX_COMPONENT, original: str | None = None
) -> str:
    """``raw`` as one path component: itself when it is short and made of ``[A-Za-z0-9_.-[]]``,
    otherwise sanitised and suffixed with a hash of ``original`` (default ``raw``): never
    ``/``, ``..``, a leading dot, a Windows device name, or more than ``max_length + 11``
    characters.

    Example::

        safe_component("test_resnet[cpu]")  # 'test_resnet[cpu]'
        safe_component("test_x[a/b]")       # 'test_x[a_b]~1c0f3b5a2e'
    """
    pattern = _UNSAFE if allow_dot else _UNSAFE_NO_DOT
    cleaned = pattern.sub("_", raw)
    if cleaned.startswith((".", "-")):
        cleaned = "_" + cleaned[1:]
    untouched = cleaned == raw and raw and len(raw) <= max_length and not _WINDOWS_DEVICES.match(raw)
    if untouched and original is None:
        return raw
    return f"{cleaned[:max_length]}~{_digest(raw if original is None else original)}"


def node_component(test: str) -> str:
    """The file-name part for a test id without its module (``TestX::test_y[p]``).

    ``::`` between class and function becomes ``.``, which is one-to-one because
    Python names hold no dot; an id whose names do hold one (not a Python test) is
    always hashed. Hashes are of the id itself, so different ids never share a name.
    """
    names, bracket, params = test.partition("[")
    if "." in names:
        return safe_component(test, original=test)
    dotted = names.replace("::", ".") + bracket + params
    name = safe_component(dotted)
    return name if name == dotted else safe_component(dotted, original=test)


def module_component(module_file: str) -> str:
    """The sub-directory for a test module: ``test_models.py`` -> ``test_models``; any
    other file name (a doctest ``.txt``) is hashed, so it never meets a module's name."""
    if module_file.endswith(".py"):
        return safe_component(module_file[:-3])
    return safe_component(module_file, original=module_file)


@dataclasses.dataclass(frozen=True)
class SnapshotId:
    """Which snapshot: the test (module file + id inside it) and which model it checked.

    ``index`` counts models of the same class checked by one test (1, 2, ...), so a
    test checking two ResNets gets ``ResNet`` and ``ResNet-2``.

    Example::

        SnapshotId(Path("tests"), "test_models.py", "test_resnet", "ResNet").path("fx_snapshots")
    """

    module_dir: Path
    module_file: str  # "test_models.py"
    test: str  # the node id after the module: "TestX::test_y[p]"
    model: str  # class name of the checked model
    index: int = 1
    backend: str = DEFAULT_BACKEND  # what made the code: <test>.<Model>.fx.txt, <test>.<Model>.export.txt

    @property
    def owner(self) -> str:
        """The test id as written into the header: ``test_models.py::test_resnet``."""
        return f"{self.module_file}::{self.test}"

    @property
    def file_name(self) -> str:
        model = self.model if self.index == 1 else f"{self.model}-{self.index}"
        return f"{node_component(self.test)}.{safe_component(model, allow_dot=False)}{suffix(self.backend)}"

    def path(self, snapshot_dir: str = DEFAULT_DIR) -> Path:
        return self.module_dir / snapshot_dir / module_component(self.module_file) / self.file_name


def check_snapshot_dir(value: str) -> str:
    """Validate the ``fxtrace_snapshot_dir`` ini value; ValueError says what to write instead."""
    text = value.strip() if isinstance(value, str) else ""
    parts = Path(text).parts
    problem = None
    if not text:
        problem = "is empty"
    elif Path(text).is_absolute() or text.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", text):
        problem = "is absolute; snapshots live next to each test module"
    elif any(part in ("..", ".") for part in parts) or "\\" in text:
        problem = "must be a plain relative path without '.', '..' or backslashes"
    elif any(part in RESERVED_DIRS for part in parts):
        problem = "is syrupy's directory, and syrupy deletes snapshot files it does not know"
    if problem:
        raise ValueError(
            f"fxtrace_snapshot_dir = {value!r} {problem}; use a directory name such as {DEFAULT_DIR!r}"
        )
    return "/".join(parts)


def suffix(backend: str) -> str:
    """The file-name ending of a backend's snapshots: ``.fx.txt``, ``.export.txt``."""
    return f".{safe_component(backend, allow_dot=False)}.txt"


def is_snapshot_name(name: str) -> bool:
    """Whether a file name ends like a snapshot of some backend (``<...>.<backend>.txt``)."""
    if name.endswith(SUFFIX):
        return True
    stem, dot, ext = name.rpartition(".")
    return ext == "txt" and bool(dot) and "." in stem and not name.startswith(".")
