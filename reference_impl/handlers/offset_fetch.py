"""OffsetFetch (key 9), v1-v9 (Kafka 4 removed v0; v10's topic ids are not offered).

v1-v7 ask for one group, v8+ for several. Topics that do not exist are not checked:
their partitions read as "no committed offset" (-1), as in Kafka.

`require_stable` (v7+, KIP-447) reports UNSTABLE_OFFSET_COMMIT (88; never the KIP text's
PENDING_TRANSACTION 85, see DIV-001) with offset -1 for each partition that has a pending
transactional offset (TxnOffsetCommit of a transaction whose marker has not reached the
group coordinator); the other partitions of the same request are answered normally.
Without it (and below v7, which has no such field) the last committed offset is returned
and pending transactional offsets are invisible. A fetch of all partitions (topics null)
lists committed partitions only, as Kafka's fetchAllOffsets.

v9 (KIP-848) carries the member id and epoch of a consumer-protocol member: a consumer group
answers UNKNOWN_MEMBER_ID or STALE_MEMBER_EPOCH at group level when they do not match
(null id with epoch -1: an admin client, always accepted); classic groups ignore them.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from reference_impl.handlers._group_common import NO_THROTTLE, is_coordinator
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model.group_coordinator import OffsetFetchResult
from reference_impl.model.offset_store import INVALID_OFFSET, NO_METADATA
from reference_impl.protocol import payloads
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.OFFSET_FETCH


def _fetch(ctx: RequestContext, group_id: str, topics, require_stable: bool,
           member_id: str | None = None, member_epoch: int = -1) -> OffsetFetchResult:
    if not is_coordinator(ctx, group_id):
        return OffsetFetchResult(ErrorCode.not_coordinator)
    wanted = None if topics is None else [(t.name, [int(i) for i in t.partition_indexes]) for t in topics]
    return ctx.state.groups.fetch_offsets(
        group_id, wanted, require_stable=require_stable, member_id=member_id, member_epoch=member_epoch)


@handles(API_KEY, 1, 9)
def handle_offset_fetch(ctx: RequestContext, request) -> object:
    v = ctx.api_version
    require_stable = bool(payloads.get(request, "require_stable", False))
    if v >= 8:
        groups = []
        for g in request.groups:
            r = _fetch(ctx, g.group_id, g.topics, require_stable,
                       payloads.get(g, "member_id"), int(payloads.get(g, "member_epoch", -1)))
            groups.append(ctx.nested(
                "OffsetFetchResponseGroup",
                group_id=g.group_id,
                error_code=r.error,
                topics=tuple(
                    ctx.nested("OffsetFetchResponseTopics", name=name, partitions=tuple(
                        ctx.nested("OffsetFetchResponsePartitions", partition_index=p.partition,
                                   committed_offset=p.offset, committed_leader_epoch=p.leader_epoch,
                                   metadata=p.metadata, error_code=p.error)
                        for p in parts
                    ))
                    for name, parts in r.topics
                ),
            ))
        return ctx.response(throttle_time=NO_THROTTLE, groups=tuple(groups))

    r = _fetch(ctx, request.group_id, request.topics, require_stable)

    def partition(p):
        if v < 2 and r.error != ErrorCode.none:
            # v1 has no top-level error: it is reported on every partition.
            return ctx.nested("OffsetFetchResponsePartition", partition_index=p.partition,
                              committed_offset=INVALID_OFFSET, committed_leader_epoch=-1,
                              metadata=NO_METADATA, error_code=r.error)
        return ctx.nested("OffsetFetchResponsePartition", partition_index=p.partition,
                          committed_offset=p.offset, committed_leader_epoch=p.leader_epoch,
                          metadata=p.metadata, error_code=p.error)

    return ctx.response(
        throttle_time=NO_THROTTLE,
        error_code=r.error,
        topics=tuple(
            ctx.nested("OffsetFetchResponseTopic", name=name, partitions=tuple(partition(p) for p in parts))
            for name, parts in r.topics
        ),
    )
