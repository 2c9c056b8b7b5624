"""Graph breaks as the user reads them: each break Dynamo logged (``_compat.DynamoBreak``)
becomes a *site* -- the user's statement (the innermost frame of their code or a library's in
Dynamo's user stack, never a torch frame), the submodule whose ``forward`` holds it, torch's
graph-break type, its id and its reason in one line, and a category.

A statement breaks once per frame that reaches it (a break inside a submodule makes each
enclosing frame Dynamo was inlining it from break there too, and a recompiled frame breaks
again): all of those are one site.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Iterable, Sequence

import torch

from pytest_fxtrace.backends.compile._compat import DynamoBreak, graph_break_type_id
from pytest_fxtrace.locate import is_user_file, statement_in
from pytest_fxtrace.paths import shown_path
from pytest_fxtrace.types import Category, GraphBreak, Location


class ForwardIndex:
    """Which submodule's ``forward`` a frame of Dynamo's user stack is in, told by file and
    line (Dynamo keeps frames as ``traceback.FrameSummary``: no ``self``). Several instances
    of one class are told apart by the path the stack came through, then by the calling
    statement naming the attribute (``self.mid(y)``)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self._spans: dict[str, list[tuple[int, int, str, str]]] = {}
        self._paths = {id(module): (path, type(module).__name__) for path, module in model.named_modules()}
        for path, module in model.named_modules():
            code = getattr(getattr(type(module), "forward", None), "__code__", None)
            if code is None:
                continue
            lines = [line for _, _, line in code.co_lines() if line is not None]
            last = max(lines, default=code.co_firstlineno)
            self._spans.setdefault(code.co_filename, []).append((code.co_firstlineno, last, path, type(module).__name__))

    def paths_at(self, filename: str, lineno: int) -> list[tuple[str, str]]:
        """(path, class name) of every submodule whose forward spans ``filename:lineno``."""
        return [(path, kind) for first, last, path, kind in self._spans.get(filename, ()) if first <= lineno <= last]

    def module_of(
        self, stack: Sequence[traceback.FrameSummary], callers: Sequence[object] = ()
    ) -> tuple[str, str | None]:
        """(path, class name) of the innermost frame of ``stack`` that is a submodule's forward;
        ("", None) when it is the model's own or none is. ``callers``: the modules running
        around the stack, innermost first (``_compat.calling_modules``); the innermost of the
        model's holds the whole stack, so the stack's frames are looked for inside it."""
        known = (self._paths.get(id(module)) for module in callers)
        chosen: tuple[str, str | None] = next((found for found in known if found is not None), ("", None))
        anchor, caller = chosen[0], ""
        for frame in stack:
            found = [item for item in self.paths_at(frame.filename, frame.lineno or 0) if _within(item[0], anchor)]
            if found:
                chosen = _pick(found, chosen[0], caller)
            caller = frame.line or ""
        return chosen if chosen[0] else ("", None)


def _within(path: str, outer: str) -> bool:
    return not outer or path == outer or path.startswith(outer + ".")


def _pick(found: list[tuple[str, str]], outer: str, caller: str) -> tuple[str, str | None]:
    inside = [item for item in found if _within(item[0], outer)] or found
    named = [item for item in inside if item[0] and re.search(rf"\b{re.escape(item[0].rpartition('.')[2])}\b", caller)]
    return (named or inside)[0]


def user_frame(stack: Sequence[traceback.FrameSummary]) -> traceback.FrameSummary | None:
    """The innermost frame of the user's (or a library's) code: never torch's, ours or the
    standard library's."""
    for frame in reversed(stack):
        if is_user_file(frame.filename):
            return frame
    return None


def site_of(found: DynamoBreak, index: ForwardIndex) -> GraphBreak:
    frame = user_frame(found.stack)
    location = None
    if frame is not None and frame.lineno:
        location = Location(shown_path(frame.filename, imports=False), frame.lineno, statement_in(frame.filename, frame.lineno))
    module, kind = index.module_of(found.stack, found.callers)
    reason = one_line(found.message)
    return GraphBreak(
        location,
        module,
        kind,
        found.gb_type,
        graph_break_type_id(found.gb_type),
        reason,
        category_of(found.gb_type, found.message, location.source if location else ""),
        found.skipped,
    )


def new_sites(
    found: Iterable[DynamoBreak], index: ForwardIndex, known: Sequence[GraphBreak]
) -> list[tuple[GraphBreak, traceback.FrameSummary | None]]:
    """The sites of ``found`` not among ``known``, in the order Dynamo met them, each with
    the frame of the user's it is in (``user_frame``)."""
    seen = {_key(site) for site in known}
    sites = []
    for item in found:
        site = site_of(item, index)
        if _key(site) not in seen:
            seen.add(_key(site))
            sites.append((site, user_frame(item.stack)))
    return sites


def _key(site: GraphBreak) -> tuple[object, ...]:
    if site.location is not None:
        return (site.location.path, site.location.line)
    return (site.module, site.type, site.reason)


def deepest_first(sites: Sequence[GraphBreak]) -> list[GraphBreak]:
    """Sites in submodules deepest in the model first, then in the order they were met."""
    def depth(site: GraphBreak) -> int:
        return site.module.count(".") + 1 if site.module else 0

    return sorted(sites, key=depth, reverse=True)


def one_line(message: str, limit: int = 200) -> str:
    """torch's reason for a break in one line: its "Explanation:", else its first line."""
    message = _ADDRESS.sub("", message)  # "<function f at 0x7f..>": the same site reads the same
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    explained = next((line.partition(":")[2].strip() for line in lines if line.startswith("Explanation:")), "")
    text = explained or (lines[0] if lines else "")
    return text if len(text) <= limit else text[: limit - 3] + "..."


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_CONVERSION = re.compile(r"\b(int|float|bool|complex)\s*\(")


def category_of(gb_type: str | None, message: str, source: str) -> Category:
    """The check's category of a break: ``control-flow`` for a branch on tensor data,
    ``type-conversion`` for ``int(t)`` and its kin, ``data-dependent`` for a value read out
    of a tensor (``.item()``, ``.tolist()``, an output of data-dependent size), else
    ``unsupported`` (``print``, a builtin or C function Dynamo cannot trace)."""
    kind = (gb_type or "").lower()
    if "branching" in kind or "jump" in kind:
        return Category.CONTROL_FLOW
    if any(word in kind for word in ("item()", "tolist", "data-dependent", "data dependent", "dynamic shape operator", "unbacked")):
        return Category.TYPE_CONVERSION if _CONVERSION.search(source) else Category.DATA_DEPENDENT
    return Category.UNSUPPORTED
