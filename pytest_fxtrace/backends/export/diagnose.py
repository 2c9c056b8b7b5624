"""Why ``torch.export`` failed and where, in the same terms as an FX failure.

The facts come from the exception and the frames it went through, not from torch's
message alone (its wording moves between releases):

* non-strict export runs the model's Python for real, so the user's frames -- and
  each module's ``forward`` frame, with its ``self`` -- are in the traceback;
* strict export (TorchDynamo) interprets the bytecode instead: the traceback holds
  only torch's frames, and the user's stack is on the exception (``real_stack``),
  with dynamo's graph-break type (``gb_type``) and its stable id (``GB0170``).

Non-strict raises the same error for a branch on tensor data and for a size read
from tensor data ("Could not guard on data-dependent expression"), so the user's
statement decides between ``control-flow`` and ``data-dependent``.

``quiet.quiet_torch`` keeps torch's own output (the partial graph it prints on failure,
its log records, its warnings) out of the test's output, and hands what it held
back to the caller.
"""

from __future__ import annotations

import ast
import dataclasses
import linecache
import re
from collections.abc import Sequence

import torch

from pytest_fxtrace.backends.export._compat import check_is_size_deprecated, graph_break_id
from pytest_fxtrace.collection import is_under
from pytest_fxtrace.diagnose import format_error
from pytest_fxtrace.locate import called_names, is_user_file, statement_in
from pytest_fxtrace.paths import shown_path
from pytest_fxtrace.types import Category, Diagnosis, Location

# Exception classes by name (their modules are private and move between releases):
# what a data-dependent guard, a dynamo graph break and a missing fake kernel raise.
DATA_DEPENDENT_ERRORS = frozenset(
    {"GuardOnDataDependentSymNode", "DataDependentOutputException", "PendingUnbackedSymbolNotFound"}
)
GRAPH_BREAK_ERRORS = frozenset({"Unsupported", "TorchRuntimeError"})
UNSUPPORTED_OP_ERRORS = frozenset(
    {"UnsupportedOperatorException", "DynamicOutputShapeException", "UnsupportedFakeTensorException"}
)
CONSTRAINT_ERRORS = frozenset({"ConstraintViolationError"})

DATA_DEPENDENT_TEXT = re.compile(
    r"Could not guard on data-dependent expression|Could not extract specialized integer|"
    r"data-dependent expression|data dependent"
)
UNSUPPORTED_TEXT = re.compile(
    r"no fake impl registered|not supported for tensor subclasses|Cannot access data pointer|"
    r"doesn't support (?:the )?numpy|\.numpy\(\)|Cannot call numel\(\)|not implemented for 'Meta'"
)
# an input or output of a type export cannot flatten (not a registered pytree)
IO_TYPE_TEXT = re.compile(
    r"Unsupported input type (<class '[^']+'>)|Found (<class '[^']+'>) in output, which is not a known type|"
    # strict export (TorchDynamo) names the class only
    r"Encountered unrecognized type UserDefinedObjectVariable\((\w+)\) at output|"
    r"one of the inputs with type `(<class '[^']+'>)` is not supported or pytree-flattenable"
)
CONSTRAINT_TEXT = re.compile(r"Constraints violated|specialized it to be a constant|marked .* as dynamic")
# torch's own suggestions: "To fix the error, insert one of the following checks before this call:"
TORCH_CHECKS = re.compile(r"^\s*\d+\.\s*(torch\._check(?:_is_size)?\(.*\))\s*$", re.M)
CHECK_IS_SIZE = re.compile(r"torch\._check_is_size\((.*)\)")
DATA_DEPENDENT_BRANCH = "Data-dependent branching"

EXPORT_FIXES = {
    "control-flow": "express the branch with torch.cond(pred, true_fn, false_fn, (x,)), or compute "
    "both sides and pick with torch.where(cond, a, b); a check can be torch._check(cond)",
    "specialization": "let the size vary in code: x.shape[i] or -1 instead of a literal, no branch "
    "on a size; or check each input size on its own (dynamic=False)",
    "unsupported": "rewrite the construct with torch ops; a custom op needs a fake kernel "
    "(@torch.library.register_fake); for a strict-only failure, non-strict export "
    "(backend='export') runs the Python for real",
}


# --- where: the user's statement and the failing submodule ----------------------------------


@dataclasses.dataclass(frozen=True)
class Frame:
    """One frame of the failing stack: file, line, function, and the module whose
    ``forward`` it is (non-strict: read from the frame's ``self``)."""

    filename: str
    line: int
    function: str
    module: torch.nn.Module | None = None


def traceback_frames(exc: BaseException) -> list[Frame]:
    """The frames of ``exc``'s own traceback, outermost first."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        owner = tb.tb_frame.f_locals.get("self") if code.co_name == "forward" else None
        module = owner if isinstance(owner, torch.nn.Module) else None
        frames.append(Frame(code.co_filename, tb.tb_lineno, code.co_name, module))
        tb = tb.tb_next
    return frames


def dynamo_frames(exc: BaseException) -> list[Frame]:
    """TorchDynamo's user stack of ``exc`` (``real_stack``), outermost first; empty when
    it has none."""
    stack = getattr(exc, "real_stack", None) or ()
    frames = []
    for summary in stack:
        filename, line, name = getattr(summary, "filename", None), getattr(summary, "lineno", None), getattr(summary, "name", "")
        if isinstance(filename, str) and isinstance(line, int):
            frames.append(Frame(filename, line, name))
    return frames


def failing_frames(exc: BaseException) -> list[Frame]:
    """The stack the failure happened on: the traceback when the user's code is in it
    (non-strict), else dynamo's user stack (strict)."""
    own = traceback_frames(exc)
    if any(is_user_file(frame.filename) for frame in own):
        return own
    return dynamo_frames(exc) or own


def user_statement(frames: Sequence[Frame]) -> Location | None:
    """The innermost frame of user or library code (never torch's, ours or the standard
    library's), as the statement it was running."""
    for frame in reversed(frames):
        if is_user_file(frame.filename):
            source = statement_in(frame.filename, frame.line)
            return Location(shown_path(frame.filename, imports=False), frame.line, source)
    return None


def _forward_span(cls: type) -> tuple[str, int, int] | None:
    """(file, first line, last line) of ``cls.forward``."""
    code = getattr(getattr(cls, "forward", None), "__code__", None)
    if code is None:
        return None
    lines = [line for _, _, line in code.co_lines() if line is not None]
    return code.co_filename, code.co_firstlineno, max(lines, default=code.co_firstlineno)


def failing_module(model: torch.nn.Module, frames: Sequence[Frame]) -> tuple[str, str | None]:
    """Qualified path and class name of the innermost submodule of ``model`` whose
    ``forward`` is on the failing stack.

    Non-strict frames name their module (``self``). Dynamo's user stack does not: its
    ``forward`` frames are matched, outermost first, to the nearest descendants whose
    class's ``forward`` holds that line; where several modules still match at the end,
    their common parent is named rather than a guess.
    """
    modules = dict(model.named_modules())
    paths = {id(module): path for path, module in modules.items()}
    named = [frame for frame in frames if frame.module is not None and id(frame.module) in paths]
    if named:
        found = paths[id(named[-1].module)]
        return found, type(modules[found]).__name__
    # dynamo's stack: follow its forward frames down the module tree; where siblings of one
    # class match a frame, all are followed until a deeper frame tells them apart
    current = {""}
    for frame in frames:
        if frame.function != "forward" or any(_holds(type(modules[path]), frame) for path in current):
            continue  # not a forward, or the current module's own
        below = []
        for path in current:
            found = [
                inner
                for inner, module in modules.items()
                if inner != path and is_under(inner, path) and _holds(type(module), frame)
            ]
            if found:
                depth = min(inner.count(".") for inner in found)
                below += [inner for inner in found if inner.count(".") == depth]
        if below:  # else: a forward of something that is not a submodule (a helper object)
            current = set(below)
    found = _common_ancestor(current)
    return found, type(modules[found]).__name__


def _common_ancestor(paths: set[str]) -> str:
    if len(paths) == 1:
        return next(iter(paths))
    parts = [path.split(".") if path else [] for path in paths]
    common = []
    for group in zip(*parts, strict=False):
        if len(set(group)) != 1:
            break
        common.append(group[0])
    return ".".join(common)


def _holds(cls: type, frame: Frame) -> bool:
    span = _forward_span(cls)
    return span is not None and span[0] == frame.filename and span[1] <= frame.line <= span[2]


# --- why: the category ----------------------------------------------------------------------


def _names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def decides_control_flow(source: str) -> bool:
    """Whether a statement uses a value to decide which code runs: ``if``/``elif``/
    ``while``/``assert``, a conditional expression, ``bool()``, ``and``/``or``/``not``."""
    text = source.strip()
    if re.match(r"(?:if|elif|while|assert)\b", text):
        return True
    try:
        tree = ast.parse(text.rstrip(":"), mode="exec")
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, (ast.IfExp, ast.BoolOp)) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "bool":
            return True
    return False


@dataclasses.dataclass(frozen=True)
class Classified:
    category: Category
    reason: str  # completes "<model> is not exportable: `<statement>` at <path:line> <reason>"
    torch_id: str | None = None  # dynamo's graph-break id (GB0170)


def classify(exc: BaseException, location: Location | None, strict: bool) -> Classified:
    """The category of an export failure, and what happened in the user's words."""
    names = _names(exc)
    text = str(exc)
    gb_type = getattr(exc, "gb_type", None)
    torch_id = graph_break_id(exc)
    tag = f" [{torch_id}]" if torch_id else ""
    source = location.source if location is not None else ""
    io_type = interface_type(exc)
    if io_type is not None:
        found, where = io_type
        name = found.rpartition(".")[2]
        article = "an" if name[:1] in "AEIOU" else "a"
        dotted = f" ({found})" if found != name else ""
        return Classified(Category.UNSUPPORTED,
            f"{where} {article} {name} object{dotted}, which export cannot flatten into tensors; "
            "register its class (torch.export.register_dataclass, or torch.utils._pytree.register_pytree_node)",
            torch_id,
        )
    if FAKE_CONSTANT_TEXT in text:
        return Classified(Category.UNSUPPORTED, DATA_READ_REASON, torch_id)
    if gb_type == DATA_DEPENDENT_BRANCH:
        return Classified(Category.CONTROL_FLOW, f"branches on a value computed from tensor data, which TorchDynamo cannot capture{tag}", torch_id)
    if names & CONSTRAINT_ERRORS or CONSTRAINT_TEXT.search(text):
        return Classified(Category.SPECIALIZATION, "fixes the size of an input dimension that the recorded calls vary", torch_id)
    if names & DATA_DEPENDENT_ERRORS or DATA_DEPENDENT_TEXT.search(text):
        if source and decides_control_flow(source):
            return Classified(Category.CONTROL_FLOW, "branches on a value read from tensor data, which export cannot capture", torch_id)
        what = "a value read from tensor data"
        if "Could not extract specialized integer" in text:
            what = "a Python number made from tensor data (int(), float(), .item())"
        return Classified(Category.DATA_DEPENDENT, f"uses {what} as a size, shape or index that export cannot guard", torch_id)
    if names & UNSUPPORTED_OP_ERRORS or UNSUPPORTED_TEXT.search(text):
        if "numpy" in text.lower():
            return Classified(Category.UNSUPPORTED, "converts a tensor to NumPy, which non-strict export cannot trace through", torch_id)
        return Classified(Category.UNSUPPORTED, "calls an operator export cannot run on fake tensors (no fake kernel)", torch_id)
    if gb_type or names & GRAPH_BREAK_ERRORS or torch_id:
        what = f"`{gb_type}`" if gb_type else "a construct"
        return Classified(Category.UNSUPPORTED, f"uses {what}, which TorchDynamo (strict export) cannot capture{tag}", torch_id)
    return Classified(Category.OTHER, f"raised {type(exc).__name__} while exporting", torch_id)


def is_interface_error(exc: BaseException) -> bool:
    """Whether export refused the module's inputs or outputs (a type it cannot flatten)
    rather than something its code does."""
    return interface_type(exc) is not None


def interface_type(exc: BaseException) -> tuple[str, str] | None:
    """The class export refused to flatten, dotted, and whether the module ``"takes"`` or
    ``"returns"`` it; None for any other failure."""
    match = IO_TYPE_TEXT.search(str(exc))
    if match is None:
        return None
    found = next(group for group in match.groups() if group).removeprefix("<class '").removesuffix("'>")
    return found, "takes" if match.group(1) or match.group(4) else "returns"


def torch_checks(exc: BaseException) -> list[str]:
    """The ``torch._check(...)`` lines torch itself suggests for a data-dependent guard,
    written in the user's variables (a ``torch._check_is_size(v)`` as ``size_check(v)``)."""
    checks = []
    for check in TORCH_CHECKS.findall(str(exc)):
        size = CHECK_IS_SIZE.fullmatch(check)
        checks.append(size_check(size.group(1)) if size else check)
    return list(dict.fromkeys(checks))


def size_check(value: str) -> str:
    """The check that tells export ``value`` is a size, as the running torch recommends
    it: ``torch._check(n >= 0)`` where ``torch._check_is_size`` is deprecated (torch 2.14),
    else ``torch._check_is_size(n)``."""
    return f"torch._check({value} >= 0)" if check_is_size_deprecated() else f"torch._check_is_size({value})"


def data_dependent_fix(source: str) -> str:
    """The change in code for a value read from tensor data; ``source`` is the failing
    statement. ``int(t)`` asks for a concrete number export cannot give, where ``t.item()``
    gives a symbolic one that checks can then bound."""
    read = "use t.item() instead of int(t), then " if "int" in called_names(source) else ""
    return (
        f"{read}tell export what the value can be right after reading it: n = t.item(); "
        f"{size_check('n')} for a size, torch._check(n <= x.shape[0]) for a bound; or keep it "
        "a tensor (a mask or torch.where instead of .item()/int() and indexing)"
    )


def code_fix(classified: Classified, exc: BaseException, source: str = "") -> str | None:
    """The change in code that fixes a failure of this kind at the statement ``source``
    (torch's own ``torch._check`` suggestion where it made one)."""
    if classified.category == "data-dependent":
        checks = torch_checks(exc)
        size_fix = data_dependent_fix(source)
        return f"insert before that line {' or '.join(checks[:2])} (torch's suggestion); or {size_fix}" if checks else size_fix
    io_type = interface_type(exc)
    if io_type is not None:
        name = io_type[0].rpartition(".")[2]
        return (
            f"register {name} as a pytree node: torch.export.register_dataclass({name}) for a dataclass, "
            f"torch.utils._pytree.register_pytree_node({name}, flatten_fn, unflatten_fn) otherwise; "
            "or pass its tensors in a tuple or dict"
        )
    if classified.reason == DATA_READ_REASON:
        return DATA_READ_FIX
    fix = EXPORT_FIXES.get(classified.category)
    if classified.category == "unsupported" and classified.torch_id:
        return f"{fix} (torch's page on {classified.torch_id}: {graph_break_page(classified.torch_id)})"
    return fix


def graph_break_page(torch_id: str) -> str:
    return f"https://meta-pytorch.github.io/compile-graph-break-site/gb/{torch_id.lower()}.html"


# --- a tensor's .data in forward --------------------------------------------------------------

# torch's words when a value made from ``.data`` is left as a fake tensor among the program's
# constants (non-strict raises it; strict export returns such a program, which then gives
# fake tensors: FakeConstant says it in the same words)
FAKE_CONSTANT_TEXT = "fake tensor in the exported program constant"
DATA_READ_REASON = (
    "reads a tensor's .data, which export cannot trace through: the value made from it is left as a "
    "fake tensor among the exported program's constants"
)
DATA_READ_FIX = (
    "use the tensor itself instead of .data (self.weight * mask; under torch.no_grad(), or .detach(), "
    "where no gradient may flow through it)"
)


class FakeConstant(RuntimeError):
    """Strict export returned a program holding fake tensors among its constants."""


def fake_constants(exported: torch.export.ExportedProgram) -> FakeConstant | None:
    """The error non-strict export raises for a program with fake constants, or None."""
    names = [name for name, value in exported.constants.items() if type(value).__name__ == "FakeTensor"]
    if not names:
        return None
    return FakeConstant(
        f"We found a {FAKE_CONSTANT_TEXT}'s list: {', '.join(names)} (the exported program returns fake tensors)"
    )


def data_read(model: torch.nn.Module) -> tuple[str, str, Location] | None:
    """The first ``<tensor>.data`` in the ``forward`` of ``model`` or a submodule whose code
    is the user's: ``(module path, class name, statement)``."""
    seen: set[type] = set()
    for path, module in model.named_modules():
        cls = type(module)
        if cls in seen:
            continue
        seen.add(cls)
        span = _forward_span(cls)
        if span is None or not is_user_file(span[0]):
            continue
        filename, first, last = span
        for lineno in range(first, last + 1):
            line = _without_comment(linecache.getline(filename, lineno))
            if re.search(r"\w\.data\b(?!_)", line):
                return path, cls.__name__, Location(shown_path(filename, imports=False), lineno, statement_in(filename, lineno))
    return None


def _without_comment(line: str) -> str:
    return line.split("#", 1)[0].strip()


# --- all of it ------------------------------------------------------------------------------


def diagnose_export_failure(
    exc: BaseException, model: torch.nn.Module, strict: bool, prefix: str = ""
) -> Diagnosis:
    """A ``Diagnosis`` of ``exc``, raised by ``torch.export.export(model, ..., strict=)``.

    ``prefix`` is ``model``'s own path when it is a submodule of the model checked, so
    the failing module reads as a path of that model.

    Example::

        try:
            torch.export.export(model, (x,), strict=False)
        except Exception as exc:
            diagnosis = diagnose_export_failure(exc, model, strict=False)
    """
    frames = failing_frames(exc)
    location = user_statement(frames)
    classified = classify(exc, location, strict)
    module, module_type = failing_module(model, frames)
    found = data_read(model) if classified.reason == DATA_READ_REASON else None
    if found is not None:  # torch names only a lifted constant: the statement is the .data read
        module, module_type, location = found
    elif interface_type(exc) is not None:  # the model's own inputs or outputs, whatever frame raised
        module, module_type, location = "", type(model).__name__, None
    path = ".".join(part for part in (prefix, module) if part)
    return Diagnosis(
        category=classified.category,
        location=location,
        module=path,
        module_type=module_type,
        reason=classified.reason,
        error=export_error(exc, classified),
        code_fix=code_fix(classified, exc, location.source if location is not None else ""),
    )


def export_error(exc: BaseException, classified: Classified | None = None) -> str:
    """torch's error in one line, with the graph-break type and id where dynamo gave one."""
    first = format_error(exc)
    gb_type = getattr(exc, "gb_type", None)
    if gb_type and gb_type not in first:
        first += f" ({gb_type})"
    torch_id = classified.torch_id if classified is not None else graph_break_id(exc)
    if torch_id and torch_id not in first:
        first += f" [{torch_id}]"
    return first
