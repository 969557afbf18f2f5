"""WriteTxnMarkers (key 27), v1-v2 (Kafka 4 removed v0).

Sent by a transaction coordinator to partition leaders: needs CLUSTER_ACTION on the
cluster (KafkaApis.handleWriteTxnMarkersRequest answers CLUSTER_AUTHORIZATION_FAILED for
every partition otherwise, writing nothing). Each marker appends one COMMIT/ABORT control batch per listed
partition to the local partition log: UNKNOWN_TOPIC_OR_PARTITION for partitions that
do not exist (the reference has no `__consumer_offsets` topic, so offsets partitions
are unknown here), NOT_LEADER_OR_FOLLOWER on a node that does not lead the partition,
or the producer-state error the log raises. Results are grouped per producer id.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers._authz import Op, Res, authorized, cluster_action
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model import seeded_bugs as bugs
from reference_impl.model.partition_log import LogError
from reference_impl.protocol import payloads
from reference_impl.protocol.records import ControlType
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.WRITE_TXN_MARKERS


def _may_write_markers(ctx: RequestContext, request: Any) -> bool:
    """CLUSTER_ACTION on the cluster; WRITE on the topics is not enough (any producer could
    then end other producers' transactions) but for the seeded bug."""
    if cluster_action(ctx):
        return True
    return ctx.state.config.seeded_bugs.has(bugs.WRITE_TXN_MARKERS_TOPIC_WRITE_SUFFICES) and all(
        authorized(ctx, Op.WRITE, Res.TOPIC, t.name) for m in request.markers for t in m.topics)


@handles(API_KEY, 1, 2)
def handle_write_txn_markers(ctx: RequestContext, request: Any) -> Any:
    registry = ctx.state.topics
    now = ctx.now_ms
    # producer id -> topic -> [(partition, error)]
    results: dict[int, dict[str, list[tuple[int, ErrorCode]]]] = {}
    allowed = _may_write_markers(ctx, request)
    for marker in request.markers:
        pid = int(marker.producer_id)
        if not allowed:
            results[pid] = {t.name: [(int(i), ErrorCode.cluster_authorization_failed) for i in t.partition_indexes]
                            for t in marker.topics}
            continue
        control = ControlType.COMMIT if marker.transaction_result else ControlType.ABORT
        per_topic = results.setdefault(pid, {})
        for topic in marker.topics:
            for index in topic.partition_indexes:
                part = registry.partition(topic.name, int(index))
                if part is None:
                    error = ErrorCode.unknown_topic_or_partition
                elif part.leader != ctx.node_id:
                    error = ErrorCode.not_leader_or_follower
                else:
                    try:
                        part.log.append_marker(
                            control, producer_id=pid, producer_epoch=int(marker.producer_epoch),
                            coordinator_epoch=int(marker.coordinator_epoch), now_ms=now,
                            transaction_version=int(payloads.get(marker, "transaction_version", 0)),
                        )
                        error = ErrorCode.none
                    except LogError as exc:
                        error = exc.error_code
                per_topic.setdefault(topic.name, []).append((int(index), error))
        # KIP-1289: the marker's arrival is also offered to the share-partitions this node
        # leads ("broadcasts to all SharePartition instances on that broker"): their TX_PENDING
        # records of this producer; a no-op for everything else.
        ctx.state.share_partitions.apply_txn_marker(
            pid, int(marker.producer_epoch), control is ControlType.COMMIT, now,
            only=ctx.state.share_partitions_led_by(ctx.node_id),
        )
    return ctx.response(markers=tuple(
        ctx.nested(
            "WritableTxnMarkerResult", producer_id=pid,
            topics=tuple(
                ctx.nested(
                    "WritableTxnMarkerTopicResult", name=name,
                    partitions=tuple(
                        ctx.nested("WritableTxnMarkerPartitionResult", partition_index=i, error_code=e) for i, e in parts
                    ),
                )
                for name, parts in topics.items()
            ),
        )
        for pid, topics in results.items()
    ))
