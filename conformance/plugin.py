"""kipcheck pytest plugin (entry point ``pytest11: kipcheck = conformance.plugin``).

Options
  --target SPEC            target to test (repeatable, comma lists allowed); default
                           ``reference``; env ``KIPCHECK_TARGETS`` (comma separated) when
                           no --target is given
  --kipcheck-results DIR   write result rows (results-<worker>.jsonl), target
                           descriptions (targets-<worker>.json) and session.json
  --no-differential        do not run differential scenarios on the reference
  --kipcheck-catalog DIR   requirement catalog directory (default: the packaged one)
  --kipcheck-deadline-scale F  multiply every test's deadline by F
  --kipcheck-deadline S    every test's deadline is S seconds (certify --test-timeout)

Marker ``deadline(seconds)``: the test's deadline (default conformance.deadlines); past
it the test fails with ``did not finish within N s`` and ``timed_out: true`` in its row.
Non-pass rows carry ``evidence`` (conformance/evidence.py); the controller writes
``run.json`` (conformance/run_status.py) at session finish.

Marker ``requirement(*ids)``: mandatory for tests under ``conformance/suites/``; ids
must be in the catalog. Both are collection errors. ``target_kinds(*kinds)`` restricts a
test to target kinds (others: skipped).

Fixtures: ``target`` (parametrized over the selected targets), ``reference``,
``capabilities``, ``unique``, ``differential``, ``kipcheck_targets`` (the pool).

Verdicts per test: pass | fail | not_supported | error | skipped. NotSupportedByTarget
raised in setup or in the test becomes ``not_supported`` (pytest shows a skip whose
reason starts with "not supported by target:"), never a pass.

Hook for other plugins/conftests: ``pytest_kipcheck_create_target(spec, config)``
(firstresult) may return a Target instance for a spec; default `create_target`.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
import secrets
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from targets.target import CLUSTER_KINDS, KINDS, NotSupportedByTarget, Target, TargetError, TargetSpec, parse_target_spec

from conformance import deadlines, evidence
from conformance.differential import Differential, UniqueIds, safe_name

NOT_SUPPORTED_PREFIX = "not supported by target: "
VERDICTS = ("pass", "fail", "not_supported", "error", "skipped")
DEFAULT_TARGET = "reference"
ENV_TARGETS = "KIPCHECK_TARGETS"
SUITES_PARTS = ("conformance", "suites")
# kinds whose NotSupportedByTarget at start (no Docker engine, optional package missing)
# skips their tests instead of failing them
SKIPPABLE_KINDS = ("testcontainers",)


# -- hook specification ------------------------------------------------------------------


class KipcheckHookSpecs:
    @pytest.hookspec(firstresult=True)
    def pytest_kipcheck_create_target(self, spec: TargetSpec, config: pytest.Config) -> Target | None:
        """Return a (not yet started) Target for spec, or None to use the default factory."""


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(KipcheckHookSpecs)


# -- options -------------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kipcheck", "kipcheck conformance suite")
    group.addoption(
        "--target",
        action="append",
        dest="kipcheck_targets",
        default=None,
        metavar="SPEC",
        help="target to run conformance tests against, e.g. reference, kafka-native:4.1.0, "
        "testcontainers:apache/kafka:3.9.0, external:HOST:PORT (repeatable; default: "
        f"${ENV_TARGETS} or 'reference')",
    )
    group.addoption(
        "--scoped-target",
        action="append",
        nargs=2,
        dest="kipcheck_scoped_targets",
        default=None,
        metavar=("SPEC", "PATHS"),
        help="also run SPEC, but only for tests under PATHS (comma-separated paths relative to the "
        "rootdir, e.g. conformance/suites/protocol,conformance/suites/kip98; a path written !PATH is "
        "left out, and PATHS of only such paths mean everything else); repeatable",
    )
    group.addoption(
        "--kipcheck-results",
        dest="kipcheck_results",
        default=None,
        metavar="DIR",
        help="write result rows (results-<worker>.jsonl) and target descriptions (targets-<worker>.json) to DIR",
    )
    group.addoption(
        "--no-differential",
        action="store_true",
        dest="kipcheck_no_differential",
        default=False,
        help="do not run differential scenarios on the reference target",
    )
    group.addoption(
        "--kipcheck-catalog",
        dest="kipcheck_catalog",
        default=None,
        metavar="DIR",
        help="requirement catalog directory (default: the packaged conformance/catalog)",
    )
    group.addoption(
        "--kipcheck-deadline-scale",
        dest="kipcheck_deadline_scale",
        type=float,
        default=1.0,
        metavar="FACTOR",
        help="multiply every test's deadline (marker or default) by FACTOR (default: 1)",
    )
    group.addoption(
        "--kipcheck-deadline",
        dest="kipcheck_deadline",
        type=float,
        default=None,
        metavar="SECONDS",
        help="give every test this deadline, whatever its marker says",
    )


def split_specs(text: str) -> list[str]:
    """Split a comma-separated spec list; pieces that do not start with a target kind
    continue the previous spec (``external:h1:9092,h2:9092``)."""
    out: list[str] = []
    for piece in text.split(","):
        piece = piece.strip()
        if not piece:
            continue
        kind = piece.split(":", 1)[0]
        if kind not in KINDS and out:
            out[-1] = f"{out[-1]},{piece}"
        else:
            out.append(piece)
    return out


def selected_specs(config: pytest.Config) -> list[TargetSpec]:
    raw: list[str] = []
    cli = config.getoption("kipcheck_targets")
    if cli:
        for value in cli:
            raw.extend(split_specs(value))
    elif os.environ.get(ENV_TARGETS, "").strip():
        raw.extend(split_specs(os.environ[ENV_TARGETS]))
    if not raw:
        raw = [DEFAULT_TARGET]
    raw.extend(text for text, _ in scoped_paths(config))
    specs: list[TargetSpec] = []
    seen: set[str] = set()
    for text in raw:
        try:
            spec = parse_target_spec(text)
        except ValueError as exc:
            raise pytest.UsageError(f"kipcheck: bad target spec: {exc}") from None
        if spec.raw not in seen:
            seen.add(spec.raw)
            specs.append(spec)
    return specs


@dataclass(frozen=True)
class Scope:
    """The tests a scoped target runs: those under an included path (every test when none
    is named) and under no excluded one."""

    included: tuple[Path, ...]
    excluded: tuple[Path, ...] = ()

    def covers(self, test_path: Path) -> bool:
        path = test_path.resolve()
        return (not self.included or _under(path, self.included)) and not _under(path, self.excluded)


def _under(path: Path, prefixes: tuple[Path, ...]) -> bool:
    return any(path == p or p in path.parents for p in prefixes)


def scoped_paths(config: pytest.Config) -> list[tuple[str, Scope]]:
    """``--scoped-target SPEC PATHS``: (spec text, scope) pairs; ``!PATH`` excludes."""
    root = Path(str(config.rootpath))
    out = []
    for text, paths in config.getoption("kipcheck_scoped_targets") or ():
        entries = [p.strip() for p in paths.split(",") if p.strip().lstrip("!")]
        if not entries:
            raise pytest.UsageError(f"kipcheck: --scoped-target {text} needs at least one path")
        included = tuple((root / p).resolve() for p in entries if not p.startswith("!"))
        excluded = tuple((root / p[1:].strip()).resolve() for p in entries if p.startswith("!"))
        out.append((text.strip(), Scope(included, excluded)))
    return out


def _in_scope(spec: TargetSpec, test_path: Path, scopes: dict[str, Scope]) -> bool:
    """A scoped target runs only the tests its scope covers; other targets run everything."""
    scope = scopes.get(spec.raw)
    return scope is None or scope.covers(test_path)


def worker_id(config: pytest.Config) -> str:
    workerinput = getattr(config, "workerinput", None)
    if workerinput:
        return str(workerinput.get("workerid", "main"))
    return "main"


def is_xdist_worker(config: pytest.Config) -> bool:
    return getattr(config, "workerinput", None) is not None


# -- target pool ----------------------------------------------------------------------------


def _stop_quietly(target: Target | None) -> None:
    if target is not None:
        try:
            target.stop()
        except Exception:  # noqa: BLE001
            pass


def _capabilities_row(target: Target) -> dict[str, Any]:
    try:
        return target.capabilities().to_dict()
    except Exception as exc:  # noqa: BLE001 - described, never raised
        return {"error": f"{type(exc).__name__}: {exc}"}


def _describe_entry(entry: "_PoolEntry") -> dict[str, Any]:
    row: dict[str, Any] = {"spec": entry.spec.raw, "kind": entry.spec.kind}
    if entry.target is not None:
        try:
            row["describe"] = entry.target.describe()
        except Exception as exc:  # noqa: BLE001
            row["describe"] = {"error": f"{type(exc).__name__}: {exc}"}
        at_start = entry.capabilities_at_start
        row["capabilities"] = at_start if at_start and "error" not in at_start else _capabilities_row(entry.target)
    row["start_error"] = None if entry.error is None else f"{type(entry.error).__name__}: {entry.error}"
    row["skip_reason"] = entry.skip_reason
    return row


@dataclass
class _PoolEntry:
    spec: TargetSpec
    target: Target | None = None
    error: BaseException | None = None
    skip_reason: str | None = None
    started_at: float | None = None
    # As probed right after start, before any test: tests may change a target (the KIP-1289
    # suite finalizes share.version=2 on the reference), and the statement names what the
    # target was certified as, not what one worker's copy ended at.
    capabilities_at_start: dict[str, Any] | None = None


class TargetPool:
    """Targets of one pytest process (one xdist worker): started lazily, once, stopped at
    session end. A start failure is remembered and fails every test that needs it."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._entries: dict[str, _PoolEntry] = {}
        self._retired: dict[str, dict[str, Any]] = {}
        self._lock = threading.RLock()

    def get(self, spec: TargetSpec | str) -> Target:
        if isinstance(spec, str):
            spec = parse_target_spec(spec)
        with self._lock:
            entry = self._entries.get(spec.raw)
            if entry is None:
                with deadlines.paused():  # starting a target is not the test's time
                    entry = self._entries[spec.raw] = self._start(spec)
        if entry.skip_reason is not None:
            pytest.skip(entry.skip_reason)
        if entry.error is not None:
            raise TargetError(f"target {spec.raw} failed to start: {type(entry.error).__name__}: {entry.error}") from entry.error
        assert entry.target is not None
        return entry.target

    def started(self, spec: TargetSpec) -> Target | None:
        entry = self._entries.get(spec.raw)
        return entry.target if entry is not None else None

    def reference_for(self, target: Target) -> Target:
        nodes = len(target.node_ids) if target.spec.nodes > 1 else 1
        return self.get(DEFAULT_TARGET if nodes == 1 else f"{DEFAULT_TARGET}:nodes={nodes}")

    def _start(self, spec: TargetSpec) -> _PoolEntry:
        entry = _PoolEntry(spec, started_at=time.time())
        target: Target | None = None
        try:
            target = self.config.hook.pytest_kipcheck_create_target(spec=spec, config=self.config)
            if target is None:
                from targets.factory import create_target

                target = create_target(spec)
            target.start()
            entry.target = target
            entry.capabilities_at_start = _capabilities_row(target)
        except NotSupportedByTarget as exc:
            if spec.kind in SKIPPABLE_KINDS:
                # testcontainers without a Docker engine (or without the optional extra):
                # an environment limitation, reported as a skip with the reason
                entry.skip_reason = f"{spec.kind} target {spec.raw} skipped: {exc.reason}"
            else:
                entry.error = exc
            _stop_quietly(target)
        except Exception as exc:  # noqa: BLE001 - remembered and raised in every test
            entry.error = exc
            _stop_quietly(target)
        return entry

    def entries(self) -> list[_PoolEntry]:
        return list(self._entries.values())

    def retire(self, spec: TargetSpec) -> None:
        """Stop a running target this process is done with for now (affinity scheduling,
        conformance/scheduling.py); its description is kept for the report, and a later
        test that needs it starts it again. A target that failed to start stays failed."""
        with self._lock:
            entry = self._entries.get(spec.raw)
            if entry is None or entry.target is None:
                return
            self._retired[spec.raw] = _describe_entry(entry)
            del self._entries[spec.raw]
        _stop_quietly(entry.target)

    def describe_all(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self._retired)
        out.update((entry.spec.raw, _describe_entry(entry)) for entry in self.entries())
        return out

    def stop_all(self) -> list[str]:
        problems = []
        for entry in self.entries():
            if entry.target is not None:
                try:
                    entry.target.stop()
                except Exception as exc:  # noqa: BLE001
                    problems.append(f"stopping {entry.spec.raw}: {type(exc).__name__}: {exc}")
                entry.target = None
        return problems


# -- plugin state ---------------------------------------------------------------------------


@dataclass
class KipcheckState:
    config: pytest.Config
    specs: list[TargetSpec]
    worker: str
    results_dir: Path | None
    differential: bool
    catalog_dir: str | None
    pool: TargetPool
    token: str = field(default_factory=lambda: secrets.token_hex(3))
    started_at: float = field(default_factory=time.time)
    counter: int = 0
    verdicts: dict[str, int] = field(default_factory=dict)
    divergences: int = 0
    skipped_targets: dict[str, str] = field(default_factory=dict)
    failed_targets: dict[str, str] = field(default_factory=dict)
    selected: int | None = None
    deselected: int = 0
    rows_seen: int = 0
    worker_crashes: list[str] = field(default_factory=list)

    @property
    def keyboard_interrupt(self) -> bool:
        return bool(_KEYBOARD_INTERRUPT)
    _catalog: Any = None
    _catalog_error: BaseException | None = None

    def catalog(self) -> Any:
        if self._catalog is None and self._catalog_error is None:
            from registers.catalog import get_catalog

            try:
                self._catalog = get_catalog(self.catalog_dir)
            except Exception as exc:  # noqa: BLE001
                self._catalog_error = exc
        if self._catalog_error is not None:
            raise self._catalog_error
        return self._catalog

    def next_counter(self) -> int:
        self.counter += 1
        return self.counter


STATE_KEY = pytest.StashKey[KipcheckState]()
PHASES_KEY = pytest.StashKey[dict]()
DIVERGENCES_KEY = pytest.StashKey[list]()
NOT_SUPPORTED_KEY = pytest.StashKey[str]()
DEADLINE_KEY = pytest.StashKey[dict]()
_RECORDER = evidence.install()


def _state(config: pytest.Config) -> KipcheckState:
    return config.stash[STATE_KEY]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "requirement(*ids): requirement ids from conformance/catalog this test checks")
    config.addinivalue_line("markers", "target_kinds(*kinds): restrict a test to target kinds")
    config.addinivalue_line("markers", "deadline(seconds): this test's deadline (default: conformance.deadlines)")
    _KEYBOARD_INTERRUPT.clear()
    deadlines.report_to_stderr_as_it_is_now()
    results = config.getoption("kipcheck_results")
    results_dir = Path(results).resolve() if results else None
    state = KipcheckState(
        config=config,
        specs=selected_specs(config),
        worker=worker_id(config),
        results_dir=results_dir,
        differential=not config.getoption("kipcheck_no_differential"),
        catalog_dir=config.getoption("kipcheck_catalog"),
        pool=TargetPool(config),
    )
    config.stash[STATE_KEY] = state
    config.pluginmanager.register(_ReportCounter(state), "kipcheck-report-counter")
    if results_dir is not None and not is_xdist_worker(config):
        results_dir.mkdir(parents=True, exist_ok=True)
        for pattern in ("results-*.jsonl", "targets-*.json", "session.json", "expected.json", "run.json"):
            for old in results_dir.glob(pattern):
                old.unlink()


# -- collection: requirement markers ------------------------------------------------------------


def in_suites(path: Path | str) -> bool:
    parts = Path(path).parts
    return any(parts[i : i + 2] == SUITES_PARTS for i in range(len(parts) - 1))


def requirement_ids(item: pytest.Item) -> list[str]:
    ids: list[str] = []
    for mark in item.iter_markers("requirement"):
        for arg in mark.args:
            if isinstance(arg, str) and arg not in ids:
                ids.append(arg)
    return ids


def _item_problems(state: KipcheckState, item: pytest.Item) -> list[str]:
    problems: list[str] = []
    marks = list(item.iter_markers("requirement"))
    if not marks:
        if in_suites(item.path):
            problems.append(
                f"{item.nodeid}: conformance test has no @pytest.mark.requirement(...) marker naming the catalog ids it checks"
            )
        return problems
    ids: list[str] = []
    for mark in marks:
        if not mark.args:
            problems.append(f"{item.nodeid}: @pytest.mark.requirement() needs at least one requirement id")
        for arg in mark.args:
            if not isinstance(arg, str):
                problems.append(f"{item.nodeid}: requirement ids must be strings, got {arg!r}")
            else:
                ids.append(arg)
    if ids:
        try:
            catalog = state.catalog()
        except Exception as exc:  # noqa: BLE001
            problems.append(f"{item.nodeid}: cannot check requirement ids, the catalog does not load: {exc}")
            return problems
        unknown = catalog.unknown(ids)
        if unknown:
            problems.append(
                f"{item.nodeid}: unknown requirement id(s) {', '.join(unknown)} (not in the catalog {catalog.directory})"
            )
    for mark in item.iter_markers("target_kinds"):
        bad = [k for k in mark.args if k not in KINDS]
        if bad or not mark.args:
            problems.append(f"{item.nodeid}: target_kinds needs kinds from {', '.join(KINDS)}, got {list(mark.args)}")
    return problems


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    rep = yield
    if not rep.passed or not rep.result:
        return rep
    state = _state(collector.config)
    problems: list[str] = []
    for node in rep.result:
        if isinstance(node, pytest.Item):
            problems.extend(_item_problems(state, node))
    if problems:
        rep.outcome = "failed"
        rep.longrepr = "kipcheck requirement check failed:\n" + "\n".join(dict.fromkeys(problems))
        rep.result = []
    return rep


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "target" not in metafunc.fixturenames:
        return
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", "")
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",")]
        if "target" in names:
            return  # the test parametrizes target itself
    scopes = dict(scoped_paths(metafunc.config))
    specs = [s for s in _state(metafunc.config).specs if _in_scope(s, Path(str(metafunc.definition.path)), scopes)]
    # Function scope: the pool, not pytest's fixture cache, owns a target's lifetime (a
    # retired cluster target is started again by the next test that asks for it).
    metafunc.parametrize("target", specs, indirect=True, ids=[s.raw for s in specs])


def pytest_deselected(items: list[pytest.Item]) -> None:
    if items:
        state = items[0].config.stash.get(STATE_KEY, None)
        if state is not None:
            state.deselected += len(items)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    state = _state(session.config)
    state.selected = len(session.items)
    if is_xdist_worker(session.config):
        session.config.workeroutput["kipcheck_scope"] = {"selected": state.selected, "deselected": state.deselected}
    elif state.results_dir is not None:
        from conformance.progress import write_expected

        write_expected(state.results_dir, state.selected)


def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """On the xdist controller: every worker collects the same items."""
    state = node.config.stash.get(STATE_KEY, None)
    if state is not None and state.selected is None:
        state.selected = len(ids)
        if state.results_dir is not None:
            from conformance.progress import write_expected

            write_expected(state.results_dir, state.selected)


def pytest_testnodedown(node: Any, error: Any) -> None:
    state = node.config.stash.get(STATE_KEY, None)
    if state is None:
        return
    if error:
        state.worker_crashes.append(f"{node.gateway.id}: {str(error).strip().splitlines()[-1] if str(error).strip() else 'crashed'}")
    scope = getattr(node, "workeroutput", {}).get("kipcheck_scope")
    if scope and state.deselected == 0:
        state.deselected = int(scope.get("deselected") or 0)


def pytest_handlecrashitem(crashitem: str, report: Any, sched: Any) -> None:
    state = sched.config.stash.get(STATE_KEY, None) if hasattr(sched, "config") else None
    if state is not None:
        state.worker_crashes.append(f"a worker crashed running {crashitem}")


@pytest.hookimpl(trylast=True)  # after pytest's own fixture-driven reordering, which would undo spread_slow
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """target_kinds(*kinds): tests whose target is of another kind are skipped.
    Registered deviations (conformance/deviations.yaml): the matching test on the named
    target becomes an expected failure (deviation_xfail), so its verdict stays "fail"."""
    deviations = _deviations(config) if any(in_suites(i.path) for i in items) else []
    for item in items:
        kinds = [k for m in item.iter_markers("target_kinds") for k in m.args]
        spec = _item_spec(item)
        if kinds and spec is not None and spec.kind not in kinds:
            item.add_marker(pytest.mark.skip(reason=f"test restricted to target kinds {', '.join(kinds)}; {spec.raw} is {spec.kind}"))
        if spec is None:
            continue
        version = _release_version(spec)
        for dev in deviations:
            if dev.matches(spec.kind, version, item.nodeid, _test_name(item)):
                item.add_marker(deviation_xfail(dev))
    items[:] = spread_slow(items)


def _slow_rank(item: pytest.Item) -> float:
    mark = item.get_closest_marker("slow")
    return float(mark.args[0]) if mark is not None and mark.args else 1.0


def deviation_xfail(dev: Any) -> pytest.MarkDecorator:
    """The xfail a registered deviation puts on its test: strict unless flaky; a failure
    its signature does not describe stays a failure (pytest.RaisesExc's `check`)."""
    return pytest.mark.xfail(strict=dev.flaky is None, reason=dev.reason,
                             raises=pytest.RaisesExc(BaseException, check=dev.excuses))


def spread_slow(items: list[pytest.Item]) -> list[pytest.Item]:
    """`slow`-marked tests (a higher `slow(rank)` earlier) spread over the first half of the
    run, each followed by its share of the other tests: the long tests no longer form the
    run's tail (xdist hands tests out in this order; certify keeps the workers' queues short
    with --maxschedchunk 1), and no more of them run at once than the spacing lets, since
    many CPU-heavy tests at once on a loaded 2-core machine each slow down several times.
    Deterministic, so every worker collects the same order (xdist requires it)."""
    slow = sorted((i for i in items if i.get_closest_marker("slow") is not None), key=lambda i: -_slow_rank(i))
    if not slow:
        return items
    rest = [i for i in items if i.get_closest_marker("slow") is None]
    gap = max(1, len(rest) // (2 * len(slow)))
    out: list[pytest.Item] = []
    for k, item in enumerate(slow):
        out += [item, *rest[k * gap:(k + 1) * gap]]
    return out + rest[len(slow) * gap:]


def _release_version(spec: Any) -> str | None:
    """The exact release a spec runs, for deviations limited to `versions:`: a
    kafka-native spec without a version (or with a line like 4.1) runs a known release."""
    if spec.kind != "kafka-native":
        return spec.version
    from targets.kafka_native.versions import resolve_release

    try:
        return resolve_release(spec.version).version
    except ValueError:
        return spec.version


def _deviations(config: pytest.Config) -> list[Any]:
    # Validated against the packaged catalog by conformance/tests/test_deviations.py;
    # not here, where a run may use a catalog of its own (--kipcheck-catalog).
    from registers.deviations import load_deviations

    return load_deviations()


# -- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def kipcheck_targets(request: pytest.FixtureRequest) -> TargetPool:
    """The per-process target pool (targets start lazily, stop at session end)."""
    return _state(request.config).pool


@pytest.fixture
def target(request: pytest.FixtureRequest, kipcheck_targets: TargetPool) -> Target:
    """The target under test; tests are parametrized over the selected --target specs.
    The instance comes from the pool: started on first use in this process, stopped at
    session end or when target-affinity scheduling retires it."""
    state = _state(request.config)
    spec: TargetSpec = getattr(request, "param", None) or state.specs[0]
    try:
        return kipcheck_targets.get(spec)
    except TargetError as exc:
        state.failed_targets[spec.raw] = str(exc)
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    except pytest.skip.Exception as exc:
        state.skipped_targets[spec.raw] = str(exc.msg)
        raise
    # outside the except block: one line per test, no traceback and no exception chain
    # (the start failure is remembered by the pool and reported once per worker)
    pytest.fail(message, pytrace=False)


@pytest.fixture(scope="session")
def reference(kipcheck_targets: TargetPool) -> Target:
    """The session's reference target (for differential comparison)."""
    return kipcheck_targets.get(DEFAULT_TARGET)


@pytest.fixture
def capabilities(target: Target):
    """The target's advertised capabilities (ApiVersions ranges, features)."""
    return target.capabilities()


@pytest.fixture
def unique(request: pytest.FixtureRequest) -> UniqueIds:
    """Per-test unique names: unique.topic(), unique.group(), unique.transactional_id(),
    unique("kind"); the base holds a session token, the xdist worker id and the test."""
    state = _state(request.config)
    test = safe_name(request.node.name, limit=50)
    return UniqueIds(f"kc{state.token}-{state.worker}-{test}-{state.next_counter()}")


@pytest.fixture
def differential(request: pytest.FixtureRequest, target: Target, unique: UniqueIds, kipcheck_targets: TargetPool) -> Differential:
    """Run scenarios on the target and the reference; differences are recorded as
    divergences on the test's result row (they never decide the verdict)."""
    state = _state(request.config)
    item = request.node
    divergences = item.stash.setdefault(DIVERGENCES_KEY, [])
    return Differential(
        target,
        lambda: kipcheck_targets.reference_for(target),
        enabled=state.differential,
        ids_base=f"{unique.base}-d",
        requirements=requirement_ids(item),
        record=divergences.append,
    )


# -- running: not_supported conversion, allure labels ------------------------------------------


def _not_supported(item: pytest.Item, exc: NotSupportedByTarget) -> BaseException:
    reason = f"{NOT_SUPPORTED_PREFIX}{exc.reason}"
    item.stash[NOT_SUPPORTED_KEY] = reason
    skip = pytest.skip.Exception(reason, _use_item_location=True)
    skip.__cause__ = exc
    return skip


TEARDOWN_GRACE_S = 30.0


def _deadline_seconds(item: pytest.Item) -> float:
    """Every test has one: a hang anywhere (a unit test's socket, Docker, a JVM) fails that
    test instead of stalling the run."""
    mark = item.get_closest_marker("deadline")
    marker_s = float(mark.args[0]) if mark is not None and mark.args else None
    return deadlines.deadline_for(marker_s, item.config.getoption("kipcheck_deadline_scale") or 1.0,
                                  item.config.getoption("kipcheck_deadline"))


@contextlib.contextmanager
def _phase_deadline(item: pytest.Item, phase: str):
    """One budget for setup + call; teardown gets at least TEARDOWN_GRACE_S to clean up."""
    if phase == "setup":
        item.stash[DEADLINE_KEY] = {"seconds": _deadline_seconds(item), "spent": 0.0, "fired": None}
    info = item.stash.get(DEADLINE_KEY, None)
    if info is None:
        yield
        return
    remaining = info["seconds"] - info["spent"]
    if phase == "teardown":
        remaining = max(remaining, TEARDOWN_GRACE_S)
    t0 = time.monotonic()
    with deadlines.running(max(remaining, 0.001), info["seconds"]) as d:
        try:
            yield
        finally:
            if d is not None:
                info["spent"] += time.monotonic() - t0 - d.paused_s
                if d.fired and info["fired"] is None:
                    info["fired"] = phase


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    _allure_labels(item)
    if _RECORDER is not None:
        _RECORDER.reset()
    try:
        with _phase_deadline(item, "setup"):
            return (yield)
    except NotSupportedByTarget as exc:
        raise _not_supported(item, exc) from exc


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    _allure_description(item)
    try:
        with _phase_deadline(item, "call"):
            return (yield)
    except NotSupportedByTarget as exc:
        raise _not_supported(item, exc) from exc


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    try:
        with _phase_deadline(item, "teardown"):
            return (yield)
    finally:
        _retire_if_done(item, nextitem)


def _retire_if_done(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Under target-affinity scheduling a cluster target's tests reach a worker as one unit:
    when the next test is on another target, the unit is done and its brokers go."""
    if nextitem is None or not _affinity_scheduled(item.config):
        return
    spec = _item_spec(item)
    if spec is None or spec.kind not in CLUSTER_KINDS:
        return
    following = _item_spec(nextitem)
    if following is None or following.raw != spec.raw:
        _state(item.config).pool.retire(spec)


_AFFINITY_KEY = "kipcheck_target_affinity"


def _affinity_scheduled(config: pytest.Config) -> bool:
    """On a worker (whose own `dist` option xdist sets to "no"): told by the controller."""
    return bool(getattr(config, "workerinput", {}).get(_AFFINITY_KEY))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    node.workerinput[_AFFINITY_KEY] = node.config.getoption("dist", None) == "loadscope"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any):
    """`--dist loadscope`: target-affinity scheduling; `--dist loadfile`: xdist's, fixed so a
    crashed worker cannot hang the run (conformance/scheduling.py)."""
    dist = config.getoption("dist", None)
    if dist == "loadfile":
        from conformance.scheduling import CrashSafeLoadFileScheduling

        return CrashSafeLoadFileScheduling(config, log)
    if dist != "loadscope":
        return None
    from conformance.scheduling import TargetAffinityScheduling

    clusters = [s.raw for s in _state(config).specs if s.kind in CLUSTER_KINDS]
    return TargetAffinityScheduling(config, log, clusters)


def _allure_active(config: pytest.Config) -> bool:
    return config.pluginmanager.get_plugin("allure_listener") is not None


def _allure_labels(item: pytest.Item) -> None:
    if not _allure_active(item.config):
        return
    ids = requirement_ids(item)
    if not ids and not _is_recorded(item):
        return
    try:
        import allure

        state = _state(item.config)
        catalog = None
        try:
            catalog = state.catalog()
        except Exception:  # noqa: BLE001
            pass
        kips: list[str] = []
        for rid in ids:
            # requirement ids are labels and tags, not links: an allure link needs a URL
            allure.dynamic.label("requirement", rid)
            allure.dynamic.tag(rid)
            allure.dynamic.story(rid)
            if catalog is not None and rid in catalog and catalog.get(rid).kip not in kips:
                kips.append(catalog.get(rid).kip)
        if kips:
            allure.dynamic.feature(*kips)
        spec = _item_spec(item)
        if spec is not None:
            allure.dynamic.label("target", spec.raw)
    except Exception:  # noqa: BLE001 - reporting decoration must never break a test
        pass


def _allure_description(item: pytest.Item) -> None:
    """Test docstring plus each requirement's behaviour and oracle (allure-pytest sets
    the docstring at the end of setup, so this runs at call time)."""
    if not _allure_active(item.config):
        return
    ids = requirement_ids(item)
    if not ids:
        return
    try:
        import allure

        catalog = _state(item.config).catalog()
        parts = []
        doc = getattr(getattr(item, "function", None), "__doc__", None)
        if doc:
            parts.append(" ".join(doc.split()))
        for rid in ids:
            if rid in catalog:
                r = catalog.get(rid)
                parts.append(f"**{rid}** ({r.level}): {r.behaviour}\n\n_Oracle:_ {r.oracle}")
        allure.dynamic.description("\n\n".join(parts))
    except Exception:  # noqa: BLE001 - reporting decoration must never break a test
        pass


# -- results --------------------------------------------------------------------------------


def _item_spec(item: pytest.Item) -> TargetSpec | None:
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        value = callspec.params.get("target")
        if isinstance(value, TargetSpec):
            return value
    if "target" in getattr(item, "fixturenames", ()):
        specs = _state(item.config).specs
        return specs[0] if specs else None
    return None


def _is_recorded(item: pytest.Item) -> bool:
    return (
        in_suites(item.path)
        or item.get_closest_marker("requirement") is not None
        or "target" in getattr(item, "fixturenames", ())
    )


def _suite_name(item: pytest.Item) -> str:
    path = Path(item.path)
    parts = path.with_suffix("").parts
    for i in range(len(parts) - 1):
        if parts[i : i + 2] == SUITES_PARTS:
            rel = list(parts[i + 2 :])
            break
    else:
        try:
            rel = list(path.with_suffix("").relative_to(item.config.rootpath).parts)
        except ValueError:
            rel = [path.stem]
    if rel and rel[-1].startswith("test_"):
        rel[-1] = rel[-1][len("test_") :]
    return "/".join(rel)


def _test_name(item: pytest.Item) -> str:
    name = item.nodeid.split("::", 1)[1] if "::" in item.nodeid else item.name
    return re.sub(r"\[.*\]$", "", name)


def _reason(rep: pytest.TestReport) -> str | None:
    longrepr = rep.longrepr
    if longrepr is None:
        return None
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        msg = str(longrepr[2])
        return msg[len("Skipped: ") :] if msg.startswith("Skipped: ") else msg
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        return str(crash.message)[:4000]
    text = str(longrepr).strip()
    return text.splitlines()[-1][:4000] if text else None


def _verdict(item: pytest.Item, phases: dict[str, pytest.TestReport]) -> tuple[str, str | None]:
    not_supported = item.stash.get(NOT_SUPPORTED_KEY, None)
    setup, call, teardown = phases.get("setup"), phases.get("call"), phases.get("teardown")

    def skipped_verdict(rep: pytest.TestReport) -> tuple[str, str | None]:
        reason = _reason(rep)
        if not_supported is not None or (reason or "").startswith(NOT_SUPPORTED_PREFIX):
            return "not_supported", reason
        return "skipped", reason

    if setup is not None and setup.failed:
        return "error", f"setup: {_reason(setup)}"
    if setup is not None and setup.skipped:
        return skipped_verdict(setup)
    if call is None:
        return "error", "test did not run"
    if hasattr(call, "wasxfail"):
        if call.skipped:
            return "fail", f"expected failure (xfail): {call.wasxfail}".rstrip(": ")
        if call.passed:
            verdict, reason = "pass", None
        else:  # strict xpass
            return "fail", _reason(call)
    elif call.failed:
        return "fail", _reason(call)
    elif call.skipped:
        return skipped_verdict(call)
    else:
        verdict, reason = "pass", None
    if teardown is not None and teardown.failed:
        return "error", f"teardown: {_reason(teardown)}"
    return verdict, reason


def build_row(item: pytest.Item, phases: dict[str, pytest.TestReport]) -> dict[str, Any]:
    state = _state(item.config)
    verdict, reason = _verdict(item, phases)
    spec = _item_spec(item)
    target_version = None
    if spec is not None:
        started = state.pool.started(spec)
        target_version = started.version if started is not None else spec.version
    info = item.stash.get(DEADLINE_KEY, None)
    timed_out = bool(info and info["fired"])
    if timed_out:
        verdict = "fail"
        reason = deadlines.TIMEOUT_REASON.format(seconds=info["seconds"])
        if info["fired"] != "call":
            reason += f" (stopped during {info['fired']})"
    row = {
        "nodeid": item.nodeid,
        "test": _test_name(item),
        "suite": _suite_name(item),
        "target": spec.raw if spec is not None else None,
        "target_kind": spec.kind if spec is not None else None,
        "target_version": target_version,
        "requirements": requirement_ids(item),
        "verdict": verdict,
        "reason": reason,
        "duration_s": round(sum(r.duration for r in phases.values()), 6),
        "divergences": list(item.stash.get(DIVERGENCES_KEY, [])),
    }
    if timed_out:
        row["timed_out"] = True
        row["deadline_s"] = info["seconds"]
    if verdict != "pass":
        row["evidence"] = _evidence(item, phases, spec)
    uuid = _allure_uuid(item)
    if uuid:
        row["allure_uuid"] = uuid
    return row


def _assertion_text(phases: dict[str, pytest.TestReport]) -> str | None:
    for when in ("call", "setup", "teardown"):
        rep = phases.get(when)
        if rep is not None and rep.failed:
            crash = getattr(rep.longrepr, "reprcrash", None)
            return str(crash.message) if crash is not None else str(rep.longrepr)
    return None


def _evidence(item: pytest.Item, phases: dict[str, pytest.TestReport], spec: TargetSpec | None) -> dict[str, Any]:
    state = _state(item.config)
    target = state.pool.started(spec) if spec is not None else None
    exchanges = _RECORDER.snapshot() if _RECORDER is not None else []
    return evidence.build(_assertion_text(phases), exchanges, list(item.stash.get(DIVERGENCES_KEY, [])), target)


def _allure_uuid(item: pytest.Item) -> str | None:
    """The allure result uuid of this test: the "uuid" field of its allure-results/*-result.json
    (allure-commons names the file itself with a fresh uuid4, so match on the field)."""
    listener = item.config.pluginmanager.get_plugin("allure_listener")
    if listener is None:
        return None
    try:
        uuid = listener._cache.get(item.nodeid)
        return str(uuid) if uuid else None
    except Exception:  # noqa: BLE001
        return None


def _json_default(value: Any) -> Any:
    from clients.normalize import jsonable

    return jsonable(value)


def _append_row(state: KipcheckState, row: dict[str, Any]) -> None:
    if state.results_dir is None:
        return
    state.results_dir.mkdir(parents=True, exist_ok=True)
    path = state.results_dir / f"results-{state.worker}.jsonl"
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(row, default=_json_default, sort_keys=False) + "\n")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    rep = yield
    if not _is_recorded(item):
        return rep
    phases = item.stash.setdefault(PHASES_KEY, {})
    phases[rep.when] = rep
    if rep.when == "teardown":
        state = _state(item.config)
        row = build_row(item, phases)
        _append_row(state, row)
        rep.kipcheck_row = row  # travels to the xdist controller with the report
    return rep


class _ReportCounter:
    """Registered per config: counts verdicts from reports (on the xdist controller they
    arrive from the workers with the row attached) for the terminal summary."""

    def __init__(self, state: KipcheckState) -> None:
        self.state = state

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        row = getattr(report, "kipcheck_row", None)
        if report.when != "teardown" or not isinstance(row, dict):
            return
        state = self.state
        state.rows_seen += 1
        verdict = row.get("verdict", "error")
        state.verdicts[verdict] = state.verdicts.get(verdict, 0) + 1
        state.divergences += len(row.get("divergences") or ())
        target, reason = row.get("target"), row.get("reason") or ""
        if target and verdict == "skipped" and reason.startswith(f"testcontainers target {target} skipped"):
            state.skipped_targets[target] = reason
        if target and verdict == "error" and f"target {target} failed to start" in reason:
            state.failed_targets[target] = reason


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    state = _state(config)
    try:
        if state.results_dir is not None and state.pool.entries():
            state.results_dir.mkdir(parents=True, exist_ok=True)
            payload = {"worker": state.worker, "targets": state.pool.describe_all()}
            (state.results_dir / f"targets-{state.worker}.json").write_text(
                json.dumps(payload, indent=2, default=_json_default), encoding="utf-8"
            )
    finally:
        for problem in state.pool.stop_all():
            warnings.warn(pytest.PytestWarning(f"kipcheck: {problem}"))
    if state.results_dir is not None and not is_xdist_worker(config):
        state.results_dir.mkdir(parents=True, exist_ok=True)
        session_info = {
            "started_at": datetime.datetime.fromtimestamp(state.started_at, datetime.timezone.utc).isoformat(),
            "finished_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "exitstatus": int(exitstatus),
            "targets": [s.raw for s in state.specs],
            "differential": state.differential,
            "catalog": str(state.catalog_dir) if state.catalog_dir else None,
            "args": list(config.invocation_params.args),
            "verdicts": dict(state.verdicts),
            "divergences": state.divergences,
        }
        (state.results_dir / "session.json").write_text(json.dumps(session_info, indent=2), encoding="utf-8")
        _write_run_json(session, state, int(exitstatus))


def pytest_keyboard_interrupt(excinfo: Any) -> None:
    """Tell a SIGINT apart from pytest's other early stops (both exit with status 2);
    collection errors raise Session.Interrupted, a KeyboardInterrupt subclass."""
    if not isinstance(excinfo.value, pytest.Session.Interrupted):
        _KEYBOARD_INTERRUPT.append(True)


_KEYBOARD_INTERRUPT: list[bool] = []


def _scope(config: pytest.Config, state: KipcheckState) -> dict[str, Any]:
    """Was the selection narrowed (by -k, -m, explicit test ids or paths other than the suites)?"""
    keyword = config.getoption("keyword", "") or None
    markexpr = config.getoption("markexpr", "") or None
    explicit = [a for a in config.args if not _whole_suites(a)]
    selected = state.selected
    return {
        "narrowed": bool(keyword or markexpr or explicit or state.deselected),
        "suite_exprs": [],
        "keyword": keyword,
        "markexpr": markexpr,
        "explicit_tests": explicit,
        "collected": None if selected is None else selected + state.deselected,
        "selected": selected,
        "deselected": state.deselected,
    }


def _whole_suites(arg: str) -> bool:
    arg = str(arg).rstrip("/")
    return arg in (".".join(SUITES_PARTS), "/".join(SUITES_PARTS)) or arg.endswith("/" + "/".join(SUITES_PARTS))


def _write_run_json(session: pytest.Session, state: KipcheckState, exitstatus: int) -> None:
    """run.json (conformance/run_status.py): the controller's view of completeness."""
    from conformance import run_status

    run = run_status.load(state.results_dir) or run_status.new_run(["pytest", *session.config.invocation_params.args])
    run["started_at"] = datetime.datetime.fromtimestamp(state.started_at, datetime.timezone.utc).replace(microsecond=0).isoformat()
    reasons: list[str] = []
    updates: dict[str, Any] = {"scope": _scope(session.config, state), "expected_tests": state.selected,
                               "finished_at": run_status.now_iso(),
                               "duration_s": round(time.time() - state.started_at, 3)}
    if exitstatus == pytest.ExitCode.INTERRUPTED and state.keyboard_interrupt and not run.get("interrupted"):
        updates["interrupted"] = {"signal": "SIGINT", "at": run_status.now_iso()}
        reasons.append(f"interrupted after {state.rows_seen} of {state.selected} tests")
    elif exitstatus == pytest.ExitCode.INTERRUPTED:  # collection errors, -x / --maxfail
        if session.testscollected == 0 or state.selected is None or state.rows_seen < state.selected:
            run["status"] = "internal_error"
            reasons.append(f"pytest stopped early ({session.testsfailed} failure(s)/collection error(s)); see pytest.log")
    if exitstatus == pytest.ExitCode.INTERNAL_ERROR:
        run["status"] = "internal_error"
        reasons.append("pytest hit an internal error")
    if state.worker_crashes:
        updates["worker_crashes"] = state.worker_crashes
        reasons.extend(state.worker_crashes)
    if state.failed_targets:
        updates["unreachable_targets"] = {s: r.splitlines()[0] for s, r in state.failed_targets.items()}
        reasons.extend(f"target {s} did not start" for s in state.failed_targets)
    updates["reasons"] = reasons
    try:
        run_status.write(state.results_dir, run_status.finalize(state.results_dir, run, **updates))
    except OSError as exc:
        warnings.warn(pytest.PytestWarning(f"kipcheck: cannot write run.json: {exc}"))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = _state(config)
    if not state.verdicts and not state.skipped_targets and not state.failed_targets:
        return
    tr = terminalreporter
    tr.section("kipcheck")
    counts = ", ".join(f"{state.verdicts.get(v, 0)} {v}" for v in VERDICTS if state.verdicts.get(v))
    tr.write_line(f"targets: {', '.join(s.raw for s in state.specs)}; verdicts: {counts or 'none'}; "
                  f"divergences recorded: {state.divergences}")
    for spec, reason in sorted(state.skipped_targets.items()):
        tr.write_line(f"SKIPPED target {spec}: {reason}")
    for spec, reason in sorted(state.failed_targets.items()):
        tr.write_line(f"FAILED target {spec}: {reason}")
    if state.results_dir is not None:
        tr.write_line(f"results written to {state.results_dir}")
