"""KIP-447 suite: group fencing of transactional offset commits, pending offsets and
stable OffsetFetch, plus raw-protocol helpers shared by its modules.

`RawTxn` drives one transaction over the raw protocol (clients.txn's session at
transaction-protocol v1 versions) and returns error codes: TxnOffsetCommit unretried (the
scenario looks at every answer), the coordinator's settling answers retried elsewhere.
`join` / `sync` speak JoinGroup / SyncGroup with an optional group instance id (static
membership), `offset_fetch` OffsetFetch at a chosen version.

`GroupUnderTest` runs a scenario's group under either group protocol (issue 28): a member
joins, ages (its generation or member epoch moves on), is replaced (static membership) or
is taken over by a rival, with JoinGroup / SyncGroup (classic) or ConsumerGroupHeartbeat
(consumer, KIP-848, clients.groups). `both_protocols(...)` parametrizes a test over the two
protocols; the consumer half also claims the KIP-848 ids given.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import pytest
from targets.target import NotSupportedByTarget

from clients import confluent, groups, wire
from clients.errors import COORDINATOR_RETRIABLE
from clients.share import new_member_id
from clients.txn import TxnSession
from clients.wire import ms
from conformance.suites.kip98 import require_transactions
from reference_impl.client.raw_client import ClusterClient, RawClient
from reference_impl.protocol.api_keys import ApiKey
from kio.schema.errors import ErrorCode

TXN_OFFSET_COMMIT = ApiKey.TXN_OFFSET_COMMIT
OFFSET_FETCH, JOIN_GROUP, SYNC_GROUP = ApiKey.OFFSET_FETCH, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP

# Error codes (Kafka's Errors table).
NONE = ErrorCode.none
COORDINATOR_LOAD_IN_PROGRESS = ErrorCode.coordinator_load_in_progress
ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID = ErrorCode.illegal_generation, ErrorCode.unknown_member_id
MEMBER_ID_REQUIRED = ErrorCode.member_id_required
FENCED_INSTANCE_ID = ErrorCode.fenced_instance_id
NO_REASSIGNMENT_IN_PROGRESS = ErrorCode.no_reassignment_in_progress
UNSTABLE_OFFSET_COMMIT = ErrorCode.unstable_offset_commit
STALE_MEMBER_EPOCH, UNRELEASED_INSTANCE_ID = ErrorCode.stale_member_epoch, ErrorCode.unreleased_instance_id


class RawTxn(TxnSession):
    """A clients.txn session at transaction protocol v1 versions (InitProducerId <= v4,
    AddOffsetsToTxn and EndTxn <= v3) that answers error codes; settling answers are
    resent every 50 ms for up to 30 s and logged in `answers` with the rest."""

    def __init__(self, cc: ClusterClient, transactional_id: str, timeout_ms: int = 20_000) -> None:
        super().__init__(cc, transactional_id, timeout_ms=timeout_ms, every_s=0.05)

    def init(self) -> int:
        return int(self.init_producer_id(highest=4).error_code)

    def add_offsets(self, group: str) -> int:
        return int(self.add_offsets_to_txn(group, highest=3).error_code)

    def end(self, commit: bool) -> int:
        return int(self.end_txn(commit, highest=3, wait_s=30.0).error_code)


def offset_fetch(client: RawClient, group: str, topic: str, partitions: list[int], *, require_stable: bool,
                 highest: int = 9, lowest: int = 1, member: groups.Member | None = None,
                 ) -> tuple[int, dict[int, tuple[int, int]]]:
    """OffsetFetch at the highest version in [lowest, highest] the broker takes:
    (version, {partition: (committed_offset, error_code)}); a group-level error is reported
    on every partition. From v9 a consumer-protocol `member` sends its id and epoch (KIP-848)."""
    r = wire.Req(client, OFFSET_FETCH, highest, lowest=lowest)
    if r.version >= 8:
        who = {"member_id": member.member_id, "member_epoch": member.epoch} if member is not None else {}
        resp = r.send(
            groups=(r.part("OffsetFetchRequestGroup", group_id=group, **who,
                           topics=(r.part("OffsetFetchRequestTopics", name=topic, partition_indexes=tuple(partitions)),)),),
            require_stable=require_stable,
        )
        g = resp.groups[0]
        group_error, topics = int(g.error_code), g.topics
    else:
        resp = r.send(
            group_id=group,
            topics=(r.part("OffsetFetchRequestTopic", name=topic, partition_indexes=tuple(partitions)),),
            require_stable=require_stable,
        )
        group_error, topics = int(getattr(resp, "error_code", 0) or 0), resp.topics
    if group_error:
        return r.version, {p: (-1, group_error) for p in partitions}
    return r.version, {int(p.partition_index): (int(p.committed_offset), int(p.error_code))
                       for t in topics for p in t.partitions}


def join(client: RawClient, group: str, topic: str, *, member_id: str = "", instance_id: str | None = None,
         session_ms: int = 10_000, rebalance_ms: int = 10_000, timeout_s: float | None = None) -> Any:
    """JoinGroup (v4..v5, the versions every target answers) with the consumer protocol,
    following MEMBER_ID_REQUIRED once."""
    r = wire.Req(client, JOIN_GROUP, 5, lowest=4)
    subscription = wire._consumer_subscription(topic)
    resp = None
    deadline = time.monotonic() + 30
    while True:
        resp = client.send(
            wire.payloads.build(
                r.cls, group_id=group, session_timeout=ms(session_ms), rebalance_timeout=ms(rebalance_ms),
                member_id=member_id, group_instance_id=instance_id, protocol_type="consumer",
                protocols=(r.part("JoinGroupRequestProtocol", name="range", metadata=subscription),), reason=None,
            ),
            timeout=timeout_s,
        )
        if int(resp.error_code) == MEMBER_ID_REQUIRED and not member_id:
            member_id = resp.member_id
            continue
        if int(resp.error_code) == COORDINATOR_LOAD_IN_PROGRESS and time.monotonic() < deadline:
            time.sleep(0.1)  # a freshly created offsets partition is still loading
            continue
        return resp


def group_coordinator(cc: ClusterClient, group: str, topic: str, timeout_s: float = 60.0) -> RawClient:
    """The group's coordinator once it answers: a freshly created __consumer_offsets partition
    answers NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS for a while (Kafka)."""
    deadline = time.monotonic() + timeout_s
    while True:
        coord = cc.coordinator_for(group, wait_s=30)
        _, ans = offset_fetch(coord, group, topic, [0], require_stable=False)
        codes = {e for _, e in ans.values()}
        if not codes & COORDINATOR_RETRIABLE or time.monotonic() > deadline:
            return coord
        time.sleep(0.2)


def commit(client: RawClient, group: str, topic: str, partition: int, offset: int, timeout_s: float = 30.0) -> int:
    """Standalone OffsetCommit (generation -1), retrying COORDINATOR_LOAD_IN_PROGRESS."""
    deadline = time.monotonic() + timeout_s
    while True:
        code = wire.offset_commit(client, group, topic, partition, offset)
        if code != COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
            return code
        time.sleep(0.1)


def sync(client: RawClient, group: str, generation: int, member_id: str, *, instance_id: str | None = None,
         assignments: dict[str, bytes] | None = None) -> Any:
    # v3 (the first with the group instance id, not yet flexible): librdkafka's mock closes
    # the connection on SyncGroup v4, as on JoinGroup v6 (DEV-005).
    r = wire.Req(client, SYNC_GROUP, 3, lowest=3)
    return r.send(
        group_id=group, generation_id=generation, member_id=member_id, group_instance_id=instance_id,
        protocol_type="consumer", protocol_name="range",
        assignments=tuple(r.part("SyncGroupRequestAssignment", member_id=m, assignment=a)
                          for m, a in (assignments or {}).items()),
    )


def require_stable_fetch(target) -> None:
    """Pending transactional offsets are observable only with OffsetFetch v7+ (RequireStable)."""
    caps = target.capabilities()
    hi = caps.max_version(OFFSET_FETCH)
    if hi is None or hi < 7:
        raise NotSupportedByTarget(f"OffsetFetch v7+ (RequireStable) not advertised (max {hi})")
    if caps.max_version(TXN_OFFSET_COMMIT) is None or caps.max_version(ApiKey.ADD_OFFSETS_TO_TXN) is None:
        raise NotSupportedByTarget("TxnOffsetCommit / AddOffsetsToTxn not advertised")
    require_transactions(caps)  # pending offsets end only by EndTxn or its timeout abort (Tansu memory: no EndTxn)


def require_txn_offset_commit_v3(target) -> None:
    """KIP-447 fencing needs TxnOffsetCommit v3+ (KIP-447.COMPAT.001)."""
    caps = target.capabilities()
    hi = caps.max_version(TXN_OFFSET_COMMIT)
    if hi is None or hi < 3:
        raise NotSupportedByTarget(f"TxnOffsetCommit v3+ (KIP-447 group fields) not advertised (max {hi})")
    require_transactions(caps)  # sendOffsetsToTransaction is a transaction: EndTxn and all


# ------------------------------------------------------------------ both group protocols

CLASSIC, CONSUMER = groups.CLASSIC, groups.CONSUMER
GROUP_PARTITIONS = 2  # the consumer protocol ages a member by moving its second partition away


def both_protocols(*consumer_ids: str):
    """Parametrize `group_protocol` (the kip447 conftest fixture gates it) over classic and
    consumer; the consumer run also claims `consumer_ids` (KIP-848 requirement ids)."""
    consumer = pytest.param(CONSUMER, marks=pytest.mark.requirement(*consumer_ids)) if consumer_ids else CONSUMER
    return pytest.mark.parametrize("group_protocol", [CLASSIC, consumer], indirect=True)


def group_config(protocol: str, **classic_only: Any) -> dict[str, Any]:
    """confluent-kafka settings of a consumer in a `protocol` group: `classic_only` (session
    timeout, heartbeat interval, assignor) are the coordinator's under the consumer protocol
    (KIP-848), and librdkafka refuses them there."""
    return {"group.protocol": protocol, **(classic_only if protocol == CLASSIC else {})}


def protocol_scenario(scenario, protocol: str):
    """`scenario(target, ids, protocol)` as a differential scenario named after both."""
    def run(target, ids):
        return scenario(target, ids, protocol)
    run.__name__ = f"{scenario.__name__}[{protocol}]"
    return run


@dataclass
class GroupUnderTest:
    """Group `group` on `topic` (GROUP_PARTITIONS partitions) under `protocol`. Members are
    clients.groups.Member: `epoch` is what TxnOffsetCommit's generation field carries."""

    target: Any
    cc: ClusterClient
    group: str
    topic: str
    protocol: str

    def join(self, *, instance_id: str | None = None, session_ms: int = 10_000,
             rebalance_ms: int = 10_000) -> groups.Member:
        """The first member: it owns every partition (consumer) or leads and assigns itself
        nothing (classic, as the suites always did). Join errors land in member.errors."""
        if self.protocol == CONSUMER:
            return groups.join_consumer(self.cc, self.group, [self.topic], instance_id=instance_id,
                                        rebalance_ms=rebalance_ms, want=GROUP_PARTITIONS)
        coord = group_coordinator(self.cc, self.group, self.topic)
        return self._classic(coord, join(coord, self.group, self.topic, instance_id=instance_id,
                                         session_ms=session_ms, rebalance_ms=rebalance_ms), instance_id)

    def age(self, member: groups.Member) -> int:
        """Move the member's generation / epoch on; returns the partition on which a commit
        with its previous one must be fenced. Classic: the member rejoins (partition 0).
        Consumer: a rival joins and the member gives up partition 1 (Kafka accepts an older
        epoch for a partition the member kept, KIP-848.FENCE.005)."""
        before = member.epoch
        if self.protocol == CLASSIC:
            aged = self._classic(member.coordinator, join(member.coordinator, self.group, self.topic,
                                                           member_id=member.member_id), None)
            member.epoch, member.errors = aged.epoch, member.errors + aged.errors
            return 0
        rival = groups.join_consumer(self.cc, self.group, [self.topic])
        deadline = time.monotonic() + 20
        while (member.epoch == before or len(member.partitions()) != 1) and time.monotonic() < deadline:
            code = member.beat()
            if code:
                member.errors.append(code)
                break
            time.sleep(0.1)
        groups.settle(rival, want=1)
        return 1

    def replace_static(self, member: groups.Member) -> tuple[groups.Member, int | None]:
        """A new member with the same instance id takes `member`'s place: (the new member, the
        answer to a join while the old one was still active -- consumer only, else None)."""
        instance = member.instance_id
        if self.protocol == CLASSIC:
            return self._classic(member.coordinator, join(member.coordinator, self.group, self.topic,
                                                           instance_id=instance), instance), None
        early = groups.Member(self.cc, self.group, CONSUMER, new_member_id(), 0, instance)
        busy = early.beat(topics=[self.topic], rebalance_ms=10_000)
        left = member.leave(groups.STATIC_LEAVE_EPOCH)
        member.errors += [left] if left else []
        return groups.join_consumer(self.cc, self.group, [self.topic], instance_id=instance,
                                    want=GROUP_PARTITIONS), busy

    def take_over(self, stalled: groups.Member, rebalance_ms: int) -> tuple[groups.Member, bool]:
        """A rival joins while `stalled` stops heartbeating; returns the rival once the group
        dropped `stalled`, and whether the rival is alone with every partition. Classic: the
        rival's JoinGroup waits out the stalled member's rebalance timeout. Consumer: the
        stalled member hears of its revocation first (its rebalance timeout starts only then)."""
        if self.protocol == CLASSIC:
            with wire.cluster_client(self.target) as cc_b:
                coord = group_coordinator(cc_b, self.group, self.topic)
                jb = join(coord, self.group, self.topic, session_ms=6000, rebalance_ms=rebalance_ms, timeout_s=30)
                rival = self._classic(coord, jb, None)
            alone = sorted(m.member_id for m in jb.members) == [rival.member_id] if jb.leader == rival.member_id else True
            return rival, alone
        rival = groups.join_consumer(self.cc, self.group, [self.topic], rebalance_ms=rebalance_ms)
        stalled.learn_revocation()
        groups.settle(rival, want=GROUP_PARTITIONS, wait_s=rebalance_ms / 1000 + 20)
        return rival, rival.partitions() == list(range(GROUP_PARTITIONS))

    def _classic(self, coord: RawClient, joined: Any, instance_id: str | None) -> groups.Member:
        """Sync after a JoinGroup as the leader assigning itself nothing."""
        gen, member_id = int(joined.generation_id), joined.member_id
        errors = [int(joined.error_code)] if int(joined.error_code) else []
        if not errors:
            s = sync(coord, self.group, gen, member_id, instance_id=instance_id, assignments={member_id: b""})
            errors += [int(s.error_code)] if int(s.error_code) else []
        return groups.Member(self.cc, self.group, CLASSIC, member_id, gen, instance_id, errors=errors)


def group_under_test(target: Any, cc: ClusterClient, ids: Any, protocol: str) -> GroupUnderTest:
    """A fresh topic (GROUP_PARTITIONS partitions) and group, its coordinator answering."""
    topic, group = ids.topic(), ids.group()
    confluent.create_topic(target, topic, partitions=GROUP_PARTITIONS)
    group_coordinator(cc, group, topic)
    return GroupUnderTest(target, cc, group, topic, protocol)


@dataclass
class AgedMemberTxn:
    """The fencing scenarios' start: `member` of group `g` joined at `first_epoch` and aged
    once (a commit with `first_epoch` must be fenced on partition `revoked`), and `txn` is
    initialised with the group's offsets added (`add`: AddOffsetsToTxn's error code)."""

    g: GroupUnderTest
    member: groups.Member
    first_epoch: int
    revoked: int
    txn: RawTxn
    add: int


def aged_member_txn(target: Any, cc: ClusterClient, ids: Any, protocol: str) -> AgedMemberTxn:
    g = group_under_test(target, cc, ids, protocol)
    member = g.join()
    first_epoch = member.epoch
    revoked = g.age(member)
    txn = RawTxn(cc, ids.transactional_id())
    txn.init()
    return AgedMemberTxn(g, member, first_epoch, revoked, txn, txn.add_offsets(g.group))


__all__ = [
    "AgedMemberTxn", "CLASSIC", "CONSUMER", "GroupUnderTest", "aged_member_txn", "both_protocols", "group_config", "group_under_test", "protocol_scenario",
    "RawTxn", "commit", "group_coordinator", "join", "offset_fetch", "require_stable_fetch",
    "require_txn_offset_commit_v3", "sync",
]
