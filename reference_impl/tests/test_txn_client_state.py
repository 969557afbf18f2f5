"""Pure unit tests of the transactional client's state machine and error classification
(reference_impl/client/txn_state.py), and of the consumer's read_committed filtering
(reference_impl/client/consumer.filter_batches). No sockets, no brokers.

The expected table is written out state by state from Kafka's Java producer
(TransactionManager.State.isTransitionValid, clients module, 4.x).
"""

from __future__ import annotations

import itertools

import pytest

from reference_impl.client.consumer import READ_COMMITTED, READ_UNCOMMITTED, filter_batches
from reference_impl.client.txn_state import (
    VALID_SOURCES,
    VALID_TARGETS,
    AbortableTxnError,
    FatalTxnError,
    IllegalTxnStateError,
    Outcome,
    ProducerFencedError,
    TxnState,
    TxnStateMachine,
    classify_add_offsets,
    classify_add_partitions,
    classify_end_txn,
    classify_find_coordinator,
    classify_init_producer_id,
    classify_produce,
    classify_txn_offset_commit,
    is_transition_valid,
)
from reference_impl.protocol import records
from kio.schema.errors import ErrorCode

S = TxnState
U, INIT, READY, IN_TXN = S.UNINITIALIZED, S.INITIALIZING, S.READY, S.IN_TRANSACTION
COMMITTING, ABORTING, ABORTABLE, FATAL = (
    S.COMMITTING_TRANSACTION,
    S.ABORTING_TRANSACTION,
    S.ABORTABLE_ERROR,
    S.FATAL_ERROR,
)

# source -> targets allowed (FatalError is always allowed and listed separately).
EXPECTED_TARGETS = {
    U: {INIT},
    INIT: {READY, ABORTABLE},
    READY: {U, IN_TXN},
    IN_TXN: {COMMITTING, ABORTING, ABORTABLE},
    COMMITTING: {INIT, READY, ABORTABLE},
    ABORTING: {INIT, READY},
    ABORTABLE: {U, ABORTING, ABORTABLE},
    FATAL: set(),
}


@pytest.mark.parametrize("source,target", list(itertools.product(TxnState, TxnState)), ids=lambda s: str(s))
def test_transition_table_matches_kafka(source, target):
    expected = target is FATAL or target in EXPECTED_TARGETS[source]
    assert is_transition_valid(source, target) is expected
    assert (source in VALID_SOURCES[target]) is expected
    assert (target in VALID_TARGETS[source]) is expected


def test_table_is_explicit_and_total():
    assert set(VALID_SOURCES) == set(TxnState)
    assert set(VALID_TARGETS) == set(TxnState)
    # FatalError is absorbing: the only way out of it is into itself.
    assert VALID_TARGETS[FATAL] == frozenset({FATAL})
    # every state but Uninitialized has a way in
    assert all(VALID_SOURCES[s] for s in TxnState)


def _machine_in(state: TxnState) -> TxnStateMachine:
    """Drive a machine into `state` along valid transitions only."""
    sm = TxnStateMachine()
    paths = {
        U: [],
        INIT: [INIT],
        READY: [INIT, READY],
        IN_TXN: [INIT, READY, IN_TXN],
        COMMITTING: [INIT, READY, IN_TXN, COMMITTING],
        ABORTING: [INIT, READY, IN_TXN, ABORTING],
        ABORTABLE: [INIT, READY, IN_TXN, ABORTABLE],
        FATAL: [FATAL],
    }
    for step in paths[state]:
        sm.transition_to(step, RuntimeError("boom") if step in (ABORTABLE, FATAL) else None)
    assert sm.state is state
    return sm


@pytest.mark.parametrize("source", list(TxnState), ids=str)
def test_invalid_transition_raises_and_keeps_state(source):
    for target in TxnState:
        sm = _machine_in(source)
        before = list(sm.transitions)
        error = RuntimeError("e") if target in (ABORTABLE, FATAL) else None
        if is_transition_valid(source, target):
            sm.transition_to(target, error)
            assert sm.state is target
            assert sm.transitions[-1].source is source and sm.transitions[-1].target is target
        else:
            with pytest.raises(IllegalTxnStateError):
                sm.transition_to(target, error)
            assert sm.state is source
            assert sm.transitions == before


def test_error_states_need_an_error_and_record_it():
    sm = _machine_in(IN_TXN)
    with pytest.raises(ValueError):
        sm.transition_to(ABORTABLE)
    assert sm.state is IN_TXN
    cause = AbortableTxnError("x", 120)
    sm.transition_to(ABORTABLE, cause)
    assert sm.last_error is cause and sm.has_error
    sm.transition_to(ABORTING)
    assert sm.last_error is None and sm.is_completing
    sm.transition_to(READY)
    assert not sm.has_error


def test_happy_path_commit_and_abort_cycles():
    seen = []
    sm = TxnStateMachine(on_transition=seen.append)
    for step in (INIT, READY, IN_TXN, COMMITTING, READY, IN_TXN, ABORTING, READY):
        sm.transition_to(step)
    assert [(t.source, t.target) for t in seen] == [
        (U, INIT),
        (INIT, READY),
        (READY, IN_TXN),
        (IN_TXN, COMMITTING),
        (COMMITTING, READY),
        (READY, IN_TXN),
        (IN_TXN, ABORTING),
        (ABORTING, READY),
    ]


def test_client_side_epoch_bump_path():
    # TV1 recovery: abortable error, abort, InitProducerId bump (Initializing), Ready.
    sm = _machine_in(ABORTABLE)
    sm.transition_to(ABORTING)
    sm.transition_to(INIT)
    sm.transition_to(READY)
    assert sm.state is READY


def test_maybe_fail_with_error():
    _machine_in(READY).maybe_fail_with_error()  # no error: nothing raised
    sm = _machine_in(IN_TXN)
    sm.transition_to(ABORTABLE, AbortableTxnError("produce failed", 47))
    with pytest.raises(AbortableTxnError) as exc:
        sm.maybe_fail_with_error()
    assert exc.value.error_code == ErrorCode.invalid_producer_epoch
    sm = _machine_in(IN_TXN)
    sm.to_fatal_error(ProducerFencedError("fenced", 90))
    with pytest.raises(ProducerFencedError) as exc2:
        sm.maybe_fail_with_error()
    assert isinstance(exc2.value, FatalTxnError) and exc2.value.error_code == ErrorCode.producer_fenced
    sm = _machine_in(READY)
    sm.to_fatal_error(RuntimeError("other"))
    with pytest.raises(FatalTxnError):
        sm.maybe_fail_with_error()


def test_abortable_error_is_ignored_while_aborting_and_after_fatal():
    sm = _machine_in(ABORTING)
    sm.to_abortable_error(AbortableTxnError("late produce error"))
    assert sm.state is ABORTING
    sm = _machine_in(FATAL)
    sm.to_abortable_error(AbortableTxnError("x"))
    assert sm.state is FATAL


def test_fatal_from_every_state():
    for source in TxnState:
        sm = _machine_in(source)
        sm.to_fatal_error(FatalTxnError("f"))
        assert sm.state is FATAL
        for target in TxnState:
            if target is not FATAL:
                with pytest.raises(IllegalTxnStateError):
                    sm.transition_to(target, RuntimeError("e"))


# --- error classification (Kafka 4.x handlers) ------------------------------------------

NONE, UNKNOWN_TOPIC, NOT_LEADER, TIMED_OUT = ErrorCode.none, ErrorCode.unknown_topic_or_partition, ErrorCode.not_leader_or_follower, ErrorCode.request_timed_out
LOADING, COORD_NA, NOT_COORD = ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available, ErrorCode.not_coordinator
ILLEGAL_GEN, UNKNOWN_MEMBER, GROUP_AUTHZ, CLUSTER_AUTHZ, TOPIC_AUTHZ = ErrorCode.illegal_generation, ErrorCode.unknown_member_id, ErrorCode.group_authorization_failed, ErrorCode.cluster_authorization_failed, ErrorCode.topic_authorization_failed
INVALID_EPOCH, INVALID_TXN_STATE, INVALID_PID_MAPPING, CONCURRENT = ErrorCode.invalid_producer_epoch, ErrorCode.invalid_txn_state, ErrorCode.invalid_producer_id_mapping, ErrorCode.concurrent_transactions
TXN_ID_AUTHZ, DUP_SEQ, OUT_OF_ORDER, UNKNOWN_PID = ErrorCode.transactional_id_authorization_failed, ErrorCode.duplicate_sequence_number, ErrorCode.out_of_order_sequence_number, ErrorCode.unknown_producer_id
FENCED_INSTANCE, FENCED, TXN_ABORTABLE, NOT_ATTEMPTED = ErrorCode.fenced_instance_id, ErrorCode.producer_fenced, ErrorCode.transaction_abortable, ErrorCode.operation_not_attempted


@pytest.mark.parametrize(
    "classify,code,expected",
    [
        (classify_init_producer_id, NONE, Outcome.OK),
        (classify_init_producer_id, NOT_COORD, Outcome.REDISCOVER),
        (classify_init_producer_id, COORD_NA, Outcome.REDISCOVER),
        (classify_init_producer_id, LOADING, Outcome.RETRY),
        (classify_init_producer_id, CONCURRENT, Outcome.RETRY),
        (classify_init_producer_id, TXN_ID_AUTHZ, Outcome.ABORTABLE),
        (classify_init_producer_id, INVALID_EPOCH, Outcome.FENCED),
        (classify_init_producer_id, FENCED, Outcome.FENCED),
        (classify_init_producer_id, TXN_ABORTABLE, Outcome.ABORTABLE),
        (classify_init_producer_id, INVALID_TXN_STATE, Outcome.FATAL),
        (classify_add_partitions, CONCURRENT, Outcome.RETRY),
        (classify_add_partitions, NOT_COORD, Outcome.REDISCOVER),
        (classify_add_partitions, FENCED, Outcome.FENCED),
        (classify_add_partitions, INVALID_EPOCH, Outcome.FENCED),
        (classify_add_partitions, TXN_ID_AUTHZ, Outcome.FATAL),
        (classify_add_partitions, INVALID_TXN_STATE, Outcome.FATAL),
        (classify_add_partitions, UNKNOWN_PID, Outcome.ABORTABLE_IF_POSSIBLE),
        (classify_add_partitions, TOPIC_AUTHZ, Outcome.ABORTABLE),
        (classify_add_partitions, NOT_ATTEMPTED, Outcome.ABORTABLE),
        (classify_add_partitions, TXN_ABORTABLE, Outcome.ABORTABLE),
        (classify_add_offsets, GROUP_AUTHZ, Outcome.ABORTABLE),
        (classify_add_offsets, FENCED, Outcome.FENCED),
        (classify_add_offsets, LOADING, Outcome.RETRY),
        (classify_txn_offset_commit, NOT_COORD, Outcome.REDISCOVER),
        (classify_txn_offset_commit, TIMED_OUT, Outcome.REDISCOVER),
        (classify_txn_offset_commit, UNKNOWN_TOPIC, Outcome.RETRY),
        (classify_txn_offset_commit, ILLEGAL_GEN, Outcome.ABORTABLE),
        (classify_txn_offset_commit, UNKNOWN_MEMBER, Outcome.ABORTABLE),
        (classify_txn_offset_commit, FENCED_INSTANCE, Outcome.ABORTABLE),
        (classify_txn_offset_commit, INVALID_EPOCH, Outcome.FENCED),
        (classify_txn_offset_commit, TXN_ID_AUTHZ, Outcome.FATAL),
        (classify_end_txn, CONCURRENT, Outcome.RETRY),
        (classify_end_txn, NOT_COORD, Outcome.REDISCOVER),
        (classify_end_txn, FENCED, Outcome.FENCED),
        (classify_end_txn, INVALID_EPOCH, Outcome.FENCED),
        (classify_end_txn, INVALID_TXN_STATE, Outcome.FATAL),
        (classify_end_txn, UNKNOWN_PID, Outcome.ABORTABLE_IF_POSSIBLE),
        (classify_end_txn, TXN_ABORTABLE, Outcome.ABORTABLE),
        (classify_find_coordinator, COORD_NA, Outcome.RETRY),
        (classify_find_coordinator, TXN_ID_AUTHZ, Outcome.FATAL),
        (classify_find_coordinator, GROUP_AUTHZ, Outcome.ABORTABLE),
        (classify_produce, NONE, Outcome.OK),
        (classify_produce, DUP_SEQ, Outcome.DUPLICATE),
        (classify_produce, NOT_LEADER, Outcome.REDISCOVER),
        (classify_produce, UNKNOWN_TOPIC, Outcome.REDISCOVER),
        (classify_produce, TIMED_OUT, Outcome.RETRY),
        (classify_produce, FENCED, Outcome.FENCED),
        (classify_produce, TXN_ID_AUTHZ, Outcome.FATAL),
        (classify_produce, CLUSTER_AUTHZ, Outcome.FATAL),
        (classify_produce, INVALID_PID_MAPPING, Outcome.FATAL),
        # KIP-588: a produce with an old epoch is abortable; the coordinator then fences.
        (classify_produce, INVALID_EPOCH, Outcome.ABORTABLE),
        (classify_produce, TXN_ABORTABLE, Outcome.ABORTABLE),
        (classify_produce, OUT_OF_ORDER, Outcome.ABORTABLE),
        (classify_produce, INVALID_TXN_STATE, Outcome.ABORTABLE),
    ],
    ids=lambda v: getattr(v, "__name__", str(v)),
)
def test_error_classification(classify, code, expected):
    assert classify(code) is expected


# --- read_committed filtering ---------------------------------------------------------------


def _txn_batch(base_offset: int, pid: int, values: list[bytes], epoch: int = 0) -> bytes:
    return records.build_batch(
        values,
        base_offset=base_offset,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=0,
        transactional=True,
    )


def _marker(base_offset: int, pid: int, commit: bool, epoch: int = 0) -> bytes:
    return records.build_control_batch(
        records.ControlType.COMMIT if commit else records.ControlType.ABORT,
        producer_id=pid,
        producer_epoch=epoch,
        base_offset=base_offset,
    )


def _log() -> bytes:
    # offsets: 0-1 pid 7 (aborted), 2-3 pid 8 (committed), 4 plain, 5 abort(7), 6 commit(8),
    #          7 pid 7 again (committed later), 8 commit(7)
    return b"".join(
        [
            _txn_batch(0, 7, [b"a0", b"a1"]),
            _txn_batch(2, 8, [b"c0", b"c1"]),
            records.build_batch([b"plain"], base_offset=4),
            _marker(5, 7, commit=False),
            _marker(6, 8, commit=True),
            _txn_batch(7, 7, [b"b0"]),
            _marker(8, 7, commit=True),
        ]
    )


def test_read_committed_drops_aborted_batches_and_markers():
    out, aborted, control = filter_batches(("t", 0), _log(), 0, READ_COMMITTED, [(7, 0)])
    assert [r.value for r in out] == [b"c0", b"c1", b"plain", b"b0"]
    assert [r.offset for r in out] == [2, 3, 4, 7]
    assert aborted == 1 and control == 3


def test_read_uncommitted_keeps_aborted_data_but_never_markers():
    out, aborted, control = filter_batches(("t", 0), _log(), 0, READ_UNCOMMITTED, [])
    assert [r.value for r in out] == [b"a0", b"a1", b"c0", b"c1", b"plain", b"b0"]
    assert aborted == 0 and control == 3


def test_aborted_transaction_list_is_by_first_offset():
    # The same producer's later transaction (offset 7) is not aborted: the ABORT marker at
    # offset 5 ends the aborted range even though the producer id repeats.
    out, _, _ = filter_batches(("t", 0), _log(), 0, READ_COMMITTED, [(7, 0)])
    assert b"b0" in [r.value for r in out]
    # Without the aborted-transactions list nothing is filtered (the broker's list decides).
    out, _, _ = filter_batches(("t", 0), _log(), 0, READ_COMMITTED, [])
    assert [r.value for r in out][:2] == [b"a0", b"a1"]


def test_fetch_offset_inside_a_batch_skips_earlier_records():
    out, _, _ = filter_batches(("t", 0), _log(), 3, READ_COMMITTED, [(7, 0)])
    assert [r.offset for r in out] == [3, 4, 7]
