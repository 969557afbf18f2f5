"""ListOffsets earliest / latest / by timestamp (raw protocol client)."""

from __future__ import annotations

import pytest

from clients import confluent, wire
from reference_impl.protocol import records

T0 = 1_700_000_000_000


def list_offsets_scenario(target, ids):
    topic = ids.topic()
    confluent.create_topic(target, topic)
    with wire.cluster_client(target) as cc:
        leader = cc.leader_for(topic, 0)
        empty = (wire.list_offset(leader, topic, 0, -2), wire.list_offset(leader, topic, 0, -1))
        for i in range(3):  # offsets 0..5, timestamps T0 + 0,10,..,50
            batch = records.build_batch(
                [records.NewRecord(value=b"v", timestamp=T0 + (2 * i + j) * 10) for j in range(2)],
                timestamp_ms=T0 + 2 * i * 10,
            )
            wire.produce(leader, topic, 0, batch)
        earliest = wire.list_offset(leader, topic, 0, -2)
        latest = wire.list_offset(leader, topic, 0, -1)
        by_ts = wire.list_offset(leader, topic, 0, T0 + 25)
        exact = wire.list_offset(leader, topic, 0, T0 + 40)
        after = wire.list_offset(leader, topic, 0, T0 + 10_000)
    return {
        "empty": [int(empty[0].offset), int(empty[1].offset)],
        "earliest": int(earliest.offset),
        "latest": int(latest.offset),
        "by_ts": [int(by_ts.offset), int(by_ts.timestamp)],
        "exact": [int(exact.offset), int(exact.timestamp)],
        "after": [int(after.offset), int(after.timestamp)],
        "errors": [int(x.error_code) for x in (earliest, latest, by_ts, exact, after)],
    }


@pytest.mark.requirement("PROTO.LISTOFF.001")
def test_list_offsets_earliest_and_latest(differential):
    obs = differential.run(list_offsets_scenario, ignore_keys=("by_ts", "exact", "after", "errors")).target
    assert obs["errors"][:2] == [0, 0]
    assert obs["empty"] == [0, 0]
    assert obs["earliest"] == 0 and obs["latest"] == 6


@pytest.mark.requirement("PROTO.LISTOFF.002")
def test_list_offsets_by_timestamp(differential):
    obs = differential.run(list_offsets_scenario, ignore_keys=("empty", "earliest", "latest")).target
    assert obs["errors"][2:] == [0, 0, 0]
    assert obs["by_ts"] == [3, T0 + 30]
    assert obs["exact"] == [4, T0 + 40]
    assert obs["after"] == [-1, -1]


@pytest.mark.requirement("PROTO.LISTOFF.001")
def test_watermarks_through_confluent_kafka(target, unique):
    topic = unique.topic()
    confluent.create_topic(target, topic)
    confluent.produce(target, topic, [{"value": b"a"}, {"value": b"b"}])
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(confluent.config(target, **{"group.id": unique.group()}))
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        c.close()
    assert (low, high) == (0, 2)
