"""DescribeConfigs (key 32), v1-v4: the GROUP resource (type 32) and the limits of the
BROKER resource (type 4).

Group configs (KIP-848 / KIP-932) as Kafka 4.4.0 describes them (observed): every group
config the broker knows, for any group id (the group need not exist), with its value, source
GROUP_CONFIG (8) when set by IncrementalAlterConfigs else DEFAULT_CONFIG (5), never read
only or sensitive; synonyms (when asked): the group value, then the broker config it
overrides (`group.<name>` for most, the same name for share.auto.offset.reset,
share.isolation.level and share.renew.acknowledge.enable) with the broker's value. Named
keys filter the list (unknown names are left out); an empty group name is INVALID_REQUEST
("Group name must not be empty"). The reference describes the group configs it models
(`group_configs.VALIDATORS`); Kafka also lists consumer/share/streams assignment intervals,
streams.* and errors.deadletterqueue.* configs, which it does not model. No documentation
text is sent. Other resource types are answered INVALID_REQUEST saying they are not modelled.

BROKER (type 4, name = a node id, or empty for the cluster default): the timeouts and bounds
the model enforces and the group.consumer.migration.policy it follows (`BROKER_CONFIGS`),
source DEFAULT_CONFIG (STATIC_BROKER_CONFIG when the broker was started with another value),
read only, so that a test can read a target's limits (session timeouts, lock durations,
transaction timeouts) and policies the same way from the reference and from Kafka. An unknown
node id is INVALID_REQUEST.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from reference_impl.handlers._group_common import NO_THROTTLE
from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model.broker_config import BrokerConfig
from reference_impl.model.group_configs import VALIDATORS
from reference_impl.model.partition_log import IsolationLevel
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.DESCRIBE_CONFIGS
GROUP_RESOURCE = 32
BROKER_RESOURCE = 4
STATIC_BROKER_CONFIG, DEFAULT_CONFIG, GROUP_CONFIG = 4, 5, 8  # ConfigSource ids
BOOLEAN, STRING, INT = 1, 2, 3  # ConfigType ids
CONSUMER_SESSION_TIMEOUT_MS, CONSUMER_HEARTBEAT_INTERVAL_MS = 45_000, 5_000  # Kafka's broker defaults


@dataclass(frozen=True, slots=True)
class GroupConfigDescription:
    broker_name: str  # the broker config a group value overrides (its synonym)
    config_type: int
    default: Callable[[Any], str]  # BrokerConfig -> the broker's value


def _isolation(config: Any) -> str:
    level = config.share_partition.isolation_level
    return "read_committed" if int(level) == IsolationLevel.READ_COMMITTED else "read_uncommitted"


DESCRIPTIONS: dict[str, GroupConfigDescription] = {
    "consumer.session.timeout.ms": GroupConfigDescription(
        "group.consumer.session.timeout.ms", INT, lambda c: str(CONSUMER_SESSION_TIMEOUT_MS)),
    "consumer.heartbeat.interval.ms": GroupConfigDescription(
        "group.consumer.heartbeat.interval.ms", INT, lambda c: str(CONSUMER_HEARTBEAT_INTERVAL_MS)),
    "share.session.timeout.ms": GroupConfigDescription(
        "group.share.session.timeout.ms", INT, lambda c: str(c.group_share_session_timeout_ms)),
    "share.heartbeat.interval.ms": GroupConfigDescription(
        "group.share.heartbeat.interval.ms", INT, lambda c: str(c.group_share_heartbeat_interval_ms)),
    "share.record.lock.duration.ms": GroupConfigDescription(
        "group.share.record.lock.duration.ms", INT, lambda c: str(c.share_partition.record_lock_duration_ms)),
    "share.auto.offset.reset": GroupConfigDescription(
        "share.auto.offset.reset", STRING, lambda c: str(c.share_partition.auto_offset_reset)),
    "share.isolation.level": GroupConfigDescription("share.isolation.level", STRING, _isolation),
    "share.delivery.count.limit": GroupConfigDescription(
        "group.share.delivery.count.limit", INT, lambda c: str(c.share_partition.delivery_count_limit)),
    "share.partition.max.record.locks": GroupConfigDescription(
        "group.share.partition.max.record.locks", INT, lambda c: str(c.share_partition.partition_max_record_locks)),
    "share.renew.acknowledge.enable": GroupConfigDescription(
        "share.renew.acknowledge.enable", BOOLEAN, lambda c: str(c.share_partition.renew_acknowledge_enabled).lower()),
}
if set(DESCRIPTIONS) != set(VALIDATORS):  # a config added to the model must be describable
    raise RuntimeError(f"group configs without a description: {sorted(set(VALIDATORS) ^ set(DESCRIPTIONS))}")


# the broker configs a test reads to work within a target's limits or to follow its policy
BROKER_CONFIGS: dict[str, Callable[[Any], Any]] = {  # name -> BrokerConfig -> value
    # `disabled`: the model has no online migration (a test expects Kafka's refusals)
    "group.consumer.migration.policy": lambda c: c.consumer_group.migration_policy,
    "group.share.min.record.lock.duration.ms": lambda c: c.share_partition.min_record_lock_duration_ms,
    "group.share.max.record.lock.duration.ms": lambda c: c.share_partition.max_record_lock_duration_ms,
    "group.share.record.lock.duration.ms": lambda c: c.share_partition.record_lock_duration_ms,
    "group.share.delivery.count.limit": lambda c: c.share_partition.delivery_count_limit,
    "group.share.session.timeout.ms": lambda c: c.group_share_session_timeout_ms,
    "group.share.heartbeat.interval.ms": lambda c: c.group_share_heartbeat_interval_ms,
    "group.min.session.timeout.ms": lambda c: c.group_min_session_timeout_ms,
    "group.max.session.timeout.ms": lambda c: c.group_max_session_timeout_ms,
    "transaction.max.timeout.ms": lambda c: c.transaction.transaction_max_timeout_ms,
    "transactional.id.expiration.ms": lambda c: c.transaction.transactional_id_expiration_ms,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms":
        lambda c: c.transaction.transaction_abort_timed_out_transaction_cleanup_interval_ms,
}
# the share session / heartbeat bounds live on the group-config bounds (GroupConfigBounds)
BROKER_BOUNDS: dict[str, Callable[[Any], Any]] = {
    "group.share.min.session.timeout.ms": lambda b: b.share_min_session_timeout_ms,
    "group.share.max.session.timeout.ms": lambda b: b.share_max_session_timeout_ms,
    "group.share.min.heartbeat.interval.ms": lambda b: b.share_min_heartbeat_interval_ms,
    "group.share.max.heartbeat.interval.ms": lambda b: b.share_max_heartbeat_interval_ms,
}


_DEFAULT_BROKER_CONFIG = BrokerConfig()


def _describe_broker(ctx: RequestContext, resource: Any) -> Any:
    name = resource.resource_name or ""
    if name and (not name.isdigit() or int(name) not in ctx.state.nodes):
        return _result(ctx, resource, ErrorCode.invalid_request, f"no broker with id {name!r}")
    values = {n: f(ctx.state.config) for n, f in BROKER_CONFIGS.items()}
    values |= {n: f(ctx.state.group_configs.bounds) for n, f in BROKER_BOUNDS.items()}
    # a value the broker was started with differs from the model's default: STATIC_BROKER_CONFIG,
    # as Kafka reports a server.properties setting (a KIP default is checked only when unset)
    defaults = {n: f(_DEFAULT_BROKER_CONFIG) for n, f in BROKER_CONFIGS.items()}
    keys = resource.configuration_keys
    names = sorted(values) if not keys else [k for k in dict.fromkeys(keys) if k in values]
    return _result(ctx, resource, ErrorCode.none, None, tuple(
        ctx.nested("DescribeConfigsResourceResult", name=n, value=str(values[n]), read_only=True,
                   config_source=STATIC_BROKER_CONFIG if n in defaults and values[n] != defaults[n] else DEFAULT_CONFIG,
                   is_sensitive=False, synonyms=(), config_type=STRING if isinstance(values[n], str) else INT,
                   documentation=None)
        for n in names))


def _entry(ctx: RequestContext, name: str, stored: Any, synonyms: bool) -> Any:
    described = DESCRIPTIONS[name]
    default = described.default(ctx.state.config)
    value = default if stored is None else str(stored)
    chain = [] if stored is None else [ctx.nested("DescribeConfigsSynonym", name=name, value=value, source=GROUP_CONFIG)]
    chain.append(ctx.nested("DescribeConfigsSynonym", name=described.broker_name, value=default, source=DEFAULT_CONFIG))
    return ctx.nested(
        "DescribeConfigsResourceResult", name=name, value=value, read_only=False,
        config_source=DEFAULT_CONFIG if stored is None else GROUP_CONFIG, is_sensitive=False,
        synonyms=tuple(chain) if synonyms else (), config_type=described.config_type, documentation=None,
    )


def _describe_group(ctx: RequestContext, resource: Any, synonyms: bool) -> Any:
    if not resource.resource_name:
        return _result(ctx, resource, ErrorCode.invalid_request, "Group name must not be empty")
    stored = ctx.state.group_configs.get(resource.resource_name)
    keys = resource.configuration_keys
    names = sorted(DESCRIPTIONS) if not keys else [k for k in dict.fromkeys(keys) if k in DESCRIPTIONS]
    return _result(ctx, resource, ErrorCode.none, None, tuple(
        _entry(ctx, n, stored.get(n), synonyms) for n in names))


def _result(ctx: RequestContext, resource: Any, error: ErrorCode, message: str | None, configs: tuple = ()) -> Any:
    return ctx.nested("DescribeConfigsResult", error_code=error, error_message=message,
                      resource_type=resource.resource_type, resource_name=resource.resource_name, configs=configs)


@handles(API_KEY, 1, 4)
def handle_describe_configs(ctx: RequestContext, request) -> object:
    synonyms = bool(request.include_synonyms)
    results = []
    for resource in request.resources:
        rtype = int(resource.resource_type)
        if rtype == GROUP_RESOURCE:
            results.append(_describe_group(ctx, resource, synonyms))
        elif rtype == BROKER_RESOURCE:
            results.append(_describe_broker(ctx, resource))
        else:
            results.append(_result(ctx, resource, ErrorCode.invalid_request,
                                   f"the reference broker models no configs of resource type {rtype}"))
    return ctx.response(throttle_time=NO_THROTTLE, results=tuple(results))
