"""KIP-98 coordinator fail-over and transactional id expiration.

* COORD.003: the node coordinating a transactional id restarts in the middle of a
  transaction. While it loads its share of __transaction_state the producer's requests get
  retriable answers (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
  NOT_COORDINATOR, CONCURRENT_TRANSACTIONS), never a decision; then the commit succeeds
  and the open transaction's records are all visible. The reference loads for
  `TransactionConfig.load_duration_ms` (model-only, 500 ms), so there 14 must be seen.
* TIMEOUT.002: an idle transactional id is expired after transactional.id.expiration.ms.
  Needs a target started with a low value:
  ``--target reference:txn_id_expiration_ms=2000`` or
  ``--target kafka-native:broker.transactional.id.expiration.ms=2000`` (kafka-native scans
  for expired ids every 10 s; ``broker.transaction.remove.expired.transaction.cleanup.interval.ms``
  lowers that).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from clients import confluent, wire
from clients.errors import TXN_SETTLING
from clients.txn import add_partitions_ok, add_partitions_to_txn, coordinator, end_txn, init_ok, produce_txn_ok
from conformance.suites import require_api
from conformance.suites.kip98 import idem_batch, require_transactions, wait_stable
from conformance.suites.kip98.test_fencing import (
    DESCRIBE_TRANSACTIONS,
    INVALID_PRODUCER_ID_MAPPING,
    LIST_TRANSACTIONS,
    NONE,
    TRANSACTIONAL_ID_NOT_FOUND,
    committed_values,
)
from conformance.suites.kip98.test_txn_admin import describe, list_all
from targets.target import NotSupportedByTarget
from kio.schema.errors import ErrorCode

EXPIRATION_MAX_MS = 5_000  # longest transactional.id.expiration.ms this suite waits for
FAILOVER_TXN_TIMEOUT_MS = 300_000


def _coordinator_node(cc, tid: str, wait_s: float) -> tuple[int, Any]:
    """(node id, client) of tid's coordinator; FindCoordinator retried until wait_s."""
    deadline = time.monotonic() + wait_s
    while True:
        error, node_id = cc.find_coordinator(tid, 1)
        if error == NONE and node_id >= 0:
            return node_id, cc.node(node_id)
        if time.monotonic() > deadline:
            raise AssertionError(f"FindCoordinator({tid}) kept failing with {error}")
        time.sleep(0.05)


# ---------------------------------------------------------------------- COORD.003 fail-over


def failover_scenario(target, ids) -> dict[str, Any]:
    topic, tid = ids.topic(), ids.transactional_id()
    confluent.create_topic(target, topic)
    vals = [f"open-{i}" for i in range(3)]
    with wire.cluster_client(target) as cc:
        # The transaction must outlive the restart: on a loaded machine a broker restart plus
        # the load of __transaction_state took 70 s (containerized 4.4.0), past a 60 s timeout,
        # and the coordinator's timeout abort then raced the EndTxn. 5 min is within Kafka's
        # default transaction.max.timeout.ms (15 min).
        coord, init, _ = init_ok(cc, tid, timeout_ms=FAILOVER_TXN_TIMEOUT_MS)
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        add_partitions_ok(coord, tid, pid, epoch, topic, [0])
        produce_txn_ok(cc.leader_for(topic, 0), tid, topic, 0, idem_batch(vals, pid, epoch, 0, True))
        node_id, _ = _coordinator_node(cc, tid, 10)
    target.restart_node(node_id)  # NotSupportedByTarget where the target cannot
    obs: dict[str, Any] = {"restarted_node": node_id, "seen": [], "decision_before_success": []}
    deadline = time.monotonic() + 60
    with wire.cluster_client(target) as cc:
        while True:
            try:
                _, node = _coordinator_node(cc, tid, 5)
                _, resp = end_txn(node, tid, pid, epoch, True)
                code = int(resp.error_code)
            except (OSError, ConnectionError, EOFError) as exc:  # connection to the restarting node
                code = f"io:{type(exc).__name__}"
            if code == NONE:
                break
            obs["seen"].append(code)
            if code not in TXN_SETTLING and not isinstance(code, str):
                obs["decision_before_success"].append(code)
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)
        obs["commit"] = code
        leader = cc.leader_for(topic, 0)
        hw, lso = wait_stable(leader, topic, 0, at_least=len(vals) + 1)
        obs["stable"] = hw == lso
        obs["committed_values"] = committed_values(cc, topic, 0)
        # The id keeps working after the fail-over: a second transaction commits.
        coord, init2, _ = init_ok(cc, tid)
        pid2, epoch2 = int(init2.producer_id), int(init2.producer_epoch)
        obs["next_epoch_higher"] = (pid2, epoch2) != (pid, epoch)
        add_partitions_ok(coord, tid, pid2, epoch2, topic, [0])
        produce_txn_ok(cc.leader_for(topic, 0), tid, topic, 0, idem_batch(["after-0"], pid2, epoch2, 0, True))
        _, resp = end_txn(coord, tid, pid2, epoch2, True)
        obs["second_commit"] = int(resp.error_code)
        wait_stable(cc.leader_for(topic, 0), topic, 0, at_least=len(vals) + 3)
        obs["committed_after"] = committed_values(cc, topic, 0)
    obs["values"] = vals
    return obs


@pytest.mark.requirement("KIP-98.COORD.003")
def test_coordinator_restart_mid_transaction_answers_retriable_then_commits(target, capabilities, unique):
    require_transactions(capabilities)
    obs = failover_scenario(target, unique)
    assert obs["decision_before_success"] == [], f"non-retriable answer while the coordinator loaded: {obs['seen']}"
    assert obs["commit"] == NONE, f"EndTxn(commit) never succeeded after the restart: {obs['seen']}"
    if target.kind == "reference":
        # The reference loads for TransactionConfig.load_duration_ms (500 ms by default).
        assert ErrorCode.coordinator_load_in_progress in obs["seen"], obs["seen"]
    assert obs["stable"], "the LSO did not reach the high watermark after the commit"
    assert obs["committed_values"] == obs["values"], obs["committed_values"]
    assert obs["next_epoch_higher"], "InitProducerId after the fail-over returned the same producer id/epoch"
    assert obs["second_commit"] == NONE, obs["second_commit"]
    assert obs["committed_after"] == obs["values"] + ["after-0"], obs["committed_after"]


# ------------------------------------------------------------------ TIMEOUT.002 expiration


def _expiration_ms(target) -> int:
    """transactional.id.expiration.ms the target was started with, when the suite can set it."""
    if target.kind == "reference":
        value, how = target.spec.option("txn_id_expiration_ms"), "--target reference:txn_id_expiration_ms=2000"
    elif target.kind == "kafka-native":
        value = target.spec.option("broker.transactional.id.expiration.ms")
        how = "--target kafka-native:broker.transactional.id.expiration.ms=2000"
    else:
        raise NotSupportedByTarget(f"{target.kind}: transactional.id.expiration.ms cannot be set by the suite")
    if value is None or not value.isdigit() or int(value) > EXPIRATION_MAX_MS:
        raise NotSupportedByTarget(
            f"transactional.id.expiration.ms is not set to <= {EXPIRATION_MAX_MS} ms on this target "
            f"(default 7 days); run with {how}"
        )
    return int(value)


def _scan_interval_ms(target) -> int:
    if target.kind == "reference":
        return 1_000  # reference_target_config() with txn_id_expiration_ms set
    value = target.spec.option("broker.transaction.remove.expired.transaction.cleanup.interval.ms")
    return int(value) if value and value.isdigit() else 10_000  # the kafka-native provider's default


def expiration_scenario(target, ids, expiration_ms: int, scan_ms: int) -> dict[str, Any]:
    topic, tid = ids.topic(), ids.transactional_id()
    confluent.create_topic(target, topic)
    obs: dict[str, Any] = {}
    with wire.cluster_client(target) as cc:
        coord, init, _ = init_ok(cc, tid)
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        # One committed transaction, then the id stays idle (CompleteCommit).
        add_partitions_ok(coord, tid, pid, epoch, topic, [0])
        produce_txn_ok(cc.leader_for(topic, 0), tid, topic, 0, idem_batch(["before-expiry"], pid, epoch, 0, True))
        _, resp = end_txn(coord, tid, pid, epoch, True)
        obs["commit"] = int(resp.error_code)
        wait_stable(cc.leader_for(topic, 0), topic, 0, at_least=2)
        t_idle = time.monotonic()
        obs["described_while_idle"] = describe(coord, tid)["error"]
        deadline = t_idle + (expiration_ms + scan_ms) / 1000 + 5
        while True:
            d = describe(coordinator(cc, tid), tid)
            if d["error"] == TRANSACTIONAL_ID_NOT_FOUND or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        obs["expired_after_s"] = round(time.monotonic() - t_idle, 1)
        obs["described_after"] = d["error"]
        obs["listed_after"] = tid in list_all(cc)["listed"]
        obs["old_pid_add_partitions"] = add_partitions_to_txn(coordinator(cc, tid), tid, pid, epoch, topic, [0])[1]
        _, again, _ = init_ok(cc, tid)
        obs["new_init"] = int(again.error_code)
    obs["expiration_ms"] = expiration_ms
    return obs


@pytest.mark.requirement("KIP-98.TIMEOUT.002")
def test_idle_transactional_id_expires(target, capabilities, unique):
    require_transactions(capabilities)
    expiration_ms = _expiration_ms(target)
    require_api(capabilities, DESCRIBE_TRANSACTIONS, what="DescribeTransactions")
    require_api(capabilities, LIST_TRANSACTIONS, what="ListTransactions")
    obs = expiration_scenario(target, unique, expiration_ms, _scan_interval_ms(target))
    assert obs["commit"] == NONE, obs
    assert obs["described_while_idle"] == NONE, obs
    assert obs["described_after"] == TRANSACTIONAL_ID_NOT_FOUND, f"the idle id was not expired: {obs}"
    assert obs["expired_after_s"] >= expiration_ms / 1000 - 0.5, f"expired before transactional.id.expiration.ms: {obs}"
    assert not obs["listed_after"], obs
    assert set(obs["old_pid_add_partitions"].values()) == {INVALID_PRODUCER_ID_MAPPING}, obs
    assert obs["new_init"] == NONE, obs
