"""ShareFetch (key 78), v1-v2: share sessions, acquisition, piggy-backed acknowledgements.

* Session epochs (see model/share_session.py for the table): 0 opens a session (no
  acknowledgements allowed: INVALID_REQUEST; a full cache: SHARE_SESSION_LIMIT_REACHED),
  1..MAX continue it (SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH), -1 applies
  the acknowledgements, releases what the member still holds and closes the session
  (partitions to fetch or forget are ignored, as on Kafka 4.4.0). Session errors are
  top-level. An empty member id is INVALID_REQUEST (an empty group id is accepted).
* Membership: like Kafka 4.x, the share-partition leader does not check that the member
  belongs to the share group; `SharePartitionManager.require_group_membership` turns the
  check on (UNKNOWN_MEMBER_ID, top-level, when `state.share_groups` does not know it).
* Piggy-backed acknowledgements are applied before acquiring; their outcome is the
  partition's AcknowledgeErrorCode (atomic per partition: INVALID_REQUEST,
  INVALID_RECORD_STATE, ...).
* Authorization (KIP-932 "Access control"): READ on the group, else top-level
  GROUP_AUTHORIZATION_FAILED; READ on each topic, else the partition's
  TOPIC_AUTHORIZATION_FAILED (fetch and acknowledgements alike).
* Per partition: UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER
  (with the current leader and its endpoint). Records are acquired with
  SharePartition.acquire: max_records (shared by the whole request), max_bytes split evenly
  over the partitions (the first batch always), ShareAcquireMode record_limit (v2).
  The share-partition's isolation level is the group's share.isolation.level.
* Nothing acquired: wait up to max_wait for records to become acquirable.
* Fair rotation: the order partitions are served in rotates by the session epoch.
* Responses: a full (epoch 0) request answers every partition; an incremental one only
  partitions with records, errors or acknowledgements.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers._authz import Op, Res, authorized
from reference_impl.handlers.metadata import node_endpoints, nonzero_uuid, sync_liveness
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model import seeded_bugs as bugs
from reference_impl.model.share_partition import AckResult, AcknowledgeType
from reference_impl.model.share_partition_manager import FetchedPartition, SharePartitionManager
from reference_impl.model.share_session import ShareSessionError
from reference_impl.protocol import payloads
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.SHARE_FETCH
NO_THROTTLE = datetime.timedelta(0)
MAX_VERSION = 2


# -- shared with share_acknowledge -----------------------------------------------------


def share_manager(state: Any) -> SharePartitionManager:
    """The share-partition leaders and share sessions of the reference state."""
    return state.share_partitions


def member_error(state: Any, group_id: str, member_id: str) -> ErrorCode | None:
    """UNKNOWN_MEMBER_ID when membership is checked (`require_group_membership`, off as in
    Kafka) and the share group coordinator does not know the member."""
    if not share_manager(state).require_group_membership:
        return None
    group = state.share_groups.group(group_id)
    if group is None or member_id not in group.members:
        return ErrorCode.unknown_member_id
    return None


@dataclass(slots=True)
class PartitionOutcome:
    topic_id: uuid.UUID | None
    partition: int
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    ack_error: ErrorCode | None = None  # None: no acknowledgements for this partition
    ack_message: str | None = None
    leader: tuple[int, int] = (-1, -1)
    fetched: FetchedPartition = field(default_factory=FetchedPartition)


def resolve(ctx: RequestContext, topic_id: uuid.UUID | None, partition: int) -> tuple[Any, ErrorCode, tuple[int, int]]:
    """(PartitionState or None, error, (leader id, leader epoch)) for a share-partition on this node;
    TOPIC_AUTHORIZATION_FAILED without READ on the topic (KafkaApis filters by READ on TOPIC)."""
    topic = ctx.state.topics.by_id(topic_id)
    if topic is None:
        return None, ErrorCode.unknown_topic_id, (-1, -1)
    if not authorized(ctx, Op.READ, Res.TOPIC, topic.name):
        return None, ErrorCode.topic_authorization_failed, (-1, -1)
    part = topic.partition(partition)
    if part is None:
        return None, ErrorCode.unknown_topic_or_partition, (-1, -1)
    leader = (int(part.leader), int(part.leader_epoch))
    if part.leader != ctx.node_id:
        return part, ErrorCode.not_leader_or_follower, leader
    return part, ErrorCode.none, leader


def ack_batches(batches: Any, version: int) -> tuple[list[tuple[int, int, list[int]]], AckResult | None]:
    """Acknowledgement batches as tuples, or the partition's INVALID_REQUEST."""
    out: list[tuple[int, int, list[int]]] = []
    prev_last = None
    for b in batches:
        first, last, types = int(b.first_offset), int(b.last_offset), [int(t) for t in b.acknowledge_types]
        if not types:
            return out, AckResult(ErrorCode.invalid_request, "Acknowledge types must not be empty.")
        if prev_last is not None and first <= prev_last:
            return out, AckResult(ErrorCode.invalid_request, "Acknowledgement batches must be ascending and disjoint.")
        if version < 2 and AcknowledgeType.RENEW in types:
            return out, AckResult(ErrorCode.invalid_request, "RENEW needs version 2.")
        prev_last = last
        out.append((first, last, types))
    return out, None


def apply_acks(
    ctx: RequestContext, mgr: SharePartitionManager, group_id: str, member_id: str,
    topic_id: uuid.UUID | None, partition: int, batches: Any,
) -> PartitionOutcome:
    out = PartitionOutcome(topic_id, partition)
    part, error, out.leader = resolve(ctx, topic_id, partition)
    if error != ErrorCode.none:
        out.ack_error = error
        return out
    parsed, invalid = ack_batches(batches, ctx.api_version)
    result = invalid or mgr.acknowledge(group_id, member_id, topic_id, partition, parsed, ctx.now_ms)
    out.ack_error, out.ack_message = result.error_code, result.message
    return out


def leader_endpoints(ctx: RequestContext, outcomes: list[PartitionOutcome]) -> tuple[Any, ...]:
    leaders = {
        o.leader[0] for o in outcomes
        if ErrorCode.not_leader_or_follower in (o.error, o.ack_error) and o.leader[0] >= 0
    }
    return node_endpoints(ctx, leaders)


def lock_timeout(mgr: SharePartitionManager, group_id: str) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=mgr.lock_duration_ms(group_id))


# -- ShareFetch ----------------------------------------------------------------------------


def _error_response(ctx: RequestContext, error: ErrorCode, message: str | None = None) -> Any:
    return ctx.response(
        throttle_time=NO_THROTTLE, error_code=error, error_message=message,
        acquisition_lock_timeout=datetime.timedelta(0), responses=(), node_endpoints=(),
    )


def _rotate(items: list, epoch: int) -> list:
    if not items:
        return items
    k = max(epoch, 0) % len(items)
    return items[k:] + items[:k]


@handles(API_KEY, 1, MAX_VERSION)
async def handle_share_fetch(ctx: RequestContext, request: Any) -> Any:
    sync_liveness(ctx)
    if not ctx.state.config.share_groups_enabled:
        return _error_response(ctx, ErrorCode.unsupported_version, "Share groups are not enabled (share.version).")
    if not authorized(ctx, Op.READ, Res.GROUP, request.group_id or ""):
        return _error_response(ctx, ErrorCode.group_authorization_failed)
    mgr = share_manager(ctx.state)
    now = ctx.now_ms
    mgr.tick(now)
    group_id = request.group_id
    member_id = request.member_id
    epoch = int(request.share_session_epoch)
    if group_id is None or not member_id:
        return _error_response(ctx, ErrorCode.invalid_request, "GroupId and MemberId are required.")

    requested: list[tuple[uuid.UUID | None, int]] = []
    acks: dict[tuple[uuid.UUID | None, int], Any] = {}
    for t in request.topics:
        tid = nonzero_uuid(t.topic_id)
        for p in t.partitions:
            key = (tid, int(p.partition_index))
            requested.append(key)
            if p.acknowledgement_batches:
                acks[key] = p.acknowledgement_batches
    forgotten = [
        (nonzero_uuid(t.topic_id), int(i)) for t in request.forgotten_topics_data for i in t.partitions
    ]
    if (err := member_error(ctx.state, group_id, member_id)) is not None:
        return _error_response(ctx, err, "The member is not a member of the share group.")
    cache = mgr.sessions(ctx.node_id)
    try:
        fctx = cache.new_fetch_context(
            group_id, member_id, epoch, requested, forgotten,
            has_acknowledgements=bool(acks), connection_id=ctx.connection_id, now_ms=now,
        )
    except ShareSessionError as exc:
        return _error_response(ctx, exc.code, exc.message)
    if fctx.replaced is not None and mgr.release_on_session_replace:
        mgr.release_member(group_id, member_id, fctx.replaced.partitions)

    outcomes: dict[tuple[uuid.UUID | None, int], PartitionOutcome] = {}
    # The seeded bug (reference:bug=share-acks-after-fetch) applies them after the fetch.
    late_acks = mgr.config.seeded_bugs.has(bugs.SHARE_ACKS_AFTER_FETCH) and fctx.kind != "final"
    for key, batches in ({} if late_acks else acks).items():
        outcomes[key] = apply_acks(ctx, mgr, group_id, member_id, key[0], key[1], batches)

    if fctx.kind == "final":
        mgr.close_session(ctx.node_id, group_id, member_id)
        return _response(ctx, mgr, group_id, list(outcomes.values()))

    renew_only = bool(payloads.get(request, "is_renew_ack", False))
    order = _rotate(list(fctx.partitions), epoch)
    if renew_only:
        order = []
    max_records = int(request.max_records)
    max_bytes = int(payloads.get(request, "max_bytes", 2**31 - 1))
    record_limit = int(payloads.get(request, "share_acquire_mode", 0)) == 1
    per_partition_bytes = max(1, max_bytes // max(1, len(order)))

    def fetch_all() -> int:
        remaining = max_records
        got = 0
        for key in order:
            out = outcomes.get(key) or PartitionOutcome(key[0], key[1])
            outcomes[key] = out
            part, error, out.leader = resolve(ctx, key[0], key[1])
            out.error = error
            if error != ErrorCode.none or remaining <= 0 or out.fetched.acquired:
                continue
            out.fetched = mgr.acquire(
                group_id, member_id, key[0], key[1], part.log, leader_epoch=part.leader_epoch,
                max_records=remaining, max_bytes=per_partition_bytes, now_ms=ctx.now_ms, record_limit=record_limit,
            )
            n = sum(a.last_offset - a.first_offset + 1 for a in out.fetched.acquired)
            remaining -= n
            got += n
        return got

    got = fetch_all()
    max_wait_ms = int(request.max_wait.total_seconds() * 1000)
    any_error = any(o.error != ErrorCode.none for o in outcomes.values())
    if got == 0 and order and max_wait_ms > 0 and not any_error:

        def ready() -> bool:
            mgr.tick(ctx.now_ms)
            if cache.get(group_id, member_id) is not fctx.session:
                return True
            for key in order:
                part, error, _ = resolve(ctx, key[0], key[1])
                if error != ErrorCode.none or mgr.can_acquire(group_id, key[0], key[1], part.log):
                    return True
            return False

        await ctx.runtime.wait_for(ready, max_wait_ms)
        if cache.get(group_id, member_id) is fctx.session:
            fetch_all()
    if late_acks:
        _apply_late_acks(ctx, mgr, group_id, member_id, acks, outcomes)

    selected = []
    for key in order + [k for k in outcomes if k not in order]:
        out = outcomes.get(key)
        if out is None:
            continue
        if fctx.kind == "full" or out.fetched.acquired or out.error != ErrorCode.none or out.ack_error is not None:
            selected.append(out)
    return _response(ctx, mgr, group_id, selected)


def _apply_late_acks(
    ctx: RequestContext, mgr: SharePartitionManager, group_id: str, member_id: str,
    acks: dict, outcomes: dict[tuple[uuid.UUID | None, int], PartitionOutcome],
) -> None:
    """The seeded bug's order: acknowledgements applied once the fetch has run."""
    for key, batches in acks.items():
        done = apply_acks(ctx, mgr, group_id, member_id, key[0], key[1], batches)
        out = outcomes.setdefault(key, done)
        out.ack_error, out.ack_message = done.ack_error, done.ack_message


def _response(ctx: RequestContext, mgr: SharePartitionManager, group_id: str, outcomes: list[PartitionOutcome]) -> Any:
    topics: list[Any] = []
    by_topic: dict[Any, list[Any]] = {}
    for o in outcomes:
        by_topic.setdefault(o.topic_id, []).append(
            ctx.nested(
                "PartitionData",
                partition_index=o.partition,
                error_code=o.error,
                error_message=o.message,
                acknowledge_error_code=int(o.ack_error or 0),
                acknowledge_error_message=o.ack_message,
                current_leader=ctx.nested("LeaderIdAndEpoch", leader_id=o.leader[0], leader_epoch=o.leader[1]),
                records=o.fetched.records,
                acquired_records=tuple(
                    ctx.nested("AcquiredRecords", first_offset=a.first_offset, last_offset=a.last_offset,
                               delivery_count=a.delivery_count)
                    for a in o.fetched.acquired
                ),
            )
        )
    for tid, parts in by_topic.items():
        topics.append(ctx.nested("ShareFetchableTopicResponse", topic_id=tid or uuid.UUID(int=0), partitions=tuple(parts)))
    return ctx.response(
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        acquisition_lock_timeout=lock_timeout(mgr, group_id),
        responses=tuple(topics),
        node_endpoints=leader_endpoints(ctx, outcomes),
    )


__all__ = ["handle_share_fetch", "share_manager", "member_error", "apply_acks", "resolve"]
