"""The plugin's fixtures: the target under test, the reference, capabilities, unique
names and differential scenarios."""

from __future__ import annotations

import pytest

from targets.target import Target, TargetError, TargetSpec

from conformance.differential import Differential, UniqueIds, safe_name
from conformance.items import requirement_ids
from conformance.options import DEFAULT_TARGET
from conformance.state import DIVERGENCES_KEY, state_of
from conformance.target_pool import TargetPool


@pytest.fixture(scope="session")
def kipcheck_targets(request: pytest.FixtureRequest) -> TargetPool:
    """The per-process target pool (targets start lazily, stop at session end)."""
    return state_of(request.config).pool


@pytest.fixture
def target(request: pytest.FixtureRequest, kipcheck_targets: TargetPool) -> Target:
    """The target under test; tests are parametrized over the selected --target specs.
    The instance comes from the pool: started on first use in this process, stopped at
    session end or when target-affinity scheduling retires it."""
    state = state_of(request.config)
    spec: TargetSpec = getattr(request, "param", None) or state.specs[0]
    try:
        started = kipcheck_targets.get(spec)
        state.health.watch(spec.raw, started)  # conformance/target_health.py: is it still answering?
        return started
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
    state = state_of(request.config)
    test = safe_name(request.node.name, limit=50)
    return UniqueIds(f"kc{state.token}-{state.worker}-{test}-{state.next_counter()}")


@pytest.fixture
def differential(request: pytest.FixtureRequest, target: Target, unique: UniqueIds, kipcheck_targets: TargetPool) -> Differential:
    """Run scenarios on the target and the reference; differences are recorded as
    divergences on the test's result row (they never decide the verdict)."""
    state = state_of(request.config)
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
