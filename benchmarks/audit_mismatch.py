"""Every `mismatch` zoo mode reports, replayed with plain torch: is the difference real?

For each model of a registry (timm with its notrace leaves, as ``--fx-zoo=timm
--fx-zoo-notrace``; torchvision), the zoo's own engine entry (``zoo.registries.run_case``)
checks it with each backend asked for. For every ``mismatch`` it reports, the same model
(built from the same seed, on the same inputs) is replayed with plain torch only:

* fx: ``torch.fx.Tracer`` with the same leaf modules, autowrapped functions and
  ``param_shapes_constant``, ``torch.fx.GraphModule(model, graph)``;
* export: ``torch.export.export(model, args, kwargs, strict=...)`` and ``ep.module()``;

set to the parameters and buffers the model had before the capture, and called twice
beside an eager copy of the model (each call on fresh copies of the inputs, under the same
seed). The mismatch is confirmed when an output of either call, or a buffer or parameter
after them, differs (``torch.testing.assert_close``'s default tolerances, or the tolerances
the check used). It prints the figures and the unconfirmed mismatches by name.

    nice python benchmarks/audit_mismatch.py --source torchvision
    nice python benchmarks/audit_mismatch.py --source timm --every 10
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
import warnings
from collections.abc import Iterator
from typing import Any

import torch
import torch.fx

from pytest_fxtrace.options import TraceOptions, resolve_options
from pytest_fxtrace.types import Status
from pytest_fxtrace.zoo.registries import build_case, load_registry, registry_options, run_case
from pytest_fxtrace.zoo.seeding import name_seed, seeded

CALLS = 2  # a lost update shows on the call after it, or in the state it leaves


def plain_fx(model: torch.nn.Module, options: TraceOptions) -> torch.nn.Module:
    leaves = tuple(c for c in options.leaf_modules if isinstance(c, type))

    class Tracer(torch.fx.Tracer):
        def is_leaf_module(self, m: torch.nn.Module, qualname: str) -> bool:
            return isinstance(m, leaves) or super().is_leaf_module(m, qualname)

    kwargs: dict[str, Any] = {"param_shapes_constant": bool(options.param_shapes_constant)}
    if options.autowrap_functions:
        kwargs["autowrap_functions"] = tuple(options.autowrap_functions)
    return torch.fx.GraphModule(model, Tracer(**kwargs).trace(model))


def plain_export(model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], strict: bool) -> torch.nn.Module:
    return torch.export.export(model, args, kwargs, strict=strict).module()


def copies(tree: Any) -> Any:
    from torch.utils._pytree import tree_map

    return tree_map(lambda v: v.clone() if isinstance(v, torch.Tensor) else v, tree)


def state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    found = dict(module.named_parameters())
    found.update(module.named_buffers())
    return found


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def differs(actual: Any, expected: Any, options: TraceOptions) -> str | None:
    try:
        torch.testing.assert_close(actual, expected, rtol=options.rtol, atol=options.atol, equal_nan=True)
    except AssertionError as exc:
        return str(exc).strip().splitlines()[0]
    except (TypeError, ValueError):  # an output assert_close does not know: compared as Python values
        try:
            return None if actual == expected else f"{type(actual).__name__} differs"
        except Exception:
            return None
    return None


def replay(registry: Any, name: str, backend: str, options: TraceOptions) -> str | None:
    """How plain torch's capture of ``name`` differs from eager (None: it does not);
    raises where plain torch cannot capture or run it."""
    with seeded(name_seed(name, "build")):
        case = build_case(registry, name)
    eager_model = case.model
    with seeded(name_seed(name, "build")):
        model = build_case(registry, name).model
    before = {key: value.detach().clone() for key, value in state(model).items()}
    with torch.no_grad(), quiet():
        if backend == "fx":
            captured = plain_fx(model, options)
        else:
            captured = plain_export(model, copies(case.args), copies(case.kwargs), strict=backend == "export-strict")
        held = state(captured)
        for key, value in before.items():  # the state before the capture (a trace runs forward's Python)
            if key in held and held[key].shape == value.shape:
                held[key].data.copy_(value)
        for call in range(CALLS):
            with seeded(name_seed(name, "check")):
                expected = eager_model(*copies(case.args), **copies(case.kwargs))
            with seeded(name_seed(name, "check")):
                actual = captured(*copies(case.args), **copies(case.kwargs))
            found = differs(actual, expected, options)
            if found:
                return f"output of call {call + 1}: {found}"
    held = state(captured)
    for key, value in state(eager_model).items():
        if key not in held:
            if not torch.equal(value, before[key]):
                return f"{key}: eager updates it, the capture holds none"
            continue
        found = differs(held[key].detach(), value.detach(), options)
        if found:
            return f"{key} after {CALLS} calls: {found}"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", choices=("timm", "torchvision"), default="torchvision")
    parser.add_argument("--backend", action="append", choices=("fx", "export", "export-strict"))
    parser.add_argument("--every", type=int, default=1, help="every Nth model of the registry (a sample)")
    parser.add_argument("--start", type=int, default=0, help="the sample's first model (index in the registry)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per check")
    parser.add_argument("-k", dest="only", default="", help="models whose name contains this")
    args = parser.parse_args()
    backends = args.backend or ["fx", "export"]
    torch.set_num_threads(1)
    registry = load_registry(args.source, notrace=args.source == "timm")
    names = [n for n in registry.names()[args.start :: args.every] if args.only in n]
    counts = {b: {"checked": 0, "mismatch": 0, "confirmed": 0} for b in backends}
    unconfirmed: list[str] = []
    start = time.perf_counter()
    for index, name in enumerate(names, 1):
        for backend in backends:
            options = resolve_options(
                ("audit", {**registry_options(registry, name), "backend": (backend,), "timeout": args.timeout})
            )
            with quiet():
                report = run_case(registry, args.source, name, options)
            counts[backend]["checked"] += 1
            print(f"[{index}/{len(names)}] {name} {backend}: {report.status}", flush=True)
            if report.status is not Status.MISMATCH:
                continue
            counts[backend]["mismatch"] += 1
            try:
                found = replay(registry, name, backend, options)
            except Exception as exc:  # plain torch cannot capture or run what the plugin did
                found = None
                why = f"plain torch raised {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            else:
                why = "plain torch's capture matches eager"
            if found:
                counts[backend]["confirmed"] += 1
                print(f"    confirmed: {found}")
            else:
                first = report.message.splitlines()[0]
                unconfirmed.append(f"{name} ({backend}): {why}; the plugin said: {first[:300]}")
                print(f"    UNCONFIRMED: {why}")
    print(f"\n{args.source}, every {args.every}: {len(names)} models, {time.perf_counter() - start:.0f} s")
    for backend, c in counts.items():
        share = f"{100 * c['confirmed'] / c['mismatch']:.0f} %" if c["mismatch"] else "-"
        print(f"  {backend}: {c['checked']} checked, {c['mismatch']} mismatches reported, {c['confirmed']} confirmed by plain torch ({share})")
    for line in unconfirmed:
        print(f"  unconfirmed: {line}")
    return 1 if unconfirmed else 0


if __name__ == "__main__":
    sys.exit(main())
