"""Consumer-group membership over the raw protocol under either group protocol.

`classic` joins with JoinGroup / SyncGroup (the member's *generation*); `consumer` (KIP-848)
joins with ConsumerGroupHeartbeat (ApiKey 68): the member's *epoch*, a server-side
assignment, and reconciliation -- the member acknowledges its assignment by sending the
partitions it owns in the next heartbeat, and a partition taken from it reaches another
member only after that (Kafka's ConsumerGroupMember / CurrentAssignmentBuilder).
TxnOffsetCommit and OffsetCommit carry the epoch in their generation field (KIP-848
"Offset Commit"), so a suite can fence either kind of member through one `Member`.
"""

from __future__ import annotations

import datetime
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from clients import wire
from clients.errors import COORDINATOR_RETRIABLE
from clients.share import new_member_id
from reference_impl.client.raw_client import ClusterClient, RawClient
from reference_impl.protocol.api_keys import ApiKey

CLASSIC, CONSUMER = "classic", "consumer"
GROUP_PROTOCOLS = (CLASSIC, CONSUMER)
CONSUMER_GROUP_HEARTBEAT = ApiKey.CONSUMER_GROUP_HEARTBEAT
LEAVE_EPOCH, STATIC_LEAVE_EPOCH = -1, -2  # KIP-848: a member leaves; a static member leaves for a while
E = ErrorCode


def consumer_protocol_missing(node: RawClient) -> str | None:
    """Why `node` cannot host a KIP-848 consumer group, or None (ApiVersions lists key 68)."""
    if node.negotiate(CONSUMER_GROUP_HEARTBEAT) is None:
        return "the target does not support the consumer group protocol (KIP-848: no ConsumerGroupHeartbeat, key 68)"
    return None


def heartbeat(node: RawClient, group: str, member_id: str, epoch: int, *, topics: list[str] | None = None,
              owned: dict[uuid.UUID, list[int]] | None = None, instance_id: str | None = None,
              rebalance_ms: int = -1) -> Any:
    """One ConsumerGroupHeartbeat at the highest version both sides speak; None fields mean
    "unchanged" (the request's nullable fields). Topic names go with an empty regex, as
    librdkafka sends them: its mock aborts the process on names without a regex
    (rdkafka_mock_cgrp.c validate_subscription), and Kafka reads "" as no regex."""
    r = wire.Req(node, CONSUMER_GROUP_HEARTBEAT, 1)
    parts = None if owned is None else tuple(
        r.part("TopicPartitions", topic_id=tid, partitions=tuple(sorted(ps))) for tid, ps in sorted(owned.items()))
    return r.send(group_id=group, member_id=member_id, member_epoch=epoch, instance_id=instance_id, rack_id=None,
                  rebalance_timeout=datetime.timedelta(milliseconds=rebalance_ms),
                  subscribed_topic_names=None if topics is None else tuple(topics),
                  subscribed_topic_regex=None if topics is None else "",
                  server_assignor=None, topic_partitions=parts)


def assignment_of(resp: Any) -> dict[uuid.UUID, list[int]] | None:
    """The assignment a heartbeat response carries ({topic id: partitions}), None when unchanged."""
    if resp.assignment is None:
        return None
    return {tp.topic_id: sorted(int(p) for p in tp.partitions) for tp in resp.assignment.topic_partitions}


@dataclass
class Member:
    """One group member as the coordinator sees it: `epoch` is the generation (classic) or
    the member epoch (consumer) -- what OffsetCommit / TxnOffsetCommit carry."""

    cc: ClusterClient
    group: str
    protocol: str
    member_id: str = ""
    epoch: int = -1
    instance_id: str | None = None
    owned: dict[uuid.UUID, list[int]] = field(default_factory=dict)  # what its heartbeats acknowledge
    assigned: dict[uuid.UUID, list[int]] = field(default_factory=dict)  # the coordinator's latest answer
    errors: list[int] = field(default_factory=list)  # every non-retried answer, in order

    @property
    def coordinator(self) -> RawClient:
        return self.cc.coordinator_for(self.group, wait_s=30)

    def beat(self, *, topics: list[str] | None = None, rebalance_ms: int = -1, ack: bool = True) -> int:
        """One consumer-protocol heartbeat acknowledging what the member owns; takes the new
        epoch and assignment from the answer, and owns the assignment unless `ack` is False
        (a member that learns of a revocation but stalls before giving the partitions up).
        Returns its error code."""
        resp = heartbeat(self.coordinator, self.group, self.member_id, self.epoch, topics=topics,
                         owned=self.owned, instance_id=self.instance_id, rebalance_ms=rebalance_ms)
        code = int(resp.error_code)
        if code == E.none:
            self.member_id = resp.member_id or self.member_id
            self.epoch = int(resp.member_epoch)
            assigned = assignment_of(resp)
            if assigned is not None:
                self.assigned = assigned
            if ack:
                self.owned = self.assigned
        return code

    def partitions(self) -> list[int]:
        return sorted(p for ps in self.owned.values() for p in ps)

    def learn_revocation(self, wait_s: float = 15.0) -> list[int]:
        """Heartbeat without acknowledging until the coordinator takes partitions away; the
        partitions it now asks the member to keep. The revocation (and the member's rebalance
        timeout) starts only when the member itself hears of it (Kafka's reconciliation)."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            code = self.beat(ack=False)
            kept = sorted(p for ps in self.assigned.values() for p in ps)
            if code != E.none or kept != self.partitions():
                return kept
            time.sleep(0.2)
        raise AssertionError(f"member {self.member_id} was asked to revoke nothing within {wait_s}s")

    def leave(self, epoch: int = LEAVE_EPOCH) -> int:
        """Leave the group (consumer: heartbeat with epoch -1, or -2 for a static member's
        temporary leave; classic: LeaveGroup is not needed by the suites and not sent)."""
        if self.protocol != CONSUMER:
            raise ValueError("leave() speaks ConsumerGroupHeartbeat only")
        resp = heartbeat(self.coordinator, self.group, self.member_id, epoch, instance_id=self.instance_id)
        return int(resp.error_code)


def join_consumer(cc: ClusterClient, group: str, topics: list[str], *, instance_id: str | None = None,
                  rebalance_ms: int = 10_000, want: int = 0, wait_s: float = 30.0) -> Member:
    """Join `group` with ConsumerGroupHeartbeat (v1: the client makes its member id, KIP-1082)
    and heartbeat, acknowledging each assignment, until the member owns at least `want`
    partitions and its epoch is stable. Coordinator-loading answers are retried."""
    member = Member(cc, group, CONSUMER, new_member_id(), 0, instance_id)
    code = _until_ok(lambda: member.beat(topics=topics, rebalance_ms=rebalance_ms), wait_s)
    if code != E.none:
        member.errors.append(code)
        return member
    settle(member, want=want, wait_s=wait_s)
    return member


def settle(member: Member, *, want: int = 0, wait_s: float = 30.0, every_s: float = 0.2) -> int:
    """Heartbeat every `every_s` until the member owns `want` partitions (at least) and two
    answers in a row leave its epoch unchanged; the last error code (NONE when settled)."""
    deadline = time.monotonic() + wait_s
    last_epoch, code = None, E.none
    while time.monotonic() < deadline:
        code = member.beat()
        if code != E.none:
            member.errors.append(code)
            return code
        if member.epoch == last_epoch and len(member.partitions()) >= want:
            return code
        last_epoch = member.epoch
        time.sleep(every_s)
    raise AssertionError(f"member {member.member_id} of {member.group} did not settle within {wait_s}s: "
                         f"epoch {member.epoch}, owns {member.partitions()}")


def _until_ok(send: Any, wait_s: float) -> int:
    """send() again every 200 ms while it answers a coordinator-retriable code (a fresh
    __consumer_offsets partition is still loading on Kafka)."""
    deadline = time.monotonic() + wait_s
    while True:
        code = send()
        if code not in COORDINATOR_RETRIABLE or time.monotonic() > deadline:
            return code
        time.sleep(0.2)


__all__ = [
    "CLASSIC", "CONSUMER", "GROUP_PROTOCOLS", "LEAVE_EPOCH", "STATIC_LEAVE_EPOCH", "Member", "assignment_of",
    "consumer_protocol_missing", "heartbeat", "join_consumer", "settle",
]
