"""The capture proxy's hot path: endpoint proofs without decoding, cut-through splitting,
the batched hand-off to the writer (issue 13 item 4)."""

from __future__ import annotations

import datetime
import uuid

import pytest
from kio.schema.errors import ErrorCode

from reference_impl.protocol import framing, payloads
from replay import address_rewrite

ZERO = datetime.timedelta(0)
RECORDS = b"\x00" * 61 + b"r" * 300  # opaque to the walk: skipped by its length


def _resp(key: int, ver: int, **fields):
    return payloads.build(framing.response_schema(key, ver), **fields)


def _nested(key: int, ver: int, cls_name: str, /, **fields):
    return payloads.build(payloads.nested(framing.response_schema(key, ver), cls_name), **fields)


def _fetch(ver: int, endpoints: bool, leader: bool):
    part = _nested(1, ver, "PartitionData", partition_index=0, error_code=ErrorCode.none, high_watermark=5,
                   last_stable_offset=5, log_start_offset=0, aborted_transactions=(), preferred_read_replica=-1,
                   records=RECORDS, current_leader=_nested(1, ver, "LeaderIdAndEpoch", leader_id=2, leader_epoch=3)
                   if leader else _nested(1, ver, "LeaderIdAndEpoch", leader_id=-1, leader_epoch=-1))
    topic = _nested(1, ver, "FetchableTopicResponse", topic_id=uuid.uuid4(), partitions=(part, part))
    eps = (_nested(1, ver, "NodeEndpoint", node_id=2, host="b2", port=9093, rack=None),) if endpoints else ()
    return _resp(1, ver, throttle_time=ZERO, error_code=ErrorCode.none, session_id=7, responses=(topic,),
                 node_endpoints=eps)


def _produce(ver: int, endpoints: bool, leader: bool):
    part = _nested(0, ver, "PartitionProduceResponse", index=0, error_code=ErrorCode.none, base_offset=1,
                   log_append_time=None, log_start_offset=0, record_errors=(), error_message="x",
                   current_leader=_nested(0, ver, "LeaderIdAndEpoch", leader_id=2 if leader else -1,
                                          leader_epoch=1 if leader else -1))
    topic = _nested(0, ver, "TopicProduceResponse", name="t", topic_id=uuid.uuid4(), partition_responses=(part,))
    eps = (_nested(0, ver, "NodeEndpoint", node_id=2, host="b2", port=9093, rack="r"),) if endpoints else ()
    return _resp(0, ver, responses=(topic,), throttle_time=ZERO, node_endpoints=eps)


def _supported(key: int, versions) -> list[int]:
    out = []
    for v in versions:
        try:
            framing.response_schema(key, v)
            out.append(v)
        except framing.UnsupportedApi:
            pass
    return out


@pytest.mark.parametrize("key,build,versions", [(1, _fetch, _supported(1, range(16, 20))),
                                                (0, _produce, _supported(0, range(10, 15)))])
def test_tagged_endpoints_are_found_without_decoding(key, build, versions) -> None:
    assert versions
    for ver in versions:
        for leader in (False, True):  # partition-level tags must be skipped, not mistaken
            for endpoints in (False, True):
                frame = framing.encode_response(build(ver, endpoints, leader), 42, key, ver)[4:]
                assert address_rewrite.may_carry_endpoints(frame, key, ver) is endpoints, (ver, leader, endpoints)
                # a truncated or garbled frame is never proven endpoint-free
                assert address_rewrite.may_carry_endpoints(frame[:-3], key, ver)


def test_endpoint_proof_decodes_what_it_cannot_walk() -> None:
    meta = _resp(3, 12, throttle_time=ZERO, brokers=(), cluster_id=None, controller_id=1, topics=())
    assert address_rewrite.may_carry_endpoints(framing.encode_response(meta, 1, 3, 12)[4:], 3, 12)
    assert not address_rewrite.may_carry_endpoints(b"\x00\x00\x00\x01", 18, 3)  # ApiVersions: never
    assert not address_rewrite.may_carry_endpoints(b"\x00\x00\x00\x01", 1, 15)  # Fetch v15: no endpoint field
