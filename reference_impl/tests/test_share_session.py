"""Share sessions (model/share_session.py) and the share-partition manager
(model/share_partition_manager.py), without sockets."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from reference_impl.model.clock import ManualClock
from reference_impl.model.partition_log import PartitionLog
from reference_impl.model.share_coordinator import ShareCoordinator
from reference_impl.model.share_partition import RecordState
from reference_impl.model.share_partition_config import SharePartitionConfig
from reference_impl.model.share_partition_manager import SharePartitionManager
from reference_impl.model.share_session import (
    FINAL_EPOCH,
    MAX_EPOCH,
    ShareSessionCache,
    ShareSessionError,
    ShareSessionKey,
    next_epoch,
)
from reference_impl.protocol import records as r

NOW = 1_700_000_000_000
T = uuid.UUID(int=7)
P0, P1, P2 = (T, 0), (T, 1), (T, 2)
E = ErrorCode


def fetch_ctx(cache: ShareSessionCache, epoch: int, parts=(), forgotten=(), *, acks=False, member="m", conn=1, now=NOW):
    return cache.new_fetch_context("g", member, epoch, list(parts), list(forgotten),
                                   has_acknowledgements=acks, connection_id=conn, now_ms=now)


def error_of(fn, *args, **kwargs) -> ErrorCode:
    with pytest.raises(ShareSessionError) as exc:
        fn(*args, **kwargs)
    return exc.value.code


# ------------------------------------------------------------------------- epochs


def test_next_epoch_wraps_to_one_and_final_stays_final() -> None:
    assert next_epoch(0) == 1
    assert next_epoch(41) == 42
    assert next_epoch(MAX_EPOCH) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_share_fetch_epoch_zero_opens_a_session_with_epoch_one() -> None:
    cache = ShareSessionCache()
    ctx = fetch_ctx(cache, 0, [P0, P1])
    assert ctx.kind == "full" and ctx.replaced is None
    assert ctx.session.epoch == 1 and list(ctx.session.partitions) == [P0, P1]
    assert cache.get("g", "m") is ctx.session and len(cache) == 1
    assert cache.total_partitions == 2


def test_share_fetch_epoch_zero_with_acknowledgements_is_invalid_request() -> None:
    cache = ShareSessionCache()
    assert error_of(fetch_ctx, cache, 0, [P0], acks=True) == E.invalid_request
    assert len(cache) == 0


def test_share_fetch_epoch_zero_replaces_an_open_session() -> None:
    cache = ShareSessionCache()
    first = fetch_ctx(cache, 0, [P0]).session
    fetch_ctx(cache, 1, [P1])
    ctx = fetch_ctx(cache, 0, [P2])
    assert ctx.replaced is first
    assert ctx.session.epoch == 1 and list(ctx.session.partitions) == [P2]


def test_incremental_share_fetch() -> None:
    cache = ShareSessionCache()
    assert error_of(fetch_ctx, cache, 1, [P0]) == E.share_session_not_found
    fetch_ctx(cache, 0, [P0])
    assert error_of(fetch_ctx, cache, 2, [P0]) == E.invalid_share_session_epoch
    ctx = fetch_ctx(cache, 1, [P1], [P0], acks=True, now=NOW + 5)
    assert ctx.kind == "incremental"
    assert list(ctx.session.partitions) == [P1] and ctx.session.epoch == 2
    assert ctx.session.last_used_ms == NOW + 5
    # A failed epoch check changes nothing.
    assert error_of(fetch_ctx, cache, 1, [P2]) == E.invalid_share_session_epoch
    assert list(cache.get("g", "m").partitions) == [P1] and cache.get("g", "m").epoch == 2


def test_epoch_wraps_after_max() -> None:
    cache = ShareSessionCache()
    session = fetch_ctx(cache, 0, [P0]).session
    session.epoch = MAX_EPOCH
    fetch_ctx(cache, MAX_EPOCH)
    assert session.epoch == 1
    fetch_ctx(cache, 1)
    assert session.epoch == 2


def test_final_share_fetch() -> None:
    cache = ShareSessionCache()
    assert error_of(fetch_ctx, cache, FINAL_EPOCH) == E.share_session_not_found
    fetch_ctx(cache, 0, [P0])
    # Kafka 4.4.0 accepts partitions in a final request (and fetches nothing).
    assert fetch_ctx(cache, FINAL_EPOCH, [P0], [P0]).kind == "final"
    ctx = fetch_ctx(cache, FINAL_EPOCH)
    assert ctx.kind == "final" and ctx.session is cache.get("g", "m")  # the caller closes it
    assert ctx.session.epoch == 1 and list(ctx.session.partitions) == [P0]


def test_final_share_fetch_with_the_kip_checks() -> None:
    cache = ShareSessionCache(kip_final_epoch_checks=True)
    fetch_ctx(cache, 0, [P0])
    assert error_of(fetch_ctx, cache, FINAL_EPOCH, [P0]) == E.invalid_request
    assert error_of(fetch_ctx, cache, FINAL_EPOCH, [], [P0]) == E.invalid_request
    assert fetch_ctx(cache, FINAL_EPOCH).kind == "final"


def test_negative_epochs_other_than_final_are_invalid() -> None:
    cache = ShareSessionCache()
    fetch_ctx(cache, 0, [P0])
    assert error_of(fetch_ctx, cache, -2) == E.invalid_share_session_epoch


def test_share_acknowledge_epochs() -> None:
    cache = ShareSessionCache()
    ack = cache.acknowledge_session_update
    assert error_of(ack, "g", "m", 0, NOW) == E.invalid_share_session_epoch
    assert error_of(ack, "g", "m", 1, NOW) == E.share_session_not_found
    assert error_of(ack, "g", "m", FINAL_EPOCH, NOW) == E.share_session_not_found
    fetch_ctx(cache, 0, [P0])
    assert error_of(ack, "g", "m", 0, NOW) == E.invalid_share_session_epoch
    assert error_of(ack, "g", "m", 2, NOW) == E.invalid_share_session_epoch
    assert ack("g", "m", 1, NOW).epoch == 2
    # Final: no epoch check, epoch unchanged (the caller closes the session).
    assert ack("g", "m", FINAL_EPOCH, NOW).epoch == 2


def test_sessions_are_keyed_by_group_and_member() -> None:
    cache = ShareSessionCache()
    fetch_ctx(cache, 0, [P0], member="a")
    fetch_ctx(cache, 0, [P1], member="b")
    cache.new_fetch_context("g2", "a", 0, [P2], [], has_acknowledgements=False, connection_id=3, now_ms=NOW)
    assert len(cache) == 3
    assert sorted(cache.members_of("g")) == ["a", "b"]
    assert ShareSessionKey("g2", "a") in cache


# ------------------------------------------------------------------ limit and eviction


def test_limit_reached() -> None:
    cache = ShareSessionCache(max_entries=2)
    fetch_ctx(cache, 0, [P0], member="a")
    fetch_ctx(cache, 0, [P0], member="b")
    assert error_of(fetch_ctx, cache, 0, [P0], member="c", now=NOW + 10**9) == E.share_session_limit_reached
    # Reopening an existing key frees its slot first.
    assert fetch_ctx(cache, 0, [P1], member="a").session.epoch == 1
    cache.remove("g", "b")
    assert fetch_ctx(cache, 0, [P0], member="c").session is not None


def test_kip_inactivity_eviction_when_configured() -> None:
    cache = ShareSessionCache(max_entries=2, eviction_ms=120_000)
    fetch_ctx(cache, 0, [P0], member="a", now=NOW)
    fetch_ctx(cache, 0, [P0], member="b", now=NOW + 1000)
    assert error_of(fetch_ctx, cache, 0, [P0], member="c", now=NOW + 120_000) == E.share_session_limit_reached
    fetch_ctx(cache, 0, [P0], member="c", now=NOW + 120_001)
    assert cache.get("g", "a") is None and cache.evictions == 1
    assert sorted(cache.members_of("g")) == ["b", "c"]


def test_disconnect_removes_the_last_session_of_the_connection() -> None:
    cache = ShareSessionCache()
    fetch_ctx(cache, 0, [P0], member="a", conn=1)
    fetch_ctx(cache, 0, [P0], member="b", conn=2)
    closed = cache.on_disconnect(1)
    assert closed is not None and closed.key == ShareSessionKey("g", "a")
    assert cache.get("g", "a") is None and cache.get("g", "b") is not None
    assert cache.on_disconnect(1) is None
    # Already closed by a final epoch: nothing to do.
    cache.remove("g", "b")
    assert cache.on_disconnect(2) is None


def test_rotate_moves_partition_to_the_end() -> None:
    cache = ShareSessionCache()
    session = fetch_ctx(cache, 0, [P0, P1, P2]).session
    session.rotate(P0)
    assert list(session.partitions) == [P1, P2, P0]


# ------------------------------------------------------------------------------ manager


def produce(log: PartitionLog, n: int) -> None:
    log.append_from_client(r.build_batch([b"v%d" % i for i in range(n)]), now_ms=NOW)


@pytest.fixture()
def env():
    clock = ManualClock(NOW)
    coordinator = ShareCoordinator(clock)
    mgr = SharePartitionManager(coordinator, SharePartitionConfig(
        record_lock_duration_ms=1000, release_on_close_decrements_delivery_count=False))
    mgr.set_group_config("g", share_auto_offset_reset="earliest")
    log = PartitionLog("t", 0)
    produce(log, 10)
    return clock, coordinator, mgr, log


def acquire(mgr, log, member="m", now=NOW, max_records=500):
    out = mgr.acquire("g", member, T, 0, log, leader_epoch=0, max_records=max_records, max_bytes=10**9, now_ms=now)
    return [(a.first_offset, a.last_offset, a.delivery_count) for a in out.acquired], out.records


def test_first_fetch_initialises_from_the_persister(env) -> None:
    _, coordinator, mgr, log = env
    got, records = acquire(mgr, log)
    assert got == [(0, 9, 1)]
    assert [rec.value for rec in r.iter_records(records)] == [b"v%d" % i for i in range(10)]
    state = mgr.persisted("g", T, 0)
    assert state is not None and state.start_offset == 0 and state.state_batches == ()


def test_latest_is_the_default_reset(env) -> None:
    _, _, mgr, log = env
    got = mgr.acquire("other", "m", T, 0, log, leader_epoch=0, max_records=500, max_bytes=10**9, now_ms=NOW)
    assert got.acquired == ()
    assert mgr.get("other", T, 0).spso == 10


def test_existing_state_is_read_back(env) -> None:
    _, coordinator, mgr, log = env
    acquire(mgr, log)
    assert mgr.acknowledge("g", "m", T, 0, [(0, 3, [1]), (4, 4, [3])], NOW).ok
    rebuilt = SharePartitionManager(coordinator)
    got = rebuilt.acquire("g", "m2", T, 0, log, leader_epoch=1, max_records=500, max_bytes=10**9, now_ms=NOW)
    # 5-9 were delivered once and never acknowledged: back as Available with count 0
    # (a gap in the persisted state), so this is their "first" delivery again.
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in got.acquired] == [(5, 9, 1)]
    assert rebuilt.get("g", T, 0).spso == 5


def test_acknowledgements_are_persisted(env) -> None:
    _, _, mgr, log = env
    acquire(mgr, log)
    assert mgr.acknowledge("g", "m", T, 0, [(0, 1, [1]), (2, 2, [2]), (3, 3, [3])], NOW).ok
    state = mgr.persisted("g", T, 0)
    assert state.start_offset == 2
    assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in state.state_batches] == [
        (2, 2, 0, 1), (3, 3, 4, 1)]  # 4-9 delivered once, not acknowledged: Available/0, not written


def test_acknowledge_unknown_share_partition(env) -> None:
    _, _, mgr, _ = env
    assert mgr.acknowledge("g", "m", T, 0, [(0, 1, [1])], NOW).error_code == E.unknown_topic_or_partition


def test_acknowledge_is_atomic_and_not_persisted_on_error(env) -> None:
    _, _, mgr, log = env
    acquire(mgr, log)
    before = mgr.persisted("g", T, 0)
    result = mgr.acknowledge("g", "m", T, 0, [(0, 1, [1]), (50, 51, [1])], NOW)
    assert result.error_code == E.invalid_request
    assert mgr.persisted("g", T, 0) == before
    assert mgr.get("g", T, 0).state_of(0) is RecordState.ACQUIRED


def test_tick_expires_locks_and_persists(env) -> None:
    _, _, mgr, log = env
    acquire(mgr, log)
    assert not mgr.tick(NOW + 999)
    assert mgr.tick(NOW + 1000)
    assert mgr.get("g", T, 0).state_of(0) is RecordState.AVAILABLE
    assert mgr.acknowledge("g", "m", T, 0, [(0, 9, [1])], NOW + 1001).error_code == E.invalid_record_state
    got, _ = acquire(mgr, log, now=NOW + 1002)
    assert got == [(0, 9, 2)]


def test_close_session_and_disconnect_release_the_members_records(env) -> None:
    _, _, mgr, log = env
    cache = mgr.sessions(1)
    cache.new_fetch_context("g", "m", 0, [(T, 0)], [], has_acknowledgements=False, connection_id=11, now_ms=NOW)
    acquire(mgr, log, max_records=3)
    assert mgr.get("g", T, 0).acquired_by("m") == [(0, 9)]  # whole batch
    assert [s.key.member_id for s in mgr.release_connection(11)] == ["m"]
    assert mgr.get("g", T, 0).acquired_by("m") == []
    got, _ = acquire(mgr, log, member="n")
    assert got == [(0, 9, 2)]  # Kafka 4.4.0: a release on close keeps the delivery count
    cache.new_fetch_context("g", "n", 0, [(T, 0)], [], has_acknowledgements=False, connection_id=12, now_ms=NOW)
    assert mgr.close_session(1, "g", "n") is not None
    assert mgr.get("g", T, 0).acquired_by("n") == []
    assert mgr.close_session(1, "g", "n") is None


def test_release_member_only_in_the_sessions_partitions(env) -> None:
    _, _, mgr, log = env
    log1 = PartitionLog("t", 1)
    produce(log1, 5)
    acquire(mgr, log)
    mgr.acquire("g", "m", T, 1, log1, leader_epoch=0, max_records=500, max_bytes=10**9, now_ms=NOW)
    assert mgr.release_member("g", "m", [(T, 1)]) == 5
    assert mgr.get("g", T, 0).acquired_by("m") == [(0, 9)]
    assert mgr.get("g", T, 1).acquired_by("m") == []


def test_max_bytes_limits_whole_batches(env) -> None:
    _, _, mgr, log = env
    for _ in range(3):
        produce(log, 2)  # offsets 10-11, 12-13, 14-15
    acquire(mgr, log, max_records=10)  # 0-9
    first = log.batches[1].size
    out = mgr.acquire("g", "m", T, 0, log, leader_epoch=0, max_records=500, max_bytes=first + 1, now_ms=NOW)
    assert [(a.first_offset, a.last_offset) for a in out.acquired] == [(10, 11)]
    out = mgr.acquire("g", "m", T, 0, log, leader_epoch=0, max_records=500, max_bytes=1, now_ms=NOW)
    assert [(a.first_offset, a.last_offset) for a in out.acquired] == [(12, 13)]  # the first batch always


def test_group_configs(env) -> None:
    _, _, mgr, _ = env
    mgr.set_group_config("g", share_record_lock_duration_ms=5000, share_isolation_level="read_committed")
    cfg = mgr.config_for("g")
    assert cfg.lock_duration_ms == 5000 and int(cfg.isolation_level) == 1
    assert mgr.lock_duration_ms("other") == 1000


def test_release_on_close_can_decrement_the_delivery_count() -> None:
    mgr = SharePartitionManager(ShareCoordinator(ManualClock(NOW)), SharePartitionConfig(
        release_on_close_decrements_delivery_count=True, auto_offset_reset="earliest"))
    log = PartitionLog("t", 0)
    produce(log, 4)
    acquire(mgr, log)
    mgr.release_member("g", "m")
    got, _ = acquire(mgr, log, member="n")
    assert got == [(0, 3, 1)]
