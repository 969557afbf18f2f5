"""KIP-1289 enablement: api key 93 follows the finalized share.version online, the RPC needs
transaction.version 2, a downgrade waits for TX_PENDING records, the other RPCs keep their
versions; and the suite's own gate: on a target without KIP-1289 every test is "not
supported by target", none passes or fails."""

from __future__ import annotations

from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode as E

from clients import wire
from clients.share import ACCEPT, ack_codes
from conformance.suites.kip1289 import (
    SAFE_DOWNGRADE, TXN_SHARE_ACK, UPGRADE, missing_capability, scenario, stage, staged_ok, update_features,
    wait_for,
)
from conformance.suites.kip1289.conftest import enable_on_reference, require_kip1289
from targets.target import NotSupportedByTarget

SUITE_DIR = Path(__file__).parent
UNCHANGED = (24, 27, 28)  # AddPartitionsToTxn, WriteTxnMarkers, TxnOffsetCommit


def every_node(kip):
    return [kip.cc.node(n) for n in sorted(kip.cc.nodes)]


def advertises_93(node) -> bool:
    return TXN_SHARE_ACK in node.api_versions()


@pytest.mark.requirement("KIP-1289.GATE.001", "KIP-1289.GATE.003", "KIP-1289.RPC.001", "KIP-1289.RPC.005")
def test_api_93_follows_share_version_online_on_every_broker(kip):
    """share.version 2: every broker lists key 93 v0; lowered to 1 (no restart, same
    connections): none does, and a TxnShareAcknowledge is UNSUPPORTED_VERSION; raised again:
    listed again. Keys 24, 27, 28 keep their ranges throughout."""
    nodes = every_node(kip)
    before = {k: nodes[0].api_versions()[k] for k in UNCHANGED}
    assert all(n.api_versions().get(TXN_SHARE_ACK) == (0, 0) for n in nodes)
    sp, m, epoch, base, txn = scenario(kip, 2)
    try:
        assert update_features(kip.cc.bootstrap, {"share.version": 1}, SAFE_DOWNGRADE).error_code == E.none
        wait_for(lambda: not any(advertises_93(n) for n in nodes), "key 93 to disappear")
        assert {k: nodes[0].api_versions()[k] for k in UNCHANGED} == before
        resp = stage(m.node, txn, sp.group, m.member, epoch, {sp.key(): [(base, base + 1, [ACCEPT])]})
        assert resp.error_code == E.unsupported_version and not resp.responses, resp
    finally:
        assert update_features(kip.cc.bootstrap, {"share.version": 2}, UPGRADE).error_code == E.none
    wait_for(lambda: all(advertises_93(n) for n in nodes), "key 93 to come back")
    assert staged_ok(stage(m.node, txn, sp.group, m.member, epoch, {sp.key(): [(base, base + 1, [ACCEPT])]}))
    assert {k: nodes[0].api_versions()[k] for k in UNCHANGED} == before


@pytest.mark.requirement("KIP-1289.GATE.002", "KIP-1289.RPC.006")
def test_transaction_version_1_refuses_staging(kip):
    """share.version 2 but transaction.version lowered to 1: UNSUPPORTED_VERSION, nothing
    staged (the member ACCEPTs normally); back at 2 staging works."""
    sp, m, epoch, base, txn = scenario(kip, 2)
    acks = {sp.key(): [(base, base + 1, [ACCEPT])]}
    try:
        assert update_features(kip.cc.bootstrap, {"transaction.version": 1}, SAFE_DOWNGRADE).error_code == E.none
        assert stage(m.node, txn, sp.group, m.member, epoch, acks).error_code == E.unsupported_version
    finally:
        assert update_features(kip.cc.bootstrap, {"transaction.version": 2}, UPGRADE).error_code == E.none
    assert ack_codes(m.ack(acks)) == {0: 0}


@pytest.mark.requirement("KIP-1289.GATE.005")
def test_share_version_downgrade_is_refused_while_records_are_pending(kip):
    """With staged records in an open transaction, lowering share.version to 1 is
    INVALID_UPDATE_VERSION and key 93 stays; after the abort completes, it succeeds."""
    sp, m, epoch, base, txn = scenario(kip, 3)
    assert staged_ok(stage(m.node, txn, sp.group, m.member, epoch, {sp.key(): [(base, base + 2, [ACCEPT])]}))
    resp = update_features(kip.cc.bootstrap, {"share.version": 1}, SAFE_DOWNGRADE)
    assert resp.error_code == E.invalid_update_version, resp
    assert advertises_93(kip.cc.bootstrap)
    assert txn.end(committed=False).error_code == E.none
    wait_for(lambda: txn.describe().transaction_state == "CompleteAbort", "the abort to complete")
    # Other tests' stagings on this target end with their transactions or, at worst, their
    # 30 s acquisition locks.
    wait_for(lambda: update_features(kip.cc.bootstrap, {"share.version": 1}, SAFE_DOWNGRADE).error_code == E.none,
             "the downgrade to be accepted", wait_s=45, every_s=0.5)
    wait_for(lambda: not advertises_93(kip.cc.bootstrap), "key 93 to disappear")


def _suite_items(session) -> list:
    return [i for i in session.items if SUITE_DIR in Path(str(i.fspath)).parents or Path(str(i.fspath)).parent == SUITE_DIR]


@pytest.mark.requirement("KIP-1289.GATE.001", "KIP-1289.GATE.004")
def test_without_kip1289_every_suite_test_is_not_supported(target, request):
    """Self-check of the gate, on every target. Every other test of this suite goes through
    the `kip` fixture; on a target that lacks KIP-1289 (any Apache Kafka, librdkafka's mock,
    the reference at share.version 1) the fixture raises NotSupportedByTarget naming api key
    93 / share.version, so no test can pass or fail there by accident. On the reference the
    check is made at share.version 1, then the level is restored. After its checks, on a target
    without KIP-1289 this test is itself "not supported by target"."""
    others = [i for i in _suite_items(request.session) if i.originalname != request.node.originalname]
    assert others, "no KIP-1289 tests collected next to this one"
    ungated = [i.nodeid for i in others if "kip" not in i.fixturenames]
    assert not ungated, f"tests that bypass the KIP-1289 gate: {ungated}"
    with wire.cluster_client(target) as cc:
        reason = missing_capability(cc.bootstrap)
        if reason is None and target.kind == "reference":
            lowered = update_features(cc.bootstrap, {"share.version": 1}, SAFE_DOWNGRADE)
            assert lowered.error_code == E.none, lowered
            try:
                reason = missing_capability(cc.bootstrap)
                assert reason and "api key 93" in reason and "share.version=1" in reason, reason
            finally:
                enable_on_reference(target, cc)
            return
        if reason is None:
            return  # a target with KIP-1289: the gate lets the tests run
        assert reason.startswith("KIP-1289: ") and ("api key 93" in reason or "share.version" in reason), reason
        if target.kind != "reference":
            with pytest.raises(NotSupportedByTarget) as excinfo:
                require_kip1289(target, cc)
            assert excinfo.value.reason == reason
    if reason is not None and target.kind != "reference":
        # The gate held; the target still lacks KIP-1289, so this test reports that too (a
        # pass here would count GATE.001/004 as implemented by a broker that lacks them).
        raise NotSupportedByTarget(reason)
