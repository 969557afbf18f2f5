"""Collection: the requirement-marker check, parametrization over the selected targets, and
the order and marks of the collected tests (target_kinds skips, registered deviations'
xfails, slow tests spread over the run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from targets.kafka_native.versions import resolve_release
from targets.target import KINDS, TargetSpec
from registers.deviations import load_deviations

from conformance.items import in_suites, item_spec, name_without_params
from conformance.options import Scope, scoped_paths
from conformance.state import KipcheckState, state_of


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
    state = state_of(collector.config)
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
    specs = [s for s in state_of(metafunc.config).specs if _in_scope(s, Path(str(metafunc.definition.path)), scopes)]
    # Function scope: the pool, not pytest's fixture cache, owns a target's lifetime (a
    # retired cluster target is started again by the next test that asks for it).
    metafunc.parametrize("target", specs, indirect=True, ids=[s.raw for s in specs])


def _in_scope(spec: TargetSpec, test_path: Path, scopes: dict[str, Scope]) -> bool:
    """A scoped target runs only the tests its scope covers; other targets run everything."""
    scope = scopes.get(spec.raw)
    return scope is None or scope.covers(test_path)


@pytest.hookimpl(trylast=True)  # after pytest's own fixture-driven reordering, which would undo spread_slow
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """target_kinds(*kinds): tests whose target is of another kind are skipped.
    Registered deviations (conformance/deviations.yaml): the matching test on the named
    target becomes an expected failure (deviation_xfail), so its verdict stays "fail"."""
    deviations = _deviations(config) if any(in_suites(i.path) for i in items) else []
    for item in items:
        kinds = [k for m in item.iter_markers("target_kinds") for k in m.args]
        spec = item_spec(item)
        if kinds and spec is not None and spec.kind not in kinds:
            item.add_marker(pytest.mark.skip(reason=f"test restricted to target kinds {', '.join(kinds)}; {spec.raw} is {spec.kind}"))
        if spec is None:
            continue
        version = _release_version(spec)
        for dev in deviations:
            if dev.matches(spec.kind, version, item.nodeid, name_without_params(item)):
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
    try:
        return resolve_release(spec.version).version
    except ValueError:
        return spec.version


def _deviations(config: pytest.Config) -> list[Any]:
    # Validated against the packaged catalog by conformance/tests/test_deviations.py;
    # not here, where a run may use a catalog of its own (--kipcheck-catalog).
    return load_deviations()
