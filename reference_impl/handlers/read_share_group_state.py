"""ReadShareGroupState (key 84), v0: a share-partition leader loads durable state (KIP-932).

Inter-broker persister RPC answered by the share coordinator of each
"group:topicId:partition" key (`ReferenceState.coordinator_for(key)`), modelled by
`state.share_coordinator` (reference_impl.model.share_coordinator). As Kafka's
ShareCoordinatorService: an empty group id, no topics, or a topic without partitions is
answered with no results; without a share coordinator every partition gets
COORDINATOR_NOT_AVAILABLE; a node that is not the key's coordinator answers
NOT_COORDINATOR; otherwise the model decides (INVALID_REQUEST for uninitialised state,
FENCED_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION, COORDINATOR_LOAD_IN_PROGRESS).
A read with a new leader epoch records it (one state record). With an authorizer, a
principal without CLUSTER_ACTION gets CLUSTER_AUTHORIZATION_FAILED for every partition.

The per-partition plumbing shared by the five persister handlers lives here too.
"""

from __future__ import annotations

from typing import Any, Callable

from kio.schema.errors import ErrorCode

from reference_impl.handlers._authz import cluster_action
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model.share_coordinator import PersisterResult, ShareCoordinator
from reference_impl.model.share_state_records import SharePartitionKey, coordinator_key
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.READ_SHARE_GROUP_STATE
CLUSTER_AUTHORIZATION_MESSAGE = "Cluster authorization failed."  # Errors.CLUSTER_AUTHORIZATION_FAILED


def share_coordinator(ctx: RequestContext) -> ShareCoordinator | None:
    """The cluster's share coordinator (None: a test runs the leaders without one)."""
    return ctx.state.share_coordinator


def is_well_formed(request: Any) -> bool:
    """Kafka answers these with an empty result list (no per-partition errors)."""
    if not request.group_id:
        return False
    if not request.topics:
        return False
    return all(t.partitions for t in request.topics)


def per_partition(
    ctx: RequestContext,
    request: Any,
    op: Callable[[Any, Any, Any], PersisterResult],
    partition_result: Callable[[PersisterResult], Any],
    topic_result: str,
) -> Any:
    """Run `op(coordinator, topic, partition)` for every requested partition and build
    the response: results grouped by topic id in request order. Without CLUSTER_ACTION (an
    inter-broker RPC) every partition is CLUSTER_AUTHORIZATION_FAILED, checked first as
    KafkaApis does."""
    refused = not cluster_action(ctx)
    if not refused and not is_well_formed(request):
        return ctx.response(results=())
    coord = share_coordinator(ctx)
    # Kafka keeps one result per (topic, partition): a repeated partition is run again and
    # its last result answered.
    grouped: dict[Any, dict[int, Any]] = {}
    for t in request.topics:
        for p in t.partitions:
            key = SharePartitionKey(request.group_id, t.topic_id, int(p.partition))
            if refused:
                result = PersisterResult(key, ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_MESSAGE)
            elif coord is None:
                result = PersisterResult(key, ErrorCode.coordinator_not_available, "Share coordinator is not available.")
            elif t.topic_id is not None and ctx.state.coordinator_for(
                coordinator_key(request.group_id, t.topic_id, int(p.partition))
            ) != ctx.node_id:
                result = PersisterResult(key, ErrorCode.not_coordinator, "This is not the correct coordinator.")
            else:
                result = op(coord, t, p)
            grouped.setdefault(t.topic_id, {})[int(p.partition)] = partition_result(result)
    return ctx.response(
        results=tuple(
            ctx.nested(topic_result, topic_id=tid, partitions=tuple(parts.values())) for tid, parts in grouped.items()
        )
    )


def error_fields(result: PersisterResult) -> dict[str, Any]:
    return {
        "partition": result.key.partition,
        "error_code": result.error,
        "error_message": None if result.ok else result.message,
    }


@handles(API_KEY, 0, 0)
def handle_read_share_group_state(ctx: RequestContext, request: Any) -> Any:
    def op(coord: Any, t: Any, p: Any) -> PersisterResult:
        return coord.read(request.group_id, t.topic_id, int(p.partition), int(p.leader_epoch), now_ms=ctx.now_ms)

    def build(r: PersisterResult) -> Any:
        batches = tuple(
            ctx.nested(
                "StateBatch", first_offset=b.first_offset, last_offset=b.last_offset,
                delivery_state=b.delivery_state, delivery_count=b.delivery_count,
            )
            for b in (r.state_batches if r.ok else ())
        )
        return ctx.nested(
            "PartitionResult", **error_fields(r),
            state_epoch=r.state_epoch if r.ok else 0,
            start_offset=r.start_offset if r.ok else -1,
            state_batches=batches,
        )

    return per_partition(ctx, request, op, build, "ReadStateResult")
