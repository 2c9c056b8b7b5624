"""A model's mutable state and the RNG streams: what a recorded call is replayed under.

``ModelState`` holds each module's attributes and its buffer values as they were
just before a call; a restore puts the attributes back without writing into any
tensor, and buffer values are only ever lent (copies swapped in for a block).
``rng.RngState`` holds every RNG a forward may draw from. A check captures both,
replays on them, and puts everything back, so the user's model and RNG streams
are as the test left them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import operator
from collections.abc import Iterator
from itertools import chain, filterfalse, repeat

import torch

from pytest_fxtrace._compat import BUFFERS, MODULES, PARAMETERS, buffers_of, write_count
from pytest_fxtrace._compat import children as module_children
from pytest_fxtrace.diagnose import written_parameters
from pytest_fxtrace.timelimit import cleanup

_STORES = operator.itemgetter(PARAMETERS, BUFFERS, MODULES)


def modules_of(root: torch.nn.Module) -> list[torch.nn.Module]:
    """Every module under ``root`` once, ``root`` first (breadth-first), without the
    path strings ``named_modules`` builds (this runs on every check)."""
    found = [root]
    seen = {root}
    for module in found:  # grows while iterating
        children = module_children(module)
        if children:
            for child in children.values():
                if child is not None and child not in seen:
                    seen.add(child)
                    found.append(child)
    return found


@dataclasses.dataclass(eq=False)
class ModelState:
    """A model's mutable state: each module's attributes, and its buffer values.

    Restoring puts attributes back (``self.calls += 1``, the training flag, a
    buffer replaced by assignment, a submodule added) without writing into any
    tensor. Buffer values are only ever *lent*: ``lent_buffers`` swaps copies of
    the saved values into a module tree for the length of a block, so a replay (or
    our own eager run) can update running statistics without touching the user's
    tensors -- an in-place write would also break the user's pending ``backward()``.

    A check captures once before the call (one walk, one clone per buffer) and
    takes a ``snapshot`` after it (the same dicts, no walk); its trace and replay
    borrow at known places (``lending``), so nothing else walks the model.
    """

    modules: list[torch.nn.Module]  # every module once, the model first
    # The dicts a restore puts back: each module's __dict__ (first, in module order),
    # then its _parameters/_buffers/_modules that were non-empty, with their copies;
    # the empty ones are only emptied again (most modules have no parameters,
    # buffers or children, and a forward may add some).
    live: list[dict[str, object]]
    saved: list[dict[str, object]]
    empty: list[dict[str, object]]
    # Buffer values (values=True), by id of the user's buffer: the buffer itself
    # (kept alive, so no id is reused), a private copy of its value, and the
    # buffer's count of in-place writes then (torch's ``_version``) where it keeps
    # one; and every (module, name) holding one, so lending to the model needs no walk.
    originals: dict[int, torch.Tensor] = dataclasses.field(default_factory=dict)
    buffer_values: dict[int, torch.Tensor] = dataclasses.field(default_factory=dict)
    versions: dict[int, int] = dataclasses.field(default_factory=dict)
    places: list[tuple[torch.nn.Module, str]] = dataclasses.field(default_factory=list)
    place_keys: list[int] = dataclasses.field(default_factory=list)  # id of the buffer at each place
    training: bool = False  # some module was in training mode when captured
    # Parameters forward may write (``self.weight.data *= self.mask``, read from its class's
    # source: ``written_parameters``), by id: the parameter and a copy of its value. A
    # restore writes the copies back (the only values a restore writes: a write through
    # ``.data`` bumps no count and cannot be lent around, as a parameter is the user's own).
    parameters: dict[int, tuple[torch.Tensor, torch.Tensor]] = dataclasses.field(default_factory=dict)
    parameter_places: list[tuple[torch.nn.Module, str]] = dataclasses.field(default_factory=list)
    # each parameter's requires_grad as captured (values=True): a forward may change it
    # (``self.w.requires_grad_(False)``), and a train-mode check starts each run from it
    grad_flags: list[tuple[torch.Tensor, bool]] = dataclasses.field(default_factory=list)

    @classmethod
    def capture(cls, model: torch.nn.Module, values: bool = True) -> ModelState:
        """``values=False``: attributes only, for a state that is only ever restored
        (no buffer is cloned; ``lent_buffers`` then lends nothing)."""
        modules = modules_of(model)
        live: list[dict[str, object]] = []
        saved: list[dict[str, object]] = []
        stores: list[dict[str, object]] = []
        store_copies: list[dict[str, object]] = []
        empty: list[dict[str, object]] = []
        state = cls(modules, live, saved, empty)
        originals, copies, versions, places = state.originals, state.buffer_values, state.versions, state.places
        place_keys = state.place_keys
        counted = values and not torch.is_inference_mode_enabled()  # copies made in inference mode keep no count
        training = False
        flags = state.grad_flags
        with torch.no_grad():
            for module in modules:
                # (refilling the live __dict__ to make it a plain dict, for block copies
                # later, saved nothing measurable: resnet18 P1 1.027 without, 1.029 with)
                attributes = module.__dict__
                copy = dict(attributes)
                live.append(attributes)
                saved.append(copy)
                training = training or copy.get("training", False)
                for store in (copy.get(PARAMETERS), copy.get(MODULES)):
                    if store:
                        stores.append(store)
                        store_copies.append(store.copy())
                    elif store is not None:
                        empty.append(store)
                if values and copy.get(PARAMETERS):
                    flags.extend((p, p.requires_grad) for p in copy[PARAMETERS].values() if p is not None)
                buffers = copy.get(BUFFERS)
                if not buffers:
                    if buffers is not None:
                        empty.append(buffers)
                    continue
                stores.append(buffers)
                store_copies.append(buffers.copy())
                if not values:
                    continue
                for name, buffer in buffers.items():
                    if buffer is None:
                        continue
                    places.append((module, name))
                    key = id(buffer)
                    place_keys.append(key)
                    if key in originals:
                        continue
                    originals[key] = buffer
                    copies[key] = buffer.clone()  # a new tensor: no write counted yet
                    if counted:
                        try:
                            versions[key] = write_count(buffer)
                        except RuntimeError:  # inference tensors keep no count
                            pass
        if values:
            state._capture_parameters()
        live += stores  # after the __dict__s (see attribute_changes)
        saved += store_copies
        state.training = training
        return state

    @classmethod
    def attributes_of(cls, modules: list[torch.nn.Module]) -> ModelState:
        """``capture(model, values=False)`` of the model's ``modules`` (each once, the
        model first), for a state restored once (a localization): the same dicts, made
        with loops in C."""
        live = list(map(vars, modules))
        saved = list(map(dict, live))  # plain copies: the restore is a block copy
        try:
            stores = list(chain.from_iterable(map(_STORES, saved)))
            full = list(filter(None, stores))
            copies = list(map(dict.copy, full))
        except (KeyError, TypeError):  # a module without the usual stores, or odd ones
            return cls.capture(modules[0], values=False)
        state = cls(modules, live + full, saved + copies, list(filterfalse(None, stores)))
        state.training = any(map(dict.get, saved, repeat("training")))
        return state

    def in_training(self) -> ModelState:
        """This state with every module in training mode, as ``model.train()`` leaves it (a
        train-mode check of a call recorded in eval mode); the same buffer values and flags."""
        if self.training and all(d.get("training", True) for d in self.saved[: len(self.modules)]):
            return self
        saved = [dict(d, training=True) if i < len(self.modules) else d for i, d in enumerate(self.saved)]
        return dataclasses.replace(self, saved=saved, training=True)

    def grad_flags_now(self) -> list[tuple[torch.Tensor, bool]]:
        """Each captured parameter's requires_grad as it is now (to put back after a run)."""
        return [(parameter, parameter.requires_grad) for parameter, _ in self.grad_flags]

    @staticmethod
    def put_grad_flags(flags: list[tuple[torch.Tensor, bool]]) -> None:
        for parameter, flag in flags:
            if parameter.requires_grad != flag:
                parameter.requires_grad_(flag)

    def snapshot(self) -> ModelState:
        """The same modules' attributes as they are now (no buffer values): what a
        restore of the state after a call needs, without walking the model again.
        A module the call attached is not walked into: with this state's own
        attributes restored it is out of the model, so nothing of ours reaches it."""
        live = self.live + [store for store in self.empty if store]
        empty = [store for store in self.empty if not store]
        return ModelState(self.modules, live, [store.copy() for store in live], empty)

    def attribute_changes(self) -> Iterator[tuple[torch.nn.Module, dict[str, object], dict[str, object]]]:
        """(module, its attributes now, as captured) for each module whose attributes
        may differ (equal dicts are skipped; compared in C, identity first)."""
        for module, now, then in zip(self.modules, self.live, self.saved, strict=False):  # __dict__s first
            try:
                if now == then:
                    continue
            except Exception:  # a value whose == is not a bool (tensors, proxies)
                pass
            yield module, now, then

    @cleanup
    def restore(self) -> None:
        """Put every module's attributes back as captured (no tensor is written), and the
        values of the parameters forward may write (``parameters``)."""
        # __dict__s first: they hold the very dicts a forward may have changed in place
        for store, saved in zip(self.live, self.saved, strict=True):
            store.clear()
            store.update(saved)
        for store in self.empty:
            if store:
                store.clear()
        if self.parameters:
            self.put_parameters({key: value for key, (_, value) in self.parameters.items()})

    def _capture_parameters(self) -> None:
        for module in self.modules:
            names = written_parameters(type(module))
            if not names:
                continue
            store = vars(module).get(PARAMETERS) or {}
            for name in names:
                parameter = store.get(name)
                if parameter is None:
                    continue
                self.parameter_places.append((module, name))
                if id(parameter) not in self.parameters:
                    self.parameters[id(parameter)] = (parameter, parameter.detach().clone())

    def parameter_changes(self) -> dict[int, torch.Tensor]:
        """Copies of the parameters forward may write whose values moved since the capture,
        by id: read right after a call (eager's) or a replay (the graph's)."""
        return {
            key: parameter.detach().clone()
            for key, (parameter, before) in self.parameters.items()
            if not _same(parameter.detach(), before)
        }

    def put_parameters(self, values: dict[int, torch.Tensor]) -> None:
        """Write ``values`` (by id, as ``parameter_changes`` gives them) into the parameters,
        through ``.data`` as such a forward does, so no count of writes moves."""
        with torch.no_grad():
            for key, value in values.items():
                parameter = self.parameters[key][0]
                parameter.data.copy_(value)

    def buffer_changes(self, lent: dict[int, torch.Tensor] | None = None) -> dict[int, torch.Tensor]:
        """Eager's after-state: each captured buffer the call changed, by the id of the
        buffer as captured -- the tensor in its place where the call wrote it in place (its
        count of writes moved; without a count, its value), or rebound it. Read right after
        the call: inside the ``lending`` block it ran in (``lent``, what it yielded), or,
        for a call on the user's own buffers, before a restore puts the places back."""
        changed: dict[int, torch.Tensor] = {}
        if not self.originals:
            return changed
        lent = lent or {}
        before: int | None
        for (module, name), key in zip(self.places, self.place_keys, strict=True):
            now = buffers_of(module).get(name)
            if now is None or key in changed:
                continue
            if id(now) in lent:  # a lent copy: it starts at no writes
                before, writes = 0, now
            elif now is self.originals[key]:
                before, writes = self.versions.get(key), now
            else:  # rebound
                changed[key] = now
                continue
            try:
                written = write_count(writes) != before if before is not None else None
            except RuntimeError:  # an inference tensor keeps no count
                written = None
            if written or written is None and not _same(now, self.buffer_values[key]):
                changed[key] = now
        return changed

    def _settle(self, key: int) -> None:
        """After the copy of a captured buffer was lent itself: if the block wrote it
        (its count moved), make it again from the user's buffer, which still holds
        the captured value (it was not written since the capture: see ``lending``)."""
        if write_count(self.buffer_values[key]):  # a copy starts at 0
            with torch.no_grad():
                self.buffer_values[key] = self.originals[key].clone()

    def lent_buffers(self, root: torch.nn.Module) -> contextlib.AbstractContextManager[dict[int, torch.Tensor]]:
        """Within the block, every buffer under ``root`` that was captured is replaced
        by a fresh copy of its captured value; the originals go back afterwards.

        Yields ``{id(copy): original}`` so a GraphModule built inside the block can
        be pointed back at the user's buffers (``return_buffers``).
        """
        if not self.originals:  # nothing captured (no buffers, or values=False): no walk
            return contextlib.nullcontext({})
        places = self.places if root is self.modules[0] else buffer_places(root)
        return self.lending(places)

    @contextlib.contextmanager
    def lending(
        self, places: list[tuple[torch.nn.Module, str]], reuse: bool = False
    ) -> Iterator[dict[int, torch.Tensor]]:
        """``lent_buffers`` over known ``(module, name)`` places (no walk).

        ``reuse=True`` lends the saved copy itself (no clone) wherever the user's
        buffer was not written since the capture, and makes it again afterwards if
        the block wrote it: torch counts every in-place write, except writes through
        ``.data``. So only the check's own trace and replay reuse, and only for a
        model captured in eval mode (where a forward that writes buffers at all is
        rare); every other lending, and any diagnosis, gets fresh copies.
        """
        originals, values, versions = self.originals, self.buffer_values, self.versions
        swapped: list[tuple[dict[str, torch.Tensor | None], str, torch.Tensor]] = []
        lent = LentBuffers()
        copies: dict[int, torch.Tensor] = {}  # a buffer shared by two modules stays shared
        reused: list[int] = []
        if originals:
            with torch.no_grad():
                for module, name in places:
                    store = buffers_of(module)
                    original = store.get(name)
                    key = id(original)
                    if original is None or key not in originals:  # captured buffers are kept alive: ids are theirs
                        continue
                    copy = copies.get(key)
                    if copy is None:
                        if reuse and key in versions and write_count(original) == versions[key]:
                            copy = values[key]
                            reused.append(key)
                        else:
                            copy = values[key].clone()
                        copies[key] = copy
                        lent[id(copy)] = original
                    store[name] = copy
                    lent.by_place[(id(module), name)] = original
                    swapped.append((store, name, original))
        try:
            yield lent
        finally:
            self._give_back(swapped, reused)

    @cleanup
    def _give_back(self, swapped: list[tuple[dict[str, torch.Tensor | None], str, torch.Tensor]], reused: list[int]) -> None:
        """The end of ``lending``: the user's buffers back in place (a time limit waits for it)."""
        for store, name, original in swapped:
            store[name] = original
        for key in reused:
            self._settle(key)


def buffer_places(root: torch.nn.Module, lent: dict[int, torch.Tensor] | None = None) -> list[tuple[torch.nn.Module, str]]:
    """Every ``(module, name)`` holding a buffer under ``root``; buffers of ``root``
    that are lent copies (``lent``: ``{id(copy): original}``) are pointed back at the
    originals on the way (one walk for both)."""
    places = []
    for module in modules_of(root):
        store = buffers_of(module)
        if not store:
            continue
        for name, buffer in store.items():
            if buffer is None:
                continue
            if lent:
                original = lent.get(id(buffer))
                if original is not None:
                    store[name] = original
            places.append((module, name))
    return places


class LentBuffers(dict[int, torch.Tensor]):
    """What ``ModelState.lending`` yields: ``{id(copy): the user's buffer}``, and in
    ``by_place`` the user's buffer each ``(id(module), name)`` was lent a copy of, so a
    place the run rebound (``self.table = torch.ones(...)`` in a leaf's forward) still
    says whose buffer it stands for."""

    def __init__(self) -> None:
        super().__init__()
        self.by_place: dict[tuple[int, str], torch.Tensor] = {}


def lent_values(
    places: list[tuple[torch.nn.Module, str]], lent: dict[int, torch.Tensor]
) -> dict[int, torch.Tensor]:
    """Inside a ``lending`` block: ``{id(the user's buffer): the tensor in its place now}``
    for each place that was lent a copy -- what a run left in the buffers it was lent,
    the copy written in place or the tensor the run rebound the place to. Of a buffer
    held at two places, the place the run rebound wins over the untouched copy."""
    found: dict[int, torch.Tensor] = {}
    if not lent:  # nothing was lent: no place to look at
        return found
    by_place = lent.by_place if isinstance(lent, LentBuffers) else {}
    for module, name in places:
        now = buffers_of(module).get(name)
        if now is None:
            continue
        original = lent.get(id(now))
        if original is None:  # not a lent copy: rebound by the run, if the place was lent one
            original = by_place.get((id(module), name))
            if original is None:
                continue
        elif id(original) in found:  # the copy itself: a rebinding seen at another place stays
            continue
        found[id(original)] = now
    return found


def lend(
    state: ModelState | None,
    where: torch.nn.Module | list[tuple[torch.nn.Module, str]] | None,
    *,
    reuse: bool = False,
) -> contextlib.AbstractContextManager[dict[int, torch.Tensor]]:
    """For the block, the buffers ``state`` captured under ``where`` lent: a module's
    (found by a walk, ``ModelState.lent_buffers``) or those ``(module, name)`` places (no
    walk, ``ModelState.lending``). ``reuse``: the check's own capture and replay, which
    lend the saved copies themselves for a model captured in eval mode (``lending``'s
    ``reuse``). Yields ``{id(copy): original}``; lends nothing (yields ``{}``) without a
    state (a call recorded without one), a buffer captured or a place.

    Example::

        with lend(call.state, captured.buffer_places, reuse=True) as lent:
            output = graph_module(*args)
            after = lent_values(captured.buffer_places, lent)
    """
    if state is None or where is None or not state.originals:
        return contextlib.nullcontext({})
    if isinstance(where, list):
        return state.lending(where, reuse=reuse and not state.training) if where else contextlib.nullcontext({})
    return state.lent_buffers(where)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
    except RuntimeError:  # tensors torch cannot compare (devices): taken as changed
        return False


def return_buffers(root: torch.nn.Module, lent: dict[int, torch.Tensor]) -> None:
    """Point buffers of ``root`` that are lent copies back at the originals."""
    if lent:
        buffer_places(root, lent)


def named_modules(root: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """``{path: module}`` of ``root`` in pre-order, each module once, as torch's
    ``named_modules`` lists them (a hand-written walk saved 0.13 % of a localization,
    raft_small 114.59 vs 114.74 M instructions: not kept)."""
    return dict(torch.nn.Module.named_modules(root))
