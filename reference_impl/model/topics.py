"""Topics, partitions, placement and leadership of the reference cluster (pure model).

* Topic ids are UUIDs derived deterministically from the cluster id, the topic name
  and a creation sequence number (Kafka draws them at random; determinism matters
  more here, and ids still change when a topic is deleted and re-created).
* Replicas are placed round-robin over the sorted node ids, starting one node further
  for every topic created, so leaders spread over the nodes and a partition's leader
  often differs from a group's coordinator.
* Single-copy data model: all replicas of a partition share one `PartitionLog`.
  Leadership still follows node liveness (`sync_liveness`): when the leader's node
  stops, the next live in-sync replica leads (epoch + 1); a partition whose replicas
  are all down has no leader until one returns.
* Per-node fetch session caches (KIP-227) live here too, because they are data-path
  state with timers (`tick`).

Validation follows Kafka's controller: INVALID_TOPIC_EXCEPTION for bad or colliding
names, TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR,
INVALID_REPLICA_ASSIGNMENT, INVALID_REQUEST, INVALID_CONFIG.
"""

from __future__ import annotations

import base64
import hashlib
import re
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from kio.schema.errors import ErrorCode

from reference_impl.model.acls import Operation, operations_bitfield
from reference_impl.model.broker_config import BrokerConfig
from reference_impl.model.clock import Clock
from reference_impl.model.partition_log import INT64_MAX, LogConfig, PartitionLog, ProducerStateTracker
from reference_impl.model.share_state_records import DEFAULT_STATE_TOPIC_PARTITIONS
from reference_impl.protocol.records import TimestampType

MAX_NAME_LENGTH = 249
_LEGAL_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")
CONSUMER_OFFSETS, TRANSACTION_STATE, SHARE_GROUP_STATE = "__consumer_offsets", "__transaction_state", "__share_group_state"
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS, TRANSACTION_STATE, SHARE_GROUP_STATE})
# offsets.topic.replication.factor, transaction.state.log.replication.factor and
# share.coordinator.state.topic.replication.factor default to 3; capped at the live brokers
# here, as test clusters set them (the kafka-native provider: min(3, nodes)).
INTERNAL_REPLICATION_FACTOR = 3
METADATA_TOPIC_ID = uuid.UUID(int=1)  # reserved by Kafka for its metadata log
DEFAULT_REPLICATION_FACTOR = 1  # default.replication.factor

# Kafka topic configs (name -> default) this model accepts. The ones marked "honoured"
# change behaviour; the rest are stored and reported only.
TOPIC_CONFIG_DEFAULTS: dict[str, str] = {
    "cleanup.policy": "delete",  # honoured: "compact" requires keys
    "compression.type": "producer",  # honoured
    "compression.gzip.level": "-1",
    "compression.lz4.level": "9",
    "compression.zstd.level": "3",
    "delete.retention.ms": "86400000",
    "file.delete.delay.ms": "60000",
    "flush.messages": str(INT64_MAX),
    "flush.ms": str(INT64_MAX),
    "follower.replication.throttled.replicas": "",
    "index.interval.bytes": "4096",
    "leader.replication.throttled.replicas": "",
    "local.retention.bytes": "-2",
    "local.retention.ms": "-2",
    "max.compaction.lag.ms": str(INT64_MAX),
    "max.message.bytes": "1048588",  # honoured
    "message.timestamp.after.max.ms": "3600000",  # honoured (Kafka 4.x default)
    "message.timestamp.before.max.ms": str(INT64_MAX),  # honoured
    "message.timestamp.type": "CreateTime",  # honoured
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "min.insync.replicas": "1",  # honoured (acks=all)
    "preallocate": "false",
    "remote.storage.enable": "false",
    "retention.bytes": "-1",
    "retention.ms": "604800000",
    "segment.bytes": "1073741824",
    "segment.index.bytes": "10485760",
    "segment.jitter.ms": "0",
    "segment.ms": "604800000",
    "unclean.leader.election.enable": "false",
}

_INT_CONFIGS = {
    "max.message.bytes": 0,
    "min.insync.replicas": 1,
    "index.interval.bytes": 0,
    "segment.bytes": 14,
    "segment.index.bytes": 4,
    "compression.gzip.level": -1,
    "compression.lz4.level": 1,
    "compression.zstd.level": -131072,
}
_LONG_CONFIGS = {
    "message.timestamp.after.max.ms": 0,
    "message.timestamp.before.max.ms": 0,
    "delete.retention.ms": 0,
    "file.delete.delay.ms": 0,
    "flush.messages": 1,
    "flush.ms": 0,
    "local.retention.bytes": -2,
    "local.retention.ms": -2,
    "max.compaction.lag.ms": 1,
    "min.compaction.lag.ms": 0,
    "retention.bytes": -1,
    "retention.ms": -1,
    "segment.jitter.ms": 0,
    "segment.ms": 1,
}
_BOOL_CONFIGS = {"preallocate", "remote.storage.enable", "unclean.leader.election.enable"}
_COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

# Bit fields of authorized operations when no authorizer is configured (all supported ops).
TOPIC_AUTHORIZED_OPERATIONS = operations_bitfield((
    Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DELETE, Operation.ALTER, Operation.DESCRIBE,
    Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS))
CLUSTER_AUTHORIZED_OPERATIONS = operations_bitfield((
    Operation.CREATE, Operation.ALTER, Operation.DESCRIBE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
    Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE))


class TopicError(Exception):
    """A topic operation answered with `error_code` (and `message`)."""

    def __init__(self, error_code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or error_code.name)
        self.error_code = error_code
        self.message = message


# --- names and configs ------------------------------------------------------------------


def topic_name_error(name: str | None) -> str | None:
    """Why `name` is not a legal topic name, or None when it is."""
    if name is None or name == "":
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name cannot be {name!r}"
    if len(name) > MAX_NAME_LENGTH:
        return f"topic name is longer than {MAX_NAME_LENGTH} characters"
    if not _LEGAL_NAME.match(name):
        return f"topic name {name!r} has characters other than ASCII alphanumerics, '.', '_' and '-'"
    return None


def is_internal(name: str | None) -> bool:
    return name in INTERNAL_TOPICS


def internal_topic_spec(name: str, config: BrokerConfig, live_brokers: int) -> CreatableTopicSpec:
    """A coordinator's topic as Kafka creates it (AutoTopicCreationManager.creatableTopic): the
    coordinator's partition-count setting and the configs it enforces (offsets.topic.*,
    TransactionLog's and the share coordinator's topic configs; segments of 100 MiB)."""
    partitions = {
        CONSUMER_OFFSETS: config.transaction.offsets_topic_num_partitions,
        TRANSACTION_STATE: config.transaction.transaction_state_log_num_partitions,
        SHARE_GROUP_STATE: DEFAULT_STATE_TOPIC_PARTITIONS,
    }[name]
    configs = {"cleanup.policy": "compact", "segment.bytes": "104857600"}
    if name == CONSUMER_OFFSETS:
        configs["compression.type"] = "producer"
    elif name == TRANSACTION_STATE:
        configs["unclean.leader.election.enable"] = "false"
    else:  # share-group state is pruned by the share coordinator, never compacted or expired
        configs.update({"cleanup.policy": "delete", "retention.ms": "-1"})
    rf = max(1, min(INTERNAL_REPLICATION_FACTOR, live_brokers))
    return CreatableTopicSpec(name, num_partitions=partitions, replication_factor=rf, configs=configs)


def unify_collision_chars(name: str) -> str:
    return name.replace(".", "_")


def validate_topic_config(name: str, value: str | None) -> str | None:
    """Why (name, value) is not an acceptable topic config, or None."""
    if name not in TOPIC_CONFIG_DEFAULTS:
        return f"unknown topic config name: {name}"
    if value is None:
        return f"null value not supported for topic config {name}"
    try:
        if name in _INT_CONFIGS or name in _LONG_CONFIGS:
            lo = _INT_CONFIGS.get(name, _LONG_CONFIGS.get(name))
            n = int(value.strip())
            hi = (1 << 31) - 1 if name in _INT_CONFIGS else INT64_MAX
            if n < lo or n > hi:
                return f"invalid value {value} for {name}: must be in [{lo}, {hi}]"
        elif name in _BOOL_CONFIGS:
            if value.strip().lower() not in ("true", "false"):
                return f"invalid value {value} for {name}: expected true or false"
        elif name == "cleanup.policy":
            parts = [p.strip() for p in value.split(",") if p.strip()]
            if not parts or any(p not in ("delete", "compact") for p in parts):
                return f"invalid value {value} for cleanup.policy"
        elif name == "compression.type":
            if value.strip().lower() not in _COMPRESSION_TYPES:
                return f"invalid value {value} for compression.type"
        elif name == "message.timestamp.type":
            if value.strip() not in ("CreateTime", "LogAppendTime"):
                return f"invalid value {value} for message.timestamp.type"
        elif name == "min.cleanable.dirty.ratio":
            f = float(value)
            if not 0.0 <= f <= 1.0:
                return f"invalid value {value} for {name}"
    except ValueError:
        return f"invalid value {value} for configuration {name}"
    return None


def log_config_from(configs: Mapping[str, str]) -> LogConfig:
    def get(name: str) -> str:
        return configs.get(name, TOPIC_CONFIG_DEFAULTS[name])

    return LogConfig(
        max_message_bytes=int(get("max.message.bytes")),
        timestamp_type=(
            TimestampType.LOG_APPEND_TIME if get("message.timestamp.type") == "LogAppendTime" else TimestampType.CREATE_TIME
        ),
        timestamp_before_max_ms=int(get("message.timestamp.before.max.ms")),
        timestamp_after_max_ms=int(get("message.timestamp.after.max.ms")),
        compression=get("compression.type").strip().lower(),
        compacted="compact" in get("cleanup.policy"),
    )


# --- state ------------------------------------------------------------------------------


@dataclass(slots=True)
class PartitionState:
    topic: "Topic"
    index: int
    replicas: tuple[int, ...]
    leader: int  # -1 when no replica is alive
    leader_epoch: int
    isr: tuple[int, ...]
    log: PartitionLog

    @property
    def offline_replicas(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.isr)


@dataclass(slots=True)
class Topic:
    name: str
    topic_id: uuid.UUID
    configs: dict[str, str]  # explicitly set (non-default) topic configs
    created_ms: int
    partitions: list[PartitionState] = field(default_factory=list)

    @property
    def is_internal(self) -> bool:
        return is_internal(self.name)

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0

    def partition(self, index: int) -> PartitionState | None:
        if 0 <= index < len(self.partitions):
            return self.partitions[index]
        return None

    def effective_configs(self) -> dict[str, tuple[str, bool]]:
        """name -> (value, is_default), sorted by name."""
        return {
            name: (self.configs.get(name, default), name not in self.configs)
            for name, default in sorted(TOPIC_CONFIG_DEFAULTS.items())
        }

    @property
    def min_insync_replicas(self) -> int:
        return int(self.configs.get("min.insync.replicas", TOPIC_CONFIG_DEFAULTS["min.insync.replicas"]))


@dataclass(frozen=True, slots=True)
class CreatableTopicSpec:
    """One topic of a CreateTopics request, in model terms."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    # partition index -> broker ids (manual assignment); empty for automatic placement
    assignments: Mapping[int, Sequence[int]] | Sequence[tuple[int, Sequence[int]]] = ()
    configs: Mapping[str, str | None] | Sequence[tuple[str, str | None]] = ()


@dataclass(frozen=True, slots=True)
class CreateTopicResult:
    name: str
    error_code: ErrorCode
    error_message: str | None = None
    topic_id: uuid.UUID | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    configs: tuple[tuple[str, str, bool], ...] = ()  # (name, value, is_default)


# --- fetch sessions (KIP-227) -----------------------------------------------------------

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1


def next_epoch(epoch: int) -> int:
    if epoch < 0:
        return FINAL_EPOCH
    if epoch == (1 << 31) - 1:
        return 1
    return epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """What a fetch session remembers about one partition."""

    topic: str | None  # None while a topic id is unknown
    topic_id: uuid.UUID | None
    partition: int
    max_bytes: int
    fetch_offset: int
    log_start_offset: int  # the fetcher's, as sent
    current_leader_epoch: int
    last_fetched_epoch: int
    high_watermark: int = -1  # last value sent to the client
    local_log_start_offset: int = -1  # last value sent to the client


def session_key(topic: str | None, topic_id: uuid.UUID | None, partition: int) -> tuple[Any, int]:
    return (topic_id if topic_id is not None else topic, partition)


@dataclass(slots=True)
class FetchSession:
    session_id: int
    uses_topic_ids: bool
    partitions: "OrderedDict[tuple[Any, int], CachedPartition]"
    epoch: int
    created_ms: int
    last_used_ms: int


class FetchSessionCache:
    """One node's incremental fetch sessions (max.incremental.fetch.session.cache.slots)."""

    def __init__(self, node_id: int, max_entries: int = 1000, eviction_ms: int = 120_000) -> None:
        self.node_id = node_id
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self._sessions: dict[int, FetchSession] = {}
        self._next_id = 1

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        return self._sessions.pop(session_id, None)

    def create(
        self, now_ms: int, uses_topic_ids: bool, partitions: "OrderedDict[tuple[Any, int], CachedPartition]"
    ) -> int:
        """A new session (epoch 1) or INVALID_SESSION_ID when the cache is full of live ones."""
        if len(self._sessions) >= self.max_entries and not self._evict_one(now_ms):
            return INVALID_SESSION_ID
        sid = self._new_id()
        self._sessions[sid] = FetchSession(sid, uses_topic_ids, partitions, next_epoch(INITIAL_EPOCH), now_ms, now_ms)
        return sid

    def touch(self, session: FetchSession, now_ms: int) -> None:
        session.last_used_ms = now_ms

    def _new_id(self) -> int:
        while True:
            sid = self._next_id
            self._next_id = self._next_id + 1 if self._next_id < (1 << 31) - 1 else 1
            if sid != INVALID_SESSION_ID and sid not in self._sessions:
                return sid

    def _evict_one(self, now_ms: int) -> bool:
        stale = [s for s in self._sessions.values() if now_ms - s.last_used_ms > self.eviction_ms]
        if not stale:
            return False
        victim = min(stale, key=lambda s: (s.last_used_ms, s.session_id))
        del self._sessions[victim.session_id]
        return True

    def tick(self, now_ms: int) -> None:
        # Kafka evicts stale sessions only when room is needed; nothing to do on timers.
        return None


# --- registry ---------------------------------------------------------------------------


class TopicRegistry:
    def __init__(self, node_ids: list[int], clock: Clock, config: BrokerConfig) -> None:
        if not node_ids:
            raise ValueError("a cluster needs at least one node")
        self.node_ids = sorted(node_ids)
        self.clock = clock
        self.config = config
        self._by_name: dict[str, Topic] = {}
        self._by_id: dict[uuid.UUID, Topic] = {}
        self._created = 0  # topics ever created: placement offset and id salt
        self._alive: frozenset[int] = frozenset(self.node_ids)
        self.fetch_sessions: dict[int, FetchSessionCache] = {n: FetchSessionCache(n) for n in self.node_ids}
        # Seam for the transactions work: makes the producer-state tracker of a new log.
        self.producer_state_factory: Any = None
        self.version = 0  # bumped on every topic/leadership change

    # -- time --------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        for cache in self.fetch_sessions.values():
            cache.tick(now_ms)
        for topic in self._by_name.values():
            for partition in topic.partitions:
                partition.log.tick(now_ms)  # producer id expiration

    # -- lookup ------------------------------------------------------------------------

    def get(self, name: str | None) -> Topic | None:
        return self._by_name.get(name) if name is not None else None

    def by_id(self, topic_id: uuid.UUID | None) -> Topic | None:
        return self._by_id.get(topic_id) if topic_id is not None else None

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def names(self) -> list[str]:
        return sorted(self._by_name)

    def topics(self) -> list[Topic]:
        return [self._by_name[n] for n in sorted(self._by_name)]

    def name_for_id(self, topic_id: uuid.UUID | None) -> str | None:
        t = self.by_id(topic_id)
        return t.name if t else None

    def partition(self, topic: str, partition: int) -> PartitionState | None:
        t = self._by_name.get(topic)
        return t.partition(partition) if t else None

    def log(self, topic: str, partition: int) -> PartitionLog | None:
        p = self.partition(topic, partition)
        return p.log if p else None

    def leader_for(self, topic: str, partition: int) -> int:
        """Leader node id of topic-partition (-1 when offline); TopicError
        UNKNOWN_TOPIC_OR_PARTITION when there is no such partition."""
        p = self.partition(topic, partition)
        if p is None:
            raise TopicError(ErrorCode.unknown_topic_or_partition, f"{topic}-{partition} does not exist")
        return p.leader

    # -- creation ----------------------------------------------------------------------

    def create_topics(
        self, specs: Sequence[CreatableTopicSpec], *, validate_only: bool = False
    ) -> list[CreateTopicResult]:
        """Create several topics as one CreateTopics request does (duplicates in the
        request are INVALID_REQUEST for every copy)."""
        counts: dict[str, int] = {}
        for s in specs:
            counts[s.name] = counts.get(s.name, 0) + 1
        results: list[CreateTopicResult] = []
        for s in specs:
            if counts[s.name] > 1:
                results.append(CreateTopicResult(s.name, ErrorCode.invalid_request, "Duplicate topic name."))
                continue
            try:
                results.append(self.create(s, validate_only=validate_only))
            except TopicError as exc:
                results.append(CreateTopicResult(s.name, exc.error_code, exc.message))
        return results

    def create(self, spec: CreatableTopicSpec | str, *, validate_only: bool = False, **kwargs: Any) -> CreateTopicResult:
        """Create one topic; raises TopicError with Kafka's error on refusal."""
        if isinstance(spec, str):
            spec = CreatableTopicSpec(spec, **kwargs)
        name = spec.name
        problem = topic_name_error(name)
        if problem:
            raise TopicError(ErrorCode.invalid_topic_exception, problem)
        if name in self._by_name:
            raise TopicError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        if "." in name or "_" in name:
            unified = unify_collision_chars(name)
            for other in self._by_name:
                if unify_collision_chars(other) == unified:
                    raise TopicError(
                        ErrorCode.invalid_topic_exception, f"Topic '{name}' collides with existing topic: {other}"
                    )
        configs = dict(spec.configs.items()) if isinstance(spec.configs, Mapping) else dict(spec.configs)
        nulls = [k for k, v in configs.items() if v is None]
        if nulls:
            raise TopicError(ErrorCode.invalid_config, f"null value not supported for topic configs: {','.join(nulls)}")
        for k, v in configs.items():
            problem = validate_topic_config(k, v)
            if problem:
                raise TopicError(ErrorCode.invalid_config, problem)
        assignments = self._assignments(spec)
        if not validate_only:
            topic = self._add_topic(name, assignments, {k: str(v) for k, v in configs.items()})
            topic_id: uuid.UUID | None = topic.topic_id
        else:
            topic_id = None
        eff = Topic(name, uuid.UUID(int=0), {k: str(v) for k, v in configs.items()}, 0).effective_configs()
        return CreateTopicResult(
            name=name,
            error_code=ErrorCode.none,
            topic_id=topic_id,
            num_partitions=len(assignments),
            replication_factor=len(assignments[0]) if assignments else -1,
            configs=tuple((k, v, d) for k, (v, d) in eff.items()),
        )

    def _assignments(self, spec: CreatableTopicSpec) -> list[tuple[int, ...]]:
        manual = dict(spec.assignments.items()) if isinstance(spec.assignments, Mapping) else None
        if manual is None:
            manual_list = list(spec.assignments)
            manual = {}
            for idx, brokers in manual_list:
                if idx in manual:
                    raise TopicError(
                        ErrorCode.invalid_replica_assignment, f"more than one assignment for partition {idx}"
                    )
                manual[idx] = brokers
        alive = [n for n in self.node_ids if n in self._alive]
        if manual:
            if spec.replication_factor != -1:
                raise TopicError(
                    ErrorCode.invalid_request, "a manual assignment requires replication factor -1"
                )
            if spec.num_partitions != -1:
                raise TopicError(ErrorCode.invalid_request, "a manual assignment requires num partitions -1")
            rf: int | None = None
            out: dict[int, tuple[int, ...]] = {}
            for idx, brokers in manual.items():
                brokers = tuple(int(b) for b in brokers)
                if not brokers:
                    raise TopicError(ErrorCode.invalid_replica_assignment, f"partition {idx} has no replicas")
                if len(set(brokers)) != len(brokers):
                    raise TopicError(
                        ErrorCode.invalid_replica_assignment, f"partition {idx} names a broker more than once"
                    )
                unknown = [b for b in brokers if b not in self.node_ids]
                if unknown:
                    raise TopicError(
                        ErrorCode.invalid_replica_assignment, f"partition {idx} names unknown broker(s) {unknown}"
                    )
                if rf is not None and len(brokers) != rf:
                    raise TopicError(
                        ErrorCode.invalid_replica_assignment,
                        "all partitions must have the same number of replicas",
                    )
                rf = len(brokers)
                if not any(b in self._alive for b in brokers):
                    raise TopicError(
                        ErrorCode.invalid_replica_assignment, f"every broker of partition {idx} is fenced"
                    )
                out[idx] = brokers
            for i in range(len(out)):
                if i not in out:
                    raise TopicError(
                        ErrorCode.invalid_replica_assignment, "partitions must be numbered 0, 1, 2, ... without gaps"
                    )
            return [out[i] for i in range(len(out))]
        if spec.replication_factor < -1 or spec.replication_factor == 0:
            raise TopicError(
                ErrorCode.invalid_replication_factor, "replication factor must be larger than 0, or -1 for the default"
            )
        if spec.num_partitions < -1 or spec.num_partitions == 0:
            raise TopicError(ErrorCode.invalid_partitions, "number of partitions must be larger than 0, or -1 for the default")
        n = self.config.num_partitions if spec.num_partitions == -1 else spec.num_partitions
        rf = DEFAULT_REPLICATION_FACTOR if spec.replication_factor == -1 else spec.replication_factor
        if rf > len(alive):
            raise TopicError(
                ErrorCode.invalid_replication_factor,
                f"cannot replicate each partition {rf} time(s): only {len(alive)} broker(s) are available",
            )
        start = self._created % len(alive)
        return [tuple(alive[(start + p + r) % len(alive)] for r in range(rf)) for p in range(n)]

    def _add_topic(self, name: str, assignments: list[tuple[int, ...]], configs: dict[str, str]) -> Topic:
        self._created += 1
        topic = Topic(name, self._new_topic_id(name), configs, self.clock.now_ms())
        log_config = log_config_from(configs)
        log_config.seeded_bugs = self.config.seeded_bugs  # reference:bug=NAME (seeded_bugs.py)
        for index, replicas in enumerate(assignments):
            isr = tuple(r for r in replicas if r in self._alive)
            leader = isr[0] if isr else -1
            producer_state: ProducerStateTracker | None = (
                self.producer_state_factory(name, index) if self.producer_state_factory else None
            )
            log = PartitionLog(name, index, log_config, leader_epoch=0, producer_state=producer_state)
            topic.partitions.append(PartitionState(topic, index, replicas, leader, 0, isr, log))
        self._by_name[name] = topic
        self._by_id[topic.topic_id] = topic
        self.version += 1
        return topic

    def _new_topic_id(self, name: str) -> uuid.UUID:
        salt = 0
        while True:
            digest = hashlib.sha256(f"{self.config.cluster_id}/{name}/{self._created}/{salt}".encode()).digest()
            candidate = uuid.UUID(bytes=digest[:16], version=4)
            encoded = base64.urlsafe_b64encode(candidate.bytes).decode()
            if (
                candidate.int != 0
                and candidate != METADATA_TOPIC_ID
                and not encoded.startswith("-")
                and candidate not in self._by_id
            ):
                return candidate
            salt += 1

    def auto_create(self, name: str) -> ErrorCode:
        """Metadata-triggered creation with broker defaults. Returns the error the
        Metadata response carries for this topic: LEADER_NOT_AVAILABLE when the topic
        was just created (as Kafka answers), or the creation error."""
        if topic_name_error(name):
            return ErrorCode.invalid_topic_exception
        if name in self._by_name:
            return ErrorCode.none
        if is_internal(name):
            return self.ensure_internal(name)
        try:
            self.create(CreatableTopicSpec(name))
        except TopicError as exc:
            if exc.error_code == ErrorCode.topic_already_exists:
                return ErrorCode.none
            if exc.error_code == ErrorCode.invalid_replication_factor:
                return ErrorCode.leader_not_available
            return exc.error_code
        return ErrorCode.leader_not_available

    def ensure_internal(self, name: str) -> ErrorCode:
        """Create a coordinator's topic unless it exists, as Kafka does on the first
        FindCoordinator for its key type or a Metadata request naming it (KafkaApis via
        AutoTopicCreationManager): NONE when it existed, LEADER_NOT_AVAILABLE when created
        now, else the creation error. The reference keeps each coordinator's state in its
        model (transaction_log.py, offset_store.py, share_coordinator.py): these topics carry
        the placement clients see and the transaction markers, not the coordinators' records."""
        if name in self._by_name:
            return ErrorCode.none
        try:
            self.create(internal_topic_spec(name, self.config, len(self._alive)))
        except TopicError as exc:
            return exc.error_code
        return ErrorCode.leader_not_available

    # -- deletion ----------------------------------------------------------------------

    def delete(self, name: str | None = None, topic_id: uuid.UUID | None = None) -> Topic:
        """Delete by name or id; TopicError UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID."""
        if name is not None and topic_id is not None:
            raise TopicError(ErrorCode.invalid_request, "give a topic name or a topic id, not both")
        if name is not None:
            topic = self._by_name.get(name)
            if topic is None:
                raise TopicError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
        elif topic_id is not None:
            topic = self._by_id.get(topic_id)
            if topic is None:
                raise TopicError(ErrorCode.unknown_topic_id, f"no topic has id {topic_id}")
        else:
            raise TopicError(ErrorCode.invalid_request, "neither topic name nor id given")
        del self._by_name[topic.name]
        del self._by_id[topic.topic_id]
        self.version += 1
        return topic

    # -- leadership ----------------------------------------------------------------------

    @property
    def alive(self) -> frozenset[int]:
        return self._alive

    def sync_liveness(self, alive: Iterable[int]) -> bool:
        """Bring leadership in line with the live node set; True when anything changed.

        Leader gone: the first live replica (replica order) becomes leader, epoch + 1;
        no live replica: leader -1, epoch + 1. A returning replica rejoins the ISR and
        leads a leaderless partition (epoch + 1); a live leader is never moved.
        """
        alive_set = frozenset(a for a in alive if a in self.node_ids)
        if alive_set == self._alive:
            return False
        self._alive = alive_set
        for topic in self._by_name.values():
            for p in topic.partitions:
                p.isr = tuple(r for r in p.replicas if r in alive_set)
                if p.leader == -1 or p.leader not in alive_set:
                    new_leader = p.isr[0] if p.isr else -1
                    if new_leader != p.leader:
                        p.leader = new_leader
                        p.leader_epoch += 1
                        p.log.leader_epoch = p.leader_epoch
        self.version += 1
        return True

    def live_brokers(self) -> list[int]:
        return [n for n in self.node_ids if n in self._alive]


__all__ = [
    "CLUSTER_AUTHORIZED_OPERATIONS",
    "CachedPartition",
    "CreatableTopicSpec",
    "CreateTopicResult",
    "FINAL_EPOCH",
    "FetchSession",
    "FetchSessionCache",
    "INITIAL_EPOCH",
    "CONSUMER_OFFSETS",
    "INTERNAL_TOPICS",
    "INVALID_SESSION_ID",
    "PartitionState",
    "TOPIC_AUTHORIZED_OPERATIONS",
    "TOPIC_CONFIG_DEFAULTS",
    "Topic",
    "TopicError",
    "SHARE_GROUP_STATE",
    "TRANSACTION_STATE",
    "TopicRegistry",
    "internal_topic_spec",
    "is_internal",
    "log_config_from",
    "next_epoch",
    "session_key",
    "topic_name_error",
    "validate_topic_config",
]
