"""TxnShareAcknowledge (key 93), v0 (KIP-1289): stage share-group acknowledgements in a
producer transaction.

Order, as the KIP's "Flow - Share Group": gate -> request checks -> ACLs -> member check ->
per-partition checks -> broker-internal AddPartitionsToTxn of __share_group_state-N
(N = partitionFor(groupId)) -> staging (TX_PENDING), all or nothing.

* Top-level: UNSUPPORTED_VERSION while share.version < 2 or transaction.version < 2 (the api
  is then not advertised either; DIV-128902); INVALID_REQUEST for a null/empty
  transactional id, group or member id; TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
  GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED (DIV-128919); UNKNOWN_MEMBER_ID /
  STALE_MEMBER_EPOCH against the share group coordinator's membership; the coordinator's registration error
  (INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS, ...), with
  COORDINATOR_LOAD_IN_PROGRESS answered as COORDINATOR_NOT_AVAILABLE (corner case 2).
* Per partition: UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER (with
  CurrentLeader and NodeEndpoints), INVALID_REQUEST (malformed batches), INVALID_RECORD_STATE
  (types other than ACCEPT/REJECT, records not Acquired by the member). Any partition error
  means nothing is registered or staged; partitions without their own error then answer
  NONE with a message saying they were not staged (DIV-128906).
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers._authz import Op, Res, authorized
from reference_impl.handlers.metadata import node_endpoints, nonzero_uuid, sync_liveness
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.handlers.share_fetch import resolve, share_manager
from reference_impl.model import seeded_bugs as bugs
from reference_impl.model import share_txn
from reference_impl.model.share_partition import AckResult
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.TXN_SHARE_ACKNOWLEDGE
NO_THROTTLE = datetime.timedelta(0)
NOT_STAGED = "Not staged: another partition of this request failed."


def _response(ctx: RequestContext, error: ErrorCode, topics: tuple = (), endpoints: tuple = ()) -> Any:
    return ctx.response(throttle_time=NO_THROTTLE, error_code=error, responses=topics, node_endpoints=endpoints)


def _member_error(state: Any, group_id: str, member_id: str, member_epoch: int) -> ErrorCode | None:
    """KIP-1289 corner case 8: the share group coordinator's view of the member."""
    group = state.share_groups.group(group_id)
    member = None if group is None else group.members.get(member_id)
    if member is None:
        return ErrorCode.unknown_member_id
    if int(member.member_epoch) != member_epoch:
        return ErrorCode.stale_member_epoch
    return None


def _authorization_error(ctx: RequestContext, request: Any) -> ErrorCode | None:
    """The KIP's top-level authorization errors, in TxnOffsetCommit's order (the request
    "mirrors TxnOffsetCommitRequest"; DIV-128919): WRITE on the transactional id, READ on the
    share group (Kafka grants no WRITE on groups: the javadoc's "Write to the share group" is
    read as acknowledging, which KIP-932 gates with READ), READ on every topic named."""
    if not authorized(ctx, Op.WRITE, Res.TRANSACTIONAL_ID, request.transactional_id):
        return ErrorCode.transactional_id_authorization_failed
    if ctx.state.config.seeded_bugs.has(bugs.TXN_SHARE_ACK_ACL_UNCHECKED):
        return None  # the deliberate bug (seeded_bugs.py): the producer's right taken for the group's
    if not authorized(ctx, Op.READ, Res.GROUP, request.group_id):
        return ErrorCode.group_authorization_failed
    for t in request.topics:
        topic = ctx.state.topics.by_id(nonzero_uuid(t.topic_id))
        if topic is not None and not authorized(ctx, Op.READ, Res.TOPIC, topic.name):
            return ErrorCode.topic_authorization_failed
    return None


def _parse(batches: Any) -> tuple[list[tuple[int, int, list[int]]], AckResult | None]:
    out: list[tuple[int, int, list[int]]] = []
    prev_last = None
    for b in batches:
        first, last, types = int(b.first_offset), int(b.last_offset), [int(t) for t in b.acknowledge_types]
        if not types or (prev_last is not None and first <= prev_last):
            return out, AckResult(ErrorCode.invalid_request, "Batches must be ascending, disjoint and typed.")
        if any(t not in share_txn.TXN_ACK_TYPES for t in types):
            bad = next(t for t in types if t not in share_txn.TXN_ACK_TYPES)
            return out, AckResult(ErrorCode.invalid_record_state, f"Acknowledge type {bad} cannot be staged in a transaction.")
        prev_last = last
        out.append((first, last, types))
    return out, None


def _register(ctx: RequestContext, request: Any) -> ErrorCode:
    """Broker-internal AddPartitionsToTxn of the group's __share_group_state partition."""
    n = share_txn.state_partition_for(request.group_id, ctx.state.share_coordinator.config.state_topic_num_partitions)
    txn = ctx.state.transactions
    if ctx.state.config.seeded_bugs.has(bugs.TXN_SHARE_STAGING_EPOCH_UNCHECKED):
        open_txn = txn.metadata(request.transactional_id)
        if open_txn is not None and open_txn.producer_id == int(request.producer_id) \
                and (share_txn.SHARE_STATE_TOPIC, n) in open_txn.partition_set():
            return ErrorCode.none  # the deliberate bug (seeded_bugs.py): registered "by producer id"
    error = txn.add_partitions(
        request.transactional_id, int(request.producer_id), int(request.producer_epoch),
        ((share_txn.SHARE_STATE_TOPIC, n),), client_transaction_version=share_txn.TRANSACTION_VERSION_REQUIRED,
        now_ms=ctx.now_ms,
    )
    return ErrorCode.coordinator_not_available if error == ErrorCode.coordinator_load_in_progress else error


@handles(API_KEY, 0, 0, enabled=share_txn.advertised)
def handle_txn_share_acknowledge(ctx: RequestContext, request: Any) -> Any:
    sync_liveness(ctx)
    if share_txn.refusal(ctx.state.config) is not None:
        return _response(ctx, ErrorCode.unsupported_version)
    if not request.transactional_id or not request.group_id or not request.member_id:
        return _response(ctx, ErrorCode.invalid_request)
    if (err := _authorization_error(ctx, request)) is not None:
        return _response(ctx, err)
    if (err := _member_error(ctx.state, request.group_id, request.member_id, int(request.member_epoch))) is not None:
        return _response(ctx, err)
    mgr = share_manager(ctx.state)
    mgr.tick(ctx.now_ms)
    # (topic id, partition) -> (error, message, leader, parsed batches)
    checked: list[tuple[uuid.UUID | None, int, AckResult, tuple[int, int], list]] = []
    for t in request.topics:
        tid = nonzero_uuid(t.topic_id)
        for p in t.partitions:
            _part, error, leader = resolve(ctx, tid, int(p.partition_index))
            parsed, invalid = _parse(p.acknowledgement_batches)
            result = AckResult(error) if error != ErrorCode.none else (invalid or AckResult())
            checked.append((tid, int(p.partition_index), result, leader, parsed))
    if all(c[2].ok for c in checked):
        if (err := _register(ctx, request)) != ErrorCode.none:
            return _response(ctx, err)
        staged = mgr.stage_txn(
            request.group_id, request.member_id, [(c[0], c[1], c[4]) for c in checked],
            int(request.producer_id), int(request.producer_epoch), ctx.now_ms,
        )
        checked = [(c[0], c[1], r, c[3], c[4]) for c, r in zip(checked, staged)]
    return _answer(ctx, checked)


def _answer(ctx: RequestContext, checked: list) -> Any:
    failed = any(not c[2].ok for c in checked)
    by_topic: dict[Any, list[Any]] = {}
    leaders: set[int] = set()
    for tid, index, result, leader, _ in checked:
        message = result.message if not result.ok else (NOT_STAGED if failed else None)
        fields: dict[str, Any] = dict(partition_index=index, error_code=result.error_code, error_message=message)
        if result.error_code == ErrorCode.not_leader_or_follower:
            fields["current_leader"] = ctx.nested("LeaderIdAndEpoch", leader_id=leader[0], leader_epoch=leader[1])
            leaders.add(leader[0])
        by_topic.setdefault(tid, []).append(ctx.nested("TxnShareAcknowledgePartitionResponse", **fields))
    topics = tuple(
        ctx.nested("TxnShareAcknowledgeTopicResponse", topic_id=tid or uuid.UUID(int=0), partitions=tuple(parts))
        for tid, parts in by_topic.items()
    )
    endpoints = node_endpoints(ctx, {n for n in leaders if n >= 0})
    return _response(ctx, ErrorCode.none, topics, endpoints)
