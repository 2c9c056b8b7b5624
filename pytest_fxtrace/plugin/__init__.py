"""pytest glue: options, the ``traceable`` marker, the ``fxtrace`` fixture.

Thin by intent: parse what the user wrote, call the engine, present its verdict.

Every pytest run in an environment with pytest-fxtrace installed loads this module,
an xdist controller and a project without a single model test included, so it imports
no torch: the engine (and with it torch, ~3 s) is imported by the first test that
needs it (a ``traceable`` marker, the ``fxtrace`` fixture) or an option that names
code to import, at collection; tests/test_startup.py holds that.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal

import pytest

from pytest_fxtrace._compat import torch_too_old
from pytest_fxtrace.backends.spec import DEFAULT_BACKEND, backend_names, get_spec
from pytest_fxtrace.leafnames import LeafNameCheck, names_a_class_path
from pytest_fxtrace.options import OptionError, TraceOptions, added_options, check_options, resolve_options
from pytest_fxtrace.plugin import baseline, hookspecs, isolate, journal, pytest_html, xdist, zoo
from pytest_fxtrace.plugin import session as _session
from pytest_fxtrace.plugin.items import (
    BASE_LAYERS,
    ITEM_OPTIONS,
    ITEM_REPORTS,
    Layer,
    engine_seams,
    record,
)
from pytest_fxtrace.plugin.snapshot_session import SnapshotSession
from pytest_fxtrace.report import document as fxdocument
from pytest_fxtrace.types import Status

if TYPE_CHECKING:
    import torch

    from pytest_fxtrace.compare import Difference, Tolerances
    from pytest_fxtrace.tracereport import TraceReport

MARKER = "traceable"
FIXTURE = "fxtrace"


IniType = Literal["string", "linelist", "bool"]
_INI: dict[str, tuple[str, IniType, str]] = {
    "fxtrace_tracer": ("tracer", "string", "torch.fx.Tracer subclass to trace with ('pkg.mod:Class')"),
    "fxtrace_leaf_modules": (
        "leaf_modules",
        "linelist",
        "module classes (dotted), class names or submodule paths to keep as leaves",
    ),
    "fxtrace_autowrap_functions": (
        "autowrap_functions",
        "linelist",
        "functions ('pkg.mod:func') recorded as calls instead of traced through",
    ),
    "fxtrace_rtol": ("rtol", "string", "relative tolerance (default: torch.testing's per dtype)"),
    "fxtrace_atol": ("atol", "string", "absolute tolerance (default: torch.testing's per dtype)"),
    "fxtrace_snapshot": ("snapshot", "bool", "hold generated code against golden files"),
    "fxtrace_timeout": (
        "timeout",
        "string",
        "seconds one check may take per recorded call (trace, replay, compare); default: no limit",
    ),
    "fxtrace_train": (
        "train",
        "bool",
        "train mode: each recorded call run forward and backward on eager and on the captured program, "
        "outputs, every parameter's gradient and buffer updates compared (fx, export, compile)",
    ),
    "fxtrace_backend": ("backend", "string", ""),  # its help names the backends found: _ini()
    "fxtrace_dynamic": (
        "dynamic",
        "string",
        "export and compile: which input dimensions are dynamic: auto (default: those that vary between "
        "the recorded calls), false (a program per input size), true (every dimension), or presets "
        "(export: batch, seq, spatial, e.g. 'batch,seq'), each dimension then judged at sizes no recorded "
        "call had",
    ),
}


def _backend_help() -> str:
    names = backend_names()
    return (
        f"what checks the models: {', '.join(get_spec(name).help or name for name in names)}, or several "
        f"separated by commas ({', '.join(names[:2])!r}): one check per backend"
    )


def _ini() -> dict[str, tuple[str, IniType, str]]:
    """The ini options: the core's, then those the backends add (``fxtrace_<name>``)."""
    table = dict(_INI, fxtrace_backend=("backend", "string", _backend_help()))
    table.update({option.ini: (name, "string", option.help) for name, option in added_options().items()})
    return table


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """A torch older than the floor stops the session here, with one error, before any
    conftest or test imports the engine (which would fail on torch.fx internals)."""
    problem = torch_too_old(fxdocument.loaded_torch_version() or fxdocument.installed_torch_version())
    if problem:
        raise pytest.UsageError(problem)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


@pytest.hookimpl(trylast=True)
def pytest_fxtrace_make_tracer(options: TraceOptions, config: pytest.Config) -> torch.fx.Tracer:
    from pytest_fxtrace.backends.fx.tracer import build_tracer

    return build_tracer(options)


@pytest.hookimpl(trylast=True)
def pytest_fxtrace_compare(
    actual: object,
    expected: object,
    rtol: float | None,
    atol: float | None,
    config: pytest.Config,
    defaults: Tolerances,
) -> Difference | bool:
    from pytest_fxtrace.compare import compare_outputs

    return compare_outputs(actual, expected, rtol=rtol, atol=atol, defaults=defaults) or True


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fxtrace", "torch.fx traceability (pytest-fxtrace)")
    group.addoption(
        "--fx-snapshot-update",
        action="store_true",
        default=False,
        help="create or update the golden files of the generated FX code",
    )
    group.addoption(
        "--fx-snapshot-keep-orphans",
        action="store_true",
        default=False,
        help="with --fx-snapshot-update: keep snapshot files no test uses (default: delete them)",
    )
    group.addoption(
        "--fx-report",
        metavar="PATH",
        default=None,
        help="write a JSON report of every traceability check to PATH",
    )
    group.addoption(
        "--fx-patch-dir",
        metavar="DIR",
        default=None,
        help="write each verified patch (a unified diff of the file that holds the failing statement, "
        "paths relative to its import root: patch -p1 from there) to DIR, one .patch per finding",
    )
    group.addoption(
        "--fx-html",
        metavar="PATH",
        default=None,
        help="write a self-contained HTML report (module trees, fixes) to PATH (ini fxtrace_html)",
    )
    group.addoption("--fx-tracer", metavar="PKG.MOD:CLASS", default=None, help=_INI["fxtrace_tracer"][2])
    group.addoption("--fx-rtol", metavar="FLOAT", default=None, help=_INI["fxtrace_rtol"][2])
    group.addoption("--fx-atol", metavar="FLOAT", default=None, help=_INI["fxtrace_atol"][2])
    group.addoption("--fx-timeout", metavar="SECONDS", default=None, help=_INI["fxtrace_timeout"][2])
    group.addoption("--fx-backend", metavar="NAME[,NAME]", default=None, help=_backend_help())
    group.addoption("--fx-train", action="store_const", const=True, default=None, help=_INI["fxtrace_train"][2])
    group.addoption("--fx-dynamic", metavar="auto|false|true|batch,seq,spatial", default=None, help=_INI["fxtrace_dynamic"][2])
    for option in added_options().values():  # each backend's own (compile: --fx-max-graph-breaks, ...)
        group.addoption(option.flag, metavar=option.metavar, default=None, help=option.help)
    for name, (_, kind, help_text) in _ini().items():
        default: Any = False if kind == "bool" else ([] if kind == "linelist" else "")
        parser.addini(name, help_text, type=kind, default=default)
    zoo.addoption(parser)
    isolate.addoption(parser)
    journal.addoption(parser)
    baseline.addoption(parser)
    parser.addini(
        "fxtrace_html",
        "write a self-contained HTML report to this path (relative to the ini file), as --fx-html",
        default="",
    )
    parser.addini(
        "fxtrace_snapshot_dir",
        "name of the golden-file directory next to each test module",
        default="fx_snapshots",
    )


def _base_layers(config: pytest.Config) -> list[Layer]:
    layers: list[Layer] = []
    for name, (option, kind, _) in _ini().items():
        value = config.getini(name)
        if kind == "bool" or value not in ("", [], None):
            layers.append((f"ini {name}", {option: value}))  # an error names the ini line
    cli = {
        option: value
        for option, value in (
            ("tracer", config.getoption("fx_tracer")),
            ("rtol", config.getoption("fx_rtol")),
            ("atol", config.getoption("fx_atol")),
            ("timeout", config.getoption("fx_timeout")),
            ("backend", config.getoption("fx_backend")),
            ("dynamic", config.getoption("fx_dynamic")),
            ("train", config.getoption("fx_train")),
            *((name, config.getoption(option.flag[2:].replace("-", "_"))) for name, option in added_options().items()),
        )
        if value is not None
    }
    layers.append(("command line", cli))
    try:
        check_options(*layers)  # no imports yet: see pytest_collection_modifyitems
    except OptionError as exc:
        raise pytest.UsageError(f"pytest-fxtrace: {exc}") from None
    return layers


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(**options): check that every model the test calls stays torch.fx "
        "traceable (or torch.export-able: backend='export') and that the captured graph computes "
        "the same outputs (pytest-fxtrace)",
    )
    config.stash[BASE_LAYERS] = _base_layers(config)
    session = _session.register(config)  # summary, --fx-report, junit properties, annotations
    xdist.register(config, session)  # on xdist's controller: the workers' records merged
    journal.register(config, session)  # --fx-journal: each finished test's records on disk; --fx-resume
    pytest_html.register(config, session)  # with pytest-html's --html: a column linking each check
    SnapshotSession.install(config)  # golden files: hold, update, orphans, xdist merge
    zoo.register(config)  # --fx-zoo: one item per registry model
    isolate.register(config)  # --fx-isolate: zoo checks in child processes
    baseline.register(config)  # --fx-baseline: known failures xfail, the file's update


def _marker_layers(item: pytest.Item) -> list[Layer]:
    layers: list[Layer] = []
    for marker in reversed(list(item.iter_markers(MARKER))):  # farthest first, closest wins
        if marker.args:
            raise OptionError(
                f"@pytest.mark.{MARKER} takes keyword options only, got positional {marker.args!r}"
            )
        layers.append((f"@pytest.mark.{MARKER}", marker.kwargs))
    return layers


def options_for(item: pytest.Item, *extra: Layer) -> TraceOptions:
    return resolve_options(*item.config.stash[BASE_LAYERS], *_marker_layers(item), *extra)


def _checks_models(item: pytest.Item) -> bool:
    return item.get_closest_marker(MARKER) is not None or FIXTURE in getattr(item, "fixturenames", ())


def _names_code(layers: list[Layer]) -> bool:
    """Whether the ini file or command line names code to import: a tracer, autowrap
    functions or modules, a leaf class by its dotted path."""
    for _, layer in layers:
        if layer.get("tracer") or layer.get("autowrap_functions") or layer.get("autowrap_modules"):
            return True
        leaves = layer.get("leaf_modules") or ()
        if any(names_a_class_path(spec) for spec in ([leaves] if isinstance(leaves, str) else leaves)):
            return True
    return False


def pytest_collection_finish(session: pytest.Session) -> None:
    """Resolve every option now that test modules (and their models) are imported and
    the selection is final (``-k``, ``-m``, ``--deselect``, ``--lf``): the ini file's and
    command line's once, then each selected marked test's own. Every selected test's
    option errors are reported together, as one usage error naming each test; a
    deselected test's are not (it does not run). Skipped (no torch, no user code
    imported) when no selected test checks a model and no option names code; an xdist
    controller collects nothing and never gets here."""
    config, items = session.config, session.items
    base = config.stash[BASE_LAYERS]
    if not _names_code(base) and not any(_checks_models(item) for item in items):
        return
    leaf_names = LeafNameCheck()
    try:
        resolve_options(*base)  # imports the tracer and functions the ini / command line name
        leaf_names.check(base, bare_names=False)
    except OptionError as exc:
        raise _session.usage_error(config, f"pytest-fxtrace: {exc}") from None
    errors = []
    for item in items:
        if item.get_closest_marker(MARKER) is None:
            continue
        try:
            item.stash[ITEM_OPTIONS] = options_for(item)
            leaf_names.check(_marker_layers(item))
        except OptionError as exc:
            errors.append(f"{item.nodeid}: {exc}")
    if errors:
        raise _session.usage_error(config, "\n".join(errors)) from None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    if item.get_closest_marker(MARKER) is None:
        return (yield)
    from pytest_fxtrace.capture import recording
    from pytest_fxtrace.entry import TestChecks

    options = item.stash[ITEM_OPTIONS] if ITEM_OPTIONS in item.stash else options_for(item)
    checks = TestChecks(options, engine_seams(item))
    with recording(checks.observer_for, checks.internal_error):
        result = yield  # the test body's own failure propagates untouched
    reports = checks.finish()
    if checks.usage_errors:
        pytest.fail(f"pytest-fxtrace: {checks.usage_errors[0]}", pytrace=False)
    if not reports and item.stash.get(ITEM_REPORTS, []):
        return result  # the test checked its models through the fxtrace fixture
    if not reports:
        _nothing_checked(item, options)
    record(item, reports, options)
    return result


def _nothing_checked(item: pytest.Item, options: TraceOptions) -> None:
    """Fail a marked test that called no module; its record (``"model": null``) reaches
    the JSON report, junit and the summary like any other check's."""
    from pytest_fxtrace.tracereport import TraceReport

    report = TraceReport(
        ok=False,
        status=Status.NOTHING_CHECKED,
        model=None,
        message="nothing to check: this @pytest.mark.traceable test called no nn.Module; "
        "call the model in the test, or use the fxtrace fixture",
        options=options,
        backend=options.backend[0] if options.backend else DEFAULT_BACKEND,
    )
    item.stash.setdefault(ITEM_REPORTS, []).append(report)
    item.ihook.pytest_fxtrace_check_finished(item=item, report=report)
    pytest.fail(report.message, pytrace=False)


def pytest_runtest_teardown(item: pytest.Item) -> None:
    # the reports hold GraphModules (and their tensors): an item lives as long as the session
    item.stash[ITEM_REPORTS] = []


class FxTrace:
    """The ``fxtrace`` fixture: ``fxtrace(model, *args, **kwargs)`` or
    ``fxtrace.check(model, args=(), kwargs=None, **options)``.

    Example::

        def test_resnet(fxtrace):
            report = fxtrace(resnet18(), torch.randn(1, 3, 64, 64))
            assert report.nodes > 50
    """

    def __init__(self, item: pytest.Item) -> None:
        self._item = item

    def __call__(self, model: torch.nn.Module, *args: object, **kwargs: object) -> TraceReport | tuple[TraceReport, ...]:
        return self._run(model, args, kwargs, {})

    def check(
        self, model: torch.nn.Module, args: object = (), kwargs: Mapping[str, object] | None = None, **options: object
    ) -> TraceReport | tuple[TraceReport, ...]:
        """The report; with several backends (``backend=("fx", "export")``) a tuple of
        reports, one per backend."""
        return self._run(model, args, kwargs, options)

    def _run(
        self, model: torch.nn.Module, args: object, kwargs: Mapping[str, object] | None, options: Mapping[str, object]
    ) -> TraceReport | tuple[TraceReport, ...]:
        __tracebackhide__ = True
        from pytest_fxtrace.entry import check_model_backends
        from pytest_fxtrace.inputs import NotAModule
        from pytest_fxtrace.tracereport import internal_error_report

        resolved = None
        try:
            resolved = options_for(self._item, ("fxtrace.check()", options))
            reports = check_model_backends(model, args, kwargs, resolved, engine_seams(self._item))
        except (OptionError, NotAModule) as exc:
            misuse: str | None = f"pytest-fxtrace: {exc}"
        except Exception as exc:  # the model's faults are statuses: this one is pytest-fxtrace's
            reports, misuse = [internal_error_report(model, exc, resolved)], None
        else:
            misuse = None
        if misuse is not None:  # failed outside the except block: no "During handling of..." chain
            pytest.fail(misuse, pytrace=False)
        records = record(self._item, reports, resolved or TraceOptions())
        return records[0] if len(records) == 1 else tuple(records)


@pytest.fixture
def fxtrace(request: pytest.FixtureRequest) -> FxTrace:
    """Check a model's traceability explicitly; see ``FxTrace``."""
    return FxTrace(request.node)
