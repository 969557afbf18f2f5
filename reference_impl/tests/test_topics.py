"""TopicRegistry: validation, ids, placement, leadership, deletion, fetch session cache."""

from __future__ import annotations

import uuid
from collections import OrderedDict

import pytest
from kio.schema.errors import ErrorCode

from reference_impl.model.broker_state import BrokerConfig
from reference_impl.model.clock import ManualClock
from reference_impl.model.topics import (
    CachedPartition,
    CreatableTopicSpec,
    FetchSessionCache,
    TopicError,
    TopicRegistry,
    next_epoch,
    topic_name_error,
)
from reference_impl.protocol.records import TimestampType


def registry(nodes=(1,), **cfg) -> TopicRegistry:
    return TopicRegistry(list(nodes), ManualClock(), BrokerConfig(**cfg))


def test_create_and_lookup() -> None:
    reg = registry()
    res = reg.create("orders", num_partitions=3)
    assert res.error_code == ErrorCode.none and res.num_partitions == 3 and res.replication_factor == 1
    t = reg.get("orders")
    assert t is not None and reg.by_id(t.topic_id) is t and res.topic_id == t.topic_id
    assert [p.index for p in t.partitions] == [0, 1, 2]
    assert reg.leader_for("orders", 2) == 1
    assert reg.names() == ["orders"] and "orders" in reg
    with pytest.raises(TopicError) as exc:
        reg.leader_for("orders", 3)
    assert exc.value.error_code == ErrorCode.unknown_topic_or_partition


def test_topic_ids_are_deterministic_and_unique() -> None:
    a, b = registry(), registry()
    ids = [a.create(f"t{i}").topic_id for i in range(20)]
    assert ids == [b.create(f"t{i}").topic_id for i in range(20)]
    assert len(set(ids)) == 20 and all(i.int not in (0, 1) for i in ids)
    first = a.get("t0").topic_id
    a.delete("t0")
    assert a.create("t0").topic_id != first  # a re-created topic gets a new id


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "bad name", "ü", "a/b"])
def test_invalid_names(name: str) -> None:
    assert topic_name_error(name) is not None
    with pytest.raises(TopicError) as exc:
        registry().create(name)
    assert exc.value.error_code == ErrorCode.invalid_topic_exception


def test_valid_name_edge_cases() -> None:
    assert topic_name_error("a" * 249) is None
    assert topic_name_error("A-b_c.9") is None


def test_already_exists_and_collision() -> None:
    reg = registry()
    reg.create("a.b")
    with pytest.raises(TopicError) as exc:
        reg.create("a.b")
    assert exc.value.error_code == ErrorCode.topic_already_exists
    with pytest.raises(TopicError) as exc:
        reg.create("a_b")
    assert exc.value.error_code == ErrorCode.invalid_topic_exception


@pytest.mark.parametrize(
    "kw, code",
    [
        (dict(num_partitions=0), ErrorCode.invalid_partitions),
        (dict(num_partitions=-2), ErrorCode.invalid_partitions),
        (dict(replication_factor=0), ErrorCode.invalid_replication_factor),
        (dict(replication_factor=2), ErrorCode.invalid_replication_factor),
        (dict(configs={"no.such.config": "1"}), ErrorCode.invalid_config),
        (dict(configs={"max.message.bytes": "abc"}), ErrorCode.invalid_config),
        (dict(configs={"cleanup.policy": None}), ErrorCode.invalid_config),
        (dict(assignments={0: [1]}, num_partitions=1), ErrorCode.invalid_request),
        (dict(assignments={0: [9]}), ErrorCode.invalid_replica_assignment),
        (dict(assignments={1: [1]}), ErrorCode.invalid_replica_assignment),
        (dict(assignments={0: [1, 1]}), ErrorCode.invalid_replica_assignment),
    ],
)
def test_create_validation(kw: dict, code: ErrorCode) -> None:
    reg = registry()
    with pytest.raises(TopicError) as exc:
        reg.create("t", **kw)
    assert exc.value.error_code == code
    assert "t" not in reg


def test_defaults_and_validate_only() -> None:
    reg = registry(num_partitions=4)
    res = reg.create("t", validate_only=True)
    assert res.error_code == ErrorCode.none and res.num_partitions == 4 and "t" not in reg
    reg.create("t")
    assert len(reg.get("t").partitions) == 4


def test_create_topics_batch_with_duplicates() -> None:
    reg = registry()
    results = reg.create_topics(
        [CreatableTopicSpec("x"), CreatableTopicSpec("x"), CreatableTopicSpec("y", num_partitions=0), CreatableTopicSpec("z")]
    )
    assert [(r.name, r.error_code) for r in results] == [
        ("x", ErrorCode.invalid_request),
        ("x", ErrorCode.invalid_request),
        ("y", ErrorCode.invalid_partitions),
        ("z", ErrorCode.none),
    ]
    assert reg.names() == ["z"]


def test_configs_reach_the_log() -> None:
    reg = registry()
    res = reg.create(
        "t", configs={"message.timestamp.type": "LogAppendTime", "max.message.bytes": "2000", "cleanup.policy": "compact"}
    )
    log = reg.log("t", 0)
    assert log.config.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert log.config.max_message_bytes == 2000 and log.config.compacted
    by_name = {n: (v, d) for n, v, d in res.configs}
    assert by_name["max.message.bytes"] == ("2000", False)
    assert by_name["retention.ms"] == ("604800000", True)


def test_round_robin_placement_over_three_nodes() -> None:
    reg = registry(nodes=(3, 1, 2))
    reg.create("a", num_partitions=4)
    reg.create("b", num_partitions=3, replication_factor=3)
    assert [p.leader for p in reg.get("a").partitions] == [1, 2, 3, 1]
    b = reg.get("b").partitions
    assert [p.leader for p in b] == [2, 3, 1]
    assert b[0].replicas == (2, 3, 1) and b[0].isr == (2, 3, 1)
    # Deterministic: another registry places the same way.
    other = registry(nodes=(1, 2, 3))
    other.create("a", num_partitions=4)
    assert [p.leader for p in other.get("a").partitions] == [1, 2, 3, 1]


def test_manual_assignment() -> None:
    reg = registry(nodes=(1, 2, 3))
    reg.create("m", assignments={0: [3, 1], 1: [2, 3]})
    parts = reg.get("m").partitions
    assert [(p.replicas, p.leader) for p in parts] == [((3, 1), 3), ((2, 3), 2)]


def test_leadership_follows_liveness() -> None:
    reg = registry(nodes=(1, 2, 3))
    reg.create("r3", num_partitions=1, replication_factor=3)  # replicas (1, 2, 3)
    reg.create("r1", num_partitions=3)  # leaders 2, 3, 1
    p = reg.get("r3").partitions[0]
    assert (p.leader, p.leader_epoch) == (1, 0)
    assert reg.sync_liveness({2, 3})
    assert (p.leader, p.leader_epoch, p.isr, p.offline_replicas) == (2, 1, (2, 3), (1,))
    assert p.log.leader_epoch == 1
    single = reg.get("r1").partitions[2]
    assert (single.leader, single.leader_epoch) == (-1, 1)
    assert not reg.sync_liveness({2, 3})  # no change, no epoch bump
    reg.sync_liveness({1, 2, 3})
    assert (p.leader, p.leader_epoch, p.isr) == (2, 1, (1, 2, 3))  # a live leader stays
    assert (single.leader, single.leader_epoch) == (1, 2)
    with pytest.raises(TopicError) as exc:
        reg.create("x", replication_factor=3) if reg.sync_liveness({1, 2}) else None
    assert exc.value.error_code == ErrorCode.invalid_replication_factor


def test_delete_by_name_and_id() -> None:
    reg = registry()
    a = reg.create("a").topic_id
    reg.create("b")
    assert reg.delete(topic_id=a).name == "a"
    assert reg.by_id(a) is None
    assert reg.delete(name="b").name == "b"
    for kwargs, code in [
        (dict(name="nope"), ErrorCode.unknown_topic_or_partition),
        (dict(topic_id=uuid.uuid4()), ErrorCode.unknown_topic_id),
        (dict(), ErrorCode.invalid_request),
        (dict(name="x", topic_id=uuid.uuid4()), ErrorCode.invalid_request),
    ]:
        with pytest.raises(TopicError) as exc:
            reg.delete(**kwargs)
        assert exc.value.error_code == code


def test_auto_create() -> None:
    reg = registry(num_partitions=2)
    assert reg.auto_create("fresh") == ErrorCode.leader_not_available
    assert len(reg.get("fresh").partitions) == 2
    assert reg.auto_create("fresh") == ErrorCode.none
    assert reg.auto_create("bad name") == ErrorCode.invalid_topic_exception


def test_fetch_session_cache() -> None:
    cache = FetchSessionCache(1, max_entries=2, eviction_ms=1000)
    parts = OrderedDict({("t", 0): CachedPartition("t", None, 0, 100, 0, -1, -1, -1)})
    s1 = cache.create(0, False, parts)
    s2 = cache.create(0, False, OrderedDict(parts))
    assert s1 != s2 and 0 not in (s1, s2)
    assert cache.get(s1).epoch == 1
    assert cache.create(500, False, OrderedDict()) == 0  # full, nothing stale
    cache.touch(cache.get(s2), 900)
    s3 = cache.create(1500, False, OrderedDict())  # s1 is stale and evicted
    assert s3 not in (0, s1, s2) and cache.get(s1) is None and cache.get(s2) is not None
    assert next_epoch(1) == 2 and next_epoch(2**31 - 1) == 1 and next_epoch(-1) == -1
