"""Unit tests of the transaction coordinator model (no I/O, ManualClock)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from kio.schema.errors import ErrorCode

from reference_impl.model.broker_state import BrokerConfig
from reference_impl.model.clock import ManualClock
from reference_impl.model.producer_ids import ProducerIdManager
from reference_impl.model.topics import CreatableTopicSpec, TopicRegistry
from reference_impl.model.transaction_coordinator import (
    TransactionConfig,
    TransactionCoordinator,
    is_epoch_exhausted,
)
from reference_impl.model.java_hash import java_string_hash
from reference_impl.model.transaction_log import TransactionLog, partition_for
from reference_impl.model.transaction_state import (
    VALID_PREVIOUS_STATES,
    IllegalStateTransition,
    TransactionState,
    check_transition,
)
from reference_impl.protocol import records as rec

S = TransactionState
T = "txn-1"
TOPIC = "t"
TIMEOUT = 60_000


class FakeGroups:
    """Stand-in for the group coordinator (transaction_coordinator.OffsetsParticipants):
    records completed transactional offsets, holds no pending ones."""

    def __init__(self) -> None:
        self.completed: list[tuple[str, int, int, bool]] = []

    def complete_transactional_offsets(self, group_id, producer_id, producer_epoch, committed):
        self.completed.append((group_id, producer_id, producer_epoch, committed))
        return []

    def offsets_partition_for(self, group_id):
        return partition_for(group_id)

    def groups_with_open_transactions(self):
        return ()

    def open_transactions(self, group_id):
        return frozenset()


def make(tv: int = 2, marker_delay_ms: int | None = 0, **cfg) -> tuple[TransactionCoordinator, ManualClock, TopicRegistry, FakeGroups]:
    clock = ManualClock()
    config = BrokerConfig(finalized_features={"transaction.version": tv})
    topics = TopicRegistry([1, 2, 3], clock, config)
    topics.create(CreatableTopicSpec(TOPIC, num_partitions=3))
    groups = FakeGroups()
    tc = TransactionCoordinator(
        [1, 2, 3], clock, config, topics, groups,
        producer_ids=ProducerIdManager(), txn_config=TransactionConfig(marker_delay_ms=marker_delay_ms, **cfg),
    )
    return tc, clock, topics, groups


def markers(topics: TopicRegistry, partition: int) -> list[tuple[rec.ControlType, int, int]]:
    out = []
    for b in topics.log(TOPIC, partition).batches:
        if b.is_control:
            ctype, _ = rec.parse_control_record(b.decode()[0])
            out.append((ctype, b.producer_id, b.header.producer_epoch))
    return out


def begin(tc: TransactionCoordinator, *parts: int, tid: str = T, timeout: int = TIMEOUT) -> tuple[int, int]:
    r = tc.init_producer_id(tid, timeout)
    assert r.error == ErrorCode.none
    if parts:
        assert tc.add_partitions(tid, r.producer_id, r.producer_epoch, [(TOPIC, p) for p in parts]) == ErrorCode.none
    return r.producer_id, r.producer_epoch


# -- states and log ----------------------------------------------------------------------


def test_state_table_is_kafkas() -> None:
    assert [s.state_name for s in S] == [
        "Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
        "PrepareEpochFence",
    ]
    assert VALID_PREVIOUS_STATES[S.PREPARE_COMMIT] == {S.ONGOING}
    assert VALID_PREVIOUS_STATES[S.PREPARE_ABORT] == {
        S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}
    assert VALID_PREVIOUS_STATES[S.DEAD] == {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}
    assert {s for s in S if s.expiration_allowed} == {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}
    assert S.from_name("PrepareEpochFence") is S.PREPARE_EPOCH_FENCE and S.from_name("nope") is None
    with pytest.raises(IllegalStateTransition):
        check_transition(S.EMPTY, S.PREPARE_COMMIT)


def test_transaction_state_partition_uses_java_hash() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -2147483648
    assert partition_for("polygenelubricants") == 0  # Utils.abs(Integer.MIN_VALUE) == 0
    negative = "zzzzzzzz"
    assert java_string_hash(negative) < 0
    # Kafka's Utils.abs(hash) % n, not (hash & 0x7fffffff) % n: they differ for negative hashes.
    assert partition_for(negative) == abs(java_string_hash(negative)) % 50


# -- InitProducerId ------------------------------------------------------------------------


def test_init_producer_id_without_transactional_id() -> None:
    tc, *_ = make()
    a, b = tc.init_producer_id(None, 0), tc.init_producer_id(None, 0)
    assert (a.error, a.producer_epoch, b.producer_epoch) == (ErrorCode.none, 0, 0)
    assert b.producer_id == a.producer_id + 1
    assert len(tc.log) == 0  # idempotent producers leave no transaction state


def test_init_producer_id_bumps_epoch_and_validates() -> None:
    tc, *_ = make()
    first = tc.init_producer_id(T, TIMEOUT)
    second = tc.init_producer_id(T, TIMEOUT)
    assert (first.producer_epoch, second.producer_epoch) == (0, 1)
    assert second.producer_id == first.producer_id
    assert tc.init_producer_id(T, 900_001).error == ErrorCode.invalid_transaction_timeout
    assert tc.init_producer_id(T, 0).error == ErrorCode.invalid_transaction_timeout
    assert tc.init_producer_id("", TIMEOUT).error == ErrorCode.invalid_request
    assert tc.metadata(T).state is S.EMPTY and len(tc.log) == 2


def test_kip360_init_with_existing_producer_id_and_epoch() -> None:
    tc, *_ = make()
    pid, epoch = begin(tc)
    bumped = tc.init_producer_id(T, TIMEOUT, (pid, epoch))
    assert (bumped.error, bumped.producer_id, bumped.producer_epoch) == (ErrorCode.none, pid, epoch + 1)
    # A retry of that call (response lost) gets the same epoch again.
    again = tc.init_producer_id(T, TIMEOUT, (pid, epoch))
    assert (again.error, again.producer_epoch) == (ErrorCode.none, epoch + 1)
    assert tc.init_producer_id(T, TIMEOUT, (pid, epoch + 7)).error == ErrorCode.producer_fenced
    assert tc.init_producer_id(T, TIMEOUT, (pid + 99, epoch)).error == ErrorCode.producer_fenced


def test_epoch_exhaustion_allocates_a_new_producer_id() -> None:
    tc, clock, *_ = make()
    pid, _ = begin(tc)
    tc._write(T, replace(tc.metadata(T), producer_epoch=32765), clock.now_ms())
    r = tc.init_producer_id(T, TIMEOUT)
    assert (r.producer_id, r.producer_epoch) == (pid, 32766) and is_epoch_exhausted(32766)
    r2 = tc.init_producer_id(T, TIMEOUT)
    assert r2.producer_id != pid and r2.producer_epoch == 0
    assert tc.metadata(T).previous_producer_id == pid


# -- AddPartitionsToTxn / EndTxn (TV1) -------------------------------------------------------


def test_tv1_commit_with_asynchronous_markers() -> None:
    tc, clock, topics, _ = make(tv=1, marker_delay_ms=100)
    pid, epoch = begin(tc, 0, 1)
    v = tc.metadata(T)
    assert v.state is S.ONGOING and v.partition_set() == {(TOPIC, 0), (TOPIC, 1)}
    assert v.transaction_start_timestamp_ms == clock.now_ms()
    # Adding what is already there answers NONE without a log write.
    n = len(tc.log)
    assert tc.add_partitions(T, pid, epoch, [(TOPIC, 0)]) == ErrorCode.none and len(tc.log) == n

    r = tc.end_txn(T, pid, epoch, True)
    assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.none, -1, -1)
    assert tc.metadata(T).state is S.PREPARE_COMMIT
    assert tc.pending_markers(T) == {(TOPIC, 0), (TOPIC, 1)}
    # Markers pending: everything touching the transactional id is CONCURRENT_TRANSACTIONS.
    assert tc.init_producer_id(T, TIMEOUT).error == ErrorCode.concurrent_transactions
    assert tc.add_partitions(T, pid, epoch, [(TOPIC, 2)]) == ErrorCode.concurrent_transactions
    assert tc.end_txn(T, pid, epoch, True).error == ErrorCode.concurrent_transactions
    tc.tick(clock.advance(50))
    assert markers(topics, 0) == [] and tc.metadata(T).state is S.PREPARE_COMMIT
    tc.tick(clock.advance(50))
    assert markers(topics, 0) == [(rec.ControlType.COMMIT, pid, epoch)]
    assert markers(topics, 1) == [(rec.ControlType.COMMIT, pid, epoch)] and markers(topics, 2) == []
    v = tc.metadata(T)
    assert v.state is S.COMPLETE_COMMIT and v.partition_set() == frozenset() and v.producer_epoch == epoch
    # Retried EndTxn is idempotent; the opposite outcome is INVALID_TXN_STATE.
    assert tc.end_txn(T, pid, epoch, True).error == ErrorCode.none
    assert tc.end_txn(T, pid, epoch, False).error == ErrorCode.invalid_txn_state


def test_tv1_end_txn_errors() -> None:
    tc, *_ = make(tv=1)
    pid, epoch = begin(tc)
    assert tc.end_txn(T, pid, epoch, True).error == ErrorCode.invalid_txn_state  # Empty
    assert tc.end_txn(T, pid, epoch, False).error == ErrorCode.invalid_txn_state
    assert tc.end_txn(T, pid + 1, epoch, True).error == ErrorCode.invalid_producer_id_mapping
    assert tc.end_txn("unknown", pid, epoch, True).error == ErrorCode.invalid_producer_id_mapping
    assert tc.add_partitions(T, pid + 1, epoch, [(TOPIC, 0)]) == ErrorCode.invalid_producer_id_mapping
    assert tc.add_partitions("unknown", pid, epoch, [(TOPIC, 0)]) == ErrorCode.invalid_producer_id_mapping
    tc.init_producer_id(T, TIMEOUT)
    assert tc.add_partitions(T, pid, epoch, [(TOPIC, 0)]) == ErrorCode.producer_fenced
    assert tc.end_txn(T, pid, epoch, True).error == ErrorCode.producer_fenced


# One bump for the fence under both versions (KAFKA-19367: no second bump under TV2).
@pytest.mark.parametrize("tv, fenced_epoch_delta", [(1, 1), (2, 1)])
def test_init_fences_an_open_transaction(tv: int, fenced_epoch_delta: int) -> None:
    tc, clock, topics, _ = make(tv=tv)
    pid, epoch = begin(tc, 0)
    assert tc.init_producer_id(T, TIMEOUT).error == ErrorCode.concurrent_transactions
    v = tc.metadata(T)
    assert v.state is S.PREPARE_ABORT and v.producer_epoch == epoch + fenced_epoch_delta
    assert tc.init_producer_id(T, TIMEOUT).error == ErrorCode.concurrent_transactions
    tc.tick(clock.advance(1))
    assert markers(topics, 0) == [(rec.ControlType.ABORT, pid, epoch + fenced_epoch_delta)]
    assert tc.metadata(T).state is S.COMPLETE_ABORT
    r = tc.init_producer_id(T, TIMEOUT)
    assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.none, pid, epoch + fenced_epoch_delta + 1)
    # The fenced instance: every coordinator request is refused.
    assert tc.add_partitions(T, pid, epoch, [(TOPIC, 0)]) == ErrorCode.producer_fenced
    assert tc.end_txn(T, pid, epoch, True, client_transaction_version=tv).error == ErrorCode.producer_fenced


# -- transaction version 2 ------------------------------------------------------------------


def test_tv2_end_txn_bumps_epoch_and_retries() -> None:
    tc, clock, topics, _ = make(tv=2)
    pid, epoch = begin(tc)
    # Implicit add by the partition leader (Produce v12+).
    assert tc.verify_or_add_partition(T, pid, epoch, TOPIC, 0, True) == ErrorCode.none
    assert tc.metadata(T).client_transaction_version == 2
    r = tc.end_txn(T, pid, epoch, True, client_transaction_version=2)
    assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.none, pid, epoch + 1)
    assert tc.metadata(T).state is S.PREPARE_COMMIT
    # A retry (old epoch) while markers are pending: CONCURRENT_TRANSACTIONS.
    assert tc.end_txn(T, pid, epoch, True, client_transaction_version=2).error == ErrorCode.concurrent_transactions
    # Pending completion is answered first (KAFKA-18464), whatever the epoch.
    assert tc.end_txn(T, pid, epoch + 1, False, client_transaction_version=2).error == ErrorCode.concurrent_transactions
    assert tc.end_txn(T, pid + 9, epoch, True, client_transaction_version=2).error == ErrorCode.concurrent_transactions
    # ... nor add partitions before the markers are written.
    assert tc.verify_or_add_partition(T, pid, epoch + 1, TOPIC, 1, True) == ErrorCode.concurrent_transactions
    tc.tick(clock.advance(1))
    assert markers(topics, 0) == [(rec.ControlType.COMMIT, pid, epoch + 1)]
    retry = tc.end_txn(T, pid, epoch, True, client_transaction_version=2)
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (ErrorCode.none, pid, epoch + 1)
    assert tc.end_txn(T, pid, epoch, False, client_transaction_version=2).error == ErrorCode.invalid_txn_state
    assert tc.end_txn(T, pid, epoch + 1, True, client_transaction_version=2).error == ErrorCode.invalid_txn_state
    # Abort with the current epoch and nothing open: allowed in TV2, bumps the epoch.
    ab = tc.end_txn(T, pid, epoch + 1, False, client_transaction_version=2)
    assert (ab.error, ab.producer_epoch) == (ErrorCode.none, epoch + 2)
    tc.tick(clock.advance(1))
    assert tc.metadata(T).state is S.COMPLETE_ABORT


def test_tv2_abort_on_empty_and_commit_on_empty() -> None:
    tc, clock, *_ = make(tv=2)
    pid, epoch = begin(tc)
    assert tc.end_txn(T, pid, epoch, True, client_transaction_version=2).error == ErrorCode.invalid_txn_state
    r = tc.end_txn(T, pid, epoch, False, client_transaction_version=2)
    assert (r.error, r.producer_epoch) == (ErrorCode.none, epoch + 1)
    assert tc.metadata(T).transaction_start_timestamp_ms == clock.now_ms()


def test_tv2_epoch_overflow_returns_new_producer_id() -> None:
    tc, clock, topics, _ = make(tv=2)
    pid, _ = begin(tc)
    tc._write(T, replace(tc.metadata(T), producer_epoch=32766), clock.now_ms())
    assert tc.verify_or_add_partition(T, pid, 32766, TOPIC, 0, True) == ErrorCode.none
    r = tc.end_txn(T, pid, 32766, True, client_transaction_version=2)
    assert r.error == ErrorCode.none and r.producer_id != pid and r.producer_epoch == 0
    tc.tick(clock.advance(1))
    assert markers(topics, 0) == [(rec.ControlType.COMMIT, pid, 32767)]
    v = tc.metadata(T)
    assert (v.producer_id, v.producer_epoch, v.previous_producer_id) == (r.producer_id, 0, pid)
    retry = tc.end_txn(T, pid, 32766, True, client_transaction_version=2)
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (ErrorCode.none, r.producer_id, 0)


def test_tv2_fence_at_exhausted_epoch_rotates_producer_id() -> None:
    tc, clock, topics, _ = make(tv=2)
    pid, _ = begin(tc)
    tc._write(T, replace(tc.metadata(T), producer_epoch=32766), clock.now_ms())
    assert tc.verify_or_add_partition(T, pid, 32766, TOPIC, 0, True) == ErrorCode.none
    assert tc.init_producer_id(T, TIMEOUT).error == ErrorCode.concurrent_transactions
    v = tc.metadata(T)
    assert (v.state, v.producer_epoch) == (S.PREPARE_ABORT, 32767) and v.next_producer_id not in (-1, pid)
    tc.tick(clock.advance(1))
    assert markers(topics, 0) == [(rec.ControlType.ABORT, pid, 32767)]
    r = tc.init_producer_id(T, TIMEOUT)
    assert r.error == ErrorCode.none and r.producer_id == v.next_producer_id and r.producer_epoch == 1


def test_tv2_commit_after_timeout_abort() -> None:
    tc, clock, *_ = make(tv=2, transaction_abort_timed_out_transaction_cleanup_interval_ms=100)
    pid, epoch = begin(tc, 0, timeout=1_000)
    for _ in range(12):
        tc.tick(clock.advance(100))
    assert tc.metadata(T).state is S.COMPLETE_ABORT and tc.metadata(T).producer_epoch == epoch + 1
    # Kafka 4.4.0 (checked with kafka-native): the commit at the retry epoch is INVALID_TXN_STATE
    # (KAFKA-20785, after 4.4.0, changes it to PRODUCER_FENCED); an abort retry is NONE.
    assert tc.end_txn(T, pid, epoch, True, client_transaction_version=2).error == ErrorCode.invalid_txn_state
    assert tc.end_txn(T, pid, epoch, False, client_transaction_version=2).error == ErrorCode.none


def test_verification_for_tv1_producers() -> None:
    tc, *_ = make(tv=1)
    pid, epoch = begin(tc, 0)
    assert tc.verify_or_add_partition(T, pid, epoch, TOPIC, 0, False) == ErrorCode.none
    assert tc.verify_or_add_partition(T, pid, epoch, TOPIC, 1, False) == ErrorCode.transaction_abortable
    assert tc.verify_or_add_partition(T, pid, epoch + 1, TOPIC, 0, False) == ErrorCode.producer_fenced
    assert tc.verify_or_add_partition(T, pid + 5, epoch, TOPIC, 0, False) == ErrorCode.invalid_producer_id_mapping
    tc.txn_config.transaction_partition_verification_enable = False
    assert tc.verify_or_add_partition(T, pid, epoch, TOPIC, 1, False) == ErrorCode.none


# -- groups ---------------------------------------------------------------------------------


def test_add_offsets_completes_group_offsets_with_the_marker() -> None:
    tc, clock, topics, groups = make(tv=1)
    pid, epoch = begin(tc, 0)
    assert tc.add_offsets(T, pid, epoch, "g") == ErrorCode.none
    assert tc.metadata(T).groups == ("g",)
    d = tc.describe(T)
    assert ("__consumer_offsets", (tc.offsets_partition_for("g"),)) in d.topics and d.state == "Ongoing"
    # The group's offsets partition counts as added for a TxnOffsetCommit verification.
    assert tc.verify_or_add_partition(T, pid, epoch, "__consumer_offsets", tc.offsets_partition_for("g"), False) == ErrorCode.none
    assert tc.end_txn(T, pid, epoch, True).error == ErrorCode.none
    assert groups.completed == []
    tc.tick(clock.advance(1))
    assert groups.completed == [("g", pid, epoch, True)]
    assert markers(topics, 0) == [(rec.ControlType.COMMIT, pid, epoch)]


def test_offsets_partition_of_an_existing_consumer_offsets_topic_gets_one_marker() -> None:
    """Once FindCoordinator created __consumer_offsets, the group's partition of it gets the
    control batch clients read there (one, though the group joined by AddOffsetsToTxn and its
    partition by TxnOffsetCommit's add), and the group coordinator still completes the offsets."""
    tc, clock, topics, groups = make(tv=2)
    assert topics.ensure_internal("__consumer_offsets") == ErrorCode.leader_not_available
    pid, epoch = begin(tc, 0)
    assert tc.add_offsets(T, pid, epoch, "g") == ErrorCode.none
    offsets_partition = tc.offsets_partition_for("g")
    assert tc.verify_or_add_partition(T, pid, epoch, "__consumer_offsets", offsets_partition, True) == ErrorCode.none
    assert tc.end_txn(T, pid, epoch, False).error == ErrorCode.none
    tc.tick(clock.advance(1))
    assert groups.completed == [("g", pid, epoch, False)]
    control = [rec.parse_control_record(b.decode()[0])[0]
               for b in topics.log("__consumer_offsets", offsets_partition).batches if b.is_control]
    assert control == [rec.ControlType.ABORT]


# -- timers ---------------------------------------------------------------------------------


@pytest.mark.parametrize("tv", [1, 2])
def test_transaction_timeout_aborts_with_epoch_bump(tv: int) -> None:
    tc, clock, topics, _ = make(tv=tv, transaction_abort_timed_out_transaction_cleanup_interval_ms=1_000)
    pid, epoch = begin(tc, 0, timeout=3_000)
    tc.tick(clock.advance(1_000))
    tc.tick(clock.advance(1_000))
    tc.tick(clock.advance(1_000))
    assert tc.metadata(T).state is S.ONGOING  # start + timeout not yet passed
    tc.tick(clock.advance(1_000))
    v = tc.metadata(T)
    assert v.state is S.PREPARE_ABORT and v.producer_epoch > epoch
    tc.tick(clock.advance(1))
    assert tc.metadata(T).state is S.COMPLETE_ABORT
    assert markers(topics, 0) == [(rec.ControlType.ABORT, pid, v.producer_epoch)]
    assert topics.log(TOPIC, 0).last_stable_offset == topics.log(TOPIC, 0).log_end_offset
    # As kafka-native 4.4.0 answers: fenced under TV1, INVALID_TXN_STATE under TV2.
    expected = ErrorCode.producer_fenced if tv == 1 else ErrorCode.invalid_txn_state
    assert tc.end_txn(T, pid, epoch, True, client_transaction_version=tv).error == expected


def test_transactional_id_expiration() -> None:
    tc, clock, *_ = make(transactional_id_expiration_ms=5_000,
                         transaction_remove_expired_transaction_cleanup_interval_ms=1_000)
    pid, epoch = begin(tc)
    other_pid, _ = begin(tc, 0, tid="busy")
    for _ in range(6):
        tc.tick(clock.advance(1_000))
        tc.add_partitions("busy", other_pid, 0, [(TOPIC, 1)])
    assert tc.metadata(T) is None and tc.log.records[-1].is_tombstone
    assert tc.metadata("busy") is not None  # Ongoing never expires
    assert tc.add_partitions(T, pid, epoch, [(TOPIC, 0)]) == ErrorCode.invalid_producer_id_mapping
    assert tc.describe(T).error == ErrorCode.transactional_id_not_found
    assert [t.transactional_id for t in tc.list_transactions().transactions] == ["busy"]
    assert tc.init_producer_id(T, TIMEOUT).error == ErrorCode.none


def test_list_and_describe() -> None:
    tc, clock, *_ = make()
    begin(tc, 0, tid="a")
    pid_b, _ = begin(tc, tid="b")
    clock.advance(10_000)
    listed = tc.list_transactions(["Ongoing", "Bogus"])
    assert listed.unknown_state_filters == ("Bogus",)
    assert [(t.transactional_id, t.state) for t in listed.transactions] == [("a", "Ongoing")]
    assert [t.transactional_id for t in tc.list_transactions(producer_id_filters=[pid_b]).transactions] == ["b"]
    assert [t.transactional_id for t in tc.list_transactions(duration_filter=20_000).transactions] == ["b"]
    assert [t.transactional_id for t in tc.list_transactions(duration_filter=5_000).transactions] == ["a", "b"]
    assert [t.transactional_id for t in tc.list_transactions(transactional_id_pattern="b.*").transactions] == ["b"]
    d = tc.describe("a")
    assert (d.error, d.state, d.topics, d.transaction_timeout_ms) == (ErrorCode.none, "Ongoing", ((TOPIC, (0,)),), TIMEOUT)
    assert tc.describe("").error == ErrorCode.invalid_request


def test_markers_wait_for_a_partition_leader() -> None:
    tc, clock, topics, _ = make(tv=1)
    pid, epoch = begin(tc, 0)
    leader = topics.partition(TOPIC, 0).leader
    topics.sync_liveness([n for n in (1, 2, 3) if n != leader])
    assert topics.partition(TOPIC, 0).leader == -1
    tc.end_txn(T, pid, epoch, False)
    tc.tick(clock.advance(1))
    assert tc.metadata(T).state is S.PREPARE_ABORT and tc.pending_markers(T) == {(TOPIC, 0)}
    topics.sync_liveness([1, 2, 3])
    tc.tick(clock.advance(1))
    assert tc.metadata(T).state is S.COMPLETE_ABORT


def test_synchronous_markers() -> None:
    tc, _, topics, _ = make(tv=1, marker_delay_ms=None)
    pid, epoch = begin(tc, 0)
    assert tc.end_txn(T, pid, epoch, True).error == ErrorCode.none
    assert tc.metadata(T).state is S.COMPLETE_COMMIT and markers(topics, 0)


# -- durability -----------------------------------------------------------------------------


def test_rebuild_mid_transaction_and_abort_on_timeout() -> None:
    tc, clock, topics, _ = make(tv=1, transaction_abort_timed_out_transaction_cleanup_interval_ms=1_000)
    pid, epoch = begin(tc, 0, 1, timeout=5_000)
    begin(tc, tid="idle")
    rebuilt = TransactionCoordinator.rebuild(tc)
    assert rebuilt.snapshot() == tc.snapshot() and rebuilt.coordinator_epoch == 1
    assert [r.value for r in rebuilt.log] == [r.value for r in tc.log]
    for _ in range(7):
        rebuilt.tick(clock.advance(1_000))
    v = rebuilt.metadata(T)
    assert v.state is S.COMPLETE_ABORT and v.producer_epoch == epoch + 1
    assert markers(topics, 0) == [(rec.ControlType.ABORT, pid, epoch + 1)] == markers(topics, 1)
    assert topics.log(TOPIC, 0).batches[-1].header.partition_leader_epoch >= 0


def test_rebuild_completes_pending_markers() -> None:
    tc, clock, topics, groups = make(tv=2, marker_delay_ms=1_000)
    pid, epoch = begin(tc)
    tc.verify_or_add_partition(T, pid, epoch, TOPIC, 2, True)
    tc.add_offsets(T, pid, epoch, "g", client_transaction_version=2)
    r = tc.end_txn(T, pid, epoch, True, client_transaction_version=2)
    assert r.error == ErrorCode.none and tc.metadata(T).state is S.PREPARE_COMMIT
    # Fail-over before any marker was written: the new coordinator finishes the commit.
    rebuilt = TransactionCoordinator.rebuild(tc)
    assert rebuilt.snapshot() == tc.snapshot()
    assert rebuilt.pending_markers(T) == tc.pending_markers(T) == {(TOPIC, 2), "g"}
    rebuilt.tick(clock.advance(999))
    assert markers(topics, 2) == []
    rebuilt.tick(clock.advance(1))
    assert markers(topics, 2) == [(rec.ControlType.COMMIT, pid, epoch + 1)]
    assert groups.completed == [("g", pid, epoch + 1, True)]
    v = rebuilt.metadata(T)
    assert (v.state, v.producer_epoch) == (S.COMPLETE_COMMIT, r.producer_epoch)
    # Every state change went through the log: replaying it again gives the same state.
    again = TransactionCoordinator([1, 2, 3], clock, tc.config, topics, groups, log=rebuilt.log)
    assert again.snapshot() == rebuilt.snapshot()


def test_log_replay_of_tombstone() -> None:
    tc, clock, *_ = make(transactional_id_expiration_ms=1, transaction_remove_expired_transaction_cleanup_interval_ms=1)
    begin(tc)
    tc.tick(clock.advance(10))
    log = TransactionLog()
    for r in tc.log:
        log.append(r)
    assert log.latest() == {}
    assert TransactionCoordinator([1], clock, log=log).snapshot() == {}
