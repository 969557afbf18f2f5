"""Configuration of a share-partition leader (KIP-932), with Kafka's real config names.

Broker configs (`group.share.*`) give the defaults; group configs (`share.*`, set with
IncrementalAlterConfigs on a GROUP resource) override some of them per group. Where the
KIP-932 text names a config differently from the code, the KIP's name is in the comment.

No I/O; plain data plus validation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum

from reference_impl.model.partition_log import IsolationLevel
from reference_impl.model.seeded_bugs import NO_BUGS, SeededBugs

# group.share.delivery.count.limit: default 5, valid [2, 10]. The KIP's state diagram calls it
# group.share.delivery.attempt.limit (a name that never existed in the code).
DEFAULT_DELIVERY_COUNT_LIMIT = 5
DELIVERY_COUNT_LIMIT_RANGE = (2, 10)
# group.share.record.lock.duration.ms: default 30000; [1000, 3600000] and within min/max below.
DEFAULT_RECORD_LOCK_DURATION_MS = 30_000
DEFAULT_MIN_RECORD_LOCK_DURATION_MS = 15_000  # group.share.min.record.lock.duration.ms
DEFAULT_MAX_RECORD_LOCK_DURATION_MS = 60_000  # group.share.max.record.lock.duration.ms
# group.share.partition.max.record.locks: 2000 from Kafka 4.1 (200 in 4.0 and in the KIP, whose
# text calls it group.share.record.lock.partition.limit); valid [100, 10000].
DEFAULT_PARTITION_MAX_RECORD_LOCKS = 2000
PARTITION_MAX_RECORD_LOCKS_RANGE = (100, 10_000)


class ConfigError(ValueError):
    """An invalid value (a broker answers INVALID_CONFIG)."""


class ResetStrategy(str, Enum):
    LATEST = "latest"
    EARLIEST = "earliest"
    BY_DURATION = "by_duration"


_DURATION = re.compile(
    r"^([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?$",
    re.IGNORECASE,
)


def parse_iso_duration_ms(text: str) -> int:
    """Milliseconds of an ISO-8601 duration as java.time.Duration.parse accepts it
    (PnDTnHnMn.nS); raises ConfigError otherwise."""
    m = _DURATION.match(text.strip())
    if not m or text.strip().upper().endswith("T") or text.strip().upper() in ("P", "-P", "+P"):
        raise ConfigError(f"invalid ISO-8601 duration {text!r}")
    sign = -1 if m.group(1) == "-" else 1
    days, hours, minutes, seconds = (int(g) if g else 0 for g in m.group(2, 3, 4, 5))
    frac = m.group(6) or ""
    millis = int((frac + "000")[:3]) if frac else 0
    if m.group(5) and m.group(5).startswith("-"):
        millis = -millis
    total = ((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000 + millis
    return sign * total


@dataclass(frozen=True, slots=True)
class AutoOffsetReset:
    """share.auto.offset.reset: latest (default), earliest or by_duration:<ISO-8601 duration>.
    (The KIP text calls it group.share.auto.offset.reset and knows only latest/earliest.)"""

    strategy: ResetStrategy = ResetStrategy.LATEST
    duration_ms: int = 0

    @classmethod
    def parse(cls, value: "str | AutoOffsetReset | None") -> "AutoOffsetReset":
        if value is None:
            return cls()
        if isinstance(value, AutoOffsetReset):
            return value
        text = value.strip().lower()
        if text == "latest":
            return cls(ResetStrategy.LATEST)
        if text == "earliest":
            return cls(ResetStrategy.EARLIEST)
        if text.startswith("by_duration:"):
            ms = parse_iso_duration_ms(value.strip()[len("by_duration:"):])
            if ms < 0:
                raise ConfigError(f"by_duration must not be negative: {value!r}")
            return cls(ResetStrategy.BY_DURATION, ms)
        raise ConfigError(f"invalid share.auto.offset.reset {value!r}")

    def __str__(self) -> str:
        if self.strategy is ResetStrategy.BY_DURATION:
            return f"by_duration:PT{self.duration_ms / 1000:g}S"
        return self.strategy.value


@dataclass(slots=True)
class SharePartitionConfig:
    """Everything one share-partition leader needs (broker defaults + group overrides)."""

    # broker: group.share.delivery.count.limit (group override share.delivery.count.limit, 4.3+)
    delivery_count_limit: int = DEFAULT_DELIVERY_COUNT_LIMIT
    # broker: group.share.record.lock.duration.ms
    record_lock_duration_ms: int = DEFAULT_RECORD_LOCK_DURATION_MS
    min_record_lock_duration_ms: int = DEFAULT_MIN_RECORD_LOCK_DURATION_MS
    max_record_lock_duration_ms: int = DEFAULT_MAX_RECORD_LOCK_DURATION_MS
    # group: share.record.lock.duration.ms (None = use the broker value)
    group_record_lock_duration_ms: int | None = None
    # broker: group.share.partition.max.record.locks (group override share.partition.max.record.locks, 4.3+)
    partition_max_record_locks: int = DEFAULT_PARTITION_MAX_RECORD_LOCKS
    # group: share.auto.offset.reset
    auto_offset_reset: AutoOffsetReset = field(default_factory=AutoOffsetReset)
    # group: share.isolation.level (KIP text: group.share.isolation.level)
    isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
    # RENEW (4) acknowledgements, KIP-1222: Kafka 4.2+ (ShareFetch/ShareAcknowledge v2);
    # 4.3 adds the group config share.renew.acknowledge.enable. Off = a 4.1 broker.
    renew_acknowledge_enabled: bool = False
    # Kafka (not the KIP): records released because the member's share session closed get
    # their delivery count decremented (they were not actually delivered) and go back to
    # Available even at the limit. False = the KIP reading (count kept, limit applies).
    release_on_close_decrements_delivery_count: bool = True
    # Deliberate bugs of the share-partition leader (reference:bug=NAME; seeded_bugs.py).
    seeded_bugs: SeededBugs = NO_BUGS

    def __post_init__(self) -> None:
        self.auto_offset_reset = AutoOffsetReset.parse(self.auto_offset_reset)  # type: ignore[arg-type]
        self.isolation_level = IsolationLevel(int(self.isolation_level))

    @property
    def lock_duration_ms(self) -> int:
        """The effective acquisition lock duration (group override first)."""
        if self.group_record_lock_duration_ms is not None:
            return self.group_record_lock_duration_ms
        return self.record_lock_duration_ms

    def validate(self) -> "SharePartitionConfig":
        lo, hi = DELIVERY_COUNT_LIMIT_RANGE
        if not lo <= self.delivery_count_limit <= hi:
            raise ConfigError(f"group.share.delivery.count.limit must be in [{lo}, {hi}]")
        lo, hi = PARTITION_MAX_RECORD_LOCKS_RANGE
        if not lo <= self.partition_max_record_locks <= hi:
            raise ConfigError(f"group.share.partition.max.record.locks must be in [{lo}, {hi}]")
        if not (
            1000 <= self.min_record_lock_duration_ms <= 30_000
            and 30_000 <= self.max_record_lock_duration_ms <= 3_600_000
        ):
            raise ConfigError("group.share.min/max.record.lock.duration.ms out of range")
        if not (
            self.min_record_lock_duration_ms <= self.record_lock_duration_ms <= self.max_record_lock_duration_ms
        ):
            raise ConfigError("group.share.record.lock.duration.ms must lie between the min and max")
        g = self.group_record_lock_duration_ms
        if g is not None and not (
            max(1000, self.min_record_lock_duration_ms) <= g <= self.max_record_lock_duration_ms
        ):
            raise ConfigError("share.record.lock.duration.ms must lie between the broker min and max")
        return self


__all__ = [
    "AutoOffsetReset",
    "ConfigError",
    "DEFAULT_DELIVERY_COUNT_LIMIT",
    "DEFAULT_PARTITION_MAX_RECORD_LOCKS",
    "DEFAULT_RECORD_LOCK_DURATION_MS",
    "ResetStrategy",
    "SharePartitionConfig",
    "parse_iso_duration_ms",
]
