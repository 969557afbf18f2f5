"""The draft's capability gate as the fixture every test of the suite uses, and the
reference's model-only knobs (marker delay, hold bound) the wire tests need."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator

import pytest
from kio.schema.errors import ErrorCode as E

from clients import wire
from conformance.capability_gate import require_capability
from conformance.suites.kip1289 import SAFE_DOWNGRADE, UPGRADE, features, update_features
from conformance.suites.kip98 import create_ready_topic
from conformance.suites.txnrt import BLOCKING, FEATURE, Tv1Txn, missing_capability
from targets.target import NotSupportedByTarget
from reference_impl.client.raw_client import ClusterClient


def set_level(cc: ClusterClient, level: int) -> None:
    """Finalize transaction.roundtrip.version at `level` (0 removes it)."""
    have = int(features(cc.bootstrap)[1].get(FEATURE, 0))
    if have == level:
        return
    resp = update_features(cc.bootstrap, {FEATURE: level}, UPGRADE if level > have else SAFE_DOWNGRADE)
    assert resp.error_code == E.none, resp


def _txn_config_swap(target: Any, name: str, value: Any) -> Any:
    """Set one model-only TransactionConfig field on the reference's event loop; returns the
    previous value. Other targets have no such knob."""
    threaded = getattr(target, "cluster", None) if target.kind == "reference" else None
    if threaded is None:
        raise NotSupportedByTarget(f"needs the reference's model-only TransactionConfig.{name}")

    async def swap() -> Any:
        cfg = threaded.cluster.state.transactions.txn_config
        before = getattr(cfg, name)
        setattr(cfg, name, value)
        return before

    return threaded.call(swap(), timeout=10)


@contextlib.contextmanager
def txn_config(target: Any, name: str, value: Any) -> Iterator[None]:
    before = _txn_config_swap(target, name, value)
    try:
        yield
    finally:
        _txn_config_swap(target, name, before)


@dataclass
class RoundTrip:
    target: Any
    cc: ClusterClient
    unique: Any

    def topic(self, partitions: int = 2) -> str:
        name = self.unique.topic()
        create_ready_topic(self.target, self.cc, name, partitions)
        return name

    def txn(self, topic: str) -> Tv1Txn:
        return Tv1Txn(self.cc, self.unique.transactional_id(), topic).init()

    def markers_delayed(self, ms: int | None) -> contextlib.AbstractContextManager:
        """Markers written `ms` after the durable decision (reference only)."""
        return txn_config(self.target, "marker_delay_ms", ms)

    def hold_bound(self, ms: int) -> contextlib.AbstractContextManager:
        return txn_config(self.target, "add_partitions_hold_max_ms", ms)

    def level(self, level: int) -> None:
        set_level(self.cc, level)


def enable_on_reference(target: Any, cc: ClusterClient) -> int | None:
    """Finalize the blocking level on the reference (supported, finalized 0 by default);
    returns the level to restore, None when nothing changed. Never touches other targets."""
    if target.kind != "reference":
        return None
    before = int(features(cc.bootstrap)[1].get(FEATURE, 0))
    if before >= BLOCKING:
        return None
    set_level(cc, BLOCKING)
    return before


def require_txnrt(target: Any, cc: ClusterClient) -> int | None:
    """NotSupportedByTarget unless the target has the draft (after enabling it on the
    reference); returns the level to restore afterwards (or None)."""
    return require_capability(target, cc, missing_capability, enable_on_reference)


@pytest.fixture
def rt(target, unique) -> Iterator[RoundTrip]:
    with wire.cluster_client(target) as cc:
        restore = require_txnrt(target, cc)
        try:
            yield RoundTrip(target, cc, unique)
        finally:
            if restore is not None:
                with wire.cluster_client(target) as fresh:
                    set_level(fresh, restore)
