"""Golden snapshots of generated FX code: naming, normalisation, atomic read/write, diff.

Knows nothing about pytest; ``_snapshot_session`` feeds it test ids and reports.

A snapshot is one UTF-8 text file (never imported, executed or unpickled)::

    tests/fx_snapshots/test_models/test_resnet.ResNet.fx.txt

    # pytest-fxtrace snapshot of generated torch.fx code (the lines after the blank line)
    # test: test_models.py::test_resnet
    # model: torchvision.models.resnet.ResNet
    # torch: 2.14.1

    def forward(self, x : torch.Tensor) -> torch.Tensor:
        ...

    # submodules the graph calls (call_module): class and configuration
    conv1: torch.nn.Conv2d(3, 64, kernel_size=(7, 7), stride=(2, 2), padding=(3, 3), bias=False)
    ...
    # tensors the graph reads (get_attr): shape and dtype
    ...

The header is for people reading the file in a review; only the body is compared. The
body lists what the code's ``self.act(x)`` calls (a swapped ``nn.ReLU`` -> ``nn.GELU``
or a resized ``nn.Linear`` is a change in review) and the tensors it reads.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import difflib
import hashlib
import inspect
import os
import re
import site
import sys
import sysconfig
import tempfile
import types
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

SUFFIX = ".fx.txt"
MAGIC = "# pytest-fxtrace snapshot of generated torch.fx code (the lines after the blank line)"
TEMP_PREFIX = ".fxtrace-"
TEMP_SUFFIX = ".tmp"
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

    @property
    def owner(self) -> str:
        """The test id as written into the header: ``test_models.py::test_resnet``."""
        return f"{self.module_file}::{self.test}"

    @property
    def file_name(self) -> str:
        model = self.model if self.index == 1 else f"{self.model}-{self.index}"
        return f"{node_component(self.test)}.{safe_component(model, allow_dot=False)}{SUFFIX}"

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


# --- normalisation ----------------------------------------------------------------------

_ADDRESS = re.compile(r"\bat 0x[0-9a-fA-F]+\b")  # default reprs: <Cfg object at 0x7f3a...>


def default_path_roots(rootdir: str | os.PathLike[str] | None = None) -> list[tuple[str, str]]:
    """Directories whose absolute paths vary between machines, and their placeholders."""
    roots: list[tuple[str, str]] = []
    if rootdir is not None:
        roots.append((os.fspath(rootdir), "<rootdir>"))
    site_dirs = {sysconfig.get_paths()[key] for key in ("purelib", "platlib")}
    try:
        site_dirs.update(site.getsitepackages())
        site_dirs.add(site.getusersitepackages())
    except AttributeError:  # virtualenv's old site module
        pass
    roots.extend((path, "<site-packages>") for path in sorted(site_dirs))
    roots.append((sys.base_prefix, "<python>"))
    roots.append((sys.prefix, "<python>"))
    roots.append((tempfile.gettempdir(), "<tmp>"))
    roots.append((os.path.expanduser("~"), "~"))
    return [(path, label) for path, label in roots if path and len(path) > 1]


def _replace_roots(text: str, roots: Iterable[tuple[str, str]]) -> str:
    # longest first: a site-packages inside the rootdir (a .venv) is named as such
    for path, label in sorted(roots, key=lambda root: -len(root[0])):
        variants = {path.rstrip("/\\"), os.path.realpath(path).rstrip("/\\")}
        for variant in sorted(variants, key=len, reverse=True):
            pattern = re.escape(variant) + r"(?=[/\\]|\b|$)"
            text = re.sub(pattern, lambda _m, label=label: label, text)
    return text


class _SortedSets(ast.NodeTransformer):
    def visit_Set(self, node: ast.Set) -> ast.AST:
        self.generic_visit(node)
        node.elts.sort(key=ast.unparse)
        return node


def _outermost_sets(node: ast.AST) -> Iterator[ast.Set]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Set):
            yield child
        else:
            yield from _outermost_sets(child)


def _sort_sets_in(code: str) -> str | None:
    """``code`` with its set displays sorted; None when it does not parse on its own."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    lines = code.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(lineno: int, col: int) -> int:  # ast columns count UTF-8 bytes
        return starts[lineno - 1] + len(lines[lineno - 1].encode()[:col].decode(errors="ignore"))

    edits = []
    for node in _outermost_sets(tree):
        if any(isinstance(element, ast.Starred) for element in node.elts):
            continue
        start = offset(node.lineno, node.col_offset)
        end = offset(node.end_lineno or node.lineno, node.end_col_offset or 0)
        edits.append((start, end, ast.unparse(_SortedSets().visit(node))))
    for start, end, text in sorted(edits, reverse=True):
        code = code[:start] + text + code[end:]
    return code


def _sort_set_displays(code: str) -> str:
    """``{'b', 'a'}`` -> ``{'a', 'b'}``: a set's printed order follows PYTHONHASHSEED.

    FX writes one statement per line, so only lines with a brace are parsed (parsing a
    large model's whole forward costs more than tracing it); a line that does not parse
    alone (the ``def`` line, a statement split over lines) falls back to the whole code.
    """
    if "{" not in code:
        return code
    out = []
    for line in code.split("\n"):
        if "{" in line:
            body = line.lstrip()
            fixed = _sort_sets_in(body)
            if fixed is None:
                return _sort_sets_in(code) or code
            line = line[: len(line) - len(body)] + fixed
        out.append(line)
    return "\n".join(out)


def tidy(text: str) -> str:
    """Line endings ``\\n``, no trailing spaces, no leading/trailing blank lines, one final newline."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = [line.rstrip() for line in text.split("\n")]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines) + "\n" if lines else ""


def normalize_code(code: str, roots: Sequence[tuple[str, str]] = ()) -> str:
    """``GraphModule.code`` as it is stored: the same across runs, machines and hash seeds.

    Line endings and trailing spaces are evened out, object addresses
    (``<object at 0x7f..>``) and absolute paths (rootdir, site-packages, home)
    replaced by placeholders, and set displays sorted.

    Example::

        normalize_code(gm.code, default_path_roots(rootdir))
    """
    text = tidy(code)
    text = _ADDRESS.sub("at 0x?", text)
    text = _replace_roots(text, roots)
    text = _sort_set_displays(text)
    return tidy(text)


# --- what the graph calls and reads -------------------------------------------------------

MODULES_HEADER = "# submodules the graph calls (call_module): class and configuration (arguments off their defaults)"
TENSORS_HEADER = "# tensors the graph reads (get_attr): shape and dtype"
_BRACES = re.compile(r"\{[^{}]*\}")


def class_name(cls: type) -> str:
    """A class's dotted name, by its shortest public path where its package exports it
    (``torch.nn.Linear``, not ``torch.nn.modules.linear.Linear``), so a file stays the
    same when a library moves a class between its private modules.

    Only packages already imported, plain (no lazy ``__getattr__``, which could make the
    answer depend on what ran before) and holding that very class count.

    Example::

        class_name(torch.nn.GELU)  # 'torch.nn.GELU'
    """
    module, qualname = cls.__module__, cls.__qualname__
    if "." not in qualname and "<" not in qualname:
        parts = module.split(".")
        for end in range(1, len(parts)):
            prefix = ".".join(parts[:end])
            package = sys.modules.get(prefix)
            if type(package) is not types.ModuleType:
                continue
            names = vars(package)
            if "__getattr__" not in names and names.get(qualname) is cls:
                return f"{prefix}.{qualname}"
    return f"{module}.{qualname}"


def _one_line(text: str, roots: Sequence[tuple[str, str]]) -> str:
    """A configuration text as one normalised line: addresses, paths and set order evened out."""
    text = " ".join(part.strip() for part in text.splitlines() if part.strip())
    text = _replace_roots(_ADDRESS.sub("at 0x?", text), roots)
    if "{" in text:  # each innermost {...} that parses as a set display (a config is not code)
        text = _BRACES.sub(lambda match: _sort_sets_in(match.group()) or match.group(), text)
    return text


def _tensor_text(value: Any) -> str:
    """``float32[1, 16, 64]`` for a tensor (no device: a file is the same on CPU and GPU)."""
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return class_name(type(value))
    return f"{str(dtype).removeprefix('torch.')}[{', '.join(str(int(size)) for size in shape)}]"


def _module_lines(module: Any, roots: Sequence[tuple[str, str]], indent: str) -> list[str]:
    """A module's children (and, when it prints no configuration of its own, its own
    parameters and buffers), one per line, nested; equal neighbours are folded into
    one line (``0-11: 12 x ...``) as torch's own repr does."""
    lines: list[str] = []
    if not module.extra_repr():
        own = (("parameter", module.named_parameters(recurse=False)), ("buffer", module.named_buffers(recurse=False)))
        for kind, store in own:
            lines.extend(
                f"{indent}{name}: {_tensor_text(value)} {kind}"
                for name, value in store
                if value is not None
            )
    children = list(module.named_children())
    rendered = [(name, _module_entry(child, roots, indent)) for name, child in children]
    i = 0
    while i < len(rendered):
        name, (head, below) = rendered[i]
        j = i + 1
        while j < len(rendered) and rendered[j][1] == (head, below):
            j += 1
        label = name if j == i + 1 else f"{name}-{rendered[j - 1][0]}: {j - i} x"
        lines.append(f"{indent}{label}: {head}" if j == i + 1 else f"{indent}{label} {head}")
        lines.extend(below)
        i = j
    return lines


def _top_level_items(text: str) -> list[str]:
    """``a, b=(1, 2), c='x, y'`` -> ``['a', 'b=(1, 2)', "c='x, y'"]``."""
    items, depth, quote, start = [], 0, "", 0
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote and text[i - 1] != "\\" else quote
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    items.append(text[start:].strip())
    return [item for item in items if item]


def _defaults(cls: type) -> dict[str, str]:
    """The repr of each keyword argument's default in ``cls.__init__``."""
    try:
        parameters = inspect.signature(cls.__init__).parameters.values()
    except (TypeError, ValueError):  # a class whose signature Python cannot read
        return {}
    return {p.name: repr(p.default) for p in parameters if p.default is not inspect.Parameter.empty}


def configuration(module: Any, roots: Sequence[tuple[str, str]] = ()) -> str:
    """A module's ``extra_repr`` as one normalised line, without the ``name=value``
    arguments that equal their default in the class's ``__init__``: torch releases
    print different sets of defaulted arguments (``BatchNorm2d(..., bias=True)`` only
    from 2.6), so a golden file reads the same on each; a changed value still shows.

    Example::

        configuration(torch.nn.Linear(64, 10))  # 'in_features=64, out_features=10'
    """
    text = _one_line(module.extra_repr(), roots)
    defaults = _defaults(type(module))
    if not defaults:
        return text
    kept = []
    for item in _top_level_items(text):
        name, equals, value = item.partition("=")
        if not (equals and defaults.get(name.strip()) == value.strip()):
            kept.append(item)
    return ", ".join(kept)


def _module_entry(module: Any, roots: Sequence[tuple[str, str]], indent: str) -> tuple[str, list[str]]:
    head = f"{class_name(type(module))}({configuration(module, roots)})"
    return head, _module_lines(module, roots, indent + "  ")


def describe_graph_targets(graph_module: Any, roots: Sequence[tuple[str, str]] = ()) -> str:
    """What a GraphModule's code does not show: the class and configuration of each
    submodule it calls (``call_module``; a leaf's children nested below it) and the
    shape and dtype of each tensor it reads (``get_attr``), in the order the graph first
    uses them, normalised like the code. Empty when it calls and reads nothing.

    Example::

        describe_graph_targets(torch.fx.symbolic_trace(model))
        # '# submodules the graph calls ...\\nact: torch.nn.GELU(approximate=\\'tanh\\')\\n...'
    """
    modules: dict[str, Any] = {}
    tensors: dict[str, Any] = {}
    for node in graph_module.graph.nodes:
        if node.op in ("call_module", "get_attr"):
            target = str(node.target)
            found = modules if node.op == "call_module" else tensors
            if target not in found:
                found[target] = _attribute(graph_module, target)
    sections = []
    if modules:
        lines = [MODULES_HEADER]
        for target, module in modules.items():
            head, below = _module_entry(module, roots, "")
            lines.append(f"{target}: {head}")
            lines.extend(below)
        sections.append("\n".join(lines))
    if tensors:
        lines = [TENSORS_HEADER]
        for target, value in tensors.items():
            owner_path, _, name = target.rpartition(".")
            owner = _attribute(graph_module, owner_path) if owner_path else graph_module
            if name in dict(owner.named_parameters(recurse=False)):
                kind = " parameter"
            elif name in dict(owner.named_buffers(recurse=False)) and not name.startswith("_tensor_constant"):
                kind = " buffer"
            else:  # a value torch.fx stored while tracing (``_tensor_constant0``)
                kind = " constant" if hasattr(value, "dtype") else ""
            lines.append(f"{target}: {_tensor_text(value)}{kind}")
        sections.append("\n".join(lines))
    return "\n\n".join(sections)


def _attribute(root: Any, target: str) -> Any:
    value = root
    for atom in target.split("."):
        value = getattr(value, atom)
    return value


def snapshot_body(code: str, graph_module: Any = None, roots: Sequence[tuple[str, str]] = ()) -> str:
    """What a snapshot holds: the normalised code, then ``describe_graph_targets``, so a
    swapped leaf (``nn.ReLU`` -> ``nn.GELU``) or a resized layer shows in the diff.

    Example::

        snapshot_body(gm.code, gm, default_path_roots(rootdir))
    """
    text = normalize_code(code, roots)
    listing = describe_graph_targets(graph_module, roots) if graph_module is not None else ""
    return tidy(f"{text}\n{listing}") if listing else text


# torch.fx's codegen ends a statement with the names it frees (``;  x = y = None``); which
# names it lists differs between torch releases (2.1 does not free an ``_assert``'s
# result), while the computation is the same.
_FREED = re.compile(r";  (?:[A-Za-z_][A-Za-z0-9_]* = )+None$", re.M)


def same_code(expected: str, actual: str) -> bool:
    """Whether a snapshot's body and newly generated code are the same program: equal,
    or equal but for the variables each statement frees, so a snapshot written on one
    torch release compares equal on the others."""
    return expected == actual or _FREED.sub("", expected) == _FREED.sub("", actual)


# --- files ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """A snapshot file's content: header fields and the compared body."""

    header: dict[str, str]
    body: str
    ours: bool = True  # written by pytest-fxtrace (starts with MAGIC)

    @property
    def owner(self) -> str | None:
        return self.header.get("test")

    def render(self) -> str:
        lines = [MAGIC]
        for key, value in self.header.items():
            flat = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
            lines.append(f"# {key}: {flat}")
        return "\n".join(lines) + "\n\n" + tidy(self.body)


def make_snapshot(snapshot_id: SnapshotId, model: str, torch_version: str, body: str) -> Snapshot:
    """The file content for ``body``; ``model`` is the dotted class name."""
    header = {"test": snapshot_id.owner, "model": model, "torch": torch_version}
    return Snapshot(header, tidy(body))


def parse_snapshot(text: str) -> Snapshot:
    """Split a file's text into header and body (a file not written by us is all body)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.startswith(MAGIC + "\n"):
        return Snapshot({}, tidy(text), ours=False)
    head, _, body = text.partition("\n\n")
    header: dict[str, str] = {}
    for line in head.split("\n")[1:]:
        key, sep, value = line[2:].partition(": ")
        if line.startswith("# ") and sep:
            header[key] = value.replace("\\n", "\n").replace("\\r", "\r").replace("\\\\", "\\")
    return Snapshot(header, tidy(body))


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
    ``.fxtrace-*.tmp`` file, which the next update run removes.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=TEMP_PREFIX + path.name + ".", suffix=TEMP_SUFFIX)
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


def snapshot_files(directory: Path) -> Iterator[tuple[Path, Snapshot]]:
    """Our snapshot files in ``directory``'s module sub-directories, sorted; files that
    pytest-fxtrace did not write are not listed (and so never reported or deleted)."""
    if not directory.is_dir():
        return
    for path in sorted(directory.glob(f"*/*{SUFFIX}")):
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


# --- comparing --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Diff:
    """A unified diff of expected -> actual, cut to ``max_lines`` (``cut`` lines left out)."""

    text: str
    cut: int
    removed: int  # lines removed / added in the whole diff
    added: int


def _hunk_range(start: int, stop: int) -> str:
    length = stop - start
    if length == 1:
        return str(start + 1)
    return f"{start + 1 if length else start},{length}"


def _diff_lines(old: list[str], new: list[str], fromfile: str, tofile: str) -> list[str]:
    """A unified diff whose replaced lines come in pairs (-old, +new, -old, +new): still a
    valid patch, and a capped diff shows the new lines next to the old ones instead of
    forty removals and none of their replacements."""
    groups = list(difflib.SequenceMatcher(None, old, new).get_grouped_opcodes(3))
    if not groups:
        return []
    lines = [f"--- {fromfile}", f"+++ {tofile}"]
    for group in groups:
        first, last = group[0], group[-1]
        lines.append(f"@@ -{_hunk_range(first[1], last[2])} +{_hunk_range(first[3], last[4])} @@")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                lines.extend(" " + line for line in old[i1:i2])
                continue
            removed, added = old[i1:i2], new[j1:j2]
            for k in range(max(len(removed), len(added))):
                lines.extend("-" + line for line in removed[k : k + 1])
                lines.extend("+" + line for line in added[k : k + 1])
    return lines


def unified_diff(expected: str, actual: str, fromfile: str, tofile: str, max_lines: int | None = 40) -> Diff:
    """A unified diff of two bodies, capped at ``max_lines`` (None: whole).

    Example::

        diff = unified_diff(old, new, "snapshot", "actual")
        print(diff.text, f"... {diff.cut} more lines" if diff.cut else "")
    """
    lines = _diff_lines(expected.splitlines(), actual.splitlines(), fromfile, tofile)
    removed = sum(1 for line in lines[2:] if line[:1] == "-")
    added = sum(1 for line in lines[2:] if line[:1] == "+")
    if max_lines is None or len(lines) <= max_lines:
        return Diff("\n".join(lines), 0, removed, added)
    return Diff("\n".join(lines[:max_lines]), len(lines) - max_lines, removed, added)


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
    def from_json(cls, data: dict[str, object]) -> Ledger:
        ledger = cls(deselected=int(data.get("deselected", 0)))  # type: ignore[call-overload]
        for name in _LEDGER_SETS:
            getattr(ledger, name).update(str(value) for value in data.get(name, ()))  # type: ignore[attr-defined]
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
