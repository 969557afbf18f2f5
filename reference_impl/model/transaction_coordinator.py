"""The reference transaction coordinator (KIP-98, KIP-360, KIP-447, KIP-588, KIP-890).

Pure model: no I/O, time only from the injected clock (or the `now_ms` given to
`tick`). One coordinator object serves every node of the in-process cluster; which
node coordinates a transactional id is placement (`ReferenceState.coordinator_for`)
and is checked by the handlers, which answer NOT_COORDINATOR elsewhere.

Behaviour follows Kafka 4.x's TransactionCoordinator / TransactionMetadata /
TransactionStateManager / TransactionMarkerChannelManager:

* Durable state is the transaction log (`transaction_log.TransactionLog`): every
  state change is a `TransactionLogRecord` appended and then applied by
  `replay(record)`; the cache is therefore always what replaying the log gives, and
  `TransactionCoordinator.rebuild(...)` (fail-over) reaches the same state, then
  finishes transactions left in PrepareCommit/PrepareAbort and keeps aborting
  timed-out ones.
* Markers are written "asynchronously": a decided transaction (PrepareCommit /
  PrepareAbort) keeps its markers pending until the first `tick(now)` at or after
  the decision time + `TransactionConfig.marker_delay_ms` (None: written within the
  request). While they are pending the transaction's pending state is
  CompleteCommit/CompleteAbort, so requests get CONCURRENT_TRANSACTIONS as in Kafka.
  In a real cluster the coordinator sends WriteTxnMarkers to each participant's
  partition leader; the model holds every partition log, so it appends the COMMIT /
  ABORT control batch to the log directly (`PartitionLog.append_marker`), and asks
  the group coordinator to complete pending transactional offsets for participating
  groups. A partition without a live leader keeps its marker pending (Kafka retries).
* Coordinator node restart (`begin_load`, called through `ReferenceState.on_node_restart`):
  the restarted node's transactional ids are rebuilt from the log and, for the model-only
  `TransactionConfig.load_duration_ms`, answer COORDINATOR_LOAD_IN_PROGRESS, as Kafka does
  while it loads a __transaction_state partition; their timers resume when the load ends.
* PrepareEpochFence is, as in Kafka, only a pending (never logged) state: fencing an
  open transaction (InitProducerId while Ongoing, or the transaction timeout) bumps
  the epoch once and writes PrepareAbort directly.
* Transaction version: TV2 (KIP-890: epoch bump at every EndTxn, EndTxn v5 returns
  the new producer id/epoch, implicit partition add) is chosen per request, as Kafka
  does (EndTxn v5+, AddPartitionsToTxn v4+, Produce v12+); coordinator-initiated aborts
  use the finalized `transaction.version` (absent = 0, as in Kafka).
* Kafka 4.2+ fixes followed: pending completion answered first (KAFKA-18464), a fence
  bumps the epoch once under TV2 (KAFKA-19367), exhausted epochs rotate the producer id
  during fencing aborts (KAFKA-20090). Not yet KAFKA-20785 (after 4.4.0).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Mapping, Protocol

from kio.schema.errors import ErrorCode

from reference_impl.model.clock import Clock
from reference_impl.model.partition_log import LogError
from reference_impl.model.producer_ids import ProducerIdManager, ProducerIdsExhausted
from reference_impl.model import seeded_bugs as bugs
from reference_impl.model.topics import CONSUMER_OFFSETS, SHARE_GROUP_STATE, PartitionState, TopicRegistry
from reference_impl.model.transaction_config import TransactionConfig
from reference_impl.model.transaction_log import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionLog,
    TransactionLogKey,
    TransactionLogRecord,
    TransactionLogValue,
    group_partitions,
    partition_for,
)
from reference_impl.model.transaction_state import TransactionState, check_transition
from reference_impl.protocol.records import ControlType

S = TransactionState
SHORT_MAX = (1 << 15) - 1
CONSUMER_OFFSETS_TOPIC = CONSUMER_OFFSETS
SHARE_STATE_TOPIC = SHARE_GROUP_STATE  # KIP-1289 registers its partitions as participants
TRANSACTION_VERSION_FEATURE = "transaction.version"
# A cluster without a finalized transaction.version is at level 0 (Kafka's getOrDefault);
# the reference's BrokerConfig is expected to finalize 2 by default.
DEFAULT_TRANSACTION_VERSION = 0
TV0, TV2 = 0, 2


def is_epoch_exhausted(epoch: int) -> bool:
    """Clients never get Short.MaxValue, so the coordinator can always fence."""
    return epoch >= SHORT_MAX - 1


def supports_epoch_bump(transaction_version: int) -> bool:
    return transaction_version >= 2


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class EndTxnResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """DescribeTransactions' view of one transactional id."""

    transactional_id: str
    error: ErrorCode
    state: str = ""
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    transaction_timeout_ms: int = 0
    transaction_start_time_ms: int = -1
    # ((topic, (partition, ...)), ...): data partitions, plus the __consumer_offsets
    # partition of every participating group (as Kafka lists them).
    topics: tuple[tuple[str, tuple[int, ...]], ...] = ()
    groups: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ListedTransaction:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class ListTransactionsResult:
    error: ErrorCode
    unknown_state_filters: tuple[str, ...] = ()
    transactions: tuple[ListedTransaction, ...] = ()


@dataclass(frozen=True, slots=True)
class _Participant:
    kind: str  # "partition" | "group"
    topic: str = ""
    partition: int = -1
    group: str = ""


def _participants(value: TransactionLogValue) -> set[_Participant]:
    out = {_Participant("partition", t, p) for t, p in value.partition_set()}
    out |= {_Participant("group", group=g) for g in value.groups}
    return out


class BrokerSettings(Protocol):
    """What the coordinator reads of the broker config (BrokerConfig)."""

    transaction: TransactionConfig
    finalized_features: Mapping[str, int]


class OffsetsParticipants(Protocol):
    """The group coordinator as the transaction coordinator sees it (GroupCoordinator):
    groups take part in a transaction through their __consumer_offsets partition
    (AddOffsetsToTxn, TxnOffsetCommit), and a marker completes their pending offsets."""

    def offsets_partition_for(self, group_id: str) -> int:
        """The group's __consumer_offsets partition."""

    def complete_transactional_offsets(
        self, group_id: str, producer_id: int, producer_epoch: int, committed: bool
    ) -> object:
        """A marker reached the group's offsets partition: commit or drop the producer's
        pending offsets of the group."""

    def groups_with_open_transactions(self) -> Iterable[str]:
        """Groups holding pending transactional offsets."""

    def open_transactions(self, group_id: str) -> frozenset[int]:
        """Producer ids with pending transactional offsets in the group."""


class TransactionCoordinator:
    """Transaction metadata per transactional id, its log, markers and timers."""

    def __init__(
        self,
        node_ids: list[int],
        clock: Clock,
        config: BrokerSettings | None = None,
        topics: TopicRegistry | None = None,
        groups: OffsetsParticipants | None = None,
        *,
        producer_ids: ProducerIdManager | None = None,
        txn_config: TransactionConfig | None = None,
        log: TransactionLog | None = None,
        coordinator_epoch: int = 0,
    ) -> None:
        self.node_ids = sorted(node_ids)
        self.clock = clock
        self.config = config  # BrokerConfig (finalized features; `transaction` settings unless txn_config)
        self.txn_config: TransactionConfig = txn_config or (
            config.transaction if config is not None else TransactionConfig()
        )
        self.topics = topics
        self.groups = groups
        self.producer_ids = producer_ids or ProducerIdManager()
        self.coordinator_epoch = coordinator_epoch
        self.log = TransactionLog()
        self._cache: dict[str, TransactionLogValue] = {}
        # transactional id -> participants still waiting for their marker (in memory, as
        # Kafka's marker queues; rebuilt from Prepare* states on load).
        self._pending_markers: dict[str, set[_Participant]] = {}
        now = clock.now_ms()
        self._next_abort_scan_ms = now + self.txn_config.transaction_abort_timed_out_transaction_cleanup_interval_ms
        self._next_expiration_scan_ms = now + self.txn_config.transaction_remove_expired_transaction_cleanup_interval_ms
        self.version = 0  # bumped on every change (waiters compare it)
        # Loads in progress after a coordinator node restart: (owns(tid), load end time).
        self._loads: list[tuple[Callable[[str], bool], int]] = []
        # KIP-1289: the marker reaching a __share_group_state partition runs the share-partition
        # leaders' hook (producer id, marker epoch, committed, now, state partition) -> records resolved.
        self.share_txn_markers: Callable[[int, int, bool, int, int], Any] | None = None
        if log is not None:
            for record in log:
                self.log.append(record)
                self.replay(record)

    @classmethod
    def rebuild(cls, previous: "TransactionCoordinator", *, clock: Clock | None = None) -> "TransactionCoordinator":
        """A new coordinator (fail-over / restart) loaded from `previous`'s log, with the
        coordinator epoch raised by one, sharing the cluster's producer id allocator."""
        rebuilt = cls(
            previous.node_ids,
            clock or previous.clock,
            previous.config,
            previous.topics,
            previous.groups,
            producer_ids=previous.producer_ids,
            txn_config=replace(previous.txn_config),
            log=previous.log,
            coordinator_epoch=previous.coordinator_epoch + 1,
        )
        rebuilt.share_txn_markers = previous.share_txn_markers
        return rebuilt

    # -- configuration -----------------------------------------------------------------

    def transaction_version(self) -> int:
        """The finalized `transaction.version` of the cluster."""
        features = self.config.finalized_features if self.config is not None else {}
        return int(features.get(TRANSACTION_VERSION_FEATURE, DEFAULT_TRANSACTION_VERSION))

    def validate_transaction_timeout(self, timeout_ms: int) -> bool:
        return 0 < timeout_ms <= self.txn_config.transaction_max_timeout_ms

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.txn_config.transaction_state_log_num_partitions)

    def offsets_partition_for(self, group_id: str) -> int:
        """The group's __consumer_offsets partition (the group coordinator's answer if there is one)."""
        if self.groups is not None:
            return int(self.groups.offsets_partition_for(group_id))
        return partition_for(group_id, self.txn_config.offsets_topic_num_partitions)

    def _offsets_partitions(self, value: TransactionLogValue) -> set[int]:
        """__consumer_offsets partitions taking part: added as partitions (TxnOffsetCommit
        verification/implicit add) or through a group id (AddOffsetsToTxn)."""
        out = {p for t, p in value.partition_set() if t == CONSUMER_OFFSETS_TOPIC}
        out |= {self.offsets_partition_for(g) for g in value.groups}
        return out

    def _includes(self, value: TransactionLogValue, key: tuple[str, int] | str) -> bool:
        if isinstance(key, str):
            return key in value.groups or self.offsets_partition_for(key) in {
                p for t, p in value.partition_set() if t == CONSUMER_OFFSETS_TOPIC
            }
        if key[0] == CONSUMER_OFFSETS_TOPIC:
            return key[1] in self._offsets_partitions(value)
        return key in value.partition_set()

    # -- durable state ---------------------------------------------------------------------

    def metadata(self, transactional_id: str) -> TransactionLogValue | None:
        return self._cache.get(transactional_id)

    def snapshot(self) -> dict[str, TransactionLogValue]:
        return dict(self._cache)

    def pending_markers(self, transactional_id: str) -> frozenset[tuple[str, int] | str]:
        """Participants still waiting for a marker: (topic, partition) or group id."""
        return frozenset(
            (p.topic, p.partition) if p.kind == "partition" else p.group
            for p in self._pending_markers.get(transactional_id, ())
        )

    def replay(self, record: TransactionLogRecord) -> None:
        """Apply one transaction log record to the cache (used for writes and loads)."""
        tid = record.key.transactional_id
        if record.value is None:
            self._cache.pop(tid, None)
            self._pending_markers.pop(tid, None)
        else:
            self._cache[tid] = record.value
            if record.value.state.is_prepare:
                self._pending_markers[tid] = _participants(record.value)
            else:
                self._pending_markers.pop(tid, None)
        self.version += 1

    def _write(self, tid: str, value: TransactionLogValue | None, now: int) -> TransactionLogValue | None:
        current = self._cache.get(tid)
        if value is not None and current is not None:
            check_transition(current.state, value.state)
        stored = self.log.append(
            TransactionLogRecord(TransactionLogKey(tid), value, coordinator_epoch=self.coordinator_epoch, timestamp_ms=now)
        )
        self.replay(stored)
        return value

    def _transit(self, current: TransactionLogValue, **changes: Any) -> TransactionLogValue:
        # Kafka's TxnTransitMetadata: prevProducerId is always the id before the transition.
        return replace(current, previous_producer_id=current.producer_id, **changes)

    def _now(self, now_ms: int | None) -> int:
        return self.clock.now_ms() if now_ms is None else now_ms

    @staticmethod
    def _in_flight(value: TransactionLogValue) -> bool:
        """Kafka's pendingTransitionInProgress: markers of a decided transaction are in flight."""
        return value.state.is_prepare

    # -- loading (coordinator node restart) ------------------------------------------------

    def begin_load(self, owns: Callable[[str], bool], now_ms: int | None = None) -> list[str]:
        """A node coordinating the transactional ids for which `owns(tid)` is true restarted:
        their state is dropped and rebuilt by replaying the transaction log (as Kafka's
        TransactionStateManager.loadTransactionsForTxnTopicPartition), the coordinator epoch
        is raised, and until now + `load_duration_ms` requests for those ids (also ids not
        yet known) answer COORDINATOR_LOAD_IN_PROGRESS and their timers wait. When the load
        ends (`tick`), pending markers are sent and timed-out transactions aborted.
        Returns the transactional ids loaded."""
        now = self._now(now_ms)
        for tid in [t for t in self._cache if owns(t)]:
            self._cache.pop(tid, None)
            self._pending_markers.pop(tid, None)
        for record in self.log:
            if owns(record.key.transactional_id):
                self.replay(record)
        self.coordinator_epoch += 1
        self._loads.append((owns, now + self.txn_config.load_duration_ms))
        self.version += 1
        return sorted(t for t in self._cache if owns(t))

    def is_loading(self, transactional_id: str, now_ms: int | None = None) -> bool:
        if not self._loads or not transactional_id:
            return False
        now = self._now(now_ms)
        return any(now < until and owns(transactional_id) for owns, until in self._loads)

    def _finish_loads(self, now: int) -> None:
        done = [(owns, until) for owns, until in self._loads if now >= until]
        if not done:
            return
        self._loads = [(owns, until) for owns, until in self._loads if now < until]
        for owns, _ in done:
            # Kafka completes loaded Prepare* transactions (markers) and its abort scan
            # then aborts transactions that timed out while the coordinator was away.
            for tid in [t for t in self._pending_markers if owns(t)]:
                if self.txn_config.seeded_bugs.has(bugs.LOADED_PREPARE_COMMIT_ABORTED) and (
                        self._cache[tid].state is S.PREPARE_COMMIT):
                    self._cache[tid] = replace(self._cache[tid], state=S.PREPARE_ABORT)  # the seeded bug
                self._send_markers(tid, now)
            for tid in self.timed_out_transactions(now):
                if owns(tid) and not self.is_loading(tid, now) and not self._in_flight(self._cache[tid]):
                    self._fence_and_abort(tid, self._cache[tid], now)
        self.version += 1

    # -- InitProducerId (22) ---------------------------------------------------------------

    def init_producer_id(
        self,
        transactional_id: str | None,
        transaction_timeout_ms: int,
        expected: tuple[int, int] | None = None,
        *,
        now_ms: int | None = None,
    ) -> InitProducerIdResult:
        """`expected` is the request's (producer id, epoch) when both are set (KIP-360, v3+)."""
        now = self._now(now_ms)
        if transactional_id is None:
            try:
                return InitProducerIdResult(ErrorCode.none, self.producer_ids.generate_producer_id(), 0)
            except ProducerIdsExhausted:
                return InitProducerIdResult(ErrorCode.unknown_server_error)
        if transactional_id == "":
            return InitProducerIdResult(ErrorCode.invalid_request)
        if not self.validate_transaction_timeout(transaction_timeout_ms):
            return InitProducerIdResult(ErrorCode.invalid_transaction_timeout)
        if self.is_loading(transactional_id, now):
            return InitProducerIdResult(ErrorCode.coordinator_load_in_progress)

        current = self._cache.get(transactional_id)
        if current is None:
            try:
                pid = self.producer_ids.generate_producer_id()
            except ProducerIdsExhausted:
                return InitProducerIdResult(ErrorCode.unknown_server_error)
            # Created in memory (Kafka's putTransactionStateIfNotExists); durable with the bump below.
            current = TransactionLogValue(
                producer_id=pid, previous_producer_id=NO_PRODUCER_ID, next_producer_id=NO_PRODUCER_ID,
                producer_epoch=NO_PRODUCER_EPOCH, last_producer_epoch=NO_PRODUCER_EPOCH,
                transaction_timeout_ms=transaction_timeout_ms, state=S.EMPTY, topic_partitions=(), groups=(),
                transaction_start_timestamp_ms=-1, transaction_last_update_timestamp_ms=now,
                client_transaction_version=TV0,
            )

        if self._in_flight(current):
            return InitProducerIdResult(ErrorCode.concurrent_transactions)
        if expected is not None and not (
            current.producer_epoch == NO_PRODUCER_EPOCH
            or expected[0] == current.producer_id
            or (expected[0] == current.previous_producer_id and is_epoch_exhausted(expected[1]))
        ):
            return InitProducerIdResult(ErrorCode.producer_fenced)

        state = current.state
        if state.is_prepare:
            return InitProducerIdResult(ErrorCode.concurrent_transactions)
        if state is S.ONGOING:
            # Abort the open transaction with a bumped epoch (never returned to anyone);
            # the client retries and gets the next epoch once the abort completes.
            self._fence_and_abort(transactional_id, current, now)
            return InitProducerIdResult(ErrorCode.concurrent_transactions)
        if state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            if is_epoch_exhausted(current.producer_epoch) and (expected is None or expected[1] == current.producer_epoch):
                try:
                    new_pid = self.producer_ids.generate_producer_id()
                except ProducerIdsExhausted:
                    return InitProducerIdResult(ErrorCode.unknown_server_error)
                value = self._transit(
                    current, producer_id=new_pid, producer_epoch=0,
                    last_producer_epoch=current.producer_epoch if expected is not None else NO_PRODUCER_EPOCH,
                    transaction_timeout_ms=transaction_timeout_ms, state=S.EMPTY, topic_partitions=(), groups=(),
                    transaction_start_timestamp_ms=-1, transaction_last_update_timestamp_ms=now,
                )
            else:
                bumped = current.producer_epoch + 1
                if self.txn_config.seeded_bugs.has(bugs.INIT_PRODUCER_ID_EPOCH_NOT_BUMPED) and current.producer_epoch >= 0:
                    bumped = current.producer_epoch
                if expected is None:
                    epoch, last = bumped, NO_PRODUCER_EPOCH
                elif current.producer_epoch == NO_PRODUCER_EPOCH or expected[1] == current.producer_epoch:
                    epoch, last = bumped, current.producer_epoch
                elif expected[1] == current.last_producer_epoch:
                    # Retry of a bump whose response was lost: same epoch again.
                    epoch, last = current.producer_epoch, current.last_producer_epoch
                else:
                    return InitProducerIdResult(ErrorCode.producer_fenced)
                value = self._transit(
                    current, producer_epoch=epoch, last_producer_epoch=last,
                    transaction_timeout_ms=transaction_timeout_ms, state=S.EMPTY, topic_partitions=(), groups=(),
                    transaction_start_timestamp_ms=-1, transaction_last_update_timestamp_ms=now,
                )
            self._write(transactional_id, value, now)
            return InitProducerIdResult(ErrorCode.none, value.producer_id, value.producer_epoch)
        raise AssertionError(f"transactional id {transactional_id} in state {state.state_name}")

    # -- AddPartitionsToTxn (24) / AddOffsetsToTxn (25) -------------------------------------

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[tuple[str, int]] = (),
        *,
        groups: Iterable[str] = (),
        client_transaction_version: int = TV0,
        now_ms: int | None = None,
    ) -> ErrorCode:
        """Kafka's handleAddPartitionsToTransaction: one error for the whole request."""
        now = self._now(now_ms)
        if not transactional_id:
            return ErrorCode.invalid_request
        if self.is_loading(transactional_id, now):
            return ErrorCode.coordinator_load_in_progress
        current = self._cache.get(transactional_id)
        if current is None:
            return ErrorCode.invalid_producer_id_mapping
        # Pending first (Kafka 4.2+): the producer may already use the id/epoch the
        # pending completion is about to make current (TV2 epoch bump or overflow).
        if self._in_flight(current):
            return ErrorCode.concurrent_transactions
        if current.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if current.producer_epoch != producer_epoch:
            return ErrorCode.producer_fenced
        partitions, groups = list(partitions), list(groups)
        new_parts = current.partition_set() | frozenset(partitions)
        new_groups = frozenset(current.groups) | frozenset(groups)
        if current.state is S.ONGOING and all(self._includes(current, k) for k in [*partitions, *groups]):
            return ErrorCode.none  # already part of the transaction
        start = now if current.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT) else current.transaction_start_timestamp_ms
        value = self._transit(
            current, state=S.ONGOING, topic_partitions=group_partitions(new_parts), groups=tuple(sorted(new_groups)),
            transaction_start_timestamp_ms=start, transaction_last_update_timestamp_ms=now,
            client_transaction_version=client_transaction_version,
        )
        self._write(transactional_id, value, now)
        return ErrorCode.none

    def add_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        *,
        client_transaction_version: int = TV0,
        now_ms: int | None = None,
    ) -> ErrorCode:
        """AddOffsetsToTxn: the group (its __consumer_offsets partition) joins the transaction."""
        return self.add_partitions(
            transactional_id, producer_id, producer_epoch, (), groups=(group_id,),
            client_transaction_version=client_transaction_version, now_ms=now_ms,
        )

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[tuple[str, int]] = (),
        *,
        groups: Iterable[str] = (),
    ) -> dict[tuple[str, int] | str, ErrorCode]:
        """Kafka's handleVerifyPartitionsInTransaction (AddPartitionsToTxn v4+ VerifyOnly):
        per partition NONE when it is part of the transaction, TRANSACTION_ABORTABLE when not."""
        keys: list[tuple[str, int] | str] = [*partitions, *groups]
        if not transactional_id:
            return {k: ErrorCode.invalid_request for k in keys}
        if self.is_loading(transactional_id):
            return {k: ErrorCode.coordinator_load_in_progress for k in keys}
        current = self._cache.get(transactional_id)
        error: ErrorCode | None = None
        if current is None or current.producer_id != producer_id:
            error = ErrorCode.invalid_producer_id_mapping
        elif current.producer_epoch != producer_epoch:
            error = ErrorCode.producer_fenced
        elif current.state.is_prepare:
            error = ErrorCode.concurrent_transactions
        if error is not None:
            return {k: error for k in keys}
        return {k: ErrorCode.none if self._includes(current, k) else ErrorCode.transaction_abortable for k in keys}

    def verify_or_add_partition(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        topic: str,
        partition: int,
        add: bool,
        *,
        now_ms: int | None = None,
    ) -> ErrorCode:
        """Produce path (KIP-890) before a producer's first transactional batch on a partition:
        `add=False` verifies the partition was added (TV1 clients; skipped when
        transaction.partition.verification.enable is false), `add=True` adds it (TV2).
        Returns the coordinator's error; the produce handler translates it for the client."""
        if add:
            return self.add_partitions(
                transactional_id, producer_id, producer_epoch, ((topic, partition),),
                client_transaction_version=TV2, now_ms=now_ms,
            )
        if not self.txn_config.transaction_partition_verification_enable or self.txn_config.seeded_bugs.has(
                bugs.UNADDED_PARTITION_PRODUCE_ACCEPTED):
            return ErrorCode.none
        return self.verify_partitions(transactional_id, producer_id, producer_epoch, ((topic, partition),))[
            (topic, partition)
        ]

    def verify_or_add_group(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        add: bool,
        *,
        now_ms: int | None = None,
    ) -> ErrorCode:
        """TxnOffsetCommit path: the same for a group's offsets partition (TV2: TxnOffsetCommit
        v5 adds it implicitly; TV1: verification that AddOffsetsToTxn was sent)."""
        if add:
            return self.add_partitions(
                transactional_id, producer_id, producer_epoch, (), groups=(group_id,),
                client_transaction_version=TV2, now_ms=now_ms,
            )
        if not self.txn_config.transaction_partition_verification_enable:
            return ErrorCode.none
        return self.verify_partitions(transactional_id, producer_id, producer_epoch, groups=(group_id,))[group_id]

    # -- EndTxn (26) ---------------------------------------------------------------------

    def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        *,
        client_transaction_version: int = TV0,
        now_ms: int | None = None,
    ) -> EndTxnResult:
        """EndTxn from a client. TV2 (`client_transaction_version` >= 2) bumps the epoch and
        answers the producer id/epoch to use next; TV1 answers -1/-1."""
        now = self._now(now_ms)
        if self.is_loading(transactional_id, now):
            return EndTxnResult(ErrorCode.coordinator_load_in_progress)
        return self._end_transaction(
            transactional_id, producer_id, producer_epoch, committed,
            from_client=True, tv=client_transaction_version, fence=False, now=now,
        )

    def _end_transaction(
        self,
        tid: str,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        *,
        from_client: bool,
        tv: int,
        fence: bool,
        now: int,
    ) -> EndTxnResult:
        if not tid:
            return EndTxnResult(ErrorCode.invalid_request)
        current = self._cache.get(tid)
        if current is None:
            return EndTxnResult(ErrorCode.invalid_producer_id_mapping)
        if not supports_epoch_bump(tv):
            return self._end_transaction_tv1(tid, current, producer_id, producer_epoch, committed, from_client, fence, now)
        return self._end_transaction_tv2(tid, current, producer_id, producer_epoch, committed, from_client, fence, now, tv)

    def _end_transaction_tv1(
        self, tid: str, current: TransactionLogValue, producer_id: int, producer_epoch: int,
        committed: bool, from_client: bool, fence: bool, now: int,
    ) -> EndTxnResult:
        if current.producer_id != producer_id:
            return EndTxnResult(ErrorCode.invalid_producer_id_mapping)
        if (from_client and producer_epoch != current.producer_epoch) or producer_epoch < current.producer_epoch:
            return EndTxnResult(ErrorCode.producer_fenced)
        if self._in_flight(current) and not fence:
            return EndTxnResult(ErrorCode.concurrent_transactions)
        state = current.state
        if state is S.ONGOING:
            target = S.PREPARE_COMMIT if committed else S.PREPARE_ABORT
            epoch, last = current.producer_epoch, current.last_producer_epoch
            if fence and not committed:
                epoch, last = producer_epoch, NO_PRODUCER_EPOCH
            value = self._transit(
                current, state=target, producer_epoch=epoch, last_producer_epoch=last,
                next_producer_id=NO_PRODUCER_ID, transaction_last_update_timestamp_ms=now,
                client_transaction_version=TV0,
            )
            self._decide(tid, value, now)
            return EndTxnResult(ErrorCode.none)
        if state is S.COMPLETE_COMMIT:
            return EndTxnResult(ErrorCode.none if committed else ErrorCode.invalid_txn_state)
        if state is S.COMPLETE_ABORT:
            return EndTxnResult(ErrorCode.invalid_txn_state if committed else ErrorCode.none)
        if state is S.PREPARE_COMMIT:
            return EndTxnResult(ErrorCode.concurrent_transactions if committed else ErrorCode.invalid_txn_state)
        if state is S.PREPARE_ABORT:
            return EndTxnResult(ErrorCode.invalid_txn_state if committed else ErrorCode.concurrent_transactions)
        return EndTxnResult(ErrorCode.invalid_txn_state)  # Empty

    def _end_transaction_tv2(
        self, tid: str, current: TransactionLogValue, producer_id: int, producer_epoch: int,
        committed: bool, from_client: bool, fence: bool, now: int, tv: int,
    ) -> EndTxnResult:
        retry_on_overflow = (
            not fence and current.previous_producer_id == producer_id
            and producer_epoch == SHORT_MAX - 1 and current.producer_epoch == 0
        )
        retry_on_epoch_bump = not fence and current.producer_epoch == producer_epoch + 1
        state = current.state
        if not fence:
            if state in (S.ONGOING, S.EMPTY):
                valid_epoch = producer_epoch == current.producer_epoch
            elif state.is_prepare:
                valid_epoch = retry_on_epoch_bump
            else:  # CompleteCommit / CompleteAbort
                valid_epoch = retry_on_epoch_bump or retry_on_overflow or producer_epoch == current.producer_epoch
        else:
            valid_epoch = (not from_client or producer_epoch == current.producer_epoch) and producer_epoch >= current.producer_epoch
        is_retry = retry_on_epoch_bump or retry_on_overflow

        # Pending completion first (KAFKA-18464), then the id mapping, then the epoch.
        if self._in_flight(current) and not fence:
            return EndTxnResult(ErrorCode.concurrent_transactions)
        if current.producer_id != producer_id and not retry_on_overflow:
            return EndTxnResult(ErrorCode.invalid_producer_id_mapping)
        if not valid_epoch:
            return EndTxnResult(ErrorCode.producer_fenced)

        def decide(target: TransactionState, no_partition_added: bool) -> EndTxnResult:
            base = current
            next_pid = NO_PRODUCER_ID
            # The epoch is bumped here, so an exhausted epoch rotates the producer id - for
            # fencing aborts too (KAFKA-20090); a fence does not bump a second time
            # (KAFKA-19367): the abort's own bump is the fence.
            if is_epoch_exhausted(current.producer_epoch):
                try:
                    next_pid = self.producer_ids.generate_producer_id()
                except ProducerIdsExhausted:
                    return EndTxnResult(ErrorCode.unknown_server_error)
            bumped = min(base.producer_epoch + 1, SHORT_MAX)
            value = self._transit(
                base, state=target, producer_epoch=bumped, last_producer_epoch=base.producer_epoch,
                next_producer_id=next_pid,
                transaction_start_timestamp_ms=now if no_partition_added else base.transaction_start_timestamp_ms,
                transaction_last_update_timestamp_ms=now, client_transaction_version=tv,
            )
            self._decide(tid, value, now)
            complete = self._complete_value(value, now)
            return EndTxnResult(ErrorCode.none, complete.producer_id, complete.producer_epoch)

        if state is S.ONGOING:
            return decide(S.PREPARE_COMMIT if committed else S.PREPARE_ABORT, False)
        if state is S.COMPLETE_COMMIT:
            if committed:
                if is_retry:
                    return EndTxnResult(ErrorCode.none, current.producer_id, current.producer_epoch)
                return EndTxnResult(ErrorCode.invalid_txn_state)
            if is_retry:
                return EndTxnResult(ErrorCode.invalid_txn_state)
            return decide(S.PREPARE_ABORT, True)
        if state is S.COMPLETE_ABORT:
            if not committed:
                if is_retry:
                    return EndTxnResult(ErrorCode.none, current.producer_id, current.producer_epoch)
                return decide(S.PREPARE_ABORT, True)
            # Kafka 4.4.0 answers INVALID_TXN_STATE also for a commit at a retry epoch meeting a
            # coordinator-initiated (timeout) abort; KAFKA-20785 (trunk, after 4.4.0) makes that
            # one PRODUCER_FENCED. Checked against kafka-native 4.4.0.
            return EndTxnResult(ErrorCode.invalid_txn_state)
        if state is S.PREPARE_COMMIT:
            return EndTxnResult(ErrorCode.concurrent_transactions if committed else ErrorCode.invalid_txn_state)
        if state is S.PREPARE_ABORT:
            return EndTxnResult(ErrorCode.invalid_txn_state if committed else ErrorCode.concurrent_transactions)
        # Empty
        if not committed:
            return decide(S.PREPARE_ABORT, True)
        return EndTxnResult(ErrorCode.invalid_txn_state)

    def _fence_and_abort(self, tid: str, current: TransactionLogValue, now: int) -> EndTxnResult:
        """Kafka's prepareFenceProducerEpoch + endTransaction(ABORT, isFromClient=false) with
        the cluster's transaction version. PrepareEpochFence is a pending state only."""
        check_transition(current.state, S.PREPARE_EPOCH_FENCE)
        check_transition(S.PREPARE_EPOCH_FENCE, S.PREPARE_ABORT)
        # Kafka's prepareFenceProducerEpoch (never past Short.MaxValue, KAFKA-20090). Under TV1
        # this is the epoch the abort is written with; under TV2 the abort bumps by itself.
        fenced_epoch = min(current.producer_epoch + 1, SHORT_MAX)
        return self._end_transaction(
            tid, current.producer_id, fenced_epoch, False,
            from_client=False, tv=self.transaction_version(), fence=True, now=now,
        )

    # -- markers ------------------------------------------------------------------------

    def _decide(self, tid: str, value: TransactionLogValue, now: int) -> None:
        """The decision (PrepareCommit/PrepareAbort) is durable; markers follow."""
        self._write(tid, value, now)
        if self.txn_config.marker_delay_ms is None or not self._pending_markers.get(tid):
            # No participant (e.g. a TV2 abort with nothing added): nothing to wait for, the
            # transaction completes at once, as Kafka's marker manager does.
            self._send_markers(tid, now)

    def _complete_value(self, prepared: TransactionLogValue, now: int) -> TransactionLogValue:
        """Kafka's prepareComplete: CompleteCommit/CompleteAbort, the new producer id when
        the epoch overflowed under TV2."""
        target = S.COMPLETE_COMMIT if prepared.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        if supports_epoch_bump(prepared.client_transaction_version) and prepared.next_producer_id != NO_PRODUCER_ID:
            pid, epoch = prepared.next_producer_id, 0
        else:
            pid, epoch = prepared.producer_id, prepared.producer_epoch
        return replace(
            prepared, previous_producer_id=prepared.producer_id, producer_id=pid, producer_epoch=epoch,
            next_producer_id=NO_PRODUCER_ID, state=target, topic_partitions=(), groups=(),
            transaction_last_update_timestamp_ms=now,
        )

    def _complete_group_offsets(
        self, group_ids: set[str], offsets_partitions: set[int], value: TransactionLogValue, committed: bool
    ) -> None:
        """A marker reached an offsets partition: the group coordinator completes the pending
        transactional offsets of this producer for the named groups and for every group on
        those partitions with an open transaction of the producer."""
        groups = self.groups
        if groups is None:  # no group coordinator: no transactional offsets
            return
        targets = set(group_ids)
        if offsets_partitions:
            for g in groups.groups_with_open_transactions():
                if self.offsets_partition_for(g) in offsets_partitions and value.producer_id in groups.open_transactions(g):
                    targets.add(g)
        for g in sorted(targets):
            groups.complete_transactional_offsets(g, value.producer_id, value.producer_epoch, committed)

    def _markers_due(self, value: TransactionLogValue, now: int) -> bool:
        delay = self.txn_config.marker_delay_ms
        return delay is None or now >= value.transaction_last_update_timestamp_ms + delay

    def _send_markers(self, tid: str, now: int) -> bool:
        """Write the markers that can be written; complete the transaction when none is left."""
        value = self._cache.get(tid)
        pending = self._pending_markers.get(tid)
        if value is None or pending is None or not value.state.is_prepare:
            return False
        committed = value.state is S.PREPARE_COMMIT
        control = ControlType.COMMIT if committed else ControlType.ABORT
        coordinator_partitions: set[tuple[str, int]] = set()  # one marker each, however many reached them
        for participant in sorted(pending, key=lambda p: (p.kind, p.topic, p.partition, p.group)):
            if participant.kind == "group":
                self._complete_group_offsets({participant.group}, set(), value, committed)
                coordinator_partitions.add((CONSUMER_OFFSETS_TOPIC, self.offsets_partition_for(participant.group)))
                pending.discard(participant)
                continue
            if participant.topic == SHARE_STATE_TOPIC:
                # The share coordinator's state is in its model: the marker for that partition is
                # KIP-1289's hook on the share-partitions of the groups staging there (DIV-128905).
                if self.share_txn_markers is not None:
                    self.share_txn_markers(value.producer_id, value.producer_epoch, committed, now, participant.partition)
                coordinator_partitions.add((participant.topic, participant.partition))
                pending.discard(participant)
                continue
            if participant.topic == CONSUMER_OFFSETS_TOPIC:
                # Group offsets are in the group coordinator's model: the marker for that partition
                # is the group coordinator completing the producer's offsets of its groups.
                self._complete_group_offsets(set(), {participant.partition}, value, committed)
                coordinator_partitions.add((participant.topic, participant.partition))
                pending.discard(participant)
                continue
            state = self.topics.partition(participant.topic, participant.partition) if self.topics else None
            if state is None:
                pending.discard(participant)  # topic deleted: Kafka drops the marker
                continue
            if committed and self.txn_config.seeded_bugs.has(bugs.TXN_COMMIT_ABORTED_ON_DOWN_REPLICA) and (
                    set(state.replicas) - set(self.topics.alive)):
                control = ControlType.ABORT  # the deliberate bug (seeded_bugs.py)
            elif state.leader < 0:
                continue  # no live leader yet: retried on a later tick
            else:
                control = ControlType.COMMIT if committed else ControlType.ABORT
                if self.txn_config.seeded_bugs.has(bugs.ABORT_MARKER_WRITTEN_AS_COMMIT):
                    control = ControlType.COMMIT
            self._append_marker(state, control, value, now)
            pending.discard(participant)
        for topic, partition in sorted(coordinator_partitions):
            # What a client reading __consumer_offsets / __share_group_state sees: the control
            # batch, where the internal topic exists (FindCoordinator created it) and has a
            # leader; the coordinators' state was completed above either way.
            state = self.topics.partition(topic, partition) if self.topics else None
            if state is not None and state.leader >= 0:
                self._append_marker(state, ControlType.COMMIT if committed else ControlType.ABORT, value, now)
        self.version += 1
        if pending:
            return True
        self._write(tid, self._complete_value(value, now), now)
        return True

    def _append_marker(self, state: PartitionState, control: ControlType, value: TransactionLogValue, now: int) -> None:
        """A real coordinator sends WriteTxnMarkers to the partition leader; the model appends
        the control batch to the (single-copy) partition log itself."""
        try:
            state.log.append_marker(
                control, producer_id=value.producer_id, producer_epoch=value.producer_epoch,
                coordinator_epoch=self.coordinator_epoch, now_ms=now,
                transaction_version=value.client_transaction_version,
            )
        except LogError:
            # Kafka stops sending this marker when the leader refuses it as fenced
            # (INVALID_PRODUCER_EPOCH / TRANSACTION_COORDINATOR_FENCED); the model
            # then completes the transaction without it.
            pass

    # -- timers ---------------------------------------------------------------------------

    def tick(self, now_ms: int | None = None) -> None:
        """Pending markers, transaction timeouts, transactional id expiration."""
        now = self._now(now_ms)
        self._finish_loads(now)
        for tid in [
            t for t in self._pending_markers
            if self._markers_due(self._cache[t], now) and not self.is_loading(t, now)
        ]:
            self._send_markers(tid, now)
        cfg = self.txn_config
        if now >= self._next_abort_scan_ms:
            self._next_abort_scan_ms = now + cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms
            self.abort_timed_out_transactions(now)
        if now >= self._next_expiration_scan_ms:
            self._next_expiration_scan_ms = now + cfg.transaction_remove_expired_transaction_cleanup_interval_ms
            self.remove_expired_transactional_ids(now)

    def timed_out_transactions(self, now: int) -> list[str]:
        return [
            tid for tid, v in sorted(self._cache.items())
            if v.state is S.ONGOING and v.transaction_start_timestamp_ms + v.transaction_timeout_ms < now
        ]

    def abort_timed_out_transactions(self, now_ms: int | None = None) -> list[str]:
        """Abort (with an epoch bump, fencing the producer) every transaction open for
        longer than its timeout. Returns the aborted transactional ids."""
        now = self._now(now_ms)
        aborted: list[str] = []
        if self.txn_config.seeded_bugs.has(bugs.TXN_TIMEOUT_NEVER_ABORTS):
            return aborted
        for tid in self.timed_out_transactions(now):
            current = self._cache[tid]
            if self._in_flight(current) or self.is_loading(tid, now):
                continue
            if self._fence_and_abort(tid, current, now).error == ErrorCode.none:
                aborted.append(tid)
        return aborted

    def remove_expired_transactional_ids(self, now_ms: int | None = None) -> list[str]:
        """Tombstone idle transactional ids (Empty/CompleteCommit/CompleteAbort for longer
        than transactional.id.expiration.ms)."""
        now = self._now(now_ms)
        limit = now - self.txn_config.transactional_id_expiration_ms
        expired = [
            tid for tid, v in sorted(self._cache.items())
            if v.state.expiration_allowed and v.transaction_last_update_timestamp_ms <= limit
            and not self.is_loading(tid, now)
        ]
        for tid in expired:
            check_transition(self._cache[tid].state, S.DEAD)
            self._write(tid, None, now)
        return expired

    # -- DescribeTransactions / ListTransactions -------------------------------------------

    def describe(self, transactional_id: str) -> TransactionDescription:
        if not transactional_id:
            return TransactionDescription(transactional_id, ErrorCode.invalid_request)
        if self.is_loading(transactional_id):
            return TransactionDescription(transactional_id, ErrorCode.coordinator_load_in_progress)
        v = self._cache.get(transactional_id)
        if v is None or v.state is S.DEAD:
            return TransactionDescription(transactional_id, ErrorCode.transactional_id_not_found)
        topics = [(t, ps) for t, ps in v.topic_partitions if t != CONSUMER_OFFSETS_TOPIC]
        offsets_parts = self._offsets_partitions(v)
        if offsets_parts:
            topics.append((CONSUMER_OFFSETS_TOPIC, tuple(sorted(offsets_parts))))
            topics.sort()
        return TransactionDescription(
            transactional_id=transactional_id, error=ErrorCode.none, state=v.state.state_name,
            producer_id=v.producer_id, producer_epoch=v.producer_epoch,
            transaction_timeout_ms=v.transaction_timeout_ms,
            transaction_start_time_ms=v.transaction_start_timestamp_ms,
            topics=tuple(topics), groups=v.groups,
        )

    def list_transactions(
        self,
        state_filters: Iterable[str] = (),
        producer_id_filters: Iterable[int] = (),
        duration_filter: int = -1,
        transactional_id_pattern: str | None = None,
        *,
        now_ms: int | None = None,
    ) -> ListTransactionsResult:
        """ListTransactions: unknown state names are reported, not fatal; duration_filter
        (KIP-994) keeps transactions running for longer than that many ms;
        transactional_id_pattern (KIP-1152) is a regular expression over the whole id."""
        now = self._now(now_ms)
        wanted: set[TransactionState] = set()
        unknown: list[str] = []
        names = list(state_filters)
        for name in names:
            state = TransactionState.from_name(name)
            if state is None:
                unknown.append(name)
            else:
                wanted.add(state)
        pids = set(producer_id_filters)
        pattern = re.compile(transactional_id_pattern) if transactional_id_pattern else None
        out = []
        for tid, v in sorted(self._cache.items()):
            if v.state is S.DEAD:
                continue
            if pids and v.producer_id not in pids:
                continue
            if names and v.state not in wanted:
                continue
            if duration_filter >= 0 and now - v.transaction_start_timestamp_ms <= duration_filter:
                continue
            if pattern is not None and not pattern.fullmatch(tid):
                continue
            out.append(ListedTransaction(tid, v.producer_id, v.state.state_name))
        return ListTransactionsResult(ErrorCode.none, tuple(unknown), tuple(out))


__all__ = [
    "BrokerSettings",
    "DEFAULT_TRANSACTION_VERSION",
    "EndTxnResult",
    "InitProducerIdResult",
    "ListTransactionsResult",
    "ListedTransaction",
    "OffsetsParticipants",
    "TransactionConfig",
    "TransactionCoordinator",
    "TransactionDescription",
    "is_epoch_exhausted",
    "supports_epoch_bump",
]
