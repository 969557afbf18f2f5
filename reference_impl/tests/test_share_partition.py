"""SharePartition: the share-partition leader's in-flight state machine (KIP-932).

Catalog ids backed (unit level, reference model): KIP-932.STATE.001-010, STATE.012,
LOCK.001-003, DELIVERY.001, DELIVERY.002 (rebuild lowers counts), SPSO.001, SPSO.002,
SPSO.004-006, SPSO.008-010, ORDER.001, TXN.002-004, ACK.001-003.
"""

from __future__ import annotations

import itertools
import random

import pytest
from kio.schema.errors import ErrorCode

from reference_impl.model.clock import ManualClock
from reference_impl.model import share_state_records as ssr
from reference_impl.model.partition_log import IsolationLevel, PartitionLog
from reference_impl.model.share_partition import (
    TRANSITIONS,
    AcknowledgeType,
    AcquiredRecords,
    Event,
    InvalidTransition,
    RecordState,
    SharePartition,
    StateBatch,
    aborted_batch_spans,
    initial_start_offset,
    next_state,
)
from reference_impl.model.share_partition_config import (
    AutoOffsetReset,
    ConfigError,
    SharePartitionConfig,
    parse_iso_duration_ms,
)
from reference_impl.protocol import records as r
from reference_impl.protocol.records import ControlType, NewRecord

NOW = 1_700_000_000_000
ACCEPT, RELEASE, REJECT, GAP, RENEW = (
    AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT, AcknowledgeType.GAP, AcknowledgeType.RENEW,
)
A, Q, K, X = RecordState.AVAILABLE, RecordState.ACQUIRED, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED
RC, RU = IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED


def produce(log: PartitionLog, n: int, *, ts: int = NOW) -> tuple[int, int]:
    """Append one batch of n records; returns (first, last) offset."""
    res = log.append_from_client(
        r.build_batch([NewRecord(value=b"v%d" % i, key=b"k", timestamp=ts) for i in range(n)]), now_ms=ts
    )
    return res.base_offset, res.last_offset


def produce_batches(log: PartitionLog, *sizes: int) -> None:
    for n in sizes:
        produce(log, n)


def make(log: PartitionLog | None = None, *, reset: str = "earliest", **cfg) -> tuple[PartitionLog, SharePartition]:
    log = log or PartitionLog("t", 0)
    config = SharePartitionConfig(auto_offset_reset=reset, **cfg)
    return log, SharePartition.initialize("g", log, NOW, config)


def states(sp: SharePartition, lo: int, hi: int) -> list[RecordState]:
    return [sp.state_of(o) for o in range(lo, hi + 1)]


def ranges(acq: list[AcquiredRecords]) -> list[tuple[int, int, int]]:
    return [(a.first_offset, a.last_offset, a.delivery_count) for a in acq]


def check_invariants(sp: SharePartition) -> None:
    rs = sp.ranges
    assert sp.spso <= sp.speo
    if rs:
        assert rs[0].first_offset == sp.spso and rs[-1].last_offset == sp.speo - 1
        assert not rs[0].state.terminal  # SPSO sits on the first non-final record
    for a, b in itertools.pairwise(rs):
        assert a.last_offset + 1 == b.first_offset
    for x in rs:
        assert x.first_offset <= x.last_offset
        assert (x.state is Q) == (x.member_id is not None) == (x.lock_deadline_ms is not None)


# ------------------------------------------------------------------ transition table


@pytest.mark.parametrize("state, event", list(itertools.product(RecordState, Event)))
def test_transition_table_is_explicit(state: RecordState, event: Event) -> None:
    """KIP-932.STATE.001: exactly four states; only the listed transitions exist."""
    if (state, event) in TRANSITIONS:
        assert next_state(state, event, 1, 5) == TRANSITIONS[(state, event)]
    else:
        with pytest.raises(InvalidTransition):
            next_state(state, event, 1, 5)


def test_transition_table_matches_the_kip_diagram() -> None:
    assert TRANSITIONS[(A, Event.ACQUIRE)] is Q
    assert TRANSITIONS[(Q, Event.ACCEPT)] is K
    assert TRANSITIONS[(Q, Event.REJECT)] is X
    assert TRANSITIONS[(Q, Event.GAP)] is X
    # Release / lock expiry: Available below the limit, Archived at it.
    for ev in (Event.RELEASE, Event.LOCK_EXPIRED):
        assert next_state(Q, ev, 4, 5) is A
        assert next_state(Q, ev, 5, 5) is X
    # Member release (Kafka: delivery count decremented) never archives.
    assert next_state(Q, Event.MEMBER_RELEASED, 5, 5) is A
    # Acknowledged and Archived are final: nothing leaves them.
    assert not [k for k in TRANSITIONS if k[0] in (K, X)]


# ------------------------------------------------------------------ KIP examples


def test_kip_in_flight_records_diagram() -> None:
    """The KIP's 'In-flight records example' (offsets 0..8), built through operations."""
    log, sp = make()
    produce_batches(log, 1, 1)  # 0, 1
    produce(log, 7)  # 2..8 in one batch
    produce(log, 1)  # 9
    assert ranges(sp.acquire("m1", log, 2, now_ms=NOW)) == [(0, 1, 1)]
    assert sp.acknowledge("m1", [(0, 1, [ACCEPT])], NOW).ok
    assert ranges(sp.acquire("m1", log, 5, now_ms=NOW, record_limit=True)) == [(2, 6, 1)]
    assert sp.acknowledge("m1", [(3, 3, [RELEASE])], NOW).ok
    assert ranges(sp.acquire("m2", log, 1, now_ms=NOW)) == [(3, 3, 2)]
    assert sp.acknowledge("m2", [(3, 3, [RELEASE])], NOW).ok
    assert sp.acknowledge("m1", [(5, 6, [ACCEPT, REJECT])], NOW).ok
    assert (sp.spso, sp.speo) == (2, 9)  # SPEO arrow at 9: in-flight records are 2..8
    assert states(sp, 0, 10) == [X, X, Q, A, Q, K, X, A, A, A, A]
    assert [sp.delivery_count_of(o) for o in range(2, 9)] == [1, 2, 1, 1, 1, 0, 0]
    # "the durable state contains the SPSO position, the non-zero delivery count for offset 3,
    # the Acknowledged state of offset 5, and the Archived state of offset 6"
    assert sp.snapshot().start_offset == 2
    assert sp.state_batches() == [StateBatch(3, 3, 0, 2), StateBatch(5, 5, 2, 1), StateBatch(6, 6, 4, 1)]
    check_invariants(sp)


def test_kip_share_group_state_worked_example() -> None:
    """KIP-932 'Examples' of writing share-group state, step by step (KIP-932.STATE.010)."""
    clock = ManualClock(NOW)
    log = PartitionLog("t", 0)
    produce(log, 100)  # offsets 0..99: the topic-partition's latest offset is 100
    sp = SharePartition.initialize("G1", log, clock.now_ms(), SharePartitionConfig())  # latest
    assert (sp.spso, sp.speo, sp.state_batches()) == (100, 100, [])

    produce(log, 10)  # 100..109
    assert ranges(sp.acquire("c1", log, 10, now_ms=clock.now_ms())) == [(100, 109, 1)]
    assert (sp.spso, sp.speo) == (100, 110)
    assert sp.acknowledge("c1", [(100, 109, [ACCEPT])], clock.now_ms()).ok
    assert (sp.spso, sp.speo, sp.state_batches()) == (110, 110, [])

    produce_batches(log, 3, 6, 1)  # 110..112, 113..118, 119
    assert ranges(sp.acquire("c1", log, 3, now_ms=clock.now_ms())) == [(110, 112, 1)]
    clock.advance(10_000)
    assert ranges(sp.acquire("c2", log, 6, now_ms=clock.now_ms())) == [(113, 118, 1)]
    assert ranges(sp.acquire("c3", log, 1, now_ms=clock.now_ms())) == [(119, 119, 1)]
    assert (sp.spso, sp.speo) == (110, 120)

    assert sp.acknowledge("c1", [(110, 110, [RELEASE])], clock.now_ms()).ok
    assert (sp.state_of(110), sp.delivery_count_of(110)) == (A, 1)
    assert StateBatch(110, 110, 0, 1) in sp.state_batches()

    assert sp.acknowledge("c3", [(119, 119, [ACCEPT])], clock.now_ms()).ok
    assert StateBatch(119, 119, 2, 1) in sp.state_batches()

    produce(log, 1)  # 120
    clock.advance(10_000)
    assert ranges(sp.acquire("c1", log, 2, now_ms=clock.now_ms())) == [(110, 110, 2), (120, 120, 1)]
    assert sp.speo == 121

    clock.advance(10_000)  # c1's lock on 111..112 (taken at +0s) elapses at +30s
    changes = sp.tick(clock.now_ms())
    assert [(c.first_offset, c.last_offset, c.state, c.delivery_count) for c in changes] == [(111, 112, A, 1)]
    assert states(sp, 110, 120) == [Q, A, A] + [Q] * 6 + [K, Q]

    assert sp.acknowledge("c2", [(113, 118, [ACCEPT])], clock.now_ms()).ok
    assert StateBatch(113, 119, 2, 1) in sp.state_batches()
    assert sp.spso == 110

    assert ranges(sp.acquire("c3", log, 2, now_ms=clock.now_ms())) == [(111, 112, 2)]
    assert sp.acknowledge("c1", [(110, 110, [ACCEPT])], clock.now_ms()).ok
    assert (sp.spso, sp.speo) == (111, 121)
    assert sp.acknowledge("c3", [(111, 112, [ACCEPT])], clock.now_ms()).ok
    assert (sp.spso, sp.speo) == (120, 121)
    assert [(x.first_offset, x.last_offset, x.state, x.delivery_count) for x in sp.ranges] == [(120, 120, Q, 1)]
    assert sp.state_batches() == []  # "StartOffset": 120, "StateBatches": []
    check_invariants(sp)


# ------------------------------------------------------------------ states and delivery counts


def test_first_delivery_has_count_one_and_each_acquisition_adds_one() -> None:
    """KIP-932.STATE.003."""
    log, sp = make()
    produce(log, 10)
    assert ranges(sp.acquire("m", log, 100, now_ms=NOW)) == [(0, 9, 1)]
    for expected in (2, 3):
        assert sp.acknowledge("m", [(5, 5, [RELEASE])], NOW).ok
        assert ranges(sp.acquire("m", log, 100, now_ms=NOW)) == [(5, 5, expected)]


def test_acquired_records_belong_to_one_member() -> None:
    """KIP-932.STATE.004."""
    log, sp = make()
    produce(log, 10)
    sp.acquire("a", log, 100, now_ms=NOW)
    assert sp.acquire("b", log, 100, now_ms=NOW) == []
    produce(log, 5)
    assert ranges(sp.acquire("b", log, 100, now_ms=NOW)) == [(10, 14, 1)]
    assert sp.acquired_by("a") == [(0, 9)] and sp.acquired_by("b") == [(10, 14)]


def test_accept_is_final() -> None:
    """KIP-932.STATE.005 and ACK.002 (acknowledging twice)."""
    log, sp = make()
    produce(log, 10)
    sp.acquire("a", log, 100, now_ms=NOW)
    assert sp.acknowledge("a", [(0, 9, [ACCEPT])], NOW).ok
    assert sp.spso == 10
    res = sp.acknowledge("a", [(0, 9, [ACCEPT])], NOW)  # below the SPSO now: ignored
    assert res.ok
    produce(log, 1)
    assert ranges(sp.acquire("b", log, 100, now_ms=NOW)) == [(10, 10, 1)]


def test_accept_twice_inside_the_window_is_invalid_record_state() -> None:
    log, sp = make()
    produce(log, 10)
    sp.acquire("a", log, 100, now_ms=NOW)
    assert sp.acknowledge("a", [(5, 9, [ACCEPT])], NOW).ok
    res = sp.acknowledge("a", [(5, 9, [ACCEPT])], NOW)
    assert res.error_code == ErrorCode.invalid_record_state
    assert sp.acquire("b", log, 100, now_ms=NOW) == []  # 5..9 never delivered again


def test_release_makes_available_for_another_member() -> None:
    """KIP-932.STATE.006."""
    log, sp = make()
    produce(log, 10)
    sp.acquire("a", log, 100, now_ms=NOW)
    assert sp.acknowledge("a", [(5, 5, [RELEASE])], NOW).ok
    assert ranges(sp.acquire("b", log, 100, now_ms=NOW)) == [(5, 5, 2)]


def test_release_at_the_delivery_limit_archives() -> None:
    """KIP-932.STATE.007 (limit 2) and DELIVERY.001."""
    log, sp = make(delivery_count_limit=2)
    produce(log, 10)
    sp.acquire("a", log, 100, now_ms=NOW)
    assert sp.acknowledge("a", [(5, 5, [RELEASE])], NOW).ok
    assert ranges(sp.acquire("a", log, 100, now_ms=NOW)) == [(5, 5, 2)]
    assert sp.acknowledge("a", [(5, 5, [RELEASE])], NOW).ok
    assert sp.state_of(5) is X
    assert sp.acquire("b", log, 100, now_ms=NOW) == []
    assert sp.acknowledge("a", [(0, 4, [ACCEPT]), (6, 9, [ACCEPT])], NOW).ok
    assert sp.spso == 10  # the SPSO moves past the archived record


def test_reject_archives_whatever_the_count() -> None:
    """KIP-932.STATE.008."""
    log, sp = make()
    produce(log, 10)
    sp.acquire("a", log, 100, now_ms=NOW)
    assert sp.acknowledge("a", [(5, 5, [REJECT])], NOW).ok
    assert sp.state_of(5) is X and sp.delivery_count_of(5) == 1
    assert StateBatch(5, 5, 4, 1) in sp.state_batches()
    assert sp.acknowledge("a", [(0, 4, [RELEASE])], NOW).ok
    assert ranges(sp.acquire("b", log, 100, now_ms=NOW)) == [(0, 4, 2)]


def test_acknowledged_records_archive_when_spso_passes() -> None:
    """KIP-932.STATE.009 and STATE.010: the SPSO never passes an Available/Acquired record."""
    log, sp = make()
    produce_batches(log, 3, 7)  # 0..2, 3..9
    sp.acquire("a", log, 3, now_ms=NOW)
    sp.acquire("b", log, 7, now_ms=NOW)
    assert sp.acknowledge("b", [(3, 9, [ACCEPT])], NOW).ok
    assert sp.spso == 0 and states(sp, 3, 9) == [K] * 7
    assert sp.acknowledge("a", [(0, 2, [ACCEPT])], NOW).ok
    assert sp.spso == 10 and states(sp, 0, 9) == [X] * 10
    assert sp.ranges == () and sp.state_batches() == []


def test_states_outside_the_window() -> None:
    """KIP-932.STATE.002."""
    log, sp = make()
    produce(log, 5)
    sp.acquire("a", log, 100, now_ms=NOW)
    sp.acknowledge("a", [(0, 4, [ACCEPT])], NOW)
    produce(log, 5)
    assert sp.state_of(3) is X and sp.state_of(7) is A and sp.delivery_count_of(7) == 0
    assert ranges(sp.acquire("a", log, 100, now_ms=NOW)) == [(5, 9, 1)]


# ------------------------------------------------------------------ locks


@pytest.mark.parametrize("second", ["a", "b"])
def test_lock_expiry_redelivers_with_count_two(second: str) -> None:
    """KIP-932.LOCK.001: to the same or another member, delivery count 2."""
    clock = ManualClock(NOW)
    log, sp = make(group_record_lock_duration_ms=1000, min_record_lock_duration_ms=1000)
    produce(log, 10)
    sp.acquire("a", log, 100, now_ms=clock.now_ms())
    assert sp.next_lock_deadline() == NOW + 1000
    clock.advance(999)
    assert sp.tick(clock.now_ms()) == []
    clock.advance(1)
    assert [(c.first_offset, c.last_offset, c.state, c.delivery_count) for c in sp.tick(clock.now_ms())] == [
        (0, 9, A, 1)
    ]
    assert ranges(sp.acquire(second, log, 100, now_ms=clock.now_ms())) == [(0, 9, 2)]


def test_group_lock_duration_overrides_broker_default() -> None:
    cfg = SharePartitionConfig()
    assert cfg.lock_duration_ms == 30_000
    assert SharePartitionConfig(group_record_lock_duration_ms=20_000).validate().lock_duration_ms == 20_000
    with pytest.raises(ConfigError):
        SharePartitionConfig(group_record_lock_duration_ms=1000).validate()  # below the broker minimum


def test_ack_after_lock_expiry_is_invalid_record_state() -> None:
    """KIP-932.LOCK.002."""
    log, sp = make()
    produce(log, 10)
    sp.acquire("a", log, 100, now_ms=NOW)
    sp.tick(NOW + 30_000)
    res = sp.acknowledge("a", [(0, 9, [ACCEPT])], NOW + 30_001)
    assert res.error_code == ErrorCode.invalid_record_state
    assert states(sp, 0, 9) == [A] * 10


def test_lock_expiry_at_the_limit_archives_and_never_redelivers() -> None:
    """KIP-932.DELIVERY.001: delivered with counts 1..5 and never a sixth time."""
    clock = ManualClock(NOW)
    log, sp = make()
    produce(log, 1)
    seen = []
    for _ in range(7):
        got = sp.acquire("a", log, 10, now_ms=clock.now_ms())
        seen += [a.delivery_count for a in got]
        clock.advance(30_000)
        sp.tick(clock.now_ms())
    assert seen == [1, 2, 3, 4, 5]
    assert sp.state_of(0) is X and sp.spso == 1


def test_in_flight_limit_back_pressure() -> None:
    """KIP-932.LOCK.003 and SPSO.008 (limit 100, batch-alignment slack of one batch)."""
    log, sp = make(partition_max_record_locks=100)
    produce_batches(log, *[30] * 10)
    got = sp.acquire("a", log, 1000, now_ms=NOW)
    assert ranges(got) == [(0, 119, 1)]  # 4 whole batches: the 4th crosses the limit
    assert sp.in_flight_count == 120
    assert sp.acquire("b", log, 1000, now_ms=NOW) == []
    assert not sp.can_acquire(log)
    # A slow record at the SPSO keeps the window from growing although later records finish.
    assert sp.acknowledge("a", [(1, 119, [ACCEPT])], NOW).ok
    assert sp.spso == 0 and sp.acquire("b", log, 1000, now_ms=NOW) == []
    assert sp.acknowledge("a", [(0, 0, [ACCEPT])], NOW).ok
    assert sp.spso == 120 and sp.can_acquire(log)
    assert ranges(sp.acquire("b", log, 1000, now_ms=NOW)) == [(120, 239, 1)]


def test_released_records_are_redelivered_even_at_the_limit() -> None:
    log, sp = make(partition_max_record_locks=100)
    produce_batches(log, 100, 10)
    sp.acquire("a", log, 1000, now_ms=NOW)
    assert sp.acknowledge("a", [(50, 59, [RELEASE])], NOW).ok
    assert ranges(sp.acquire("b", log, 1000, now_ms=NOW)) == [(50, 59, 2)]


def test_renew_needs_the_flag() -> None:
    """KIP-932.ACK.001: type 4 is invalid unless RENEW (KIP-1222, Kafka 4.2+) is enabled."""
    log, sp = make()
    produce(log, 10)
    sp.acquire("a", log, 100, now_ms=NOW)
    res = sp.acknowledge("a", [(0, 9, [RENEW])], NOW)
    assert res.error_code == ErrorCode.invalid_request


def test_renew_extends_the_lock() -> None:
    log, sp = make(renew_acknowledge_enabled=True)
    produce(log, 10)
    sp.acquire("a", log, 100, now_ms=NOW)
    assert sp.acknowledge("a", [(0, 4, [RENEW])], NOW + 20_000).ok
    assert [(c.first_offset, c.last_offset) for c in sp.tick(NOW + 30_000)] == [(5, 9)]
    assert states(sp, 0, 4) == [Q] * 5 and sp.delivery_count_of(0) == 1
    assert sp.tick(NOW + 49_999) == []
    assert [(c.first_offset, c.last_offset) for c in sp.tick(NOW + 50_000)] == [(0, 4)]


# ------------------------------------------------------------------ acknowledgements


@pytest.mark.parametrize("bad_type", [5, 9, -1])
def test_unknown_ack_type_is_invalid_request_and_nothing_applied(bad_type: int) -> None:
    log, sp = make()
    produce(log, 10)
    sp.acquire("a", log, 100, now_ms=NOW)
    res = sp.acknowledge("a", [(0, 4, [ACCEPT]), (5, 9, [bad_type])], NOW)
    assert res.error_code == ErrorCode.invalid_request
    assert states(sp, 0, 9) == [Q] * 10


def test_wrong_member_ack_is_invalid_record_state() -> None:
    """KIP-932.ACK.002."""
    log, sp = make()
    produce(log, 10)
    sp.acquire("a", log, 100, now_ms=NOW)
    res = sp.acknowledge("b", [(0, 4, [ACCEPT])], NOW)
    assert res.error_code == ErrorCode.invalid_record_state
    assert states(sp, 0, 9) == [Q] * 10 and sp.acquired_by("a") == [(0, 9)]


def test_acknowledgements_are_atomic_per_partition() -> None:
    """KIP-932.ACK.003: 5 is no longer acquired -> nothing of 0..9 changes."""
    log, sp = make()
    produce(log, 10)
    sp.acquire("a", log, 100, now_ms=NOW)
    assert sp.acknowledge("a", [(5, 5, [RELEASE])], NOW).ok
    before = sp.ranges
    res = sp.acknowledge("a", [(0, 4, [ACCEPT]), (5, 9, [ACCEPT])], NOW)
    assert res.error_code == ErrorCode.invalid_record_state
    assert sp.ranges == before and states(sp, 0, 4) == [Q] * 5 and sp.spso == 0
    res = sp.acknowledge("a", [(0, 9, [ACCEPT] * 5 + [ACCEPT] * 5)], NOW)
    assert res.error_code == ErrorCode.invalid_record_state and sp.ranges == before


def test_ack_beyond_anything_acquired_is_invalid_request() -> None:
    log, sp = make()
    produce(log, 10)
    sp.acquire("a", log, 100, now_ms=NOW)
    assert sp.acknowledge("a", [(5, 12, [ACCEPT])], NOW).error_code == ErrorCode.invalid_request
    assert sp.acknowledge("a", [(0, 9, [ACCEPT, RELEASE])], NOW).error_code == ErrorCode.invalid_request
    assert sp.acknowledge("a", [(9, 0, [ACCEPT])], NOW).error_code == ErrorCode.invalid_request
    assert states(sp, 0, 9) == [Q] * 10


def test_ack_with_nothing_in_flight_is_invalid_record_state() -> None:
    log, sp = make()
    produce(log, 10)
    assert sp.acknowledge("a", [(0, 9, [ACCEPT])], NOW).error_code == ErrorCode.invalid_record_state


def test_partial_ack_splits_the_batch_range() -> None:
    log, sp = make()
    produce(log, 10)
    sp.acquire("a", log, 100, now_ms=NOW)
    types = [ACCEPT, ACCEPT, RELEASE, REJECT, ACCEPT, ACCEPT, RELEASE, RELEASE, ACCEPT, GAP]
    assert sp.acknowledge("a", [(0, 9, types)], NOW).ok
    assert sp.spso == 2
    assert states(sp, 2, 9) == [A, X, K, K, A, A, K, X]
    assert ranges(sp.acquire("b", log, 100, now_ms=NOW)) == [(2, 2, 2), (6, 7, 2)]
    check_invariants(sp)


def test_gaps_in_a_compacted_batch_are_acknowledged_as_gap() -> None:
    """KIP-932.SPSO.009/010: the whole batch range is acquired; missing offsets acked GAP."""
    log = PartitionLog("t", 0)
    batch = r.build_batch(
        [NewRecord(value=b"a", key=b"k1", timestamp=NOW), NewRecord(value=b"b", key=b"k2", timestamp=NOW)],
        offset_deltas=[0, 2], last_offset_delta=3,
    )
    log.append_stored(batch, now_ms=NOW)  # as the log cleaner leaves it: records at 0 and 2 of 0..3
    assert (log.batches[0].record_offsets, log.log_end_offset) == ((0, 2), 4)
    _, sp = make(log)
    assert ranges(sp.acquire("a", log, 100, now_ms=NOW)) == [(0, 3, 1)]
    assert sp.acknowledge("a", [(0, 3, [ACCEPT, GAP, ACCEPT, GAP])], NOW).ok
    assert sp.spso == 4


# ------------------------------------------------------------------ members


def test_release_member_returns_its_records_and_decrements_counts() -> None:
    log, sp = make()
    produce_batches(log, 5, 5)
    sp.acquire("a", log, 5, now_ms=NOW)
    sp.acquire("b", log, 5, now_ms=NOW)
    changes = sp.release_member("a")
    assert [(c.first_offset, c.last_offset, c.state, c.delivery_count) for c in changes] == [(0, 4, A, 0)]
    assert sp.acquired_by("b") == [(5, 9)]
    assert ranges(sp.acquire("c", log, 100, now_ms=NOW)) == [(0, 4, 1)]


def test_release_member_kip_reading_keeps_counts_and_limit() -> None:
    log, sp = make(delivery_count_limit=2, release_on_close_decrements_delivery_count=False)
    produce(log, 5)
    sp.acquire("a", log, 5, now_ms=NOW)
    sp.release_member("a")
    assert sp.delivery_count_of(0) == 1 and sp.state_of(0) is A
    sp.acquire("a", log, 5, now_ms=NOW)
    sp.release_member("a")
    assert sp.state_of(0) is X and sp.spso == 5


# ------------------------------------------------------------------ SPSO


def test_spso_initialisation_latest_earliest_by_duration() -> None:
    """KIP-932.SPSO.001 (latest default) and SPSO.002."""
    log = PartitionLog("t", 0)
    for i in range(10):
        produce(log, 1, ts=NOW + i * 60_000)  # one record per minute
    now = NOW + 10 * 60_000
    assert SharePartition.initialize("g", log, now).spso == 10
    assert initial_start_offset(log, "earliest", now) == 0
    assert initial_start_offset(log, "by_duration:PT5M", now) == 5
    assert initial_start_offset(log, "by_duration:P1D", now) == 0
    assert initial_start_offset(log, "by_duration:PT0S", now) == 10
    log.delete_records(3)
    assert initial_start_offset(log, "earliest", now) == 3
    _, sp = make(log, reset="latest")
    assert sp.acquire("a", log, 100, now_ms=now) == []
    produce(log, 2)
    assert ranges(sp.acquire("a", log, 100, now_ms=now)) == [(10, 11, 1)]


@pytest.mark.parametrize("value", ["none", "by_duration:5m", "by_duration:-PT1S", ""])
def test_bad_auto_offset_reset_is_a_config_error(value: str) -> None:
    with pytest.raises(ConfigError):
        AutoOffsetReset.parse(value)


def test_iso_durations() -> None:
    assert parse_iso_duration_ms("PT1.5S") == 1500
    assert parse_iso_duration_ms("P2DT3H4M") == ((2 * 24 + 3) * 60 + 4) * 60_000
    with pytest.raises(ConfigError):
        parse_iso_duration_ms("PT")


def test_admin_reset_discards_in_flight_state() -> None:
    """KIP-932.SPSO.004."""
    log, sp = make()
    produce(log, 10)
    sp.acquire("a", log, 100, now_ms=NOW)
    sp.acknowledge("a", [(0, 9, [ACCEPT] * 5 + [REJECT] + [RELEASE] * 4)], NOW)
    epoch = sp.state_epoch
    sp.reset(0)
    assert (sp.spso, sp.speo, sp.ranges, sp.state_epoch) == (0, 0, (), epoch + 1)
    assert ranges(sp.acquire("b", log, 100, now_ms=NOW)) == [(0, 9, 1)]  # 5 included, count 1
    assert sp.reset_to(log, "latest", NOW) == 10 and sp.state_epoch == epoch + 2


def test_log_start_offset_moves_spso_and_acquired_acks_are_accepted() -> None:
    """KIP-932.SPSO.005 and SPSO.006."""
    log, sp = make()
    produce(log, 10)
    sp.acquire("a", log, 100, now_ms=NOW)
    log.delete_records(5)
    assert sp.on_log_start_offset(log.log_start_offset)
    assert sp.spso == 5 and sp.state_of(2) is X
    assert sp.acknowledge("a", [(0, 9, [RELEASE])], NOW).ok  # no error for any type
    assert sp.spso == 5 and states(sp, 5, 9) == [A] * 5
    assert ranges(sp.acquire("b", log, 100, now_ms=NOW)) == [(5, 9, 2)]
    assert sp.acknowledge("b", [(5, 9, [ACCEPT])], NOW).ok and sp.spso == 10


def test_log_start_offset_beyond_the_window() -> None:
    log, sp = make()
    produce_batches(log, 5, 5, 5)
    sp.acquire("a", log, 5, now_ms=NOW)
    sp.acknowledge("a", [(0, 4, [RELEASE])], NOW)
    log.delete_records(10)
    got = sp.acquire("b", log, 100, now_ms=NOW)  # acquire() notices the log start itself
    assert ranges(got) == [(10, 14, 1)] and sp.spso == 10
    check_invariants(sp)


def test_spso_never_goes_backwards_random_walk() -> None:
    """KIP-932.STATE.010 / STATE.011 as invariants over a random sequence of operations."""
    rnd = random.Random(932)
    clock = ManualClock(NOW)
    log, sp = make(delivery_count_limit=3, partition_max_record_locks=100)
    members = ["m1", "m2", "m3"]
    last_spso = sp.spso
    delivered: set[int] = set()
    for step in range(600):
        op = rnd.random()
        m = rnd.choice(members)
        if op < 0.25:
            produce(log, rnd.randint(1, 8))
        elif op < 0.55:
            got = sp.acquire(m, log, rnd.randint(1, 30), now_ms=clock.now_ms(), record_limit=rnd.random() < 0.3)
            for a in got:
                assert 1 <= a.delivery_count <= 3
                delivered.update(range(a.first_offset, a.last_offset + 1))
            offs = [o for a in got for o in (a.first_offset, a.last_offset)]
            assert offs == sorted(offs)  # KIP-932.ORDER.001 within one response
        elif op < 0.85:
            mine = sp.acquired_by(m)
            if mine:
                lo, hi = rnd.choice(mine)
                types = [rnd.choice([ACCEPT, RELEASE, REJECT]) for _ in range(hi - lo + 1)]
                assert sp.acknowledge(m, [(lo, hi, types)], clock.now_ms()).ok
        elif op < 0.95:
            clock.advance(rnd.randint(1_000, 20_000))
            sp.tick(clock.now_ms())
        else:
            sp.release_member(m)
        assert sp.spso >= last_spso
        last_spso = sp.spso
        assert sp.in_flight_count <= 100 + 8
        check_invariants(sp)
    # at-least-once: every offset below the SPSO was delivered at least once
    assert set(range(0, sp.spso)) <= delivered


# ------------------------------------------------------------------ transactions


def txn_log() -> PartitionLog:
    """0 plain | 1-2 txn pid 7 | 3 COMMIT(7) | 4-5 txn pid 8 | 6 ABORT(8) | 7 plain | 8 txn pid 9 (open) | 9 plain"""
    log = PartitionLog("t", 0)
    produce(log, 1)
    log.append_stored(r.build_batch([b"c1", b"c2"], producer_id=7, producer_epoch=0, base_sequence=0, transactional=True), now_ms=NOW)
    log.append_marker(ControlType.COMMIT, producer_id=7, producer_epoch=0, coordinator_epoch=0, now_ms=NOW)
    log.append_stored(r.build_batch([b"a1", b"a2"], producer_id=8, producer_epoch=0, base_sequence=0, transactional=True), now_ms=NOW)
    log.append_marker(ControlType.ABORT, producer_id=8, producer_epoch=0, coordinator_epoch=0, now_ms=NOW)
    produce(log, 1)
    log.append_stored(r.build_batch([b"o1"], producer_id=9, producer_epoch=0, base_sequence=0, transactional=True), now_ms=NOW)
    produce(log, 1)
    assert (log.last_stable_offset, log.high_watermark) == (8, 10)
    return log


def test_read_uncommitted_delivers_aborted_records() -> None:
    """KIP-932.TXN.002."""
    log = txn_log()
    _, sp = make(log)
    assert ranges(sp.acquire("a", log, 100, now_ms=NOW, isolation=RU)) == [(0, 9, 1)]


def test_read_committed_archives_aborted_and_stops_at_lso() -> None:
    """KIP-932.TXN.003 and TXN.004."""
    log = txn_log()
    assert aborted_batch_spans(log, 0, 9) == [(4, 5)]
    _, sp = make(log, isolation_level=RC)
    got = sp.acquire("a", log, 100, now_ms=NOW)
    assert ranges(got) == [(0, 3, 1), (6, 7, 1)]  # control batches 3 and 6 are acked as GAP
    assert states(sp, 4, 5) == [X, X] and sp.speo == 8
    assert sp.acknowledge("a", [(0, 3, [ACCEPT, ACCEPT, ACCEPT, GAP]), (6, 7, [GAP, ACCEPT])], NOW).ok
    assert sp.spso == 8
    assert sp.acquire("a", log, 100, now_ms=NOW) == []  # the open transaction stalls the group
    log.append_marker(ControlType.COMMIT, producer_id=9, producer_epoch=0, coordinator_epoch=0, now_ms=NOW)
    assert ranges(sp.acquire("a", log, 100, now_ms=NOW)) == [(8, 10, 1)]


def test_read_committed_redelivery_skips_aborted_in_rebuilt_gaps() -> None:
    log = txn_log()
    # State persisted by a read_uncommitted-era leader knows nothing of 0..9: a rebuilt
    # read_committed leader still never hands out the aborted batch.
    sp = SharePartition.from_state("g", "t", 0, 0, [StateBatch(7, 7, 2, 1)], SharePartitionConfig(isolation_level=RC))
    assert ranges(sp.acquire("a", log, 100, now_ms=NOW)) == [(0, 3, 1), (6, 6, 1)]
    assert states(sp, 4, 5) == [X, X] and sp.state_of(7) is K


# ------------------------------------------------------------------ snapshots


def test_rebuild_from_snapshot() -> None:
    """KIP-932.STATE.012 and DELIVERY.002: Acquired comes back Available."""
    log, sp = make()
    produce_batches(log, 5, 5, 5)
    sp.acquire("a", log, 15, now_ms=NOW)
    sp.acknowledge("a", [(5, 9, [ACCEPT, ACCEPT, REJECT, RELEASE, ACCEPT])], NOW)
    sp.acquire("b", log, 1, now_ms=NOW)  # takes 8 again (count 2)
    snap = sp.snapshot()
    assert snap.start_offset == 0
    assert list(snap.state_batches) == [
        StateBatch(5, 6, 2, 1), StateBatch(7, 7, 4, 1), StateBatch(8, 8, 0, 1), StateBatch(9, 9, 2, 1)
    ]
    rebuilt = SharePartition.from_snapshot("g", "t", 0, snap, SharePartitionConfig())
    assert (rebuilt.spso, rebuilt.speo, rebuilt.state_epoch) == (0, 10, snap.state_epoch)
    assert states(rebuilt, 0, 9) == [A] * 5 + [K, K, X, A, K]
    got = rebuilt.acquire("c", log, 100, now_ms=NOW)
    assert ranges(got) == [(0, 4, 1), (8, 8, 2), (10, 14, 1)]
    check_invariants(rebuilt)


def test_rebuild_with_uninitialised_start_offset_uses_reset() -> None:
    log = PartitionLog("t", 0)
    produce(log, 7)
    sp = SharePartition.from_state("g", "t", 0, -1, [], SharePartitionConfig(), log=log, now_ms=NOW)
    assert (sp.spso, sp.speo) == (7, 7)
    sp = SharePartition.from_state(
        "g", "t", 0, -1, [], SharePartitionConfig(auto_offset_reset="earliest"), log=log, now_ms=NOW
    )
    assert sp.spso == 0
    with pytest.raises(ValueError):
        SharePartition.from_state("g", "t", 0, -1, [], SharePartitionConfig())


def test_config_validation_and_names() -> None:
    cfg = SharePartitionConfig().validate()
    assert (cfg.delivery_count_limit, cfg.partition_max_record_locks, cfg.lock_duration_ms) == (5, 2000, 30_000)
    with pytest.raises(ConfigError):
        SharePartitionConfig(delivery_count_limit=11).validate()
    with pytest.raises(ConfigError):
        SharePartitionConfig(partition_max_record_locks=50).validate()


def test_in_flight_room_caps_redeliveries_like_kafka() -> None:
    """Kafka detail (lastOffsetAndMaxRecordsToAcquire): below the limit the remaining room
    caps the whole fetch, redeliveries included; at the limit only the window is re-acquired."""
    log, sp = make(partition_max_record_locks=100)
    produce_batches(log, *[10] * 12)
    assert ranges(sp.acquire("a", log, 90, now_ms=NOW)) == [(0, 89, 1)]
    assert (sp.in_flight_count, sp.end_offset, sp.speo) == (90, 89, 90)
    assert sp.acknowledge("a", [(0, 49, [RELEASE])], NOW).ok
    assert ranges(sp.acquire("b", log, 1000, now_ms=NOW)) == [(0, 9, 2)]  # room is 10
    assert ranges(sp.acquire("b", log, 1000, now_ms=NOW)) == [(10, 19, 2)]
    assert sp.acquire("b", log, 5, now_ms=NOW, record_limit=True) == [AcquiredRecords(20, 24, 2)]


def test_end_offset_is_kafkas_inclusive_end() -> None:
    log, sp = make()
    assert (sp.spso, sp.speo, sp.end_offset) == (0, 0, 0)
    produce(log, 5)
    sp.acquire("a", log, 10, now_ms=NOW)
    assert (sp.spso, sp.speo, sp.end_offset) == (0, 5, 4)


def test_from_state_accepts_the_share_coordinators_state_batches() -> None:
    sp = SharePartition.from_state("g", "t", 0, 10, [ssr.StateBatch(12, 13, 2, 1), (15, 15, 4, 3)])
    assert (sp.spso, sp.speo) == (10, 16)
    assert states(sp, 10, 16) == [A, A, K, K, A, X, A]
    assert sp.state_batches() == [StateBatch(12, 13, 2, 1), StateBatch(15, 15, 4, 3)]
