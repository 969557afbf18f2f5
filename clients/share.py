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
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from clients import confluent, wire
from clients.errors import COORDINATOR_RETRIABLE, LEADER_RETRIABLE
from targets.target import NotSupportedByTarget
from reference_impl.client.raw_client import ClusterClient, RawClient
from reference_impl.protocol import framing, payloads
from reference_impl.protocol import records as r
from reference_impl.protocol.api_keys import ApiKey

E = ErrorCode
ACCEPT, RELEASE, REJECT, RENEW = 1, 2, 3, 4
GAP = 0
SHARE_GROUP_HEARTBEAT, SHARE_GROUP_DESCRIBE, SHARE_FETCH, SHARE_ACKNOWLEDGE = ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_GROUP_DESCRIBE, ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE
INCREMENTAL_ALTER_CONFIGS, GROUP_RESOURCE, SET = ApiKey.INCREMENTAL_ALTER_CONFIGS, 32, 0

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


def alter_group_configs(client: ClusterClient, group: str, configs: dict[str, str]) -> tuple[int, str | None]:
    """IncrementalAlterConfigs SET on the GROUP resource (type 32): (error code, message)."""
    if client.bootstrap.negotiate(INCREMENTAL_ALTER_CONFIGS, 1) is None:
        raise NotSupportedByTarget("the target has no IncrementalAlterConfigs: group configs cannot be set")
    resp = client.bootstrap.request(
        INCREMENTAL_ALTER_CONFIGS, 1,
        resources=(nested(44, 1, "AlterConfigsResource", resource_type=GROUP_RESOURCE, resource_name=group, configs=tuple(
            nested(44, 1, "AlterableConfig", name=k, config_operation=SET, value=v) for k, v in configs.items())),),
        validate_only=False,
    )
    result = resp.responses[0]
    return int(result.error_code), result.error_message


def set_group_configs(client: ClusterClient, group: str, configs: dict[str, str]) -> None:
    """share.* group configs with IncrementalAlterConfigs on the GROUP resource (type 32),
    then until every broker has applied them (await_group_configs)."""
    code, message = alter_group_configs(client, group, configs)
    if code != E.none:
        raise AssertionError(f"IncrementalAlterConfigs GROUP {group} {configs}: {E(code)!r} {message}")
    await_group_configs(client, group, configs)


def described_group_configs(node: RawClient, group: str, names: list[str] | None) -> dict[str, str | None] | None:
    """DescribeConfigs of the GROUP resource on one node (its own metadata image; names None:
    all): name -> value; None where the node cannot describe group configs."""
    version = node.negotiate(ApiKey.DESCRIBE_CONFIGS, 4)
    if version is None:
        return None
    keys = None if names is None else tuple(names)
    resp = node.request(ApiKey.DESCRIBE_CONFIGS, version, resources=(nested(
        ApiKey.DESCRIBE_CONFIGS, version, "DescribeConfigsResource", resource_type=GROUP_RESOURCE,
        resource_name=group, configuration_keys=keys),), include_synonyms=False, include_documentation=False)
    result = resp.results[0]
    return None if result.error_code != E.none else {c.name: c.value for c in result.configs}


def await_group_configs(client: ClusterClient, group: str, configs: dict[str, str], wait_s: float = 15.0) -> None:
    """Until every broker describes the group configs just set. In KRaft the controller
    answers IncrementalAlterConfigs once the ConfigRecord is committed; each broker applies
    it when it replays the metadata log (DynamicConfigPublisher -> GroupConfigManager), so
    the group's coordinator may still use the old value for a moment (seen on 3-broker
    containers: a heartbeat interval of 5000 right after setting 8000). A fence, not a check:
    a node that cannot describe group configs is not waited for, and the tests assert the
    behaviour themselves."""
    deadline = time.monotonic() + wait_s
    pending = sorted(client.nodes)
    while pending and time.monotonic() < deadline:
        pending = [n for n in pending if not _describes_on(client, n, group, configs)]
        if pending:
            time.sleep(0.1)


def _describes_on(client: ClusterClient, node_id: int, group: str, configs: dict[str, str]) -> bool:
    try:
        seen = described_group_configs(client.node(node_id), group, sorted(configs))
    except OSError:  # a node that is down applies nothing; it is not waited for
        return True
    # A name the node does not list (a target that describes fewer group configs) is not waited for.
    return seen is None or all(seen.get(k) in (None, v) for k, v in configs.items())


def set_group_configs_if_known(client: ClusterClient, group: str, configs: dict[str, str]) -> None:
    """set_group_configs, but a config name the target does not know (a later release's
    group config, e.g. share.delivery.count.limit before 4.3) is NotSupportedByTarget."""
    code, message = alter_group_configs(client, group, configs)
    if code == E.invalid_config and "unknown" in (message or "").lower():
        raise NotSupportedByTarget(f"the target does not know group config(s) {sorted(configs)}: {message}")
    unknown = unknown_group_configs(client, group, configs) if code == E.invalid_config and not message else []
    if unknown:  # refused without a reason (kfake): the names its DescribeConfigs does not list
        raise NotSupportedByTarget(f"the target does not know group config(s) {unknown} (refused, INVALID_CONFIG, "
                                   "and absent from its DescribeConfigs of the group)")
    if code != E.none:
        raise AssertionError(f"IncrementalAlterConfigs GROUP {group} {configs}: {E(code)!r} {message}")
    await_group_configs(client, group, configs)


def unknown_group_configs(client: ClusterClient, group: str, configs: dict[str, str]) -> list[str]:
    """The names in `configs` that DescribeConfigs of the GROUP resource does not list (all
    configs described): the group configs this target does not have."""
    known = described_group_configs(client.bootstrap, group, None)
    return [] if known is None else sorted(name for name in configs if name not in known)


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
        if resp.error_code in COORDINATOR_RETRIABLE and time.monotonic() < deadline:
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


def share_ack(node: RawClient, group: str, member: str, epoch: int, acks: Acks, *, version: int | None = None,
              is_renew_ack: bool = False) -> Any:
    version = version or share_version(node, SHARE_ACKNOWLEDGE)
    by_topic: dict[uuid.UUID, list] = {}
    for (tid, p), batches in acks.items():
        by_topic.setdefault(tid, []).append(nested(SHARE_ACKNOWLEDGE, version, "AcknowledgePartition", partition_index=p, acknowledgement_batches=tuple(
            nested(SHARE_ACKNOWLEDGE, version, "AcknowledgementBatch", first_offset=f, last_offset=l, acknowledge_types=tuple(ts))
            for f, l, ts in batches)))
    req = payloads.build(
        framing.request_schema(SHARE_ACKNOWLEDGE, version), group_id=group, member_id=member, share_session_epoch=epoch,
        is_renew_ack=is_renew_ack,
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
    """One non-transactional batch to the partition leader, stamped with the current time
    (a 0 timestamp falls to Kafka's time-based retention as soon as the segment rolls, e.g.
    when a new leader takes over); returns its base offset. The leader a broker's metadata
    names may not have applied its leadership yet (several brokers: each replays the metadata
    log on its own), so a partition without a known leader and NOT_LEADER_OR_FOLLOWER and the
    like are retried for a while, as a producer would (seen on testcontainers:nodes=3 right
    after the topic was created)."""
    deadline = time.monotonic() + 15
    while True:
        req = payloads.build(
            framing.request_schema(0, 9), transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
            topic_data=(nested(0, 9, "TopicProduceData", name=topic, partition_data=(
                nested(0, 9, "PartitionProduceData", index=partition, records=r.build_batch(values, timestamp_ms=int(time.time() * 1000))),)),),
        )
        leader = wire.leader_eventually(client, topic, partition, max(0.0, deadline - time.monotonic()))
        resp = leader.send(req).responses[0].partition_responses[0]
        if resp.error_code not in LEADER_RETRIABLE or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert resp.error_code == E.none, resp
    return int(resp.base_offset)


# -- share-partition state as the share coordinator persisted it (ReadShareGroupState) ---------

READ_SHARE_GROUP_STATE, SHARE_COORDINATOR_KEY_TYPE = ApiKey.READ_SHARE_GROUP_STATE, 2
AVAILABLE, ACKNOWLEDGED, ARCHIVED = 0, 2, 4  # persisted DeliveryState codes (Acquired is never persisted)


def read_share_state(client: ClusterClient, group: str, tid: uuid.UUID, p: int = 0,
                     wait_s: float = 10.0) -> tuple[int, list[tuple[int, int, int, int]]]:
    """(start offset = SPSO, [(first, last, delivery state, delivery count)]) of one
    share-partition, read from its share coordinator. The read carries the partition's
    current leader epoch (from Metadata): the share-partition leader stored that epoch, so
    the probe is not fenced and records nothing new. Retries the share coordinator's
    not-ready answers until `wait_s`."""
    if client.bootstrap.negotiate(READ_SHARE_GROUP_STATE) is None:
        raise NotSupportedByTarget("the target has no ReadShareGroupState: persisted share state is not observable")
    key = f"{group}:{kafka_uuid(tid)}:{p}"
    deadline = time.monotonic() + wait_s
    while True:
        coord = client.coordinator_for(key, SHARE_COORDINATOR_KEY_TYPE, wait_s=wait_s)
        resp = coord.request(READ_SHARE_GROUP_STATE, 0, group_id=group, topics=(
            nested(READ_SHARE_GROUP_STATE, 0, "ReadStateData", topic_id=tid, partitions=(
                nested(READ_SHARE_GROUP_STATE, 0, "PartitionData", partition=p, leader_epoch=leader_epoch(client, tid, p)),)),))
        part = resp.results[0].partitions[0]
        if part.error_code == E.none:
            return int(part.start_offset), [(int(b.first_offset), int(b.last_offset), int(b.delivery_state), int(b.delivery_count))
                                            for b in part.state_batches]
        if part.error_code not in COORDINATOR_RETRIABLE or time.monotonic() > deadline:
            raise AssertionError(f"ReadShareGroupState {key}: {part.error_code!r} {part.error_message}")
        time.sleep(0.2)


def leader_epoch(client: ClusterClient, tid: uuid.UUID, p: int) -> int:
    for t in client.refresh().topics:
        if t.topic_id == tid:
            return int(next(pm.leader_epoch for pm in t.partitions if pm.partition_index == p))
    raise AssertionError(f"topic id {tid} not in metadata")


def effective_spso(start: int, batches: list[tuple[int, int, int, int]]) -> int:
    """The SPSO the persisted state implies: its start offset moved over leading
    Acknowledged / Archived batches. Kafka 4.x writes the start offset as it was before the
    acknowledgement being persisted (it moves the in-memory SPSO after the write), so the
    stored start offset can lag one write behind while the batches already show why."""
    final = {o for f, l, st, _ in batches if st in (ACKNOWLEDGED, ARCHIVED) for o in range(f, l + 1)}
    while start in final:
        start += 1
    return start


def kafka_uuid(u: uuid.UUID) -> str:
    """Uuid.toString in Kafka: URL-safe base64 without padding (share coordinator keys)."""
    return base64.urlsafe_b64encode(u.bytes).rstrip(b"=").decode()


def persisted_states(batches: list[tuple[int, int, int, int]]) -> dict[int, tuple[int, int]]:
    """offset -> (delivery state, delivery count) from read_share_state's batches."""
    return {o: (s, c) for f, l, s, c in batches for o in range(f, l + 1)}


# -- one member's share session, and a share-partition set up for a test -----------------------


class ShareSession:
    """One member's share session with one broker. Each accepted request moves the session
    epoch on by one (0 opens the session); a request refused at the top level does not."""

    def __init__(self, node: RawClient, group: str, member: str, version: int | None = None) -> None:
        self.node, self.group, self.member = node, group, member
        self.version = version or share_version(node, SHARE_FETCH)
        self.epoch = 0
        self.last_ranges: list[tuple[int, int, int]] = []  # AcquiredRecords of the last fetch_until

    def fetch(self, parts: list[PartitionKey] = (), *, acks: Acks | None = None, max_wait_ms: int = 0, **kw: Any) -> Any:
        resp = share_fetch(self.node, self.group, self.member, self.epoch, parts, acks=acks,
                           max_wait_ms=max_wait_ms, version=self.version, **kw)
        self._advance(resp)
        return resp

    def ack(self, acks: Acks, version: int | None = None, is_renew_ack: bool = False) -> Any:
        resp = share_ack(self.node, self.group, self.member, self.epoch, acks, version=version or self.version,
                         is_renew_ack=is_renew_ack)
        self._advance(resp)
        return resp

    def fetch_until(self, parts: list[PartitionKey], want: int, wait_s: float = 10.0, max_wait_ms: int = 300,
                    **kw: Any) -> dict[int, int]:
        """Fetch until `want` offsets were acquired (or `wait_s` passed): offset -> delivery
        count of everything acquired."""
        got: dict[int, int] = {}
        self.last_ranges = []
        deadline = time.monotonic() + wait_s
        while len(got) < want and time.monotonic() < deadline:
            resp = self.fetch(parts, max_wait_ms=max_wait_ms, **kw)
            assert resp.error_code == E.none, resp
            got.update(delivery_counts(resp))
            self.last_ranges += acquired(resp)
        return got

    def close(self, acks: Acks | None = None) -> Any:
        """The final ShareAcknowledge (epoch -1): closes the session, releasing what it holds."""
        return share_ack(self.node, self.group, self.member, -1, acks or {}, version=self.version)

    def _advance(self, resp: Any) -> None:
        if resp.error_code == E.none:
            self.epoch += 1


def require_share_groups(target: Any) -> None:
    """NotSupportedByTarget unless the target speaks the share-group RPCs at v1+
    (Kafka 4.1+ with share.version=1, the reference, librdkafka's mock)."""
    caps = target.capabilities()
    for key, name in ((SHARE_GROUP_HEARTBEAT, "ShareGroupHeartbeat"), (SHARE_FETCH, "ShareFetch"), (SHARE_ACKNOWLEDGE, "ShareAcknowledge")):
        hi = caps.max_version(key)
        if hi is None or hi < 1:
            raise NotSupportedByTarget(f"{name} v1+ is not advertised (share groups)")


def require_share_version(node: RawClient, version: int, what: str) -> None:
    if share_version(node, SHARE_FETCH) < version or share_version(node, SHARE_ACKNOWLEDGE) < version:
        raise NotSupportedByTarget(f"{what} needs ShareFetch/ShareAcknowledge v{version}")


def describe_share_group(cc: ClusterClient, group: str, wait_s: float = 15.0) -> Any:
    """ShareGroupDescribe at the group's coordinator, asked again while it loads or moves
    (until `wait_s`; then AssertionError with the last answer)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            node = cc.coordinator_for(group, 0, wait_s=wait_s)
            (d,) = node.request(SHARE_GROUP_DESCRIBE, 1, group_ids=(group,), include_authorized_operations=False).groups
        except (OSError, ConnectionError, EOFError, RuntimeError) as exc:
            d = exc
        if not isinstance(d, Exception) and d.error_code == E.none:
            return d
        assert time.monotonic() < deadline, f"ShareGroupDescribe({group}): {d!r}"
        time.sleep(0.3)


def group_snapshot(d: Any) -> str:
    """One line of a ShareGroupDescribe answer for a failure message: the group's state and
    epochs, and each member's client id, epoch and assigned partitions."""
    members = "; ".join(
        f"{m.client_id} epoch {m.member_epoch} "
        f"{sorted((str(t.topic_name), p) for t in m.assignment.topic_partitions for p in t.partitions)}"
        for m in d.members)
    return (f"group {d.group_state} epoch {d.group_epoch} assignment epoch {d.assignment_epoch}, "
            f"{len(d.members)} members: {members}")


def eventually(check: Callable[[], Any], timeout_s: float = 15.0) -> Any:
    """``check()``'s value once it stops raising AssertionError (the last one after
    ``timeout_s``): Kafka answers describe and share-state reads from committed state, so
    a change shows a moment later."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


class SharePartitionUnderTest:
    """One topic (partition 0 by default) read by one share group, for delivery tests.

    `open()` creates the topic (the target's own means where it has no CreateTopics), sets
    the group configs first (they must precede the group's first use), and `member()` joins
    and opens a session on the partition leader."""

    def __init__(self, target: Any, cc: ClusterClient, topic: str, group: str, partitions: int = 1) -> None:
        self.target, self.cc, self.topic, self.group = target, cc, topic, group
        self.partitions = partitions
        self.tid: uuid.UUID | None = None
        self._joined = False
        self.member_epochs: dict[str, int] = {}  # member id -> epoch of its last heartbeat

    def open(self, configs: dict[str, str] | None = None) -> "SharePartitionUnderTest":
        require_share_groups(self.target)
        confluent.create_topic(self.target, self.topic, partitions=self.partitions)
        if configs:
            set_group_configs_if_known(self.cc, self.group, configs)
        self.tid = self.wait_topic_id()
        return self

    def key(self, p: int = 0) -> PartitionKey:
        return (self.tid, p)

    def member(self, p: int = 0) -> ShareSession:
        """A member with a share session on partition `p`'s leader. The group's first member
        waits for its assignment (Kafka assigns a partition only once its share state is
        initialised); later ones join with one heartbeat: ShareFetch does not depend on the
        assignment, and an assignor that gives a partition to one member only (librdkafka's
        mock) must not turn delivery checks into membership failures."""
        if self._joined:
            member = new_member_id()
            deadline = time.monotonic() + 15
            while True:  # the coordinator may be moving (a node was just stopped)
                resp = heartbeat(self.cc.coordinator_for(self.group, 0, wait_s=15), self.group, member, 0, [self.topic])
                if resp.error_code not in COORDINATOR_RETRIABLE or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert resp.error_code == E.none, resp
            self.member_epochs[member] = int(resp.member_epoch)
        else:
            member, self.member_epochs[member] = join_share_group(self.cc, self.group, [self.topic])
            self._joined = True
        return ShareSession(self.cc.leader_for(self.topic, p), self.group, member)

    def primed_member(self, p: int = 0) -> ShareSession:
        """A member whose first (empty) fetch has initialised the share-partition, so with the
        default `latest` reset everything produced afterwards is delivered."""
        s = self.member(p)
        resp = s.fetch([self.key(p)], max_wait_ms=200)
        assert resp.error_code == E.none, resp
        assert acquired(resp) == [], f"a fresh share-partition delivered records before any were produced: {acquired(resp)}"
        return s

    def produce(self, values: list[bytes], p: int = 0) -> int:
        return produce_values(self.cc, self.topic, values, p)

    def produce_batches(self, count: int, size: int, p: int = 0) -> int:
        """`count` batches of `size` records; returns the first base offset."""
        base = self.produce([b"r%d" % i for i in range(size)], p)
        for _ in range(count - 1):
            self.produce([b"r%d" % i for i in range(size)], p)
        return base

    def state(self, p: int = 0) -> tuple[int, list[tuple[int, int, int, int]]]:
        return read_share_state(self.cc, self.group, self.tid, p)

    def wait_topic_id(self) -> uuid.UUID:
        deadline = time.monotonic() + 15
        while True:
            for t in self.cc.refresh([self.topic]).topics:
                if t.name == self.topic and t.error_code == 0 and t.partitions and all(p.leader_id >= 0 for p in t.partitions):
                    return t.topic_id
            if time.monotonic() > deadline:
                raise AssertionError(f"topic {self.topic} has no leaders in metadata")
            time.sleep(0.1)


def two_partitions_of_one_leader(sp: "SharePartitionUnderTest") -> list[int]:
    """Two partitions of ``sp``'s topic led by the same broker (one ShareFetch can carry
    both), or not supported when no broker leads two."""
    by_leader: dict[int, list[int]] = {}
    for pm in next(t for t in sp.cc.refresh([sp.topic]).topics if t.name == sp.topic).partitions:
        by_leader.setdefault(int(pm.leader_id), []).append(int(pm.partition_index))
    parts = sorted(max(by_leader.values(), key=len))[:2]
    if len(parts) < 2:
        raise NotSupportedByTarget(f"no broker leads two of the {sp.partitions} partitions")
    return parts
