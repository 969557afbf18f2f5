"""KIP-447 suite: group fencing of transactional offset commits, pending offsets and
stable OffsetFetch, plus raw-protocol helpers shared by its modules.

`RawTxn` drives one transaction over the raw protocol (clients.txn's session at
transaction-protocol v1 versions) and returns error codes: TxnOffsetCommit unretried (the
scenario looks at every answer), the coordinator's settling answers retried elsewhere.
`join` / `sync` speak JoinGroup / SyncGroup with an optional group instance id (static
membership), `offset_fetch` OffsetFetch at a chosen version.
"""

from __future__ import annotations

import time
from typing import Any

from targets.target import NotSupportedByTarget

from clients import wire
from clients.errors import COORDINATOR_RETRIABLE
from clients.txn import TxnSession
from clients.wire import ms
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
                 highest: int = 9, lowest: int = 1) -> tuple[int, dict[int, tuple[int, int]]]:
    """OffsetFetch at the highest version in [lowest, highest] the broker takes:
    (version, {partition: (committed_offset, error_code)}); a group-level error is reported
    on every partition."""
    r = wire.Req(client, OFFSET_FETCH, highest, lowest=lowest)
    if r.version >= 8:
        resp = r.send(
            groups=(r.part("OffsetFetchRequestGroup", group_id=group,
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


def require_txn_offset_commit_v3(target) -> None:
    """KIP-447 fencing needs TxnOffsetCommit v3+ (KIP-447.COMPAT.001)."""
    caps = target.capabilities()
    hi = caps.max_version(TXN_OFFSET_COMMIT)
    if hi is None or hi < 3:
        raise NotSupportedByTarget(f"TxnOffsetCommit v3+ (KIP-447 group fields) not advertised (max {hi})")


__all__ = [
    "RawTxn", "commit", "group_coordinator", "join", "offset_fetch", "require_txn_offset_commit_v3", "sync",
]
