"""One partition's log: whole v2 batches as bytes plus the offsets Kafka exposes.

Single-copy model: every replica of a partition shares this log, so the high
watermark equals the log end offset. Validation and offset assignment follow the
broker's leader-append path (validate, assign offsets, stamp the leader epoch and
max timestamp, keep the producer's bytes otherwise).

Seams for later work (kept deliberately small and explicit):

* transactions - `producer_state` (a `ProducerStateTracker`, e.g.
  `producer_state.ProducerStateManager`) validates and records batches that carry a
  producer id; `UntrackedProducers` (the default) answers as a broker with no producer
  state does. A client batch the tracker recognises as a retry (`DuplicateBatch`) is
  answered with the offsets it got the first time and not appended again. Transactional
  batches open an entry in `ongoing_transactions` (the one record of open transactions;
  the tracker reads it); `append_marker` validates the marker with the tracker, closes
  the entry (and indexes aborted ones) and tells the tracker (`on_marker`), so
  `last_stable_offset` and `aborted_transactions()` behave like Kafka's.
* share groups - `batches_from()`, `StoredBatch.record_offsets` and
  `offset_for_timestamp()` give record-level access without touching the bytes;
  `log_start_offset` moves only through `delete_records()`.

No I/O and no clock: callers pass `now_ms`.
"""

from __future__ import annotations

import abc

import bisect
from dataclasses import dataclass
from enum import IntEnum
from typing import Iterator, Sequence

from kio.schema.errors import ErrorCode

from reference_impl.model import seeded_bugs as bugs
from reference_impl.model.seeded_bugs import NO_BUGS, SeededBugs
from reference_impl.protocol import records as rec
from reference_impl.protocol.records import (
    BatchHeader,
    Compression,
    ControlType,
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordBatchError,
    RecordTooLargeError,
    TimestampType,
)

# ListOffsets special timestamps.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5

NO_LEADER_EPOCH = -1
INT64_MAX = (1 << 63) - 1


class IsolationLevel(IntEnum):
    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


class LogError(Exception):
    """A log operation that a broker answers with `error_code`."""

    error_code: ErrorCode = ErrorCode.unknown_server_error

    def __init__(self, message: str, error_code: ErrorCode | None = None) -> None:
        super().__init__(message)
        self.message = message
        if error_code is not None:
            self.error_code = error_code


class OffsetOutOfRangeError(LogError):
    error_code = ErrorCode.offset_out_of_range


class DuplicateBatch(Exception):
    """Raised by a producer-state tracker for a retry of a recently appended batch.

    Carries what Kafka answers for it: the offsets assigned the first time and, as
    `log_append_time`, the timestamp Kafka cached for the original batch (its max
    timestamp; Kafka puts that in the duplicate's response whatever the topic's
    timestamp type). Also importable as `producer_state.DuplicateBatch`.
    """

    def __init__(
        self, base_offset: int, last_offset: int, log_append_time: int, *, max_timestamp: int | None = None
    ) -> None:
        super().__init__(f"duplicate of the batch at offsets {base_offset}..{last_offset}")
        self.base_offset = base_offset
        self.last_offset = last_offset
        self.log_append_time = log_append_time
        self.max_timestamp = log_append_time if max_timestamp is None else max_timestamp


@dataclass(slots=True)
class LogConfig:
    """Topic configs the log honours (Kafka names in comments)."""

    max_message_bytes: int = 1_048_588  # max.message.bytes
    timestamp_type: TimestampType = TimestampType.CREATE_TIME  # message.timestamp.type
    timestamp_before_max_ms: int = INT64_MAX  # message.timestamp.before.max.ms
    timestamp_after_max_ms: int = INT64_MAX  # message.timestamp.after.max.ms
    compression: str = "producer"  # compression.type: producer|uncompressed|gzip|snappy|lz4|zstd
    compacted: bool = False  # cleanup.policy contains "compact": keys are required
    seeded_bugs: SeededBugs = NO_BUGS  # deliberate bugs (reference:bug=NAME; seeded_bugs.py)

    def target_compression(self, source: Compression) -> Compression:
        if self.compression == "producer":
            return source
        return Compression.parse(self.compression)


@dataclass(slots=True)
class StoredBatch:
    """A batch as stored: final bytes plus what reads and indexes need."""

    data: bytes
    header: BatchHeader
    # Per record, in batch order: absolute offset and effective timestamp.
    record_offsets: tuple[int, ...]
    record_timestamps: tuple[int, ...]
    append_time_ms: int

    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    @property
    def last_offset(self) -> int:
        return self.header.last_offset

    @property
    def next_offset(self) -> int:
        return self.header.last_offset + 1

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def max_timestamp(self) -> int:
        return self.header.max_timestamp

    @property
    def offset_of_max_timestamp(self) -> int | None:
        for off, ts in zip(self.record_offsets, self.record_timestamps):
            if ts == self.header.max_timestamp:
                return off
        return None

    @property
    def is_control(self) -> bool:
        return self.header.is_control

    @property
    def is_transactional(self) -> bool:
        return self.header.is_transactional

    @property
    def producer_id(self) -> int:
        return self.header.producer_id

    def decode(self) -> tuple[rec.Record, ...]:
        return rec.decode_records(self.data, self.header)


@dataclass(frozen=True, slots=True)
class AppendResult:
    base_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    max_timestamp: int
    record_count: int


@dataclass(frozen=True, slots=True)
class AbortedTransaction:
    producer_id: int
    first_offset: int
    last_offset: int  # offset of the ABORT marker


@dataclass(frozen=True, slots=True)
class ReadResult:
    records: bytes
    batches: tuple[StoredBatch, ...]
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    # None for READ_UNCOMMITTED (Kafka sends null), a tuple for READ_COMMITTED.
    aborted_transactions: tuple[AbortedTransaction, ...] | None


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    timestamp: int
    offset: int
    leader_epoch: int  # -1 when unknown


@dataclass(frozen=True, slots=True)
class ProducerSnapshot:
    """One active producer as DescribeProducers reports it (also importable as
    `producer_state.ProducerSnapshot`)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1 without an open transaction


class ProducerStateTracker(abc.ABC):
    """Seam for idempotence/transactions: called for every batch with a producer id.

    `validate` and `on_append` are what a tracker must answer; the other methods default to
    a tracker that keeps no producer state (`producer_state.ProducerStateManager` overrides
    all but `attach`): `attach(log)` (from the log's constructor), `validate_marker` (before a marker
    is written; raises LogError), `on_marker` (after a marker is stored), `tick(now_ms)`
    (timers), and for the handlers `active_producers()` (DescribeProducers),
    `has_ongoing_transaction` and `note_verified` (Produce's KIP-890 verification).
    """

    _log: "PartitionLog | None" = None

    @abc.abstractmethod
    def validate(self, log: "PartitionLog", header: BatchHeader, now_ms: int) -> None:
        """Raise LogError (e.g. OUT_OF_ORDER_SEQUENCE_NUMBER) to reject the batch, or
        DuplicateBatch for a retry of a batch already appended."""

    @abc.abstractmethod
    def on_append(self, log: "PartitionLog", batch: StoredBatch, now_ms: int) -> None:
        """Record the appended data batch (sequence numbers, epoch, ...); not called for
        control batches (see on_marker)."""

    def attach(self, log: "PartitionLog") -> None:
        """Called by PartitionLog.__init__: the log whose open transactions count."""
        self._log = log

    def validate_marker(
        self,
        log: "PartitionLog",
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        transaction_version: int | None = None,
    ) -> None:
        """Check a COMMIT/ABORT marker before it is written; raise LogError to refuse it."""

    def on_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        coordinator_epoch: int,
        *,
        timestamp_ms: int | None = None,
    ) -> None:
        """A COMMIT/ABORT marker was stored."""

    def tick(self, now_ms: int) -> object:
        """Timers (producer id expiration)."""
        return None

    def active_producers(self) -> Sequence[ProducerSnapshot]:
        """DescribeProducers' producer snapshots: none without producer state."""
        return ()

    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        """An open transaction of this producer on the partition (without epochs: any)."""
        return self._log is not None and producer_id in self._log.ongoing_transactions

    def note_verified(self, producer_id: int, producer_epoch: int, *, supports_epoch_bump: bool) -> None:
        """The produce path had the coordinator verify the partition (KIP-890)."""


class UntrackedProducers(ProducerStateTracker):
    """No producer state: what a broker answers for a producer id it knows nothing of.

    Idempotent (non-transactional) batches are accepted whatever their sequence (a
    broker accepts the first batch of an unknown producer id), without duplicate
    detection. Transactional batches are refused with INVALID_TXN_STATE, the answer
    of a broker that cannot verify the partition is part of an ongoing transaction.
    The transactions work replaces this with real producer state.
    """

    def validate(self, log: "PartitionLog", header: BatchHeader, now_ms: int) -> None:
        if header.is_transactional:
            raise LogError(
                f"no ongoing transaction of producer {header.producer_id} includes {log.name}",
                ErrorCode.invalid_txn_state,
            )

    def on_append(self, log: "PartitionLog", batch: StoredBatch, now_ms: int) -> None:
        return None


class PartitionLog:
    def __init__(
        self,
        topic: str,
        partition: int,
        config: LogConfig | None = None,
        *,
        leader_epoch: int = 0,
        producer_state: ProducerStateTracker | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.config = config or LogConfig()
        self.leader_epoch = leader_epoch  # current epoch of the partition's leader
        self.producer_state: ProducerStateTracker = (
            producer_state if producer_state is not None else UntrackedProducers()
        )
        self._batches: list[StoredBatch] = []
        self._last_offsets: list[int] = []  # parallel to _batches, for bisect
        self._log_start_offset = 0
        self._log_end_offset = 0
        # (epoch, start offset) whenever the epoch of appended batches changes.
        self.epoch_cache: list[tuple[int, int]] = []
        # Transactions seam: producer id -> first offset of its open transaction.
        self.ongoing_transactions: dict[int, int] = {}
        self._aborted: list[AbortedTransaction] = []
        # Bumped on every change; waiters compare it.
        self.version = 0
        self.producer_state.attach(self)

    # -- offsets ---------------------------------------------------------------------

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        # Single-copy model: everything appended is replicated.
        return self._log_end_offset

    @property
    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open transaction, or None."""
        return min(self.ongoing_transactions.values()) if self.ongoing_transactions else None

    @property
    def last_stable_offset(self) -> int:
        """LSO: below every open transaction and never above the high watermark."""
        unstable = self.first_unstable_offset
        hw = self.high_watermark
        if self.config.seeded_bugs.has(bugs.OPEN_TXN_NOT_HOLDING_LSO):
            return hw
        return hw if unstable is None else min(unstable, hw)

    def fetch_upper_bound(self, isolation: IsolationLevel | int) -> int:
        if self.config.seeded_bugs.has(bugs.READ_COMMITTED_READS_UNCOMMITTED):
            return self.high_watermark
        return self.last_stable_offset if int(isolation) == IsolationLevel.READ_COMMITTED else self.high_watermark

    @property
    def batches(self) -> tuple[StoredBatch, ...]:
        return tuple(self._batches)

    @property
    def size_in_bytes(self) -> int:
        return sum(b.size for b in self._batches)

    def epoch_for_offset(self, offset: int) -> int:
        epoch = NO_LEADER_EPOCH
        for e, start in self.epoch_cache:
            if start <= offset:
                epoch = e
            else:
                break
        return epoch

    # -- appending -------------------------------------------------------------------

    def append_from_client(self, batch: bytes, *, now_ms: int) -> AppendResult:
        """Validate one client batch and append it (the leader path of a Produce).

        Raises RecordBatchError (CORRUPT_MESSAGE, INVALID_RECORD, INVALID_TIMESTAMP,
        MESSAGE_TOO_LARGE) or LogError from the producer-state seam. A batch the seam
        recognises as a retry is not appended: the result carries the original offsets.
        """
        if len(batch) < rec.HEADER_SIZE_UP_TO_MAGIC or rec.magic_of(batch) != rec.MAGIC_V2:
            raise InvalidRecordError("only magic v2 record batches can be appended")
        base_offset = int.from_bytes(batch[0:8], "big", signed=True)
        if base_offset != 0:
            raise InvalidRecordError(f"the base offset of a produced batch must be 0, not {base_offset}")
        if len(batch) > self.config.max_message_bytes:
            raise RecordTooLargeError(
                f"batch of {len(batch)} bytes exceeds max.message.bytes {self.config.max_message_bytes}"
            )
        if not rec.check_crc(batch) and not self.config.seeded_bugs.has(bugs.CRC_NOT_CHECKED):
            raise CorruptRecordError(f"record batch for {self.name} is corrupt (CRC mismatch or too short)")
        header = rec.parse_batch_header(batch)
        if header.size_in_bytes != len(batch):
            raise CorruptRecordError("record batch length does not match its size")
        rec.check_offsets(header)
        if header.is_control:
            raise InvalidRecordError("clients may not write control batches")
        if header.has_producer_id and header.base_sequence < 0:
            raise InvalidRecordError(
                f"invalid sequence number {header.base_sequence} for producer {header.producer_id}"
            )
        source = header.compression
        records = rec.decode_records(batch, header)
        self._validate_records(header, records, now_ms)
        if header.has_producer_id:
            dup: DuplicateBatch | None = None
            try:
                self.producer_state.validate(self, header, now_ms)
            except DuplicateBatch as found:
                # the seeded bug appends the retry a second time
                dup = None if self.config.seeded_bugs.has(bugs.IDEMPOTENT_DUPLICATE_APPENDED) else found
            except LogError as err:
                if not self._seeded_accept(err):
                    raise self._seeded_duplicate(err, header) from None
            if dup is not None:
                return AppendResult(
                    base_offset=dup.base_offset,
                    last_offset=dup.last_offset,
                    log_append_time=dup.log_append_time,
                    log_start_offset=self._log_start_offset,
                    max_timestamp=dup.max_timestamp,
                    record_count=dup.last_offset - dup.base_offset + 1,
                )

        target = self.config.target_compression(source)
        consecutive = all(r.offset_delta == i for i, r in enumerate(records))
        ts_type = self.config.timestamp_type
        log_append = ts_type is TimestampType.LOG_APPEND_TIME
        base = self._log_end_offset
        known: tuple[tuple[int, ...], tuple[int, ...]] | None = None
        if target != source or (source is not Compression.NONE and not consecutive):
            # Broker rebuilds the batch (recompression or bad inner offsets).
            data = rec.rebuild_batch(
                header,
                records,
                base_offset=base,
                compression=target,
                timestamp_type=ts_type,
                log_append_time=now_ms if log_append else None,
                partition_leader_epoch=self.leader_epoch,
            )
        else:
            max_ts = now_ms if log_append else max([rec.NO_TIMESTAMP, *(r.timestamp for r in records)])
            data = rec.with_max_timestamp(batch, ts_type, max_ts)
            data = rec.with_partition_leader_epoch(rec.with_base_offset(data, base), self.leader_epoch)
            known = (
                tuple(base + r.offset_delta for r in records),
                tuple(now_ms if log_append else r.timestamp for r in records),
            )
        stored = self._store(data, now_ms, known)
        return AppendResult(
            base_offset=stored.base_offset,
            last_offset=stored.last_offset,
            log_append_time=now_ms if log_append else -1,
            log_start_offset=self._log_start_offset,
            max_timestamp=stored.max_timestamp,
            record_count=len(stored.record_offsets),
        )

    def _seeded_duplicate(self, err: LogError, header: BatchHeader) -> LogError:
        """The seeded unbounded window: a retry of any batch still in the log (not only the
        last 5) is a duplicate, answered DUPLICATE_SEQUENCE_NUMBER."""
        if err.error_code != ErrorCode.out_of_order_sequence_number or not self.config.seeded_bugs.has(
                bugs.IDEMPOTENT_WINDOW_UNBOUNDED):
            return err
        if any(b.header.producer_id == header.producer_id and b.header.producer_epoch == header.producer_epoch
               and b.header.base_sequence == header.base_sequence for b in self._batches):
            return LogError(f"duplicate sequence {header.base_sequence} (seeded bug)", ErrorCode.duplicate_sequence_number)
        return err

    def _seeded_accept(self, err: LogError) -> bool:
        """Seeded bugs that append a batch the producer-state check refused."""
        seeded = self.config.seeded_bugs
        return (err.error_code == ErrorCode.out_of_order_sequence_number and seeded.has(bugs.OUT_OF_ORDER_SEQUENCE_ACCEPTED)) or (
            err.error_code == ErrorCode.invalid_producer_epoch and seeded.has(bugs.FENCED_PRODUCE_EPOCH_ACCEPTED))

    def _validate_records(self, header: BatchHeader, records: tuple[rec.Record, ...], now_ms: int) -> None:
        errors: list[tuple[int, str]] = []
        bad_timestamp = False
        cfg = self.config
        batch_log_append = header.timestamp_type is TimestampType.LOG_APPEND_TIME
        for i, r in enumerate(records):
            if cfg.compacted and r.key is None:
                errors.append((i, f"compacted topic {self.topic} requires a key on every record"))
                continue
            if cfg.timestamp_type is TimestampType.CREATE_TIME and r.timestamp != rec.NO_TIMESTAMP:
                diff = now_ms - r.timestamp
                if diff > cfg.timestamp_before_max_ms or -diff > cfg.timestamp_after_max_ms:
                    bad_timestamp = True
                    errors.append(
                        (
                            i,
                            f"timestamp {r.timestamp} of record {i} is outside "
                            f"[{now_ms - cfg.timestamp_before_max_ms}, {now_ms + cfg.timestamp_after_max_ms}]",
                        )
                    )
            elif batch_log_append:
                bad_timestamp = True
                errors.append((i, "producers may not set the LogAppendTime timestamp type"))
        if errors:
            if bad_timestamp:
                raise InvalidTimestampError("one or more records have an invalid timestamp", errors)
            raise InvalidRecordError(f"{len(errors)} record(s) rejected", errors)

    def append_stored(self, batch: bytes, *, now_ms: int) -> StoredBatch:
        """Append a batch built by the broker itself (e.g. transaction markers) at the
        log end offset; the base offset and leader epoch are overwritten."""
        data = rec.with_partition_leader_epoch(rec.with_base_offset(batch, self._log_end_offset), self.leader_epoch)
        return self._store(data, now_ms)

    def append_marker(
        self,
        control_type: ControlType,
        *,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        now_ms: int,
        transaction_version: int | None = None,
    ) -> StoredBatch:
        """Write a COMMIT/ABORT marker for `producer_id` (transactions seam).

        The producer-state tracker may refuse it first (LogError: INVALID_PRODUCER_EPOCH
        for an older epoch, TRANSACTION_COORDINATOR_FENCED for an older coordinator
        epoch); `transaction_version` >= 2 applies KIP-1228's stricter epoch check.
        """
        self.producer_state.validate_marker(self, producer_id, producer_epoch, coordinator_epoch, transaction_version)
        data = rec.build_control_batch(
            control_type,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            timestamp_ms=now_ms,
        )
        return self.append_stored(data, now_ms=now_ms)

    def _store(
        self, data: bytes, now_ms: int, known: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    ) -> StoredBatch:
        header = rec.parse_batch_header(data)
        if known is None:
            records = rec.decode_records(data, header)
            known = (tuple(r.offset for r in records), tuple(r.timestamp for r in records))
        stored = StoredBatch(
            data=data,
            header=header,
            record_offsets=known[0],
            record_timestamps=known[1],
            append_time_ms=now_ms,
        )
        if not self.epoch_cache or header.partition_leader_epoch > self.epoch_cache[-1][0]:
            if header.partition_leader_epoch >= 0:
                self.epoch_cache.append((header.partition_leader_epoch, header.base_offset))
        self._batches.append(stored)
        self._last_offsets.append(stored.last_offset)
        self._log_end_offset = stored.next_offset
        marker = self._track_transactions(stored)
        if header.has_producer_id:
            if not header.is_control:
                self.producer_state.on_append(self, stored, now_ms)
            elif marker is not None:
                ctype, coordinator_epoch = marker
                self.producer_state.on_marker(
                    header.producer_id,
                    header.producer_epoch,
                    ctype is ControlType.COMMIT,
                    coordinator_epoch,
                    timestamp_ms=stored.record_timestamps[0] if stored.record_timestamps else now_ms,
                )
        self.version += 1
        return stored

    def _track_transactions(self, stored: StoredBatch) -> tuple[ControlType, int] | None:
        """Open/close `ongoing_transactions`; returns (type, coordinator epoch) of a marker."""
        header = stored.header
        if not header.is_transactional:
            return None
        pid = header.producer_id
        if not header.is_control:
            self.ongoing_transactions.setdefault(pid, stored.base_offset)
            return None
        first = self.ongoing_transactions.pop(pid, None)
        records = stored.decode()
        if not records:
            return None
        ctype, coordinator_epoch = rec.parse_control_record(records[0])
        if ctype is ControlType.ABORT and first is not None:
            self._aborted.append(AbortedTransaction(pid, first, stored.base_offset))
        return ctype, coordinator_epoch

    # -- timers ----------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Timers of the log's producer state (producer id expiration)."""
        self.producer_state.tick(now_ms)

    # -- reading ---------------------------------------------------------------------

    def check_fetch_offset(self, fetch_offset: int) -> None:
        past_end_ok = self.config.seeded_bugs.has(bugs.FETCH_PAST_END_NO_ERROR)
        if fetch_offset < self._log_start_offset or (fetch_offset > self._log_end_offset and not past_end_ok):
            raise OffsetOutOfRangeError(
                f"offset {fetch_offset} is outside [{self._log_start_offset}, {self._log_end_offset}] of {self.name}"
            )

    def _first_index_from(self, offset: int) -> int:
        return bisect.bisect_left(self._last_offsets, offset)

    def batches_from(self, offset: int, upper_bound: int | None = None) -> Iterator[StoredBatch]:
        """Whole batches holding offsets >= `offset`, stopping before `upper_bound`."""
        for b in self._batches[self._first_index_from(offset) :]:
            if upper_bound is not None and b.base_offset >= upper_bound:
                return
            yield b

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        isolation: IsolationLevel | int = IsolationLevel.READ_UNCOMMITTED,
        *,
        min_one_message: bool = True,
    ) -> ReadResult:
        """Whole batches from the one holding `fetch_offset`, up to `max_bytes`; the
        first batch is returned even when larger if `min_one_message`."""
        self.check_fetch_offset(fetch_offset)
        upper = self.fetch_upper_bound(isolation)
        taken: list[StoredBatch] = []
        size = 0
        for b in self.batches_from(fetch_offset, upper):
            if size + b.size > max_bytes:
                if not taken and min_one_message:
                    taken.append(b)
                break
            taken.append(b)
            size += b.size
        aborted: tuple[AbortedTransaction, ...] | None = None
        if int(isolation) == IsolationLevel.READ_COMMITTED:
            end = taken[-1].next_offset if taken else fetch_offset
            aborted = self.aborted_transactions(fetch_offset, end)
            if self.config.seeded_bugs.has(bugs.ABORTED_TXNS_MISSING_FROM_FETCH):
                aborted = ()
            if self.config.seeded_bugs.has(bugs.ABORTED_TXN_BEFORE_FETCH_UNLISTED):
                aborted = tuple(a for a in aborted if a.first_offset >= fetch_offset)
        return ReadResult(
            records=b"".join(b.data for b in taken),
            batches=tuple(taken),
            high_watermark=self.high_watermark,
            last_stable_offset=self.last_stable_offset,
            log_start_offset=self._log_start_offset,
            aborted_transactions=aborted,
        )

    def bytes_available(self, fetch_offset: int, isolation: IsolationLevel | int, max_bytes: int | None = None) -> int:
        """Bytes a read at fetch_offset would return now (for Fetch min_bytes)."""
        if fetch_offset < self._log_start_offset or fetch_offset > self._log_end_offset:
            return 0
        total = 0
        for b in self.batches_from(fetch_offset, self.fetch_upper_bound(isolation)):
            total += b.size
            if max_bytes is not None and total >= max_bytes:
                return max_bytes
        return total

    def aborted_transactions(self, start_offset: int, end_offset: int) -> tuple[AbortedTransaction, ...]:
        """Aborted transactions overlapping [start_offset, end_offset)."""
        return tuple(
            a for a in self._aborted if a.last_offset >= start_offset and a.first_offset < end_offset
        )

    # -- offsets by timestamp ----------------------------------------------------------

    def offset_for_timestamp(
        self, timestamp: int, isolation: IsolationLevel | int | None = IsolationLevel.READ_UNCOMMITTED
    ) -> TimestampAndOffset | None:
        """ListOffsets semantics; None means "no such offset" (answered as -1/-1).

        `isolation` None is a replica/debug request: bounded by the log end offset.
        """
        if isolation is None:
            last_fetchable = self._log_end_offset
        else:
            last_fetchable = self.fetch_upper_bound(isolation)
        if self.config.seeded_bugs.has(bugs.LIST_OFFSETS_COMMITTED_RETURNS_HW):
            last_fetchable = self.high_watermark
        if timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(rec.NO_TIMESTAMP, last_fetchable, self.leader_epoch)
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return TimestampAndOffset(
                rec.NO_TIMESTAMP, self._log_start_offset, self.epoch_for_offset(self._log_start_offset)
            )
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return TimestampAndOffset(rec.NO_TIMESTAMP, -1, -1)
        if timestamp == MAX_TIMESTAMP:
            found = self._max_timestamp_offset()
        elif timestamp >= 0:
            found = self._search_timestamp(timestamp)
        else:
            raise LogError(f"unsupported special timestamp {timestamp}", ErrorCode.unsupported_version)
        if found is None or found.offset >= last_fetchable:
            return None
        return found

    def _max_timestamp_offset(self) -> TimestampAndOffset | None:
        best: StoredBatch | None = None
        for b in self._batches:
            if best is None or b.max_timestamp > best.max_timestamp:
                best = b
        if best is None:
            return None
        off = best.offset_of_max_timestamp
        if off is None:
            return None
        epoch = best.header.partition_leader_epoch
        return TimestampAndOffset(best.max_timestamp, off, epoch if epoch >= 0 else -1)

    def _search_timestamp(self, target: int) -> TimestampAndOffset | None:
        for b in self.batches_from(self._log_start_offset):
            if b.max_timestamp < target:
                continue
            for off, ts in zip(b.record_offsets, b.record_timestamps):
                if ts >= target and off >= self._log_start_offset:
                    epoch = b.header.partition_leader_epoch
                    return TimestampAndOffset(ts, off, epoch if epoch >= 0 else -1)
        return None

    # -- retention -------------------------------------------------------------------

    def delete_records(self, offset: int) -> int:
        """Move the log start offset forward (DeleteRecords); -1 means the high
        watermark. Returns the new log start offset (low watermark)."""
        if offset == -1:
            offset = self.high_watermark
        if offset < 0 or offset > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot delete {self.name} before {offset}: high watermark is {self.high_watermark}"
            )
        if offset > self._log_start_offset:
            self._log_start_offset = offset
            keep = self._first_index_from(offset)
            del self._batches[:keep]
            del self._last_offsets[:keep]
            self._aborted = [a for a in self._aborted if a.last_offset >= offset]
            self.version += 1
        return self._log_start_offset


__all__ = [
    "AbortedTransaction",
    "AppendResult",
    "DuplicateBatch",
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "IsolationLevel",
    "LATEST_TIERED_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "LogConfig",
    "LogError",
    "MAX_TIMESTAMP",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "ProducerStateTracker",
    "ReadResult",
    "RecordBatchError",
    "StoredBatch",
    "TimestampAndOffset",
    "UntrackedProducers",
]
