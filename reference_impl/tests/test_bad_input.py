"""The reference broker survives hostile input (property-based, hypothesis).

Two properties, each over well over a thousand examples against one reference broker
(started once for the module):

1. random byte strings: raw bytes, size-prefixed random bodies, and random bodies behind
   a plausible request header (implemented api key, any version);
2. mutations of valid requests: a corpus of well-formed requests, built with kio for
   every version of every API the broker implements (Produce with real record batches,
   Fetch, ListOffsets, Metadata, the group APIs, CreateTopics, ...; an API without a
   hand-written entry gets every field filled by its type), then bit flips,
   byte and int32 overwrites, truncation, insertion, deletion, trailing garbage, header
   field changes (api key, version, correlation id, client-id length), size-prefix
   changes, and a second frame (valid or garbage) behind the first.

Every example runs on a fresh connection: send, half-close (so an incomplete frame meets
EOF instead of waiting forever), read until the broker closes. Acceptable: responses that
parse for the api key/version of the request they answer (matched in order by
correlation id; requests that may legitimately stay unanswered are Produce acks=0 and
superseded JoinGroup/SyncGroup), then the connection closed. Failures: a response that
does not parse (or has bytes left over), answers a request the broker does not support,
or carries an unexpected correlation id; no progress for HANG_LIMIT_S on a request that
cannot legitimately wait (Fetch, JoinGroup and SyncGroup may park; they get PARK_GRACE_S).

Invariants after every example: ApiVersions on a new connection is answered;
`stats["handler_errors"]` and `stats["server_errors"]` stay 0. At the end of each
property, data acknowledged (acks=-1) before any fuzzing is fetched byte-identical with
the same offsets, high watermark and log start offset, and a committed offset is intact.
The protected topic and group names never occur in the corpus.

KIPCHECK_FUZZ_EXAMPLES overrides the examples per property (default 1500);
KIPCHECK_FUZZ_EXPLORE=1 draws fresh random examples instead of the fixed CI ones;
KIPCHECK_FUZZ_TRACE=FILE keeps the hex of the example in flight in FILE (a native crash,
such as the kio preallocation abort fixed in framing.check_collection_sizes, takes the
whole process down before hypothesis can report).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import socket
import struct
import time
import types
import typing
import uuid
from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription
from kio.schema.errors import ErrorCode

from reference_impl.client.raw_client import ClusterClient, RawClient
from reference_impl.handlers.registry import HANDLERS, lookup
from reference_impl.protocol import framing, payloads
from reference_impl.protocol import records as rec
from reference_impl.server.broker_server import ThreadedReferenceCluster
from reference_impl.protocol.api_keys import ApiKey

EXAMPLES = int(os.environ.get("KIPCHECK_FUZZ_EXAMPLES", "1500"))
EXPLORE = os.environ.get("KIPCHECK_FUZZ_EXPLORE") == "1"  # fresh random examples (bug hunting)
TRACE = os.environ.get("KIPCHECK_FUZZ_TRACE")  # file that holds the hex of the example in flight
HANG_LIMIT_S = 5.0  # no progress for this long on a request that cannot wait: a hang
PARK_GRACE_S = 0.3  # Fetch / JoinGroup / SyncGroup may legitimately wait; stop watching
SILENT_OK = {0, 11, 14}  # may never be answered: Produce acks=0, superseded Join/SyncGroup
PARKING = {1, 11, 14}  # may wait for data / a rebalance
ACKED_RECORDS = 40
MS = datetime.timedelta(milliseconds=1)
_SIZE = struct.Struct(">i")

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not EXPLORE,  # CI runs the same examples every time
    database=None,
    suppress_health_check=list(HealthCheck),
    print_blob=False,
)


# --- the broker under fire --------------------------------------------------------------


@dataclass
class Protected:
    """Acknowledged before the fuzzing; must be unchanged after it."""

    topic: str
    group: str
    records: dict[int, bytes]  # partition -> fetched records bytes
    watermarks: dict[int, tuple[int, int, int]]  # partition -> (high watermark, LSO, log start)
    base_offsets: list[tuple[int, int]]  # (partition, base offset) per acknowledged batch
    committed: int


class ErrorLog(logging.Handler):
    """Keeps the broker's ERROR records (handler and server exceptions, with traceback)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []
        self.setFormatter(logging.Formatter("%(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(self.format(record))

    def first(self) -> str:
        return self.records[0] if self.records else "(nothing logged)"


class Broker:
    def __init__(self, threaded: ThreadedReferenceCluster) -> None:
        self.threaded = threaded
        self.stats = threaded.cluster.stats
        host, port = threaded.bootstrap_servers.split(",")[0].rsplit(":", 1)
        self.addr = (host, int(port))
        self.fuzz_topic = "fz"
        self.fuzz_topic_id: uuid.UUID | None = None
        self.protected: Protected | None = None
        self.errors = ErrorLog()

    # -- setup ----------------------------------------------------------------------

    def prepare(self) -> None:
        with ClusterClient(self.threaded.bootstrap_servers) as cc:
            suffix = uuid.uuid4().hex[:10]
            topic, group = f"acked-before-fuzzing-{suffix}", f"acked-group-{suffix}"
            _create_topic(cc, topic, 2)
            _create_topic(cc, self.fuzz_topic, 1)
            self.fuzz_topic_id = next(t.topic_id for t in cc.refresh([self.fuzz_topic]).topics)
            c = cc.bootstrap
            bases = []
            codecs = ["none", "gzip", "snappy", "lz4", "zstd"]
            for i in range(0, ACKED_RECORDS, 4):
                part = (i // 4) % 2
                batch = rec.build_batch(
                    [rec.NewRecord(key=b"k%d" % j, value=b"acked-%d-" % j * (1 + j % 3)) for j in range(i, i + 4)],
                    timestamp_ms=1_700_000_000_000 + i,
                    compression=codecs[(i // 4) % len(codecs)],
                )
                resp = _produce(c, topic, part, batch, acks=-1)
                assert resp.error_code == ErrorCode.none, resp
                bases.append((part, int(resp.base_offset)))
            # data for the fuzz corpus' Fetch/ListOffsets to find
            _produce(c, self.fuzz_topic, 0, rec.build_batch([rec.NewRecord(value=b"fz")] * 3), acks=-1)
            assert _commit(c, group, topic, 0, 7) == ErrorCode.none
            records, marks = self._fetch_all(cc, topic)
            self.protected = Protected(topic, group, records, marks, bases, 7)

    def _fetch_all(self, cc: ClusterClient, topic: str) -> tuple[dict[int, bytes], dict[int, tuple[int, int, int]]]:
        records, marks = {}, {}
        for part in (0, 1):
            resp = cc.bootstrap.request(
                1,
                12,
                replica_id=-1,
                max_wait=0 * MS,
                min_bytes=1,
                max_bytes=1 << 24,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                topics=(
                    _part(1, 12, "FetchTopic", topic=topic, partitions=(
                        _part(1, 12, "FetchPartition", partition=part, fetch_offset=0, log_start_offset=-1,
                              partition_max_bytes=1 << 24),
                    )),
                ),
                forgotten_topics_data=(),
                rack_id="",
            )
            p = resp.responses[0].partitions[0]
            assert p.error_code == ErrorCode.none, p
            records[part] = bytes(p.records or b"")
            marks[part] = (int(p.high_watermark), int(p.last_stable_offset), int(p.log_start_offset))
        return records, marks

    # -- invariants -----------------------------------------------------------------

    def assert_serving(self) -> None:
        """A new connection's ApiVersions is answered; no handler or server errors."""
        with RawClient(*self.addr, timeout=HANG_LIMIT_S) as c:
            resp = c.api_versions_response(3)
            assert resp.error_code == ErrorCode.none
        errors = self.stats["handler_errors"] + self.stats.get("server_errors", 0)
        assert errors == 0, f"the broker raised {errors} time(s); first:\n{self.errors.first()}"

    def assert_acked_data_intact(self) -> None:
        p = self.protected
        assert p is not None
        with ClusterClient(self.threaded.bootstrap_servers) as cc:
            records, marks = self._fetch_all(cc, p.topic)
            committed = _committed(cc.bootstrap, p.group, p.topic, 0)
        assert marks == p.watermarks, "high watermark / LSO / log start offset of acknowledged data changed"
        assert records == p.records, "acknowledged records are no longer byte-identical"
        for part, base in p.base_offsets:
            assert any(h.base_offset == base for h in _batch_headers(records[part])), f"batch at {part}/{base} lost"
        assert committed == p.committed, "committed offset changed"

    # -- one example ----------------------------------------------------------------

    def exchange(self, data: bytes) -> str:
        """Send data on a new connection, half-close, check what comes back; returns
        the outcome kind. Raises AssertionError on a broker failure."""
        frames = _split_frames(data)
        if TRACE:  # the example in flight survives a native crash of the whole process
            with open(TRACE, "w") as fh:
                fh.write(data.hex())
        sock = socket.create_connection(self.addr, timeout=HANG_LIMIT_S)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                sock.sendall(data)
                sock.shutdown(socket.SHUT_WR)
            except (BrokenPipeError, ConnectionResetError):
                return "closed-while-sending"
            return self._read_answers(sock, frames)
        finally:
            sock.close()

    def _read_answers(self, sock: socket.socket, frames: list[tuple[int, int, int]]) -> str:
        buf = bytearray()
        nxt = 0  # index of the first request frame not answered yet
        answered = 0
        last_progress = time.monotonic()
        sock.settimeout(0.05)
        while True:
            try:
                chunk = sock.recv(1 << 16)
            except socket.timeout:
                waited = time.monotonic() - last_progress
                if waited >= PARK_GRACE_S and _may_park(frames, nxt):
                    return "parked"
                assert waited < HANG_LIMIT_S, (
                    f"no answer and no close for {waited:.1f}s; pending requests "
                    f"(api_key, version, correlation_id): {frames[nxt:]}"
                )
                continue
            except ConnectionResetError:
                return f"reset-after-{min(answered, 2)}"
            if not chunk:
                assert not buf, f"connection closed inside a response frame ({len(buf)} bytes pending)"
                return f"closed-after-{min(answered, 2)}"
            last_progress = time.monotonic()
            buf += chunk
            while len(buf) >= 4:
                (size,) = _SIZE.unpack_from(buf, 0)
                assert 4 <= size <= framing.DEFAULT_MAX_FRAME_BYTES, f"response size prefix {size}"
                if len(buf) < 4 + size:
                    break
                frame = bytes(buf[4 : 4 + size])
                del buf[: 4 + size]
                nxt = _check_response(frame, frames, nxt)
                answered += 1


def _may_park(frames: list[tuple[int, int, int]], nxt: int) -> bool:
    for key, _, _ in frames[nxt:]:
        if key in PARKING:
            return True
        if key not in SILENT_OK:
            return False
    return False


def _check_response(frame: bytes, frames: list[tuple[int, int, int]], nxt: int) -> int:
    """Match a response to the request it answers; check it parses. Returns the new
    index of the first unanswered request."""
    (cid,) = _SIZE.unpack_from(frame, 0)
    j = nxt
    while j < len(frames) and frames[j][2] != cid:
        assert frames[j][0] in SILENT_OK, (
            f"response with correlation id {cid} while request {frames[j]} (which must be answered) is pending"
        )
        j += 1
    assert j < len(frames), f"response with correlation id {cid} answers no request sent ({frames[nxt:]})"
    key, version, _ = frames[j]
    if lookup(key, version) is None:
        assert key == ApiKey.API_VERSIONS, f"answered api_key={key} v{version}, which the broker does not support"
        got, body = framing.decode_response(frame, key, 0)  # the v0 UNSUPPORTED_VERSION answer
        assert body.error_code == ErrorCode.unsupported_version
    else:
        got, body = framing.decode_response(frame, key, version)  # strict: nothing left over
    assert got == cid
    return j + 1


def _split_frames(data: bytes) -> list[tuple[int, int, int]]:
    """(api_key, version, correlation_id) of the complete frames the broker will read
    before it must close (an impossible size or a frame too short for a header)."""
    out, pos = [], 0
    while pos + 4 <= len(data):
        (size,) = _SIZE.unpack_from(data, pos)
        if not 0 <= size <= framing.DEFAULT_MAX_FRAME_BYTES or pos + 4 + size > len(data) or size < 8:
            break
        out.append(framing.peek_request_header(data[pos + 4 : pos + 12]))
        pos += 4 + size
    return out


def _batch_headers(data: bytes) -> list[rec.BatchHeader]:
    batches, _ = rec.split_batches(data)
    return [rec.parse_batch_header(b) for b in batches]


# --- request helpers ------------------------------------------------------------------------


def _part(key: int, version: int, class_name: str, /, **fields):
    return payloads.build(payloads.nested(framing.request_schema(key, version), class_name), **fields)


def _create_topic(cc: ClusterClient, name: str, partitions: int) -> None:
    resp = cc.bootstrap.request(
        19,
        7,
        topics=(
            _part(19, 7, "CreatableTopic", name=name, num_partitions=partitions, replication_factor=1,
                  assignments=(), configs=()),
        ),
        timeout=10_000 * MS,
        validate_only=False,
    )
    assert resp.topics[0].error_code == ErrorCode.none, resp


def _produce(c: RawClient, topic: str, partition: int, batch: bytes, acks: int):
    resp = c.request(
        0,
        9,
        transactional_id=None,
        acks=acks,
        timeout=10_000 * MS,
        topic_data=(
            _part(0, 9, "TopicProduceData", name=topic, partition_data=(
                _part(0, 9, "PartitionProduceData", index=partition, records=batch),
            )),
        ),
    )
    return resp.responses[0].partition_responses[0]


def _commit(c: RawClient, group: str, topic: str, partition: int, offset: int) -> int:
    resp = c.request(
        8,
        8,
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=(
            _part(8, 8, "OffsetCommitRequestTopic", name=topic, partitions=(
                _part(8, 8, "OffsetCommitRequestPartition", partition_index=partition, committed_offset=offset,
                      committed_leader_epoch=-1, committed_metadata="acked"),
            )),
        ),
    )
    return int(resp.topics[0].partitions[0].error_code)


def _committed(c: RawClient, group: str, topic: str, partition: int) -> int:
    resp = c.request(
        9,
        7,
        group_id=group,
        topics=(_part(9, 7, "OffsetFetchRequestTopic", name=topic, partition_indexes=(partition,)),),
        require_stable=False,
    )
    assert resp.error_code == ErrorCode.none
    return int(resp.topics[0].partitions[0].committed_offset)


# --- the corpus of valid requests -----------------------------------------------------------


def _request_fields(key: int, version: int, topic: str, topic_id: uuid.UUID) -> list[dict]:
    """Field sets (a superset of what any version has; `payloads.build` keeps what the
    version declares) for well-formed requests of one API version."""

    def p(class_name: str, **fields):  # a nested part; None when this version has no such class
        try:
            return _part(key, version, class_name, **fields)
        except LookupError:
            return None

    group, join_group = "fzg", "fzg-join"
    if key == 0:  # Produce: real batches, uncompressed and compressed
        out = []
        for codec, acks in (("none", -1), ("gzip", 1), ("zstd", -1), ("none", 0)):
            batch = rec.build_batch(
                [rec.NewRecord(key=b"k", value=b"fuzz-%d" % i, headers=[("h", b"v")]) for i in range(3)],
                timestamp_ms=1_700_000_000_000,
                compression=codec,
            )
            out.append(dict(
                transactional_id=None, acks=acks, timeout=5_000 * MS,
                topic_data=(p("TopicProduceData", name=topic, topic_id=topic_id, partition_data=(
                    p("PartitionProduceData", index=0, records=batch),)),),
            ))
        return out
    if key == 1:  # Fetch, sessionless; data exists at offset 0 so it answers at once
        fetch_part = p("FetchPartition", partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                       log_start_offset=-1, partition_max_bytes=1 << 20)
        return [dict(
            replica_id=-1, max_wait=0 * MS, min_bytes=1, max_bytes=1 << 20, isolation_level=level, session_id=0,
            session_epoch=-1, topics=(p("FetchTopic", topic=topic, topic_id=topic_id, partitions=(fetch_part,)),),
            forgotten_topics_data=(), rack_id="",
        ) for level in (0, 1)]
    if key == 2:  # ListOffsets
        return [dict(
            replica_id=-1, isolation_level=0, timeout=1_000 * MS,
            topics=(p("ListOffsetsTopic", name=topic, partitions=(
                p("ListOffsetsPartition", partition_index=0, current_leader_epoch=-1, timestamp=ts),)),),
        ) for ts in (-1, -2, 0)]
    if key == 3:  # Metadata: all topics, and one topic by name
        common = dict(allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                      include_topic_authorized_operations=False)
        one = (p("MetadataRequestTopic", name=topic, topic_id=None),)
        return [dict(common, topics=None if version else ()), dict(common, topics=one)]
    if key == 8:  # OffsetCommit, simple (no generation)
        return [dict(
            group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
            retention_time=-1 * MS,
            topics=(p("OffsetCommitRequestTopic", name=topic, partitions=(
                p("OffsetCommitRequestPartition", partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                  committed_metadata="m"),)),),
        )]
    if key == 9:  # OffsetFetch
        if version >= 8:
            return [dict(groups=(p("OffsetFetchRequestGroup", group_id=group, member_id=None, member_epoch=-1,
                                   topics=(p("OffsetFetchRequestTopics", name=topic, partition_indexes=(0,)),)),),
                         require_stable=False)]
        return [dict(group_id=group, topics=(p("OffsetFetchRequestTopic", name=topic, partition_indexes=(0,)),),
                     require_stable=False)]
    if key == 10:  # FindCoordinator
        return [dict(key=group, key_type=0, coordinator_keys=(group, join_group))]
    if key == 11:  # JoinGroup: a new member; a short rebalance timeout so rebalances end fast
        meta = b"\x00\x00" + framing.encode_entity(ConsumerProtocolSubscription(topics=(topic,), user_data=None))
        return [dict(
            group_id=join_group, session_timeout=6_000 * MS, rebalance_timeout=10 * MS, member_id="",
            group_instance_id=None, protocol_type="consumer",
            protocols=(p("JoinGroupRequestProtocol", name="range", metadata=meta),), reason=None,
        )]
    if key == 12:  # Heartbeat of an unknown member
        return [dict(group_id=join_group, generation_id=1, member_id="m-1", group_instance_id=None)]
    if key == 13:  # LeaveGroup of an unknown member
        return [dict(group_id=join_group, member_id="m-1",
                     members=(p("MemberIdentity", member_id="m-1", group_instance_id=None, reason=None),))]
    if key == 14:  # SyncGroup of an unknown member
        return [dict(group_id=join_group, generation_id=1, member_id="m-1", group_instance_id=None,
                     protocol_type="consumer", protocol_name="range",
                     assignments=(p("SyncGroupRequestAssignment", member_id="m-1", assignment=b"\x00\x00"),))]
    if key == 15:  # DescribeGroups
        return [dict(groups=(group, join_group), include_authorized_operations=False)]
    if key == 16:  # ListGroups
        return [dict(states_filter=(), types_filter=())]
    if key == 18:  # ApiVersions
        return [dict(client_software_name="kipcheck-fuzz", client_software_version="1.0")]
    if key == 19:  # CreateTopics: validate only, and a real creation (once; later TOPIC_ALREADY_EXISTS)
        return [dict(
            topics=(p("CreatableTopic", name=name, num_partitions=2, replication_factor=-1, assignments=(),
                      configs=(p("CreatableTopicConfig", name="retention.ms", value="60000"),)),),
            timeout=5_000 * MS, validate_only=validate,
        ) for name, validate in ((f"fz-new-v{version}", True), (f"fz-made-v{version}", False))]
    if key == 20:  # DeleteTopics of a topic that does not exist
        return [dict(topic_names=("fz-gone",), topics=(p("DeleteTopicState", name="fz-gone", topic_id=None),),
                     timeout=5_000 * MS)]
    if key == 42:  # DeleteGroups of a group that does not exist
        return [dict(groups_names=("fzg-gone",))]
    if key == 60:  # DescribeCluster
        return [dict(include_cluster_authorized_operations=False, endpoint_type=1, include_fenced_brokers=False)]
    return [_auto_fields(framing.request_schema(key, version), topic, topic_id)]


_AUTO_VALUES = {
    "int8": 0, "uint8": 0, "int16": 0, "uint16": 0, "int32": 0, "uint32": 0, "int64": 0, "uint64": 0,
    "float64": 0.0, "bool": False, "timedelta_i32": 100 * MS, "timedelta_i64": 100 * MS, "bytes": b"\x00\x00",
}


def _auto_fields(cls: type, topic: str, topic_id: uuid.UUID) -> dict:
    """Well-formed fields for an API without a hand-written corpus entry (APIs added
    later): every field filled by its type, arrays with one element."""
    fields = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            continue
        tp = f.type
        if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
            tp = next(a for a in typing.get_args(tp) if a is not type(None))
        is_array = typing.get_origin(tp) is tuple
        inner = typing.get_args(tp)[0] if is_array else tp
        kind = f.metadata.get("kafka_type")
        if isinstance(inner, type) and dataclasses.is_dataclass(inner):
            value = inner(**_auto_fields(inner, topic, topic_id))
        elif kind == "string":
            value = topic
        elif kind == "uuid":
            value = topic_id
        elif kind == "records":
            value = rec.build_batch([rec.NewRecord(value=b"auto")])
        else:
            value = _AUTO_VALUES[kind]
        fields[f.name] = (value,) if is_array else value
    return fields


def build_corpus(topic: str, topic_id: uuid.UUID) -> list[bytes]:
    """Size-prefixed frames: every version of every implemented API."""
    frames = []
    client_ids = ["kipcheck-fuzz", "", None]
    cid = 1000
    for key, h in sorted(HANDLERS.items()):
        for version in range(h.min_version, h.max_version + 1):
            cls = framing.request_schema(key, version)
            for fields in _request_fields(key, version, topic, topic_id):
                payload = payloads.build(cls, **fields)
                cid += 1
                frame = framing.encode_request(payload, cid, client_ids[cid % 3])
                framing.decode_request(frame[4:])  # well-formed, nothing left over
                frames.append(frame)
    return frames


# --- strategies -----------------------------------------------------------------------------

INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INTERESTING_I32 = st.sampled_from([0, 1, -1, 2, 0x7F, 0xFF, 0x7FFF, 0xFFFF, 2**31 - 1, -(2**31), 1 << 20, 1 << 30])
SIZE_PREFIXES = st.one_of(
    INT32,
    st.sampled_from([-1, -(2**31), 0, 1, 3, 7, 8, framing.DEFAULT_MAX_FRAME_BYTES, framing.DEFAULT_MAX_FRAME_BYTES + 1,
                     2**31 - 1]),
)


def _implemented_keys() -> list[int]:
    return sorted(HANDLERS)


@st.composite
def random_input(draw) -> bytes:
    """Random bytes, random size-prefixed bodies, random bodies behind a real-looking header."""
    shape = draw(st.sampled_from(["raw", "prefixed", "header", "header", "header"]))
    if shape == "raw":
        return draw(st.binary(max_size=256))
    if shape == "prefixed":
        return framing.size_prefixed(draw(st.binary(max_size=256)))
    key = draw(st.one_of(st.sampled_from(_implemented_keys()), INT16))
    version = draw(st.one_of(st.integers(-1, 20), INT16))
    cid = draw(INT32)
    client_id = draw(st.one_of(st.none(), st.text(max_size=12)))
    body = draw(st.binary(max_size=256))
    raw_cid = b"\xff\xff" if client_id is None else struct.pack(">h", len(client_id.encode())) + client_id.encode()
    header = struct.pack(">hhi", key, version, cid) + raw_cid
    if draw(st.booleans()):
        header += b"\x00"  # empty tagged fields of a flexible header v2
    return framing.size_prefixed(header + body)


def mutated_input(corpus: list[bytes]):
    @st.composite
    def strategy(draw) -> bytes:
        frame = draw(st.sampled_from(corpus))
        payload = bytearray(frame[4:])  # request header + body, no size prefix
        for _ in range(draw(st.integers(1, 3))):
            payload = _mutate(draw, payload)
        prefix = len(payload)
        how = draw(st.sampled_from(["right"] * 6 + ["any", "delta"]))
        if how == "any":
            prefix = draw(SIZE_PREFIXES)
        elif how == "delta":
            prefix = max(-(2**31), min(2**31 - 1, prefix + draw(st.integers(-16, 16))))
        data = _SIZE.pack(prefix) + bytes(payload)
        tail = draw(st.sampled_from(["none"] * 6 + ["frame", "garbage", "bad-prefix"]))
        if tail == "frame":  # a second, valid request behind the first
            data += draw(st.sampled_from(corpus))
        elif tail == "garbage":
            data += draw(st.binary(min_size=1, max_size=64))
        elif tail == "bad-prefix":
            data += _SIZE.pack(draw(st.sampled_from([-1, -(2**31), framing.DEFAULT_MAX_FRAME_BYTES + 1, 0, 3])))
        return data

    return strategy()


HEADER_FIELDS = {"api_key": (0, ">h"), "version": (2, ">h"), "correlation_id": (4, ">i"), "client_id_len": (8, ">h")}


def _mutate(draw, payload: bytearray) -> bytearray:
    op = draw(st.sampled_from([
        "flip", "flip", "flip", "byte", "int32", "truncate", "insert", "delete", "append",
        "api_key", "version", "correlation_id", "client_id_len",
    ]))
    n = len(payload)
    if op in HEADER_FIELDS:
        offset, fmt = HEADER_FIELDS[op]
        if n < offset + struct.calcsize(fmt):
            return payload
        if op == "api_key":
            value = draw(st.one_of(st.sampled_from(_implemented_keys() + [-1, 9999, 32767]), INT16))
        elif op == "version":
            value = draw(st.one_of(st.integers(-1, 20), INT16))
        elif op == "correlation_id":
            value = draw(INT32)
        else:
            (old,) = struct.unpack_from(">h", payload, offset)
            value = draw(st.one_of(st.sampled_from([-2, -1, 0, 1, old + 1, old - 1, 0x7FFF]), INT16))
            value = max(-(2**15), min(2**15 - 1, value))
        struct.pack_into(fmt, payload, offset, value)
        return payload
    if op == "append":
        return payload + draw(st.binary(min_size=1, max_size=32))
    if n == 0:
        return payload
    at = draw(st.integers(0, n - 1))
    if op == "flip":
        payload[at] ^= 1 << draw(st.integers(0, 7))
    elif op == "byte":
        payload[at] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF]))
    elif op == "int32":
        if at + 4 <= n:
            struct.pack_into(">i", payload, at, draw(INTERESTING_I32))
    elif op == "truncate":
        del payload[at:]
    elif op == "insert":
        payload[at:at] = draw(st.binary(min_size=1, max_size=16))
    elif op == "delete":
        del payload[at : at + draw(st.integers(1, 8))]
    return payload


# --- fixtures and tests -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker():
    logger = logging.getLogger("kipcheck.broker")
    level = logger.level
    logger.setLevel(logging.ERROR)  # thousands of "closing on bad input" warnings otherwise
    try:
        with ThreadedReferenceCluster(brokers=1) as threaded:
            b = Broker(threaded)
            logger.addHandler(b.errors)
            try:
                b.prepare()
                yield b
            finally:
                logger.removeHandler(b.errors)
    finally:
        logger.setLevel(level)


@pytest.fixture(scope="module")
def corpus(broker):
    return build_corpus(broker.fuzz_topic, broker.fuzz_topic_id)


def _run(broker: Broker, strategy, outcomes: Counter) -> None:
    @FUZZ
    @given(data=strategy)
    def property_holds(data: bytes) -> None:
        outcomes[broker.exchange(data)] += 1
        broker.assert_serving()

    property_holds()


def test_corpus_covers_every_implemented_api(corpus):
    keys = {framing.peek_request_header(f[4:])[0] for f in corpus}
    assert keys == set(HANDLERS)
    assert len(corpus) > 150


def test_size_guard_walks_every_corpus_request_like_kio(corpus):
    """framing.check_collection_sizes (which keeps forged lengths away from kio's native
    reader) must end exactly where kio's decoder ends, for every implemented version."""
    for frame in corpus:
        payload = frame[4:]
        header = framing.decode_request_header(payload)
        cls = framing.request_schema(header.api_key, header.api_version)
        _, size = framing.decode_entity(cls, payload, header.header_size)
        end = framing.check_collection_sizes(cls, payload, header.header_size)
        assert end == header.header_size + size, f"{cls.__name__} v{header.api_version}"


def test_forged_collection_length_is_refused_before_kio_reads_it():
    # ListGroups v5 whose states_filter claims ~2e10 entries: kio would preallocate them
    # and abort the whole process; Kafka answers "Tried to allocate a collection ...".
    frame = bytes.fromhex("0010000500000363000000") + bytes.fromhex("ddafdada4d")
    with pytest.raises(framing.PayloadDecodeError, match="Tried to allocate a collection"):
        framing.decode_request(frame)


def test_null_non_nullable_array_is_refused():
    # DescribeGroups v0 with groups = null (length -1): Kafka's parser throws
    # "non-nullable field groups was serialized as null"; kio would hand None to the handler.
    frame = struct.pack(">hhih", 15, 0, 1, -1) + struct.pack(">i", -1)
    with pytest.raises(framing.PayloadDecodeError, match="non-nullable field groups"):
        framing.decode_request(frame)


def test_survives_random_bytes(broker):
    outcomes: Counter = Counter()
    started = time.monotonic()
    _run(broker, random_input(), outcomes)
    print(f"random bytes: {sum(outcomes.values())} examples in {time.monotonic() - started:.1f}s: {dict(outcomes)}")
    assert sum(outcomes.values()) >= EXAMPLES
    broker.assert_acked_data_intact()


def test_survives_mutated_requests(broker, corpus):
    outcomes: Counter = Counter()
    started = time.monotonic()
    _run(broker, mutated_input(corpus), outcomes)
    print(f"mutated requests: {sum(outcomes.values())} examples in {time.monotonic() - started:.1f}s: {dict(outcomes)}")
    assert sum(outcomes.values()) >= EXAMPLES
    assert any(k.startswith("closed-after-1") or k.startswith("closed-after-2") for k in outcomes), (
        "no mutated request was answered: the mutations never leave a parseable request"
    )
    broker.assert_acked_data_intact()


def test_acknowledged_data_survives_all_of_it(broker):
    """Last in the module: after both properties the acknowledged data is unchanged."""
    broker.assert_acked_data_intact()
    broker.assert_serving()
