"""Per-group dynamic configs (the GROUP config resource, KIP-848 / KIP-932), as a model.

Kafka keeps these in the metadata log, keyed by group id, independent of whether the group
exists yet: an admin may configure a share group before its first member joins. The names
are Kafka's (KIP-932's text says `group.share.*`; Kafka's group-level names drop `group.`).
Values are validated against the broker's bounds the way Kafka's GroupConfig does, so a bad
value is INVALID_CONFIG and nothing is stored.

Pure: no I/O. Consumers read `get(group_id)`; the share-partition manager and the share
group coordinator apply the values they understand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from reference_impl.model.share_partition_config import (
    DELIVERY_COUNT_LIMIT_RANGE,
    PARTITION_MAX_RECORD_LOCKS_RANGE,
    AutoOffsetReset,
    ConfigError,
    SharePartitionConfig,
)


class GroupConfigError(ValueError):
    """A config name or value the broker refuses (INVALID_CONFIG)."""


@dataclass(frozen=True, slots=True)
class GroupConfigBounds:
    """Broker settings that bound group-level overrides."""

    share: SharePartitionConfig
    share_min_session_timeout_ms: int = 45_000
    share_max_session_timeout_ms: int = 60_000
    share_min_heartbeat_interval_ms: int = 5_000
    share_max_heartbeat_interval_ms: int = 15_000
    consumer_min_session_timeout_ms: int = 45_000
    consumer_max_session_timeout_ms: int = 60_000
    consumer_min_heartbeat_interval_ms: int = 5_000
    consumer_max_heartbeat_interval_ms: int = 15_000


def _int_in(lo: Callable[[GroupConfigBounds], int], hi: Callable[[GroupConfigBounds], int]):
    def check(value: str, bounds: GroupConfigBounds) -> int:
        try:
            n = int(value)
        except ValueError:
            raise GroupConfigError(f"not an integer: {value!r}") from None
        low, high = lo(bounds), hi(bounds)
        if not low <= n <= high:
            raise GroupConfigError(f"{n} is outside [{low}, {high}]")
        return n

    return check


def _auto_offset_reset(value: str, _bounds: GroupConfigBounds) -> str:
    try:
        AutoOffsetReset.parse(value)
    except ConfigError as exc:
        raise GroupConfigError(str(exc)) from None
    return value


def _isolation(value: str, _bounds: GroupConfigBounds) -> str:
    if value not in ("read_committed", "read_uncommitted"):
        raise GroupConfigError(f"must be read_committed or read_uncommitted, not {value!r}")
    return value


def _boolean(value: str, _bounds: GroupConfigBounds) -> str:
    if value.lower() not in ("true", "false"):
        raise GroupConfigError(f"must be true or false, not {value!r}")
    return value.lower()


def _lock_min(b: GroupConfigBounds) -> int:
    return max(1000, b.share.min_record_lock_duration_ms)


# name -> validator(value, bounds) -> stored value. Kafka 4.4's GroupConfig names; the
# share.delivery.count.limit / share.partition.max.record.locks overrides are 4.3+ (KIP-1240).
VALIDATORS: dict[str, Callable[[str, GroupConfigBounds], Any]] = {
    "consumer.session.timeout.ms": _int_in(lambda b: b.consumer_min_session_timeout_ms,
                                           lambda b: b.consumer_max_session_timeout_ms),
    "consumer.heartbeat.interval.ms": _int_in(lambda b: b.consumer_min_heartbeat_interval_ms,
                                              lambda b: b.consumer_max_heartbeat_interval_ms),
    "share.session.timeout.ms": _int_in(lambda b: b.share_min_session_timeout_ms,
                                        lambda b: b.share_max_session_timeout_ms),
    "share.heartbeat.interval.ms": _int_in(lambda b: b.share_min_heartbeat_interval_ms,
                                           lambda b: b.share_max_heartbeat_interval_ms),
    "share.record.lock.duration.ms": _int_in(_lock_min, lambda b: b.share.max_record_lock_duration_ms),
    "share.auto.offset.reset": _auto_offset_reset,
    "share.isolation.level": _isolation,
    "share.delivery.count.limit": _int_in(lambda b: DELIVERY_COUNT_LIMIT_RANGE[0],
                                          lambda b: DELIVERY_COUNT_LIMIT_RANGE[1]),
    "share.partition.max.record.locks": _int_in(lambda b: PARTITION_MAX_RECORD_LOCKS_RANGE[0],
                                                lambda b: PARTITION_MAX_RECORD_LOCKS_RANGE[1]),
    "share.renew.acknowledge.enable": _boolean,
}

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


@dataclass(frozen=True, slots=True)
class ConfigChange:
    name: str
    operation: int
    value: str | None


class GroupConfigs:
    """Dynamic configs of every group id, validated as a whole per request."""

    def __init__(self, bounds: GroupConfigBounds) -> None:
        self.bounds = bounds
        self._configs: dict[str, dict[str, Any]] = {}

    def get(self, group_id: str) -> Mapping[str, Any]:
        return self._configs.get(group_id, {})

    @property
    def all(self) -> dict[str, dict[str, Any]]:
        """The live mapping (group id -> name -> value); readers may keep a reference."""
        return self._configs

    def validate(self, group_id: str, changes: list[ConfigChange]) -> dict[str, Any]:
        """The group's configs after `changes`, or GroupConfigError; stores nothing."""
        if not group_id:
            raise GroupConfigError("group id must not be empty")
        result = dict(self.get(group_id))
        for change in changes:
            validator = VALIDATORS.get(change.name)
            if validator is None:
                raise GroupConfigError(f"unknown group config name: {change.name}")
            if change.operation == SET:
                if change.value is None:
                    raise GroupConfigError(f"{change.name}: a value is required")
                try:
                    result[change.name] = validator(change.value, self.bounds)
                except GroupConfigError as exc:
                    raise GroupConfigError(f"invalid value for {change.name}: {exc}") from None
            elif change.operation == DELETE:
                result.pop(change.name, None)
            elif change.operation in (APPEND, SUBTRACT):
                raise GroupConfigError(f"{change.name} is not a list config; APPEND/SUBTRACT do not apply")
            else:
                raise GroupConfigError(f"unknown config operation {change.operation}")
        return result

    def apply(self, group_id: str, changes: list[ConfigChange]) -> None:
        self._configs[group_id] = self.validate(group_id, changes)
        if not self._configs[group_id]:
            del self._configs[group_id]
