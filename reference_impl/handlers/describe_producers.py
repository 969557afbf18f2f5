"""DescribeProducers (key 61), v0: the active producers of partitions (KIP-664).

Per requested partition, as Kafka's broker answers: UNKNOWN_TOPIC_OR_PARTITION when the
topic or partition does not exist; NOT_LEADER_OR_FOLLOWER when this node is not a replica
of it; otherwise every producer id the partition's producer state holds, with its epoch,
last sequence (-1 when no batch at the current epoch), last timestamp, coordinator
epoch (-1 before any marker) and the first offset of its open transaction (-1 if none).
Followers answer too (they keep producer state); in this single-copy model every replica
shares the leader's log. Partitions of one topic name are answered under one topic
entry, in request order. Kafka's READ-on-topic check (TOPIC_AUTHORIZATION_FAILED) is not
modelled: the reference's authorizer (reference:authorizer=standard) is not asked here.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers.metadata import sync_liveness
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model.partition_log import PartitionLog
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.DESCRIBE_PRODUCERS
NO_THROTTLE = datetime.timedelta(0)


def _partition(ctx: RequestContext, index: int, error: ErrorCode, producers: tuple[Any, ...] = ()) -> Any:
    return ctx.nested("PartitionResponse", partition_index=index, error_code=error, active_producers=producers)


def _producers_of(ctx: RequestContext, log: PartitionLog) -> tuple[Any, ...]:
    """The producers the log's producer state holds (none without producer state)."""
    return tuple(
        ctx.nested(
            "ProducerState",
            producer_id=s.producer_id,
            producer_epoch=s.producer_epoch,
            last_sequence=s.last_sequence,
            last_timestamp=s.last_timestamp,
            coordinator_epoch=s.coordinator_epoch,
            current_txn_start_offset=s.current_txn_start_offset,
        )
        for s in log.producer_state.active_producers()
    )


@handles(API_KEY, 0, 0)
def handle_describe_producers(ctx: RequestContext, request: Any) -> Any:
    registry = ctx.state.topics
    sync_liveness(ctx)
    grouped: dict[str, list[Any]] = {}
    for t in request.topics:
        parts = grouped.setdefault(t.name, [])
        for raw in t.partition_indexes:
            index = int(raw)
            part = registry.partition(t.name, index)
            if part is None:
                parts.append(_partition(ctx, index, ErrorCode.unknown_topic_or_partition))
            elif ctx.node_id not in part.replicas:
                parts.append(_partition(ctx, index, ErrorCode.not_leader_or_follower))
            else:
                parts.append(_partition(ctx, index, ErrorCode.none, _producers_of(ctx, part.log)))
    return ctx.response(
        throttle_time=NO_THROTTLE,
        topics=tuple(ctx.nested("TopicResponse", name=name, partitions=tuple(parts)) for name, parts in grouped.items()),
    )
