"""DeleteTopics (key 20): by name (all versions) or by topic id (v6+).

Kafka's rules: naming a topic twice is INVALID_REQUEST for it, giving both a name and
an id (or neither) is INVALID_REQUEST, an unknown name is UNKNOWN_TOPIC_OR_PARTITION
and an unknown id UNKNOWN_TOPIC_ID.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers.metadata import nonzero_uuid
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model.topics import TopicError
from reference_impl.protocol import payloads
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.DELETE_TOPICS
NO_THROTTLE = datetime.timedelta(0)


@handles(API_KEY, 1, 6)
def handle_delete_topics(ctx: RequestContext, request: Any) -> Any:
    registry = ctx.state.topics
    wanted: list[tuple[str | None, uuid.UUID | None]] = [(n, None) for n in payloads.get(request, "topic_names", ()) or ()]
    for t in payloads.get(request, "topics", ()) or ():
        wanted.append((t.name, nonzero_uuid(t.topic_id)))

    name_count: dict[str, int] = {}
    id_count: dict[uuid.UUID, int] = {}
    for name, tid in wanted:
        if name is not None and tid is None:
            name_count[name] = name_count.get(name, 0) + 1
        elif name is None and tid is not None:
            id_count[tid] = id_count.get(tid, 0) + 1

    results: list[Any] = []
    reported_dupes: set[object] = set()
    for name, tid in wanted:
        if name is None and tid is None:
            results.append(_result(ctx, None, None, ErrorCode.invalid_request, "Neither topic name nor id were specified."))
            continue
        if name is not None and tid is not None:
            results.append(_result(ctx, name, tid, ErrorCode.invalid_request, "You may not specify both topic name and topic id."))
            continue
        key: object = name if tid is None else tid
        if (name_count.get(name, 0) if tid is None else id_count.get(tid, 0)) > 1:
            if key not in reported_dupes:
                reported_dupes.add(key)
                msg = "Duplicate topic name." if tid is None else "Duplicate topic id."
                results.append(_result(ctx, name, tid, ErrorCode.invalid_request, msg))
            continue
        try:
            topic = registry.delete(name=name, topic_id=tid)
        except TopicError as exc:
            results.append(_result(ctx, name, tid, exc.error_code, exc.message))
            continue
        results.append(_result(ctx, topic.name, topic.topic_id, ErrorCode.none, None))
    return ctx.response(throttle_time=NO_THROTTLE, responses=tuple(results))


def _result(ctx: RequestContext, name: str | None, tid: uuid.UUID | None, error: ErrorCode, message: str | None) -> Any:
    return ctx.nested(
        "DeletableTopicResult",
        name=name,
        topic_id=tid,
        error_code=error,
        error_message=message,
    )
