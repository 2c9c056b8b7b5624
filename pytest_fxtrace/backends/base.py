"""The backend interface: what captures a graph from a model and one recorded call, runs
it, gives its code for snapshots, and explains its failures.

The check (``check.py``) drives a backend and knows nothing else of how a graph is made:
it binds the recorded call, asks the backend to capture, runs the capture on every
recorded call and compares with the eager output, and turns what the backend explains
into a verdict. Reports, snapshots and the plugin read only the verdict. FX
(``backends/fx/``) and torch.export (``backends/export/``) implement it.

Adding a backend is one folder (or one package of a third party's) and one spec::

    # pytest_fxtrace/backends/mine/__init__.py -- light: the registry reads it at startup
    SPECS = (BackendSpec("mine", "pytest_fxtrace.backends.mine.backend:MyBackend",
                         help="mine (my compiler)", words=Words(able="compilable by mine", past="compiled"),
                         problem=my_problem, options=(BackendOption("mine_level", 1, my_resolver, "..."),)),)

    # pytest_fxtrace/backends/mine/backend.py
    from pytest_fxtrace.backends.base import Backend, CaptureFailed, Captured, CheckContext, Explanation, Recheck, Replay

    @dataclasses.dataclass
    class MyCaptured(Captured):  # what running and explaining my capture needs
        program: MyProgram

    class MyBackend(Backend[MyCaptured]):
        name = "mine"
        # self.seams: what the caller lends (the plugin's hooks; Seams)

        def capture(self, context: CheckContext) -> MyCaptured:
            # context.call: the recorded call (module, args, kwargs, output, state, rng)
            # context.bound: it bound to forward's signature (positional, var_kwargs, concrete)
            try:
                program = my_capture(context.call.module, context.bound)
            except Exception as exc:
                raise CaptureFailed(exc, functools.partial(my_diagnosis, exc)) from exc
            return MyCaptured(program.graph_module, training=context.call.training, program=program)

        def replay(self, captured: MyCaptured, context: CheckContext) -> Replay:
            return Replay(context.bound.call(captured.program))

        def explain_capture_failure(self, failure, context, recheck: Recheck) -> Explanation:
            # failure.diagnosis: category, the user's line, the module; recheck(options)
            # checks the same call again with other options: (passed, what happened)
            ...

A third party's package registers the same spec through the entry-point group
``pytest_fxtrace.backends`` (``mine = my_package:SPECS``; docs/backends.md). The spec
(``spec.py``) holds what the core asks without loading the backend: its name, whether this
environment can run it (``problem``), the options it adds, its snapshot title and its
words. ``backend="<name>"`` (marker, fixture, ini ``fxtrace_backend``, ``--fx-backend``)
then selects it. The methods with a default (``run``, ``words``, ``capture_key``,
``serves``, ``code``, ``still_holds``, ``findings``, ``explain_mismatch``,
``explain_buffer``, ``explain_run_failure``) are optional refinements;
``backends/export/backend.py`` is a second complete example. A backend receives everything
through its arguments (``CheckContext``, ``Captured``, a ``recheck`` callable): it never
holds or reaches into the checker, and returns plain data (``Captured``,
``types.Diagnosis``, ``types.Suggestion``).

This module knows no pytest and no particular backend.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import os
from collections.abc import Callable, Hashable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeAlias, TypeVar

from pytest_fxtrace.backends.spec import Words, get_spec
from pytest_fxtrace.dims import DimVerdict
from pytest_fxtrace.types import Category, Diagnosis, Divergence, GraphBreak, Recompile, Status, Suggestion

if TYPE_CHECKING:
    import torch

    from pytest_fxtrace.binding import BoundInputs
    from pytest_fxtrace.capture import CapturedCall
    from pytest_fxtrace.collection import GraphCollection
    from pytest_fxtrace.compare import Difference, Tolerance
    from pytest_fxtrace.options import TraceOptions

Comparator = Callable[..., "Difference | None"]
# check the recorded call again with other options, without explaining a failure:
# (passed, what happened) -- how every backend verifies a fix (``CheckContext.recheck``)
Recheck = Callable[["TraceOptions"], "tuple[bool, str]"]
# where a mismatching graph may be written: a folder, or what makes one (called only when
# there is something to write)
DumpDir: TypeAlias = "str | os.PathLike[str] | Callable[[], str | os.PathLike[str]]"


@dataclasses.dataclass(frozen=True)
class Seams:
    """What the caller of a check lends it: the plugin's hooks, and where its output goes.
    ``hooks``: a backend's own hooks by name, which only that backend asks for (the plugin
    lends FX its ``pytest_fxtrace_make_tracer`` hook as ``"make_tracer"``).

    Example::

        Seams(compare=my_compare, module_tree=True)
    """

    hooks: Mapping[str, Callable[..., Any]] = dataclasses.field(default_factory=dict)
    compare: Comparator | None = None  # (actual, expected, rtol=, atol=, defaults=) -> Difference | None; None: compare_outputs
    dump_dir: DumpDir | None = None  # where a mismatching graph may be written
    module_tree: bool = False  # reports get their per-module statuses (TraceReport.modules, the HTML page)

    def hook(self, name: str) -> Callable[..., Any] | None:
        """The caller's implementation of the backend hook ``name``; None: the backend's own."""
        return self.hooks.get(name)

    def comparator(self) -> Comparator:
        if self.compare is not None:
            return self.compare
        from pytest_fxtrace.compare import compare_outputs

        return compare_outputs


@dataclasses.dataclass(frozen=True)
class CheckContext:
    """Everything a backend may use about the call being checked."""

    call: CapturedCall  # the recorded call: module, inputs, eager output, state and RNG before it
    bound: BoundInputs  # the call bound to forward's signature
    options: TraceOptions
    compare: Comparator  # (actual, expected, rtol=, atol=) -> Difference | None, the backend's defaults bound
    dump_dir: DumpDir | None = None  # where a mismatching graph may be written
    # the call checked again with other options, nothing explained: how a fix is verified, on
    # any path (a capture that failed, a mismatch); None inside a verification
    recheck: Recheck | None = None


@dataclasses.dataclass
class Captured:
    """A captured graph: what the check reads of every backend's capture (its graph for
    the report and the snapshot, the mode it was captured in). Each backend subclasses it
    with what running and explaining its capture needs (``FxCaptured``,
    ``ExportCaptured``, ``CompileCaptured``), never as attributes of the GraphModule, and
    is a ``Backend[ItsCaptured]``: the type checker sees each backend's own fields."""

    graph_module: torch.fx.GraphModule
    training: bool  # the mode the call was captured in

    @property
    def nodes(self) -> int:
        return len(self.graph_module.graph.nodes)


CapturedT = TypeVar("CapturedT", bound=Captured)


class CaptureFailed(Exception):
    """Capturing raised. ``diagnosis`` is computed on first access: classifying and
    locating a failure reads source, which is not part of the capture's time."""

    def __init__(self, error: BaseException, diagnose: Callable[[], Diagnosis]) -> None:
        super().__init__(str(error))
        self.error = error
        self._diagnose = diagnose
        self._diagnosis: Diagnosis | None = None

    @property
    def diagnosis(self) -> Diagnosis:
        if self._diagnosis is None:
            self._diagnosis = self._diagnose()
        return self._diagnosis


def run_grad(options: TraceOptions) -> contextlib.AbstractContextManager[None]:
    """The autograd mode a backend runs its capture in: with grad in train mode
    (``train=True``: the run's backward is compared with eager's), else without (a replay
    builds no graph)."""
    import torch

    return torch.enable_grad() if options.train else torch.no_grad()


@dataclasses.dataclass(frozen=True)
class Replay:
    """A run of a captured graph: its output, and what it left in the model's buffers --
    ``{id(the user's buffer): the lent copy after the run}`` for each buffer the run was
    lent (``state.lent_values``), compared with eager's after-state by the check; None
    where the backend does not say (nothing is compared then)."""

    output: object  # the graph's output: a pytree of tensors, passed on to compare
    buffers: dict[int, torch.Tensor] | None = None
    # the parameters forward may write, as the run left them (``ModelState.parameter_changes``),
    # where the run was made before the replay asked for it (compile runs at its capture);
    # None: the check reads them after the replay
    parameters: dict[int, torch.Tensor] | None = None


@dataclasses.dataclass(frozen=True)
class Explanation:
    """Why a capture failed, beyond its diagnosis: which parts of the model capture
    (``collection.GraphCollection``, or None where the backend does not localize) and a
    fix, verified where possible."""

    collection: GraphCollection | None
    suggestion: Suggestion


@dataclasses.dataclass(frozen=True)
class MismatchExplanation:
    """Why a captured graph computes something else: a named cause, where the graph
    first diverges, and a dump of the graph."""

    diagnosis: Diagnosis | None = None
    divergence: Divergence | None = None
    dump_path: str | None = None


class Backend(abc.ABC, Generic[CapturedT]):
    """A way to capture a graph from a model. Subclasses set ``name`` (the id its
    ``BackendSpec`` is registered under), name their ``Captured`` type (``Backend[FxCaptured]``) and are
    built as ``Backend(seams)``."""

    name: ClassVar[str]
    # the default tolerance by dtype where the user sets none, for a backend whose runtime
    # computes floating values otherwise than torch (ONNX Runtime's fused kernels); {}: assert_close's
    tolerances: ClassVar[Mapping[torch.dtype, Tolerance]] = {}
    # whether its capture runs backward, for train=True (a runtime without autograd: False)
    trains: ClassVar[bool] = True
    # whether its capture runs the model's Python on proxies (torch.fx's symbolic tracing), so
    # that a patch may wrap a helper with torch.fx.wrap or let an isinstance test accept a Proxy
    proxies: ClassVar[bool] = False

    def __init__(self, seams: Seams | None = None) -> None:
        self.seams = seams if seams is not None else Seams()

    @abc.abstractmethod
    def capture(self, context: CheckContext) -> CapturedT:
        """The graph of ``context.call.module`` for this call; raises ``CaptureFailed``.
        The model is left as it was (parameters, buffers, attributes)."""

    @abc.abstractmethod
    def replay(self, captured: CapturedT, context: CheckContext) -> Replay:
        """A run of the captured graph on ``context.call``'s inputs (model state and RNG
        are already as before the call): its output, and the buffers as the run left them,
        so that an update the graph loses (a buffer eager writes and the graph does not) is
        found even where the output agrees (``Replay.buffers`` None: not said)."""

    @abc.abstractmethod
    def explain_capture_failure(self, failure: CaptureFailed, context: CheckContext, recheck: Recheck) -> Explanation:
        """Localize a failed capture and search a fix, verifying each with ``recheck``."""

    def run(self, captured: CapturedT, context: CheckContext) -> object:
        """The captured graph's output on ``context.call``'s inputs (``replay``'s)."""
        return self.replay(captured, context).output

    def words(self, options: TraceOptions) -> Words:
        """How the check's messages name this backend's capture (its spec's words)."""
        return get_spec(self.name).words

    def capture_key(self, context: CheckContext) -> Hashable:
        """Calls with equal keys (and training flags) share one capture."""
        return context.bound.key

    def serves(self, captured: CapturedT, context: CheckContext) -> bool:
        """Whether a capture made for an earlier call of this key can run this one (an
        exported program fixes sizes); False captures again."""
        return True

    def code(self, captured: CapturedT) -> str:
        """The graph's code, as a snapshot holds it."""
        return captured.graph_module.code

    def notes(self, captured: CapturedT) -> tuple[str, ...]:
        """What the user should know of a capture that passed: where it differs from what
        the plain torch API would do with the model (none by default)."""
        return ()

    def still_holds(self, captured: CapturedT, model: torch.nn.Module) -> bool:
        """Whether a graph captured earlier still computes with what ``model`` holds now
        (a test may rebind a submodule between calls); False captures again."""
        return True

    def artifact_failure(self, captured: CapturedT, context: CheckContext) -> tuple[Status, Diagnosis] | None:
        """The saved forms of the capture ``artifact=`` asks for (export's ``pt2``), run on
        this call after the capture itself matched eager: the first stage that fails, with its
        status (``untraceable``: no saved form; ``mismatch``: it runs otherwise); None: none
        asked, or each answers as eager did."""
        return None

    def findings(self, captured: CapturedT, context: CheckContext, sibling: CapturedT | None) -> Diagnosis | None:
        """A divergence certain right after capture (``sibling``: the same call
        captured in the other training mode, if any)."""
        return None

    def explain_mismatch(self, captured: CapturedT, context: CheckContext) -> MismatchExplanation:
        """Why the captured graph's output differs from eager on this call."""
        return MismatchExplanation()

    def explain_buffer(
        self, captured: CapturedT, context: CheckContext, module: torch.nn.Module, name: str
    ) -> Diagnosis | None:
        """Why the captured graph's run leaves ``module``'s buffer ``name`` other than eager
        (its output agreed); None: the check names the buffer and the statement itself."""
        return None

    def explain_run_failure(self, captured: CapturedT, context: CheckContext, error: BaseException) -> Diagnosis:
        """Why the captured graph raised on a call the eager model ran."""
        return Diagnosis(self.run_failure_category(error), "")

    def probe_dims(self, captured: CapturedT, context: CheckContext) -> tuple[DimVerdict, ...] | None:
        """A verdict for each dimension ``dynamic=`` asked for by name (``dims.py``), after the
        capture ran at sizes no recorded call had; None: none asked, or the backend does not
        judge dimensions."""
        return None

    def probe_dims_over_calls(self) -> tuple[DimVerdict, ...] | None:
        """A verdict for each dimension ``dynamic=`` asked for by name, once every recorded
        call ran, for a backend whose one compiled model serves them all (torch.compile: the
        sizes tried must not stand in for a recorded call's recompile); None: none asked, or
        judged per capture (``probe_dims``)."""
        return None

    def graph_breaks(self) -> tuple[GraphBreak, ...] | None:
        """Where the checked model's graph breaks, over every call checked so far, for the
        report (torch.compile); None: the backend does not split graphs."""
        return None

    def recompiles(self) -> tuple[Recompile, ...] | None:
        """The recompiles over the calls checked so far, for the report (torch.compile);
        None: the backend does not recompile."""
        return None

    def graphed_modules(self) -> frozenset[str] | None:
        """The paths of the model's modules whose code the calls ran inside the backend's
        graphs, for the module tree, where the captured graph does not hold them all
        (torch.compile's several graphs around its breaks); None: read from that graph."""
        return None

    def failed_over_calls(self) -> tuple[CaptureFailed, CheckContext] | None:
        """A capture failure judged over every recorded call rather than at one (compile's
        recompile budget), with the context of the last call: asked once the calls are done,
        where they all passed. None: none (the default)."""
        return None

    def capture_allowance(self, options: TraceOptions) -> tuple[float | None, float] | None:
        """(seconds left of the check's time limit, None without one; what one more capture of
        the model takes here), for a step that captures it again (a patch's trial), where the
        backend keeps its own clock (compile's first compile); None: the check measures both."""
        return None

    def one_statement_can_fix(self) -> bool:
        """Whether a rewrite of the failing statement alone could make the check pass (a
        patch's trial is worth its capture): False where the capture failed at several
        statements, each of which would need its own (compile's break sites). True by default."""
        return True

    def code_fix(self, category: Category) -> str | None:
        """The change in code a failure of ``category`` calls for, where nothing more
        particular was found (each backend words its own; this default knows the
        silent divergences every backend shares)."""
        from pytest_fxtrace.diagnose import DIVERGENCE_FIXES

        return DIVERGENCE_FIXES.get(category)

    def run_failure_category(self, error: BaseException) -> Category:
        """The category of a run failure, without explaining it (a fix being verified)."""
        return Category.OTHER


__all__ = [
    "Backend",
    "CaptureFailed",
    "Captured",
    "CapturedT",
    "CheckContext",
    "Comparator",
    "DumpDir",
    "Explanation",
    "MismatchExplanation",
    "Recheck",
    "Replay",
    "Seams",
    "Words",
    "run_grad",
]
