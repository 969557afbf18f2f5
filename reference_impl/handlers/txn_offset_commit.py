"""TxnOffsetCommit (key 28), v0-v5 (KIP-98, KIP-447 fencing fields from v3, KIP-890).

Order of checks, as in Kafka 4.x (KafkaApis.handleTxnOffsetCommitRequest, then the group
coordinator service and its transactional write):

1. topics or partitions that do not exist: UNKNOWN_TOPIC_OR_PARTITION, before the
   coordinator is involved; with nothing left the group is not looked up at all;
2. empty group id: INVALID_GROUP_ID; this node does not coordinate the group:
   NOT_COORDINATOR (the offsets partition is not led here);
3. transaction verification of the group's __consumer_offsets partition (KIP-890): the
   broker does not trust the client to have called AddOffsetsToTxn. Unless the producer
   already has transactional offsets in flight on that partition with the same epoch,
   the transaction coordinator is asked through
   `state.transactions.verify_or_add_group(tid, pid, epoch, group_id, add=...)` (the model
   records AddOffsetsToTxn by group id), or, if it only offers the partition form
   (`OffsetsVerification`), `verify_or_add_partition(tid, pid, epoch, "__consumer_offsets",
   partition, add=...)`; v5 (transaction version 2) enrols the partition (`add=True`), v0-v4
   only verify (the coordinator answers NONE to those when
   transaction.partition.verification.enable is false). Errors are mapped as Kafka's
   AddPartitionsToTxnManager does (PRODUCER_FENCED reads INVALID_PRODUCER_EPOCH;
   TRANSACTION_ABORTABLE reads INVALID_TXN_STATE below v4);
4. the group checks of KIP-447 and the pending store (GroupCoordinator.txn_offset_commit).

A group-level error is reported on every partition that reached the coordinator.
"""

from __future__ import annotations

from typing import Protocol

from kio.schema.errors import ErrorCode

from reference_impl.handlers._group_common import NO_THROTTLE, is_coordinator, split_known_partitions
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model import seeded_bugs as bugs
from reference_impl.model.group_coordinator import OFFSETS_TOPIC
from reference_impl.protocol import payloads
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.TXN_OFFSET_COMMIT
# First version whose clients understand TRANSACTION_ABORTABLE (KIP-890 part 1).
FIRST_ABORTABLE_VERSION = 4
# First version that adds the offsets partition to the transaction itself (KIP-890 part 2).
FIRST_IMPLICIT_ADD_VERSION = 5


class OffsetsVerification(Protocol):
    """The transaction coordinator as TxnOffsetCommit asks it (TransactionCoordinator offers
    both forms; a coordinator that inherits `verify_or_add_group` is asked by partition)."""

    def verify_or_add_partition(
        self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str, partition: int, add: bool
    ) -> ErrorCode | None:
        """Verify (or, `add`, enrol) a partition in the producer's transaction."""

    def verify_or_add_group(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str, add: bool
    ) -> ErrorCode | None:
        """The same for a group's offsets partition, by group id (as AddOffsetsToTxn records it)."""
        raise NotImplementedError  # the default: such a coordinator is asked by partition (_ask_coordinator)


def _ask_coordinator(transactions: OffsetsVerification, ctx: RequestContext, request, add: bool) -> ErrorCode | None:
    producer_id, producer_epoch = int(request.producer_id), int(request.producer_epoch)
    try:
        return transactions.verify_or_add_group(
            request.transactional_id, producer_id, producer_epoch, request.group_id, add=add)
    except NotImplementedError:  # the coordinator records offsets partitions only
        return transactions.verify_or_add_partition(
            request.transactional_id, producer_id, producer_epoch,
            OFFSETS_TOPIC, ctx.state.groups.offsets_partition_for(request.group_id), add=add)


def _verify_transaction(ctx: RequestContext, request) -> ErrorCode:
    """KIP-890 verification of the group's offsets partition; NONE when it may be written."""
    state = ctx.state
    producer_id, producer_epoch = int(request.producer_id), int(request.producer_epoch)
    if state.groups.has_ongoing_transaction(request.group_id, producer_id, producer_epoch):
        return ErrorCode.none
    add = ctx.api_version >= FIRST_IMPLICIT_ADD_VERSION
    error = _ask_coordinator(state.transactions, ctx, request, add)
    error = ErrorCode(int(error)) if error is not None else ErrorCode.none
    if error in (ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch) and state.config.seeded_bugs.has(
            bugs.TXN_OFFSET_STALE_PRODUCER_EPOCH_ACCEPTED):
        return ErrorCode.none  # the seeded bug: a fenced epoch's offsets are stored
    if error == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    if error == ErrorCode.transaction_abortable and ctx.api_version < FIRST_ABORTABLE_VERSION:
        return ErrorCode.invalid_txn_state
    return error


@handles(API_KEY, 0, 5)
def handle_txn_offset_commit(ctx: RequestContext, request) -> object:
    results, valid = split_known_partitions(ctx, request.topics)
    if valid:
        group_id = request.group_id
        if not group_id:
            errors = [ErrorCode.invalid_group_id] * len(valid)
        elif not is_coordinator(ctx, group_id):
            errors = [ErrorCode.not_coordinator] * len(valid)
        else:
            error = _verify_transaction(ctx, request)
            if error != ErrorCode.none:
                errors = [error] * len(valid)
            else:
                errors = ctx.state.groups.txn_offset_commit(
                    group_id,
                    int(request.producer_id),
                    int(request.producer_epoch),
                    int(payloads.get(request, "generation_id", -1)),
                    payloads.get(request, "member_id", "") or "",
                    payloads.get(request, "group_instance_id"),
                    valid,
                    api_version=ctx.api_version,
                )
        if ctx.api_version < 2:
            # Clients before 2.0 could crash on the loading error (KAFKA-7296).
            errors = [ErrorCode.coordinator_not_available if e == ErrorCode.coordinator_load_in_progress else e
                      for e in errors]
        for entry, error in zip(valid, errors):
            results.setdefault(entry.topic, []).append((entry.partition, error))
    return ctx.response(
        throttle_time=NO_THROTTLE,
        topics=tuple(
            ctx.nested(
                "TxnOffsetCommitResponseTopic",
                name=name,
                partitions=tuple(
                    ctx.nested("TxnOffsetCommitResponsePartition", partition_index=i, error_code=e) for i, e in parts
                ),
            )
            for name, parts in results.items()
        ),
    )
