"""DescribeShareGroupOffsets (key 90), v0-v1 (KIP-932; v1 adds the lag of KIP-1226).

Answered as Kafka 4.4.0 does (observed with the raw client): every share-partition is a
ReadShareGroupStateSummary from the share coordinator, so a share-partition without state
reads start offset -1, leader epoch 0, lag -1, no error. That holds for an unknown group, a
classic group id and an unknown topic (topic id null) too: the group's type is not checked.
With topics null the group's initialised share-partitions are described (none for an unknown
or classic group). Lag is high watermark - start offset - records already in a final state
(deliveryCompleteCount); -1 while either is unknown (-1), as in Kafka.
A partition the topic does not have is UNKNOWN_TOPIC_OR_PARTITION here; Kafka 4.4.0 never
answers such a request (the client times out). An empty group id is INVALID_GROUP_ID here
(as Alter/DeleteShareGroupOffsets answer it); Kafka 4.4.0 answers UNKNOWN_SERVER_ERROR.
With an authorizer: DESCRIBE on the group (else the group's GROUP_AUTHORIZATION_FAILED) and
DESCRIBE on each topic (else its partitions' TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers._authz import Op, Res, authorized
from reference_impl.handlers._group_common import NOT_COORDINATOR_MESSAGE, NO_THROTTLE, is_coordinator
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model.share_group import UNKNOWN_PARTITION_MESSAGE
from reference_impl.model.share_state_records import NO_DELIVERY_COMPLETE_COUNT
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS
INVALID_GROUP_MESSAGE = "The group id is invalid."
NO_OFFSET, NO_LAG, DEFAULT_LEADER_EPOCH = -1, -1, 0


def _partition(ctx: RequestContext, index: int, start: int = NO_OFFSET, leader_epoch: int = DEFAULT_LEADER_EPOCH,
               lag: int = NO_LAG, error: ErrorCode = ErrorCode.none, message: str | None = None) -> Any:
    return ctx.nested("DescribeShareGroupOffsetsResponsePartition", partition_index=index, start_offset=start,
                      leader_epoch=leader_epoch, lag=lag, error_code=error, error_message=message)


def _describe_partition(ctx: RequestContext, group_id: str, topic: Any, index: int) -> Any:
    if topic is None:
        return _partition(ctx, index)
    partition = topic.partition(index)
    if partition is None:
        return _partition(ctx, index, error=ErrorCode.unknown_topic_or_partition, message=UNKNOWN_PARTITION_MESSAGE)
    summary = ctx.state.share_coordinator.read_summary(group_id, topic.topic_id, index)
    if summary.error != ErrorCode.none:
        return _partition(ctx, index, error=summary.error, message=summary.message)
    lag = NO_LAG
    if summary.start_offset != NO_OFFSET and summary.delivery_complete_count != NO_DELIVERY_COMPLETE_COUNT:
        lag = partition.log.high_watermark - summary.start_offset - summary.delivery_complete_count
    return _partition(ctx, index, summary.start_offset, summary.leader_epoch, lag)


def _topic(ctx: RequestContext, group_id: str, name: str, topic_id: uuid.UUID | None, partitions) -> Any:
    if not authorized(ctx, Op.DESCRIBE, Res.TOPIC, name):
        return ctx.nested("DescribeShareGroupOffsetsResponseTopic", topic_name=name, topic_id=None, partitions=tuple(
            _partition(ctx, int(p), error=ErrorCode.topic_authorization_failed) for p in partitions))
    topic = ctx.state.topics.by_id(topic_id)
    return ctx.nested("DescribeShareGroupOffsetsResponseTopic", topic_name=name, topic_id=topic_id, partitions=tuple(
        _describe_partition(ctx, group_id, topic, int(p)) for p in partitions))


def _group(ctx: RequestContext, request_group: Any) -> Any:
    group_id = request_group.group_id
    if not group_id:
        return ctx.nested("DescribeShareGroupOffsetsResponseGroup", group_id=group_id, topics=(),
                          error_code=ErrorCode.invalid_group_id, error_message=INVALID_GROUP_MESSAGE)
    if not authorized(ctx, Op.DESCRIBE, Res.GROUP, group_id):
        return ctx.nested("DescribeShareGroupOffsetsResponseGroup", group_id=group_id, topics=(),
                          error_code=ErrorCode.group_authorization_failed, error_message=None)
    if not is_coordinator(ctx, group_id):
        return ctx.nested("DescribeShareGroupOffsetsResponseGroup", group_id=group_id, topics=(),
                          error_code=ErrorCode.not_coordinator, error_message=NOT_COORDINATOR_MESSAGE)
    if request_group.topics is None:
        named = sorted(ctx.state.share_groups.offsets_topics(group_id).items(), key=lambda kv: kv[1][0])
        topics = [_topic(ctx, group_id, name, tid, sorted(ps)) for tid, (name, ps) in named]
    else:
        topics = []
        for t in request_group.topics:
            known = ctx.state.topics.get(t.topic_name)
            topics.append(_topic(ctx, group_id, t.topic_name, known.topic_id if known else None, t.partitions))
    return ctx.nested("DescribeShareGroupOffsetsResponseGroup", group_id=group_id, topics=tuple(topics),
                      error_code=ErrorCode.none, error_message=None)


@handles(API_KEY, 0, 1)
def handle_describe_share_group_offsets(ctx: RequestContext, request) -> object:
    if not ctx.state.config.share_groups_enabled:
        return ctx.response(throttle_time=NO_THROTTLE, groups=tuple(
            ctx.nested("DescribeShareGroupOffsetsResponseGroup", group_id=g.group_id, topics=(),
                       error_code=ErrorCode.unsupported_version, error_message=None)
            for g in request.groups))
    return ctx.response(throttle_time=NO_THROTTLE, groups=tuple(_group(ctx, g) for g in request.groups))
