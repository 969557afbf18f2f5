"""KIP-1289 wire schemas: the generated classes are what codegen makes of the committed JSON,
and kio's serializer/parser round-trip them through the project's framing."""

from __future__ import annotations

import datetime
import uuid

from kio.schema.errors import ErrorCode

from reference_impl.protocol import framing, payloads
from reference_impl.protocol.schemas import codegen, lookup

KEY = 93


def test_regenerating_produces_the_committed_modules():
    for path, text in codegen.outputs().items():
        assert path.exists(), f"{path} missing: run python -m reference_impl.protocol.schemas.codegen"
        assert path.read_text() == text, f"{path} differs from codegen output"


def test_framing_finds_api_93_through_the_registry_only_for_v0():
    assert framing.request_schema(KEY, 0) is lookup(KEY, 0, "request")
    assert framing.response_schema(KEY, 0).__name__ == "TxnShareAcknowledgeResponse"
    assert framing.is_flexible(KEY, 0) and framing.response_header_version(KEY, 0) == 1
    for bad in ((KEY, 1), (94, 0)):
        try:
            framing.request_schema(*bad)
        except framing.UnsupportedApi:
            continue
        raise AssertionError(f"{bad} should be unsupported")


def _request():
    cls = framing.request_schema(KEY, 0)
    batch = payloads.build(payloads.nested(cls, "TxnShareAcknowledgeBatch"), first_offset=10, last_offset=12,
                           acknowledge_types=(1, 3, 1))
    part = payloads.build(payloads.nested(cls, "TxnShareAcknowledgePartition"), partition_index=2,
                          acknowledgement_batches=(batch,))
    topic = payloads.build(payloads.nested(cls, "TxnShareAcknowledgeTopic"), topic_id=uuid.uuid4(), partitions=(part,))
    return payloads.build(cls, transactional_id="t", group_id="g", producer_id=7, producer_epoch=3,
                          member_id="m", member_epoch=5, topics=(topic,))


def test_request_round_trips_through_a_frame():
    req = _request()
    frame = framing.encode_request(req, correlation_id=41)
    decoded = framing.decode_request(frame[4:])
    assert (decoded.header.api_key, decoded.header.api_version, decoded.header.correlation_id) == (KEY, 0, 41)
    assert decoded.body == req


def test_response_round_trips_with_tagged_leader_and_endpoints():
    cls = framing.response_schema(KEY, 0)
    leader = payloads.build(payloads.nested(cls, "LeaderIdAndEpoch"), leader_id=2, leader_epoch=9)
    part = payloads.build(payloads.nested(cls, "TxnShareAcknowledgePartitionResponse"), partition_index=0,
                          error_code=ErrorCode.not_leader_or_follower, error_message="moved", current_leader=leader)
    topic = payloads.build(payloads.nested(cls, "TxnShareAcknowledgeTopicResponse"), topic_id=uuid.uuid4(),
                           partitions=(part,))
    node = payloads.build(payloads.nested(cls, "NodeEndpoint"), node_id=2, host="h", port=9092, rack=None)
    resp = payloads.build(cls, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, responses=(topic,),
                          node_endpoints=(node,))
    frame = framing.encode_response(resp, 5, KEY, 0)
    corr, body = framing.decode_response(frame[4:], KEY, 0)
    assert corr == 5 and body == resp
    plain = payloads.build(cls, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, responses=())
    assert len(framing.encode_entity(plain)) < len(framing.encode_entity(resp))
