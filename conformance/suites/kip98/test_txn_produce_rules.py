"""KIP-98 rules for transactional Produce (protocol v1: AddPartitionsToTxn, Produce <= v11).

* Data for a partition never added to the transaction must not become committed data. The
  KIP leaves open what the broker does with it; Kafka 3.6+ (KIP-890 part 1,
  `transaction.partition.verification.enable`) refuses it with INVALID_TXN_STATE
  (TRANSACTION_ABORTABLE to newer Produce versions) and appends nothing (DIV-98012). A
  broker that appends it leaves a transactional batch no marker will ever end, hanging the
  partition's LSO: the test pins Kafka's refusal.
* Produce v3+ carries the transactional id: a request with transactional batches and a
  null transactional id is refused (Kafka's KafkaApis.handleProduceRequest answers
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED even without an authorizer), while idempotent
  batches go with a null id and transactional ones with their id.
"""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from clients import wire
from clients.txn import add_partitions_ok, end_txn_ok, init_ok, init_producer_id_settled, produce_txn_ok
from conformance.suites.kip98 import (
    READ_COMMITTED,
    create_ready_topic,
    idem_batch,
    log_end,
    require_transactions,
    wait_stable,
)
from conformance.suites.kip98.test_fencing import committed_values
from conformance.suites.kip932.test_sessions import record_side


# INVALID_TXN_STATE, or TRANSACTION_ABORTABLE to Produce versions that know it (KIP-890:
# the verification failure makes the client abort instead of failing fatally).
REFUSED_UNADDED = {ErrorCode.invalid_txn_state, ErrorCode.transaction_abortable}


def unadded_partition_scenario(target, ids) -> dict[str, Any]:
    """T adds partition 0 only, writes to 0 and to 1, commits."""
    require_transactions(target.capabilities())
    topic, tid = ids.topic(), ids.transactional_id()
    with wire.cluster_client(target) as cc:
        create_ready_topic(target, cc, topic, partitions=2)
        coord, init, _ = init_ok(cc, tid)
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        add_partitions_ok(coord, tid, pid, epoch, topic, [0])
        _, added = produce_txn_ok(cc.leader_for(topic, 0), tid, topic, 0,
                                  idem_batch(["in-txn"], pid, epoch, 0, transactional=True))
        hw1_before = log_end(cc.leader_for(topic, 1), topic, 1)
        _, stray = produce_txn_ok(cc.leader_for(topic, 1), tid, topic, 1,
                                  idem_batch(["never-added"], pid, epoch, 0, transactional=True))
        end_txn_ok(coord, tid, pid, epoch, committed=True)
        wait_stable(cc.leader_for(topic, 0), topic, 0, at_least=2)
        hw1_after = log_end(cc.leader_for(topic, 1), topic, 1)
        return {
            "added_partition": int(added.error_code),
            "stray_partition": int(stray.error_code),
            "stray_appended": hw1_after > hw1_before,
            "committed_0": committed_values(cc, topic, 0),
            "committed_1": committed_values(cc, topic, 1),
            "lso_1": log_end(cc.leader_for(topic, 1), topic, 1, READ_COMMITTED),
        }


@pytest.mark.requirement("KIP-98.TXN.006")
def test_data_for_a_partition_never_added_is_not_committed(differential, request):
    """KIP-98.TXN.006: refused with INVALID_TXN_STATE / TRANSACTION_ABORTABLE and not appended
    (Kafka >= 3.6, DIV-98012), never committed, the partition's LSO not held."""
    obs = differential.run(unadded_partition_scenario).target
    assert obs["added_partition"] == 0 and obs["committed_0"] == ["in-txn"], f"the transaction itself failed: {obs}"
    assert "never-added" not in obs["committed_1"], (
        f"KIP-98.TXN.006: data for a partition never added to the transaction became committed: {obs}")
    assert obs["stray_partition"] in REFUSED_UNADDED, (
        f"KIP-98.TXN.006 (DIV-98012): transactional data for a partition never added answered "
        f"{obs['stray_partition']}, want INVALID_TXN_STATE or TRANSACTION_ABORTABLE: {obs}")
    record_side(request, "data-for-a-partition-never-added", "kafka")
    assert not obs["stray_appended"], f"KIP-98.TXN.006: a refused batch was appended: {obs}"
    assert obs["lso_1"] == 0, f"KIP-98.TXN.006: the refused batch moved partition 1's LSO: {obs}"


def transactional_id_field_scenario(target, ids) -> dict[str, Any]:
    require_transactions(target.capabilities())
    topic, tid = ids.topic(), ids.transactional_id()
    with wire.cluster_client(target) as cc:
        create_ready_topic(target, cc, topic)
        leader = cc.leader_for(topic, 0)
        coord, init, _ = init_ok(cc, tid)
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        add_partitions_ok(coord, tid, pid, epoch, topic, [0])
        batch = idem_batch(["t0"], pid, epoch, 0, transactional=True)
        _, no_id = produce_txn_ok(leader, None, topic, 0, batch)
        end_no_id = log_end(leader, topic, 0)
        _, with_id = produce_txn_ok(leader, tid, topic, 0, batch)
        end_txn_ok(coord, tid, pid, epoch, committed=True)
        _, idem = init_producer_id_settled(cc, None)
        _, plain = produce_txn_ok(leader, None, topic, 0, idem_batch(["i0"], int(idem.producer_id),
                                                                   int(idem.producer_epoch), 0))
        wait_stable(leader, topic, 0, at_least=3)
        return {"transactional_without_id": int(no_id.error_code), "appended_without_id": end_no_id != 0,
                "transactional_with_id": int(with_id.error_code), "idempotent_without_id": int(plain.error_code),
                "committed": committed_values(cc, topic, 0)}


@pytest.mark.requirement("KIP-98.FORMAT.001")
def test_produce_carries_the_transactional_id_of_transactional_batches(differential):
    """KIP-98.FORMAT.001: null transactional id with transactional batches refused; with the id accepted."""
    obs = differential.run(transactional_id_field_scenario).target
    assert obs["transactional_without_id"] == ErrorCode.transactional_id_authorization_failed, (
        f"transactional records with a null transactional id answered {obs['transactional_without_id']}")
    assert not obs["appended_without_id"], "transactional records without their transactional id were appended"
    assert obs["transactional_with_id"] == 0 and obs["idempotent_without_id"] == 0, obs
    assert obs["committed"] == ["t0", "i0"], obs
