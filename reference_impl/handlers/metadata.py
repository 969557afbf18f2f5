"""Metadata (key 3), plus small helpers the other data-path handlers share.

Kafka behaviour modelled: all topics for a null list (v1+) or an empty list (v0);
lookups by topic id in v12+ (ids win over names; unknown ids are UNKNOWN_TOPIC_ID);
auto-creation when both the request (v4+) and `auto.create.topics.enable` allow it,
answered with LEADER_NOT_AVAILABLE for the topic just created; INVALID_TOPIC_EXCEPTION
for illegal names; only live brokers are listed; partitions whose replicas are all
down have leader -1 and LEADER_NOT_AVAILABLE. With an authorizer (KafkaApis.getTopicMetadata):
the all-topics answer lists only topics the principal may DESCRIBE, a named topic without
DESCRIBE is TOPIC_AUTHORIZATION_FAILED, and auto-creation also needs CREATE on the topic.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers._authz import Op, Res, authorized
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model.topics import (
    CLUSTER_AUTHORIZED_OPERATIONS,
    TOPIC_AUTHORIZED_OPERATIONS,
    PartitionState,
    Topic,
    is_internal,
    topic_name_error,
)
from reference_impl.protocol import payloads
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.METADATA
NO_THROTTLE = datetime.timedelta(0)
UNSET_AUTHORIZED_OPERATIONS = -(2**31)


# --- helpers shared by the data-path handlers ---------------------------------------


def sync_liveness(ctx: RequestContext) -> None:
    """Make partition leadership follow the nodes that are up right now."""
    ctx.state.topics.sync_liveness(ctx.state.alive)


def live_node_ids(ctx: RequestContext) -> list[int]:
    return sorted(n for n in ctx.state.nodes if n in ctx.state.alive)


def node_endpoints(ctx: RequestContext, node_ids: set[int] | list[int]) -> tuple[Any, ...]:
    """`NodeEndpoint` entries (Produce v10+, Fetch v16+) for the given live nodes."""
    out = []
    for n in sorted(set(node_ids)):
        ep = ctx.state.nodes.get(n)
        if ep is not None and n >= 0:
            out.append(ctx.nested("NodeEndpoint", node_id=n, host=ep.host, port=ep.port, rack=ep.rack))
    return tuple(out)


def nonzero_uuid(value: uuid.UUID | None) -> uuid.UUID | None:
    return None if value is None or value.int == 0 else value


# --- Metadata -----------------------------------------------------------------------


def _partition_entry(ctx: RequestContext, p: PartitionState, version: int) -> Any:
    alive = ctx.state.alive
    replicas, isr = p.replicas, p.isr
    error = ErrorCode.none
    if version == 0:
        # v0 reported unavailable replicas as an error and listed only live ones.
        live_replicas = tuple(r for r in replicas if r in alive)
        live_isr = tuple(r for r in isr if r in alive)
        if len(live_replicas) < len(replicas) or len(live_isr) < len(isr):
            error = ErrorCode.replica_not_available
        replicas, isr = live_replicas, live_isr
    if p.leader < 0 or p.leader not in alive:
        error = ErrorCode.leader_not_available
        leader = -1
    else:
        leader = p.leader
    return ctx.nested(
        "MetadataResponsePartition",
        error_code=error,
        partition_index=p.index,
        leader_id=leader,
        leader_epoch=p.leader_epoch,
        replica_nodes=tuple(replicas),
        isr_nodes=tuple(isr),
        offline_replicas=p.offline_replicas,
    )


def _topic_entry(
    ctx: RequestContext,
    *,
    error: ErrorCode,
    name: str | None,
    topic_id: uuid.UUID | None,
    internal: bool,
    partitions: tuple[Any, ...] = (),
    authorized_ops: int = UNSET_AUTHORIZED_OPERATIONS,
) -> Any:
    return ctx.nested(
        "MetadataResponseTopic",
        error_code=error,
        name=name,
        topic_id=topic_id,
        is_internal=internal,
        partitions=partitions,
        topic_authorized_operations=authorized_ops,
    )


def _existing_topic_entry(ctx: RequestContext, topic: Topic, authorized_ops: int) -> Any:
    return _topic_entry(
        ctx,
        error=ErrorCode.none,
        name=topic.name,
        topic_id=topic.topic_id,
        internal=topic.is_internal,
        partitions=tuple(_partition_entry(ctx, p, ctx.api_version) for p in topic.partitions),
        authorized_ops=authorized_ops,
    )


def _brokers(ctx: RequestContext) -> tuple[Any, ...]:
    return tuple(
        ctx.nested("MetadataResponseBroker", node_id=n, host=ep.host, port=ep.port, rack=ep.rack)
        for n, ep in sorted(ctx.state.nodes.items())
        if n in ctx.state.alive
    )


def _response(ctx: RequestContext, topics: tuple[Any, ...], cluster_ops: int = UNSET_AUTHORIZED_OPERATIONS) -> Any:
    state = ctx.state
    return ctx.response(
        throttle_time=NO_THROTTLE,
        brokers=_brokers(ctx),
        cluster_id=state.config.cluster_id,
        controller_id=state.controller_id,
        topics=topics,
        cluster_authorized_operations=cluster_ops,
        error_code=ErrorCode.none,
    )


@handles(API_KEY, 0, 13)
def handle_metadata(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    registry = ctx.state.topics
    sync_liveness(ctx)
    requested = request.topics
    all_topics = requested is None or (version == 0 and len(requested) == 0)

    if not all_topics:
        for t in requested:
            name = payloads.get(t, "name")
            tid = nonzero_uuid(payloads.get(t, "topic_id"))
            if version < 12 and (name is None or tid is not None):
                # Kafka rejects the whole request (MetadataRequest.getErrorResponse): every
                # requested topic carries the error, a null name becomes "" (the response
                # name is not nullable before v12), and there are no brokers, no cluster id
                # and controller -1.
                return ctx.response(
                    throttle_time=NO_THROTTLE,
                    brokers=(),
                    cluster_id=None,
                    controller_id=-1,
                    topics=tuple(
                        _topic_entry(
                            ctx,
                            error=ErrorCode.invalid_request,
                            name=payloads.get(x, "name") or "",
                            topic_id=nonzero_uuid(payloads.get(x, "topic_id")),
                            internal=False,
                        )
                        for x in requested
                    ),
                    cluster_authorized_operations=UNSET_AUTHORIZED_OPERATIONS,
                    error_code=ErrorCode.none,
                )

    include_topic_ops = bool(payloads.get(request, "include_topic_authorized_operations", False))
    topic_ops = TOPIC_AUTHORIZED_OPERATIONS if include_topic_ops else UNSET_AUTHORIZED_OPERATIONS
    cluster_ops = UNSET_AUTHORIZED_OPERATIONS
    if 8 <= version <= 10 and payloads.get(request, "include_cluster_authorized_operations", False):
        cluster_ops = CLUSTER_AUTHORIZED_OPERATIONS

    entries: list[Any] = []
    if all_topics:
        for topic in registry.topics():
            if authorized(ctx, Op.DESCRIBE, Res.TOPIC, topic.name):  # the rest is not listed
                entries.append(_existing_topic_entry(ctx, topic, topic_ops))
        return _response(ctx, tuple(entries), cluster_ops)

    ids: list[uuid.UUID] = []
    for t in requested:
        tid = nonzero_uuid(payloads.get(t, "topic_id"))
        if tid is not None and tid not in ids:
            ids.append(tid)
    if ids:
        # Topic ids present: names in the request are ignored, as in Kafka.
        names: list[str] = []
        for tid in ids:
            topic = registry.by_id(tid)
            if topic is None:
                entries.append(
                    _topic_entry(ctx, error=ErrorCode.unknown_topic_id, name=None, topic_id=tid, internal=False)
                )
            elif topic.name not in names:
                names.append(topic.name)
    else:
        names = []
        for t in requested:
            if t.name not in names:
                names.append(t.name)

    allow_auto = (
        ctx.state.config.auto_create_topics_enable
        and bool(payloads.get(request, "allow_auto_topic_creation", True))
    )
    for name in names:
        topic = registry.get(name)
        if not authorized(ctx, Op.DESCRIBE, Res.TOPIC, name):
            entries.append(_topic_entry(ctx, error=ErrorCode.topic_authorization_failed, name=name, topic_id=None,
                                        internal=is_internal(name), authorized_ops=topic_ops))
            continue
        if topic is not None:
            entries.append(_existing_topic_entry(ctx, topic, topic_ops))
            continue
        if allow_auto and not authorized(ctx, Op.CREATE, Res.TOPIC, name):
            error = ErrorCode.topic_authorization_failed  # KafkaApis: auto-create needs CREATE
        elif allow_auto:
            error = registry.auto_create(name)
        else:
            error = ErrorCode.invalid_topic_exception if topic_name_error(name) else ErrorCode.unknown_topic_or_partition
        entries.append(
            _topic_entry(
                ctx,
                error=error,
                name=name,
                topic_id=None,
                internal=is_internal(name),
                authorized_ops=topic_ops,
            )
        )
    return _response(ctx, tuple(entries), cluster_ops)
