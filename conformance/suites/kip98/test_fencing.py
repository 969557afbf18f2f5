"""KIP-98 zombie fencing: a second InitProducerId for the same transactional id fences the
first instance, aborts its open transaction, and every later request of the zombie fails.

Wire-level scenarios drive transaction protocol v1 (AddPartitionsToTxn <= v3, Produce <= v11,
EndTxn <= v4), which every broker with transactions accepts; the exact fencing code depends
on the request version (KIP-588: PRODUCER_FENCED from EndTxn/AddPartitionsToTxn v2+,
INVALID_PRODUCER_EPOCH below). Client-level tests use the reference TransactionalProducer
(TV2 where the cluster finalizes it) and confluent-kafka (TV1).

The transaction requests are `clients.txn`'s; this module keeps the partition readers
(read_partition, committed_values) the other modules of the KIP-98 suite share.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer

from clients import confluent, wire
from clients.txn import (
    add_offsets_to_txn, add_partitions_ok, add_partitions_to_txn, end_txn, end_txn_ok, init_ok, produce_txn,
    produce_txn_ok,
)
from conformance.suites.kip98 import READ_COMMITTED, idem_batch, require_transactions, wait_stable
from reference_impl.client.raw_client import ClusterClient
from reference_impl.client.transactional_producer import TransactionalProducer
from reference_impl.client.txn_state import ProducerFencedError, TxnError, TxnState
from reference_impl.protocol import records
from reference_impl.protocol.api_keys import ApiKey
from kio.schema.errors import ErrorCode

DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = ApiKey.DESCRIBE_TRANSACTIONS, ApiKey.LIST_TRANSACTIONS
NONE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS = ErrorCode.none, ErrorCode.not_coordinator, ErrorCode.concurrent_transactions
INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, INVALID_PRODUCER_ID_MAPPING = ErrorCode.invalid_producer_epoch, ErrorCode.invalid_txn_state, ErrorCode.invalid_producer_id_mapping
INVALID_TRANSACTION_TIMEOUT, PRODUCER_FENCED, TRANSACTIONAL_ID_NOT_FOUND = ErrorCode.invalid_transaction_timeout, ErrorCode.producer_fenced, ErrorCode.transactional_id_not_found
FENCING = {INVALID_PRODUCER_EPOCH, PRODUCER_FENCED}


# ----------------------------------------------------------------------------- helpers


def batch_summary(data: bytes | None) -> list[dict[str, Any]]:
    """Each fetched batch: offsets, flags, producer id, marker type or values. CRCs are not
    verified here (librdkafka's mock writes control batches with CRC 0; that is not what
    these tests check)."""
    out = []
    for b in records.decode_batches(data, verify=False):
        h = b.header
        item: dict[str, Any] = {
            "base_offset": h.base_offset, "last_offset": h.last_offset, "transactional": h.is_transactional,
            "control": h.is_control, "producer_id": h.producer_id, "producer_epoch": h.producer_epoch,
        }
        if h.is_control and b.records:
            item["marker"] = records.parse_control_record(b.records[0])[0].name
        else:
            item["values"] = [None if r.value is None else r.value.decode() for r in b.records]
        out.append(item)
    return out


def fenced_code(version: int, old_versions_below: int = 2) -> int:
    """KIP-588: coordinator RPCs answer PRODUCER_FENCED from `old_versions_below` on and
    INVALID_PRODUCER_EPOCH to older clients."""
    return PRODUCER_FENCED if version >= old_versions_below else INVALID_PRODUCER_EPOCH


def read_partition(cc: ClusterClient, topic: str, partition: int, isolation_level: int) -> dict[str, Any]:
    """A sessionless Fetch from offset 0: data values, control markers, LSO, HW, aborted txns."""
    leader = cc.leader_for(topic, partition)
    values: list[str] = []
    markers: list[tuple[str, int]] = []
    offset, hw, lso, aborted = 0, -1, -1, []
    for _ in range(50):
        p = wire.fetch(cc, leader, topic, partition, offset, isolation_level=isolation_level)
        if int(p.error_code) != 0:
            raise AssertionError(f"Fetch {topic}-{partition} failed with {int(p.error_code)}")
        hw, lso = int(p.high_watermark), int(p.last_stable_offset)
        aborted += [(int(a.producer_id), int(a.first_offset)) for a in (p.aborted_transactions or ())]
        batches = batch_summary(p.records)
        if not batches:
            break
        for b in batches:
            if b["control"]:
                markers.append((b["marker"], b["producer_id"]))
            else:
                values += b["values"]
        offset = batches[-1]["last_offset"] + 1
    return {"values": values, "markers": markers, "high_watermark": hw, "last_stable_offset": lso, "aborted": aborted}


def committed_values(cc: ClusterClient, topic: str, partition: int = 0) -> list[str]:
    """What a read_committed reader keeps (Java consumer's algorithm): data below the LSO,
    minus the batches of aborted transactions the Fetch response lists."""
    leader = cc.leader_for(topic, partition)
    kept: list[str] = []
    pending: list[tuple[int, int]] = []  # (first_offset, producer_id) not reached yet
    aborting: set[int] = set()
    offset = 0
    for _ in range(50):
        p = wire.fetch(cc, leader, topic, partition, offset, isolation_level=READ_COMMITTED)
        assert int(p.error_code) == 0, f"Fetch failed with {int(p.error_code)}"
        for a in p.aborted_transactions or ():
            item = (int(a.first_offset), int(a.producer_id))
            if item not in pending and item[0] >= offset:
                pending.append(item)
        pending.sort()
        batches = batch_summary(p.records)
        if not batches:
            break
        for b in batches:
            while pending and pending[0][0] <= b["last_offset"]:
                aborting.add(pending.pop(0)[1])
            pid = b["producer_id"]
            if b["control"]:
                if b.get("marker") == "ABORT":
                    aborting.discard(pid)
                continue
            if b["transactional"] and pid in aborting:
                continue
            kept += b["values"]
        offset = batches[-1]["last_offset"] + 1
    return kept


# ----------------------------------------------------------------------------- raw fencing


def zombie_fencing_scenario(target, ids) -> dict[str, Any]:
    topic, tid = ids.topic(), ids.transactional_id()
    confluent.create_topic(target, topic)
    with wire.cluster_client(target) as cc:
        leader = cc.leader_for(topic, 0)
        coord, a, _ = init_ok(cc, tid)
        pid, a_epoch = int(a.producer_id), int(a.producer_epoch)
        add_partitions_ok(coord, tid, pid, a_epoch, topic, [0])
        _, first = produce_txn_ok(leader, tid, topic, 0, idem_batch(["zombie-0", "zombie-1"], pid, a_epoch, 0, True))
        # The new instance: the first answer may be CONCURRENT_TRANSACTIONS while the
        # zombie's transaction is being aborted (Kafka fences, aborts, then lets it retry).
        coord, b, before = init_ok(cc, tid)
        b_pid, b_epoch = int(b.producer_id), int(b.producer_epoch)
        obs: dict[str, Any] = {
            "zombie_first_produce": int(first.error_code),
            "new_init_errors_before_success": before,
            "same_producer_id": b_pid == pid,
            "epoch_increased": b_epoch > a_epoch,
        }
        stable = wait_stable(leader, topic, 0, at_least=3)
        obs["stable_after_fence"] = stable[0] == stable[1]
        # The zombie, still with its old epoch.
        v, got = add_partitions_to_txn(coord, tid, pid, a_epoch, topic, [0])
        obs["zombie_add_partitions"] = {"version": v, "error": got[0]}
        v, got = add_partitions_to_txn(coord, tid, pid, a_epoch, topic, [0], highest=1)
        obs["zombie_add_partitions_v1"] = {"version": v, "error": got[0]}
        v, resp = add_offsets_to_txn(coord, tid, pid, a_epoch, ids.group())
        obs["zombie_add_offsets"] = {"version": v, "error": int(resp.error_code)}
        v, resp = add_offsets_to_txn(coord, tid, pid, a_epoch, ids.group(), highest=1)
        obs["zombie_add_offsets_v1"] = {"version": v, "error": int(resp.error_code)}
        v, resp = end_txn(coord, tid, pid, a_epoch, True)
        obs["zombie_commit"] = {"version": v, "error": int(resp.error_code)}
        v, resp = end_txn(coord, tid, pid, a_epoch, True, highest=1)
        obs["zombie_commit_v1"] = {"version": v, "error": int(resp.error_code)}
        # The new instance works: one committed transaction.
        add_partitions_ok(coord, tid, b_pid, b_epoch, topic, [0])
        _, ok = produce_txn_ok(leader, tid, topic, 0, idem_batch(["new-0"], b_pid, b_epoch, 0, True))
        obs["new_produce"] = int(ok.error_code)
        # The zombie writes to the partition after the new epoch has been seen there.
        _, late = produce_txn(leader, tid, topic, 0, idem_batch(["zombie-2"], pid, a_epoch, 2, True))
        obs["zombie_late_produce"] = int(late.error_code)
        end_txn_ok(coord, tid, b_pid, b_epoch, True)
        wait_stable(leader, topic, 0, at_least=5)
        obs["committed_values"] = committed_values(cc, topic, 0)
        raw = read_partition(cc, topic, 0, 0)
        obs["markers"] = [[m, p == pid] for m, p in raw["markers"]]
        obs["uncommitted_values"] = raw["values"]
    return obs


@pytest.mark.requirement("KIP-98.FENCE.001", "KIP-98.FENCE.002", "KIP-98.FENCE.003", "KIP-98.FENCE.004", "KIP-98.TXN.005",
                         "KIP-98.ADDOFF.002")
def test_new_instance_fences_zombie_and_aborts_its_transaction(differential, capabilities):
    require_transactions(capabilities)
    obs = differential.run(zombie_fencing_scenario, requirement="KIP-98.FENCE.001",
                           ignore_keys=("new_init_errors_before_success",)).target
    assert obs["zombie_first_produce"] == NONE
    assert set(obs["new_init_errors_before_success"]) <= {CONCURRENT_TRANSACTIONS}, obs["new_init_errors_before_success"]
    assert obs["same_producer_id"] and obs["epoch_increased"], obs
    assert obs["stable_after_fence"], "the zombie's transaction was not completed after the new instance initialised"
    # The zombie's transaction was aborted: an ABORT marker for its producer id, then
    # the new instance's commit.
    assert obs["markers"][0] == ["ABORT", True], obs["markers"]
    assert obs["markers"][-1] == ["COMMIT", True], obs["markers"]
    assert obs["committed_values"] == ["new-0"], "zombie records became visible at read_committed"
    # Every later request of the zombie is fenced, with the version's code.
    for key in ("zombie_add_partitions", "zombie_add_partitions_v1", "zombie_add_offsets", "zombie_add_offsets_v1",
                "zombie_commit", "zombie_commit_v1"):
        assert obs[key]["error"] == fenced_code(obs[key]["version"]), (key, obs[key])
    assert obs["new_produce"] == NONE
    assert obs["zombie_late_produce"] in FENCING, obs["zombie_late_produce"]
    assert "zombie-2" not in obs["uncommitted_values"], "a fenced batch was appended"


# ----------------------------------------------------------------------------- clients


@pytest.mark.requirement("KIP-98.FENCE.001", "KIP-98.FENCE.004", "KIP-98.TXN.005")
def test_reference_client_zombie_is_fatally_fenced(target, capabilities, unique):
    require_transactions(capabilities)
    topic, tid = unique.topic(), unique.transactional_id()
    confluent.create_topic(target, topic)
    zombie = TransactionalProducer(target.bootstrap_servers, tid, transaction_timeout_ms=60_000, security=target.raw_security())
    fresh = TransactionalProducer(target.bootstrap_servers, tid, transaction_timeout_ms=60_000, security=target.raw_security())
    try:
        zombie.init_transactions()
        zombie.begin_transaction()
        zombie.send(topic, value=b"zombie", partition=0)
        zombie.flush()
        old_epoch = zombie.producer_epoch
        fresh.init_transactions()
        assert fresh.producer_id == zombie.producer_id and fresh.producer_epoch > old_epoch
        with pytest.raises(TxnError) as err:
            zombie.send(topic, value=b"zombie-late", partition=0)
            zombie.flush()
            zombie.commit_transaction()
        assert isinstance(err.value, ProducerFencedError) or err.value.error_code in FENCING, repr(err.value)
        if zombie.state is TxnState.ABORTABLE_ERROR:
            # A stale epoch on Produce is abortable for the Java producer (KIP-588: the epoch
            # may have been bumped by a timeout); the abort then meets the fence.
            with pytest.raises(ProducerFencedError):
                zombie.abort_transaction()
        assert zombie.state is TxnState.FATAL_ERROR, zombie.state
        fresh.begin_transaction()
        fresh.send(topic, value=b"fresh", partition=0)
        fresh.commit_transaction()
    finally:
        for p in (zombie, fresh):
            try:
                p.close()
            except Exception:  # noqa: BLE001 - a fenced producer may refuse a clean close
                pass
    with wire.cluster_client(target) as cc:
        leader = cc.leader_for(topic, 0)
        wait_stable(leader, topic, 0)
        assert committed_values(cc, topic, 0) == ["fresh"]


@pytest.mark.requirement("KIP-98.FENCE.001", "KIP-98.FENCE.004")
def test_confluent_zombie_commit_fails_fatally(target, capabilities, unique):
    require_transactions(capabilities)
    topic, tid = unique.topic(), unique.transactional_id()
    confluent.create_topic(target, topic)
    cfg = confluent.config(target, **{"transactional.id": tid, "transaction.timeout.ms": 60_000})
    zombie, fresh = Producer(cfg), Producer(cfg)
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie", partition=0)
    assert zombie.flush(30) == 0
    fresh.init_transactions(30)
    with pytest.raises(KafkaException) as err:
        zombie.produce(topic, value=b"zombie-late", partition=0)
        zombie.flush(10)
        zombie.commit_transaction(30)
    kerr = err.value.args[0]
    assert kerr.fatal() or kerr.txn_requires_abort() is False, kerr
    assert kerr.fatal(), f"a fenced producer's commit must be fatal, got {kerr}"
    fresh.begin_transaction()
    fresh.produce(topic, value=b"fresh", partition=0)
    fresh.commit_transaction(30)
    got = confluent.consume_assigned(target, topic, [0], 1, **{"isolation.level": "read_committed"})
    assert [m.value() for m in got] == [b"fresh"]
    with wire.cluster_client(target) as cc:
        wait_stable(cc.leader_for(topic, 0), topic, 0)
        assert committed_values(cc, topic, 0) == ["fresh"]

