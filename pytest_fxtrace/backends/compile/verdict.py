"""A compile check's verdict on what Dynamo did: graph-break sites and recompiles against
the budget (``max_graph_breaks``, ``max_recompiles``), a model Dynamo captured nothing of,
and what each says to the user (the first site, then every site deepest first; the change
in code that removes it).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Sequence

import torch

from pytest_fxtrace.backends.compile.breaks import deepest_first
from pytest_fxtrace.backends.compile.options import CompileOptions
from pytest_fxtrace.locate import is_user_file, statement_in
from pytest_fxtrace.options import TraceOptions
from pytest_fxtrace.paths import shown_path
from pytest_fxtrace.types import Category, Diagnosis, GraphBreak, Location, Recompile

# the change in code that removes a break or a recompile of each category
COMPILE_FIXES = {
    Category.CONTROL_FLOW: (
        "compute both sides and pick with torch.where(cond, a, b), or express the branch with "
        "torch.cond(pred, true_fn, false_fn, operands)"
    ),
    Category.DATA_DEPENDENT: (
        "keep the value a tensor (no .item() / .tolist() in forward), or let Dynamo capture it: "
        "torch._dynamo.config.capture_scalar_outputs = True"
    ),
    Category.TYPE_CONVERSION: (
        "keep the value a tensor instead of int(t) / float(t) / bool(t), or let Dynamo capture it: "
        "torch._dynamo.config.capture_scalar_outputs = True"
    ),
    Category.UNSUPPORTED: (
        "move the call (print, logging, a C extension) out of forward, or wrap the function that "
        "makes it in torch.compiler.disable (a known break instead of an unknown one)"
    ),
    Category.SPECIALIZATION: (
        "pass the value that changes as a tensor, or mark the dimension dynamic "
        "(torch._dynamo.mark_dynamic(x, 0)); an int attribute of a module: "
        "torch._dynamo.config.allow_unspec_int_on_nn_module = True"
    ),
}

# a branch on a size (``if x.shape[0] > 3``) makes the size constant again each time it is
# taken, so marking it dynamic cannot help; torch.cond keeps the predicate symbolic
SIZE_BRANCH_FIX = (
    "express the branch with torch.cond(pred, true_fn, false_fn, operands) (pred: the comparison of "
    "the size), which compiles both sides with the size kept dynamic"
)
_BRANCH = re.compile(r"\s*(?:(?:el)?if|while)\b|.*\bif\b.+\belse\b")

# Dynamo's fake tensors have no quantized kernels: no option or decorator makes it trace them
QUANTIZED_FIX = (
    "compile the float model (torch.compile does not trace eager-mode quantized tensors, "
    "torch.ao.quantization's convert), or quantize with PT2E (torch.export, then "
    "torch.ao.quantization.quantize_pt2e's prepare_pt2e / convert_pt2e), whose models compile"
)


def quantized_modules(model: torch.nn.Module) -> list[str]:
    """The model's eager-mode quantized submodules (``torch.ao.nn.quantized`` and its kin,
    what ``torch.ao.quantization.convert`` puts in), as ``path (Class)``."""
    return [
        f"{path or 'the model'} ({type(module).__name__})"
        for path, module in model.named_modules()
        if type(module).__module__.startswith("torch.ao.nn.") and ".quantized" in type(module).__module__
        and not type(module).__name__.endswith("PackedParams")  # a quantized Linear's weights
    ]


def _listed(names: Sequence[str], limit: int = 3) -> str:
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


_LET_DYNAMO = ", or let Dynamo capture it: "


def code_fix_after(category: Category | None, applied: str) -> str | None:
    """The change in code for a site of ``category`` that the fix ``applied`` left: its
    category's, less the Dynamo option that fix already sets."""
    text = COMPILE_FIXES.get(category) if category is not None else None
    if text is not None and _LET_DYNAMO in text and text.partition(_LET_DYNAMO)[2] in applied:
        return text.partition(_LET_DYNAMO)[0]
    return text


def site_line(site: GraphBreak) -> str:
    """One site, as the list of sites shows it."""
    where = f"`{site.location.source}` at {site.location}" if site.location is not None else "(no line of yours)"
    module = f"{site.module} ({site.module_type})" if site.module else "forward"
    kind = f"{site.type} [{site.id}]" if site.type and site.id else site.type or "graph break"
    eager = "; Dynamo runs the rest of that function eagerly" if site.eager else ""
    return f"{module}: {where}: {site.category}, {kind}: {site.reason}{eager}"


def snapshot_text(graphs: Sequence[torch.fx.GraphModule], sites: Sequence[GraphBreak]) -> str:
    """What a compile snapshot holds: each graph Dynamo captured, in order, then each break
    site as a comment -- its submodule, statement, file, category and torch's type and id,
    without the line number, so code moved by an unrelated edit leaves the file as it was.

    Example::

        snapshot_text(session.graph_modules, tally.sites)
        # '# graph 1 of 2\ndef forward(self, L_x_ : torch.Tensor):\n...# graph breaks: 1 site\n#   ...'
    """
    parts = [f"# graph {n} of {len(graphs)}\n{gm.code.strip()}\n" for n, gm in enumerate(graphs, 1)]
    count = f"{len(sites)} site{'s' if len(sites) != 1 else ''}" if sites else "none"
    lines = [f"# graph breaks: {count}"]
    for site in sites:
        where = f"`{site.location.source}` in {site.location.path}" if site.location is not None else "(no line of yours)"
        kind = f"{site.type} [{site.id}]" if site.type and site.id else site.type or "graph break"
        lines.append(f"#   {site.module or 'forward'}: {where}: {site.category}, {kind}")
    return "\n".join([*parts, *lines]) + "\n"


def breaks_over_budget(sites: Sequence[GraphBreak], options: TraceOptions, quantized: Sequence[str] = ()) -> Diagnosis | None:
    """``untraceable`` when the distinct break sites exceed ``max_graph_breaks``: the
    category and place of the first site Dynamo met, and every site, deepest first.
    ``quantized``: the eager-mode quantized modules Dynamo failed on (``quantized_modules``)."""
    budget = CompileOptions.of(options).max_graph_breaks
    if len(sites) <= budget:
        return None
    first = sites[0]
    kind = f"{first.type} [{first.id}]" if first.type and first.id else first.type or "a graph break"
    count = f"{len(sites)} graph-break site{'s' if len(sites) != 1 else ''}"
    lines = [
        f"breaks the graph ({kind}): {first.reason}; {count}, max_graph_breaks={budget}",
        "  graph breaks (deepest first):",
        *(f"    {site_line(site)}" for site in deepest_first(sites)),
    ]
    if quantized:
        lines.append(f"  Dynamo cannot trace the quantized tensors of {_listed(quantized)}")
    fix = QUANTIZED_FIX if quantized else COMPILE_FIXES.get(Category(first.category))
    return Diagnosis(Category(first.category), "\n".join(lines), first.location, first.module, first.module_type, code_fix=fix)


def recompiles_over_budget(recompiles: Sequence[Recompile], options: TraceOptions, calls: int) -> Diagnosis | None:
    """``untraceable`` / ``specialization`` when the counted recompiles over ``calls``
    recorded calls exceed ``max_recompiles``."""
    counted = [item for item in recompiles if item.counted]
    budget = CompileOptions.of(options).max_recompiles
    if len(counted) <= budget:
        return None
    first = counted[0]
    count = f"{len(counted)} recompile{'s' if len(counted) != 1 else ''} over the {calls} recorded call{'s' if calls != 1 else ''}"
    lines = [
        f"recompiles: {first.reason}; {count}, max_recompiles={budget}",
        "  recompiles:",
        *(f"    {item.reason}" + (f" (guarded at {item.location})" if item.location else "") for item in recompiles),
    ]
    return Diagnosis(
        Category.SPECIALIZATION,
        "\n".join(lines),
        first.location,
        code_fix=recompile_code_fix(first),
    )


def recompile_code_fix(first: Recompile) -> str:
    """The change in code for a recompile: a size read by a branch (the guard's statement is
    an ``if``), ``torch.cond``; else the category's."""
    statement = first.location.source if first.location is not None else None
    if ".shape[" in first.reason and statement and _BRANCH.match(statement):
        return SIZE_BRANCH_FIX
    return COMPILE_FIXES[Category.SPECIALIZATION]


def captured_nothing(
    model: torch.nn.Module, sites: Sequence[GraphBreak], failed: str | None, quantized: Sequence[str] = ()
) -> Diagnosis:
    """Dynamo ran the whole forward eagerly: a finding, never a pass with no breaks. Where
    no site names a line of the user's, the ``def forward`` (and its decorators) is the place;
    ``quantized`` (``quantized_modules``), what it could not trace, in the user's words."""
    model_name = type(model).__name__
    skipped = next((site for site in sites if site.eager), None)
    why = f" ({failed.splitlines()[0][:200]})" if failed else ""
    if skipped is not None:
        why = f" after {site_line(skipped)}"
    reason = f"runs eagerly as a whole: Dynamo captured no graph of {model_name}{why}"
    category = Category(skipped.category) if skipped is not None else Category.UNSUPPORTED
    fix = COMPILE_FIXES.get(category) if skipped is not None else (
        "let Dynamo compile forward: remove torch.compiler.disable (torch._dynamo.disable) from it, "
        "or the rule that skips its file"
    )
    if quantized:  # torch's words ("Fake tensor propagation exception") say nothing of why
        reason = (
            f"runs eagerly as a whole: Dynamo captured no graph of {model_name}, since it cannot trace "
            f"the quantized tensors of its eager-mode quantized modules ({_listed(quantized)})"
        )
        fix = QUANTIZED_FIX
    return Diagnosis(
        category,
        reason,
        skipped.location if skipped is not None and skipped.location is not None else _forward_line(model),
        skipped.module if skipped is not None else "",
        skipped.module_type if skipped is not None else None,
        code_fix=fix,
    )


def _forward_line(model: torch.nn.Module) -> Location | None:
    code = getattr(inspect.unwrap(type(model).forward), "__code__", None)
    if code is None or not is_user_file(code.co_filename):
        return None
    return Location(shown_path(code.co_filename, imports=False), code.co_firstlineno, statement_in(code.co_filename, code.co_firstlineno))


__all__ = ["COMPILE_FIXES", "QUANTIZED_FIX", "SIZE_BRANCH_FIX", "recompile_code_fix", "breaks_over_budget", "captured_nothing", "recompiles_over_budget", "site_line", "snapshot_text"]
