"""DeleteRecords on the reference broker (handlers/delete_records.py): the low watermark moves
on the partition leader, -1 means the high watermark, an offset past it is
OFFSET_OUT_OF_RANGE, another node is NOT_LEADER_OR_FOLLOWER, an unknown topic
UNKNOWN_TOPIC_OR_PARTITION; a fetch below the new log start is then out of range."""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode

from reference_impl.client.raw_client import ClusterClient
from reference_impl.protocol import records as r
from reference_impl.protocol.api_keys import ApiKey
from reference_impl.tests.test_data_path_wire import (
    create_topic, fetch, leader_of, nested, partitions_of, produce, topic_id, unique,
)

DELETE_RECORDS = ApiKey.DELETE_RECORDS


def delete_records(client: ClusterClient, node_id: int, topic: str, offset: int) -> tuple[int, int]:
    """(error code, low watermark) of one partition's DeleteRecords sent to `node_id`."""
    resp = client.node(node_id).request(
        DELETE_RECORDS, 2, timeout=datetime.timedelta(seconds=10),
        topics=(nested(DELETE_RECORDS, 2, "DeleteRecordsTopic", name=topic, partitions=(
            nested(DELETE_RECORDS, 2, "DeleteRecordsPartition", partition_index=0, offset=offset),)),),
    )
    part = resp.topics[0].partitions[0]
    return int(part.error_code), int(part.low_watermark)


def test_delete_records_moves_the_log_start(client: ClusterClient) -> None:
    topic = unique("dr")
    create_topic(client, topic)
    node = client.leader_for(topic, 0)
    for i in range(10):
        produce(node, topic, r.build_batch([b"v%d" % i]))
    leader = leader_of(client, topic)
    assert delete_records(client, leader, topic, 4) == (ErrorCode.none, 4)
    assert delete_records(client, leader, topic, 2) == (ErrorCode.none, 4), "the log start never moves back"
    assert delete_records(client, leader, topic, 11)[0] == ErrorCode.offset_out_of_range
    tid = topic_id(client, topic)
    assert partitions_of(fetch(node, [(tid, 0, 3)]))[(tid, 0)].error_code == ErrorCode.offset_out_of_range
    assert partitions_of(fetch(node, [(tid, 0, 4)]))[(tid, 0)].error_code == ErrorCode.none
    assert delete_records(client, leader, topic, -1) == (ErrorCode.none, 10)
    assert delete_records(client, leader, unique("missing"), 0)[0] == ErrorCode.unknown_topic_or_partition


def test_delete_records_on_a_follower_is_not_leader(client3: ClusterClient) -> None:
    topic = unique("dr")
    create_topic(client3, topic)
    produce(client3.leader_for(topic, 0), topic, r.build_batch([b"v"]))
    leader = leader_of(client3, topic)
    other = next(n for n in sorted(client3.nodes) if n != leader)
    assert delete_records(client3, other, topic, 1)[0] == ErrorCode.not_leader_or_follower
