"""Coordinator node restart: transactional ids reloaded from the transaction log, answering
COORDINATOR_LOAD_IN_PROGRESS for `TransactionConfig.load_duration_ms` (model-only setting)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from reference_impl.model.broker_state import BrokerConfig, NodeEndpoint, ReferenceState
from reference_impl.model.clock import ManualClock
from reference_impl.model.topics import CreatableTopicSpec
from reference_impl.model.transaction_coordinator import TransactionConfig
from reference_impl.model.transaction_state import TransactionState as S

TOPIC = "t"
LOAD = 500
LOADING = ErrorCode.coordinator_load_in_progress


def make(nodes: int = 3, **cfg) -> tuple[ReferenceState, ManualClock]:
    clock = ManualClock()
    config = BrokerConfig(transaction=TransactionConfig(load_duration_ms=LOAD, **cfg))
    state = ReferenceState([NodeEndpoint(i, "127.0.0.1", 9000 + i) for i in range(1, nodes + 1)], clock, config)
    state.topics.create(CreatableTopicSpec(TOPIC, num_partitions=1))
    return state, clock


def tids_on(state: ReferenceState, node: int, n: int = 2) -> list[str]:
    out = [f"tid-{i}" for i in range(200) if state.coordinator_for(f"tid-{i}") == node]
    return out[:n]


def other_tid(state: ReferenceState, node: int) -> str:
    return next(f"tid-{i}" for i in range(200) if state.coordinator_for(f"tid-{i}") != node)


def open_txn(state: ReferenceState, tid: str, timeout: int = 60_000) -> tuple[int, int]:
    tc = state.transactions
    r = tc.init_producer_id(tid, timeout)
    assert r.error == ErrorCode.none
    assert tc.add_partitions(tid, r.producer_id, r.producer_epoch, [(TOPIC, 0)]) == ErrorCode.none
    return r.producer_id, r.producer_epoch


def test_default_load_duration_is_small() -> None:
    assert 0 < TransactionConfig().load_duration_ms <= 1_000


def test_restart_answers_load_in_progress_then_serves_rebuilt_state() -> None:
    state, clock = make()
    tc = state.transactions
    tid, unknown = tids_on(state, 2)
    other = other_tid(state, 2)
    pid, epoch = open_txn(state, tid)
    open_txn(state, other)
    before = tc.metadata(tid)
    epoch_before = tc.coordinator_epoch

    state.on_node_restart(2)
    assert tc.coordinator_epoch == epoch_before + 1
    assert tc.is_loading(tid) and tc.is_loading(unknown) and not tc.is_loading(other)
    # Every transactional request for the node's ids, known or not, is told to retry.
    assert tc.init_producer_id(unknown, 60_000).error == LOADING
    assert tc.init_producer_id(tid, 60_000).error == LOADING
    assert tc.add_partitions(tid, pid, epoch, [(TOPIC, 0)]) == LOADING
    assert tc.add_offsets(tid, pid, epoch, "g") == LOADING
    assert tc.verify_partitions(tid, pid, epoch, [(TOPIC, 0)]) == {(TOPIC, 0): LOADING}
    assert tc.end_txn(tid, pid, epoch, True).error == LOADING
    assert tc.describe(tid).error == LOADING
    # Other nodes' ids are not affected.
    assert tc.describe(other).error == ErrorCode.none

    clock.advance(LOAD - 1)
    state.tick()
    assert tc.end_txn(tid, pid, epoch, True).error == LOADING
    clock.advance(1)
    state.tick()
    assert not tc.is_loading(tid)
    # Rebuilt from the log: the open transaction is still open with its partitions.
    assert tc.metadata(tid) == before
    assert tc.describe(tid).state == "Ongoing"
    assert tc.end_txn(tid, pid, epoch, True, client_transaction_version=2).error == ErrorCode.none
    state.tick()
    assert tc.metadata(tid).state is S.COMPLETE_COMMIT
    assert tc.init_producer_id(unknown, 60_000).error == ErrorCode.none


def test_transaction_timed_out_while_loading_is_aborted_after_the_load() -> None:
    state, clock = make(transaction_abort_timed_out_transaction_cleanup_interval_ms=3_600_000)
    tc = state.transactions
    tid = tids_on(state, 1, 1)[0]
    pid, epoch = open_txn(state, tid, timeout=100)
    state.on_node_restart(1)
    clock.advance(200)  # the transaction times out during the load (no scan is due)
    assert tc.describe(tid).error == LOADING
    state.tick()
    assert tc.metadata(tid).state is S.ONGOING
    clock.advance(LOAD)
    state.tick()  # the load ends: timed-out transactions are aborted at once
    v = tc.metadata(tid)
    assert v.state is S.COMPLETE_ABORT and v.producer_epoch > epoch
    assert tc.end_txn(tid, pid, epoch, True).error == ErrorCode.producer_fenced


def test_decided_transaction_completes_after_the_load() -> None:
    state, clock = make(marker_delay_ms=100)
    tc = state.transactions
    tid = tids_on(state, 3, 1)[0]
    pid, epoch = open_txn(state, tid)
    assert tc.end_txn(tid, pid, epoch, True, client_transaction_version=2).error == ErrorCode.none
    assert tc.metadata(tid).state is S.PREPARE_COMMIT
    state.on_node_restart(3)
    clock.advance(200)  # markers due, but the id is loading
    assert tc.is_loading(tid)
    clock.advance(LOAD)
    state.tick()
    assert tc.metadata(tid).state is S.COMPLETE_COMMIT
    assert tc.pending_markers(tid) == frozenset()


def test_expired_ids_stay_while_loading() -> None:
    state, clock = make(
        transactional_id_expiration_ms=100, transaction_remove_expired_transaction_cleanup_interval_ms=10,
    )
    tc = state.transactions
    tid = tids_on(state, 1, 1)[0]
    assert tc.init_producer_id(tid, 60_000).error == ErrorCode.none
    state.on_node_restart(1)
    clock.advance(LOAD - 1)
    state.tick()
    assert tc.metadata(tid) is not None  # not expired while the node loads
    clock.advance(20)
    state.tick()
    assert tc.metadata(tid) is None
