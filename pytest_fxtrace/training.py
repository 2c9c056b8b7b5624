"""Train mode (``train=True``, issue 41): a recorded call run forward and backward, on eager
and on the captured program, and what the two backward passes give compared.

The loss is ``loss_fn(output)``, or the sum of the output's floating values; its gradients
come from ``torch.autograd.grad``, never written into ``.grad`` (the test's own backward and
optimizer see nothing of ours), with respect to every parameter that requires grad and every
input that does. Inputs are detached first, so a backward never reaches into a graph the
test built before the call.

Where a gradient differs, the cause is read from the source of the modules that hold the
parameter, from its owner up to the model: a ``torch.no_grad()`` / ``set_grad_enabled`` /
``.detach()`` region, a ``requires_grad`` change, or a custom ``torch.autograd.Function``
whose ``backward`` the capture replaced with the derivative of its forward's ops. Each is a
``gradient`` finding at the user's statement, reproducible with plain torch: run forward and
``torch.autograd.grad`` on the model and on the captured program.

Knows no pytest and no backend.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

from pytest_fxtrace import _compat
from pytest_fxtrace.compare import Difference, Tolerance, Tolerances
from pytest_fxtrace.diagnose import statement_where
from pytest_fxtrace.types import Category, Diagnosis, Location

Comparator = Callable[..., "Difference | None"]

# the change in code each cause calls for
FIXES = {
    "requires_grad": "set requires_grad outside forward (in __init__, or in the training loop: "
    "module.weight.requires_grad_(False)): a capture records forward's tensor ops, not a change of flags",
    "no_grad": "detach the tensor instead (h = self.a(x).detach()), which every capture records, or check "
    "with backend='export' or 'compile', which keep torch.no_grad() regions",
    "function": "make the custom torch.autograd.Function an operator with its backward registered "
    "(torch.library.custom_op and register_autograd), which fx, export and compile keep whole; "
    "torch.compile runs an autograd.Function's own backward",
    "numeric": "compare the gradients of the module named with plain torch (torch.autograd.grad on the "
    "model and on the captured program) and loosen rtol=/atol= if the difference is rounding",
}
CODE_FIX = FIXES["numeric"]  # where nothing more particular was found


class LossFailed(Exception):
    """The user's ``loss_fn`` raised on eager's output, or gave no one-element tensor."""


@dataclasses.dataclass(frozen=True)
class Gradients:
    """What one backward gave: each parameter's gradient by its name in the model, then each
    input's (``input x``), None where the loss does not reach it; and each parameter's
    ``requires_grad`` as the forward left it."""

    values: dict[str, torch.Tensor | None]
    flags: dict[str, bool]


def loss_of(output: object, loss_fn: Callable[[Any], object] | None) -> torch.Tensor | None:
    """The scalar a train-mode check differentiates; None: nothing in it requires grad."""
    if loss_fn is None:
        reached = [
            leaf for leaf in _compat.tree_leaves(output)
            if isinstance(leaf, torch.Tensor) and leaf.requires_grad and (leaf.is_floating_point() or leaf.is_complex())
        ]
        if not reached:
            return None
        return torch.stack([leaf.real.float().sum() if leaf.is_complex() else leaf.float().sum() for leaf in reached]).sum()
    try:
        loss = loss_fn(output)
    except Exception as exc:
        raise LossFailed(f"loss_fn raised on the model's output: {type(exc).__name__}: {exc}") from exc
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise LossFailed(f"loss_fn must return a one-element tensor (the loss), got {_described(loss)}")
    return loss if loss.requires_grad else None


def _described(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return type(value).__name__


def grad_inputs(
    module: torch.nn.Module, args: tuple[object, ...], kwargs: dict[str, object], detach: bool = True
) -> tuple[tuple[object, ...], dict[str, object], dict[str, torch.Tensor]]:
    """The call's inputs with each tensor that requires grad detached into a leaf of its own
    (a backward stops there, short of the test's graph), and those leaves by name: the
    argument's name in ``forward`` (``x``; ``x[1]`` inside a list or tuple). ``detach=False``:
    the inputs as they are, and those that require grad by name (the leaves a run was given)."""
    names = _argument_names(module, len(args), list(kwargs))
    found: dict[str, torch.Tensor] = {}

    def leaf(value: object, name: str) -> object:
        if isinstance(value, torch.Tensor):
            if not value.requires_grad:
                return value
            copy = value.detach().requires_grad_() if detach else value
            found[f"input {name}"] = copy
            return copy
        if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
            return type(value)(leaf(item, f"{name}[{i}]") for i, item in enumerate(value))
        if isinstance(value, dict):
            return {key: leaf(item, f"{name}[{key!r}]") for key, item in value.items()}
        return value

    new_args = tuple(leaf(value, name) for value, name in zip(args, names, strict=False))
    new_kwargs = {key: leaf(value, key) for key, value in kwargs.items()}
    return new_args, new_kwargs, found


def _argument_names(module: torch.nn.Module, positional: int, keywords: list[str]) -> list[str]:
    try:
        parameters = [
            p for p in inspect.signature(module.forward).parameters.values()
            if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        parameters = []
    return [parameters[i].name if i < len(parameters) else f"args[{i}]" for i in range(positional)]


def backward(
    output: object,
    parameters: Mapping[str, torch.Tensor],
    inputs: Mapping[str, torch.Tensor],
    loss_fn: Callable[[Any], object] | None,
) -> Gradients:
    """Each parameter's and input's gradient of the loss of ``output`` (``loss_of``), by
    ``torch.autograd.grad``; the graph is freed after."""
    flags = {name: bool(p.requires_grad) for name, p in parameters.items()}
    values: dict[str, torch.Tensor | None] = dict.fromkeys([*parameters, *inputs])
    wanted = [(name, t) for name, t in (*parameters.items(), *inputs.items()) if t.requires_grad]
    with torch.enable_grad():
        loss = loss_of(output, loss_fn)
        if loss is not None and wanted:
            grads = torch.autograd.grad(loss, [t for _, t in wanted], allow_unused=True)
            values.update({name: grad for (name, _), grad in zip(wanted, grads, strict=True)})
    return Gradients(values, flags)


@dataclasses.dataclass(frozen=True)
class GradientDifference:
    """One gradient the captured program's backward gives otherwise than eager's."""

    name: str  # the parameter's name in the model ("fc.weight"), or "input x"
    eager: torch.Tensor | None  # None: the loss does not reach it
    captured: torch.Tensor | None
    flags: tuple[bool, bool] | None  # (eager's, the program's) requires_grad after forward, where they differ
    difference: Difference | None  # where both have one and the values differ

    @property
    def parameter(self) -> bool:
        return not self.name.startswith("input ")


# Gradients of a summed loss reach the hundreds, and a backward sums in another order than
# eager's: elements near zero then differ by a few float epsilons of the gradient's own scale
# (measured on transformers 5.24's Qwen3Moe, Bamba and Lfm2Vl under export: 1.1-3.2 float32
# epsilons of the largest magnitude, their outputs equal). assert_close's element-wise default
# or 64 epsilons of that scale, whichever is larger, as the ONNX backend judges its outputs; a
# lost custom backward or no_grad region differs by the gradient's own size.
GRADIENT_EPSILONS = 64
GRADIENT_TOLERANCES: Tolerances = {
    torch.float32: Tolerance(1.3e-6, 1e-5, epsilons=GRADIENT_EPSILONS),
    torch.float64: Tolerance(1e-7, 1e-7, epsilons=GRADIENT_EPSILONS),
    torch.float16: Tolerance(1e-3, 1e-5, epsilons=GRADIENT_EPSILONS),
    torch.bfloat16: Tolerance(1.6e-2, 1e-5, epsilons=GRADIENT_EPSILONS),
}


def gradient_differences(
    eager: Gradients, captured: Gradients, compare: Comparator, rtol: float | None, atol: float | None
) -> list[GradientDifference]:
    """Each gradient (and ``requires_grad`` flag) that differs, parameters first, in the
    model's order (``GRADIENT_TOLERANCES`` where the user sets no tolerance)."""
    found = []
    for name, expected in eager.values.items():
        actual = captured.values.get(name)
        flags = (eager.flags[name], captured.flags.get(name, eager.flags[name])) if name in eager.flags else None
        if flags is not None and flags[0] == flags[1]:
            flags = None
        difference = None
        if expected is not None and actual is not None:
            difference = compare(actual, expected, rtol=rtol, atol=atol, defaults=GRADIENT_TOLERANCES)
            if difference is None and flags is None:
                continue
        elif expected is None and actual is None and flags is None:
            continue
        elif expected is None and actual is not None and not bool(actual.any()) and flags is None:
            continue  # a zero gradient where eager has none: the same update
        elif actual is None and expected is not None and not bool(expected.any()) and flags is None:
            continue
        found.append(GradientDifference(name, expected, actual, flags, difference))
    return found


def explain(model: torch.nn.Module, found: GradientDifference, graph: str) -> Diagnosis:
    """Why the program's gradient of ``found.name`` differs, at the user's statement where
    its source says (``graph``: how messages name the captured program)."""
    path = found.name.rpartition(".")[0] if found.parameter else ""
    owner = _submodule(model, path)
    who = f"the gradient of {found.name}"
    if found.flags is not None:
        eager_flag, program_flag = found.flags
        location = _first(model, path, _changes_requires_grad)
        reason = (
            f"forward changes {found.name}.requires_grad, which {graph} does not: after forward eager's "
            f"is {eager_flag}, {graph}'s {program_flag}, so {graph} "
            f"{'computes' if program_flag else 'drops'} {who}"
        )
        return _diagnosis(model, reason, location, path, owner, FIXES["requires_grad"])
    if found.eager is None or found.captured is None:
        location = _first(model, path, _stops_gradient)
        if found.eager is None:
            reason = (
                f"eager computes no gradient for {found.name} (forward keeps it out of autograd), but "
                f"{graph} does: {graph} lost forward's no_grad region or detach"
            )
        else:
            reason = f"{graph} computes no gradient for {found.name}, where eager does"
            if location is not None:
                reason += f": {graph} keeps out of autograd what eager differentiates"
        return _diagnosis(model, reason, location, path, owner, FIXES["no_grad"])
    function = _first_function(model, path)
    if function is not None:
        name, location = function
        reason = (
            f"{who} differs from eager's ({_error(found.difference)}): forward calls the custom "
            f"torch.autograd.Function {name}, and {graph} differentiates the ops of {name}.forward "
            f"instead of running {name}.backward"
        )
        return _diagnosis(model, reason, location, path, owner, FIXES["function"])
    reason = f"{who} differs from eager's ({_error(found.difference)})"
    return _diagnosis(model, reason, None, path, owner, CODE_FIX)


def _error(difference: Difference | None) -> str:
    if difference is None:
        return "other values"
    if difference.max_abs_error is not None:
        return f"max abs error {difference.max_abs_error:.3g}"
    return difference.message


def _diagnosis(
    model: torch.nn.Module,
    reason: str,
    location: Location | None,
    path: str,
    owner: torch.nn.Module | None,
    code_fix: str,
) -> Diagnosis:
    owner_type = type(owner).__name__ if owner is not None else None
    return Diagnosis(Category.GRADIENT, reason, location, path, owner_type, code_fix=code_fix)


def _submodule(model: torch.nn.Module, path: str) -> torch.nn.Module | None:
    try:
        return model.get_submodule(path) if path else model
    except AttributeError:
        return None


def _owners(model: torch.nn.Module, path: str) -> Iterator[torch.nn.Module]:
    """The module at ``path`` and each module above it, up to the model; then the others."""
    seen: set[int] = set()
    parts = path.split(".") if path else []
    for end in range(len(parts), -1, -1):
        module = _submodule(model, ".".join(parts[:end]))
        if module is not None and id(module) not in seen:
            seen.add(id(module))
            yield module
    for module in model.modules():
        if id(module) not in seen:
            seen.add(id(module))
            yield module


def _first(model: torch.nn.Module, path: str, wanted: Callable[[ast.AST, dict[str, Any]], bool]) -> Location | None:
    for module in _owners(model, path):
        for function in _methods(type(module)):
            found = _statement(function, wanted)
            if found is not None:
                return found[1]
    return None


def _first_function(model: torch.nn.Module, path: str) -> tuple[str, Location] | None:
    """The first ``Function.apply(...)`` of a custom ``torch.autograd.Function`` in the
    forward of the modules holding ``path``, and the Function's name."""
    for module in _owners(model, path):
        for function in _methods(type(module)):
            found = _statement(function, _applies_function)
            if found is not None:
                return found
    return None


def _methods(cls: type) -> list[Callable[..., Any]]:
    forward = getattr(cls, "forward", None)
    helpers: list[Callable[..., Any]] = [
        f for name, f in vars(cls).items() if inspect.isfunction(f) and name not in ("__init__", "forward")
    ]
    return [forward, *helpers] if forward is not None else helpers


def _statement(
    function: Callable[..., Any], wanted: Callable[[ast.AST, dict[str, Any]], bool]
) -> tuple[str, Location] | None:
    """The first node of ``function`` that ``wanted`` accepts (given the function's globals),
    as (the name it calls, the innermost statement holding it); None in torch's own code."""
    names = getattr(function, "__globals__", {})
    found = statement_where(function, lambda node: wanted(node, names))
    if found is None:
        return None
    node, location = found
    shown = dataclasses.replace(location, source=location.source.splitlines()[0].strip() if location.source else "")
    called = node.func.value.id if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) else ""
    return called, shown


def _changes_requires_grad(node: ast.AST, names: dict[str, Any]) -> bool:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr == "requires_grad_"
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Attribute) and t.attr == "requires_grad" for t in node.targets)
    return False


_NO_GRAD = ("no_grad", "set_grad_enabled", "inference_mode", "enable_grad")


def _stops_gradient(node: ast.AST, names: dict[str, Any]) -> bool:
    if _changes_requires_grad(node, names):
        return True
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        return name in (*_NO_GRAD, "detach", "detach_")
    return False


def _applies_function(node: ast.AST, names: dict[str, Any]) -> bool:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "apply"):
        return False
    target = node.func.value
    value = names.get(target.id) if isinstance(target, ast.Name) else None
    return isinstance(value, type) and issubclass(value, torch.autograd.Function)


__all__ = [
    "CODE_FIX",
    "FIXES",
    "GradientDifference",
    "Gradients",
    "LossFailed",
    "backward",
    "explain",
    "grad_inputs",
    "gradient_differences",
    "loss_of",
]
