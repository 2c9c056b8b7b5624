"""What a snapshot holds: the generated code normalised (paths, addresses, set order)
and the list of what the graph calls and reads (``snapshot_body``).

Knows code text and a GraphModule's targets; knows nothing of files or pytest.
"""

from __future__ import annotations

import ast
import inspect
import os
import re
import site
import sys
import sysconfig
import tempfile
import types
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

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
            text = re.sub(pattern, label.replace("\\", "\\\\"), text)  # the label, literally
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
        # the class's own __init__, read for its defaults
        parameters = inspect.signature(cls.__init__).parameters.values()  # type: ignore[misc]  # cls is a class: not an instance's __init__
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
