"""KIP-932's share consumer API, through confluent-kafka's ShareConsumer (librdkafka): a
share consumer only subscribes (no assign; an empty subscription leaves the group's
assignment), a synchronous commit answers per share-partition, and asynchronous results
reach the application only through the acknowledgement commit callback, run on the
application thread. (Calling the consumer from inside the callback aborted the process with
confluent-kafka 2.16.1 instead of raising: not probed.)

Kafka's KafkaShareConsumer has the same contract (commitSync -> Map<TopicIdPartition,
Optional<KafkaException>>, AcknowledgementCommitCallback). Every wait is bounded.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from confluent_kafka import IllegalStateException, Producer
from confluent_kafka import ShareConsumer as ConfluentShareConsumer

from clients import confluent, share, wire
from conformance import target_limits
from conformance.suites.kip932.test_membership import coordinator, describe
from conformance.suites.kip932.test_sessions import require_share_groups

DEADLINE_S = 60.0
SHORT_LOCK_MS = 1000


def produce(target: Any, topic: str, per_partition: dict[int, int]) -> None:
    producer = Producer(target.client_config())
    for p, n in per_partition.items():
        for i in range(n):
            producer.produce(topic, value=b"v%d" % i, partition=p)
    assert producer.flush(30) == 0


def share_consumer(target: Any, group: str, **extra: Any) -> ConfluentShareConsumer:
    return ConfluentShareConsumer({**target.client_config(), "group.id": group, **extra})


def earliest_group(target: Any, cc, group: str) -> None:
    share.set_group_configs_if_known(cc, group, {"share.auto.offset.reset": "earliest"})


@pytest.mark.requirement("KIP-932.CLIENT.001")
def test_share_consumer_only_subscribes_and_an_empty_subscription_leaves(target, unique):
    """Subscribed, a share consumer is a member with an assignment and gets records; subscribe([]) takes it out of the group's assignment (it is gone
    from ShareGroupDescribe or described with nothing assigned)."""
    require_share_groups(target)
    topic, group = unique.topic(), unique.group()
    confluent.create_topic(target, topic, 1)
    with wire.cluster_client(target) as cc:
        earliest_group(target, cc, group)
        produce(target, topic, {0: 3})
        c = share_consumer(target, group)
        try:
            c.subscribe([topic])
            got = []
            deadline = time.monotonic() + DEADLINE_S
            while len(got) < 3 and time.monotonic() < deadline:
                got += [m for m in c.poll(0.5) if m.error() is None]
            assert len(got) == 3, got
            coord = coordinator(cc, group)
            d = describe(coord, group)
            assert len(d.members) == 1 and any(t.partitions for t in d.members[0].assignment.topic_partitions), d
            c.subscribe([])
            assert list(c.subscription()) == []
            with pytest.raises(IllegalStateException):
                c.poll(0.2)  # KafkaShareConsumer.poll without a subscription: IllegalStateException
            deadline = time.monotonic() + DEADLINE_S
            while True:
                d = describe(coord, group)
                if all(not any(t.partitions for t in m.assignment.topic_partitions) for m in d.members):
                    break
                assert time.monotonic() < deadline, d
                time.sleep(0.2)  # polling the coordinator for the condition
        finally:
            c.close()


@pytest.mark.requirement("KIP-932.CLIENT.006", "KIP-932.CLIENT.007")
def test_commit_sync_answers_per_partition_and_the_callback_gets_the_offsets(target, unique):
    """Explicit mode, records on two partitions, each acknowledged ACCEPT: commit_sync
    answers every partition that had acknowledgements, with no exception; the registered
    callback gets exactly the acknowledged offsets per partition with no exception, on the
    application thread (inside poll / commit_sync, never a background thread)."""
    require_share_groups(target)
    topic, group = unique.topic(), unique.group()
    confluent.create_topic(target, topic, 2)
    with wire.cluster_client(target) as cc:
        earliest_group(target, cc, group)
    produce(target, topic, {0: 2, 1: 2})
    c = share_consumer(target, group, **{"share.acknowledgement.mode": "explicit"})
    seen: dict[tuple[str, int], set[int]] = {}
    errors: list[Any] = []
    threads: list[int] = []

    def callback(offsets: dict, exc: Any) -> None:
        errors.append(exc)
        for tp, offs in offsets.items():
            seen.setdefault((tp.topic, tp.partition), set()).update(offs)
        threads.append(threading.get_ident())

    try:
        c.set_acknowledgement_commit_callback(callback)
        c.subscribe([topic])
        acked: dict[tuple[str, int], set[int]] = {}
        results: dict[tuple[str, int], Any] = {}
        deadline = time.monotonic() + DEADLINE_S
        while sum(map(len, acked.values())) < 4 and time.monotonic() < deadline:
            batch = [m for m in c.poll(0.5) if m.error() is None]
            for m in batch:
                c.acknowledge(m)
                acked.setdefault((m.topic(), m.partition()), set()).add(m.offset())
            if batch:
                for tp, exc in c.commit_sync(30).items():
                    results[(tp.topic, tp.partition)] = exc
        assert acked == {(topic, 0): {0, 1}, (topic, 1): {0, 1}}, acked
        assert set(results) == set(acked) and all(exc is None for exc in results.values()), results
        deadline = time.monotonic() + DEADLINE_S
        while seen != acked and time.monotonic() < deadline:
            c.poll(0.2)
        assert seen == acked, (seen, acked)
        assert errors and all(e is None for e in errors), errors
        assert threads and set(threads) == {threading.get_ident()}, threads
    finally:
        c.set_acknowledgement_commit_callback(None)
        c.close()


@pytest.mark.requirement("KIP-932.CLIENT.006", "KIP-932.LOCK.002")
def test_commit_sync_reports_the_error_of_a_failed_acknowledgement(target, unique):
    """KIP-932.CLIENT.006 on failure: explicit mode, the group's lock shortened; the
    consumer holds two records past their lock (LOCK.002: acknowledging them now is
    INVALID_RECORD_STATE), then acknowledges them and commits: commit_sync answers the
    partition with an exception, not success, and the callback (if it fires) carries an
    error too."""
    require_share_groups(target)
    lock_ms = target_limits.lock_ms(target, SHORT_LOCK_MS)
    topic, group = unique.topic(), unique.group()
    confluent.create_topic(target, topic, 1)
    with wire.cluster_client(target) as cc:
        share.set_group_configs_if_known(cc, group, {"share.auto.offset.reset": "earliest",
                                                     "share.record.lock.duration.ms": str(lock_ms)})
    produce(target, topic, {0: 2})
    c = share_consumer(target, group, **{"share.acknowledgement.mode": "explicit"})
    errors: list[Any] = []
    try:
        c.set_acknowledgement_commit_callback(lambda offsets, exc: errors.append(exc))
        c.subscribe([topic])
        got = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < 2 and time.monotonic() < deadline:
            got += [m for m in c.poll(0.5) if m.error() is None]
        assert sorted(m.offset() for m in got) == [0, 1], got
        time.sleep(lock_ms / 1000 + 1.0)  # the locks expire; nothing fetches while records are unacknowledged
        for m in got:
            c.acknowledge(m)
        results = {(tp.topic, tp.partition): exc for tp, exc in c.commit_sync(30).items()}
        assert set(results) == {(topic, 0)}, results
        assert results[(topic, 0)] is not None, "acknowledgements after the lock expired were reported as committed"
        assert all(e is not None for e in errors), errors
    finally:
        c.set_acknowledgement_commit_callback(None)
        c.close()
