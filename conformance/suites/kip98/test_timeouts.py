"""KIP-98 transaction timeout: the coordinator aborts a transaction that gets no status
update for longer than its TransactionTimeoutMs, within the timeout plus the broker's
abort scan interval (transaction.abort.timed.out.transaction.cleanup.interval.ms: 1 s on
kafka-native, 10 s by default on the reference); the data never becomes visible and the
producer's next EndTxn is refused.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer

from clients import confluent, wire
from clients.txn import add_partitions_ok, end_txn_settled, init_ok, produce_txn_ok
from conformance.suites import require_api, require_feature
from conformance.suites.kip98 import idem_batch, require_transactions, wait_stable
from conformance.suites.kip98.test_fencing import (
    FENCING,
    INVALID_PRODUCER_EPOCH,
    INVALID_TXN_STATE,
    NONE,
    PRODUCER_FENCED,
    committed_values,
    read_partition,
)
from reference_impl.client.transactional_producer import TransactionalProducer
from reference_impl.client.txn_state import TxnError, TxnState

TXN_TIMEOUT_MS = 1500
# Upper bound for the abort: timeout + the abort scan interval (the reference's default,
# 10 s, is the largest of the targets) + slack for marker writes.
ABORT_DEADLINE_S = TXN_TIMEOUT_MS / 1000 + 10 + 5


def wait_for_abort_marker(cc, topic: str, partition: int, producer_id: int, deadline_s: float = ABORT_DEADLINE_S) -> float | None:
    """Seconds until an ABORT marker of producer_id appears in the partition, or None."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline_s:
        raw = read_partition(cc, topic, partition, 0)
        if ("ABORT", producer_id) in raw["markers"]:
            return time.monotonic() - t0
        time.sleep(0.1)
    return None


def timeout_abort_scenario(target, ids, tv2: bool) -> dict[str, Any]:
    topic, tid = ids.topic(), ids.transactional_id()
    confluent.create_topic(target, topic)
    with wire.cluster_client(target) as cc:
        leader = cc.leader_for(topic, 0)
        coord, init, _ = init_ok(cc, tid, timeout_ms=TXN_TIMEOUT_MS)
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        t_start = time.monotonic()
        batch = idem_batch(["stalled-0", "stalled-1"], pid, epoch, 0, True)
        if not tv2:
            add_partitions_ok(coord, tid, pid, epoch, topic, [0])
        # Produce v12 adds the partition through the leader's own AddPartitionsToTxn.
        v, resp = produce_txn_ok(leader, tid, topic, 0, batch, highest=12 if tv2 else 11, lowest=12 if tv2 else 3)
        obs: dict[str, Any] = {"produce": int(resp.error_code), "produce_version": v}
        before = read_partition(cc, topic, 0, 1)
        obs["lso_while_open"] = before["last_stable_offset"]
        waited = wait_for_abort_marker(cc, topic, 0, pid)
        obs["aborted"] = waited is not None
        obs["abort_after_timeout"] = waited is not None and (time.monotonic() - t_start) >= TXN_TIMEOUT_MS / 1000 - 0.2
        hw, lso = wait_stable(leader, topic, 0)
        obs["stable"] = hw == lso
        obs["committed_values"] = committed_values(cc, topic, 0)
        # The stalled producer wakes up and tries to commit with its old epoch, retrying
        # CONCURRENT_TRANSACTIONS as a client does: the coordinator answers that until the
        # timeout abort's CompleteAbort is written, which on 3 brokers can outlast the ABORT
        # marker's appearance in the partition (seen on testcontainers:nodes=3).
        version, end = end_txn_settled(coord, tid, pid, epoch, True, highest=5 if tv2 else 4, wait_s=15.0, every_s=0.2)
        obs["late_commit"] = {"version": version, "error": int(end.error_code)}
        after = read_partition(cc, topic, 0, 1)
        obs["committed_after_late_commit"] = committed_values(cc, topic, 0)
        obs["markers"] = [m for m, p in after["markers"] if p == pid]
    return obs


def tv1_timeout_abort_scenario(target, ids) -> dict[str, Any]:
    return timeout_abort_scenario(target, ids, tv2=False)


def tv2_timeout_abort_scenario(target, ids) -> dict[str, Any]:
    return timeout_abort_scenario(target, ids, tv2=True)


def _assert_timeout_abort(obs: dict[str, Any]) -> None:
    assert obs["produce"] == NONE, obs
    assert obs["lso_while_open"] == 0, "the open transaction did not hold the LSO at its first offset"
    assert obs["aborted"], f"no ABORT marker within {ABORT_DEADLINE_S}s of a {TXN_TIMEOUT_MS} ms transaction timeout"
    assert obs["abort_after_timeout"], "the coordinator aborted before the transaction timeout"
    assert obs["stable"], "the LSO did not advance past the aborted transaction"
    assert obs["committed_values"] == [] and obs["committed_after_late_commit"] == [], obs
    assert obs["markers"] == ["ABORT"], obs["markers"]


@pytest.mark.requirement("KIP-98.TIMEOUT.001", "KIP-98.LSO.003", "KIP-98.ENDTXN.003")
def test_stalled_tv1_transaction_aborted_by_coordinator(differential, capabilities):
    require_transactions(capabilities)
    obs = differential.run(tv1_timeout_abort_scenario, requirement="KIP-98.TIMEOUT.001").target
    _assert_timeout_abort(obs)
    # TV1: the timeout abort bumped the epoch, so the late commit is fenced; EndTxn v2+
    # says PRODUCER_FENCED, older versions INVALID_PRODUCER_EPOCH (KIP-588).
    late = obs["late_commit"]
    assert late["error"] == (PRODUCER_FENCED if late["version"] >= 2 else INVALID_PRODUCER_EPOCH), late


@pytest.mark.requirement("KIP-98.TIMEOUT.001", "KIP-98.LSO.003", "KIP-98.ENDTXN.003")
def test_stalled_tv2_transaction_aborted_by_coordinator(differential, capabilities):
    require_transactions(capabilities)
    require_feature(capabilities, "transaction.version", 2)
    require_api(capabilities, 0, 12, what="Produce v12 (implicit add to transaction)")
    require_api(capabilities, 26, 5, what="EndTxn v5")
    obs = differential.run(tv2_timeout_abort_scenario, requirement="KIP-98.TIMEOUT.001").target
    _assert_timeout_abort(obs)
    # Apache Kafka 4.4.0 (TV2, EndTxn v5) answers INVALID_TXN_STATE: the timeout abort
    # bumped the epoch and completed; a commit carrying the previous epoch is treated as a
    # mismatched retry of the completed (aborted) transaction, not as a fenced producer.
    assert obs["late_commit"] == {"version": 5, "error": INVALID_TXN_STATE}, obs["late_commit"]


@pytest.mark.requirement("KIP-98.TIMEOUT.001", "KIP-98.CONFIG.007")
def test_reference_client_commit_after_timeout_abort_fails(target, capabilities, unique):
    require_transactions(capabilities)
    topic, tid = unique.topic(), unique.transactional_id()
    confluent.create_topic(target, topic)
    producer = TransactionalProducer(target.bootstrap_servers, tid, transaction_timeout_ms=TXN_TIMEOUT_MS, security=target.raw_security())
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, value=b"stalled", partition=0)
        producer.flush()
        pid = producer.producer_id
        with wire.cluster_client(target) as cc:
            assert wait_for_abort_marker(cc, topic, 0, pid) is not None, "the stalled transaction was not aborted"
        with pytest.raises(TxnError) as err:
            producer.commit_transaction()
        assert err.value.error_code in FENCING | {INVALID_TXN_STATE}, repr(err.value)
        if producer.state is TxnState.ABORTABLE_ERROR:
            # KIP-360/KIP-588: recoverable; abort, then the next transaction commits.
            producer.abort_transaction()
            producer.begin_transaction()
            producer.send(topic, value=b"after-recovery", partition=0)
            producer.commit_transaction()
            expected = ["after-recovery"]
        else:
            assert producer.state is TxnState.FATAL_ERROR, producer.state
            expected = []
    finally:
        try:
            producer.close()
        except Exception:  # noqa: BLE001
            pass
    with wire.cluster_client(target) as cc:
        wait_stable(cc.leader_for(topic, 0), topic, 0)
        assert committed_values(cc, topic, 0) == expected


@pytest.mark.requirement("KIP-98.TIMEOUT.001")
def test_confluent_commit_after_timeout_abort_fails(target, capabilities, unique):
    require_transactions(capabilities)
    topic, tid = unique.topic(), unique.transactional_id()
    confluent.create_topic(target, topic)
    producer = Producer(confluent.config(target, **{"transactional.id": tid, "transaction.timeout.ms": 1000}))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"stalled", partition=0)
    assert producer.flush(30) == 0
    with wire.cluster_client(target) as cc:
        # The producer id is not exposed by confluent-kafka: any ABORT marker will do.
        t0 = time.monotonic()
        while time.monotonic() - t0 < ABORT_DEADLINE_S:
            if any(m == "ABORT" for m, _ in read_partition(cc, topic, 0, 0)["markers"]):
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the stalled transaction was not aborted")
        with pytest.raises(KafkaException):
            producer.commit_transaction(30)
        wait_stable(cc.leader_for(topic, 0), topic, 0)
        assert committed_values(cc, topic, 0) == []
