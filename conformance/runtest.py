"""Running a test: its deadline per phase (conformance/deadlines.py), NotSupportedByTarget
turned into a ``not_supported`` skip, the target's health before it (a quiet target: the
test is not run, conformance/target_health.py), allure labels, and after teardown retiring
a cluster target whose tests are done (conformance/scheduling.py)."""

from __future__ import annotations

import pytest

from targets.target import NotSupportedByTarget

from conformance.deadlines import phase_deadline
from conformance.evidence import RECORDER
from conformance.items import is_recorded, item_spec, requirement_ids
from conformance.scheduling import retire_if_done
from conformance.state import (
    NOT_SUPPORTED_KEY, NOT_SUPPORTED_PREFIX, TARGET_DOWN_KEY, TARGET_RESUMED_KEY, state_of,
)


def _not_supported(item: pytest.Item, exc: NotSupportedByTarget) -> BaseException:
    reason = f"{NOT_SUPPORTED_PREFIX}{exc.reason}"
    item.stash[NOT_SUPPORTED_KEY] = reason
    skip = pytest.skip.Exception(reason, _use_item_location=True)
    skip.__cause__ = exc
    return skip


def _health_gate(item: pytest.Item) -> None:
    """A test on a started target that no longer answers is not run (before its fixtures)."""
    spec = item_spec(item) if is_recorded(item) else None
    if spec is None:
        return
    state = state_of(item.config)
    target = state.pool.started(spec)
    if target is None:
        return
    down = state.health.check(spec.raw, target)
    if down is not None:
        item.stash[TARGET_DOWN_KEY] = down.as_row()
        raise pytest.skip.Exception(down.reason(), _use_item_location=True)
    resumed = state.health.resumed(spec.raw)
    if resumed is not None:
        item.stash[TARGET_RESUMED_KEY] = resumed


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    _health_gate(item)  # raising before the yield: no fixture, no inner hook runs
    _allure_labels(item)
    RECORDER.reset()
    try:
        with phase_deadline(item, "setup"):
            return (yield)
    except NotSupportedByTarget as exc:
        raise _not_supported(item, exc) from exc


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    _allure_description(item)
    try:
        with phase_deadline(item, "call"):
            return (yield)
    except NotSupportedByTarget as exc:
        raise _not_supported(item, exc) from exc


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    try:
        with phase_deadline(item, "teardown"):
            return (yield)
    finally:
        _note_test_ran(item)
        retire_if_done(item, nextitem)


def _note_test_ran(item: pytest.Item) -> None:
    """The target's health remembers the last test that used it, and that test's last request."""
    spec = item_spec(item) if is_recorded(item) else None
    if spec is not None and TARGET_DOWN_KEY not in item.stash:
        state_of(item.config).health.test_ran(spec.raw, item.nodeid, RECORDER.snapshot())


def _allure_active(config: pytest.Config) -> bool:
    return config.pluginmanager.get_plugin("allure_listener") is not None


def _allure_labels(item: pytest.Item) -> None:
    if not _allure_active(item.config):
        return
    ids = requirement_ids(item)
    if not ids and not is_recorded(item):
        return
    try:
        import allure  # third-party: needed only while allure-pytest reports the run

        state = state_of(item.config)
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
        spec = item_spec(item)
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
        import allure  # third-party: needed only while allure-pytest reports the run

        catalog = state_of(item.config).catalog()
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
