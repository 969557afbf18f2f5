"""Produce (key 0), v3+ (record batch v2 only).

A transactional batch needs WRITE on the request's transactional id (else the whole
request is TRANSACTIONAL_ID_AUTHORIZATION_FAILED). Per partition, in Kafka's order: no
WRITE on the topic (TOPIC_AUTHORIZATION_FAILED); unknown topic (UNKNOWN_TOPIC_OR_PARTITION, or
UNKNOWN_TOPIC_ID by id in v13+); request-level record checks (exactly one v2 batch,
zstd only from v7: INVALID_RECORD / CORRUPT_MESSAGE / UNSUPPORTED_COMPRESSION_TYPE);
acks must be -1, 0 or 1 (INVALID_REQUIRED_ACKS); this node must lead the partition
(NOT_LEADER_OR_FOLLOWER, with the current leader in v10+); acks=all needs
min.insync.replicas live replicas (NOT_ENOUGH_REPLICAS); then the log validates and
appends (see PartitionLog.append_from_client).

Idempotent batches (producer id >= 0, not transactional) are validated by the
partition's producer-state seam. Before a producer's first transactional batch on a
partition the leader consults the transaction coordinator (KIP-890, see
`_verify_transaction`): verification for TV1 producers, implicit add for TV2 producers
(Produce v12+). acks=0 gets no
response; if any partition failed, the connection is closed instead, as Kafka does.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers._authz import Op, Res, authorized
from reference_impl.handlers.metadata import node_endpoints, nonzero_uuid, sync_liveness
from reference_impl.handlers.registry import CloseConnection, RequestContext, handles
from reference_impl.model.partition_log import LogError
from reference_impl.model.topics import Topic
from reference_impl.protocol import records as rec
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.PRODUCE
NO_THROTTLE = datetime.timedelta(0)
ADMIN_CLIENT_ID = "__admin_client"  # the only client allowed to write internal topics
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def ms_to_datetime(ms: int) -> datetime.datetime:
    return _EPOCH + datetime.timedelta(milliseconds=ms)


@dataclass(slots=True)
class _PartitionOutcome:
    index: int
    error: ErrorCode = ErrorCode.none
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    record_errors: tuple[tuple[int, str], ...] = ()
    error_message: str | None = None
    leader: tuple[int, int] | None = None  # (leader id, epoch) for NOT_LEADER_OR_FOLLOWER


@dataclass(slots=True)
class _TopicOutcome:
    name: str | None
    topic_id: uuid.UUID | None
    partitions: list[_PartitionOutcome] = field(default_factory=list)


def check_request_records(records: bytes | None, version: int) -> bytes:
    """Kafka's request-level check: exactly one v2 batch. Returns the batch bytes."""
    batches, _trailing = rec.split_batches(records)
    if not batches:
        raise rec.InvalidRecordError(f"produce v{version} needs at least one record batch per partition")
    first = batches[0]
    if rec.magic_of(first) != rec.MAGIC_V2:
        raise rec.InvalidRecordError(f"produce v{version} allows only magic v2 record batches")
    if version < 7 and len(first) >= rec.ATTRIBUTES_OFFSET + 2:
        codec = int.from_bytes(first[rec.ATTRIBUTES_OFFSET : rec.ATTRIBUTES_OFFSET + 2], "big") & 0x07
        if codec == rec.Compression.ZSTD:
            raise rec.UnsupportedCompressionError(f"produce v{version} may not use zstd compression")
    if len(batches) > 1:
        raise rec.InvalidRecordError(f"produce v{version} allows exactly one record batch per partition")
    return first


def _has_transactional_records(request: Any) -> bool:
    for t in request.topic_data:
        for p in t.partition_data:
            try:
                batches, _ = rec.split_batches(p.records)
            except rec.RecordBatchError:
                continue
            if batches and len(batches[0]) >= rec.ATTRIBUTES_OFFSET + 2:
                attrs = int.from_bytes(batches[0][rec.ATTRIBUTES_OFFSET : rec.ATTRIBUTES_OFFSET + 2], "big")
                if attrs & rec.ATTR_TRANSACTIONAL:
                    return True
    return False


# First Produce version whose clients understand TRANSACTION_ABORTABLE (KIP-890 part 1).
FIRST_ABORTABLE_VERSION = 11
# First Produce version of transaction-version-2 clients: the leader adds the partition (KIP-890 part 2).
FIRST_IMPLICIT_ADD_VERSION = 12
# Coordinator answers older producers would not retry correctly: Kafka turns them into
# NOT_ENOUGH_REPLICAS, which every producer retries without a metadata refresh.
_RETRIABLE_VERIFICATION_ERRORS = frozenset({
    ErrorCode.concurrent_transactions, ErrorCode.network_exception, ErrorCode.coordinator_load_in_progress,
    ErrorCode.coordinator_not_available, ErrorCode.not_coordinator,
})


def _verify_transaction(
    ctx: RequestContext, request: Any, part: Any, batch: bytes, version: int
) -> tuple[ErrorCode, str | None] | None:
    """KIP-890 check before a producer's first transactional batch on a partition.

    As Kafka's ReplicaManager + AddPartitionsToTxnManager: when the producer has no open
    transaction on the partition yet, the leader asks the transaction coordinator -
    verification for TV1 producers (Produce < v12; skipped when
    transaction.partition.verification.enable is false), an implicit add for TV2
    producers (Produce v12+). Returns (error, message) to
    refuse the batch, None to go on with the append.
    """
    if len(batch) < rec.RECORD_BATCH_OVERHEAD:
        return None
    try:
        header = rec.parse_batch_header(batch)
    except rec.RecordBatchError:  # malformed: the log's own validation answers it
        return None
    if not header.is_transactional or header.is_control or header.producer_id < 0:
        return None
    tracker = part.log.producer_state
    if tracker.has_ongoing_transaction(header.producer_id, header.producer_epoch):
        return None
    tid = request.transactional_id
    # Kafka decides by the request version alone (produceRequestVersionToTransactionSupportedOperation):
    # clients send v12+ only to clusters with transaction.version >= 2 finalized.
    add = version >= FIRST_IMPLICIT_ADD_VERSION
    if ctx.state.coordinator_for(tid) not in ctx.state.alive:
        error = ErrorCode.coordinator_not_available
    else:
        error = ErrorCode(int(ctx.state.transactions.verify_or_add_partition(
            tid, header.producer_id, header.producer_epoch, part.log.topic, part.log.partition, add, now_ms=ctx.now_ms,
        )))
    if error == ErrorCode.none:
        tracker.note_verified(header.producer_id, header.producer_epoch, supports_epoch_bump=add)
        return None
    if error == ErrorCode.invalid_txn_state:
        return error, "Partition was not added to the transaction"
    if error in _RETRIABLE_VERIFICATION_ERRORS:
        return ErrorCode.not_enough_replicas, (
            f"Unable to verify the partition has been added to the transaction. Underlying error: {error.name.upper()}"
        )
    if error == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch, None
    if error == ErrorCode.transaction_abortable and version < FIRST_ABORTABLE_VERSION:
        return ErrorCode.invalid_txn_state, None
    return error, None


@handles(API_KEY, 3, 13)
def handle_produce(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    registry = ctx.state.topics
    sync_liveness(ctx)
    acks = int(request.acks)
    now = ctx.now_ms
    by_id = version >= 13

    outcomes: list[_TopicOutcome] = []
    whole_request_error: ErrorCode | None = None
    if _has_transactional_records(request) and (
        request.transactional_id is None
        or not authorized(ctx, Op.WRITE, Res.TRANSACTIONAL_ID, request.transactional_id)
    ):
        whole_request_error = ErrorCode.transactional_id_authorization_failed

    # Kafka keys a produce request by topic-partition: a partition named twice is
    # handled once, with the records of its last occurrence.
    last_seen: dict[tuple[object, int], tuple[int, int]] = {}
    for ti, t in enumerate(request.topic_data):
        tkey = nonzero_uuid(t.topic_id) if by_id else t.name
        for pi, p in enumerate(t.partition_data):
            last_seen[(tkey, int(p.index))] = (ti, pi)

    for ti, t in enumerate(request.topic_data):
        tkey = nonzero_uuid(t.topic_id) if by_id else t.name
        if by_id:
            tid = nonzero_uuid(t.topic_id)
            topic: Topic | None = registry.by_id(tid)
            out = _TopicOutcome(name=None, topic_id=tid)
        else:
            topic = registry.get(t.name)
            out = _TopicOutcome(name=t.name, topic_id=None)
        outcomes.append(out)
        for pi, p in enumerate(t.partition_data):
            if last_seen[(tkey, int(p.index))] != (ti, pi):
                continue
            po = _PartitionOutcome(index=int(p.index))
            out.partitions.append(po)
            if whole_request_error is not None:
                po.error = whole_request_error
                continue
            # Produce v13+ names topics by id only (KIP-516): an unknown id has no name to authorize
            name = topic.name if topic is not None else (None if by_id else t.name)
            if (topic is not None or not by_id) and not authorized(ctx, Op.WRITE, Res.TOPIC, name):
                po.error = ErrorCode.topic_authorization_failed  # before existence, as Kafka
                continue
            part = topic.partition(po.index) if topic is not None else None
            if part is None:
                po.error = ErrorCode.unknown_topic_id if by_id and topic is None else ErrorCode.unknown_topic_or_partition
                continue
            try:
                batch = check_request_records(p.records, version)
            except rec.RecordBatchError as exc:
                po.error, po.error_message = exc.error_code, exc.message
                continue
            if acks not in (-1, 0, 1):
                po.error = ErrorCode.invalid_required_acks
                continue
            if topic.is_internal and ctx.client_id != ADMIN_CLIENT_ID:
                po.error = ErrorCode.invalid_topic_exception
                continue
            if part.leader != ctx.node_id:
                po.error = ErrorCode.not_leader_or_follower
                po.leader = (part.leader, part.leader_epoch)
                continue
            if acks == -1 and len(part.isr) < topic.min_insync_replicas:
                po.error = ErrorCode.not_enough_replicas
                continue
            verification = _verify_transaction(ctx, request, part, batch, version)
            if verification is not None:
                po.error, po.error_message = verification
                continue
            try:
                result = part.log.append_from_client(batch, now_ms=now)
            except rec.RecordBatchError as exc:
                po.error, po.error_message, po.record_errors = exc.error_code, exc.message, exc.record_errors
                continue
            except LogError as exc:
                po.error, po.error_message = exc.error_code, exc.message
                continue
            po.base_offset = result.base_offset
            po.log_append_time = result.log_append_time
            po.log_start_offset = result.log_start_offset

    failed = any(po.error != ErrorCode.none for o in outcomes for po in o.partitions)
    if acks == 0:
        if failed:
            raise CloseConnection("produce with acks=0 failed for at least one partition")
        return None

    leaders: set[int] = set()
    topic_entries = []
    for o in outcomes:
        if not o.partitions:
            continue
        parts = []
        for po in o.partitions:
            fields: dict[str, Any] = dict(
                index=po.index,
                error_code=po.error,
                base_offset=po.base_offset,
                log_append_time=ms_to_datetime(po.log_append_time) if po.log_append_time >= 0 else None,
                log_start_offset=po.log_start_offset,
                record_errors=tuple(
                    ctx.nested("BatchIndexAndErrorMessage", batch_index=i, batch_index_error_message=m)
                    for i, m in po.record_errors
                )
                if version >= 8
                else (),
                error_message=po.error_message if po.error != ErrorCode.none else None,
            )
            if version >= 10:
                if po.leader is not None:
                    fields["current_leader"] = ctx.nested(
                        "LeaderIdAndEpoch", leader_id=po.leader[0], leader_epoch=po.leader[1]
                    )
                    if po.leader[0] >= 0:
                        leaders.add(po.leader[0])
                else:
                    fields["current_leader"] = ctx.nested("LeaderIdAndEpoch")
            parts.append(ctx.nested("PartitionProduceResponse", **fields))
        topic_entries.append(
            ctx.nested("TopicProduceResponse", name=o.name, topic_id=o.topic_id, partition_responses=tuple(parts))
        )
    return ctx.response(
        responses=tuple(topic_entries),
        throttle_time=NO_THROTTLE,
        node_endpoints=node_endpoints(ctx, leaders) if version >= 10 else (),
    )
