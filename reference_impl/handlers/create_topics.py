"""CreateTopics (key 19): validation and placement by the topic registry.

Any node answers (Kafka forwards to the controller). Duplicate names in one request
are INVALID_REQUEST for every copy; results of v5+ carry the effective configs,
partition count and replication factor of each created (or validated) topic.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers.metadata import sync_liveness
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model.topics import CreatableTopicSpec, CreateTopicResult
from reference_impl.protocol import payloads
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.CREATE_TOPICS
NO_THROTTLE = datetime.timedelta(0)
CONFIG_SOURCE_DYNAMIC_TOPIC = 1
CONFIG_SOURCE_DEFAULT = 5
# Kafka's controller refuses a request that would create more partitions than this in
# total (ReplicationControlManager.MAX_PARTITIONS_PER_BATCH) with POLICY_VIOLATION for
# every topic, before any other check; it also keeps a hostile num_partitions (up to
# 2^31-1) from exhausting the reference broker's memory.
MAX_PARTITIONS_PER_REQUEST = 10_000
EXCESSIVE_PARTITIONS = "Excessively large number of partitions per request."


@handles(API_KEY, 2, 7)
def handle_create_topics(ctx: RequestContext, request: Any) -> Any:
    sync_liveness(ctx)
    specs = [
        CreatableTopicSpec(
            name=t.name,
            num_partitions=int(t.num_partitions),
            replication_factor=int(t.replication_factor),
            assignments=tuple((int(a.partition_index), tuple(int(b) for b in a.broker_ids)) for a in t.assignments),
            configs=tuple((c.name, c.value) for c in t.configs),
        )
        for t in request.topics
    ]
    validate_only = bool(payloads.get(request, "validate_only", False))
    if _total_partitions(specs, ctx.state.config.num_partitions) > MAX_PARTITIONS_PER_REQUEST:
        results = [CreateTopicResult(s.name, ErrorCode.policy_violation, EXCESSIVE_PARTITIONS) for s in specs]
    else:
        results = ctx.state.topics.create_topics(specs, validate_only=validate_only)
    return ctx.response(
        throttle_time=NO_THROTTLE,
        topics=tuple(_result(ctx, r) for r in results),
    )


def _total_partitions(specs: list[CreatableTopicSpec], default_partitions: int) -> int:
    """Kafka's upper bound: assignments count, else num_partitions (-1: the default)."""
    total = 0
    for s in specs:
        if s.assignments:
            total += len(s.assignments)
        elif s.num_partitions == -1:
            total += default_partitions
        elif s.num_partitions > 0:
            total += s.num_partitions
    return total


def _result(ctx: RequestContext, r: Any) -> Any:
    ok = r.error_code == ErrorCode.none
    return ctx.nested(
        "CreatableTopicResult",
        name=r.name,
        topic_id=r.topic_id,
        error_code=r.error_code,
        error_message=r.error_message,
        topic_config_error_code=ErrorCode.none,
        num_partitions=r.num_partitions if ok else -1,
        replication_factor=r.replication_factor if ok else -1,
        configs=tuple(
            ctx.nested(
                "CreatableTopicConfigs",
                name=name,
                value=value,
                read_only=False,
                config_source=CONFIG_SOURCE_DEFAULT if is_default else CONFIG_SOURCE_DYNAMIC_TOPIC,
                is_sensitive=False,
            )
            for name, value, is_default in r.configs
        )
        if ok and ctx.api_version >= 5
        else (),
    )
