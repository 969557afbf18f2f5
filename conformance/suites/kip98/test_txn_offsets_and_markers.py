"""KIP-98 offsets in a transaction, over the raw protocol (transaction protocol v1):

* TxnOffsetCommit stores the offsets as pending: the group's committed offset (OffsetFetch
  without RequireStable) keeps its old value until the transaction commits, and keeps it
  for good when the transaction aborts;
* AddOffsetsToTxn adds the group's `__consumer_offsets` partition to the transaction
  (DescribeTransactions lists it), and at commit the coordinator writes a COMMIT marker to
  every partition of the transaction, that offsets partition included (raw Fetch of the
  data partitions and of `__consumer_offsets`).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from clients import confluent, wire
from clients.txn import add_partitions_ok, end_txn_ok, init_ok, produce_txn_ok
from conformance.suites import require_api
from conformance.suites.kip98 import create_ready_topic, fetch_all, idem_batch, require_transactions
from conformance.suites.kip98.test_fencing import DESCRIBE_TRANSACTIONS
from conformance.suites.kip98.test_txn_admin import describe
from conformance.suites.kip447 import UNSTABLE_OFFSET_COMMIT, RawTxn, commit, group_coordinator, offset_fetch
from targets.target import NotSupportedByTarget
from reference_impl.model.java_hash import partition_for_key
from reference_impl.protocol import records

OFFSETS_TOPIC = "__consumer_offsets"
SETTLE_S = 30.0


def _settled(coord, group: str, topic: str) -> list[int]:
    """[offset, error] of partition 0 once no transaction holds it (RequireStable)."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        _, ans = offset_fetch(coord, group, topic, [0], require_stable=True)
        if ans[0][1] != UNSTABLE_OFFSET_COMMIT or time.monotonic() > deadline:
            return list(ans[0])
        time.sleep(0.05)


def _committed(coord, group: str, topic: str) -> list[int]:
    _, ans = offset_fetch(coord, group, topic, [0], require_stable=False)
    return list(ans[0])


def pending_offsets_scenario(target, ids) -> dict[str, Any]:
    """G's offset is 5; T1 stages 42 and commits; T2 stages 77 and aborts."""
    topic, group = ids.topic(), ids.group()
    confluent.create_topic(target, topic)
    with wire.cluster_client(target) as cc:
        coord = group_coordinator(cc, group, topic)
        plain = commit(coord, group, topic, 0, 5)
        seen: dict[str, Any] = {"plain_commit": plain}
        for name, offset, decision in (("committed_txn", 42, True), ("aborted_txn", 77, False)):
            txn = RawTxn(cc, ids.transactional_id())
            init, add = txn.init(), txn.add_offsets(group)
            _, staged = txn.txn_offset_commit(group, topic, {0: offset})
            during = _committed(coord, group, topic)
            end = txn.end(commit=decision)
            seen[name] = {"errors": [init, add, staged[0], end], "during": during, "after": _settled(coord, group, topic)}
    return seen


@pytest.mark.requirement("KIP-98.TXNOFF.001")
def test_txn_offsets_are_pending_until_commit_and_dropped_on_abort(differential):
    """KIP-98.TXNOFF.001: old offset while pending; new after commit; unchanged after abort."""
    obs = differential.run(pending_offsets_scenario).target
    assert obs["plain_commit"] == 0, obs
    committed, aborted = obs["committed_txn"], obs["aborted_txn"]
    assert committed["errors"] == [0, 0, 0, 0] and aborted["errors"] == [0, 0, 0, 0], obs
    assert committed["during"] == [5, 0], f"a pending transactional offset was visible before the commit: {committed}"
    assert committed["after"] == [42, 0], f"the committed transaction's offset did not become the group's: {committed}"
    assert aborted["during"] == [42, 0], f"a pending transactional offset was visible before the abort: {aborted}"
    assert aborted["after"] == [42, 0], f"an aborted transaction's offset became the group's: {aborted}"


def _offsets_partition(cc, group: str) -> int | None:
    """The group's __consumer_offsets partition; None when the target shows no such topic
    (its group offsets are not a topic)."""
    md = cc.refresh([OFFSETS_TOPIC])
    topic = next((t for t in md.topics if t.name == OFFSETS_TOPIC), None)
    if topic is None or int(topic.error_code) != 0 or not topic.partitions:
        return None
    return partition_for_key(group, len(topic.partitions))


def _control_markers(cc, topic: str, partition: int | None, pid: int) -> list[str] | None:
    if partition is None:
        return None
    data = fetch_all(cc, cc.leader_for(topic, partition), topic, partition)["records"]
    # not batch_summary: __consumer_offsets records are binary, only control batches are read
    return [records.parse_control_record(b.records[0])[0].name for b in records.decode_batches(data, verify=False)
            if b.header.is_control and b.header.producer_id == pid and b.records]


def _wait_markers(cc, topic: str, offsets_partition: int | None, pid: int, count: int) -> dict[str, Any]:
    """The control markers of pid on P0, P1 and the offsets partition once P0 and P1 have
    `count` each (markers are written after EndTxn answers), or at the deadline."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        markers = {"p0": _control_markers(cc, topic, 0, pid), "p1": _control_markers(cc, topic, 1, pid),
                   "offsets": _control_markers(cc, OFFSETS_TOPIC, offsets_partition, pid)}
        if all(len(m) >= count for m in markers.values() if m is not None) or time.monotonic() > deadline:
            return markers
        time.sleep(0.2)


def markers_everywhere_scenario(target, ids) -> dict[str, Any]:
    """T writes to P0 and P1, commits offsets for G and commits; then writes to P0 and P1
    again and aborts. Every partition is read after each."""
    require_transactions(target.capabilities())
    topic, group, tid = ids.topic(), ids.group(), ids.transactional_id()
    with wire.cluster_client(target) as cc:
        create_ready_topic(target, cc, topic, partitions=2)
        group_coordinator(cc, group, topic)
        offsets_partition = _offsets_partition(cc, group)
        coord, init, _ = init_ok(cc, tid)
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        errors = []
        for seq, decision in ((0, True), (1, False)):
            add_partitions_ok(coord, tid, pid, epoch, topic, [0, 1])
            errors += [int(produce_txn_ok(cc.leader_for(topic, p), tid, topic, p,
                                          idem_batch([f"p{p}-{seq}"], pid, epoch, seq, transactional=True))[1].error_code)
                       for p in (0, 1)]
            if decision:
                txn = RawTxn(cc, tid)
                txn.pid, txn.epoch = pid, epoch
                add_offsets = txn.add_offsets(group)
                described = describe(coord, tid)["topics"]
                _, staged = txn.txn_offset_commit(group, topic, {0: 1})
                errors += [add_offsets, staged[0]]
            end_txn_ok(coord, tid, pid, epoch, committed=decision)
            markers = _wait_markers(cc, topic, offsets_partition, pid, seq + 1)
    return {"errors": errors, "offsets_partition": offsets_partition,
            "described_offsets_partitions": described.get(OFFSETS_TOPIC), "described_data": described.get(topic),
            "markers": markers}


def _markers_obs(differential) -> dict[str, Any]:
    require_api(differential.target.capabilities(), DESCRIBE_TRANSACTIONS, what="DescribeTransactions")
    # the offsets partition's number depends on offsets.topic.num.partitions: not compared
    return differential.run(markers_everywhere_scenario,
                            ignore_keys=["offsets_partition", "offsets", "described_offsets_partitions"]).target


@pytest.mark.requirement("KIP-98.ADDOFF.001")
def test_add_offsets_puts_the_groups_offsets_partition_in_the_transaction(differential):
    """KIP-98.ADDOFF.001: DescribeTransactions lists the group's offsets partition, which gets the COMMIT marker."""
    obs = _markers_obs(differential)
    if obs["offsets_partition"] is None:
        raise NotSupportedByTarget(f"the target does not show {OFFSETS_TOPIC} in Metadata (group offsets are not a topic)")
    assert obs["errors"] == [0] * 6, obs
    assert obs["described_offsets_partitions"] == [obs["offsets_partition"]], (
        f"DescribeTransactions after AddOffsetsToTxn must list {OFFSETS_TOPIC}-{obs['offsets_partition']}: {obs}")
    assert obs["markers"]["offsets"] == ["COMMIT"], f"the offsets partition got no COMMIT marker: {obs['markers']}"


@pytest.mark.requirement("KIP-98.MARKER.001")
def test_end_writes_a_marker_to_every_partition_of_the_transaction(differential):
    """KIP-98.MARKER.001: COMMIT then ABORT on both data partitions. The offsets partition is
    checked where the target has __consumer_offsets; the
    aborting transaction committed no offsets, so that partition gets one marker only."""
    obs = _markers_obs(differential)
    assert obs["errors"] == [0] * 6 and obs["described_data"] == [0, 1], obs
    markers = obs["markers"]
    assert markers["p0"] == ["COMMIT", "ABORT"] and markers["p1"] == ["COMMIT", "ABORT"], (
        f"each data partition must get the commit's COMMIT then the abort's ABORT marker: {markers}")
    if obs["offsets_partition"] is not None:
        assert markers["offsets"] == ["COMMIT"], f"the offsets partition's marker is missing: {markers}"
