"""The share-partition leader's state machine (KIP-932): in-flight records of one
topic-partition for one share group.

Pure model: no I/O, no clock of its own (callers pass `now_ms`), no persister. It reads the
partition through `PartitionLog` (`batches_from`, `fetch_upper_bound`, `aborted_transactions`,
`log_start_offset`, `offset_for_timestamp`) and never touches record bytes except to tell an
ABORT marker from a COMMIT marker.

State, all of it plain data:

* `spso` - share-partition start offset: every offset below it is Archived.
* `speo` - exclusive end of the in-flight window, as in the KIP's worked example
  ("SPEO=110" after fetching 100-109); every offset at or beyond it is Available and not yet
  delivered. (Kafka's `endOffset` is inclusive: see `end_offset`.)
* `ranges` - contiguous, non-overlapping `InFlightRange`s covering [spso, speo): state,
  delivery count, acquiring member, lock deadline. A range is created per log batch on first
  acquisition and split when part of it changes state (partial acknowledgement, record limit,
  aborted transactions).
* `state_epoch`, `leader_epoch` - carried for the persister (share coordinator).

The transitions are the table `TRANSITIONS` plus `next_state()` (delivery-count limit).
See docs/share-partition.md for what follows Kafka's SharePartition.java rather than the KIP.
"""

from __future__ import annotations

import bisect
import dataclasses
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Iterable, Sequence

from kio.schema.errors import ErrorCode

from reference_impl.model import seeded_bugs as bugs
from reference_impl.model import share_txn
from reference_impl.model.partition_log import LATEST_TIMESTAMP, IsolationLevel, PartitionLog
from reference_impl.model.share_partition_config import (
    AutoOffsetReset,
    ResetStrategy,
    SharePartitionConfig,
)
from reference_impl.protocol import records as rec

UNINITIALIZED_START_OFFSET = -1  # what the persister returns before the SPSO is known


class RecordState(IntEnum):
    """Record states; the values are Kafka's persisted DeliveryState ids."""

    AVAILABLE = 0
    ACQUIRED = 1  # never persisted
    ACKNOWLEDGED = 2
    ARCHIVED = 4
    # KIP-1289: acknowledged inside an open producer transaction; never persisted (the KIP
    # keeps __share_group_state unchanged), not a KIP-932 DeliveryState id.
    TX_PENDING = 16

    @property
    def terminal(self) -> bool:
        return self in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


class AcknowledgeType(IntEnum):
    """Acknowledge types on the wire (ShareFetch/ShareAcknowledge AcknowledgeTypes)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4  # KIP-1222, Kafka 4.2+ (v2 of the RPCs)


class Event(Enum):
    ACQUIRE = "acquire"  # ShareFetch hands the record to a member (delivery count + 1)
    ACCEPT = "accept"  # ack type 1
    RELEASE = "release"  # ack type 2
    REJECT = "reject"  # ack type 3
    GAP = "gap"  # ack type 0: no record at this offset
    LOCK_EXPIRED = "lock_expired"  # acquisition lock elapsed
    MEMBER_RELEASED = "member_released"  # share session closed / member left
    ARCHIVE = "archive"  # leader archives: aborted transaction (read_committed), log start moved
    TXN_STAGE = "txn_stage"  # KIP-1289 TxnShareAcknowledge stages ACCEPT/REJECT
    TXN_ABORT = "txn_abort"  # KIP-1289 ABORT marker of the staging producer


S = RecordState
# (state, event) -> new state. Anything not listed is an invalid transition.
TRANSITIONS: dict[tuple[RecordState, Event], RecordState] = {
    (S.AVAILABLE, Event.ACQUIRE): S.ACQUIRED,
    (S.AVAILABLE, Event.ARCHIVE): S.ARCHIVED,
    (S.ACQUIRED, Event.ACCEPT): S.ACKNOWLEDGED,
    (S.ACQUIRED, Event.RELEASE): S.AVAILABLE,  # Archived once the delivery count reached the limit
    (S.ACQUIRED, Event.LOCK_EXPIRED): S.AVAILABLE,  # Archived once the delivery count reached the limit
    (S.ACQUIRED, Event.MEMBER_RELEASED): S.AVAILABLE,  # see SharePartitionConfig.release_on_close_...
    (S.ACQUIRED, Event.REJECT): S.ARCHIVED,
    (S.ACQUIRED, Event.GAP): S.ARCHIVED,
    (S.ACQUIRED, Event.ARCHIVE): S.ARCHIVED,
    # KIP-1289 "State machine additions": staging, then the marker. A COMMIT marker applies the
    # staged type (ACCEPT/REJECT events below); ABORT returns the record to its member with its
    # lock running; lock expiry while pending ends the delivery like an Acquired lock expiry.
    (S.ACQUIRED, Event.TXN_STAGE): S.TX_PENDING,
    (S.TX_PENDING, Event.ACCEPT): S.ACKNOWLEDGED,
    (S.TX_PENDING, Event.REJECT): S.ARCHIVED,
    (S.TX_PENDING, Event.TXN_ABORT): S.ACQUIRED,
    (S.TX_PENDING, Event.LOCK_EXPIRED): S.AVAILABLE,  # Archived once the delivery count reached the limit
    # Acknowledged -> Archived happens when the SPSO moves past the record: such records leave
    # `ranges` and `state_of()` answers ARCHIVED for every offset below the SPSO.
}
# Transitions that end a delivery attempt unsuccessfully: Archived at the delivery-count limit.
LIMITED_EVENTS = frozenset({Event.RELEASE, Event.LOCK_EXPIRED})
ACK_EVENTS = {
    AcknowledgeType.GAP: Event.GAP,
    AcknowledgeType.ACCEPT: Event.ACCEPT,
    AcknowledgeType.RELEASE: Event.RELEASE,
    AcknowledgeType.REJECT: Event.REJECT,
}


class InvalidTransition(Exception):
    pass


def next_state(
    state: RecordState, event: Event, delivery_count: int, delivery_count_limit: int, *, limit_applies: bool = True
) -> RecordState:
    """Apply TRANSITIONS, with the delivery-count rule: an unsuccessful end of a delivery
    (release, lock expiry) archives the record once its count reached the limit."""
    try:
        new = TRANSITIONS[(state, event)]
    except KeyError:
        raise InvalidTransition(f"{state.name} --{event.value}--> (invalid)") from None
    if new is S.AVAILABLE and limit_applies and event in LIMITED_EVENTS and delivery_count >= delivery_count_limit:
        return S.ARCHIVED
    return new


@dataclass(slots=True)
class InFlightRange:
    first_offset: int
    last_offset: int
    state: RecordState
    delivery_count: int
    member_id: str | None = None  # set only while ACQUIRED or TX_PENDING
    lock_deadline_ms: int | None = None  # set only while ACQUIRED or TX_PENDING
    # KIP-1289 staging (only while TX_PENDING): (producer id, producer epoch, ack type).
    txn: tuple[int, int, int] | None = None

    @property
    def size(self) -> int:
        return self.last_offset - self.first_offset + 1


@dataclass(frozen=True, slots=True)
class AcquiredRecords:
    """One AcquiredRecords entry of a ShareFetch response."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class StateBatch:
    """One persisted state batch (WriteShareGroupState / ReadShareGroupState StateBatches)."""

    first_offset: int
    last_offset: int
    delivery_state: int  # RecordState id: 0, 2 or 4
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareStateSnapshot:
    """What the share coordinator persists for this share-partition."""

    start_offset: int
    state_epoch: int
    leader_epoch: int
    state_batches: tuple[StateBatch, ...]


@dataclass(frozen=True, slots=True)
class AckResult:
    """Outcome of acknowledge(): one error code per partition (atomic)."""

    error_code: ErrorCode = ErrorCode.none
    message: str | None = None

    @property
    def ok(self) -> bool:
        return self.error_code == ErrorCode.none


@dataclass(frozen=True, slots=True)
class StateChange:
    """A range whose state changed without an acknowledgement (lock expiry, member release)."""

    first_offset: int
    last_offset: int
    state: RecordState
    delivery_count: int


class _AckError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def initial_start_offset(
    log: PartitionLog, reset: AutoOffsetReset | str | None, now_ms: int
) -> int:
    """SPSO for a share-partition with no persisted start offset (share.auto.offset.reset)."""
    reset = AutoOffsetReset.parse(reset)
    if reset.strategy is ResetStrategy.EARLIEST:
        return log.log_start_offset
    if reset.strategy is ResetStrategy.BY_DURATION:
        found = log.offset_for_timestamp(now_ms - reset.duration_ms, IsolationLevel.READ_UNCOMMITTED)
        if found is not None:
            return max(found.offset, log.log_start_offset)
    latest = log.offset_for_timestamp(LATEST_TIMESTAMP, IsolationLevel.READ_UNCOMMITTED)
    return latest.offset if latest is not None else log.high_watermark


def _abort_marker(batch) -> bool:
    if not batch.is_control:
        return False
    records = batch.decode()
    if not records:
        return False
    try:
        ctype, _ = rec.parse_control_record(records[0])
    except rec.RecordBatchError:
        return False
    return ctype is rec.ControlType.ABORT


def aborted_batch_spans(log: PartitionLog, lo: int, hi: int) -> list[tuple[int, int]]:
    """Offsets [base, last] (clipped to [lo, hi]) of data batches of aborted transactions,
    found the way Kafka's share-partition leader does: the aborted-transaction index plus the
    batch headers and ABORT markers, without reading data records."""
    aborted = sorted(log.aborted_transactions(lo, hi + 1), key=lambda a: a.first_offset)
    if not aborted:
        return []
    pids: set[int] = set()
    spans: list[tuple[int, int]] = []
    i = 0
    for b in log.batches_from(lo, hi + 1):
        if not b.header.has_producer_id:
            continue
        while i < len(aborted) and aborted[i].first_offset <= b.last_offset:
            pids.add(aborted[i].producer_id)
            i += 1
        if b.is_control:
            if _abort_marker(b):
                pids.discard(b.producer_id)
        elif b.is_transactional and b.producer_id in pids:
            first, last = max(b.base_offset, lo), min(b.last_offset, hi)
            if first <= last:
                spans.append((first, last))
    return spans


class SharePartition:
    """In-flight state of one share-partition (group, topic, partition)."""

    def __init__(
        self,
        group_id: str,
        topic: str,
        partition: int,
        start_offset: int,
        config: SharePartitionConfig | None = None,
        *,
        state_epoch: int = 0,
        leader_epoch: int = -1,
    ) -> None:
        if start_offset < 0:
            raise ValueError("start_offset must be known; use SharePartition.initialize() or from_state()")
        self.group_id = group_id
        self.topic = topic
        self.partition = partition
        self.config = config or SharePartitionConfig()
        self.state_epoch = state_epoch
        self.leader_epoch = leader_epoch
        self._spso = start_offset
        self._speo = start_offset
        self._ranges: list[InFlightRange] = []
        self.txn_lock_expired = 0  # KIP-1289 TxnPendingLockExpiredCount

    # -- construction ------------------------------------------------------------------

    @classmethod
    def initialize(
        cls,
        group_id: str,
        log: PartitionLog,
        now_ms: int,
        config: SharePartitionConfig | None = None,
        *,
        state_epoch: int = 0,
        leader_epoch: int = -1,
    ) -> "SharePartition":
        """A share-partition with no persisted state: the SPSO comes from share.auto.offset.reset."""
        config = config or SharePartitionConfig()
        start = initial_start_offset(log, config.auto_offset_reset, now_ms)
        return cls(group_id, log.topic, log.partition, start, config, state_epoch=state_epoch, leader_epoch=leader_epoch)

    @classmethod
    def from_state(
        cls,
        group_id: str,
        topic: str,
        partition: int,
        start_offset: int,
        state_batches: Iterable[object],
        config: SharePartitionConfig | None = None,
        *,
        state_epoch: int = 0,
        leader_epoch: int = -1,
        log: PartitionLog | None = None,
        now_ms: int | None = None,
    ) -> "SharePartition":
        """Rebuild after a leader change/restart from persisted state (ReadShareGroupState).

        Acquired is never persisted: a batch given as ACQUIRED (1) comes back AVAILABLE, and
        offsets between persisted batches (never acknowledged) come back Available with
        delivery count 0. Start offset -1 means "not initialised": then `log` and `now_ms`
        decide it through share.auto.offset.reset.
        """
        config = config or SharePartitionConfig()
        if start_offset == UNINITIALIZED_START_OFFSET:
            if log is None or now_ms is None:
                raise ValueError("start offset -1 needs the log and now_ms to apply share.auto.offset.reset")
            start_offset = initial_start_offset(log, config.auto_offset_reset, now_ms)
        sp = cls(group_id, topic, partition, start_offset, config, state_epoch=state_epoch, leader_epoch=leader_epoch)
        batches = sorted((_state_batch(b) for b in state_batches), key=lambda b: b.first_offset)
        cursor = start_offset
        for b in batches:
            first, last = max(b.first_offset, cursor), b.last_offset
            if last < first:
                continue
            state = RecordState(b.delivery_state)
            if state is S.ACQUIRED:
                state = S.AVAILABLE
            if first > cursor:
                sp._ranges.append(InFlightRange(cursor, first - 1, S.AVAILABLE, 0))
            sp._ranges.append(InFlightRange(first, last, state, b.delivery_count))
            cursor = last + 1
        sp._speo = cursor
        sp._advance()
        if log is not None:
            sp.on_log_start_offset(log.log_start_offset)
        return sp

    # -- views -------------------------------------------------------------------------

    @property
    def spso(self) -> int:
        return self._spso

    start_offset = spso

    @property
    def speo(self) -> int:
        """Exclusive end of the in-flight window (the KIP example's SPEO)."""
        return self._speo

    @property
    def end_offset(self) -> int:
        """Kafka's SharePartition.endOffset: last in-flight offset (inclusive); equals the
        SPSO when nothing is in flight."""
        return self._speo - 1 if self._speo > self._spso else self._spso

    @property
    def in_flight_count(self) -> int:
        """Width of the in-flight window, the quantity group.share.partition.max.record.locks caps."""
        return self._speo - self._spso

    @property
    def ranges(self) -> tuple[InFlightRange, ...]:
        return tuple(dataclasses.replace(r) for r in self._ranges)

    def _index(self, offset: int) -> int | None:
        i = bisect.bisect_right(self._ranges, offset, key=lambda r: r.first_offset) - 1
        if i >= 0 and self._ranges[i].last_offset >= offset:
            return i
        return None

    def range_of(self, offset: int) -> InFlightRange | None:
        i = self._index(offset)
        return None if i is None else dataclasses.replace(self._ranges[i])

    def state_of(self, offset: int) -> RecordState:
        if offset < self._spso:
            return S.ARCHIVED
        i = self._index(offset)
        return S.AVAILABLE if i is None else self._ranges[i].state

    def delivery_count_of(self, offset: int) -> int:
        i = self._index(offset)
        return 0 if i is None else self._ranges[i].delivery_count

    def acquired_by(self, member_id: str) -> list[tuple[int, int]]:
        return [(r.first_offset, r.last_offset) for r in self._ranges if r.state is S.ACQUIRED and r.member_id == member_id]

    def next_lock_deadline(self) -> int | None:
        deadlines = [r.lock_deadline_ms for r in self._ranges if r.lock_deadline_ms is not None]
        return min(deadlines) if deadlines else None

    # -- range bookkeeping -------------------------------------------------------------

    def _split(self, offset: int) -> None:
        """Make `offset` the first offset of a range (if it lies inside one)."""
        i = self._index(offset)
        if i is None or self._ranges[i].first_offset == offset:
            return
        r = self._ranges[i]
        tail = dataclasses.replace(r, first_offset=offset)
        r.last_offset = offset - 1
        self._ranges.insert(i + 1, tail)

    def _isolate(self, lo: int, hi: int) -> list[InFlightRange]:
        """Ranges covering exactly [lo, hi] (split at the edges)."""
        self._split(lo)
        self._split(hi + 1)
        start = bisect.bisect_left(self._ranges, lo, key=lambda r: r.first_offset)
        end = bisect.bisect_right(self._ranges, hi, key=lambda r: r.first_offset)
        return self._ranges[start:end]

    def _advance(self) -> bool:
        """Move the SPSO over the leading Acknowledged/Archived ranges; never backwards."""
        moved = False
        if self.config.seeded_bugs.has(bugs.SHARE_SPSO_FROZEN):
            return moved
        while self._ranges and self._ranges[0].state.terminal:
            r = self._ranges.pop(0)
            self._spso = max(self._spso, r.last_offset + 1)
            moved = True
        if not self._ranges and self._spso < self._speo:
            self._spso = self._speo
            moved = True
        return moved

    # -- log start offset, reset ------------------------------------------------------

    def on_log_start_offset(self, log_start_offset: int) -> bool:
        """The partition's log start offset moved (retention, DeleteRecords): the SPSO follows
        it and everything below is Archived. Records still Acquired there leave the window;
        their acknowledgements are accepted and ignored (KIP-932 "Log retention")."""
        if log_start_offset <= self._spso:
            return False
        self._split(log_start_offset)
        keep_overtaken = self.config.seeded_bugs.has(bugs.SHARE_OVERTAKEN_RECORDS_REDELIVERED)
        self._ranges = [r for r in self._ranges
                        if r.first_offset >= log_start_offset or (keep_overtaken and not r.state.terminal)]
        self._spso = min(log_start_offset, self._ranges[0].first_offset) if self._ranges else log_start_offset
        self._speo = max(self._speo, log_start_offset)
        self._advance()
        return True

    def reset(self, start_offset: int, *, state_epoch: int | None = None) -> None:
        """Administrative SPSO reset (AlterShareGroupOffsets / DeleteShareGroupOffsets on an
        empty group): all in-flight state and delivery counts are discarded and a new state
        epoch starts."""
        if start_offset < 0:
            raise ValueError("start offset must be >= 0")
        self._ranges = []
        self._spso = self._speo = start_offset
        self.state_epoch = self.state_epoch + 1 if state_epoch is None else state_epoch

    def reset_to(self, log: PartitionLog, reset: AutoOffsetReset | str, now_ms: int, *, state_epoch: int | None = None) -> int:
        offset = initial_start_offset(log, reset, now_ms)
        self.reset(offset, state_epoch=state_epoch)
        return offset

    # -- acquisition ------------------------------------------------------------------

    def can_acquire(self, log: PartitionLog, isolation: IsolationLevel | int | None = None) -> bool:
        """Would acquire() find anything now (for ShareFetch min_bytes / waiting)?"""
        if any(r.state is S.AVAILABLE for r in self._ranges):
            return True
        if self.in_flight_count >= self.config.partition_max_record_locks:
            return False
        iso = self.config.isolation_level if isolation is None else isolation
        start = max(self._speo, log.log_start_offset)
        return next(log.batches_from(start, log.fetch_upper_bound(iso)), None) is not None

    def acquire(
        self,
        member_id: str,
        log: PartitionLog,
        max_records: int = 500,
        *,
        now_ms: int,
        isolation: IsolationLevel | int | None = None,
        record_limit: bool = False,
    ) -> list[AcquiredRecords]:
        """Acquire records for `member_id` (a ShareFetch): Available in-flight records first
        (redeliveries), then new records from the log after the SPEO, in offset order.

        `max_records` is a soft limit (Kafka's maxFetchRecords): whole batches are taken, so a
        batch crossing the limit is acquired entirely; `record_limit=True` (KIP-1206
        share.acquire.mode=record_limit) makes it exact. The budget is also capped by
        group.share.partition.max.record.locks - in_flight_count (again up to a whole batch);
        at the limit no new records are taken, only Available ones inside the window.
        Under read_committed nothing at or beyond the LSO is acquired and data batches of
        aborted transactions are Archived, never returned. Control batches and holes between
        batches are acquired like records; the consumer acknowledges them as GAP.
        """
        if max_records <= 0:
            return []
        iso = IsolationLevel(int(self.config.isolation_level if isolation is None else isolation))
        self.on_log_start_offset(log.log_start_offset)
        upper = log.fetch_upper_bound(iso)
        if self.config.seeded_bugs.has(bugs.SHARE_READ_COMMITTED_PAST_LSO):
            upper = log.high_watermark
        deadline = now_ms + self.config.lock_duration_ms
        limit = self.config.delivery_count_limit
        taken: list[InFlightRange] = []
        count = 0
        # Budget as Kafka computes it (SharePartition.lastOffsetAndMaxRecordsToAcquire): the
        # in-flight room caps redeliveries too while there is room; at the limit only records
        # inside the window can be re-acquired.
        room = self.config.partition_max_record_locks - self.in_flight_count
        first_available = next((r.first_offset for r in self._ranges if r.state is S.AVAILABLE), None)
        if room > 0:
            max_records = min(max_records, room)
        elif first_available is not None:
            max_records = min(max_records, self._speo - first_available)
        else:
            return []

        def take(r: InFlightRange) -> None:
            nonlocal count
            r.state = next_state(r.state, Event.ACQUIRE, r.delivery_count, limit)
            r.delivery_count = 1 if self.config.seeded_bugs.has(bugs.SHARE_DELIVERY_COUNT_FROZEN) else r.delivery_count + 1
            r.member_id = member_id
            r.lock_deadline_ms = deadline
            taken.append(r)
            count += r.size

        # 1. redeliveries inside the window
        spans = [(r.first_offset, r.last_offset) for r in self._ranges if r.state is S.AVAILABLE]
        for first, last in spans:
            if count >= max_records:
                break
            last = min(last, upper - 1)
            if last < first:
                break
            if record_limit and last - first + 1 > max_records - count:
                last = first + (max_records - count) - 1
            if iso == IsolationLevel.READ_COMMITTED:
                self._archive_aborted(log, first, last)
            for r in self._isolate(first, last):
                if r.state is S.AVAILABLE:
                    take(r)

        # 2. new records after the SPEO, bounded by the in-flight limit
        if room > 0 and count < max_records:
            self._acquire_new(log, upper, max_records - count, iso, record_limit, take)

        self._advance()
        return _coalesce(taken)

    def _acquire_new(self, log: PartitionLog, upper: int, room: int, iso: IsolationLevel, record_limit: bool, take) -> None:
        start = self._speo
        chosen = []
        first_new: int | None = None
        for b in log.batches_from(start, upper):
            if b.last_offset < start:
                continue
            if first_new is None:
                first_new = max(b.base_offset, start)
            chosen.append(b)
            if b.last_offset - first_new + 1 >= room:
                break
        if not chosen or first_new is None:
            return
        if first_new > self._speo:
            # Offsets with no batch before the first one read (deleted/compacted away): never records.
            self._ranges.append(InFlightRange(self._speo, first_new - 1, S.ARCHIVED, 0))
        aborted = aborted_batch_spans(log, first_new, chosen[-1].last_offset) if iso == IsolationLevel.READ_COMMITTED else []
        if self.config.seeded_bugs.has(bugs.SHARE_READ_COMMITTED_DELIVERS_ABORTED):
            aborted = []
        aborted_firsts = {a for a, _ in aborted}
        cut = first_new + room - 1 if record_limit else None
        cursor = first_new
        new_ranges: list[InFlightRange] = []
        for b in chosen:
            lo = max(b.base_offset, cursor)
            if lo > cursor:  # a hole between two batches read together: acquired, acked as GAP
                new_ranges.append(InFlightRange(cursor, lo - 1, S.AVAILABLE, 0))
            state = S.ARCHIVED if lo in aborted_firsts else S.AVAILABLE
            new_ranges.append(InFlightRange(lo, b.last_offset, state, 0))
            cursor = b.last_offset + 1
        self._ranges.extend(new_ranges)
        self._speo = cursor
        for r in new_ranges:
            if r.state is not S.AVAILABLE:
                continue
            if cut is not None and r.first_offset > cut:
                break
            if cut is not None and r.last_offset > cut:
                self._split(cut + 1)
                r = self._ranges[self._index(r.first_offset)]  # type: ignore[index]
            take(r)

    def _archive_aborted(self, log: PartitionLog, first: int, last: int) -> None:
        for lo, hi in aborted_batch_spans(log, first, last):
            for r in self._isolate(lo, hi):
                if r.state is S.AVAILABLE:
                    r.state = next_state(r.state, Event.ARCHIVE, r.delivery_count, self.config.delivery_count_limit)

    # -- acknowledgement --------------------------------------------------------------

    def acknowledge(
        self,
        member_id: str,
        batches: Iterable[tuple[int, int, Sequence[int]] | object],
        now_ms: int,
    ) -> AckResult:
        """Apply one request's acknowledgements for this partition, all or nothing.

        Each batch is (first_offset, last_offset, ack_types) with one type for the whole range
        or one per offset. Errors (the partition's one error code, nothing applied):
        INVALID_REQUEST for a malformed batch, an unknown type (RENEW unless enabled) or offsets
        beyond anything delivered; INVALID_RECORD_STATE for offsets not Acquired by this member
        (including ones whose lock already expired). Offsets below the SPSO are ignored.
        """
        if self.config.seeded_bugs.has(bugs.SHARE_ACKS_NOT_APPLIED):
            return AckResult()
        saved = ([dataclasses.replace(r) for r in self._ranges], self._spso, self._speo)
        try:
            for batch in batches:
                first, last, types = _batch_fields(batch)
                self._ack_one(member_id, first, last, types, now_ms)
        except _AckError as err:
            if not self.config.seeded_bugs.has(bugs.SHARE_ACKS_NOT_ATOMIC):
                self._ranges, self._spso, self._speo = saved
            return AckResult(err.code, err.message)
        self._advance()
        return AckResult()

    def _ack_one(self, member_id: str, first: int, last: int, types: Sequence[int], now_ms: int) -> None:
        if first > last or first < 0:
            raise _AckError(ErrorCode.invalid_request, f"invalid acknowledgement range {first}..{last}")
        if len(types) not in (1, last - first + 1):
            raise _AckError(ErrorCode.invalid_request, "acknowledge types must be one per batch or one per offset")
        allowed = {0, 1, 2, 3} | ({4} if self.config.renew_acknowledge_enabled else set())
        bad = [t for t in types if int(t) not in allowed]
        if bad:
            raise _AckError(ErrorCode.invalid_request, f"invalid acknowledge type {bad[0]}")
        if last < self._spso:
            return  # already archived (SPSO moved past, e.g. log start offset)
        lo = max(first, self._spso)
        if not self._ranges:
            raise _AckError(ErrorCode.invalid_record_state, f"no in-flight records for {first}..{last}")
        if last >= self._speo:
            raise _AckError(ErrorCode.invalid_request, f"offsets up to {last} were never acquired (SPEO {self._speo})")
        # Runs of equal ack type.
        runs: list[tuple[int, int, int]] = []
        for off in range(lo, last + 1):
            t = self._seeded_ack_type(int(types[0] if len(types) == 1 else types[off - first]))
            if runs and runs[-1][2] == t and runs[-1][1] == off - 1:
                runs[-1] = (runs[-1][0], off, t)
            else:
                runs.append((off, off, t))
        for a, b, t in runs:
            for r in self._isolate(a, b):
                if r.state is S.AVAILABLE and r.delivery_count and self.config.seeded_bugs.has(bugs.SHARE_EXPIRED_ACK_ACCEPTED):
                    r.state, r.member_id = S.ACQUIRED, member_id
                if r.state is not S.ACQUIRED:
                    raise _AckError(
                        ErrorCode.invalid_record_state,
                        f"offsets {r.first_offset}..{r.last_offset} are {r.state.name}, not acquired",
                    )
                if r.member_id != member_id and not self.config.seeded_bugs.has(bugs.SHARE_FOREIGN_ACK_ACCEPTED):
                    raise _AckError(
                        ErrorCode.invalid_record_state,
                        f"offsets {r.first_offset}..{r.last_offset} are acquired by another member",
                    )
                if t == AcknowledgeType.RENEW:
                    r.lock_deadline_ms = now_ms + self.config.lock_duration_ms
                    continue
                r.state = next_state(r.state, ACK_EVENTS[AcknowledgeType(t)], r.delivery_count, self._count_limit)
                r.member_id = None
                r.lock_deadline_ms = None

    @property
    def _count_limit(self) -> int:
        """group.share.delivery.count.limit, or none at all with the seeded bug."""
        if self.config.seeded_bugs.has(bugs.SHARE_DELIVERY_LIMIT_IGNORED):
            return 2**31 - 1
        return self.config.delivery_count_limit

    def _seeded_ack_type(self, ack_type: int) -> int:
        """Seeded bugs that confuse acknowledge types (REJECT as RELEASE, RELEASE as ACCEPT)."""
        seeded = self.config.seeded_bugs
        if ack_type == AcknowledgeType.REJECT and seeded.has(bugs.SHARE_REJECT_AS_RELEASE):
            return int(AcknowledgeType.RELEASE)
        if ack_type == AcknowledgeType.RELEASE and seeded.has(bugs.SHARE_RELEASE_AS_ACCEPT):
            return int(AcknowledgeType.ACCEPT)
        return ack_type

    # -- KIP-1289: acknowledgements inside a producer transaction --------------------------

    def checkpoint(self) -> tuple:
        """Opaque copy of the in-flight state, for all-or-nothing staging across partitions."""
        return ([dataclasses.replace(r) for r in self._ranges], self._spso, self._speo)

    def restore(self, saved: tuple) -> None:
        ranges, self._spso, self._speo = saved
        self._ranges = [dataclasses.replace(r) for r in ranges]

    def stage_txn(
        self, member_id: str, batches: Iterable[tuple[int, int, Sequence[int]] | object],
        producer_id: int, producer_epoch: int, now_ms: int,
    ) -> AckResult:
        """TxnShareAcknowledge for this partition, all or nothing: Acquired records of
        `member_id` become TX_PENDING, tagged with the producer and the type to apply at
        commit. Types other than ACCEPT/REJECT are INVALID_RECORD_STATE (KIP-1289 corner case
        10); records not Acquired by the member (also TX_PENDING ones) INVALID_RECORD_STATE;
        malformed ranges INVALID_REQUEST. The acquisition lock keeps running."""
        saved = self.checkpoint()
        try:
            for batch in batches:
                first, last, types = _batch_fields(batch)
                self._stage_one(member_id, first, last, types, (producer_id, producer_epoch))
        except _AckError as err:
            self.restore(saved)
            return AckResult(err.code, err.message)
        return AckResult()

    def _stage_one(self, member_id: str, first: int, last: int, types: Sequence[int], producer: tuple[int, int]) -> None:
        if first > last or first < 0 or len(types) not in (1, last - first + 1):
            raise _AckError(ErrorCode.invalid_request, f"invalid acknowledgement batch {first}..{last}")
        bad = [int(t) for t in types if int(t) not in share_txn.TXN_ACK_TYPES]
        if bad:
            raise _AckError(ErrorCode.invalid_record_state, f"acknowledge type {bad[0]} cannot be staged in a transaction")
        if last < self._spso:
            return
        if last >= self._speo:
            raise _AckError(ErrorCode.invalid_request, f"offsets up to {last} were never acquired (SPEO {self._speo})")
        for off in range(max(first, self._spso), last + 1):
            t = int(types[0] if len(types) == 1 else types[off - first])
            (r,) = self._isolate(off, off) if self._index(off) is not None else (None,)
            if r is None or r.state is not S.ACQUIRED or r.member_id != member_id:
                state = "not in flight" if r is None else r.state.name
                raise _AckError(ErrorCode.invalid_record_state, f"offset {off} is {state}, not acquired by this member")
            r.state = next_state(r.state, Event.TXN_STAGE, r.delivery_count, self.config.delivery_count_limit)
            r.txn = (producer[0], producer[1], t)
        self._coalesce_pending()

    def _coalesce_pending(self) -> None:
        """Merge adjacent ranges that are equal but for their offsets (staging splits per offset)."""
        out: list[InFlightRange] = []
        for r in self._ranges:
            p = out[-1] if out else None
            if p is not None and p.last_offset + 1 == r.first_offset and (p.state, p.delivery_count, p.member_id,
                    p.lock_deadline_ms, p.txn) == (r.state, r.delivery_count, r.member_id, r.lock_deadline_ms, r.txn):
                p.last_offset = r.last_offset
            else:
                out.append(r)
        self._ranges = out

    def apply_txn_marker(self, producer_id: int, producer_epoch: int, committed: bool) -> list[StateChange]:
        """A WriteTxnMarkers for (producer_id, producer_epoch) reached this broker: resolve the
        TX_PENDING records it owns (share_txn.marker_resolves); everything else is untouched,
        so a duplicate or foreign marker is a no-op (corner cases 3, 5, 13, 14)."""
        changes: list[StateChange] = []
        for r in self._ranges:
            if r.state is not S.TX_PENDING or r.txn is None:
                continue
            if not share_txn.marker_resolves(r.txn[:2], producer_id, producer_epoch):
                continue
            if committed:
                staged = AcknowledgeType(r.txn[2])
                if staged is AcknowledgeType.REJECT and self.config.seeded_bugs.has(bugs.TXN_SHARE_REJECT_COMMITTED_AS_ACCEPT):
                    staged = AcknowledgeType.ACCEPT  # the deliberate bug (seeded_bugs.py)
                event = ACK_EVENTS[staged]
                r.state = next_state(r.state, event, r.delivery_count, self.config.delivery_count_limit)
                r.member_id = None
                r.lock_deadline_ms = None
            else:
                r.state = next_state(r.state, Event.TXN_ABORT, r.delivery_count, self.config.delivery_count_limit)
            r.txn = None
            changes.append(StateChange(r.first_offset, r.last_offset, r.state, r.delivery_count))
        if changes:
            self._advance()
        return changes

    def txn_pending(self) -> list[tuple[int, int, tuple[int, int, int]]]:
        """(first, last, (producer id, epoch, type)) of every TX_PENDING range."""
        return [(r.first_offset, r.last_offset, r.txn) for r in self._ranges if r.state is S.TX_PENDING and r.txn]

    def txn_pending_count(self) -> int:
        return sum(r.size for r in self._ranges if r.state is S.TX_PENDING)

    # -- timers and members -------------------------------------------------------------

    def tick(self, now_ms: int) -> list[StateChange]:
        """Expire acquisition locks whose deadline has passed: Acquired -> Available (delivery
        count kept) or Archived at the delivery-count limit."""
        changes: list[StateChange] = []
        if self.config.seeded_bugs.has(bugs.SHARE_LOCKS_NEVER_EXPIRE):
            return changes
        for r in self._ranges:
            if r.state in (S.ACQUIRED, S.TX_PENDING) and r.lock_deadline_ms is not None and r.lock_deadline_ms <= now_ms:
                self.txn_lock_expired += r.size if r.state is S.TX_PENDING else 0
                r.state = next_state(r.state, Event.LOCK_EXPIRED, r.delivery_count, self._count_limit)
                r.member_id = None
                r.lock_deadline_ms = None
                r.txn = None
                changes.append(StateChange(r.first_offset, r.last_offset, r.state, r.delivery_count))
        if changes:
            self._advance()
        return changes

    def release_member(self, member_id: str) -> list[StateChange]:
        """Release everything `member_id` holds (share session closed, member left)."""
        decrement = self.config.release_on_close_decrements_delivery_count
        changes: list[StateChange] = []
        for r in self._ranges:
            if r.state is S.ACQUIRED and r.member_id == member_id:
                if decrement:
                    r.state = next_state(r.state, Event.MEMBER_RELEASED, r.delivery_count, self.config.delivery_count_limit)
                    r.delivery_count = max(0, r.delivery_count - 1)
                else:
                    r.state = next_state(r.state, Event.RELEASE, r.delivery_count, self._count_limit)
                r.member_id = None
                r.lock_deadline_ms = None
                changes.append(StateChange(r.first_offset, r.last_offset, r.state, r.delivery_count))
        if changes:
            self._advance()
        return changes

    # -- persistence --------------------------------------------------------------------

    def state_batches(self) -> list[StateBatch]:
        """The durable view of [SPSO, SPEO) (WriteShareGroupState StateBatches).

        Acquisition is not persisted (KIP-932: the durable state of the in-flight example holds
        only offset 3's count, 5 Acknowledged and 6 Archived), so an Acquired range is written
        as it was before its acquisition: Available with delivery count - 1. Available ranges
        with delivery count 0 (never delivered) are left out; adjacent equal ranges are merged.
        """
        out: list[StateBatch] = []
        for r in self._ranges:
            state, count = r.state, r.delivery_count
            if state is S.TX_PENDING and self.config.seeded_bugs.has(bugs.TXN_SHARE_PENDING_PERSISTED):
                pass  # the deliberate bug (seeded_bugs.py): the pending state reaches the share coordinator
            elif state in (S.ACQUIRED, S.TX_PENDING):  # KIP-1289 corner case 1: in memory only
                state, count = S.AVAILABLE, max(0, count - 1)
            if state is S.AVAILABLE and count == 0:
                continue
            if out and out[-1].delivery_state == state and out[-1].delivery_count == count \
                    and out[-1].last_offset + 1 == r.first_offset:
                prev = out.pop()
                out.append(StateBatch(prev.first_offset, r.last_offset, int(state), count))
            else:
                out.append(StateBatch(r.first_offset, r.last_offset, int(state), count))
        return out

    def snapshot(self) -> ShareStateSnapshot:
        return ShareStateSnapshot(self._spso, self.state_epoch, self.leader_epoch, tuple(self.state_batches()))

    @classmethod
    def from_snapshot(
        cls, group_id: str, topic: str, partition: int, snap: ShareStateSnapshot, config: SharePartitionConfig | None = None,
        *, log: PartitionLog | None = None, now_ms: int | None = None, leader_epoch: int | None = None,
    ) -> "SharePartition":
        return cls.from_state(
            group_id, topic, partition, snap.start_offset, snap.state_batches, config,
            state_epoch=snap.state_epoch, leader_epoch=snap.leader_epoch if leader_epoch is None else leader_epoch,
            log=log, now_ms=now_ms,
        )

    def __repr__(self) -> str:
        body = ", ".join(
            f"{r.first_offset}-{r.last_offset}:{r.state.name}/{r.delivery_count}"
            + (f"@{r.member_id}" if r.member_id else "")
            for r in self._ranges
        )
        return f"SharePartition({self.group_id} {self.topic}-{self.partition} SPSO={self._spso} SPEO={self._speo} [{body}])"


def _state_batch(b) -> StateBatch:
    """A StateBatch from a tuple or any object with the four fields (e.g. the share
    coordinator's share_state_records.StateBatch)."""
    if isinstance(b, StateBatch):
        return b
    if isinstance(b, tuple | list):
        return StateBatch(*b)
    return StateBatch(int(b.first_offset), int(b.last_offset), int(b.delivery_state), int(b.delivery_count))


def _batch_fields(batch) -> tuple[int, int, Sequence[int]]:
    if isinstance(batch, tuple | list):
        first, last, types = batch
    else:
        first, last, types = batch.first_offset, batch.last_offset, batch.acknowledge_types
    if isinstance(types, int):
        types = [types]
    return int(first), int(last), list(types)


def _coalesce(taken: list[InFlightRange]) -> list[AcquiredRecords]:
    out: list[AcquiredRecords] = []
    for r in sorted(taken, key=lambda r: r.first_offset):
        if out and out[-1].last_offset + 1 == r.first_offset and out[-1].delivery_count == r.delivery_count:
            prev = out.pop()
            out.append(AcquiredRecords(prev.first_offset, r.last_offset, r.delivery_count))
        else:
            out.append(AcquiredRecords(r.first_offset, r.last_offset, r.delivery_count))
    return out


__all__ = [
    "ACK_EVENTS",
    "AckResult",
    "AcknowledgeType",
    "AcquiredRecords",
    "Event",
    "InFlightRange",
    "InvalidTransition",
    "LIMITED_EVENTS",
    "RecordState",
    "SharePartition",
    "ShareStateSnapshot",
    "StateBatch",
    "StateChange",
    "TRANSITIONS",
    "UNINITIALIZED_START_OFFSET",
    "aborted_batch_spans",
    "initial_start_offset",
    "next_state",
]
