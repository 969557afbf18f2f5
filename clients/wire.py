"""Raw-protocol operations for wire-level conformance scenarios.

Each function sends one request with the raw client at a version both the broker and
kio support, and returns the decoded response part the scenario needs. Nothing is
retried or hidden: a scenario sees exactly what the target answered.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

from targets.target import NotSupportedByTarget, Target
from kio.schema.errors import ErrorCode
from clients.errors import COORDINATOR_RETRIABLE
from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription

from reference_impl.client.raw_client import ClusterClient, RawClient
from reference_impl.protocol import framing, payloads
from reference_impl.protocol.api_keys import ApiKey

PRODUCE, FETCH, LIST_OFFSETS, METADATA = ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.METADATA
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.FIND_COORDINATOR
JOIN_GROUP, HEARTBEAT, SYNC_GROUP, CREATE_TOPICS = ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT, ApiKey.SYNC_GROUP, ApiKey.CREATE_TOPICS
TXN_COORDINATOR_KEY_TYPE = 1  # FindCoordinator key type of a transactional id (CoordinatorType.TRANSACTION)

def cluster_client(target: Target) -> ClusterClient:
    """A raw client to every broker, secured as the target's client config says (TLS, SASL);
    NotSupportedByTarget when that config needs what the raw client does not speak."""
    return target.cluster_client()


def leader_eventually(cc: ClusterClient, topic: str, partition: int = 0, wait_s: float = 15.0) -> RawClient:
    """The partition leader once the bootstrap broker's metadata names one: with several
    brokers a topic created through another broker reaches this one's metadata a little later
    (each broker replays the KRaft metadata log on its own)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return cc.leader_for(topic, partition)
        except LookupError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


class Req:
    """Builds the request of one api key at one version, nested parts by class name."""

    def __init__(self, client: RawClient, api_key: int, highest: int | None = None, lowest: int = 0):
        version = client.negotiate(api_key, highest)
        if version is None or version < lowest:
            raise NotSupportedByTarget(f"target does not support api key {api_key} at version >= {lowest}")
        self.client, self.api_key, self.version = client, api_key, version
        self.cls = framing.request_schema(api_key, version)

    def part(self, class_name: str, **fields: Any) -> Any:
        return payloads.build(payloads.nested(self.cls, class_name), **fields)

    def send(self, **fields: Any) -> Any:
        return self.client.send(payloads.build(self.cls, **fields))


def ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


def topic_ids(cc: ClusterClient, topic: str) -> Any:
    md = cc.refresh([topic])
    for t in md.topics:
        if t.name == topic:
            return t
    raise LookupError(f"{topic} not in metadata")


def create_topic(cc: ClusterClient, topic: str, partitions: int = 1, replication: int = -1, configs: dict | None = None) -> int:
    """CreateTopics on the controller-agnostic path (any broker forwards); returns error code."""
    r = Req(cc.bootstrap, CREATE_TOPICS, 7)
    resp = r.send(
        topics=(
            r.part(
                "CreatableTopic",
                name=topic,
                num_partitions=partitions,
                replication_factor=replication,
                assignments=(),
                configs=tuple(r.part("CreatableTopicConfig", name=k, value=v) for k, v in (configs or {}).items()),
            ),
        ),
        timeout=ms(30_000),
        validate_only=False,
    )
    return int(resp.topics[0].error_code)


def produce(client: RawClient, topic: str, partition: int, batch: bytes, acks: int = -1, transactional_id: str | None = None) -> Any:
    """Produce one batch; returns the partition response (error_code, base_offset, ...)."""
    r = Req(client, PRODUCE, 11, lowest=3)
    resp = r.send(
        transactional_id=transactional_id,
        acks=acks,
        timeout=ms(30_000),
        topic_data=(
            r.part(
                "TopicProduceData",
                name=topic,
                partition_data=(r.part("PartitionProduceData", index=partition, records=batch),),
            ),
        ),
    )
    return resp.responses[0].partition_responses[0]


def fetch(
    cc: ClusterClient,
    client: RawClient,
    topic: str,
    partition: int,
    offset: int,
    *,
    max_bytes: int = 1 << 20,
    isolation_level: int = 0,
    max_wait_ms: int = 0,
) -> Any:
    """Sessionless Fetch of one partition; returns the partition response."""
    r = Req(client, FETCH, 16, lowest=4)
    meta = topic_ids(cc, topic)
    by_id = r.version >= 13
    topic_part = r.part(
        "FetchTopic",
        topic=topic,
        topic_id=meta.topic_id if by_id else None,
        partitions=(
            r.part(
                "FetchPartition",
                partition=partition,
                fetch_offset=offset,
                log_start_offset=-1,
                partition_max_bytes=max_bytes,
            ),
        ),
    )
    resp = r.send(
        replica_id=-1,
        max_wait=ms(max_wait_ms),
        min_bytes=1,
        max_bytes=max_bytes,
        isolation_level=isolation_level,
        session_id=0,
        session_epoch=-1,
        topics=(topic_part,),
        forgotten_topics_data=(),
        rack_id="",
    )
    if resp.error_code != ErrorCode.none:
        raise RuntimeError(f"Fetch failed at the top level: {resp.error_code!r}")
    return resp.responses[0].partitions[0]


def list_offset(client: RawClient, topic: str, partition: int, timestamp: int, isolation_level: int = 0) -> Any:
    r = Req(client, LIST_OFFSETS, 9, lowest=1)
    resp = r.send(
        replica_id=-1,
        isolation_level=isolation_level,
        topics=(
            r.part(
                "ListOffsetsTopic",
                name=topic,
                partitions=(r.part("ListOffsetsPartition", partition_index=partition, timestamp=timestamp),),
            ),
        ),
    )
    return resp.topics[0].partitions[0]


def offset_commit(
    client: RawClient, group: str, topic: str, partition: int, offset: int, *,
    generation: int = -1, member_id: str = "", metadata: str | None = "", instance_id: str | None = None,
    highest: int = 9, lowest: int = 2,
) -> int:
    """One OffsetCommit; `generation` is the member epoch for a KIP-848 member (v9 names the
    field so). Returns the partition's error code."""
    r = Req(client, OFFSET_COMMIT, highest, lowest=lowest)
    resp = r.send(
        group_id=group,
        generation_id_or_member_epoch=generation,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance_id,
        retention_time_ms=-1,
        topics=(
            r.part(
                "OffsetCommitRequestTopic",
                name=topic,
                partitions=(
                    r.part(
                        "OffsetCommitRequestPartition",
                        partition_index=partition,
                        committed_offset=offset,
                        committed_leader_epoch=-1,
                        committed_metadata=metadata,
                    ),
                ),
            ),
        ),
    )
    return int(resp.topics[0].partitions[0].error_code)


def offset_fetch(client: RawClient, group: str, topic: str, partitions: list[int], require_stable: bool = False) -> dict[int, tuple[int, str | None, int]]:
    """{partition: (committed_offset, metadata, error_code)}; raises on a group-level error."""
    r = Req(client, OFFSET_FETCH, 9, lowest=1)
    if r.version >= 8:
        resp = r.send(
            groups=(
                r.part(
                    "OffsetFetchRequestGroup",
                    group_id=group,
                    topics=(r.part("OffsetFetchRequestTopics", name=topic, partition_indexes=tuple(partitions)),),
                ),
            ),
            require_stable=require_stable,
        )
        g = resp.groups[0]
        if g.error_code != ErrorCode.none:
            raise GroupError(int(g.error_code))
        topics = g.topics
    else:
        resp = r.send(
            group_id=group,
            topics=(r.part("OffsetFetchRequestTopic", name=topic, partition_indexes=tuple(partitions)),),
            require_stable=require_stable,
        )
        if payloads.get(resp, "error_code", 0) != 0:
            raise GroupError(int(resp.error_code))
        topics = resp.topics
    out = {}
    for t in topics:
        for p in t.partitions:
            out[int(p.partition_index)] = (int(p.committed_offset), p.metadata, int(p.error_code))
    return out


def offset_commit_when_loaded(
    cc: ClusterClient, group: str, topic: str, partition: int, offset: int, *, wait_s: float = 30.0, **fields: Any,
) -> tuple[RawClient, int]:
    """The first OffsetCommit of a group, as a client makes it: a broker that has just created
    or moved ``__consumer_offsets`` answers COORDINATOR_LOAD_IN_PROGRESS / NOT_AVAILABLE /
    NOT_COORDINATOR for a while, and the client finds the coordinator again and retries.
    Returns the coordinator and the first non-retriable answer (or the last one at the deadline)."""
    deadline = time.monotonic() + wait_s
    while True:
        coord = cc.coordinator_for(group, wait_s=max(0.0, deadline - time.monotonic()))
        error = offset_commit(coord, group, topic, partition, offset, **fields)
        if error not in COORDINATOR_RETRIABLE or time.monotonic() >= deadline:
            return coord, error
        time.sleep(0.2)


class GroupError(Exception):
    def __init__(self, error_code: int) -> None:
        super().__init__(f"group-level error {error_code}")
        self.error_code = error_code


def join_group(client: RawClient, group: str, member_id: str = "", topic: str = "t", session_ms: int = 10_000, rebalance_ms: int = 10_000) -> Any:
    """JoinGroup with the consumer protocol; follows MEMBER_ID_REQUIRED once."""
    r = Req(client, JOIN_GROUP, 9, lowest=4)
    subscription = _consumer_subscription(topic)
    for _ in range(2):
        resp = r.send(
            group_id=group,
            session_timeout=ms(session_ms),
            rebalance_timeout=ms(rebalance_ms),
            member_id=member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocols=(r.part("JoinGroupRequestProtocol", name="range", metadata=subscription),),
            reason=None,
        )
        if resp.error_code == ErrorCode.member_id_required:  # rejoin with the assigned id
            member_id = resp.member_id
            continue
        return resp
    return resp


def sync_group(client: RawClient, group: str, generation: int, member_id: str, assignments: dict[str, bytes] | None = None) -> Any:
    r = Req(client, SYNC_GROUP, 5, lowest=3)
    return r.send(
        group_id=group,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=None,
        protocol_type="consumer",
        protocol_name="range",
        assignments=tuple(
            r.part("SyncGroupRequestAssignment", member_id=m, assignment=a) for m, a in (assignments or {}).items()
        ),
    )


def _consumer_subscription(topic: str) -> bytes:
    """Embedded consumer-protocol subscription: int16 version, then kio's v0 schema."""
    return b"\x00\x00" + framing.encode_entity(ConsumerProtocolSubscription(topics=(topic,), user_data=None))
