"""Find a verified patch: each candidate rewrite of the failing statement applied in memory,
the definition that holds it rebuilt from it in a copy of its module's namespace, and the
patched model tried through a ``PatchTrial`` (the caller's: eager equality, then the same check).

What holds the statement is a class or a function defined at a module's top level:

* a class (the failing submodule's, or one of its bases): the modules of exactly that class
  get the rebuilt class; a subclass's instances are not touched (the patch is then not
  verified);
* a function (timm's ``get_same_padding``, called from a forward through other functions):
  every function from the model's forwards down to it that reaches it by a global name is
  copied onto a copy of its module's namespace that holds the rebuilt one, and each module
  whose class calls into them gets a subclass with those copies, so the user's modules and
  functions stay as they are.

A decorator is not run again (it may register the copy in a library's registry, timm's
``register_notrace_module``): a decorated definition is rebuilt without it, only where the
decorator gave back the definition itself and added nothing to it. The user's files are never
written, the user's model is never patched: the trial works on copies.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import os
import sys
import textwrap
import types
from collections.abc import Callable, Iterator

import torch

from pytest_fxtrace._compat import fx_wraps_kept
from pytest_fxtrace.patches.diff import unified_diff
from pytest_fxtrace.patches.rewrites import Rewrite, rewrites, wrapped_for_fx
from pytest_fxtrace.types import Diagnosis, Suggestion

# the caller's trial of a patched model: given what turns a copy of the model (as before the
# call) into the patched one, and whether to run the check too (False: eager's answer only),
# (passed, what happened): eager answered as before and, where asked, the check passed
PatchTrial = Callable[[Callable[[torch.nn.Module], torch.nn.Module], bool], "tuple[bool, str]"]
Retype = Callable[[torch.nn.Module], torch.nn.Module]


@dataclasses.dataclass(frozen=True)
class _Source:
    """The top-level definition whose source holds the failing statement."""

    definition: type | types.FunctionType
    module: types.ModuleType
    file: str
    lines: list[str]  # as in the file, its decorators included
    start: int  # its first line in the file (its first decorator's)
    decorators: int  # how many of ``lines`` come before its ``class`` / ``def`` line


def _holder(model: torch.nn.Module, diagnosis: Diagnosis) -> _Source | None:
    """The class whose source holds the failing statement (the failing submodule's class or
    one of its bases), else the module-level function that does."""
    location = diagnosis.location
    if location is None:
        return None
    try:
        owner = model.get_submodule(diagnosis.module) if diagnosis.module else model
    except AttributeError:
        return None
    # the failing submodule's classes first, then every other module's (a finding without a
    # submodule: a dimension specialised somewhere in the model)
    classes = [type(owner), *(type(m) for m in model.modules())]
    candidates: list[type | types.FunctionType] = [
        cls
        for cls in dict.fromkeys(c for kind in classes for c in kind.__mro__)
        if not cls.__module__.startswith("torch.") and cls is not object and "." not in cls.__qualname__
    ]
    module = _module_of(location.path)
    if module is not None:
        candidates += [
            value
            for value in vars(module).values()
            if isinstance(value, types.FunctionType)
            and value.__module__ == module.__name__
            and "." not in value.__qualname__
            and not hasattr(value, "__wrapped__")  # a decorator's wrapper: its source is not the function's
        ]
    for definition in candidates:
        try:
            file = inspect.getsourcefile(definition)
            lines, start = inspect.getsourcelines(definition)
        except (OSError, TypeError):
            continue
        if file is None or not _same_file(file, location.path) or not start <= location.line < start + len(lines):
            continue
        home = sys.modules.get(definition.__module__)
        decorators = _decorator_lines(lines)
        if home is None or decorators is None or vars(home).get(definition.__name__) is not definition:
            return None  # a decorator gave back another object in its place
        return _Source(definition, home, file, lines, start, decorators)
    return None


def _module_of(path: str) -> types.ModuleType | None:
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and _same_file(file, path):
            return module
    return None


def _same_file(file: str, shown: str) -> bool:
    return os.path.abspath(file) == os.path.abspath(shown) or os.path.abspath(file).endswith(os.sep + shown.replace("/", os.sep))


def _decorator_lines(lines: list[str]) -> int | None:
    """How many of a definition's ``lines`` are its decorators; None: not one definition."""
    try:
        (node,) = ast.parse(textwrap.dedent("".join(lines))).body
    except (SyntaxError, ValueError):
        return None
    if not isinstance(node, (ast.ClassDef, ast.FunctionDef)):
        return None
    return node.lineno - 1


def _rebuilt(found: _Source, source: str) -> tuple[type | types.FunctionType, dict[str, object]]:
    """``found``'s definition run again from ``source`` (its decorators left out) in a copy of
    its module's namespace: the new definition, and that namespace."""
    namespace = dict(vars(found.module))
    body = "".join(source.splitlines(keepends=True)[found.decorators :])
    exec(compile(body, f"{found.file} (patched by pytest-fxtrace)", "exec"), namespace)  # the user's own code, rewritten
    rebuilt = namespace[found.definition.__name__]
    if not isinstance(rebuilt, (type, types.FunctionType)):
        raise TypeError(f"{found.definition.__name__} is not defined by the patched source")
    rebuilt.__module__ = found.definition.__module__
    return rebuilt, namespace


def _decorators_add_nothing(found: _Source) -> bool:
    """Whether leaving ``found``'s decorators out changes nothing but a registration: the
    definition run again without them has what the decorated one has."""
    if not found.decorators:
        return True
    plain, _ = _rebuilt(found, "".join(found.lines))
    return set(vars(plain)) == set(vars(found.definition))


def _swap(cls: type, rebuilt: type) -> Retype:
    def make(model: torch.nn.Module) -> torch.nn.Module:
        modules = list(model.modules())
        if any(isinstance(m, cls) and type(m) is not cls for m in modules):
            raise TypeError(f"a subclass of {cls.__name__} would keep the old code")
        for module in modules:
            if type(module) is cls:
                module.__class__ = rebuilt
        return model

    return make


def _code_names(code: types.CodeType) -> set[str]:
    """The global (and attribute) names ``code`` and the code nested in it read."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _code_names(constant)
    return names


class _Rewire:
    """Copies of the functions that reach ``target`` by a global name, each on a copy of its
    module's namespace where those names hold the copies (``target``'s module: ``namespace``,
    the one the rebuilt function was run in), so the originals stay as they are."""

    def __init__(self, target: types.FunctionType, rebuilt: types.FunctionType, namespace: dict[str, object]) -> None:
        self.target, self.rebuilt = target, rebuilt
        self.namespaces: dict[int, dict[str, object]] = {id(target.__globals__): namespace}
        self._reaches: dict[types.FunctionType, bool] = {target: True}
        self._copies: dict[types.FunctionType, types.FunctionType] = {target: rebuilt}

    def _callees(self, function: types.FunctionType) -> dict[str, types.FunctionType]:
        found = {}
        for name in _code_names(function.__code__):
            value = function.__globals__.get(name)
            if isinstance(value, types.FunctionType) and not value.__module__.startswith("torch"):
                found[name] = value
        return found

    def reaches(self, function: types.FunctionType) -> bool:
        if function not in self._reaches:
            self._reaches[function] = False  # a cycle does not reach through itself
            self._reaches[function] = any(self.reaches(callee) for callee in self._callees(function).values())
        return self._reaches[function]

    def copy(self, function: types.FunctionType) -> types.FunctionType:
        if function in self._copies:
            return self._copies[function]
        namespace = self.namespaces.setdefault(id(function.__globals__), dict(function.__globals__))
        copied = types.FunctionType(function.__code__, namespace, function.__name__, function.__defaults__, function.__closure__)
        copied.__kwdefaults__ = function.__kwdefaults__
        copied.__qualname__ = function.__qualname__
        copied.__dict__.update(function.__dict__)
        self._copies[function] = copied
        for name, callee in self._callees(function).items():
            if self.reaches(callee):
                namespace[name] = self.copy(callee)
        return copied


def _methods(model: torch.nn.Module) -> Iterator[tuple[type, str, object, types.FunctionType]]:
    """(class, name, attribute, its function) of each method the classes of ``model``'s
    modules run (torch's own left out): the one a class resolves each name to, a static or
    class method's function unwrapped."""
    for cls in dict.fromkeys(type(m) for m in model.modules()):
        seen: set[str] = set()
        for klass in cls.__mro__:
            if klass.__module__.startswith("torch") or klass is object:
                continue
            for name, value in vars(klass).items():
                if name in seen:
                    continue  # overridden below klass
                seen.add(name)
                function = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
                if isinstance(function, types.FunctionType):
                    yield cls, name, value, function


def _rewired(model: torch.nn.Module, rewire: _Rewire) -> dict[type, type]:
    """For each class of ``model``'s modules whose methods reach the rebuilt function, a
    subclass whose methods are the copies that call it."""
    overrides: dict[type, dict[str, object]] = {}
    for cls, name, value, function in _methods(model):
        if rewire.reaches(function):
            copied = rewire.copy(function)
            overrides.setdefault(cls, {})[name] = type(value)(copied) if isinstance(value, (staticmethod, classmethod)) else copied
    return {
        cls: type(cls.__name__, (cls,), {"__module__": cls.__module__, "__qualname__": cls.__qualname__, **methods})
        for cls, methods in overrides.items()
    }


def _retype(retyped: dict[type, type]) -> Retype:
    def make(model: torch.nn.Module) -> torch.nn.Module:
        for module in model.modules():
            new = retyped.get(type(module))
            if new is not None:
                module.__class__ = new
        return model

    return make


def _patched(model: torch.nn.Module, found: _Source, source: str) -> Retype | None:
    """What gives a copy of ``model`` the definition rebuilt from ``source``; None: no
    module of the model runs it."""
    rebuilt, namespace = _rebuilt(found, source)
    if isinstance(rebuilt, type):
        assert isinstance(found.definition, type)
        return _swap(found.definition, rebuilt)
    assert isinstance(found.definition, types.FunctionType)
    retyped = _rewired(model, _Rewire(found.definition, rebuilt, namespace))
    return _retype(retyped) if retyped else None


def _candidates(found: _Source, line: int, proxies: bool) -> list[Rewrite]:
    source = "".join(found.lines)
    found_here = [r for r in rewrites(source, line) if proxies or not r.proxies_only]
    if isinstance(found.definition, types.FunctionType) and proxies:
        found_here.append(wrapped_for_fx(source, found.definition.__name__))
    return found_here


def find_patch(model: torch.nn.Module, diagnosis: Diagnosis, trial: PatchTrial, proxies: bool) -> Suggestion | None:
    """The first candidate rewrite of ``diagnosis``'s statement that ``trial`` passes, as a
    verified suggestion carrying its diff; None: no candidate, or none passed. ``proxies``:
    the capture runs the model on proxies (torch.fx), where torch.fx's own rewrites help."""
    found = _holder(model, diagnosis)
    if found is None or diagnosis.location is None:
        return None
    if not isinstance(vars(found.module).get("torch"), type(torch)):
        return None  # the rewrites call torch.*: a module that does not import torch as torch
    with fx_wraps_kept():  # a candidate's torch.fx.wrap(...) is forgotten after its trial
        if not _decorators_add_nothing(found):
            return None
        for rewrite in _candidates(found, diagnosis.location.line - found.start + 1, proxies):
            try:
                make = _patched(model, found, rewrite.source)
                control = None if rewrite.control is None else _patched(model, found, rewrite.control)
            except Exception:  # a rewrite that does not compile is just not a patch
                continue
            if make is None or (rewrite.control is not None and control is None):
                continue
            if control is not None and not trial(control, False)[0]:
                continue  # the rewrite's own evidence (the branch's body never run) failed
            passed, _ = trial(make, True)
            if not passed:
                continue
            diff = unified_diff(found.file, found.module.__name__, found.lines, rewrite.source, found.start)
            return _verified(diagnosis, rewrite.what, diff)
        if isinstance(found.definition, types.FunctionType) and proxies:
            return _wrapped_where_called(model, found.definition, diagnosis, trial)
    return None


def _verified(diagnosis: Diagnosis, what: str, diff: str) -> Suggestion:
    assert diagnosis.location is not None
    statement = diagnosis.location.source.strip()
    return Suggestion(
        f"patch `{statement}` at {diagnosis.location}: {what} (applied to a copy, the check passed and eager answered as before)",
        True,
        patch=diff,
    )


def _wrapped_where_called(model: torch.nn.Module, target: types.FunctionType, diagnosis: Diagnosis, trial: PatchTrial) -> Suggestion | None:
    """``torch.fx.wrap("name")`` in the one other module whose code the model runs calls
    ``target`` from (``from .pos_embed import resample_abs_pos_embed``): torch.fx wraps a
    name in the namespace of the module that asks, so that module's calls become one node."""
    name = target.__name__
    rewire = _Rewire(target, target, dict(target.__globals__))
    callers = {
        id(function.__globals__): function
        for _, _, _, function in _methods(model)
        if function.__globals__.get(name) is target and name in _code_names(function.__code__)
    }
    callers.pop(id(target.__globals__), None)
    if len(callers) != 1:
        return None  # none, or several files to change
    (caller,) = callers.values()
    home = sys.modules.get(str(caller.__globals__.get("__name__")))
    file = getattr(home, "__file__", None)
    if home is None or not isinstance(file, str) or not isinstance(vars(home).get("torch"), type(torch)):
        return None
    line = f'torch.fx.wrap("{name}")  # traced as one call: its Python logic runs when the graph runs\n'
    namespace = dict(vars(home))
    exec(compile(line, f"{file} (patched by pytest-fxtrace)", "exec"), namespace)  # registers the copy's name
    rewire.namespaces[id(caller.__globals__)] = namespace
    retyped = _rewired(model, rewire)
    if not retyped or not trial(_retype(retyped), True)[0]:
        return None
    with open(file, encoding="utf-8") as handle:
        lines = handle.read().splitlines(keepends=True)
    diff = unified_diff(file, home.__name__, [], f"\n\n{line}", len(lines) + 1)
    what = f'`torch.fx.wrap("{name}")` in {home.__name__}, which calls it: torch.fx records each call from there as one node'
    return _verified(diagnosis, what, diff)
