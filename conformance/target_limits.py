"""The limits a target's brokers are configured with, read once per target.

A test that needs a short lock, session or transaction timeout must not assume the
reference's relaxed bounds: a correct cluster with Kafka's defaults refuses
`share.record.lock.duration.ms=1000` (INVALID_CONFIG, outside
[group.share.min.record.lock.duration.ms, group.share.max.record.lock.duration.ms] =
[15000, 60000]) and must still certify. `limits(target)` asks a broker with DescribeConfigs
(BROKER resource, as `kafka-configs --describe --entity-type brokers` does) and caches the
answer per target (with the policies a test follows, e.g. group.consumer.migration.policy);
`lock_ms(target, wanted)` clamps a wish into the allowed range, and
`require_wait` turns a wait that would be unreasonable into "not supported by target",
naming the broker setting to change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from confluent_kafka.admin import ConfigResource, ResourceType

from clients import confluent
from targets.target import NotSupportedByTarget

MAX_REASONABLE_WAIT_S = 120.0
DESCRIBE_TIMEOUT_S = 15.0

# Kafka's defaults (GroupCoordinatorConfig, ShareGroupConfig, TransactionLogConfig): what a
# target that does not describe its broker configs is assumed to enforce.
KAFKA_DEFAULTS: dict[str, int] = {
    "group.share.min.record.lock.duration.ms": 15_000,
    "group.share.max.record.lock.duration.ms": 60_000,
    "group.share.record.lock.duration.ms": 30_000,
    "group.share.delivery.count.limit": 5,
    "group.share.min.session.timeout.ms": 45_000,
    "group.share.max.session.timeout.ms": 60_000,
    "group.share.session.timeout.ms": 45_000,
    "group.share.min.heartbeat.interval.ms": 5_000,
    "group.share.max.heartbeat.interval.ms": 15_000,
    "group.share.heartbeat.interval.ms": 5_000,
    "group.min.session.timeout.ms": 6_000,
    "group.max.session.timeout.ms": 1_800_000,
    "transaction.max.timeout.ms": 900_000,
    "transactional.id.expiration.ms": 604_800_000,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 10_000,
}
# Kafka 4.x's defaults of the policies a test follows (GroupCoordinatorConfig).
KAFKA_POLICY_DEFAULTS: dict[str, str] = {
    "group.consumer.migration.policy": "bidirectional",
}


@dataclass(frozen=True)
class TargetLimits:
    values: dict[str, int]
    described: bool  # False: the target did not answer, Kafka's defaults are assumed
    policies: dict[str, str] = field(default_factory=dict)  # as the target reported them (lower case)

    def __getitem__(self, name: str) -> int:
        return self.values[name]

    def policy(self, name: str) -> str:
        """A policy as the target reported it, else Kafka's default (`name in policies` tells which)."""
        return self.policies.get(name, KAFKA_POLICY_DEFAULTS[name])

    def clamp(self, wanted: int, low: str, high: str) -> int:
        return min(max(wanted, self.values[low]), self.values[high])


_CACHE: dict[str, TargetLimits] = {}


def limits(target: Any) -> TargetLimits:
    """The target's broker limits (cached per target name)."""
    if target.name not in _CACHE:
        _CACHE[target.name] = _describe(target)
    return _CACHE[target.name]


def _describe(target: Any) -> TargetLimits:
    admin = confluent.admin(target)
    try:
        brokers = sorted(admin.list_topics(timeout=DESCRIBE_TIMEOUT_S).brokers)
        resource = ConfigResource(ResourceType.BROKER, str(brokers[0]))
        entries = admin.describe_configs([resource], request_timeout=DESCRIBE_TIMEOUT_S)[resource].result(
            DESCRIBE_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - e.g. librdkafka's mock: no DescribeConfigs for brokers
        return TargetLimits(dict(KAFKA_DEFAULTS), described=False)
    values = dict(KAFKA_DEFAULTS)
    for name, entry in entries.items():
        if name in values and entry.value is not None and entry.value.lstrip("-").isdigit():
            values[name] = int(entry.value)
    policies = {name: entry.value.lower() for name, entry in entries.items()
                if name in KAFKA_POLICY_DEFAULTS and entry.value is not None}
    return TargetLimits(values, described=True, policies=policies)


def lock_ms(target: Any, wanted: int) -> int:
    """`wanted` as a share group's record lock duration, clamped into the broker's bounds
    (KIP-932: group.share.min/max.record.lock.duration.ms bound the group config)."""
    return limits(target).clamp(wanted, "group.share.min.record.lock.duration.ms",
                                "group.share.max.record.lock.duration.ms")


def require_wait(wait_s: float, what: str, setting: str, max_s: float = MAX_REASONABLE_WAIT_S) -> None:
    """NotSupportedByTarget when a test would wait longer than `max_s` for `what`,
    naming the broker `setting` that would make the wait shorter."""
    if wait_s > max_s:
        raise NotSupportedByTarget(
            f"{what} would take {wait_s:.0f} s on this target (> {max_s:.0f} s): lower the broker setting "
            f"{setting} to run this test")
