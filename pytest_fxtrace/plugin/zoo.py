"""Zoo mode: one pytest item per model of a registry, checked with no test code.

``--fx-zoo=SOURCE`` names a registry: ``timm``, ``torchvision`` (classification,
segmentation, detection, video, optical flow, quantized), ``transformers`` or a user's
``pkg.module:attr``, an object with ``names()``, ``build(name)`` and
``example_inputs(name, model)`` (a tuple of positional inputs, or ``(args, kwargs)``)
and optionally ``options(name)`` (marker options for that model).

Each model becomes a ``ZooItem`` with node id ``zoo/<source>::<model>``
(``zoo/torchvision::resnet18``, ``zoo/timm::resnet50``), so ``-k resnet`` selects
and pytest-xdist / pytest-shard distribute them like any test. The item builds the
model with random weights (never a download) in eval mode, makes inputs from the
registry's own metadata, and runs the same check as a marked test
(``entry.check_model_backends``) with the ini / command line options: same records, JSON
report, summary, junit and xfail handling. A model that cannot be built or run
eagerly is ``model-error`` with why. ``--fx-isolate`` runs ``run_case`` in a child
process instead (``plugin/isolate.py``, ``zoo/child.py``).

Registries and input rules are pytest-free (``zoo/registries.py``: ``load_registry``,
``build_case``, ``run_case``); this module is the pytest side: ``ZooItem`` and ``ZooPlugin``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest

from pytest_fxtrace.options import OptionError, resolve_options
from pytest_fxtrace.plugin import isolate, progress
from pytest_fxtrace.plugin import items as _items
from pytest_fxtrace.zoo.registries import (  # noqa: F401  (the names zoo mode had before registries.py)
    BUILTIN,
    Case,
    TimmZoo,
    TorchvisionZoo,
    ZooError,
    build_case,
    build_error_report,
    load_registry,
    registry_aliases,
    registry_notes,
    registry_options,
    run_case,
    select,
    split_globs,
    unmatched_filters,
)
from pytest_fxtrace.zoo.threads import cpu_share

ZOO_DIR = "zoo"


def addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fxtrace")
    group.addoption(
        "--fx-zoo",
        metavar="SOURCE",
        action="append",
        default=[],
        help="check every model of a registry: timm, torchvision, or pkg.module:attr (repeatable)",
    )
    group.addoption(
        "--fx-zoo-filter",
        metavar="GLOB",
        action="append",
        default=[],
        help="zoo models to include (repeatable, or GLOB,GLOB)",
    )
    group.addoption(
        "--fx-zoo-exclude",
        metavar="GLOB",
        action="append",
        default=[],
        help="zoo models to leave out (repeatable, or GLOB,GLOB)",
    )
    group.addoption(
        "--fx-zoo-notrace",
        action="store_true",
        default=None,
        help="trace timm models with timm's notrace registry (leaf modules, autowrapped functions) as options",
    )
    progress.addoption(group, parser)
    parser.addini("fxtrace_zoo", "registries to check, one per line (see --fx-zoo)", type="linelist", default=[])
    parser.addini("fxtrace_zoo_filter", "zoo model globs to include, one per line", type="linelist", default=[])
    parser.addini("fxtrace_zoo_exclude", "zoo model globs to leave out, one per line", type="linelist", default=[])
    parser.addini("fxtrace_zoo_notrace", "see --fx-zoo-notrace", type="bool", default=False)


@dataclasses.dataclass(frozen=True)
class ZooConfig:
    sources: tuple[str, ...]
    filters: tuple[str, ...]
    excludes: tuple[str, ...]
    notrace: bool

    @classmethod
    def from_config(cls, config: pytest.Config) -> ZooConfig:
        def both(option: str, ini: str) -> tuple[str, ...]:
            cli = [v.strip() for v in config.getoption(option) or [] if v.strip()]
            return tuple(dict.fromkeys(cli or [v.strip() for v in config.getini(ini) if v.strip()]))

        notrace = config.getoption("fx_zoo_notrace")
        return cls(
            sources=both("fx_zoo", "fxtrace_zoo"),
            filters=split_globs(both("fx_zoo_filter", "fxtrace_zoo_filter")),
            excludes=split_globs(both("fx_zoo_exclude", "fxtrace_zoo_exclude")),
            notrace=bool(config.getini("fxtrace_zoo_notrace") if notrace is None else notrace),
        )


class _RootdirHooks:
    """Zoo nodes take the hooks of a test file in the rootdir: their path is a virtual folder
    that pytest never collects, so the conftest.py files it looks up for it were never
    loaded, and the rootdir's (and its parents') pytest_fxtrace_* hooks would never run."""

    session: pytest.Session
    config: pytest.Config

    @property
    def ihook(self) -> Any:
        return self.session.gethookproxy(self.config.rootpath)


class ZooCollector(_RootdirHooks, pytest.Collector):
    """``zoo/<source>``: the models of one registry."""

    def __init__(
        self, *, registry: Any, source: str, names: Sequence[str], unmatched: Sequence[str] = (), **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.registry = registry
        self.source = source
        self.model_names = list(names)
        # a line per --fx-zoo-filter that matches no model, then the registry's notes (once a session)
        self.unmatched = list(unmatched)

    def collect(self) -> list[pytest.Item]:
        for line in self.unmatched:  # in the warnings summary
            try:
                self.warn(pytest.PytestCollectionWarning(line))
            except pytest.PytestCollectionWarning:  # -W error: the line alone, not our frames
                raise self.CollectError(line) from None
        return [ZooItem.from_parent(self, name=name) for name in self.model_names]

    def reportinfo(self) -> tuple[Any, int | None, str]:
        source = self.parent.name if self.parent is not None else ""
        return self.path, None, f"{source}::{self.name}"  # the failure's heading


class ZooItem(_RootdirHooks, pytest.Item):
    """One model of a registry: build it, check it, record it as a marked test would."""

    parent: ZooCollector

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_marker("fxtrace_zoo")

    @property
    def source(self) -> str:
        return self.parent.source

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, f"{self.parent.name}::{self.name}"  # the failure's heading

    def runtest(self) -> None:
        config = self.config
        base: list[_items.Layer] = config.stash[_items.BASE_LAYERS]
        layers = list(base)
        try:
            extra = registry_options(self.parent.registry, self.name)
            options = resolve_options(*layers, (f"zoo {self.source} options", extra))
        except OptionError as exc:
            pytest.fail(f"pytest-fxtrace: {self.nodeid}: {exc}", pytrace=False)
        pool = isolate.pool_for(config)
        reports = []
        for backend in options.backend:  # one check per backend, the model built for each
            one = options.replace(backend=(backend,))
            if pool is not None:
                report = pool.run(
                    isolate.Job(
                        self.source,
                        self.name,
                        tuple(layers),
                        extra_notrace(config),
                        _verbosity(config),
                        module_tree=_items.module_trees(self),
                        backend=backend,
                    ),
                    one,
                )
            else:  # in this process: the check's share of the CPUs, as an isolated child has
                with cpu_share():
                    report = run_case(self.parent.registry, self.source, self.name, one, _items.engine_seams(self))
            reports.append(report)
        _items.record(self, reports, options)


def _verbosity(config: pytest.Config) -> int:
    return int(config.get_verbosity())


def extra_notrace(config: pytest.Config) -> bool:
    return ZooConfig.from_config(config).notrace


class ZooPlugin:
    """Adds the zoo's items to the collection, before ``-k``/``-m`` and sharding
    plugins select from it."""

    def __init__(self, config: pytest.Config, zoo: ZooConfig) -> None:
        self.config = config
        self.zoo = zoo

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
        for source in self.zoo.sources:
            try:
                registry = load_registry(source, notrace=self.zoo.notrace)
                every = list(registry.names())
            except OptionError as exc:
                from pytest_fxtrace.plugin import session as _session
                raise _session.usage_error(config, f"pytest-fxtrace: {exc}") from None
            label = source
            aliases = registry_aliases(registry)
            collector = ZooCollector.from_parent(
                session,
                name=f"{ZOO_DIR}/{label}",
                nodeid=f"{ZOO_DIR}/{label}",
                # a virtual file: snapshots of zoo models go to <rootdir>/zoo/fx_snapshots/
                path=config.rootpath / ZOO_DIR / label.replace(":", "."),
                registry=registry,
                source=source,
                names=select(every, self.zoo.filters, self.zoo.excludes, aliases),
                unmatched=unmatched_filters(source, every, self.zoo.filters, aliases)
                + registry_notes(registry, _backends(config)),
            )
            # through pytest's collection hooks, as a collected file would go, so the terminal
            # counts the models ("collected 121 items") and other plugins see the collector
            collector.ihook.pytest_collectstart(collector=collector)
            report = collector.ihook.pytest_make_collect_report(collector=collector)
            collector.ihook.pytest_collectreport(report=report)
            items.extend(report.result)


def _backends(config: pytest.Config) -> tuple[str, ...]:
    """The backends the ini / command line name, for a registry's notes; () when they do not
    resolve (each item reports that itself)."""
    try:
        return resolve_options(*config.stash[_items.BASE_LAYERS]).backend
    except (OptionError, KeyError):
        return ()


def register(config: pytest.Config) -> None:
    """Called from ``plugin.pytest_configure``; nothing happens without ``--fx-zoo``."""
    zoo = ZooConfig.from_config(config)
    config.addinivalue_line("markers", "fxtrace_zoo: a model of an --fx-zoo registry (pytest-fxtrace)")
    if not zoo.sources:
        return
    plugin = ZooPlugin(config, zoo)
    config.pluginmanager.register(plugin, "fxtrace-zoo")
    config.add_cleanup(lambda: config.pluginmanager.unregister(plugin))
    progress.register(config, zoo.sources, ZOO_DIR)  # a line now and then: done, failed, time left
