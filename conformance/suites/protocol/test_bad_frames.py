"""Malformed frames on the wire (raw sockets): the broker closes the connection of a frame
it cannot parse, answers what Kafka answers, and nothing else is affected.

Observed on Apache Kafka 4.4.0 (kafka-native), which these tests encode:

* a negative size prefix, or one above socket.request.max.bytes (100 MiB), closes the
  connection at once (NetworkReceive throws InvalidReceiveException);
* a frame too short for the request header (api key, version, correlation id), a
  request header naming an api key Kafka does not know, and a body truncated anywhere
  (including a flexible request missing only its final tagged-fields byte) close the
  connection without an answer (RequestHeader.parse / the generated parsers throw);
* bytes after a complete request body are ignored: the request is answered and the
  connection stays usable (Kafka's parsers never check for leftovers; librdkafka sends
  3 extra bytes in Metadata v9+ all-topics requests);
* a request followed by an impossible size prefix is answered first, then the
  connection closes (Kafka reads one size prefix at a time).

After each malformed frame: a connection opened before it still completes an ApiVersions
and a Metadata round trip, a new connection is answered, and records produced before it
are fetched byte-identical with the same high watermark.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass

import pytest

from clients import confluent, wire
from targets.target import NotSupportedByTarget
from reference_impl.client.raw_client import RawClient
from reference_impl.protocol import framing, payloads
from reference_impl.protocol import records

CLOSE_TIMEOUT_S = 5.0
MAX_REQUEST_BYTES = framing.DEFAULT_MAX_FRAME_BYTES  # Kafka's socket.request.max.bytes default


# --- data produced before the malformed frames ---------------------------------------------


@dataclass
class Acked:
    topic: str
    records: bytes
    high_watermark: int
    base_offsets: list[int]


_ACKED: dict[str, Acked] = {}


@pytest.fixture
def acked(target, unique) -> Acked:
    """Records acknowledged (acks=-1) on this target before the first malformed frame;
    produced once per target and session."""
    if target.name not in _ACKED:
        topic = unique.topic()
        confluent.create_topic(target, topic)
        with wire.cluster_client(target) as cc:
            leader = wire.leader_eventually(cc, topic)
            bases = []
            for i in range(3):
                batch = records.build_batch(
                    [records.NewRecord(key=b"k%d" % j, value=b"acked-%d" % j) for j in range(i * 4, i * 4 + 4)],
                    timestamp_ms=1_700_000_000_000 + i,
                )
                resp = _produce_retrying(leader, topic, batch)
                assert resp.error_code == 0, f"setup produce failed: {resp.error_code!r}"
                bases.append(int(resp.base_offset))
            part = wire.fetch(cc, leader, topic, 0, 0)
        _ACKED[target.name] = Acked(topic, bytes(part.records or b""), int(part.high_watermark), bases)
    return _ACKED[target.name]


def _produce_retrying(leader: RawClient, topic: str, batch: bytes, timeout: float = 15.0):
    """acks=-1 produce; retried while a just-created partition is still settling
    (LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION)."""
    deadline = time.monotonic() + timeout
    while True:
        resp = wire.produce(leader, topic, 0, batch, acks=-1)
        if int(resp.error_code) not in (3, 5, 6) or time.monotonic() >= deadline:
            return resp
        time.sleep(0.2)


def _assert_acked_intact(target, acked: Acked) -> None:
    with wire.cluster_client(target) as cc:
        leader = cc.leader_for(acked.topic, 0)
        part = wire.fetch(cc, leader, acked.topic, 0, 0)
    assert int(part.high_watermark) == acked.high_watermark, "high watermark of acknowledged data changed"
    assert bytes(part.records or b"") == acked.records, "acknowledged records are no longer byte-identical"


# --- helpers ---------------------------------------------------------------------------------


def _outcome(client: RawClient, timeout: float = CLOSE_TIMEOUT_S) -> str:
    """"closed" (EOF or reset), "answered" (bytes arrived), or "open" (neither in time)."""
    return client.peer_state(timeout)


def _send(target, data: bytes) -> RawClient:
    client = target.raw_client()
    try:
        client.send_frame(data, expect_response=False)
    except ConnectionError:
        pass  # closed while we were still sending: _outcome reports "closed"
    return client


def _assert_closed_unanswered(target, data: bytes, what: str) -> None:
    with _send(target, data) as c:
        got = _outcome(c)
    assert got == "closed", f"{what}: expected the broker to close the connection without answering, got {got!r}"


def _metadata_fields(topics):
    return {
        "topics": topics,
        "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    }


def _metadata_frame(version: int, correlation_id: int, topic: str | None = "some-topic") -> bytes:
    cls = framing.request_schema(3, version)
    if topic is None:
        topics = None if version >= 1 else ()
    else:
        topics = (payloads.build(payloads.nested(cls, "MetadataRequestTopic"), name=topic, topic_id=None),)
    return framing.encode_request(payloads.build(cls, **_metadata_fields(topics)), correlation_id)


def _metadata_versions(target, *wanted: int) -> list[int]:
    """Metadata versions to test: `wanted` (a negative value means the highest) capped to
    what both the target and kio support."""
    with target.raw_client() as c:
        highest = c.negotiate(3)
        lowest = c.api_versions()[3][0]
    if highest is None:
        raise NotSupportedByTarget("Metadata is not advertised")
    out = []
    for v in wanted:
        v = highest if v < 0 else v
        if lowest <= v <= highest and v not in out:
            out.append(v)
    return out


class Bystander:
    """A connection opened before the malformed frame; it must be unaffected."""

    def __init__(self, target) -> None:
        self.target = target
        self.client = target.raw_client()
        self.client.api_versions()

    def check(self, acked: Acked) -> None:
        c = self.client
        resp = wire.Req(c, 18, 3).send(client_software_name="kipcheck", client_software_version="0.1.0")
        assert resp.error_code == 0, f"ApiVersions on the other connection: {resp.error_code!r}"
        md = wire.Req(c, 3, 12).send(**_metadata_fields(None))
        assert md.brokers, "Metadata on the other connection lists no brokers"
        c.close()
        with self.target.raw_client() as fresh:
            fresh.api_versions()  # a new connection is served too
        _assert_acked_intact(self.target, acked)


@pytest.fixture
def bystander(target, acked):
    b = Bystander(target)
    yield b
    b.client.close()


# --- tests ---------------------------------------------------------------------------------


@pytest.mark.requirement("PROTO.BAD.002")
def test_negative_size_prefix_closes_connection(target, acked, bystander):
    body = _metadata_frame(_metadata_versions(target, -1)[0], 11)[4:]
    for size in (-1, -(2**31)):
        _assert_closed_unanswered(target, struct.pack(">i", size) + body, f"size prefix {size}")
    bystander.check(acked)


@pytest.mark.requirement("PROTO.BAD.002")
def test_oversized_size_prefix_closes_connection(target, acked, bystander):
    body = _metadata_frame(_metadata_versions(target, -1)[0], 12)[4:]
    for size in (MAX_REQUEST_BYTES + 1, 2**31 - 1):
        _assert_closed_unanswered(target, struct.pack(">i", size) + body, f"size prefix {size}")
    bystander.check(acked)


@pytest.mark.requirement("PROTO.BAD.002")
def test_frame_shorter_than_request_header_closes_connection(target, acked, bystander):
    # api key, version and correlation id need 8 bytes; Kafka closes on anything shorter.
    header = struct.pack(">hhih", 18, 0, 13, -1)
    for n in (0, 1, 4, 7):
        _assert_closed_unanswered(target, framing.size_prefixed(header[:n]), f"{n}-byte frame")
    bystander.check(acked)


@pytest.mark.requirement("PROTO.BAD.002")
def test_truncated_metadata_body_closes_connection(target, acked, bystander):
    checked = 0
    for version in _metadata_versions(target, 4, -1):
        payload = _metadata_frame(version, 14)[4:]
        header_size = framing.decode_request_header(payload).header_size
        # every cut inside the body; losing only the final tagged-fields byte of a flexible
        # request is its own test below
        last = len(payload) - (2 if framing.is_flexible(3, version) else 1)
        for cut in range(header_size, last + 1):
            what = f"Metadata v{version} cut to {cut - header_size} body bytes"
            _assert_closed_unanswered(target, framing.size_prefixed(payload[:cut]), what)
            checked += 1
    assert checked
    bystander.check(acked)


@pytest.mark.requirement("PROTO.BAD.002")
def test_flexible_metadata_missing_final_tagged_fields_closes_connection(target, acked, bystander):
    versions = [v for v in _metadata_versions(target, 9, -1) if framing.is_flexible(3, v)]
    if not versions:
        raise NotSupportedByTarget("no flexible Metadata version (v9+) advertised")
    for version in versions:
        for topic in ("some-topic", None):
            payload = _metadata_frame(version, 15, topic)[4:]
            _assert_closed_unanswered(
                target, framing.size_prefixed(payload[:-1]), f"Metadata v{version} without its tagged-fields byte"
            )
    bystander.check(acked)


@pytest.mark.requirement("PROTO.BAD.002")
def test_unknown_api_key_closes_connection(target, acked, bystander):
    for key in (9999, 32767, -1):
        header = struct.pack(">hhih", key, 0, 16, 3) + b"kip"
        _assert_closed_unanswered(target, framing.size_prefixed(header + b"\x00" * 8), f"api key {key}")
    bystander.check(acked)


@pytest.mark.requirement("PROTO.BAD.002")
def test_trailing_bytes_after_request_body_are_ignored(target, acked, bystander):
    """Kafka answers a request with bytes after its body (its parsers never look for
    leftovers) and keeps the connection: trailing bytes are not a frame it cannot parse."""
    for version in _metadata_versions(target, 4, -1):
        with target.raw_client() as c:
            for n, (topic, extra) in enumerate((("some-topic", b"\x00\x00\x00"), (None, b"junk-after-body"))):
                cid = 100 + n
                raw = c.send_frame(framing.size_prefixed(_metadata_frame(version, cid, topic)[4:] + extra))
                # lenient about the response's own trailing bytes, as clients are: this
                # test is about the request's
                decoded = framing.decode_response_frame(raw, 3, version)
                got, body = decoded.correlation_id, decoded.body
                assert got == cid, f"Metadata v{version} with trailing bytes: correlation id {got}, sent {cid}"
                assert body.brokers, f"Metadata v{version} with trailing bytes: no brokers listed"
            # the connection stays usable
            resp = wire.Req(c, 18, 3).send(client_software_name="kipcheck", client_software_version="0.1.0")
            assert resp.error_code == 0
    bystander.check(acked)


@pytest.mark.requirement("PROTO.BAD.002")
def test_request_before_bad_size_prefix_is_answered_then_connection_closes(target, acked, bystander):
    version = _metadata_versions(target, -1)[0]
    with _send(target, _metadata_frame(version, 17, None) + struct.pack(">i", -1)) as c:
        try:
            raw = c.read_frame(CLOSE_TIMEOUT_S)
        except ConnectionError as exc:
            raise AssertionError(f"the request before the bad size prefix was not answered: {exc}") from None
        got = framing.decode_response_frame(raw, 3, version).correlation_id
        assert got == 17, "the request before the bad size prefix was not answered"
        after = _outcome(c)
    assert after == "closed", f"after answering, the broker should close on the bad size prefix; got {after!r}"
    bystander.check(acked)
