"""KIP-98 transaction coordinator errors on the wire: INVALID_TRANSACTION_TIMEOUT,
NOT_COORDINATOR, CONCURRENT_TRANSACTIONS, INVALID_TXN_STATE, INVALID_PRODUCER_ID_MAPPING.

Requests are single, unretried round trips (clients.txn); the coordinator is found with
FindCoordinator(key_type=1).
"""

from __future__ import annotations

from typing import Any

import pytest

from clients import confluent, wire
from clients.errors import COORDINATOR_RETRIABLE
from clients.txn import (
    add_partitions_ok, add_partitions_to_txn, coordinator, end_txn, end_txn_ok, init_ok, init_producer_id,
    init_producer_id_settled, produce_txn_ok,
)
from conformance.suites import require_nodes
from conformance.suites.kip98 import idem_batch, require_transactions, wait_stable
from conformance.suites.kip98.test_fencing import (
    CONCURRENT_TRANSACTIONS,
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_TRANSACTION_TIMEOUT,
    INVALID_TXN_STATE,
    NONE,
    NOT_COORDINATOR,
)
from clients.wire import Req
from reference_impl.protocol.api_keys import ApiKey

END_TXN = ApiKey.END_TXN

MAX_TIMEOUT_MS = 900_000  # transaction.max.timeout.ms default; no target overrides it


# ----------------------------------------------------------------------------- timeout bounds


def _init_once_loaded(cc, tid: str, timeout_ms: int) -> Any:
    """InitProducerId retried every 100 ms while tid's coordinator settles. The settle step
    above warms another id, whose __transaction_state partition may live on another broker
    (3 nodes): tid's own partition can still be loading (COORDINATOR_LOAD_IN_PROGRESS), an
    answer with no side effect, so the producer epoch stays 0."""
    return init_producer_id_settled(cc, tid, timeout_ms=timeout_ms, retriable=COORDINATOR_RETRIABLE, every_s=0.1)[1]


def invalid_timeout_scenario(target, ids) -> dict[str, Any]:
    tid = ids.transactional_id()
    with wire.cluster_client(target) as cc:
        init_ok(cc, ids.transactional_id())  # let the coordinator settle (Kafka creates __transaction_state)
        coord = coordinator(cc, tid)
        _, above = init_producer_id(coord, tid, timeout_ms=MAX_TIMEOUT_MS + 1)
        _, zero = init_producer_id(coord, tid, timeout_ms=0)
        at_max = _init_once_loaded(cc, tid, MAX_TIMEOUT_MS)
        _, again = init_producer_id(coordinator(cc, tid), tid)
    return {
        "above_max": [int(above.error_code), int(above.producer_id)],
        "zero": [int(zero.error_code), int(zero.producer_id)],
        "at_max": [int(at_max.error_code), int(at_max.producer_epoch)],
        "again": [int(again.error_code), int(again.producer_epoch)],
        "again_same_producer_id": int(again.producer_id) == int(at_max.producer_id),
    }


@pytest.mark.requirement("KIP-98.INIT.002", "KIP-98.CONFIG.001", "KIP-98.INIT.003", "KIP-98.INIT.001")
def test_transaction_timeout_above_max_is_refused(differential, capabilities):
    require_transactions(capabilities)
    obs = differential.run(invalid_timeout_scenario, requirement="KIP-98.INIT.002").target
    assert obs["above_max"] == [INVALID_TRANSACTION_TIMEOUT, -1], obs
    assert obs["zero"] == [INVALID_TRANSACTION_TIMEOUT, -1], obs
    assert obs["at_max"] == [NONE, 0], "a timeout equal to transaction.max.timeout.ms must be accepted"
    # Re-initialising (no transaction open): same producer id, epoch + 1.
    assert obs["again"] == [NONE, 1] and obs["again_same_producer_id"], obs


# ----------------------------------------------------------------------------- placement


def not_coordinator_scenario(target, ids) -> dict[str, Any]:
    tid = ids.transactional_id()
    topic = ids.topic()
    confluent.create_topic(target, topic)
    with wire.cluster_client(target) as cc:
        coord, init, _ = init_ok(cc, tid)
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        answers = {}
        for node_id in sorted(cc.nodes):
            r = Req(cc.node(node_id), 10, 6)
            if r.version >= 4:
                resp = r.send(key_type=1, coordinator_keys=(tid,))
                answers[node_id] = [int(resp.coordinators[0].error_code), int(resp.coordinators[0].node_id)]
            else:
                resp = r.send(key=tid, key_type=1)
                answers[node_id] = [int(resp.error_code), int(resp.node_id)]
        coord_ids = {a[1] for a in answers.values()}
        coord_id = next(iter(coord_ids))
        others = [n for n in sorted(cc.nodes) if n != coord_id]
        other = cc.node(others[0])
        obs: dict[str, Any] = {
            "find_coordinator_errors": sorted({a[0] for a in answers.values()}),
            "same_coordinator_everywhere": len(coord_ids) == 1,
            "init": int(init_producer_id(other, tid)[1].error_code),
            "add_partitions": add_partitions_to_txn(other, tid, pid, epoch, topic, [0])[1][0],
            "end_txn": int(end_txn(other, tid, pid, epoch, True)[1].error_code),
        }
        # The real coordinator still serves the id.
        add_partitions_ok(coord, tid, pid, epoch, topic, [0])
        obs["coordinator_end_txn"] = int(end_txn_ok(coord, tid, pid, epoch, False).error_code)
    return obs


@pytest.mark.requirement("KIP-98.COORD.002", "KIP-98.COORD.001")
def test_transactional_requests_to_non_coordinator(differential, capabilities, target):
    require_transactions(capabilities)
    require_nodes(target, 2)
    obs = differential.run(not_coordinator_scenario, requirement="KIP-98.COORD.002").target
    assert obs["find_coordinator_errors"] == [NONE] and obs["same_coordinator_everywhere"], obs
    assert obs["init"] == NOT_COORDINATOR, obs
    assert obs["add_partitions"] == NOT_COORDINATOR, obs
    assert obs["end_txn"] == NOT_COORDINATOR, obs
    assert obs["coordinator_end_txn"] == NONE


# ----------------------------------------------------------------------------- concurrent transactions


def concurrent_transactions_scenario(target, ids) -> dict[str, Any]:
    topic = ids.topic()
    confluent.create_topic(target, topic)
    obs: dict[str, Any] = {}
    with wire.cluster_client(target) as cc:
        leader = cc.leader_for(topic, 0)
        # 1. InitProducerId while a transaction is open: the coordinator aborts it and
        #    asks the new instance to retry (deterministic in Kafka).
        tid = ids.transactional_id()
        coord, a, _ = init_ok(cc, tid)
        pid, epoch = int(a.producer_id), int(a.producer_epoch)
        add_partitions_ok(coord, tid, pid, epoch, topic, [0])
        assert int(produce_txn_ok(leader, tid, topic, 0, idem_batch(["open"], pid, epoch, 0, True))[1].error_code) == NONE
        obs["init_while_ongoing"] = int(init_producer_id(coord, tid)[1].error_code)
        coord, b, _ = init_ok(cc, tid)
        obs["init_after_retry"] = int(b.error_code)
        # 2. Right after EndTxn(commit): markers may still be pending. Kafka answers
        #    CONCURRENT_TRANSACTIONS until they are written (a race on a fast broker).
        pid, epoch = int(b.producer_id), int(b.producer_epoch)
        seen_add: list[int] = []
        seen_init: list[int] = []
        for attempt in range(5):
            add_partitions_ok(coord, tid, pid, epoch, topic, [0])
            seq = attempt
            assert int(produce_txn_ok(leader, tid, topic, 0, idem_batch([f"c{attempt}"], pid, epoch, seq, True))[1].error_code) == NONE
            end = end_txn_ok(coord, tid, pid, epoch, True)
            # The next transaction's first AddPartitionsToTxn, sent at once.
            seen_add.append(add_partitions_to_txn(coord, tid, pid, epoch, topic, [0])[1][0])
            if seen_add[-1] == NONE:
                # It started the next transaction: end it (nothing was written).
                end_txn_ok(coord, tid, pid, epoch, False)
            assert int(end.error_code) == NONE
            if CONCURRENT_TRANSACTIONS in seen_add:
                break
        for attempt in range(5):
            add_partitions_ok(coord, tid, pid, epoch, topic, [0])
            end_txn_ok(coord, tid, pid, epoch, False)
            _, resp = init_producer_id(coord, tid)
            seen_init.append(int(resp.error_code))
            coord, init, _ = init_ok(cc, tid)
            pid, epoch = int(init.producer_id), int(init.producer_epoch)
            if CONCURRENT_TRANSACTIONS in seen_init:
                break
        obs["add_partitions_right_after_commit"] = sorted(set(seen_add))
        obs["init_right_after_abort"] = sorted(set(seen_init))
        wait_stable(leader, topic, 0)
    return obs


@pytest.mark.requirement("KIP-98.COORD.005", "KIP-98.ADDPART.003", "KIP-98.INIT.003")
def test_concurrent_transactions_while_completing(differential, capabilities):
    require_transactions(capabilities)
    obs = differential.run(
        concurrent_transactions_scenario, requirement="KIP-98.COORD.005",
        ignore_keys=("add_partitions_right_after_commit", "init_right_after_abort"),
    ).target
    assert obs["init_while_ongoing"] == CONCURRENT_TRANSACTIONS, obs
    assert obs["init_after_retry"] == NONE
    # Race-prone on real brokers: each answer is NONE (markers already written) or the
    # retriable CONCURRENT_TRANSACTIONS, never a fatal or state error.
    assert set(obs["add_partitions_right_after_commit"]) <= {NONE, CONCURRENT_TRANSACTIONS}, obs
    assert set(obs["init_right_after_abort"]) <= {NONE, CONCURRENT_TRANSACTIONS}, obs


# ----------------------------------------------------------------------------- state and mapping


def capabilities_tv(target) -> int:
    return target.capabilities().feature("transaction.version")


def invalid_state_scenario(target, ids) -> dict[str, Any]:
    topic = ids.topic()
    confluent.create_topic(target, topic)
    with wire.cluster_client(target) as cc:
        leader = cc.leader_for(topic, 0)
        tid = ids.transactional_id()
        coord, init, _ = init_ok(cc, tid)
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        obs: dict[str, Any] = {}
        # No transaction was ever started (state Empty).
        v, resp = end_txn(coord, tid, pid, epoch, True)
        obs["commit_without_txn"] = {"version": v, "error": int(resp.error_code)}
        v, resp = end_txn(coord, tid, pid, epoch, False)
        obs["abort_without_txn"] = {"version": v, "error": int(resp.error_code)}
        if Req(coord, END_TXN, 5).version >= 5 and capabilities_tv(target) >= 2:
            # The TV2 form (EndTxn v5) on another id's Empty transaction.
            tid2 = ids.transactional_id()
            coord2, init2, _ = init_ok(cc, tid2)
            pid2, epoch2 = int(init2.producer_id), int(init2.producer_epoch)
            _, resp = end_txn(coord2, tid2, pid2, epoch2, True, highest=5)
            obs["tv2_commit_without_txn"] = {"error": int(resp.error_code), "epoch_delta": int(resp.producer_epoch) - epoch2}
            _, resp = end_txn(coord2, tid2, pid2, epoch2, False, highest=5)
            obs["tv2_abort_without_txn"] = {"error": int(resp.error_code), "epoch_delta": int(resp.producer_epoch) - epoch2}
        # A committed transaction: retrying the commit is fine, aborting it is not.
        add_partitions_ok(coord, tid, pid, epoch, topic, [0])
        assert int(produce_txn_ok(leader, tid, topic, 0, idem_batch(["x"], pid, epoch, 0, True))[1].error_code) == NONE
        end_txn_ok(coord, tid, pid, epoch, True)
        wait_stable(leader, topic, 0, at_least=2)
        obs["commit_retry"] = int(end_txn_ok(coord, tid, pid, epoch, True).error_code)
        obs["abort_after_commit"] = int(end_txn(coord, tid, pid, epoch, False)[1].error_code)
        # Wrong producer id for the transactional id.
        obs["add_partitions_wrong_pid"] = add_partitions_to_txn(coord, tid, pid + 1000, epoch, topic, [0])[1][0]
        obs["end_txn_wrong_pid"] = int(end_txn(coord, tid, pid + 1000, epoch, True)[1].error_code)
        # A transactional id the coordinator has never seen.
        unknown = ids.transactional_id()
        other_coord = coordinator(cc, unknown)
        obs["add_partitions_unknown_id"] = add_partitions_to_txn(other_coord, unknown, pid, epoch, topic, [0])[1][0]
        obs["end_txn_unknown_id"] = int(end_txn(other_coord, unknown, pid, epoch, True)[1].error_code)
    return obs


@pytest.mark.requirement("KIP-98.ENDTXN.003", "KIP-98.ADDPART.002", "KIP-98.ADDPART.003")
def test_invalid_state_and_producer_id_mapping(differential, capabilities):
    require_transactions(capabilities)
    obs = differential.run(invalid_state_scenario, requirement="KIP-98.ENDTXN.003",
                           ignore_keys=("tv2_commit_without_txn", "tv2_abort_without_txn")).target
    assert obs["commit_without_txn"]["error"] == INVALID_TXN_STATE, obs
    assert obs["abort_without_txn"]["error"] == INVALID_TXN_STATE, obs
    if "tv2_commit_without_txn" in obs:
        # EndTxn v5 (KIP-890): committing nothing is still INVALID_TXN_STATE, but aborting an
        # Empty transaction is accepted and bumps the epoch (Kafka 4.4.0, and the reference).
        assert obs["tv2_commit_without_txn"]["error"] == INVALID_TXN_STATE, obs
        assert obs["tv2_abort_without_txn"] == {"error": NONE, "epoch_delta": 1}, obs
    assert obs["commit_retry"] == NONE, "a retried EndTxn with the same outcome must succeed"
    assert obs["abort_after_commit"] == INVALID_TXN_STATE, obs
    assert obs["add_partitions_wrong_pid"] == INVALID_PRODUCER_ID_MAPPING, obs
    assert obs["end_txn_wrong_pid"] == INVALID_PRODUCER_ID_MAPPING, obs
    assert obs["add_partitions_unknown_id"] == INVALID_PRODUCER_ID_MAPPING, obs
    assert obs["end_txn_unknown_id"] == INVALID_PRODUCER_ID_MAPPING, obs
