"""Fetch (key 1), v4+: whole batches, long polling, fetch sessions (KIP-227).

* Topics by name before v13, by topic id from v13 (unknown id: UNKNOWN_TOPIC_ID;
  an id whose topic was deleted: UNKNOWN_TOPIC_OR_PARTITION, or INCONSISTENT_TOPIC_ID
  when the name now belongs to a re-created topic).
* Consumers must fetch from the leader, except from v11 (KIP-392) where any replica
  of the partition may serve them; otherwise NOT_LEADER_OR_FOLLOWER (with the current
  leader and its endpoint from v16). current_leader_epoch is checked
  (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH); fetch offsets outside
  [log start, log end] are OFFSET_OUT_OF_RANGE.
* Reads return whole batches up to the high watermark (READ_UNCOMMITTED) or the last
  stable offset (READ_COMMITTED, with the aborted transactions in range); the first
  non-empty partition always gets its first batch even past max_bytes /
  partition_max_bytes, later ones only whole batches that fit.
* The response waits (up to max_wait_ms) until min_bytes are available or a
  partition changes in a way that needs an answer (error, leadership, deletion).
* Sessions: epoch -1 is sessionless (and closes the named session), epoch 0 opens a
  full session, other epochs are incremental and must match the session's epoch
  (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, and
  FETCH_SESSION_TOPIC_ID_ERROR when the request version disagrees with the session
  on topic ids). Incremental responses carry only partitions with news.
"""

from __future__ import annotations

import datetime
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers.metadata import node_endpoints, nonzero_uuid, sync_liveness
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model.partition_log import IsolationLevel, OffsetOutOfRangeError
from reference_impl.model.topics import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchSession,
    PartitionState,
    TopicRegistry,
    next_epoch,
    session_key,
)
from reference_impl.protocol import payloads
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.FETCH
NO_THROTTLE = datetime.timedelta(0)
BROKER_FETCH_MAX_BYTES = 57_671_680  # fetch.max.bytes broker default (55 MiB)


@dataclass(slots=True)
class _Result:
    key: tuple[Any, int]
    topic: str | None
    topic_id: uuid.UUID | None
    partition: int
    error: ErrorCode = ErrorCode.none
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    aborted: tuple[Any, ...] | None = None
    leader: tuple[int, int] | None = None  # for NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH


@dataclass(slots=True)
class _Params:
    version: int
    node_id: int
    isolation: IsolationLevel
    max_bytes: int
    min_bytes: int
    from_follower: bool
    uses_topic_ids: bool


@dataclass(slots=True)
class _Context:
    kind: str  # "sessionless" | "full" | "incremental" | "error"
    partitions: "OrderedDict[tuple[Any, int], CachedPartition]" = field(default_factory=OrderedDict)
    session: FetchSession | None = None
    request_epoch: int = FINAL_EPOCH
    error: ErrorCode = ErrorCode.none


def _ms(value: Any) -> int:
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return int(value)


def _request_partitions(request: Any, registry: TopicRegistry, uses_ids: bool) -> "OrderedDict[tuple[Any, int], CachedPartition]":
    out: "OrderedDict[tuple[Any, int], CachedPartition]" = OrderedDict()
    for t in request.topics:
        if uses_ids:
            tid = nonzero_uuid(t.topic_id)
            name = registry.name_for_id(tid)
        else:
            tid, name = None, t.topic
        for p in t.partitions:
            cp = CachedPartition(
                topic=name,
                topic_id=tid,
                partition=int(p.partition),
                max_bytes=int(p.partition_max_bytes),
                fetch_offset=int(p.fetch_offset),
                log_start_offset=int(payloads.get(p, "log_start_offset", -1)),
                current_leader_epoch=int(payloads.get(p, "current_leader_epoch", -1)),
                last_fetched_epoch=int(payloads.get(p, "last_fetched_epoch", -1)),
            )
            out[session_key(name if not uses_ids else None, tid, cp.partition)] = cp
    return out


def _forgotten(request: Any, registry: TopicRegistry, uses_ids: bool) -> list[tuple[Any, int]]:
    keys = []
    for t in payloads.get(request, "forgotten_topics_data", ()) or ():
        tid = nonzero_uuid(t.topic_id) if uses_ids else None
        name = None if uses_ids else t.topic
        for index in t.partitions:
            keys.append(session_key(name, tid, int(index)))
    return keys


def _new_context(ctx: RequestContext, request: Any, params: _Params) -> _Context:
    registry: TopicRegistry = ctx.state.topics
    cache = registry.fetch_sessions[ctx.node_id]
    session_id = int(payloads.get(request, "session_id", INVALID_SESSION_ID))
    epoch = int(payloads.get(request, "session_epoch", FINAL_EPOCH))
    data = _request_partitions(request, registry, params.uses_topic_ids)
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        if session_id != INVALID_SESSION_ID:
            cache.remove(session_id)  # a full request closes the session it names
        kind = "sessionless" if epoch == FINAL_EPOCH else "full"
        return _Context(kind, data, request_epoch=epoch)
    session = cache.get(session_id)
    if session is None:
        return _Context("error", error=ErrorCode.fetch_session_id_not_found, request_epoch=epoch)
    if session.epoch != epoch:
        return _Context("error", error=ErrorCode.invalid_fetch_session_epoch, request_epoch=epoch)
    if session.uses_topic_ids != params.uses_topic_ids:
        return _Context("error", error=ErrorCode.fetch_session_topic_id_error, request_epoch=epoch)
    for key, cp in data.items():
        cached = session.partitions.get(key)
        if cached is None:
            session.partitions[key] = cp
        else:
            cached.max_bytes = cp.max_bytes
            cached.fetch_offset = cp.fetch_offset
            cached.log_start_offset = cp.log_start_offset
            cached.current_leader_epoch = cp.current_leader_epoch
            cached.last_fetched_epoch = cp.last_fetched_epoch
    for key in _forgotten(request, registry, params.uses_topic_ids):
        session.partitions.pop(key, None)
    if not session.partitions:
        cache.remove(session.session_id)
        return _Context("sessionless", data, request_epoch=epoch)
    cache.touch(session, ctx.now_ms)
    session.epoch = next_epoch(session.epoch)
    for cp in session.partitions.values():
        if cp.topic is None and cp.topic_id is not None:
            cp.topic = registry.name_for_id(cp.topic_id)
    return _Context("incremental", session.partitions, session=session, request_epoch=epoch)


def _resolve(registry: TopicRegistry, cp: CachedPartition, uses_ids: bool) -> tuple[PartitionState | None, ErrorCode]:
    if uses_ids:
        topic = registry.by_id(cp.topic_id)
        if topic is None:
            if cp.topic is None:
                return None, ErrorCode.unknown_topic_id
            if registry.get(cp.topic) is not None:
                return None, ErrorCode.inconsistent_topic_id
            return None, ErrorCode.unknown_topic_or_partition
    else:
        topic = registry.get(cp.topic)
        if topic is None:
            return None, ErrorCode.unknown_topic_or_partition
    part = topic.partition(cp.partition)
    if part is None:
        return None, ErrorCode.unknown_topic_or_partition
    return part, ErrorCode.none


def _serving_error(ctx: RequestContext, part: PartitionState, cp: CachedPartition, params: _Params) -> ErrorCode:
    node = params.node_id
    may_serve = part.leader == node
    if not may_serve and params.version >= 11 and not params.from_follower:
        may_serve = node in part.replicas and node in part.isr  # KIP-392 follower fetching
    if not may_serve:
        return ErrorCode.not_leader_or_follower
    if cp.current_leader_epoch != -1:
        if part.leader_epoch > cp.current_leader_epoch:
            return ErrorCode.fenced_leader_epoch
        if part.leader_epoch < cp.current_leader_epoch:
            return ErrorCode.unknown_leader_epoch
    if params.version < 10 and part.log.config.compression == "zstd":
        return ErrorCode.unsupported_compression_type
    return ErrorCode.none


def _read_all(ctx: RequestContext, fctx: _Context, params: _Params) -> list[_Result]:
    registry: TopicRegistry = ctx.state.topics
    registry.sync_liveness(ctx.state.alive)
    readable: list[_Result] = []
    erroneous: list[_Result] = []
    limit = params.max_bytes
    min_one = True
    for key, cp in fctx.partitions.items():
        res = _Result(key=key, topic=cp.topic, topic_id=cp.topic_id, partition=cp.partition)
        part, error = _resolve(registry, cp, params.uses_topic_ids)
        if part is None:
            res.error = error
            erroneous.append(res)
            continue
        res.topic = part.topic.name
        readable.append(res)
        error = _serving_error(ctx, part, cp, params)
        if error != ErrorCode.none:
            res.error = error
            if error in (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch):
                res.leader = (part.leader, part.leader_epoch)
            continue
        try:
            rr = part.log.read(cp.fetch_offset, min(cp.max_bytes, limit), params.isolation, min_one_message=min_one)
        except OffsetOutOfRangeError:
            res.error = ErrorCode.offset_out_of_range
            continue
        res.high_watermark = rr.high_watermark
        res.last_stable_offset = rr.last_stable_offset
        res.log_start_offset = rr.log_start_offset
        res.records = rr.records
        res.aborted = rr.aborted_transactions
        if rr.records:
            min_one = False
            limit = max(0, limit - len(rr.records))
    return readable + erroneous


def _ready(ctx: RequestContext, fctx: _Context, params: _Params) -> bool:
    """DelayedFetch completion: enough bytes, or a partition that needs an answer."""
    registry: TopicRegistry = ctx.state.topics
    registry.sync_liveness(ctx.state.alive)
    accumulated = 0
    for cp in fctx.partitions.values():
        part, error = _resolve(registry, cp, params.uses_topic_ids)
        if part is None:
            return True
        if _serving_error(ctx, part, cp, params) != ErrorCode.none:
            return True
        log = part.log
        if cp.fetch_offset < log.log_start_offset or cp.fetch_offset > log.log_end_offset:
            return True
        accumulated += log.bytes_available(cp.fetch_offset, params.isolation, cp.max_bytes)
        if accumulated >= params.min_bytes:
            return True
    return False


@handles(API_KEY, 4, 18)
async def handle_fetch(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    sync_liveness(ctx)
    if version >= 15:
        replica_id = int(request.replica_state.replica_id)
    else:
        replica_id = int(payloads.get(request, "replica_id", -1))
    raw_isolation = int(payloads.get(request, "isolation_level", 0))
    from_follower = replica_id >= 0
    max_bytes = min(int(payloads.get(request, "max_bytes", 2**31 - 1)), BROKER_FETCH_MAX_BYTES)
    params = _Params(
        version=version,
        node_id=ctx.node_id,
        isolation=IsolationLevel.READ_COMMITTED if raw_isolation == 1 and not from_follower else IsolationLevel.READ_UNCOMMITTED,
        max_bytes=max_bytes,
        min_bytes=min(int(request.min_bytes), max_bytes),
        from_follower=from_follower,
        uses_topic_ids=version >= 13,
    )
    fctx = _new_context(ctx, request, params)
    if fctx.kind == "error":
        return _response(ctx, fctx.error, INVALID_SESSION_ID, [])

    results = _read_all(ctx, fctx, params)
    max_wait_ms = _ms(request.max_wait)
    bytes_read = sum(len(r.records) for r in results)
    any_error = any(r.error != ErrorCode.none for r in results)
    if not (max_wait_ms <= 0 or not fctx.partitions or bytes_read >= params.min_bytes or any_error):
        await ctx.runtime.wait_for(lambda: _ready(ctx, fctx, params), max_wait_ms)
        results = _read_all(ctx, fctx, params)
    return _finish(ctx, fctx, params, results)


def _finish(ctx: RequestContext, fctx: _Context, params: _Params, results: list[_Result]) -> Any:
    registry: TopicRegistry = ctx.state.topics
    cache = registry.fetch_sessions[ctx.node_id]
    now = ctx.now_ms
    if fctx.kind == "sessionless":
        return _response(ctx, ErrorCode.none, INVALID_SESSION_ID, results)
    if fctx.kind == "full":
        cached: "OrderedDict[tuple[Any, int], CachedPartition]" = OrderedDict()
        for r in results:
            cp = fctx.partitions[r.key]
            cp.high_watermark = r.high_watermark
            cp.local_log_start_offset = r.log_start_offset
            cached[r.key] = cp
        session_id = cache.create(now, params.uses_topic_ids, cached)
        return _response(ctx, ErrorCode.none, session_id, results)
    session = fctx.session
    assert session is not None
    if cache.get(session.session_id) is not session or session.epoch != next_epoch(fctx.request_epoch):
        # Another request used the session while this one waited.
        return _response(ctx, ErrorCode.invalid_fetch_session_epoch, session.session_id, [])
    selected = []
    for r in results:
        cp = session.partitions.get(r.key)
        if cp is None:
            continue
        must = False
        if r.records:
            must = True
        if cp.high_watermark != r.high_watermark:
            must = True
            cp.high_watermark = r.high_watermark
        if cp.local_log_start_offset != r.log_start_offset:
            must = True
            cp.local_log_start_offset = r.log_start_offset
        if r.error != ErrorCode.none:
            cp.high_watermark = -1
            must = True
        if must:
            selected.append(r)
            if r.records:
                session.partitions.move_to_end(r.key)
    return _response(ctx, ErrorCode.none, session.session_id, selected)


def _response(ctx: RequestContext, error: ErrorCode, session_id: int, results: list[_Result]) -> Any:
    version = ctx.api_version
    topics: list[Any] = []
    current_key: Any = object()
    current_parts: list[Any] = []
    current_topic: tuple[str | None, uuid.UUID | None] = (None, None)
    leaders: set[int] = set()

    def flush() -> None:
        if current_parts:
            topics.append(
                ctx.nested(
                    "FetchableTopicResponse",
                    topic=current_topic[0],
                    topic_id=current_topic[1],
                    partitions=tuple(current_parts),
                )
            )

    for r in results:
        tkey = r.topic_id if version >= 13 else r.topic
        if tkey != current_key:
            flush()
            current_key, current_parts = tkey, []
            current_topic = (r.topic, r.topic_id)
        fields: dict[str, Any] = dict(
            partition_index=r.partition,
            error_code=r.error,
            high_watermark=r.high_watermark,
            last_stable_offset=r.last_stable_offset,
            log_start_offset=r.log_start_offset,
            aborted_transactions=(
                None
                if r.aborted is None
                else tuple(ctx.nested("AbortedTransaction", producer_id=a.producer_id, first_offset=a.first_offset) for a in r.aborted)
            ),
            preferred_read_replica=-1,
            records=r.records,
        )
        if version >= 16 and r.leader is not None:
            fields["current_leader"] = ctx.nested("LeaderIdAndEpoch", leader_id=r.leader[0], leader_epoch=r.leader[1])
            if r.leader[0] >= 0:
                leaders.add(r.leader[0])
        current_parts.append(ctx.nested("PartitionData", **fields))
    flush()
    return ctx.response(
        throttle_time=NO_THROTTLE,
        error_code=error,
        session_id=session_id,
        responses=tuple(topics),
        node_endpoints=node_endpoints(ctx, leaders) if version >= 16 else (),
    )
