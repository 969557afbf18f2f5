"""The draft's capability gate as the fixture every test of the suite uses, the
markers-pending window the blocking tests need (a held partition leader on 2+ brokers, the
reference's model-only marker delay on one node) and the reference's hold bound."""

from __future__ import annotations

import contextlib
import threading
import time
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

    def reconnect(self) -> None:
        """A new cluster client: connections to a broker a window held do not survive it."""
        self.cc.close()
        self.cc = wire.cluster_client(self.target)

    def level(self, level: int) -> None:
        set_level(self.cc, level)

    def held(self) -> "Held":
        """A fresh topic, a transactional id and the partition whose markers the returned
        window can hold back (see MarkerWindow): on 2+ brokers a partition led by neither the
        id's coordinator nor the bootstrap broker; on the single-node reference partition 0,
        held by the model-only marker delay."""
        nodes = list(self.target.node_ids)
        if len(nodes) < 2:
            if self.target.kind != "reference":
                raise NotSupportedByTarget("holding a transaction's markers needs 2+ brokers (a held partition leader)")
            window = MarkerWindow(self, None)
            return Held(self.unique.transactional_id(), self.topic(), 0, 1, window)
        topic = self.topic(len(nodes))
        leaders = {p: wire_leader(self.cc, topic, p) for p in range(len(nodes))}
        bootstrap = next(n for n, hp in self.cc.nodes.items() if hp == (self.cc.bootstrap.host, self.cc.bootstrap.port))
        for _ in range(200):
            tid = self.unique.transactional_id()
            coordinator = self.cc.find_coordinator(tid, 1)[1]
            held = [p for p, n in leaders.items() if n not in (coordinator, bootstrap)]
            if held:
                p = held[0]
                other = next((q for q, n in leaders.items() if n != leaders[p]), None)
                if other is None:
                    raise NotSupportedByTarget(f"every partition of {topic} has one leader: none left unheld")
                return Held(tid, topic, p, other, MarkerWindow(self, leaders[p]))
        raise AssertionError(f"no transactional id whose coordinator leaves a partition of {topic} to hold")

    def held_transaction(self) -> tuple[Tv1Txn, "Held"]:
        """A TV1 transaction (initialized) of `held()`'s transactional id on its topic."""
        h = self.held()
        return Tv1Txn(self.cc, h.tid, h.topic).init(), h


@dataclass
class Held:
    tid: str
    topic: str
    partition: int  # its markers wait while `window` is open
    other: int  # a partition of the topic whose leader is not held
    window: "MarkerWindow"


def wire_leader(cc: ClusterClient, topic: str, partition: int) -> int:
    md = cc.refresh([topic])
    return next(int(p.leader_id) for t in md.topics if t.name == topic for p in t.partitions
                if int(p.partition_index) == partition)


class MarkerWindow:
    """Markers of one partition held back `ms` from `open()`: issue 25 item 2, a window from
    the fault layer where the target can show it. On a multi-broker cluster the partition's
    leader (neither the transaction coordinator nor the bootstrap broker) is paused (SIGSTOP;
    isolated on the reference, which cannot pause one node) and resumed by a timer, so the
    coordinator's WriteTxnMarkers for it wait; on the single-node reference the model-only
    TransactionConfig.marker_delay_ms does it. `released_at` is the monotonic time the window
    ended (the answer of a held request must not come earlier). Closing a window on a held
    broker gives the RoundTrip a new cluster client (`rt.cc`): the old connections to that
    broker did not survive."""

    def __init__(self, rt: RoundTrip, node: int | None) -> None:
        self.rt, self.node = rt, node
        self.released_at: float | None = None
        self._stack = contextlib.ExitStack()
        self._timer: threading.Timer | None = None
        self._resume: Any = None
        self._lock = threading.Lock()

    def open(self, ms: int) -> "MarkerWindow":
        """Hold the markers back from now for `ms`; a closed window may be opened again."""
        self.released_at, self._resume = None, None
        if self.node is None:
            self._stack.enter_context(self.rt.markers_delayed(ms))
            self.released_at = time.monotonic() + ms / 1000
            return self
        try:
            self.rt.target.pause_node(self.node)
            self._resume = self.rt.target.resume_node
        except NotSupportedByTarget:
            self.rt.target.isolate_node(self.node)
            self._resume = self.rt.target.rejoin_node
        self._timer = threading.Timer(ms / 1000, self.release)
        self._timer.start()
        return self

    def release(self) -> None:
        with self._lock:  # the timer thread and close() may both get here
            if self._resume is not None and self.released_at is None:
                self._resume(self.node)
                self.released_at = time.monotonic()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.release()
        self._stack.close()
        if self._resume is not None:
            self.rt.reconnect()

    def __enter__(self) -> "MarkerWindow":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
        round_trip = RoundTrip(target, cc, unique)
        try:
            yield round_trip
        finally:
            round_trip.cc.close()  # a new one after a window on a held broker
            if restore is not None:
                with wire.cluster_client(target) as fresh:
                    set_level(fresh, restore)
