"""Per-partition producer state: idempotence, producer epochs, duplicate batches.

One `ProducerStateManager` per partition log (it implements
`partition_log.ProducerStateTracker`). Behaviour follows Kafka 4.x's storage module
(ProducerStateManager, ProducerAppendInfo, ProducerStateEntry, and the producer-state
part of UnifiedLog's leader append); the rules, in the order a client batch meets them:

1. Duplicate: the batch has the producer's current epoch and exactly the first/last
   sequence of one of the producer's last 5 batches on this partition -> `DuplicateBatch`
   (the log answers success with the offsets assigned the first time; nothing appended).
   An older retry (outside the 5-batch window) is not recognised and fails rule 4.
2. Transactional batch while this partition holds no open transaction of the producer
   at the batch's epoch: an epoch below the partition's one -> INVALID_PRODUCER_EPOCH
   (Kafka 4.x answers Produce with 47, never PRODUCER_FENCED; the coordinator's
   PRODUCER_FENCED is mapped to 47 on the produce path as well). Verifying the partition
   with the transaction coordinator (KIP-890) is the produce handler's job.
3. Epoch: below the producer's current epoch on this partition -> INVALID_PRODUCER_EPOCH.
4. Sequence:
   * a new (higher) epoch must start at sequence 0 -> else OUT_OF_ORDER_SEQUENCE_NUMBER;
     a producer id this partition holds no state for (never seen, or expired) is
     accepted at any sequence (Kafka >= 2.5, KIP-360: no UNKNOWN_PRODUCER_ID any more),
     except a transactional batch of a transaction version 2 client that the produce
     path verified with the coordinator (`note_verified`): it must start at 0;
   * same epoch: first sequence must be last sequence + 1, wrapping from 2^31-1 to 0;
     after a marker bumped the epoch (no batch at that epoch yet) only 0 follows;
     anything else -> OUT_OF_ORDER_SEQUENCE_NUMBER.
5. A non-transactional batch while the producer's transaction is open here ->
   INVALID_TXN_STATE.

Markers: `validate_marker` refuses a marker whose epoch is older than the producer's
(INVALID_PRODUCER_EPOCH; with transaction version >= 2 also an equal epoch unless it is a
retry of an already written marker, KIP-1228) or whose coordinator epoch is older than
the last one seen (TRANSACTION_COORDINATOR_FENCED). `on_marker` makes the marker's epoch
the producer's current epoch (older epochs are fenced from then on; a changed epoch
forgets the cached batches) and records the coordinator epoch and timestamp.

Expiry (`producer.id.expiration.ms`, default 1 day): a producer without an open
transaction whose last timestamp (max timestamp of its last batch, or its last marker's
timestamp, as Kafka keeps it) is that old is forgotten. Kafka checks every
`producer.id.expiration.check.interval.ms` (default 10 minutes); `tick(now_ms)` does the
same, `remove_expired_producers(now_ms)` checks at once.

Open transactions have one source of truth: `PartitionLog.ongoing_transactions`
(producer id -> first offset), kept by the log when transactional data and markers are
stored. The manager reads it through the log it is attached to (`attach`, called by
`PartitionLog.__init__`).

No I/O, no clock: every time comes in as an argument.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Iterable, Protocol

from kio.schema.errors import ErrorCode

from reference_impl.model.partition_log import (
    DuplicateBatch,
    LogError,
    PartitionLog,
    ProducerSnapshot,
    ProducerStateTracker,
    StoredBatch,
)
from reference_impl.protocol.records import NO_PRODUCER_EPOCH, NO_SEQUENCE, NO_TIMESTAMP, BatchHeader

NUM_BATCHES_TO_RETAIN = 5  # ProducerStateEntry.NUM_BATCHES_TO_RETAIN
INT32_MAX = (1 << 31) - 1
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms
DEFAULT_EXPIRATION_CHECK_INTERVAL_MS = 600_000  # producer.id.expiration.check.interval.ms


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """next_seq directly follows last_seq (int32 sequences wrap to 0 after 2^31-1)."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


def sequence_after(seq: int, delta: int) -> int:
    """seq + delta on the wrapping sequence space."""
    return (seq + delta) % (1 << 31)


class ProducerExpirySettings(Protocol):
    """The producer id expiry settings a config carries (BrokerConfig, ProducerStateConfig)."""

    producer_id_expiration_ms: int
    producer_id_expiration_check_interval_ms: int


@dataclass(frozen=True, slots=True)
class ProducerStateConfig:
    """Broker configs the manager honours (Kafka names in comments)."""

    producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS  # producer.id.expiration.ms
    # producer.id.expiration.check.interval.ms
    producer_id_expiration_check_interval_ms: int = DEFAULT_EXPIRATION_CHECK_INTERVAL_MS

    @classmethod
    def of(cls, config: ProducerExpirySettings | None = None) -> "ProducerStateConfig":
        """This config from itself, None (defaults) or another config carrying the same
        settings (a BrokerConfig)."""
        if config is None:
            return cls()
        if isinstance(config, cls):
            return config
        return cls(
            producer_id_expiration_ms=int(config.producer_id_expiration_ms),
            producer_id_expiration_check_interval_ms=int(config.producer_id_expiration_check_interval_ms),
        )


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """What the partition remembers of one appended batch (for duplicate detection)."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int  # max timestamp of the stored batch


@dataclass(slots=True)
class ProducerStateEntry:
    """One producer id's state on one partition."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = NO_TIMESTAMP
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))

    @property
    def is_empty(self) -> bool:
        return not self.batches

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def set_epoch(self, epoch: int) -> None:
        """A different epoch starts afresh: the cached batches belong to the old one."""
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch

    def add_batch(self, epoch: int, meta: BatchMetadata) -> None:
        self.set_epoch(epoch)
        self.batches.append(meta)  # deque(maxlen=5) drops the oldest
        self.last_timestamp = meta.timestamp

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for meta in self.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        return None


class ProducerStateManager(ProducerStateTracker):
    """Producer state of one partition (a `partition_log.ProducerStateTracker`)."""

    def __init__(self, config: ProducerExpirySettings | None = None) -> None:
        self.config = ProducerStateConfig.of(config)
        self._producers: dict[int, ProducerStateEntry] = {}
        self._log: PartitionLog | None = None
        self._next_expiration_check: int | None = None
        # producer id -> (epoch, supports epoch bump) of a KIP-890 verification that the
        # produce path completed for the producer's next transactional batch here.
        self._verified: dict[int, tuple[int, bool]] = {}

    # -- wiring (`attach`, inherited, keeps the log whose open transactions count) -------

    def _ongoing(self, log: PartitionLog | None = None) -> dict[int, int]:
        log = log if log is not None else self._log
        return log.ongoing_transactions if log is not None else {}

    # -- queries ----------------------------------------------------------------------

    def entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    @property
    def producer_ids(self) -> tuple[int, ...]:
        return tuple(sorted(self._producers))

    @property
    def producer_count(self) -> int:
        return len(self._producers)

    def current_txn_first_offset(self, producer_id: int) -> int | None:
        return self._ongoing().get(producer_id)

    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        """An open transaction of this producer at this epoch on the partition (a
        produce path asks this to decide whether the coordinator must verify)."""
        entry = self._producers.get(producer_id)
        return (
            entry is not None
            and entry.producer_epoch == producer_epoch
            and producer_id in self._ongoing()
        )

    def active_producers(self) -> list[ProducerSnapshot]:
        ongoing = self._ongoing()
        return [
            ProducerSnapshot(
                producer_id=pid,
                producer_epoch=e.producer_epoch,
                last_sequence=e.last_seq,
                last_timestamp=e.last_timestamp,
                coordinator_epoch=e.coordinator_epoch,
                current_txn_start_offset=ongoing.get(pid, -1),
            )
            for pid, e in sorted(self._producers.items())
        ]

    # -- KIP-890 verification -----------------------------------------------------------

    def note_verified(self, producer_id: int, producer_epoch: int, *, supports_epoch_bump: bool) -> None:
        """The produce path had the coordinator verify (or add) this partition for the
        producer's transaction; `supports_epoch_bump` for a transaction version 2 client.
        Kafka then refuses a first transactional batch with a sequence other than 0 from
        a producer the partition holds no state for. Forgotten at the next append or
        marker of the producer."""
        self._verified[producer_id] = (producer_epoch, supports_epoch_bump)

    # -- client appends ---------------------------------------------------------------

    def validate(self, log: PartitionLog, header: BatchHeader, now_ms: int) -> None:
        """Check one client batch; raise DuplicateBatch or LogError (see module doc)."""
        if self._log is None:
            self._log = log
        pid, epoch = header.producer_id, header.producer_epoch
        first_seq, last_seq = header.base_sequence, header.last_sequence
        entry = self._producers.get(pid)
        ongoing = self._ongoing(log)

        if entry is not None:
            dup = entry.find_duplicate(epoch, first_seq, last_seq)
            if dup is not None:
                raise DuplicateBatch(dup.first_offset, dup.last_offset, dup.timestamp, max_timestamp=dup.timestamp)

        current_epoch = entry.producer_epoch if entry is not None else NO_PRODUCER_EPOCH
        if epoch < current_epoch:
            kind = "transactional" if header.is_transactional else "idempotent"
            raise LogError(
                f"epoch {epoch} of {kind} producer {pid} on {log.name} is older than its current epoch {current_epoch}",
                ErrorCode.invalid_producer_epoch,
            )

        verified = self._verified.get(pid)
        if (
            header.is_transactional
            and verified is not None
            and verified[1]
            and first_seq != 0
            and (entry is None or entry.is_empty)
        ):
            raise LogError(
                f"transaction version 2 producer {pid} has no state on {log.name}: its first batch must have "
                f"sequence 0, not {first_seq}",
                ErrorCode.out_of_order_sequence_number,
            )

        if epoch != current_epoch:
            if first_seq != 0 and current_epoch != NO_PRODUCER_EPOCH:
                raise LogError(
                    f"producer {pid} on {log.name}: the first batch of new epoch {epoch} must have sequence 0, "
                    f"not {first_seq} (current epoch {current_epoch})",
                    ErrorCode.out_of_order_sequence_number,
                )
        else:
            current_last = entry.last_seq if entry is not None else NO_SEQUENCE
            if current_epoch != NO_PRODUCER_EPOCH and not in_sequence(current_last, first_seq):
                raise LogError(
                    f"out of order sequence for producer {pid} on {log.name}: {first_seq} does not follow "
                    f"{current_last} (epoch {epoch})",
                    ErrorCode.out_of_order_sequence_number,
                )

        if pid in ongoing and not header.is_transactional:
            raise LogError(
                f"producer {pid} sent a non-transactional batch to {log.name} while its transaction "
                f"(first offset {ongoing[pid]}) is open",
                ErrorCode.invalid_txn_state,
            )

    def on_append(self, log: PartitionLog, batch: StoredBatch, now_ms: int) -> None:
        """Record a stored data batch (client or broker written)."""
        if self._log is None:
            self._log = log
        header = batch.header
        if header.is_control:
            return  # markers arrive through on_marker
        pid = header.producer_id
        self._verified.pop(pid, None)
        entry = self._producers.get(pid)
        if entry is None:
            entry = self._producers[pid] = ProducerStateEntry(pid)
        entry.add_batch(
            header.producer_epoch,
            BatchMetadata(
                first_seq=header.base_sequence,
                last_seq=header.last_sequence,
                first_offset=batch.base_offset,
                last_offset=batch.last_offset,
                timestamp=batch.max_timestamp,
            ),
        )

    # -- markers ----------------------------------------------------------------------

    def validate_marker(
        self,
        log: PartitionLog,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        transaction_version: int | None = None,
    ) -> None:
        """Check a COMMIT/ABORT marker before it is written (coordinator origin)."""
        entry = self._producers.get(producer_id)
        if entry is None:
            return
        current = entry.producer_epoch
        tv = transaction_version or 0
        stale = producer_epoch <= current if tv >= 2 else producer_epoch < current
        if stale:
            retry = tv >= 2 and producer_epoch == current and producer_id not in self._ongoing(log)
            if not retry:
                raise LogError(
                    f"marker epoch {producer_epoch} of producer {producer_id} on {log.name} is "
                    f"{'<=' if tv >= 2 else '<'} its current epoch {current} (TV{tv})",
                    ErrorCode.invalid_producer_epoch,
                )
        if entry.coordinator_epoch > coordinator_epoch:
            raise LogError(
                f"marker of producer {producer_id} on {log.name} has coordinator epoch {coordinator_epoch}, "
                f"older than {entry.coordinator_epoch}",
                ErrorCode.transaction_coordinator_fenced,
            )

    def on_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        coordinator_epoch: int,
        *,
        timestamp_ms: int | None = None,
    ) -> None:
        """A COMMIT/ABORT marker was written: its epoch becomes the producer's epoch."""
        self._verified.pop(producer_id, None)
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = self._producers[producer_id] = ProducerStateEntry(producer_id)
        entry.set_epoch(producer_epoch)
        entry.coordinator_epoch = coordinator_epoch
        if timestamp_ms is not None:
            entry.last_timestamp = timestamp_ms

    # -- expiry -----------------------------------------------------------------------

    def is_expired(self, producer_id: int, now_ms: int) -> bool:
        entry = self._producers.get(producer_id)
        if entry is None or producer_id in self._ongoing():
            return False
        return now_ms - entry.last_timestamp >= self.config.producer_id_expiration_ms

    def remove_expired_producers(self, now_ms: int) -> list[int]:
        """Forget idle producers without an open transaction; returns their ids."""
        gone = [pid for pid in sorted(self._producers) if self.is_expired(pid, now_ms)]
        for pid in gone:
            del self._producers[pid]
            self._verified.pop(pid, None)
        return gone

    def tick(self, now_ms: int) -> list[int]:
        """Timer: expiry runs once per check interval (the first one interval after the
        first tick, as Kafka schedules it after start-up)."""
        interval = self.config.producer_id_expiration_check_interval_ms
        if self._next_expiration_check is None:
            self._next_expiration_check = now_ms + interval
        if now_ms < self._next_expiration_check:
            return []
        self._next_expiration_check = now_ms + interval
        return self.remove_expired_producers(now_ms)

    def remove(self, producer_ids: Iterable[int]) -> None:
        for pid in producer_ids:
            self._producers.pop(pid, None)


__all__ = [
    "BatchMetadata",
    "DEFAULT_EXPIRATION_CHECK_INTERVAL_MS",
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "DuplicateBatch",
    "NUM_BATCHES_TO_RETAIN",
    "ProducerSnapshot",
    "ProducerExpirySettings",
    "ProducerStateConfig",
    "ProducerStateEntry",
    "ProducerStateManager",
    "in_sequence",
    "sequence_after",
]
