"""The share coordinator and share-group state persister (KIP-932), as a pure state machine.

The share coordinator owns the durable state of share-partitions (SPSO, non-Acquired
in-flight state batches with their delivery counts, state epoch, leader epoch) and keeps
it as ShareSnapshot / ShareUpdate records on `__share_group_state` (see
`share_state_records`). Every change is a record appended to the log and applied through
`replay(record)`; a coordinator rebuilt from the log (`ShareCoordinator.rebuild`) has the
same state (restart / fail-over recovery).

Behaviour follows Kafka 4.x's ShareCoordinatorShard / ShareCoordinatorService; where the
KIP says otherwise, Kafka wins and the difference is listed here:

* Initialize writes a ShareSnapshot with the request's state epoch and start offset, no
  batches, leader epoch 0 and snapshot epoch 0 (or current + 1 when state exists); a state
  epoch lower than the stored one is FENCED_STATE_EPOCH (-1 skips the check). The KIP
  says the leader epoch restarts at -1; Kafka stores 0 and its fencing map keeps the
  highest leader epoch seen even across a new state epoch.
* Write on an uninitialised share-partition is INVALID_REQUEST. Leader epoch fencing:
  stored > requested (and requested != -1) -> FENCED_LEADER_EPOCH; state epoch fencing:
  stored > requested (requested != -1) -> FENCED_STATE_EPOCH. A *newer* state epoch in a
  write is accepted but not recorded (the KIP says "another" epoch is refused).
  A write never raises the stored leader epoch: the records it produces carry the
  current leader epoch. Only ReadShareGroupState with a new leader epoch records one
  (it appends a ShareUpdate/ShareSnapshot with no batches).
* Snapshot cadence: a write produces a ShareSnapshot (snapshot epoch + 1, full merged
  state) when the partition's update counter has reached
  `share.coordinator.snapshot.update.records.per.snapshot`, otherwise a ShareUpdate. The
  counter is absent after the first snapshot, the first update sets it to 0, each later
  one adds 1, and a snapshot resets it to 0 only if it had reached the limit -- so with
  limit N the first cycle holds N + 1 updates and later cycles N. The KIP's "prefer a
  snapshot when it would be small" is not done by Kafka.
* Read of an uninitialised share-partition is INVALID_REQUEST (the KIP says
  UNKNOWN_TOPIC_OR_PARTITION). Read fences a leader epoch lower than the stored one
  (including -1 once an epoch >= 0 is stored).
* ReadSummary does no leader-epoch fencing; for an uninitialised share-partition it
  answers success with start offset -1, leader epoch 0, state epoch 0.
* Delete writes a tombstone (ShareSnapshot key, no value); the KIP describes a snapshot
  with snapshot epoch -1 (replay accepts both). Deleting absent state succeeds with no
  record; there is no state-epoch check.
* Replay applies every ShareUpdate after the latest snapshot without comparing snapshot
  epochs (the log order already guarantees they match).
* Overlapping state batches are merged per offset by priority (higher delivery count,
  then higher delivery state), not "newest wins"; batches below the start offset are
  dropped or clipped; contiguous batches with the same state and count are coalesced.
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Sequence

from kio.schema.errors import ErrorCode

from reference_impl.model.clock import Clock
from reference_impl.model import seeded_bugs as bugs
from reference_impl.model.seeded_bugs import NO_BUGS, SeededBugs
from reference_impl.model.share_state_records import (
    DEFAULT_STATE_TOPIC_PARTITIONS,
    NO_DELIVERY_COMPLETE_COUNT,
    UNINITIALIZED_START_OFFSET,
    RecordType,
    SharePartitionKey,
    ShareSnapshotValue,
    ShareStateLog,
    ShareStateRecord,
    ShareUpdateValue,
    StateBatch,
    snapshot_record,
    tombstone_record,
    update_record,
)

DEFAULT_LEADER_EPOCH = 0  # PartitionFactory.DEFAULT_LEADER_EPOCH / ShareGroupOffset.UNINITIALIZED_EPOCH
DEFAULT_STATE_EPOCH = 0

# Predicate "does topic id T have partition P" (Kafka checks the metadata image).
TopicExists = Callable[[uuid.UUID, int], bool]


@dataclass(slots=True)
class ShareCoordinatorConfig:
    """Share coordinator settings; names follow Kafka's broker configs."""

    snapshot_update_records_per_snapshot: int = 500  # share.coordinator.snapshot.update.records.per.snapshot
    state_topic_num_partitions: int = DEFAULT_STATE_TOPIC_PARTITIONS  # share.coordinator.state.topic.num.partitions
    cold_partition_snapshot_interval_ms: int = 300_000  # share.coordinator.cold.partition.snapshot.interval.ms
    state_topic_prune_interval_ms: int = 300_000  # share.coordinator.state.topic.prune.interval.ms
    seeded_bugs: SeededBugs = NO_BUGS  # reference:bug=NAME (seeded_bugs.py)

    def __post_init__(self) -> None:
        if self.snapshot_update_records_per_snapshot < 0:
            raise ValueError("share.coordinator.snapshot.update.records.per.snapshot must be >= 0")
        if self.state_topic_num_partitions < 1:
            raise ValueError("share.coordinator.state.topic.num.partitions must be >= 1")


@dataclass(frozen=True, slots=True)
class ShareGroupOffset:
    """The current durable state of one share-partition (snapshot + updates merged)."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    state_batches: tuple[StateBatch, ...] = ()
    create_timestamp: int = 0
    write_timestamp: int = 0
    delivery_complete_count: int = NO_DELIVERY_COMPLETE_COUNT

    @classmethod
    def from_snapshot(cls, v: ShareSnapshotValue) -> "ShareGroupOffset":
        return cls(
            v.snapshot_epoch, v.state_epoch, v.leader_epoch, v.start_offset, tuple(v.state_batches),
            v.create_timestamp, v.write_timestamp, v.delivery_complete_count,
        )

    @classmethod
    def from_update(cls, v: ShareUpdateValue) -> "ShareGroupOffset":
        return cls(v.snapshot_epoch, DEFAULT_STATE_EPOCH, v.leader_epoch, v.start_offset, tuple(v.state_batches),
                   0, 0, v.delivery_complete_count)

    def to_snapshot(self) -> ShareSnapshotValue:
        return ShareSnapshotValue(
            self.snapshot_epoch, self.state_epoch, self.leader_epoch, self.start_offset, self.state_batches,
            self.create_timestamp, self.write_timestamp, self.delivery_complete_count,
        )


@dataclass(frozen=True, slots=True)
class PersisterResult:
    """Outcome of one persister operation on one share-partition."""

    key: SharePartitionKey
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    # Read / ReadSummary data (defaults are Kafka's for "nothing to report").
    state_epoch: int = DEFAULT_STATE_EPOCH
    leader_epoch: int = DEFAULT_LEADER_EPOCH
    start_offset: int = UNINITIALIZED_START_OFFSET
    state_batches: tuple[StateBatch, ...] = ()
    delivery_complete_count: int = NO_DELIVERY_COMPLETE_COUNT
    # Records appended by the operation (already replayed), in order.
    records: tuple[ShareStateRecord, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error == ErrorCode.none


# ------------------------------------------------------------------------------- merging


def merge_state_batches(
    so_far: Iterable[StateBatch], new: Iterable[StateBatch], start_offset: int = UNINITIALIZED_START_OFFSET
) -> tuple[StateBatch, ...]:
    """Combine state batches into non-overlapping ones (Kafka's PersisterStateBatchCombiner).

    Batches wholly below `start_offset` are dropped, straddling ones clipped (-1: no
    pruning). Where batches overlap, each offset takes the batch with the highest
    (delivery count, delivery state); contiguous runs with equal state and count are
    coalesced. Result is sorted by first offset.
    """
    combined = list(so_far) + list(new)
    if start_offset != UNINITIALIZED_START_OFFSET:
        pruned: list[StateBatch] = []
        for b in combined:
            if b.last_offset < start_offset:
                continue
            pruned.append(b if b.first_offset >= start_offset else replace(b, first_offset=start_offset))
        combined = pruned
    if len(combined) < 2:
        return tuple(combined)

    # Sweep over elementary segments between batch boundaries.
    events: dict[int, list[tuple[int, tuple[int, int]]]] = {}
    for b in combined:
        events.setdefault(b.first_offset, []).append((+1, b.priority))
        events.setdefault(b.last_offset + 1, []).append((-1, b.priority))
    active: Counter[tuple[int, int]] = Counter()
    out: list[StateBatch] = []
    points = sorted(events)
    for i, point in enumerate(points):
        for delta, prio in events[point]:
            active[prio] += delta
            if active[prio] == 0:
                del active[prio]
        if not active or i + 1 == len(points):
            continue
        count, state = max(active)
        first, last = point, points[i + 1] - 1
        prev = out[-1] if out else None
        if prev is not None and prev.last_offset + 1 == first and prev.priority == (count, state):
            out[-1] = replace(prev, last_offset=last)
        else:
            out.append(StateBatch(first, last, state, count))
    return tuple(out)


# ----------------------------------------------------------------------------- coordinator


class ShareCoordinator:
    """Durable share-partition state of all `__share_group_state` partitions, with its log."""

    def __init__(
        self,
        clock: Clock,
        config: ShareCoordinatorConfig | None = None,
        *,
        log: ShareStateLog | None = None,
        topic_exists: TopicExists | None = None,
    ) -> None:
        self.clock = clock
        self.config = config or ShareCoordinatorConfig()
        self.topic_exists = topic_exists
        self.log = ShareStateLog()
        self._state: dict[SharePartitionKey, ShareGroupOffset] = {}
        self._leader_epochs: dict[SharePartitionKey, int] = {}  # highest seen (fencing)
        self._state_epochs: dict[SharePartitionKey, int] = {}  # highest seen (fencing)
        self._update_counts: dict[SharePartitionKey, int] = {}  # Kafka's snapshotUpdateCount
        self._latest_offsets: dict[SharePartitionKey, int] = {}  # offset of each key's latest snapshot
        self._last_redundant_offset: int | None = None
        # State-topic partitions being loaded: their keys answer COORDINATOR_LOAD_IN_PROGRESS.
        self.loading_partitions: set[int] = set()
        self.version = 0  # bumped on every applied record
        if log is not None:
            self.load(log)

    @classmethod
    def rebuild(cls, previous: "ShareCoordinator", *, clock: Clock | None = None) -> "ShareCoordinator":
        """A new coordinator (fail-over / restart) that replayed `previous`'s log from its start."""
        return cls(clock or previous.clock, replace(previous.config), log=previous.log, topic_exists=previous.topic_exists)

    def load(self, log: ShareStateLog) -> None:
        """Replay a whole log (keeps its offsets and log start offset)."""
        self.log = ShareStateLog()
        self.log.log_start_offset = log.log_start_offset
        self.log._next_offset = log.log_start_offset
        for record in log:
            self.log._next_offset = record.offset
            self.replay(self.log.append(record))
        self.log._next_offset = log.end_offset

    def reload(self, owns: Callable[[SharePartitionKey], bool]) -> None:
        """The coordinator of the keys for which `owns(key)` is true crashed: their cached
        state is dropped and rebuilt by replaying the log from its start, as Kafka's
        ShareCoordinatorShard replays a __share_group_state partition on election."""
        for cache in (self._state, self._leader_epochs, self._state_epochs, self._update_counts):
            for key in [k for k in cache if owns(k)]:
                del cache[key]
        for record in self.log:
            if owns(record.key):
                self.replay(record)

    # -- placement / loading ---------------------------------------------------------------

    def state_partition_for(self, key: SharePartitionKey) -> int:
        return key.state_partition(self.config.state_topic_num_partitions)

    def begin_loading(self, partitions: Iterable[int]) -> None:
        self.loading_partitions |= set(partitions)

    def finish_loading(self, partitions: Iterable[int] | None = None) -> None:
        if partitions is None:
            self.loading_partitions.clear()
        else:
            self.loading_partitions -= set(partitions)

    # -- introspection -----------------------------------------------------------------------

    def state(self, key: SharePartitionKey) -> ShareGroupOffset | None:
        return self._state.get(key)

    def snapshot(self) -> dict[SharePartitionKey, ShareGroupOffset]:
        """Every share-partition's current state (what replay must rebuild exactly)."""
        return dict(self._state)

    def fencing_state(self) -> dict[SharePartitionKey, tuple[int | None, int | None, int | None]]:
        """(highest leader epoch, highest state epoch, update counter) per key."""
        keys = set(self._leader_epochs) | set(self._state_epochs) | set(self._update_counts)
        return {k: (self._leader_epochs.get(k), self._state_epochs.get(k), self._update_counts.get(k)) for k in keys}

    def keys(self) -> list[SharePartitionKey]:
        return sorted(self._state)

    def leader_epoch(self, key: SharePartitionKey) -> int | None:
        return self._leader_epochs.get(key)

    def update_count(self, key: SharePartitionKey) -> int | None:
        return self._update_counts.get(key)

    # -- replay ------------------------------------------------------------------------------

    def replay(self, record: ShareStateRecord) -> None:
        """Apply one record to the in-memory state (used for writes and loads)."""
        key = record.key
        if record.is_deletion:
            self._state.pop(key, None)
            self._leader_epochs.pop(key, None)
            self._state_epochs.pop(key, None)
            self._update_counts.pop(key, None)
            self._note_offset(key, record.offset, deleted=True)
        elif record.record_type is RecordType.SHARE_SNAPSHOT:
            value = record.value
            assert isinstance(value, ShareSnapshotValue)
            self._raise(self._leader_epochs, key, value.leader_epoch)
            self._raise(self._state_epochs, key, value.state_epoch)
            self._state[key] = ShareGroupOffset.from_snapshot(value)
            limit = self.config.snapshot_update_records_per_snapshot
            if key in self._update_counts and self._update_counts[key] >= limit:
                self._update_counts[key] = 0
            self._note_offset(key, record.offset, deleted=False)
        else:
            value = record.value
            assert isinstance(value, ShareUpdateValue)
            self._raise(self._leader_epochs, key, value.leader_epoch)
            current = self._state.get(key)
            self._state[key] = ShareGroupOffset.from_update(value) if current is None else _apply_update(current, value)
            self._update_counts[key] = 0 if key not in self._update_counts else self._update_counts[key] + 1
        self.version += 1

    @staticmethod
    def _raise(epochs: dict[SharePartitionKey, int], key: SharePartitionKey, epoch: int) -> None:
        if key not in epochs or epochs[key] < epoch:
            epochs[key] = epoch

    def _note_offset(self, key: SharePartitionKey, offset: int, *, deleted: bool) -> None:
        """Kafka's ShareCoordinatorOffsetsManager: the lowest offset still needed by replay."""
        if offset < 0:
            return
        self._latest_offsets[key] = offset
        self._last_redundant_offset = min(self._latest_offsets.values())
        if deleted:  # nothing after a deletion needs the key's older records
            self._latest_offsets.pop(key, None)

    def _append(self, record: ShareStateRecord) -> ShareStateRecord:
        stored = self.log.append(record)
        self.replay(stored)
        return stored

    # -- validation helpers ------------------------------------------------------------------

    def _common_error(self, key: SharePartitionKey) -> PersisterResult | None:
        if key.topic_id is None:
            return PersisterResult(key, ErrorCode.invalid_request, "The topic id cannot be null.")
        if key.partition < 0:
            return PersisterResult(key, ErrorCode.invalid_request, "The partition id cannot be a negative number.")
        if self.state_partition_for(key) in self.loading_partitions:
            return PersisterResult(key, ErrorCode.coordinator_load_in_progress, "The share coordinator is loading.")
        return None

    def _topic_error(self, key: SharePartitionKey) -> PersisterResult | None:
        if self.topic_exists is not None and not self.topic_exists(key.topic_id, key.partition):
            return PersisterResult(key, ErrorCode.unknown_topic_or_partition, "Topic/TopicPartition not found.")
        return None

    def _now(self, now_ms: int | None) -> int:
        return self.clock.now_ms() if now_ms is None else now_ms

    # -- InitializeShareGroupState -------------------------------------------------------------

    def initialize(
        self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int, start_offset: int,
        *, now_ms: int | None = None,
    ) -> PersisterResult:
        key = SharePartitionKey(group_id, topic_id, partition)
        if (err := self._common_error(key)) is not None:
            return err
        stored = self._state_epochs.get(key)
        if state_epoch != -1 and stored is not None and stored > state_epoch:
            return PersisterResult(key, ErrorCode.fenced_state_epoch, "The state epoch is older than the stored one.")
        if (err := self._topic_error(key)) is not None:
            return err
        now = self._now(now_ms)
        current = self._state.get(key)
        value = ShareSnapshotValue(
            snapshot_epoch=0 if current is None else current.snapshot_epoch + 1,
            state_epoch=state_epoch,
            leader_epoch=DEFAULT_LEADER_EPOCH,
            start_offset=start_offset,
            state_batches=(),
            create_timestamp=now,
            write_timestamp=now,
            # A known start offset with nothing in flight (AlterShareGroupOffsets): Kafka
            # counts 0 completed records, so DescribeShareGroupOffsets reports a lag.
            delivery_complete_count=NO_DELIVERY_COMPLETE_COUNT if start_offset == UNINITIALIZED_START_OFFSET else 0,
        )
        record = self._append(snapshot_record(key, value, now))
        return PersisterResult(key, records=(record,))

    # -- WriteShareGroupState --------------------------------------------------------------------

    def write(
        self, group_id: str, topic_id: uuid.UUID, partition: int, *, state_epoch: int, leader_epoch: int,
        start_offset: int, state_batches: Sequence[StateBatch] = (),
        delivery_complete_count: int = NO_DELIVERY_COMPLETE_COUNT, now_ms: int | None = None,
    ) -> PersisterResult:
        key = SharePartitionKey(group_id, topic_id, partition)
        if (err := self._common_error(key)) is not None:
            return err
        if key not in self._state:
            return PersisterResult(
                key, ErrorCode.invalid_request, "Write operation on uninitialized share partition not allowed."
            )
        bugs_on = self.config.seeded_bugs
        stored_leader = self._leader_epochs.get(key)
        if leader_epoch != -1 and stored_leader is not None and stored_leader > leader_epoch \
                and not bugs_on.has(bugs.SHARE_STALE_LEADER_EPOCH_WRITE_ACCEPTED):
            return PersisterResult(key, ErrorCode.fenced_leader_epoch, "The leader epoch is older than the stored one.")
        stored_state = self._state_epochs.get(key)
        if state_epoch != -1 and stored_state is not None and stored_state > state_epoch \
                and not bugs_on.has(bugs.SHARE_STALE_STATE_EPOCH_WRITE_ACCEPTED):
            return PersisterResult(key, ErrorCode.fenced_state_epoch, "The state epoch is older than the stored one.")
        if (err := self._topic_error(key)) is not None:
            return err
        record = self._state_record(
            key, start_offset, tuple(state_batches), leader_epoch=None,
            delivery_complete_count=delivery_complete_count, now=self._now(now_ms),
        )
        return PersisterResult(key, records=(self._append(record),))

    def _state_record(
        self, key: SharePartitionKey, start_offset: int, batches: tuple[StateBatch, ...], *,
        leader_epoch: int | None, delivery_complete_count: int, now: int, force_snapshot: bool = False,
    ) -> ShareStateRecord:
        """Kafka's generateShareStateRecord: a ShareSnapshot once the update counter has
        reached the limit (or when forced), else a ShareUpdate. `leader_epoch` None keeps
        the current leader epoch (writes); a value replaces it unless -1 (reads)."""
        current = self._state[key]
        new_leader = current.leader_epoch if leader_epoch in (None, -1) else leader_epoch
        dcc = delivery_complete_count
        if dcc == NO_DELIVERY_COMPLETE_COUNT:
            dcc = current.delivery_complete_count
        limit = self.config.snapshot_update_records_per_snapshot
        if force_snapshot or self._update_counts.get(key, 0) >= limit:
            new_start = current.start_offset if start_offset == UNINITIALIZED_START_OFFSET else start_offset
            value = ShareSnapshotValue(
                snapshot_epoch=current.snapshot_epoch + 1,
                state_epoch=current.state_epoch,
                leader_epoch=new_leader,
                start_offset=new_start,
                state_batches=merge_state_batches(current.state_batches, batches, new_start),
                create_timestamp=now,
                write_timestamp=now,
                delivery_complete_count=dcc,
            )
            return snapshot_record(key, value, now)
        value_u = ShareUpdateValue(
            snapshot_epoch=current.snapshot_epoch,
            leader_epoch=new_leader,
            start_offset=start_offset,
            state_batches=merge_state_batches((), batches, start_offset),
            delivery_complete_count=delivery_complete_count,
        )
        return update_record(key, value_u, now)

    def force_snapshot(
        self, group_id: str, topic_id: uuid.UUID, partition: int, *, now_ms: int | None = None
    ) -> PersisterResult:
        """Write a full ShareSnapshot of the current state now (snapshot epoch + 1)."""
        key = SharePartitionKey(group_id, topic_id, partition)
        if key not in self._state:
            return PersisterResult(key, ErrorCode.invalid_request, "No state for this share partition.")
        now = self._now(now_ms)
        record = self._state_record(key, UNINITIALIZED_START_OFFSET, (), leader_epoch=None,
                                    delivery_complete_count=NO_DELIVERY_COMPLETE_COUNT, now=now, force_snapshot=True)
        return PersisterResult(key, records=(self._append(record),))

    # -- ReadShareGroupState ----------------------------------------------------------------------

    def read(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int, *,
             now_ms: int | None = None) -> PersisterResult:
        key = SharePartitionKey(group_id, topic_id, partition)
        if (err := self._common_error(key)) is not None:
            return err
        if key not in self._state:
            return PersisterResult(
                key, ErrorCode.invalid_request, "Read operation on uninitialized share partition not allowed."
            )
        stored_leader = self._leader_epochs.get(key)
        if stored_leader is not None and stored_leader > leader_epoch:
            return PersisterResult(key, ErrorCode.fenced_leader_epoch, "The leader epoch is older than the stored one.")
        if (err := self._topic_error(key)) is not None:
            return err
        current = self._state[key]
        records: tuple[ShareStateRecord, ...] = ()
        if leader_epoch != -1 and stored_leader != leader_epoch:
            # A new share-partition leader: record its leader epoch (no batches).
            record = self._state_record(
                key, current.start_offset, (), leader_epoch=leader_epoch,
                delivery_complete_count=NO_DELIVERY_COMPLETE_COUNT, now=self._now(now_ms),
            )
            records = (self._append(record),)
        return PersisterResult(
            key, state_epoch=current.state_epoch, leader_epoch=self._state[key].leader_epoch,
            start_offset=current.start_offset, state_batches=current.state_batches,
            delivery_complete_count=current.delivery_complete_count, records=records,
        )

    # -- ReadShareGroupStateSummary ------------------------------------------------------------------

    def read_summary(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int = -1) -> PersisterResult:
        key = SharePartitionKey(group_id, topic_id, partition)
        if (err := self._common_error(key)) is not None:
            return err
        if (err := self._topic_error(key)) is not None:
            return err
        current = self._state.get(key)
        if current is None:
            return PersisterResult(key)  # start offset -1, leader epoch 0, state epoch 0
        return PersisterResult(
            key, state_epoch=current.state_epoch, leader_epoch=current.leader_epoch,
            start_offset=current.start_offset, delivery_complete_count=current.delivery_complete_count,
        )

    # -- DeleteShareGroupState ---------------------------------------------------------------------

    def delete(self, group_id: str, topic_id: uuid.UUID, partition: int, *, now_ms: int | None = None) -> PersisterResult:
        key = SharePartitionKey(group_id, topic_id, partition)
        if (err := self._common_error(key)) is not None:
            return err
        if (err := self._topic_error(key)) is not None:
            return err
        if key not in self._state:
            return PersisterResult(key)
        return PersisterResult(key, records=(self._append(tombstone_record(key, self._now(now_ms))),))

    def cleanup_deleted_topics(self, topic_ids: Iterable[uuid.UUID], *, now_ms: int | None = None) -> list[ShareStateRecord]:
        """Tombstone every share-partition of deleted topics (Kafka: on a new metadata image)."""
        gone = set(topic_ids)
        now = self._now(now_ms)
        return [self._append(tombstone_record(k, now)) for k in sorted(self._state) if k.topic_id in gone]

    # -- log space management ------------------------------------------------------------------

    def last_redundant_offset(self) -> int | None:
        """Records below this offset are not needed to rebuild any live share-partition."""
        value = self._last_redundant_offset
        if value is None or value <= 0:
            return None
        return value

    def prune(self) -> int:
        """delete-records up to the last redundant offset; returns the log start offset."""
        offset = self.last_redundant_offset()
        if offset is not None:
            self.log.delete_records_before(offset)
        return self.log.log_start_offset

    def snapshot_cold_partitions(self, now_ms: int | None = None) -> list[ShareStateRecord]:
        """Re-snapshot share-partitions whose latest snapshot is older than the cold
        interval, so older records can be pruned (Kafka's snapshotColdPartitions)."""
        now = self._now(now_ms)
        if all(s.create_timestamp != s.write_timestamp for s in self._state.values()):
            return []  # everything already cold-snapshotted: the system is quiet
        out: list[ShareStateRecord] = []
        for key in sorted(self._state):
            s = self._state[key]
            if now - s.write_timestamp >= self.config.cold_partition_snapshot_interval_ms:
                value = replace(s, snapshot_epoch=s.snapshot_epoch + 1, write_timestamp=now).to_snapshot()
                out.append(self._append(snapshot_record(key, value, now)))
        return out


def topic_exists_in(registry: Any) -> TopicExists:
    """`topic_exists` predicate over a TopicRegistry (`by_id(topic_id).partition(p)`)."""

    def exists(topic_id: uuid.UUID, partition: int) -> bool:
        topic = registry.by_id(topic_id)
        return topic is not None and topic.partition(partition) is not None

    return exists


def _apply_update(current: ShareGroupOffset, update: ShareUpdateValue) -> ShareGroupOffset:
    new_start = current.start_offset if update.start_offset == UNINITIALIZED_START_OFFSET else update.start_offset
    new_leader = current.leader_epoch if update.leader_epoch == -1 else update.leader_epoch
    dcc = update.delivery_complete_count
    if dcc == NO_DELIVERY_COMPLETE_COUNT:
        dcc = current.delivery_complete_count
    return ShareGroupOffset(
        snapshot_epoch=current.snapshot_epoch,
        state_epoch=current.state_epoch,
        leader_epoch=new_leader,
        start_offset=new_start,
        state_batches=merge_state_batches(current.state_batches, update.state_batches, new_start),
        create_timestamp=current.create_timestamp,
        write_timestamp=current.write_timestamp,
        delivery_complete_count=dcc,
    )


__all__ = [
    "DEFAULT_LEADER_EPOCH",
    "DEFAULT_STATE_EPOCH",
    "PersisterResult",
    "ShareCoordinator",
    "ShareCoordinatorConfig",
    "ShareGroupOffset",
    "merge_state_batches",
    "topic_exists_in",
]
