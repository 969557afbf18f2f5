"""KIP-1289 model: TX_PENDING in SharePartition, the marker rule, all-or-nothing staging in
the SharePartitionManager, feature-level updates. Pure, no sockets."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from reference_impl.model import feature_levels as fl
from reference_impl.model import share_txn
from reference_impl.model.partition_log import PartitionLog
from reference_impl.model.share_partition import RecordState, SharePartition
from reference_impl.model.share_partition_config import SharePartitionConfig
from reference_impl.model.share_partition_manager import SharePartitionManager
from reference_impl.protocol import records as r
from reference_impl.protocol.records import NewRecord

NOW = 1_700_000_000_000
A, Q, K, X, P = (RecordState.AVAILABLE, RecordState.ACQUIRED, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED,
                 RecordState.TX_PENDING)
PID, EPOCH = 7, 3


def acquired(n: int = 10, lock_ms: int = 30_000, limit: int = 5) -> SharePartition:
    log = PartitionLog("t", 0)
    log.append_from_client(r.build_batch([NewRecord(value=b"v", timestamp=NOW) for _ in range(n)]), now_ms=NOW)
    sp = SharePartition.initialize("g", log, NOW, SharePartitionConfig(
        auto_offset_reset="earliest", group_record_lock_duration_ms=lock_ms, delivery_count_limit=limit))
    assert sp.acquire("m", log, n, now_ms=NOW)
    return sp


def states(sp: SharePartition, lo: int, hi: int) -> list[RecordState]:
    return [sp.state_of(o) for o in range(lo, hi + 1)]


def test_commit_applies_the_staged_types_and_moves_the_spso():
    sp = acquired()
    assert sp.stage_txn("m", [(0, 2, [1, 3, 1])], PID, EPOCH, NOW).ok
    assert states(sp, 0, 3) == [P, P, P, Q] and sp.txn_pending_count() == 3
    assert sp.apply_txn_marker(PID, EPOCH + 1, committed=True)
    assert sp.spso == 3 and sp.txn_pending_count() == 0


def test_abort_returns_records_to_their_member_with_count_and_lock_kept():
    sp = acquired()
    before = sp.range_of(0)
    sp.stage_txn("m", [(0, 4, [1])], PID, EPOCH, NOW)
    sp.apply_txn_marker(PID, EPOCH + 1, committed=False)
    after = sp.range_of(0)
    assert states(sp, 0, 4) == [Q] * 5
    assert (after.member_id, after.delivery_count, after.lock_deadline_ms) == ("m", before.delivery_count, before.lock_deadline_ms)
    assert sp.acknowledge("m", [(0, 4, [1])], NOW).ok


def test_marker_rule_needs_same_producer_and_a_later_epoch():
    assert share_txn.marker_resolves((PID, EPOCH), PID, EPOCH + 1)
    for pid, epoch in ((PID, EPOCH), (PID, EPOCH - 1), (PID + 1, EPOCH + 1)):
        assert not share_txn.marker_resolves((PID, EPOCH), pid, epoch)
    sp = acquired()
    sp.stage_txn("m", [(0, 0, [1])], PID, EPOCH, NOW)
    assert sp.apply_txn_marker(PID, EPOCH, True) == [] and sp.apply_txn_marker(PID + 1, EPOCH + 1, True) == []
    assert sp.state_of(0) is P


def test_duplicate_marker_is_a_no_op():
    sp = acquired()
    sp.stage_txn("m", [(0, 1, [1])], PID, EPOCH, NOW)
    assert sp.apply_txn_marker(PID, EPOCH + 1, True)
    snapshot = (sp.spso, sp.ranges)
    assert sp.apply_txn_marker(PID, EPOCH + 1, True) == []
    assert (sp.spso, sp.ranges) == snapshot


def test_invalid_types_and_foreign_records_stage_nothing():
    sp = acquired()
    for t in (0, 2, 4, 9):
        res = sp.stage_txn("m", [(0, 1, [1]), (2, 2, [t])], PID, EPOCH, NOW)
        assert res.error_code == ErrorCode.invalid_record_state
    assert sp.stage_txn("other", [(0, 0, [1])], PID, EPOCH, NOW).error_code == ErrorCode.invalid_record_state
    assert sp.txn_pending_count() == 0 and states(sp, 0, 2) == [Q, Q, Q]
    sp.stage_txn("m", [(0, 0, [1])], PID, EPOCH, NOW)
    assert sp.acknowledge("m", [(0, 0, [1])], NOW).error_code == ErrorCode.invalid_record_state
    assert sp.stage_txn("m", [(0, 0, [1])], PID, EPOCH, NOW).error_code == ErrorCode.invalid_record_state


def test_lock_expiry_while_pending_releases_and_ignores_the_later_marker():
    sp = acquired(lock_ms=1000)
    sp.stage_txn("m", [(0, 9, [1])], PID, EPOCH, NOW)
    assert sp.tick(NOW + 1000)
    assert states(sp, 0, 9) == [A] * 10 and sp.txn_lock_expired == 10
    assert sp.apply_txn_marker(PID, EPOCH + 1, True) == []
    assert sp.spso == 0


def test_lock_expiry_at_the_delivery_limit_archives():
    sp = acquired(lock_ms=1000, limit=1)
    sp.stage_txn("m", [(0, 0, [1])], PID, EPOCH, NOW)
    sp.tick(NOW + 1000)
    assert sp.state_of(0) is X


def test_pending_records_persist_as_before_their_acquisition_and_survive_member_release():
    sp = acquired()
    sp.stage_txn("m", [(0, 9, [1])], PID, EPOCH, NOW)
    assert [(b.first_offset, b.last_offset, b.delivery_state) for b in sp.state_batches()] == []
    assert sp.release_member("m") == [] and sp.txn_pending_count() == 10


def _manager_with(*keys):
    mgr = SharePartitionManager(None, SharePartitionConfig(auto_offset_reset="earliest"))
    for key in keys:
        mgr.partitions[key] = acquired()
    return mgr


def test_manager_stages_all_or_nothing_and_routes_markers():
    a, b = ("g", uuid.uuid4(), 0), ("g", uuid.uuid4(), 0)
    mgr = _manager_with(a, b)
    res = mgr.stage_txn("g", "m", [(a[1], 0, [(0, 4, [1])]), (b[1], 0, [(0, 4, [2])])], PID, EPOCH, NOW)
    assert [x.error_code for x in res] == [ErrorCode.none, ErrorCode.invalid_record_state]
    assert mgr.txn_pending_count() == 0
    res = mgr.stage_txn("g", "m", [(a[1], 0, [(0, 4, [1])]), (b[1], 0, [(0, 1, [3])])], PID, EPOCH, NOW)
    assert all(x.ok for x in res) and mgr.txn_pending_count() == 7
    assert mgr.apply_txn_marker(PID, EPOCH + 1, True, only=lambda key: key != b) == 5 and mgr.txn_pending_count() == 2
    assert mgr.apply_txn_marker(PID, EPOCH + 1, True, only=lambda key: True) == 2 and mgr.txn_pending_count() == 0


def test_manager_forgets_pending_partitions_of_a_lost_leader_only():
    a, b = ("g", uuid.uuid4(), 0), ("g", uuid.uuid4(), 1)
    mgr = _manager_with(a, b)
    mgr.stage_txn("g", "m", [(a[1], 0, [(0, 0, [1])])], PID, EPOCH, NOW)
    assert mgr.forget_txn_pending(lambda topic, p: True) == 1
    assert a not in mgr.partitions and b in mgr.partitions


def test_feature_plan_is_all_or_nothing_and_needs_a_downgrade_type():
    supported = {"share.version": (0, 2), "transaction.version": (0, 2)}
    current = {"share.version": 1, "transaction.version": 2}
    results, new = fl.plan([fl.FeatureUpdate("share.version", 2)], current, supported)
    assert new == {"share.version": 2, "transaction.version": 2}
    _, new = fl.plan([fl.FeatureUpdate("share.version", 2), fl.FeatureUpdate("nope", 1)], current, supported)
    assert new is None
    _, new = fl.plan([fl.FeatureUpdate("transaction.version", 1)], current, supported)
    assert new is None
    _, new = fl.plan([fl.FeatureUpdate("transaction.version", 1, fl.SAFE_DOWNGRADE)], current, supported)
    assert new == {"share.version": 1, "transaction.version": 1}
    _, new = fl.plan([fl.FeatureUpdate("share.version", 3)], current, supported)
    assert new is None


def test_share_version_downgrade_is_blocked_while_records_are_pending():
    pending = [5]
    blocker = share_txn.downgrade_blocker(lambda: pending[0])
    current = {"share.version": 2}
    update = [fl.FeatureUpdate("share.version", 1, fl.SAFE_DOWNGRADE)]
    results, new = fl.plan(update, current, {"share.version": (0, 2)}, [blocker])
    assert new is None and results[0].error_code == ErrorCode.invalid_update_version
    pending[0] = 0
    assert fl.plan(update, current, {"share.version": (0, 2)}, [blocker])[1] == {"share.version": 1}


def test_gate_reads_both_features():
    class Cfg:
        finalized_features = {"share.version": 1, "transaction.version": 2}
    assert not share_txn.advertised(Cfg) and share_txn.refusal(Cfg)
    Cfg.finalized_features = {"share.version": 2, "transaction.version": 1}
    assert share_txn.advertised(Cfg) and "transaction.version" in share_txn.refusal(Cfg)
    Cfg.finalized_features = {"share.version": 2, "transaction.version": 2}
    assert share_txn.refusal(Cfg) is None
