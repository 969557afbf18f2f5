"""KIP-447 pending transactional offsets and the stable OffsetFetch (wire level).

A transaction that staged offsets with TxnOffsetCommit leaves them *pending* until its
marker reaches the offsets partition. OffsetFetch v7+ with RequireStable answers a partition
with pending offsets with the retriable UNSTABLE_OFFSET_COMMIT (88) and offset -1 (the KIP
text's PENDING_TRANSACTION 85 never shipped: DIV-001); without RequireStable, or below v7, the
last committed offset is returned. After the transaction ends the stable fetch resolves to
the transactional offset (commit) or to the previous committed offset (abort).
"""

from __future__ import annotations

import time

import pytest

from clients import confluent, wire
from conformance.suites.kip447 import (
    NO_REASSIGNMENT_IN_PROGRESS,
    UNSTABLE_OFFSET_COMMIT,
    RawTxn,
    group_coordinator,
    commit,
    offset_fetch,
    require_stable_fetch,
)
from targets.target import NotSupportedByTarget
from kio.schema.errors import ErrorCode


def _view(answer: dict[int, tuple[int, int]]) -> dict[str, list[int]]:
    return {str(p): [o, e] for p, (o, e) in sorted(answer.items())}


def _wait_resolved(coord, group, topic, partitions, timeout_s: float = 15.0):
    """Stable OffsetFetch until no partition answers 88; returns (answer, polls, codes seen)."""
    deadline = time.monotonic() + timeout_s
    polls, codes = 0, set()
    while True:
        _, ans = offset_fetch(coord, group, topic, partitions, require_stable=True)
        polls += 1
        codes |= {e for _, e in ans.values()}
        if all(e != UNSTABLE_OFFSET_COMMIT for _, e in ans.values()) or time.monotonic() > deadline:
            return ans, polls, codes
        time.sleep(0.05)


def _seed(coord, group: str, topic: str, partition: int, offset: int, wait_s: float = 30.0) -> int:
    """OffsetCommit of the seed offsets, retried while the group coordinator does not know the
    topic yet: on several brokers it may learn of a just-created topic from the controller a
    moment after the broker that answered CreateTopics (UNKNOWN_TOPIC_OR_PARTITION meanwhile;
    seen on testcontainers:nodes=3, Kafka 4.4.0)."""
    deadline = time.monotonic() + wait_s
    while True:
        code = commit(coord, group, topic, partition, offset)
        if code != ErrorCode.unknown_topic_or_partition or time.monotonic() > deadline:
            return code
        time.sleep(0.1)


def pending_offsets_scenario(target, ids):
    """Committed 50 (p0) and 7 (p1); a transaction stages p0=100; stable/unstable fetches;
    commit; a second transaction stages p0=200 and aborts."""
    topic, group, tid = ids.topic(), ids.group(), ids.transactional_id()
    confluent.create_topic(target, topic, partitions=2)
    obs: dict = {}
    codes: set[int] = set()
    with wire.cluster_client(target) as cc:
        coord = group_coordinator(cc, group, topic)
        obs["seed_commit"] = [_seed(coord, group, topic, 0, 50),
                              _seed(coord, group, topic, 1, 7)]
        txn = RawTxn(cc, tid)
        obs["init"] = txn.init()
        obs["add_offsets_1"] = txn.add_offsets(group)
        _, staged = txn.txn_offset_commit(group, topic, {0: 100}, lowest=0)
        obs["txn_offset_commit_1"] = {str(p): e for p, e in staged.items()}
        v, stable = offset_fetch(coord, group, topic, [0, 1], require_stable=True, lowest=7)
        obs["stable_version"] = v
        obs["stable_pending"] = _view(stable)
        _, unstable = offset_fetch(coord, group, topic, [0, 1], require_stable=False, lowest=7)
        obs["unstable_pending"] = _view(unstable)
        codes |= {e for _, e in stable.values()} | {e for _, e in unstable.values()}
        obs["end_commit"] = txn.end(commit=True)
        resolved, _, seen = _wait_resolved(coord, group, topic, [0, 1])
        codes |= seen
        obs["stable_after_commit"] = _view(resolved)

        obs["add_offsets_2"] = txn.add_offsets(group)
        _, staged = txn.txn_offset_commit(group, topic, {0: 200}, lowest=0)
        obs["txn_offset_commit_2"] = {str(p): e for p, e in staged.items()}
        _, stable2 = offset_fetch(coord, group, topic, [0], require_stable=True, lowest=7)
        obs["stable_pending_2"] = _view(stable2)
        codes |= {e for _, e in stable2.values()}
        obs["end_abort"] = txn.end(commit=False)
        resolved, _, seen = _wait_resolved(coord, group, topic, [0])
        codes |= seen
        obs["stable_after_abort"] = _view(resolved)
    # TxnOffsetCommit answers too (not the transient coordinator answers RawTxn retried).
    codes |= {a["error_code"] for a in txn.answers if a["api"] == "TxnOffsetCommit"}
    obs["codes_seen"] = sorted(codes)
    return obs


@pytest.mark.requirement("KIP-447.FETCH.001", "KIP-447.ERR.001", "KIP-447.FETCH.003", "KIP-447.TXN.001")
def test_offset_fetch_require_stable_with_pending_txn_offsets(target, differential):
    """DIV-001 evidence: pending transactional offsets make a stable OffsetFetch answer
    UNSTABLE_OFFSET_COMMIT (88) with offset -1 for that partition only, until EndTxn; no
    answer ever carries the KIP text's PENDING_TRANSACTION (85)."""
    require_stable_fetch(target)
    obs = differential.run(pending_offsets_scenario, requirement="KIP-447.FETCH.001").target
    assert obs["seed_commit"] == [0, 0]
    assert obs["init"] == 0 and obs["add_offsets_1"] == 0
    assert obs["txn_offset_commit_1"] == {"0": 0}
    # FETCH.001 / ERR.001: retriable 88 and no offset on the pending partition.
    assert obs["stable_pending"]["0"] == [-1, UNSTABLE_OFFSET_COMMIT], obs["stable_pending"]
    # FETCH.003: the partition without pending offsets is answered normally.
    assert obs["stable_pending"]["1"] == [7, 0], obs["stable_pending"]
    # TXN.001 / FETCH.004 (commit): the marker resolves it to the transactional offset.
    assert obs["end_commit"] == 0
    assert obs["stable_after_commit"] == {"0": [100, 0], "1": [7, 0]}, obs["stable_after_commit"]
    assert obs["stable_pending_2"]["0"] == [-1, UNSTABLE_OFFSET_COMMIT], obs["stable_pending_2"]
    assert NO_REASSIGNMENT_IN_PROGRESS not in obs["codes_seen"], "an answer carried 85 (PENDING_TRANSACTION in the KIP text)"


@pytest.mark.requirement("KIP-447.FETCH.004")
def test_pending_offsets_resolve_on_commit_and_abort(target, differential):
    """After EndTxn(commit) the stable fetch returns the transactional offset, after
    EndTxn(abort) the previous committed offset."""
    require_stable_fetch(target)
    obs = differential.run(pending_offsets_scenario, requirement="KIP-447.FETCH.004").target
    assert obs["stable_pending"]["0"][1] == UNSTABLE_OFFSET_COMMIT, obs["stable_pending"]
    assert obs["stable_after_commit"]["0"] == [100, 0], obs["stable_after_commit"]
    assert obs["end_abort"] == 0 and obs["txn_offset_commit_2"] == {"0": 0}
    assert obs["stable_after_abort"] == {"0": [100, 0]}, "abort must restore the previous committed offset"


def unstable_fetch_scenario(target, ids):
    """Open transaction with pending p0=100 over committed 50: OffsetFetch without
    RequireStable (v7+) and at v6 (before RequireStable existed)."""
    topic, group, tid = ids.topic(), ids.group(), ids.transactional_id()
    confluent.create_topic(target, topic)
    obs: dict = {}
    with wire.cluster_client(target) as cc:
        coord = group_coordinator(cc, group, topic)
        obs["seed_commit"] = commit(coord, group, topic, 0, 50)
        txn = RawTxn(cc, tid)
        obs["init"] = txn.init()
        obs["add_offsets"] = txn.add_offsets(group)
        _, staged = txn.txn_offset_commit(group, topic, {0: 100}, lowest=0)
        obs["staged"] = staged[0]
        _, plain = offset_fetch(coord, group, topic, [0], require_stable=False, lowest=7)
        obs["v7plus_not_stable"] = list(plain[0])
        try:
            v, old = offset_fetch(coord, group, topic, [0], require_stable=False, highest=6, lowest=1)
            obs["old_version"] = v
            obs["old_version_answer"] = list(old[0])
        except NotSupportedByTarget:
            obs["old_version"] = None
        obs["end"] = txn.end(commit=False)
    return obs


@pytest.mark.requirement("KIP-447.FETCH.002", "KIP-447.FETCH.006")
def test_offset_fetch_without_require_stable_returns_last_committed(target, differential):
    require_stable_fetch(target)
    obs = differential.run(unstable_fetch_scenario, requirement="KIP-447.FETCH.002").target
    assert obs["seed_commit"] == 0 and obs["staged"] == 0
    assert obs["v7plus_not_stable"] == [50, 0], "RequireStable=false must return the last committed offset"
    if obs["old_version"] is not None:
        # FETCH.006: a client too old for the new error never gets it (Kafka: the offset).
        assert obs["old_version_answer"] == [50, 0], obs


def timeout_abort_scenario(target, ids):
    topic, group, tid = ids.topic(), ids.group(), ids.transactional_id()
    confluent.create_topic(target, topic)
    with wire.cluster_client(target) as cc:
        coord = group_coordinator(cc, group, topic)
        seed = commit(coord, group, topic, 0, 50)
        txn = RawTxn(cc, tid, timeout_ms=1000)
        txn.init()
        txn.add_offsets(group)
        _, staged = txn.txn_offset_commit(group, topic, {0: 100}, lowest=0)
        t0 = time.monotonic()
        _, first = offset_fetch(coord, group, topic, [0], require_stable=True, lowest=7)
        resolved, polls, codes = _wait_resolved(coord, group, topic, [0], timeout_s=20)
        waited = time.monotonic() - t0
    return {"seed": seed, "staged": staged[0], "first": list(first[0]), "resolved": list(resolved[0]),
            "codes": sorted(codes), "waited_s": round(waited, 1)}


@pytest.mark.requirement("KIP-447.FETCH.005")
def test_abandoned_pending_offsets_cleared_by_timeout_abort(target, differential):
    """A producer that vanishes with pending offsets: the coordinator aborts its transaction
    at the transaction timeout (1 s here) and the stable fetch returns the old offset."""
    require_stable_fetch(target)
    obs = differential.run(timeout_abort_scenario, ignore_keys=["waited_s"]).target
    assert obs["seed"] == 0 and obs["staged"] == 0
    assert obs["first"] == [-1, UNSTABLE_OFFSET_COMMIT], obs
    assert obs["resolved"] == [50, 0], f"pending offsets not cleared by the timeout abort: {obs}"
    assert NO_REASSIGNMENT_IN_PROGRESS not in obs["codes"]


@pytest.mark.requirement("KIP-447.FETCH.007")
def test_read_committed_consumer_waits_for_pending_offsets(target, unique):
    """Client level: a read_committed confluent-kafka consumer assigned a partition whose group
    has pending transactional offsets neither starts from the old committed offset nor returns
    records until the transaction ends; then it starts at the resolved offset."""
    from confluent_kafka import Consumer, TopicPartition

    require_stable_fetch(target)
    topic, group = unique.topic(), unique.group()
    confluent.create_topic(target, topic)
    confluent.produce(target, topic, [{"value": b"%d" % i} for i in range(110)], flush_between=50)
    with wire.cluster_client(target) as cc:
        coord = group_coordinator(cc, group, topic)
        assert commit(coord, group, topic, 0, 50) == 0
        txn = RawTxn(cc, unique.transactional_id())
        assert txn.init() == 0 and txn.add_offsets(group) == 0
        assert txn.txn_offset_commit(group, topic, {0: 100}, lowest=0)[1] == {0: 0}
        consumer = Consumer(confluent.config(target, **{
            "group.id": group, "enable.auto.commit": False, "isolation.level": "read_committed",
            "auto.offset.reset": "earliest"}))
        try:
            consumer.assign([TopicPartition(topic, 0)])
            early = []
            t_end = time.monotonic() + 2.0
            while time.monotonic() < t_end:
                m = consumer.poll(0.2)
                if m is not None and not m.error():
                    early.append(m.offset())
            assert txn.end(commit=True) == 0
            first = None
            t_end = time.monotonic() + 20
            while first is None and time.monotonic() < t_end:
                m = consumer.poll(0.2)
                if m is not None and not m.error():
                    first = m.offset()
        finally:
            consumer.close()
    assert not early, f"records returned while offsets were pending, from offset {early[:1]}"
    assert first == 100, f"consumption started at {first}, not at the resolved offset 100"


def two_producers_scenario(target, ids):
    """Committed p0=50, p1=7. Producer A stages p0=100, producer B stages p1=200 (partitions
    moved between producers of one group); A aborts, then B commits."""
    topic, group = ids.topic(), ids.group()
    confluent.create_topic(target, topic, partitions=2)
    obs: dict = {}
    with wire.cluster_client(target) as cc:
        coord = group_coordinator(cc, group, topic)
        obs["seed_commit"] = [_seed(coord, group, topic, 0, 50), _seed(coord, group, topic, 1, 7)]
        a, b = RawTxn(cc, ids.transactional_id()), RawTxn(cc, ids.transactional_id())
        obs["init"] = [a.init(), b.init()]
        obs["add_offsets"] = [a.add_offsets(group), b.add_offsets(group)]
        obs["staged"] = [a.txn_offset_commit(group, topic, {0: 100}, lowest=0)[1],
                         b.txn_offset_commit(group, topic, {1: 200}, lowest=0)[1]]
        _, both = offset_fetch(coord, group, topic, [0, 1], require_stable=True, lowest=7)
        obs["both_pending"] = _view(both)
        obs["end_a_abort"] = a.end(commit=False)
        # A's marker resolves p0; p1 must stay pending (B is still open).
        resolved_a, _, _ = _wait_resolved(coord, group, topic, [0])
        _, after_a = offset_fetch(coord, group, topic, [0, 1], require_stable=True, lowest=7)
        obs["after_a_abort"] = {"p0": list(resolved_a[0]), **_view(after_a)}
        obs["end_b_commit"] = b.end(commit=True)
        resolved_b, _, _ = _wait_resolved(coord, group, topic, [0, 1])
        obs["after_b_commit"] = _view(resolved_b)
    return obs


@pytest.mark.requirement("KIP-447.FETCH.008", "KIP-447.FETCH.004")
def test_abort_of_one_producer_keeps_another_producers_pending_offsets(target, differential):
    """KIP-447.FETCH.008: pending offsets are per producer. A's abort restores p0 to 50 and
    leaves B's pending p1 pending (UNSTABLE_OFFSET_COMMIT); B's later commit makes p1 200."""
    require_stable_fetch(target)
    obs = differential.run(two_producers_scenario, requirement="KIP-447.FETCH.008").target
    assert obs["seed_commit"] == [0, 0] and obs["init"] == [0, 0] and obs["add_offsets"] == [0, 0], obs
    assert obs["staged"] == [{0: 0}, {1: 0}], obs
    assert obs["both_pending"] == {"0": [-1, UNSTABLE_OFFSET_COMMIT], "1": [-1, UNSTABLE_OFFSET_COMMIT]}, obs
    assert obs["end_a_abort"] == 0 and obs["end_b_commit"] == 0, obs
    # KIP-447.FETCH.004: A's abort restores A's partition to the previous committed offset.
    assert obs["after_a_abort"]["p0"] == [50, 0], obs
    assert obs["after_a_abort"]["1"] == [-1, UNSTABLE_OFFSET_COMMIT], (
        f"KIP-447.FETCH.008: producer A's abort resolved producer B's pending offset of p1: {obs}")
    assert obs["after_b_commit"] == {"0": [50, 0], "1": [200, 0]}, (
        f"KIP-447.FETCH.008: B's commit must make its pending p1=200 the committed offset: {obs}")
