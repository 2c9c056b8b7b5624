"""Recompiles in the user's words: the guard a recorded call failed (``self.step`` was 1, now
2; ``x.shape[0]`` went from 2 to 4) and the statement that made Dynamo guard on it, from
torch's ``recompile_reason`` of each frame it compiled again (``_compat.DynamoCompile``).

With automatic dynamic shapes (torch's default) the first time a size of a frame's inputs
changes, Dynamo compiles that frame once more with the size dynamic: that re-specialisation
is reported, but not counted against ``max_recompiles``.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from pytest_fxtrace.backends.compile._compat import DynamoCompile
from pytest_fxtrace.backends.compile.breaks import ForwardIndex
from pytest_fxtrace.locate import is_user_file, statement_in
from pytest_fxtrace.paths import shown_path
from pytest_fxtrace.types import Location, Recompile

_COMPILE_ID = re.compile(r"^\s*\[?\d+/\d+\]?:\s*")
_SIZE = re.compile(r"tensor '([^']+)' size mismatch at index (\d+)\. expected (\d+), actual (\d+)")
_OTHER_TENSOR = re.compile(r"tensor '([^']+)' (\w+) mismatch(.*)")
_STACK_FILE = re.compile(r'File "([^"]+)", line (\d+)')
_COMMENT_PLACE = re.compile(r"#\s*(.+?)\s*#\s*(\S+):(\d+) in ")
_EQUALS = re.compile(r"^(.+?)\s*==\s*(.+)$")
_SIZE_EXPR = re.compile(r"([A-Za-z_][\w.]*)\.size\(\)\[(\d+)\]")
_EXPECTED = re.compile(r"expected (.+?), actual (.+?)\.?$")
_RESUMED = re.compile(r"^torch_dynamo_resume_in_(\w+?)_at_\d+$")


@dataclasses.dataclass
class Frames:
    """What the words of a guard need: the model's forwards, the root call's arguments, and
    the frames whose sizes went dynamic already (their size recompiles count)."""

    index: ForwardIndex
    model: torch.nn.Module
    arguments: Mapping[str, Any]
    sized: set[tuple[str, int, str]] = dataclasses.field(default_factory=set)
    symbolic: set[str] = dataclasses.field(default_factory=set)  # symbolic_inputs of the call's graphs
    # a size a branch made constant again, by its source (``L['x'].size()[0]``): torch's
    # statement for it (``_compat.size_specializations``)
    specialized: Mapping[str, str] = dataclasses.field(default_factory=dict)


def recompile_of(found: DynamoCompile, frames: Frames, automatic: bool) -> Recompile | None:
    """The recompile ``found`` is, in words; None for a first compile."""
    if found.recompile_reason is None:
        return None
    text = _COMPILE_ID.sub("", found.recompile_reason.strip())
    guard_text, _, stack_text = text.partition("User stack trace:")
    guard = guard_text.strip().splitlines()[0] if guard_text.strip() else text
    expression = guard.partition("  #")[0].strip() if "  #" in guard else guard.split(" # ")[0].strip()
    location = stack_location(stack_text) or _comment_location(guard, found.filename) or _def_location(found)
    frame_key = (found.filename, found.firstlineno, found.name)
    size = _SIZE.search(expression)
    if size is not None:
        name, dim, before, now = size.groups()
        location = location or _specialized_location(f"{_shown(name)}.shape[{dim}]", found, frames)
        counted = not automatic or frame_key in frames.sized
        frames.sized.add(frame_key)
        words = f"`{_shown(name)}.shape[{dim}]` went from {before} to {now}{_in_function(found)}"
        if not counted:
            words += " (automatic dynamic shapes make it dynamic: not counted)"
        return Recompile(words, location, counted, _clip(guard))
    words = _words(expression, found, frames) + _in_function(found)
    # an int Dynamo made symbolic when it first changed (a forward argument; a module's int
    # attribute with allow_unspec_int_on_nn_module): the same one re-specialisation as a size's
    equals = _EQUALS.match(expression)
    counted = not (automatic and equals is not None and _input_name(equals.group(1)) in frames.symbolic)
    if not counted:
        words += " (automatic dynamic shapes make it dynamic: not counted)"
    return Recompile(words, location, counted, _clip(guard))


def symbolic_inputs(graphs: Iterable[torch.fx.GraphModule]) -> set[str]:
    """The inputs of ``graphs`` that are symbolic numbers (an int Dynamo made dynamic), by
    ``_input_name`` of their placeholder (Dynamo names a graph input after its source)."""
    found = set()
    for graph in graphs:
        for node in graph.graph.nodes:
            if node.op == "placeholder" and isinstance(node.meta.get("example_value"), (torch.SymInt, torch.SymFloat)):
                found.add(_input_name(str(node.target)))
    return found


def _input_name(source: str) -> str:
    """A guard's source and a graph input's name alike: ``L['self'].step``, ``self.step`` and
    ``L_self_step`` are ``self_step``."""
    return re.sub(r"^L_", "", re.sub(r"\W+", "_", source.strip())).strip("_")


def _words(expression: str, found: DynamoCompile, frames: Frames) -> str:
    other = _OTHER_TENSOR.search(expression)
    if other is not None:
        name, what, rest = other.groups()
        change = _EXPECTED.search(rest)  # ". expected 2, actual 3"
        if change is not None:
            return f"`{_shown(name)}`'s {what} was {change.group(1)}, now {change.group(2)}"
        return f"`{_shown(name)}`'s {what} changed{rest.rstrip('.')}"
    equals = _EQUALS.match(expression)
    if equals is not None and not _SIZE_EXPR.search(equals.group(1)):
        source, before = equals.group(1).strip(), equals.group(2).strip()
        now = _value(source, found, frames)
        return f"`{_shown(source)}` was {before}, now {now}" if now is not None else f"`{_shown(source)}` is no longer {before}"
    sized = _SIZE_EXPR.search(expression)
    if sized is not None:
        name, dim = sized.groups()
        now = _value(f"{name}.size()[{dim}]", found, frames)
        shown = f"`{_shown(name)}.shape[{dim}]`"
        where = f" is {now}," if now is not None else ""
        return f"{shown}{where} outside `{_shown(expression)}`, the range the compiled code was made for"
    if "___check_obj_id" in expression or "ID_MATCH" in expression:
        inner = re.search(r"___check_obj_id\(([^,]+),", expression)
        return f"`{_shown(inner.group(1)) if inner else expression}` is another object than when compiled"
    if "___check_type_id" in expression:
        inner = re.search(r"___check_type_id\(([^,]+),", expression)
        return f"`{_shown(inner.group(1)) if inner else expression}` has another type than when compiled"
    return f"the guard `{_clip(expression, 120)}` failed"


def _shown(source: str) -> str:
    """Dynamo's name of a value as the user writes it: ``L['x']`` -> ``x``."""
    return re.sub(r"L\['([^']+)'\]", r"\1", source).replace(".size()[", ".shape[")


def _clip(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _in_function(found: DynamoCompile) -> str:
    """`` in `nms` `` for a recompiled function that is not a ``forward`` (a helper called
    with other values, a library's function), whose argument the guard names."""
    resumed = _RESUMED.match(found.name)
    name = resumed.group(1) if resumed else found.name
    return "" if not name or name == "forward" or name.startswith("<") else f" in `{name}`"


def _def_location(found: DynamoCompile) -> Location | None:
    """The ``def`` of the recompiled function, where torch names no statement: its
    arguments are what the guards of a helper's frame read."""
    if _in_function(found) and found.filename and is_user_file(found.filename) and found.firstlineno:
        return Location(shown_path(found.filename, imports=False), found.firstlineno, statement_in(found.filename, found.firstlineno))
    return None


def stack_location(stack_text: str) -> Location | None:
    """The innermost user frame of the "User stack trace" torch adds to a guard."""
    for filename, line in reversed(_STACK_FILE.findall(stack_text)):
        if is_user_file(filename):
            return Location(shown_path(filename, imports=False), int(line), statement_in(filename, int(line)))
    return None


def _comment_location(guard: str, filename: str) -> Location | None:
    """The statement torch names in a guard's comment (``# if x.shape[0] > 3:  # m.py:13 in
    forward``), its path cut short by torch: the recompiled frame's file where it ends so."""
    found = _COMMENT_PLACE.search(guard)
    if found is None or not filename or not is_user_file(filename):
        return None
    shortened, line = found.group(2), int(found.group(3))
    if not filename.endswith(shortened.lstrip(".")):
        return None
    return Location(shown_path(filename, imports=False), line, statement_in(filename, line))


def _specialized_location(size: str, found: DynamoCompile, frames: Frames) -> Location | None:
    """The statement that made ``size`` (``x.shape[0]``) constant again after it had gone
    dynamic (a branch on it: ``if x.shape[0] == 4``), whose guard a later size then failed:
    torch names it on the size's replacement, as in a guard's comment."""
    where = next((text for source, text in frames.specialized.items() if _shown(source) == size), None)
    if where is None:
        return None
    files = [found.filename, *(inspect.getsourcefile(type(m)) or "" for m in frames.model.modules())]
    return next((place for f in dict.fromkeys(files) if (place := _comment_location(f"# {where}", f))), None)


def _value(source: str, found: DynamoCompile, frames: Frames) -> str | None:
    """The value a guard's expression has now, where it only reads attributes, items and
    sizes of ``self`` (the module whose forward was recompiled) or of the model's own
    arguments (its forward, not a later frame); None otherwise."""
    try:
        tree = ast.parse(_shown(source).replace(".shape[", ".size()["), mode="eval").body
    except SyntaxError:
        return None
    owner = frames.index.paths_at(found.filename, found.firstlineno)
    names: dict[str, Any] = {}
    if owner:
        names["self"] = frames.model.get_submodule(owner[0][0]) if owner[0][0] else frames.model
    if owner and owner[0][0] == "" and found.name == "forward":
        names.update(frames.arguments)
    try:
        value = _evaluate(tree, names)
    except Exception:  # not an expression of what we hold
        return None
    return repr(value) if not isinstance(value, torch.Tensor) else None


def _evaluate(node: ast.AST, names: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Name):
        return names[node.id]
    if isinstance(node, ast.Attribute):
        return getattr(_evaluate(node.value, names), node.attr)
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return _evaluate(node.value, names)[node.slice.value]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "size" and not node.args:
        return tuple(_evaluate(node.func.value, names).size())
    raise ValueError(ast.dump(node))


def call_arguments(model: torch.nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The model's forward arguments by name (what a guard on the model's own frame names)."""
    try:
        bound = inspect.signature(model.forward).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return {}
    bound.apply_defaults()
    return dict(bound.arguments)
