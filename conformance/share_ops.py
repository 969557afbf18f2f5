"""Raw-protocol share-group operations (KIP-932) for conformance tests, target independent.

ShareGroupHeartbeat joins, ShareFetch / ShareAcknowledge with explicit session epochs and
acknowledgement batches, group configs through IncrementalAlterConfigs on the GROUP
resource, and small readers of the responses. Versions: the highest the node offers
(ShareFetch/ShareAcknowledge v1 on Kafka 4.1 and the librdkafka mock, v2 from 4.2), unless
a test asks for one.
"""

from __future__ import annotations

import base64
import datetime
import time
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from fixtures.target import NotSupportedByTarget
from reference_impl.client.raw_client import ClusterClient, RawClient
from reference_impl.protocol import framing, payloads
from reference_impl.protocol import records as r

E = ErrorCode
ACCEPT, RELEASE, REJECT, RENEW = 1, 2, 3, 4
GAP = 0
SHARE_GROUP_HEARTBEAT, SHARE_GROUP_DESCRIBE, SHARE_FETCH, SHARE_ACKNOWLEDGE = 76, 77, 78, 79
INCREMENTAL_ALTER_CONFIGS, GROUP_RESOURCE, SET = 44, 32, 0
RETRIABLE_COORDINATOR_ERRORS = (E.not_coordinator, E.coordinator_not_available, E.coordinator_load_in_progress)

PartitionKey = tuple[uuid.UUID, int]
Acks = dict[PartitionKey, list[tuple[int, int, list[int]]]]


def new_member_id() -> str:
    """A member id as Kafka clients make them (Uuid.toString: URL-safe base64, no padding)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def nested(api_key: int, version: int, class_name: str, /, **fields: Any) -> Any:
    return payloads.build(payloads.nested(framing.request_schema(api_key, version), class_name), **fields)


def share_version(node: RawClient, api_key: int = SHARE_FETCH) -> int:
    """Highest version of a share API both sides speak; NotSupportedByTarget without one."""
    version = node.negotiate(api_key)
    if version is None or version < 1:
        raise NotSupportedByTarget(f"the target offers no usable version of api {api_key} (share groups, v1+)")
    return version


def set_group_configs(client: ClusterClient, group: str, configs: dict[str, str]) -> None:
    """share.* group configs with IncrementalAlterConfigs on the GROUP resource (type 32)."""
    if client.bootstrap.negotiate(INCREMENTAL_ALTER_CONFIGS, 1) is None:
        raise NotSupportedByTarget("the target has no IncrementalAlterConfigs: group configs cannot be set")
    resp = client.bootstrap.request(
        INCREMENTAL_ALTER_CONFIGS, 1,
        resources=(nested(44, 1, "AlterConfigsResource", resource_type=GROUP_RESOURCE, resource_name=group, configs=tuple(
            nested(44, 1, "AlterableConfig", name=k, config_operation=SET, value=v) for k, v in configs.items())),),
        validate_only=False,
    )
    result = resp.responses[0]
    if result.error_code != E.none:
        raise AssertionError(f"IncrementalAlterConfigs GROUP {group} {configs}: {result.error_code!r} {result.error_message}")


def heartbeat(node: RawClient, group: str, member: str, epoch: int, topics: list[str] | None = None) -> Any:
    return node.request(SHARE_GROUP_HEARTBEAT, 1, group_id=group, member_id=member, member_epoch=epoch,
                        rack_id=None, subscribed_topic_names=tuple(topics) if topics is not None else None)


def join_share_group(client: ClusterClient, group: str, topics: list[str], wait_s: float = 30.0,
                     member: str | None = None) -> tuple[str, int]:
    """Join `group` with ShareGroupHeartbeat and beat until the member has an assignment.
    Returns (member id, member epoch)."""
    member = member or new_member_id()
    if client.bootstrap.negotiate(SHARE_GROUP_HEARTBEAT, 1) is None:
        raise NotSupportedByTarget("the target has no ShareGroupHeartbeat v1")
    coord = client.coordinator_for(group, 0, wait_s=wait_s)
    epoch = 0
    deadline = time.monotonic() + wait_s
    while True:
        resp = heartbeat(coord, group, member, epoch, topics if epoch == 0 else None)
        if resp.error_code in RETRIABLE_COORDINATOR_ERRORS and time.monotonic() < deadline:
            time.sleep(0.2)  # a fresh Kafka is still creating/loading its coordinators
            coord = client.coordinator_for(group, 0, wait_s=wait_s)
            continue
        assert resp.error_code == E.none, resp
        epoch = int(resp.member_epoch)
        if resp.assignment is not None and any(tp.partitions for tp in resp.assignment.topic_partitions):
            return member, epoch
        if time.monotonic() > deadline:
            raise AssertionError(f"no assignment for {member} in {group}")
        time.sleep(0.2)


def leave_share_group(client: ClusterClient, group: str, member: str) -> Any:
    return heartbeat(client.coordinator_for(group, 0), group, member, -1)


def share_fetch(
    node: RawClient, group: str, member: str, epoch: int, parts: list[PartitionKey] = (), *,
    acks: Acks | None = None, forgotten: list[PartitionKey] = (), max_wait_ms: int = 0,
    max_records: int = 500, version: int | None = None, is_renew_ack: bool = False, timeout: float | None = None,
) -> Any:
    version = version or share_version(node, SHARE_FETCH)
    acks = acks or {}
    keys = list(dict.fromkeys(list(parts) + list(acks)))
    by_topic: dict[uuid.UUID, list] = {}
    for tid, p in keys:
        by_topic.setdefault(tid, []).append(nested(SHARE_FETCH, version, "FetchPartition", partition_index=p, acknowledgement_batches=tuple(
            nested(SHARE_FETCH, version, "AcknowledgementBatch", first_offset=f, last_offset=l, acknowledge_types=tuple(ts))
            for f, l, ts in acks.get((tid, p), ()))))
    fg: dict[uuid.UUID, list[int]] = {}
    for tid, p in forgotten:
        fg.setdefault(tid, []).append(p)
    req = payloads.build(
        framing.request_schema(SHARE_FETCH, version), group_id=group, member_id=member, share_session_epoch=epoch,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1, max_bytes=50_000_000,
        max_records=max_records, batch_size=max_records, share_acquire_mode=0, is_renew_ack=is_renew_ack,
        topics=tuple(nested(SHARE_FETCH, version, "FetchTopic", topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        forgotten_topics_data=tuple(nested(SHARE_FETCH, version, "ForgottenTopic", topic_id=t, partitions=tuple(ps)) for t, ps in fg.items()),
    )
    return node.send(req, timeout=timeout)


def share_ack(node: RawClient, group: str, member: str, epoch: int, acks: Acks, *, version: int | None = None) -> Any:
    version = version or share_version(node, SHARE_ACKNOWLEDGE)
    by_topic: dict[uuid.UUID, list] = {}
    for (tid, p), batches in acks.items():
        by_topic.setdefault(tid, []).append(nested(SHARE_ACKNOWLEDGE, version, "AcknowledgePartition", partition_index=p, acknowledgement_batches=tuple(
            nested(SHARE_ACKNOWLEDGE, version, "AcknowledgementBatch", first_offset=f, last_offset=l, acknowledge_types=tuple(ts))
            for f, l, ts in batches)))
    req = payloads.build(
        framing.request_schema(SHARE_ACKNOWLEDGE, version), group_id=group, member_id=member, share_session_epoch=epoch,
        is_renew_ack=False,
        topics=tuple(nested(SHARE_ACKNOWLEDGE, version, "AcknowledgeTopic", topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
    )
    return node.send(req)


def acquired(resp: Any) -> list[tuple[int, int, int]]:
    """(first offset, last offset, delivery count) of every acquired range."""
    return [(int(a.first_offset), int(a.last_offset), int(a.delivery_count))
            for t in resp.responses for p in t.partitions for a in p.acquired_records]


def offsets(resp: Any) -> list[int]:
    return [o for f, l, _ in acquired(resp) for o in range(f, l + 1)]


def delivery_counts(resp: Any) -> dict[int, int]:
    """offset -> delivery count of this response's acquired records."""
    return {o: c for f, l, c in acquired(resp) for o in range(f, l + 1)}


def partition_data(resp: Any, tid: uuid.UUID, p: int = 0) -> Any:
    for t in resp.responses:
        if t.topic_id == tid:
            for pd in t.partitions:
                if pd.partition_index == p:
                    return pd
    return None


def ack_codes(resp: Any) -> dict[int, int]:
    """partition -> error code (ShareAcknowledge) / acknowledge error code (ShareFetch)."""
    out = {}
    for t in resp.responses:
        for p in t.partitions:
            out[int(p.partition_index)] = int(getattr(p, "acknowledge_error_code", p.error_code))
    return out


def fetch_until(node: RawClient, group: str, member: str, epoch: int, parts: list[PartitionKey], want: int,
                wait_s: float = 10.0, **kw: Any) -> tuple[list[tuple[int, int, int]], int]:
    """Fetch (epoch, epoch + 1, ...) until `want` offsets were acquired; returns
    (acquired ranges, next epoch)."""
    got: list[tuple[int, int, int]] = []
    deadline = time.monotonic() + wait_s
    while True:
        resp = share_fetch(node, group, member, epoch, parts, max_wait_ms=500, **kw)
        assert resp.error_code == E.none, resp
        epoch += 1
        got += acquired(resp)
        if sum(l - f + 1 for f, l, _ in got) >= want or time.monotonic() > deadline:
            return got, epoch


def produce_values(client: ClusterClient, topic: str, values: list[bytes], partition: int = 0) -> int:
    """One non-transactional batch to the partition leader; returns its base offset."""
    node = client.leader_for(topic, partition)
    req = payloads.build(
        framing.request_schema(0, 9), transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
        topic_data=(nested(0, 9, "TopicProduceData", name=topic, partition_data=(
            nested(0, 9, "PartitionProduceData", index=partition, records=r.build_batch(values)),)),),
    )
    resp = node.send(req).responses[0].partition_responses[0]
    assert resp.error_code == E.none, resp
    return int(resp.base_offset)
