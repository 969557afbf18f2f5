"""Reference transactional producer over the raw protocol client (KIP-98, KIP-447, KIP-890).

Synchronous and explicit: every call does its network round trips before it returns, and
every request/response is reported to an optional history hook. The client state machine
(`txn_state.TxnStateMachine`) and the error handling follow Kafka's Java producer
(`TransactionManager` and `Sender`, clients module, 4.x):

Transaction protocol v1 (TV1: cluster `transaction.version` < 2, or asked for):
  * InitProducerId; AddPartitionsToTxn (<= v3) before the first Produce to a partition;
    Produce <= v11; AddOffsetsToTxn then TxnOffsetCommit (<= v4) to the group coordinator;
    EndTxn <= v4. The epoch stays the same across transactions; per-partition sequences
    continue. After an abortable error the client bumps the epoch itself (InitProducerId
    with its current id/epoch) when the coordinator supports it (InitProducerId >= v3).
Transaction protocol v2 (TV2: finalized `transaction.version` >= 2 and EndTxn v5 / Produce v12):
  * no AddPartitionsToTxn: partitions are tracked locally, the partition leader adds them
    to the transaction on Produce v12+; no AddOffsetsToTxn: TxnOffsetCommit v5 goes to the
    group coordinator directly; EndTxn v5 answers the bumped producer id/epoch, which the
    producer adopts (sequences restart at 0) after every transaction.

A transaction in which nothing was sent and no offsets were added completes locally
without EndTxn (as Kafka's producer does).
"""

from __future__ import annotations

import dataclasses
import datetime
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.client.partition_metadata import PartitionMetadata
from reference_impl.client.raw_client import ClusterClient, RawClient
from reference_impl.client.share_group_metadata import ShareGroupMetadata
from reference_impl.client.txn_state import (
    AbortableTxnError,
    FatalTxnError,
    IllegalTxnStateError,
    Outcome,
    ProducerFencedError,
    Transition,
    TxnError,
    TxnState,
    TxnStateMachine,
    TxnTimeoutError,
    UnsupportedTxnVersionError,
    classify_add_offsets,
    classify_add_partitions,
    classify_end_txn,
    classify_find_coordinator,
    classify_init_producer_id,
    classify_produce,
    classify_txn_offset_commit,
    error_name,
)
from reference_impl.protocol import framing, payloads, records
from reference_impl.protocol.api_keys import ApiKey

PRODUCE, METADATA, FIND_COORDINATOR, API_VERSIONS = ApiKey.PRODUCE, ApiKey.METADATA, ApiKey.FIND_COORDINATOR, 18
INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = ApiKey.INIT_PRODUCER_ID, ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN, ApiKey.TXN_OFFSET_COMMIT

# Highest versions of the transaction protocol v1 (Kafka's LAST_STABLE_VERSION_BEFORE_TRANSACTION_V2).
TV1_MAX_PRODUCE, TV1_MAX_END_TXN, TV1_MAX_TXN_OFFSET_COMMIT = 11, 4, 4
CLIENT_MAX_ADD_PARTITIONS = 3  # v4+ is the broker-to-coordinator (verification) form
TV2_MIN_PRODUCE, TV2_MIN_END_TXN, TV2_MIN_TXN_OFFSET_COMMIT = 12, 5, 5
MESSAGE_TOO_LARGE = ErrorCode.message_too_large
ADD_PARTITIONS_RETRY_BACKOFF_MS = 20  # first AddPartitionsToTxn answered CONCURRENT_TRANSACTIONS

TopicPartition = tuple[str, int]
TXN_SHARE_ACKNOWLEDGE = ApiKey.TXN_SHARE_ACKNOWLEDGE


class ShareAckUnsupportedError(TxnError):
    """KIP-1289 UnsupportedVersionException: the cluster cannot stage share acknowledgements
    (no api key 93, or not TV2). Raised before sending anything; the transaction stays as it
    was and must be aborted (corner case 9)."""


@dataclass(frozen=True)
class GroupMetadata:
    """The consumer group state sendOffsetsToTransaction carries (KIP-447)."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


@dataclass(frozen=True)
class ProducedBatch:
    topic: str
    partition: int
    base_offset: int
    record_count: int
    producer_id: int
    producer_epoch: int
    base_sequence: int


@dataclass
class _Pending:
    records: list[records.NewRecord] = field(default_factory=list)
    size: int = 0


class _Disconnected(Exception):
    pass


def _summarize(value: Any, depth: int = 0) -> Any:
    """JSON-friendly view of a kio payload for the history hook."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return {f.name: _summarize(getattr(value, f.name), depth + 1) for f in fields}  # probe: kio payload fields
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(value)} bytes>"
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, (list, tuple)):
        return [_summarize(v, depth + 1) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


class TransactionalProducer:
    """A transactional producer with Kafka's client state machine, synchronous calls.

    `history_hook(event: dict)` receives, in order, one event per request/response
    (`type="request"`) and per state transition (`type="transition"`); `history` keeps
    them all.
    """

    def __init__(
        self,
        bootstrap: str,
        transactional_id: str,
        transaction_timeout_ms: int = 60000,
        transaction_version: str | int = "auto",
        *,
        history_hook: Callable[[dict[str, Any]], None] | None = None,
        security: Any = None,
        max_block_ms: int = 60000,
        delivery_timeout_ms: int = 60000,
        request_timeout_ms: int = 30000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        batch_size: int = 16384,
        compression: records.Compression | int | str = records.Compression.NONE,
        client_id: str = "kipcheck-txn-producer",
        recheck_transaction_version: bool = False,
    ) -> None:
        if transaction_version not in ("auto", 1, 2):
            raise ValueError(f"transaction_version must be 'auto', 1 or 2, not {transaction_version!r}")
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.requested_transaction_version = transaction_version
        self.max_block_ms = max_block_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self.batch_size = batch_size
        self.compression = records.Compression.parse(compression)
        self.client_id = client_id
        # With "auto", ask ApiVersions again at the end of each TV1 transaction so that a
        # cluster upgraded to TV2 is picked up (Kafka's producer learns it from the
        # finalized features of its connections); off by default to keep the trace lean.
        self.recheck_transaction_version = recheck_transaction_version
        self.history: list[dict[str, Any]] = []
        self._hook = history_hook
        self._lock = threading.RLock()
        self._sm = TxnStateMachine(on_transition=self._on_transition)
        # security: a reference_impl.client.security.ClientSecurity (TLS/SASL), e.g. target.raw_security().
        self._cc = ClusterClient(bootstrap, client_id=client_id, timeout=request_timeout_ms / 1000 + 5, security=security)
        self._conns: dict[int, RawClient] = {}
        self._addresses: dict[int, tuple[str, int]] = dict(self._cc.nodes)
        self._txn_coordinator: int | None = None
        self._group_coordinators: dict[str, int] = {}
        self._meta = PartitionMetadata(self._cc)
        self._producer_id = -1
        self._producer_epoch = -1
        self._tv2: bool | None = None
        self._finalized_transaction_version: int | None = None
        self._coordinator_supports_bumping_epoch = False
        self._client_side_epoch_bump_required = False
        self._transaction_started = False
        self._partitions_in_txn: set[TopicPartition] = set()
        self._new_partitions: set[TopicPartition] = set()
        self._next_sequence: dict[TopicPartition, int] = {}
        self._pending: dict[TopicPartition, _Pending] = {}
        self._pending_operation: str | None = None  # an operation that timed out and must be retried
        self.produced: list[ProducedBatch] = []  # batches acknowledged in the current transaction
        self._closed = False

    # -- explicit state ------------------------------------------------------------------

    @property
    def state(self) -> TxnState:
        return self._sm.state

    @property
    def last_error(self) -> BaseException | None:
        return self._sm.last_error

    @property
    def transitions(self) -> list[Transition]:
        return list(self._sm.transitions)

    @property
    def producer_id(self) -> int:
        return self._producer_id

    @property
    def producer_epoch(self) -> int:
        return self._producer_epoch

    @property
    def producer_id_and_epoch(self) -> tuple[int, int]:
        return self._producer_id, self._producer_epoch

    @property
    def transaction_version(self) -> int | None:
        """1 or 2 once init_transactions() decided it, else None."""
        return None if self._tv2 is None else (2 if self._tv2 else 1)

    @property
    def finalized_transaction_version(self) -> int | None:
        return self._finalized_transaction_version

    @property
    def partitions_in_transaction(self) -> frozenset[TopicPartition]:
        return frozenset(self._partitions_in_txn | self._new_partitions)

    @property
    def transaction_started(self) -> bool:
        return self._transaction_started

    def next_sequence(self, topic: str, partition: int) -> int:
        return self._next_sequence.get((topic, partition), 0)

    # -- public API -------------------------------------------------------------------------

    def init_transactions(self) -> None:
        with self._lock:
            self._check_open()
            if self._pending_operation == "init_transactions" and self.state is TxnState.INITIALIZING:
                return self._run_pending(self._do_init)
            self._throw_if_pending("init_transactions")
            self._sm.maybe_fail_with_error()
            self._sm.transition_to(TxnState.INITIALIZING)
            self._pending_operation = "init_transactions"
            self._run_pending(self._do_init)

    def begin_transaction(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Kafka's beginTransaction(). With `partitions`, the draft round-trip KIP's
        beginTransaction(Set<TopicPartition>): the output partitions are registered with the
        coordinator now, in one AddPartitionsToTxn (TV1), so sends to them need no further
        round trip; sends to other partitions are still added on the fly (DIV-200204).
        Under TV2 the leaders add partitions on Produce, so nothing is sent (DIV-200205)."""
        with self._lock:
            self._check_open()
            self._throw_if_pending("begin_transaction")
            self._sm.maybe_fail_with_error()
            self._sm.transition_to(TxnState.IN_TRANSACTION)
            self.produced = []
            if partitions:
                self._pre_register(partitions)

    def send(
        self,
        topic: str,
        partition: int,
        value: bytes | str | None,
        key: bytes | str | None = None,
        headers: Iterable[tuple[str, bytes | None]] = (),
        timestamp_ms: int | None = None,
    ) -> None:
        """Buffer one record for (topic, partition); a partition's batch is produced when it
        reaches batch_size, on flush(), and on commit."""
        with self._lock:
            self._check_open()
            self._sm.maybe_fail_with_error()
            self._throw_if_pending("send")
            if self._producer_id < 0:
                raise IllegalTxnStateError("cannot send before init_transactions() completed")
            if self.state is not TxnState.IN_TRANSACTION:
                raise IllegalTxnStateError(f"cannot send in state {self.state}")
            tp = (topic, int(partition))
            self._maybe_add_partition(tp)
            v = value.encode() if isinstance(value, str) else value
            k = key.encode() if isinstance(key, str) else key
            rec = records.NewRecord(
                value=v,
                key=k,
                headers=tuple(headers),
                timestamp=int(time.time() * 1000) if timestamp_ms is None else timestamp_ms,
            )
            pending = self._pending.setdefault(tp, _Pending())
            pending.records.append(rec)
            pending.size += len(v or b"") + len(k or b"") + 16
            if pending.size >= self.batch_size:
                self._produce_partitions([tp], self._deadline(self.delivery_timeout_ms))

    def flush(self) -> None:
        """Produce every buffered record now."""
        with self._lock:
            self._check_open()
            self._sm.maybe_fail_with_error()
            self._flush(self._deadline(self.delivery_timeout_ms))

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, int | tuple[int, str | None]],
        group_metadata: GroupMetadata | str,
    ) -> None:
        with self._lock:
            self._check_open()
            self._throw_if_pending("send_offsets_to_transaction")
            self._sm.maybe_fail_with_error()
            if self.state is not TxnState.IN_TRANSACTION:
                raise IllegalTxnStateError(
                    f"cannot send offsets if a transaction is not in progress (state {self.state})"
                )
            group = GroupMetadata(group_metadata) if isinstance(group_metadata, str) else group_metadata
            deadline = self._deadline(self.max_block_ms)
            if self._tv2:
                # TV2: TxnOffsetCommit v5 carries the AddOffsetsToTxn step (KIP-890).
                self._transaction_started = True
            else:
                self._coordinator_call(
                    "AddOffsetsToTxn",
                    ADD_OFFSETS_TO_TXN,
                    None,
                    lambda r: dict(
                        transactional_id=self.transactional_id,
                        producer_id=self._producer_id,
                        producer_epoch=self._producer_epoch,
                        group_id=group.group_id,
                    ),
                    lambda resp: int(resp.error_code),
                    classify_add_offsets,
                    deadline,
                )
                self._transaction_started = True
            self._txn_offset_commit(offsets, group, deadline)

    # -- KIP-1289: share-group acknowledgements in the transaction --------------------------

    def send_share_acknowledgements_to_transaction(
        self,
        acknowledgements: Mapping[TopicPartition, Sequence[tuple[int, int, Sequence[int]]]],
        group_metadata: ShareGroupMetadata,
    ) -> None:
        """KIP-1289 sendShareAcknowledgementsToTransaction: stage (first, last, types) batches
        per (topic, partition) in the open transaction with TxnShareAcknowledge (api key 93)
        to each partition's leader. IllegalTxnStateError outside a transaction;
        ShareAckUnsupportedError before any byte is sent when a leader does not advertise key
        93 or the producer is not TV2 (corner case 9: the transaction must then be aborted).
        A broker refusal does not raise here: the transaction becomes abortable and
        commit_transaction() reports it (the KIP's threading note); fencing stays fatal."""
        with self._lock:
            self._check_open()
            self._throw_if_pending("send_share_acknowledgements_to_transaction")
            self._sm.maybe_fail_with_error()
            if self.state is not TxnState.IN_TRANSACTION:
                raise IllegalTxnStateError(
                    f"cannot stage share acknowledgements if a transaction is not in progress (state {self.state})"
                )
            by_leader: dict[int, dict[TopicPartition, Sequence[tuple[int, int, Sequence[int]]]]] = {}
            for tp, batches in acknowledgements.items():
                by_leader.setdefault(self._meta.leader((tp[0], int(tp[1]))), {})[(tp[0], int(tp[1]))] = batches
            if not self._tv2 or any(self._conn(n).negotiate(TXN_SHARE_ACKNOWLEDGE) is None for n in by_leader):
                raise ShareAckUnsupportedError("the cluster does not support KIP-1289 (api key 93 / TV2)")
            self._transaction_started = True
            for node, acks in sorted(by_leader.items()):
                code = self._stage_share_acks(self._conn(node), acks, group_metadata)
                if code == ErrorCode.none:
                    continue
                error_cls = ProducerFencedError if code in (ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch) \
                    else AbortableTxnError
                error = error_cls(f"TxnShareAcknowledge failed: {ErrorCode(code).name}", int(code))
                if error_cls is ProducerFencedError:
                    self._sm.to_fatal_error(error)
                else:
                    self._sm.to_abortable_error(error)
                return

    def _stage_share_acks(
        self, client: RawClient, acks: Mapping[TopicPartition, Sequence[tuple[int, int, Sequence[int]]]],
        group: ShareGroupMetadata,
    ) -> int:
        """One TxnShareAcknowledge; the top-level error, else the first partition error."""
        cls = framing.request_schema(TXN_SHARE_ACKNOWLEDGE, 0)
        topics: dict[Any, list[Any]] = {}
        for (topic, p), batches in sorted(acks.items()):
            topics.setdefault(self._meta.topic_id(topic), []).append(payloads.build(
                payloads.nested(cls, "TxnShareAcknowledgePartition"), partition_index=p,
                acknowledgement_batches=tuple(
                    payloads.build(payloads.nested(cls, "TxnShareAcknowledgeBatch"), first_offset=f, last_offset=l,
                                   acknowledge_types=tuple(int(t) for t in types))
                    for f, l, types in batches
                ),
            ))
        resp = client.send(payloads.build(
            cls, transactional_id=self.transactional_id, group_id=group.group_id, producer_id=self._producer_id,
            producer_epoch=self._producer_epoch, member_id=group.member_id, member_epoch=group.member_epoch,
            topics=tuple(payloads.build(payloads.nested(cls, "TxnShareAcknowledgeTopic"), topic_id=t, partitions=tuple(ps))
                         for t, ps in topics.items()),
        ))
        if resp.error_code != ErrorCode.none:
            return int(resp.error_code)
        return next((int(p.error_code) for t in resp.responses for p in t.partitions if p.error_code != ErrorCode.none), 0)

    def commit_transaction(self) -> None:
        with self._lock:
            self._check_open()
            if self._pending_operation == "commit_transaction" and self.state is TxnState.COMMITTING_TRANSACTION:
                return self._run_pending(lambda: self._complete(committed=True))
            if self._pending_operation == "commit_transaction" and self.state is TxnState.INITIALIZING:
                return self._run_pending(self._finish_epoch_bump)  # the bump after EndTxn timed out
            self._throw_if_pending("commit_transaction")
            self._sm.maybe_fail_with_error()
            self._sm.transition_to(TxnState.COMMITTING_TRANSACTION)
            self._pending_operation = "commit_transaction"
            self._run_pending(lambda: self._complete(committed=True))

    def abort_transaction(self) -> None:
        with self._lock:
            self._check_open()
            if self._pending_operation == "abort_transaction" and self.state is TxnState.ABORTING_TRANSACTION:
                return self._run_pending(lambda: self._complete(committed=False))
            if self._pending_operation == "abort_transaction" and self.state is TxnState.INITIALIZING:
                return self._run_pending(self._finish_epoch_bump)  # the bump after EndTxn timed out
            self._throw_if_pending("abort_transaction")
            if self.state is not TxnState.ABORTABLE_ERROR:
                self._sm.maybe_fail_with_error()
            self._sm.transition_to(TxnState.ABORTING_TRANSACTION)
            self._pending_operation = "abort_transaction"
            # Unsent records of an aborted transaction are dropped; no partition is added for them.
            self._pending.clear()
            self._new_partitions.clear()
            self._run_pending(lambda: self._complete(committed=False))

    def close(self) -> None:
        """Close the connections. An open transaction is left to the coordinator's
        transaction timeout (as Kafka's producer does on close)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for c in self._conns.values():
                c.close()
            self._conns.clear()
            self._cc.close()

    def __enter__(self) -> "TransactionalProducer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- operations -------------------------------------------------------------------------

    def _do_init(self) -> None:
        deadline = self._deadline(self.max_block_ms)
        if self._tv2 is None:
            self._decide_transaction_version()
        self._init_producer_id(-1, -1, deadline)
        self._sm.transition_to(TxnState.READY)

    def _complete(self, committed: bool) -> None:
        deadline = self._deadline(self.max_block_ms)
        if committed:
            self._flush(deadline)  # a failed batch moves Committing -> AbortableError and raises
        tv2_for_txn = bool(self._tv2)
        if self._transaction_started:
            self._end_txn(committed, tv2_for_txn, deadline)
        # Like Kafka's maybeUpdateTransactionV2Enabled(false) at the end of a transaction: a
        # cluster upgraded to TV2 makes the next transaction TV2, after an epoch bump.
        self._maybe_upgrade_transaction_version()
        self._complete_transaction(deadline)

    def _complete_transaction(self, deadline: float) -> None:
        bump = self._client_side_epoch_bump_required
        self._sm.transition_to(TxnState.INITIALIZING if bump else TxnState.READY)
        self._client_side_epoch_bump_required = False
        self._transaction_started = False
        self._new_partitions.clear()
        self._partitions_in_txn.clear()
        self._pending.clear()
        if bump:
            # Client-side epoch bump (TV1 recovery after an abortable error, or upgrade to TV2).
            self._finish_epoch_bump(deadline)

    def _finish_epoch_bump(self, deadline: float | None = None) -> None:
        if deadline is None:
            deadline = self._deadline(self.max_block_ms)
        self._init_producer_id(self._producer_id, self._producer_epoch, deadline)
        self._next_sequence.clear()
        self._sm.transition_to(TxnState.READY)

    def _pre_register(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in sorted({(str(t), int(p)) for t, p in partitions}):
            self._maybe_add_partition(tp)
        if not self._tv2 and self._new_partitions:
            self._add_partitions_to_txn(self._deadline(self.max_block_ms))

    def _maybe_add_partition(self, tp: TopicPartition) -> None:
        if self._tv2:
            self._partitions_in_txn.add(tp)
            self._transaction_started = True
        elif tp in self._partitions_in_txn or tp in self._new_partitions:
            return
        else:
            self._new_partitions.add(tp)

    # -- InitProducerId / FindCoordinator / ApiVersions ---------------------------------------

    def _decide_transaction_version(self) -> None:
        client = self._cc.bootstrap
        # Negotiate down as Kafka clients do (older brokers and the librdkafka mock stop
        # below v3), then ask at the agreed version for the finalized features (v3+).
        try:
            client.api_versions(3)
        except RuntimeError as exc:
            raise FatalTxnError(f"ApiVersions failed: {exc}", 35) from exc
        req = payloads.build(
            framing.request_schema(API_VERSIONS, client.api_versions_version),
            client_software_name="kipcheck",
            client_software_version="0.1.0",
        )
        resp = self._send(client, "ApiVersions", req, node_id=None)
        if int(resp.error_code) != 0:
            raise FatalTxnError(f"ApiVersions failed: {error_name(int(resp.error_code))}", int(resp.error_code))
        versions = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}
        finalized = {f.name: int(f.max_version_level) for f in (payloads.get(resp, "finalized_features") or ())}
        self._finalized_transaction_version = finalized.get("transaction.version", 0)

        def max_of(key: int) -> int:
            return versions.get(key, (0, -1))[1]

        broker_speaks_tv2 = (
            max_of(END_TXN) >= TV2_MIN_END_TXN
            and max_of(PRODUCE) >= TV2_MIN_PRODUCE
            and max_of(TXN_OFFSET_COMMIT) >= TV2_MIN_TXN_OFFSET_COMMIT
        )
        cluster_tv2 = self._finalized_transaction_version >= 2 and broker_speaks_tv2
        if self.requested_transaction_version == "auto":
            self._tv2 = cluster_tv2
        elif self.requested_transaction_version == 2:
            if not cluster_tv2:
                err = UnsupportedTxnVersionError(
                    "transaction_version=2 asked for, but the cluster has transaction.version="
                    f"{self._finalized_transaction_version} and EndTxn<=v{max_of(END_TXN)}, "
                    f"Produce<=v{max_of(PRODUCE)}"
                )
                self._sm.to_fatal_error(err)
                raise err
            self._tv2 = True
        else:
            self._tv2 = False

    def _maybe_upgrade_transaction_version(self) -> None:
        if self.requested_transaction_version != "auto" or self._tv2 or not self.recheck_transaction_version:
            return
        was = self._tv2
        try:
            self._decide_transaction_version()
        except (ConnectionError, OSError):
            return
        if not was and self._tv2:
            self._client_side_epoch_bump_required = True

    def _init_producer_id(self, producer_id: int, producer_epoch: int, deadline: float) -> None:
        resp = self._coordinator_call(
            "InitProducerId",
            INIT_PRODUCER_ID,
            None,
            lambda r: dict(
                transactional_id=self.transactional_id,
                transaction_timeout=datetime.timedelta(milliseconds=self.transaction_timeout_ms),
                producer_id=producer_id,
                producer_epoch=producer_epoch,
            ),
            lambda resp: int(resp.error_code),
            classify_init_producer_id,
            deadline,
        )
        self._set_producer_id_and_epoch(int(resp.producer_id), int(resp.producer_epoch))
        self._next_sequence.clear()

    def _set_producer_id_and_epoch(self, producer_id: int, producer_epoch: int) -> None:
        self._producer_id, self._producer_epoch = producer_id, producer_epoch

    def _find_coordinator(self, key: str, key_type: int, deadline: float) -> int:
        backoff = self.retry_backoff_ms
        while True:
            client = self._cc.bootstrap
            version = client.negotiate(FIND_COORDINATOR, 6)
            if version is None:
                raise FatalTxnError("broker does not support FindCoordinator")
            if version >= 4:
                req = payloads.build(
                    framing.request_schema(FIND_COORDINATOR, version), key_type=key_type, coordinator_keys=(key,)
                )
            else:
                req = payloads.build(framing.request_schema(FIND_COORDINATOR, version), key=key, key_type=key_type)
            try:
                resp = self._send(client, "FindCoordinator", req, node_id=None)
            except _Disconnected:
                self._reconnect_bootstrap()
                self._sleep_or_timeout(backoff, deadline, "FindCoordinator")
                backoff = self._next_backoff(backoff)
                continue
            c = resp.coordinators[0] if version >= 4 else resp
            code = int(c.error_code)
            outcome = classify_find_coordinator(code)
            if outcome is Outcome.OK:
                node_id = int(c.node_id)
                self._addresses[node_id] = (c.host, int(c.port))
                return node_id
            if outcome is Outcome.RETRY:
                self._sleep_or_timeout(backoff, deadline, "FindCoordinator", code)
                backoff = self._next_backoff(backoff)
                continue
            self._apply_outcome(outcome, "FindCoordinator", code)

    def _coordinator(self, group_id: str | None, deadline: float) -> tuple[int, RawClient]:
        if group_id is None:
            if self._txn_coordinator is None:
                self._txn_coordinator = self._find_coordinator(self.transactional_id, 1, deadline)
                conn = self._conn(self._txn_coordinator)
                self._coordinator_supports_bumping_epoch = (conn.negotiate(INIT_PRODUCER_ID) or 0) >= 3
            node = self._txn_coordinator
        else:
            node = self._group_coordinators.get(group_id)
            if node is None:
                node = self._group_coordinators[group_id] = self._find_coordinator(group_id, 0, deadline)
        return node, self._conn(node)

    def _drop_coordinator_connection(self, group_id: str | None) -> None:
        node = self._txn_coordinator if group_id is None else self._group_coordinators.get(group_id)
        if node is not None:
            dead = self._conns.pop(node, None)
            if dead is not None:
                dead.close()

    def _forget_coordinator(self, group_id: str | None) -> None:
        if group_id is None:
            self._txn_coordinator = None
        else:
            self._group_coordinators.pop(group_id, None)

    def _coordinator_call(
        self,
        api: str,
        api_key: int,
        group_id: str | None,
        fields: Callable[[RawClient], dict[str, Any]],
        error_of: Callable[[Any], int],
        classify: Callable[[int], Outcome],
        deadline: float,
        max_version: int | None = None,
        min_version: int = 0,
        backoff_ms: int | None = None,
        on_retry_code: Callable[[int, int], int] | None = None,
    ) -> Any:
        """One coordinator request, retried on retriable errors (rediscovering the coordinator
        for NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / disconnects) until the deadline;
        abortable and fatal answers move the state machine and raise."""
        backoff = self.retry_backoff_ms if backoff_ms is None else backoff_ms
        while True:
            try:
                node, client = self._coordinator(group_id, deadline)
                version = client.negotiate(api_key, max_version)
            except (_Disconnected, ConnectionError, OSError):
                self._drop_coordinator_connection(group_id)
                self._forget_coordinator(group_id)
                self._sleep_or_timeout(backoff, deadline, api)
                backoff = self._next_backoff(backoff)
                continue
            if version is None or version < min_version:
                err = UnsupportedTxnVersionError(
                    f"coordinator {node} does not support {api} at v{min_version}..v{max_version}"
                )
                self._sm.to_fatal_error(err)
                raise err
            req = payloads.build(framing.request_schema(api_key, version), **fields(client))
            try:
                resp = self._send(client, api, req, node_id=node)
            except _Disconnected:
                self._forget_coordinator(group_id)
                self._sleep_or_timeout(backoff, deadline, api)
                backoff = self._next_backoff(backoff)
                continue
            code = error_of(resp)
            outcome = classify(code)
            if outcome is Outcome.OK:
                return resp
            if outcome in (Outcome.RETRY, Outcome.REDISCOVER):
                if outcome is Outcome.REDISCOVER:
                    self._forget_coordinator(group_id)
                if on_retry_code is not None:
                    backoff = on_retry_code(code, backoff)
                self._sleep_or_timeout(backoff, deadline, api, code)
                backoff = self._next_backoff(backoff)
                continue
            self._apply_outcome(outcome, api, code)

    def _apply_outcome(self, outcome: Outcome, api: str, code: int, message: str | None = None) -> None:
        text = message or f"{api} failed with {error_name(code)} ({code})"
        if outcome is Outcome.ABORTABLE_IF_POSSIBLE:
            if self._can_handle_abortable_error():
                if self._need_client_epoch_bump():
                    self._client_side_epoch_bump_required = True
                outcome = Outcome.ABORTABLE
            else:
                outcome = Outcome.FATAL
        if outcome is Outcome.ABORTABLE:
            err: TxnError = AbortableTxnError(text, code)
            self._sm.to_abortable_error(err)
            raise err
        if outcome is Outcome.FENCED:
            err = ProducerFencedError(
                f"{text}: there is a newer producer with the same transactional id", code
            )
            self._sm.to_fatal_error(err)
            raise err
        err = FatalTxnError(text, code)
        self._sm.to_fatal_error(err)
        raise err

    def _can_handle_abortable_error(self) -> bool:
        return self._coordinator_supports_bumping_epoch or bool(self._tv2)

    def _need_client_epoch_bump(self) -> bool:
        return self._coordinator_supports_bumping_epoch and not self._tv2

    # -- AddPartitionsToTxn (TV1) -------------------------------------------------------------

    def _add_partitions_to_txn(self, deadline: float) -> None:
        partitions = sorted(self._new_partitions)
        if not partitions:
            return
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)

        def fields(client: RawClient) -> dict[str, Any]:
            version = client.negotiate(ADD_PARTITIONS_TO_TXN, CLIENT_MAX_ADD_PARTITIONS)
            cls = framing.request_schema(ADD_PARTITIONS_TO_TXN, version)
            topics = tuple(
                payloads.build(payloads.nested(cls, "AddPartitionsToTxnTopic"), name=t, partitions=tuple(ps))
                for t, ps in by_topic.items()
            )
            return dict(
                v3_and_below_transactional_id=self.transactional_id,
                v3_and_below_producer_id=self._producer_id,
                v3_and_below_producer_epoch=self._producer_epoch,
                v3_and_below_topics=topics,
                transactional_id=self.transactional_id,
                producer_id=self._producer_id,
                producer_epoch=self._producer_epoch,
                topics=topics,
            )

        def first_error(resp: Any) -> int:
            results = payloads.get(resp, "results_by_topic_v3_and_below") or payloads.get(resp, "results") or ()
            codes = [int(pr.partition_error_code) for tr in results for pr in tr.results_by_partition]
            # The most telling code: anything but OPERATION_NOT_ATTEMPTED (55) first.
            for c in codes:
                if c not in (0, 55):
                    return c
            return 55 if 55 in codes else 0

        def backoff_for(code: int, backoff: int) -> int:
            # Kafka lowers the backoff when the first AddPartitions of a transaction meets
            # CONCURRENT_TRANSACTIONS: the previous transaction is still completing.
            if code == 51 and not self._partitions_in_txn:
                return min(backoff, ADD_PARTITIONS_RETRY_BACKOFF_MS)
            return backoff

        self._coordinator_call(
            "AddPartitionsToTxn",
            ADD_PARTITIONS_TO_TXN,
            None,
            fields,
            first_error,
            classify_add_partitions,
            deadline,
            max_version=CLIENT_MAX_ADD_PARTITIONS,
            on_retry_code=backoff_for,
        )
        self._partitions_in_txn.update(partitions)
        self._new_partitions.difference_update(partitions)
        self._transaction_started = True

    # -- TxnOffsetCommit ---------------------------------------------------------------------

    def _txn_offset_commit(
        self,
        offsets: Mapping[TopicPartition, int | tuple[int, str | None]],
        group: GroupMetadata,
        deadline: float,
    ) -> None:
        pending: dict[TopicPartition, tuple[int, str | None]] = {}
        for (t, p), v in offsets.items():
            off, meta = (v, "") if isinstance(v, int) else (int(v[0]), v[1])
            pending[(t, int(p))] = (int(off), meta)
        max_version = TV2_MIN_TXN_OFFSET_COMMIT if self._tv2 else TV1_MAX_TXN_OFFSET_COMMIT
        min_version = TV2_MIN_TXN_OFFSET_COMMIT if self._tv2 else 0
        uses_group_metadata = group.generation_id != -1 or group.member_id != "" or group.group_instance_id
        if uses_group_metadata:
            min_version = max(min_version, 3)
        backoff = self.retry_backoff_ms
        while pending:
            by_topic: dict[str, list[tuple[int, int, str | None]]] = {}
            for (t, p), (off, meta) in sorted(pending.items()):
                by_topic.setdefault(t, []).append((p, off, meta))

            def fields(client: RawClient) -> dict[str, Any]:
                version = client.negotiate(TXN_OFFSET_COMMIT, max_version)
                cls = framing.request_schema(TXN_OFFSET_COMMIT, version)
                topics = tuple(
                    payloads.build(
                        payloads.nested(cls, "TxnOffsetCommitRequestTopic"),
                        name=t,
                        partitions=tuple(
                            payloads.build(
                                payloads.nested(cls, "TxnOffsetCommitRequestPartition"),
                                partition_index=p,
                                committed_offset=off,
                                committed_leader_epoch=-1,
                                committed_metadata=meta,
                            )
                            for p, off, meta in ps
                        ),
                    )
                    for t, ps in by_topic.items()
                )
                return dict(
                    transactional_id=self.transactional_id,
                    group_id=group.group_id,
                    producer_id=self._producer_id,
                    producer_epoch=self._producer_epoch,
                    generation_id=group.generation_id,
                    member_id=group.member_id,
                    group_instance_id=group.group_instance_id,
                    topics=topics,
                )

            results: dict[TopicPartition, int] = {}

            def collect(resp: Any) -> int:
                results.clear()
                for tr in resp.topics:
                    for pr in tr.partitions:
                        results[(tr.name, int(pr.partition_index))] = int(pr.error_code)
                # Per-partition handling below; let the call return for any answer.
                return 0

            self._coordinator_call(
                "TxnOffsetCommit",
                TXN_OFFSET_COMMIT,
                group.group_id,
                fields,
                collect,
                lambda code: Outcome.OK,
                deadline,
                max_version=max_version,
                min_version=min_version,
            )
            rediscover = False
            for tp, code in sorted(results.items()):
                outcome = classify_txn_offset_commit(code)
                if outcome is Outcome.OK:
                    pending.pop(tp, None)
                elif outcome is Outcome.REDISCOVER:
                    rediscover = True
                elif outcome is Outcome.RETRY:
                    continue
                else:
                    self._apply_outcome(outcome, "TxnOffsetCommit", code, f"TxnOffsetCommit of {tp} failed with {error_name(code)} ({code})")
            if pending:
                if rediscover:
                    self._forget_coordinator(group.group_id)
                self._sleep_or_timeout(backoff, deadline, "TxnOffsetCommit")
                backoff = self._next_backoff(backoff)

    # -- EndTxn --------------------------------------------------------------------------------

    def _end_txn(self, committed: bool, tv2: bool, deadline: float) -> None:
        if tv2:
            max_version, min_version = None, TV2_MIN_END_TXN
        else:
            max_version, min_version = TV1_MAX_END_TXN, 0
        resp = self._coordinator_call(
            "EndTxn",
            END_TXN,
            None,
            lambda r: dict(
                transactional_id=self.transactional_id,
                producer_id=self._producer_id,
                producer_epoch=self._producer_epoch,
                committed=committed,
            ),
            lambda resp: int(resp.error_code),
            classify_end_txn,
            deadline,
            max_version=max_version,
            min_version=min_version,
        )
        # EndTxn v5+ answers the producer id/epoch to use next (TV2 bumps it every
        # transaction; a new id with epoch 0 when the epoch is exhausted); below v5 it is -1.
        new_id = int(payloads.get(resp, "producer_id", -1))
        if new_id != -1:
            self._set_producer_id_and_epoch(new_id, int(resp.producer_epoch))
            self._next_sequence.clear()

    # -- Produce ----------------------------------------------------------------------------------

    def _flush(self, deadline: float) -> None:
        if not any(p.records for p in self._pending.values()):
            return
        self._produce_partitions([tp for tp, p in self._pending.items() if p.records], deadline)

    def _produce_partitions(self, tps: list[TopicPartition], deadline: float) -> None:
        if not self._tv2 and self._new_partitions:
            # TV1: a partition must be in the transaction before a batch is sent to it.
            self._add_partitions_to_txn(self._deadline(self.max_block_ms))
        for tp in sorted(tps):
            pending = self._pending.get(tp)
            if pending is None or not pending.records:
                continue
            self._produce_one(tp, pending.records, deadline)
            del self._pending[tp]

    def _produce_version(self, client: RawClient) -> int:
        if self._tv2:
            version = client.negotiate(PRODUCE)
            if version is None or version < TV2_MIN_PRODUCE:
                err = UnsupportedTxnVersionError(f"leader cannot take Produce v{TV2_MIN_PRODUCE}+ for TV2")
                self._sm.to_fatal_error(err)
                raise err
            return version
        version = client.negotiate(PRODUCE, TV1_MAX_PRODUCE)
        if version is None or version < 3:
            err = UnsupportedTxnVersionError("leader cannot take Produce v3+ (record batch v2)")
            self._sm.to_fatal_error(err)
            raise err
        return version

    def _produce_one(self, tp: TopicPartition, recs: list[records.NewRecord], deadline: float) -> None:
        topic, partition = tp
        base_sequence = self._next_sequence.get(tp, 0)
        batch = records.build_batch(
            recs,
            producer_id=self._producer_id,
            producer_epoch=self._producer_epoch,
            base_sequence=base_sequence,
            transactional=True,
            compression=self.compression,
        )
        backoff = self.retry_backoff_ms
        while True:
            try:
                node = self._leader(tp)
                client = self._conn(node)
                client.negotiate(PRODUCE)  # ApiVersions on a new connection (cached after)
            except (LookupError, _Disconnected, ConnectionError, OSError):
                dead = self._conns.pop(self._meta.leaders.get(tp, -1), None)
                if dead is not None:
                    dead.close()
                self._meta.forget(tp)
                self._produce_retry_or_timeout(backoff, deadline, tp, 3)
                backoff = self._next_backoff(backoff)
                continue
            version = self._produce_version(client)
            cls = framing.request_schema(PRODUCE, version)
            topic_fields: dict[str, Any] = dict(
                name=topic,
                partition_data=(
                    payloads.build(payloads.nested(cls, "PartitionProduceData"), index=partition, records=batch),
                ),
            )
            if payloads.has_field(payloads.nested(cls, "TopicProduceData"), "topic_id"):
                topic_fields["topic_id"] = self._topic_id(topic)
            req = payloads.build(
                cls,
                transactional_id=self.transactional_id,
                acks=-1,
                timeout=datetime.timedelta(milliseconds=self.request_timeout_ms),
                topic_data=(payloads.build(payloads.nested(cls, "TopicProduceData"), **topic_fields),),
            )
            try:
                resp = self._send(
                    client,
                    "Produce",
                    req,
                    node_id=node,
                    extra={
                        "batch": {
                            "topic": topic,
                            "partition": partition,
                            "producer_id": self._producer_id,
                            "producer_epoch": self._producer_epoch,
                            "base_sequence": base_sequence,
                            "record_count": len(recs),
                        }
                    },
                )
            except _Disconnected:
                self._meta.forget(tp)
                self._produce_retry_or_timeout(backoff, deadline, tp, 13)
                backoff = self._next_backoff(backoff)
                continue
            pr = resp.responses[0].partition_responses[0]
            code = int(pr.error_code)
            outcome = classify_produce(code)
            if outcome in (Outcome.OK, Outcome.DUPLICATE):
                self._next_sequence[tp] = (base_sequence + len(recs)) % (1 << 31)
                self.produced.append(
                    ProducedBatch(
                        topic, partition, int(pr.base_offset), len(recs),
                        self._producer_id, self._producer_epoch, base_sequence,
                    )
                )
                return
            if code == MESSAGE_TOO_LARGE and len(recs) > 1:
                # As Kafka's sender: split a batch the partition refuses as too large and send
                # the halves (same base sequence: the refused batch was not written).
                half = len(recs) // 2
                self._produce_one(tp, recs[:half], deadline)
                self._produce_one(tp, recs[half:], deadline)
                return
            if outcome in (Outcome.RETRY, Outcome.REDISCOVER):
                if outcome is Outcome.REDISCOVER:
                    self._meta.forget(tp)
                self._produce_retry_or_timeout(backoff, deadline, tp, code)
                backoff = self._next_backoff(backoff)
                continue
            message = payloads.get(pr, "error_message")
            if outcome is Outcome.ABORTABLE and self._need_client_epoch_bump() and self.state is not TxnState.ABORTING_TRANSACTION:
                # Kafka's maybeTransitionToErrorState: a failed batch of a TV1 transaction makes
                # the client bump the epoch after the abort (the batches are flushed here, where
                # Kafka's sender would have sent them while the transaction was in progress).
                self._client_side_epoch_bump_required = True
            self._apply_outcome(
                outcome,
                "Produce",
                code,
                f"Produce to {topic}-{partition} failed with {error_name(code)} ({code})"
                + (f": {message}" if message else ""),
            )

    def _produce_retry_or_timeout(self, backoff: int, deadline: float, tp: TopicPartition, code: int) -> None:
        if time.monotonic() + backoff / 1000 > deadline:
            # Kafka expires the batch at delivery.timeout.ms: a TimeoutException, abortable.
            err = AbortableTxnError(
                f"Produce to {tp[0]}-{tp[1]} expired after retrying {error_name(code)} ({code})", code
            )
            self._sm.to_abortable_error(err)
            raise err
        time.sleep(backoff / 1000)

    def _leader(self, tp: TopicPartition) -> int:
        node = self._meta.leader(tp)
        self._addresses.update(self._cc.nodes)
        return node

    def _topic_id(self, topic: str) -> Any:
        return self._meta.topic_id(topic)

    # -- plumbing -----------------------------------------------------------------------------------

    def _conn(self, node_id: int) -> RawClient:
        c = self._conns.get(node_id)
        if c is None:
            if node_id not in self._addresses:
                self._cc.refresh()
                self._addresses.update(self._cc.nodes)
            host, port = self._addresses[node_id]
            try:
                c = self._cc.connect_to(host, port, timeout=self.request_timeout_ms / 1000 + 5)
            except ConnectionError as exc:
                raise _Disconnected(str(exc)) from exc
            self._conns[node_id] = c
        return c

    def _reconnect_bootstrap(self) -> None:
        try:
            self._cc.reconnect(",".join(f"{h}:{p}" for h, p in self._addresses.values()))
        except (ConnectionError, ValueError):
            pass

    def _send(
        self, client: RawClient, api: str, payload: Any, node_id: int | None, extra: dict[str, Any] | None = None
    ) -> Any:
        started = time.monotonic()
        state_before = str(self.state)
        try:
            resp = client.send(payload)
        except (ConnectionError, OSError, TimeoutError) as exc:
            if node_id is not None:
                dead = self._conns.pop(node_id, None)
                if dead is not None:
                    dead.close()
            self._emit(
                {
                    "type": "request",
                    "api": api,
                    "api_key": int(payload.__api_key__),
                    "version": int(payload.__version__),
                    "node": node_id,
                    "request": _summarize(payload),
                    "error_code": None,
                    "error": f"disconnected: {exc}",
                    "response": None,
                    "elapsed_ms": round((time.monotonic() - started) * 1000, 3),
                    "state": state_before,
                    "producer_id": self._producer_id,
                    "producer_epoch": self._producer_epoch,
                    **(extra or {}),
                }
            )
            raise _Disconnected(str(exc)) from exc
        code = _first_error_code(resp)
        self._emit(
            {
                "type": "request",
                "api": api,
                "api_key": int(payload.__api_key__),
                "version": int(payload.__version__),
                "node": node_id,
                "request": _summarize(payload),
                "error_code": code,
                "error": None if code in (None, 0) else error_name(code),
                "response": _summarize(resp),
                "elapsed_ms": round((time.monotonic() - started) * 1000, 3),
                "state": state_before,
                "producer_id": self._producer_id,
                "producer_epoch": self._producer_epoch,
                **(extra or {}),
            }
        )
        return resp

    def _on_transition(self, t: Transition) -> None:
        self._emit(
            {
                "type": "transition",
                "from": str(t.source),
                "to": str(t.target),
                "error": None if t.error is None else repr(t.error),
                "producer_id": self._producer_id,
                "producer_epoch": self._producer_epoch,
            }
        )

    def _emit(self, event: dict[str, Any]) -> None:
        event["ts"] = time.time()
        event["transactional_id"] = self.transactional_id
        self.history.append(event)
        if self._hook is not None:
            self._hook(event)

    def _deadline(self, ms: int) -> float:
        return time.monotonic() + ms / 1000

    def _next_backoff(self, backoff: int) -> int:
        return min(backoff * 2, self.retry_backoff_max_ms)

    def _sleep_or_timeout(self, backoff: int, deadline: float, api: str, code: int | None = None) -> None:
        if time.monotonic() + backoff / 1000 > deadline:
            why = "" if code is None else f" (last error {error_name(code)})"
            raise TxnTimeoutError(f"{api} did not complete before the deadline{why}", code)
        time.sleep(backoff / 1000)

    def _run_pending(self, op: Callable[[], None]) -> None:
        """Run the operation of `_pending_operation`; a TxnTimeoutError keeps it pending so
        that the same call can be retried, any other outcome clears it."""
        try:
            op()
        except TxnTimeoutError:
            raise
        except BaseException:
            self._pending_operation = None
            raise
        self._pending_operation = None

    def _throw_if_pending(self, operation: str) -> None:
        if self._pending_operation is not None and self._pending_operation != operation:
            raise IllegalTxnStateError(
                f"cannot attempt operation `{operation}` because the previous call to "
                f"`{self._pending_operation}` timed out and must be retried"
            )

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalTxnStateError("producer is closed")


def _first_error_code(resp: Any) -> int | None:
    """The top-level error code of a response, or the first non-zero nested one."""
    if payloads.has_field(resp, "error_code"):
        return int(resp.error_code)
    found: list[int] = []

    def walk(v: Any) -> None:
        if found:
            return
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            for f in dataclasses.fields(v):
                if f.name in ("error_code", "partition_error_code"):
                    c = int(getattr(v, f.name))  # probe: a kio payload's field, named by dataclasses.fields
                    if c != 0:
                        found.append(c)
                        return
                else:
                    walk(getattr(v, f.name))  # probe: a kio payload's field, named by dataclasses.fields
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)

    walk(resp)
    return found[0] if found else 0


__all__ = [
    "AbortableTxnError",
    "FatalTxnError",
    "GroupMetadata",
    "IllegalTxnStateError",
    "ProducedBatch",
    "ProducerFencedError",
    "TransactionalProducer",
    "TxnError",
    "TxnState",
    "TxnTimeoutError",
    "UnsupportedTxnVersionError",
]
