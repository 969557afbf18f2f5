"""ProducerStateManager: Kafka 4.x idempotence, epoch fencing, duplicates, markers, expiry.

Every rule is driven through a PartitionLog carrying a manager (as the broker wires it),
with time from a ManualClock.
"""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from reference_impl.model import partition_log, producer_state
from reference_impl.model.clock import ManualClock
from reference_impl.model.partition_log import IsolationLevel, LogConfig, LogError, PartitionLog
from reference_impl.model.producer_state import (
    INT32_MAX,
    NUM_BATCHES_TO_RETAIN,
    ProducerSnapshot,
    ProducerStateConfig,
    ProducerStateManager,
    in_sequence,
    sequence_after,
)
from reference_impl.protocol import records as r
from reference_impl.protocol.records import ControlType, NewRecord, TimestampType

NOW = 1_700_000_000_000
PID = 1000
DAY = 86_400_000


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW)


@pytest.fixture
def log() -> PartitionLog:
    return PartitionLog("t", 0, producer_state=ProducerStateManager())


def psm(log: PartitionLog) -> ProducerStateManager:
    assert isinstance(log.producer_state, ProducerStateManager)
    return log.producer_state


def batch(seq: int, n: int = 1, *, epoch: int = 0, pid: int = PID, txn: bool = False, ts: int = NOW, tag: str = "v") -> bytes:
    return r.build_batch(
        [NewRecord(value=f"{tag}{seq}-{i}".encode(), timestamp=ts) for i in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=txn,
    )


def append(log: PartitionLog, data: bytes, now: int = NOW) -> partition_log.AppendResult:
    return log.append_from_client(data, now_ms=now)


def rejected(log: PartitionLog, data: bytes, code: ErrorCode, now: int = NOW) -> None:
    end = log.log_end_offset
    with pytest.raises(LogError) as exc:
        log.append_from_client(data, now_ms=now)
    assert exc.value.error_code == code, exc.value.message
    assert log.log_end_offset == end  # nothing appended


# --- helpers ---------------------------------------------------------------------------


def test_sequence_arithmetic_wraps_at_int32() -> None:
    assert in_sequence(4, 5) and not in_sequence(4, 6) and not in_sequence(4, 4)
    assert in_sequence(INT32_MAX, 0) and not in_sequence(INT32_MAX, 1)
    assert in_sequence(-1, 0)  # nothing at this epoch yet: only 0 follows
    assert sequence_after(INT32_MAX - 1, 3) == 1
    assert producer_state.DuplicateBatch is partition_log.DuplicateBatch


def test_config_from_defaults_and_other_objects() -> None:
    assert ProducerStateConfig.of(None).producer_id_expiration_ms == DAY
    assert ProducerStateConfig.of(None).producer_id_expiration_check_interval_ms == 600_000

    class BrokerLike:
        producer_id_expiration_ms = 5
        producer_id_expiration_check_interval_ms = 600_000

    assert ProducerStateConfig.of(BrokerLike()).producer_id_expiration_ms == 5
    cfg = ProducerStateConfig(producer_id_expiration_ms=7)
    assert ProducerStateManager(cfg).config is cfg


# --- sequences (KIP-98.IDEMP.002/003/005) ----------------------------------------------


def test_in_order_batches_are_appended(log: PartitionLog) -> None:
    a = append(log, batch(0, 3))
    b = append(log, batch(3, 2))
    assert (a.base_offset, a.last_offset, b.base_offset, b.last_offset) == (0, 2, 3, 4)
    e = psm(log).entry(PID)
    assert (e.producer_epoch, e.first_seq, e.last_seq, e.last_data_offset) == (0, 0, 4, 4)


def test_sequences_are_per_partition_and_per_producer() -> None:
    mgr_a, mgr_b = ProducerStateManager(), ProducerStateManager()
    p0, p1 = PartitionLog("t", 0, producer_state=mgr_a), PartitionLog("t", 1, producer_state=mgr_b)
    append(p0, batch(0, 3))
    append(p1, batch(0))  # another partition starts at 0 too
    append(p0, batch(0, pid=PID + 1))  # another producer on the same partition
    assert mgr_a.entry(PID).last_seq == 2 and mgr_b.entry(PID).last_seq == 0
    assert mgr_a.entry(PID + 1).last_seq == 0


def test_gap_is_out_of_order(log: PartitionLog) -> None:
    append(log, batch(0, 5))
    rejected(log, batch(7), ErrorCode.out_of_order_sequence_number)
    append(log, batch(5))  # the expected one still goes in


def test_overlapping_retry_is_not_a_duplicate(log: PartitionLog) -> None:
    append(log, batch(0, 3))
    append(log, batch(3, 3))
    # Same first sequence as a cached batch but a different last one: not a retry.
    rejected(log, batch(3, 2), ErrorCode.out_of_order_sequence_number)
    rejected(log, batch(1, 2), ErrorCode.out_of_order_sequence_number)


def test_unknown_producer_is_accepted_at_any_sequence(log: PartitionLog) -> None:
    # Kafka >= 2.5 (KIP-360): no UNKNOWN_PRODUCER_ID; state starts from this batch.
    res = append(log, batch(42, 2))
    assert res.base_offset == 0
    assert psm(log).entry(PID).last_seq == 43
    rejected(log, batch(45), ErrorCode.out_of_order_sequence_number)
    append(log, batch(44))


def test_sequence_wraps_around_int32(log: PartitionLog) -> None:
    append(log, batch(INT32_MAX - 1, 3))  # sequences MAX-1, MAX, 0
    assert psm(log).entry(PID).last_seq == 0
    rejected(log, batch(INT32_MAX), ErrorCode.out_of_order_sequence_number)
    append(log, batch(1))
    # A batch ending exactly on MAX is followed by 0.
    append(log, batch(INT32_MAX - 1, 2, pid=PID + 1))
    rejected(log, batch(INT32_MAX, pid=PID + 1), ErrorCode.out_of_order_sequence_number)
    append(log, batch(0, pid=PID + 1))
    # A retry of the wrapped batch is still recognised.
    dup = append(log, batch(INT32_MAX - 1, 3))
    assert (dup.base_offset, dup.last_offset) == (0, 2)


def test_non_idempotent_batches_are_never_tracked(log: PartitionLog) -> None:
    plain = r.build_batch([NewRecord(value=b"x", timestamp=NOW)])
    a, b = append(log, plain), append(log, plain)  # KIP-98.IDEMP.008: two copies
    assert (a.base_offset, b.base_offset) == (0, 1)
    assert psm(log).producer_count == 0 and psm(log).active_producers() == []


# --- duplicates (KIP-98.IDEMP.004) -------------------------------------------------------


def test_retry_of_last_batch_answers_original_offsets(log: PartitionLog) -> None:
    append(log, r.build_batch([NewRecord(b"plain", timestamp=NOW)]))
    first = append(log, batch(0, 3, ts=NOW - 5))
    end, version = log.log_end_offset, log.version
    again = append(log, batch(0, 3, ts=NOW - 5), now=NOW + 1000)
    assert (again.base_offset, again.last_offset, again.record_count) == (first.base_offset, first.last_offset, 3)
    assert (log.log_end_offset, log.version) == (end, version)
    assert len(log.batches) == 2
    # Kafka answers a duplicate with the cached timestamp (the batch's max timestamp)
    # as log_append_time, whatever the timestamp type.
    assert first.log_append_time == -1 and again.log_append_time == NOW - 5


def test_duplicate_on_log_append_time_topic_keeps_first_append_time() -> None:
    log = PartitionLog("t", 0, LogConfig(timestamp_type=TimestampType.LOG_APPEND_TIME), producer_state=ProducerStateManager())
    first = append(log, batch(0), now=NOW + 7)
    again = append(log, batch(0), now=NOW + 99)
    assert first.log_append_time == again.log_append_time == NOW + 7
    assert again.base_offset == first.base_offset and log.log_end_offset == 1


def test_any_of_the_last_five_batches_is_a_duplicate(log: PartitionLog) -> None:
    results = [append(log, batch(seq, 2)) for seq in range(0, 12, 2)]  # 6 batches
    assert NUM_BATCHES_TO_RETAIN == 5
    for res, seq in list(zip(results, range(0, 12, 2)))[1:]:  # the 5 newest
        dup = append(log, batch(seq, 2))
        assert (dup.base_offset, dup.last_offset) == (res.base_offset, res.last_offset)
    assert log.log_end_offset == 12
    # The 6th newest fell out of the window: no longer recognised -> out of order.
    rejected(log, batch(0, 2), ErrorCode.out_of_order_sequence_number)


def test_duplicate_needs_the_current_epoch(log: PartitionLog) -> None:
    append(log, batch(0, epoch=3))
    rejected(log, batch(0, epoch=2), ErrorCode.invalid_producer_epoch)
    # Sequence 0 at a newer epoch is a new batch, not a retry.
    res = append(log, batch(0, epoch=4))
    assert res.base_offset == 1 and log.log_end_offset == 2


# --- epochs (KIP-98.FENCE.003) ------------------------------------------------------------


def test_stale_epoch_is_invalid_producer_epoch(log: PartitionLog) -> None:
    append(log, batch(0, epoch=5))
    rejected(log, batch(1, epoch=4), ErrorCode.invalid_producer_epoch)
    rejected(log, batch(0, epoch=0), ErrorCode.invalid_producer_epoch)


def test_new_epoch_must_start_at_sequence_zero(log: PartitionLog) -> None:
    append(log, batch(0, 3, epoch=0))
    rejected(log, batch(3, epoch=1), ErrorCode.out_of_order_sequence_number)
    append(log, batch(0, 2, epoch=1))
    e = psm(log).entry(PID)
    assert (e.producer_epoch, e.first_seq, e.last_seq, len(e.batches)) == (1, 0, 1, 1)
    # The old epoch's batches are forgotten and fenced.
    rejected(log, batch(0, 3, epoch=0), ErrorCode.invalid_producer_epoch)


# --- transactions ---------------------------------------------------------------------------


def test_transactional_batches_track_the_open_transaction(log: PartitionLog) -> None:
    append(log, r.build_batch([NewRecord(b"plain", timestamp=NOW)]))
    append(log, batch(0, 2, txn=True))
    append(log, batch(2, 1, txn=True))
    assert log.ongoing_transactions == {PID: 1}
    assert psm(log).current_txn_first_offset(PID) == 1
    assert psm(log).has_ongoing_transaction(PID, 0) and not psm(log).has_ongoing_transaction(PID, 1)
    assert log.last_stable_offset == 1
    # Idempotent (non-transactional) batch while the transaction is open.
    rejected(log, batch(3), ErrorCode.invalid_txn_state)
    snap = psm(log).active_producers()
    assert snap == [ProducerSnapshot(PID, 0, 2, NOW, -1, 1)]


def test_tv1_marker_keeps_epoch_and_sequence(log: PartitionLog) -> None:
    append(log, batch(0, 2, txn=True, epoch=3))
    log.append_marker(ControlType.COMMIT, producer_id=PID, producer_epoch=3, coordinator_epoch=7, now_ms=NOW + 1)
    assert log.ongoing_transactions == {} and log.last_stable_offset == 3
    e = psm(log).entry(PID)
    assert (e.producer_epoch, e.coordinator_epoch, e.last_seq, e.last_timestamp) == (3, 7, 1, NOW + 1)
    # Next transaction at the same epoch continues the sequence.
    rejected(log, batch(0, txn=True, epoch=3), ErrorCode.out_of_order_sequence_number)
    append(log, batch(2, txn=True, epoch=3))
    assert log.ongoing_transactions == {PID: 3}


def test_marker_at_higher_epoch_fences_older_transactional_batches(log: PartitionLog) -> None:
    append(log, batch(0, 2, txn=True, epoch=0))
    log.append_marker(ControlType.ABORT, producer_id=PID, producer_epoch=1, coordinator_epoch=0, now_ms=NOW)
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in log.aborted_transactions(0, 10)] == [(PID, 0, 2)]
    e = psm(log).entry(PID)
    assert (e.producer_epoch, e.last_seq, len(e.batches)) == (1, -1, 0)
    # The zombie at the old epoch: its transaction here was ended by the marker.
    rejected(log, batch(2, txn=True, epoch=0), ErrorCode.invalid_producer_epoch)
    rejected(log, batch(2, epoch=0), ErrorCode.invalid_producer_epoch)
    # At the marker's epoch the producer starts again at 0 (TV2 bumps on every end).
    rejected(log, batch(5, txn=True, epoch=1), ErrorCode.out_of_order_sequence_number)
    append(log, batch(0, txn=True, epoch=1))
    rr = log.read(0, 1 << 20, IsolationLevel.READ_COMMITTED)
    assert rr.last_stable_offset == 3


def test_marker_validation(log: PartitionLog) -> None:
    append(log, batch(0, txn=True, epoch=4))
    log_end = log.log_end_offset
    with pytest.raises(LogError) as exc:
        log.append_marker(ControlType.COMMIT, producer_id=PID, producer_epoch=3, coordinator_epoch=0, now_ms=NOW)
    assert exc.value.error_code == ErrorCode.invalid_producer_epoch
    # TV2 (KIP-1228): the marker epoch must be above the producer's current epoch ...
    with pytest.raises(LogError) as exc:
        log.append_marker(
            ControlType.COMMIT, producer_id=PID, producer_epoch=4, coordinator_epoch=0, now_ms=NOW, transaction_version=2
        )
    assert exc.value.error_code == ErrorCode.invalid_producer_epoch
    assert log.log_end_offset == log_end and log.ongoing_transactions == {PID: 0}
    log.append_marker(
        ControlType.COMMIT, producer_id=PID, producer_epoch=5, coordinator_epoch=2, now_ms=NOW, transaction_version=2
    )
    # ... except for a retry of the marker just written (no transaction open any more).
    log.append_marker(
        ControlType.COMMIT, producer_id=PID, producer_epoch=5, coordinator_epoch=2, now_ms=NOW, transaction_version=2
    )
    # A marker from an older coordinator epoch is fenced.
    with pytest.raises(LogError) as exc:
        log.append_marker(ControlType.ABORT, producer_id=PID, producer_epoch=5, coordinator_epoch=1, now_ms=NOW)
    assert exc.value.error_code == ErrorCode.transaction_coordinator_fenced
    assert log.log_end_offset == 3


def test_marker_for_producer_without_data_creates_state(log: PartitionLog) -> None:
    log.append_marker(ControlType.ABORT, producer_id=PID, producer_epoch=2, coordinator_epoch=3, now_ms=NOW)
    assert psm(log).active_producers() == [ProducerSnapshot(PID, 2, -1, NOW, 3, -1)]
    rejected(log, batch(0, epoch=1), ErrorCode.invalid_producer_epoch)
    rejected(log, batch(1, epoch=2), ErrorCode.out_of_order_sequence_number)
    append(log, batch(0, epoch=2))


def test_transactional_data_written_by_the_broker_is_tracked(log: PartitionLog) -> None:
    # append_stored (e.g. a coordinator's own write) goes through on_append as well.
    log.append_stored(batch(0, 2, txn=True, epoch=1), now_ms=NOW)
    assert log.ongoing_transactions == {PID: 0} and psm(log).entry(PID).last_seq == 1


# --- expiry ---------------------------------------------------------------------------------


def test_idle_producers_expire(clock: ManualClock) -> None:
    mgr = ProducerStateManager(ProducerStateConfig(producer_id_expiration_ms=DAY))
    log = PartitionLog("t", 0, producer_state=mgr)
    append(log, batch(0, 3, ts=clock.now_ms()), now=clock.now_ms())
    append(log, batch(0, txn=True, pid=PID + 1, ts=clock.now_ms()), now=clock.now_ms())
    clock.advance(DAY - 1)
    assert mgr.remove_expired_producers(clock.now_ms()) == []
    clock.advance(1)
    # The producer with an open transaction stays, however idle.
    assert mgr.remove_expired_producers(clock.now_ms()) == [PID]
    assert mgr.producer_ids == (PID + 1,)
    # Forgotten: its next batch is accepted at any sequence, a retry is no longer caught.
    res = append(log, batch(0, 3, ts=clock.now_ms()), now=clock.now_ms())
    assert res.base_offset == 4 and log.log_end_offset == 7


def test_expiry_uses_the_last_batch_timestamp(clock: ManualClock) -> None:
    mgr = ProducerStateManager(ProducerStateConfig(producer_id_expiration_ms=1000))
    log = PartitionLog("t", 0, producer_state=mgr)
    append(log, batch(0, ts=clock.now_ms() - 600), now=clock.now_ms())
    assert mgr.entry(PID).last_timestamp == NOW - 600
    assert not mgr.is_expired(PID, NOW + 399) and mgr.is_expired(PID, NOW + 400)


def test_tick_checks_once_per_interval(clock: ManualClock) -> None:
    mgr = ProducerStateManager(ProducerStateConfig(producer_id_expiration_ms=1000, producer_id_expiration_check_interval_ms=5000))
    log = PartitionLog("t", 0, producer_state=mgr)
    append(log, batch(0, ts=clock.now_ms()), now=clock.now_ms())
    log.tick(clock.now_ms())  # schedules the first check one interval ahead
    clock.advance(4999)
    log.tick(clock.now_ms())
    assert mgr.producer_ids == (PID,)  # expired, but not checked yet
    clock.advance(1)
    log.tick(clock.now_ms())
    assert mgr.producer_ids == ()


def test_committed_transaction_releases_expiry(clock: ManualClock) -> None:
    mgr = ProducerStateManager(ProducerStateConfig(producer_id_expiration_ms=1000))
    log = PartitionLog("t", 0, producer_state=mgr)
    append(log, batch(0, txn=True, ts=NOW), now=NOW)
    assert mgr.remove_expired_producers(NOW + 10_000) == []
    log.append_marker(ControlType.COMMIT, producer_id=PID, producer_epoch=0, coordinator_epoch=0, now_ms=NOW + 10_000)
    assert mgr.remove_expired_producers(NOW + 10_999) == []  # the marker refreshed the timestamp
    assert mgr.remove_expired_producers(NOW + 11_000) == [PID]


# --- DescribeProducers view ----------------------------------------------------------------


def test_active_producers_snapshot(log: PartitionLog) -> None:
    append(log, batch(0, 4, ts=NOW - 1, pid=2000, epoch=2))
    append(log, batch(0, 1, ts=NOW - 2, pid=1500, txn=True))
    assert psm(log).active_producers() == [
        ProducerSnapshot(1500, 0, 0, NOW - 2, -1, 4),
        ProducerSnapshot(2000, 2, 3, NOW - 1, -1, -1),
    ]


# --- KIP-890 verification hint --------------------------------------------------------------


def test_tv2_verified_producer_without_state_must_start_at_zero(log: PartitionLog) -> None:
    psm(log).note_verified(PID, 0, supports_epoch_bump=True)
    rejected(log, batch(3, txn=True), ErrorCode.out_of_order_sequence_number)
    append(log, batch(0, txn=True))
    # TV1 clients (no epoch bump) keep Kafka's lenient rule for unknown producers.
    psm(log).note_verified(PID + 1, 0, supports_epoch_bump=False)
    append(log, batch(3, txn=True, pid=PID + 1))
    # Without a verification note (e.g. a produce path that does not tell) nothing changes.
    append(log, batch(9, txn=True, pid=PID + 2))
    assert log.ongoing_transactions == {PID: 0, PID + 1: 1, PID + 2: 2}
