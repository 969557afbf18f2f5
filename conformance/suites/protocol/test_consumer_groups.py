"""Classic consumer-group offsets: raw wire checks and confluent-kafka commit/committed."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition
from kio.schema.errors import ErrorCode

from clients import confluent, wire
from targets.target import NotSupportedByTarget


def standalone_commit_scenario(target, ids):
    topic, group = ids.topic(), ids.group()
    confluent.create_topic(target, topic, partitions=2)
    with wire.cluster_client(target) as cc:
        coord, commit = wire.offset_commit_when_loaded(cc, group, topic, 0, 42, metadata="m-42")
        fetched = wire.offset_fetch(coord, group, topic, [0, 1])
    return {
        "commit_error": commit,
        "p0": list(fetched[0]),
        "p1": list(fetched[1]),
    }


@pytest.mark.requirement("PROTO.GROUP.001", "PROTO.GROUP.002")
def test_standalone_commit_then_fetch(differential):
    obs = differential.run(standalone_commit_scenario, requirement="PROTO.GROUP.001").target
    assert obs["commit_error"] == 0
    assert obs["p0"] == [42, "m-42", 0]
    assert obs["p1"][0] == -1 and obs["p1"][2] == 0, "uncommitted partition must read -1 without error"


def not_coordinator_scenario(target, ids):
    topic, group = ids.topic(), ids.group()
    confluent.create_topic(target, topic)
    with wire.cluster_client(target) as cc:
        coord = cc.coordinator_for(group, wait_s=30)
        others = [n for n in cc.nodes if cc.node(n) is not coord and (cc.node(n).host, cc.node(n).port) != (coord.host, coord.port)]
        if not others:
            raise NotSupportedByTarget("single-broker target: every broker coordinates every group")
        other = cc.node(others[0])
        commit = wire.offset_commit(other, group, topic, 0, 1)
        try:
            wire.offset_fetch(other, group, topic, [0])
            fetch_error = 0
        except wire.GroupError as exc:
            fetch_error = exc.error_code
    return {"commit_error": commit, "fetch_error": fetch_error, "coordinator_known": True}


@pytest.mark.requirement("PROTO.GROUP.003")
def test_group_requests_to_non_coordinator(differential):
    obs = differential.run(not_coordinator_scenario).target
    assert obs["commit_error"] == ErrorCode.not_coordinator
    assert obs["fetch_error"] == ErrorCode.not_coordinator


def generation_fencing_scenario(target, ids):
    topic, group = ids.topic(), ids.group()
    confluent.create_topic(target, topic)
    with wire.cluster_client(target) as cc:
        coord = cc.coordinator_for(group, wait_s=30)
        join = wire.join_group(coord, group, topic=topic)
        gen, member = int(join.generation_id), join.member_id
        sync = wire.sync_group(coord, group, gen, member, {member: b""})
        unknown = wire.offset_commit(coord, group, topic, 0, 5, generation=gen, member_id="not-a-member")
        stale = wire.offset_commit(coord, group, topic, 0, 6, generation=gen + 7, member_id=member)
        good = wire.offset_commit(coord, group, topic, 0, 9, generation=gen, member_id=member)
        committed = wire.offset_fetch(coord, group, topic, [0])[0][0]
    return {
        "join_error": int(join.error_code),
        "sync_error": int(sync.error_code),
        "unknown_member": unknown,
        "stale_generation": stale,
        "current": good,
        "committed": committed,
    }


@pytest.mark.requirement("PROTO.GROUP.004")
def test_commit_fenced_by_member_and_generation(differential):
    obs = differential.run(generation_fencing_scenario).target
    assert obs["join_error"] == 0 and obs["sync_error"] == 0
    assert obs["unknown_member"] == ErrorCode.unknown_member_id
    assert obs["stale_generation"] == ErrorCode.illegal_generation
    assert obs["current"] == 0
    assert obs["committed"] == 9, "a rejected commit changed the committed offset"


@pytest.mark.requirement("PROTO.GROUP.001")
def test_consumer_commit_visible_to_next_member(target, unique):
    topic, group = unique.topic(), unique.group()
    confluent.create_topic(target, topic)
    confluent.produce(target, topic, [{"value": b"%d" % i} for i in range(5)])
    first = confluent.subscribed_consumer(target, group, topic)
    try:
        got = first.poll_count(3)
        first.consumer.commit(offsets=[TopicPartition(topic, 0, got[-1].offset() + 1)], asynchronous=False)
    finally:
        first.close()
    second = confluent.subscribed_consumer(target, group, topic)
    try:
        committed = second.consumer.committed([TopicPartition(topic, 0)], timeout=10)
        nxt = second.poll_count(1)[0]
    finally:
        second.close()
    assert committed[0].offset == 3
    assert nxt.offset() == 3, "the next member did not resume from the committed offset"
