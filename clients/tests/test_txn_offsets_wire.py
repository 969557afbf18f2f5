"""Transactional offsets over the wire (KIP-447) against the in-process reference cluster.

Raw client only: a consumer joins a classic group (JoinGroup/SyncGroup), a "producer"
sends TxnOffsetCommit with stale and good group metadata, and OffsetFetch with
require_stable reports UNSTABLE_OFFSET_COMMIT (88) until the transaction's marker
reaches the group coordinator. The marker is simulated by calling the model's
`complete_transactional_offsets` on the cluster's event loop (the transaction
coordinator drives it in the full broker).
"""

from __future__ import annotations

import datetime
import uuid

from kio.schema.errors import ErrorCode

from clients.wire import Req, create_topic, join_group, offset_commit, offset_fetch, sync_group
from reference_impl.client.raw_client import ClusterClient, RawClient
from reference_impl.handlers.registry import HANDLERS
from reference_impl.server.broker_server import ThreadedReferenceCluster
from reference_impl.protocol.api_keys import ApiKey

TXN_OFFSET_COMMIT, INIT_PRODUCER_ID, ADD_OFFSETS_TO_TXN = ApiKey.TXN_OFFSET_COMMIT, ApiKey.INIT_PRODUCER_ID, ApiKey.ADD_OFFSETS_TO_TXN
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = ApiKey.DESCRIBE_TRANSACTIONS, ApiKey.LIST_TRANSACTIONS


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def txn_offset_commit(client: RawClient, tid: str, group: str, pid: int, epoch: int, offsets: dict[tuple[str, int], int],
                      *, generation: int = -1, member: str = "", instance: str | None = None,
                      version: int = 3) -> dict[tuple[str, int], int]:
    r = Req(client, TXN_OFFSET_COMMIT, version)
    by_topic: dict[str, list] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(r.part(
            "TxnOffsetCommitRequestPartition", partition_index=partition, committed_offset=offset,
            committed_leader_epoch=-1, committed_metadata=""))
    resp = r.send(
        transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch, generation_id=generation,
        member_id=member, group_instance_id=instance,
        topics=tuple(r.part("TxnOffsetCommitRequestTopic", name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
    )
    return {(t.name, int(p.partition_index)): int(p.error_code) for t in resp.topics for p in t.partitions}


def begin_transaction(cluster: ThreadedReferenceCluster, cc: ClusterClient, tid: str, group: str) -> tuple[int, int]:
    """Producer id and epoch for `tid`. With a transaction coordinator in the model, a real
    InitProducerId + AddOffsetsToTxn (KIP-98 flow) so TxnOffsetCommit's verification passes;
    without one, any id (the group coordinator then trusts the producer, as the seam says)."""
    state = cluster.cluster.state
    if not (hasattr(state, "transactions") and INIT_PRODUCER_ID in HANDLERS and ADD_OFFSETS_TO_TXN in HANDLERS):
        return 4000 + uuid.uuid4().int % 1000, 0
    txn_coord = cc.coordinator_for(tid, key_type=1, wait_s=10)
    init = Req(txn_coord, INIT_PRODUCER_ID, 4).send(
        transactional_id=tid, transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1, producer_epoch=-1)
    assert init.error_code == ErrorCode.none, init
    pid, epoch = int(init.producer_id), int(init.producer_epoch)
    add = Req(txn_coord, ADD_OFFSETS_TO_TXN, 3).send(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                                      group_id=group)
    assert add.error_code == ErrorCode.none, add
    return pid, epoch


def complete(cluster: ThreadedReferenceCluster, group: str, pid: int, epoch: int, committed: bool):
    async def run():
        return cluster.cluster.state.groups.complete_transactional_offsets(group, pid, epoch, committed)

    return cluster.call(run())


def test_apis_advertised(client):
    versions = client.bootstrap.api_versions()
    assert versions[TXN_OFFSET_COMMIT] == (0, 5)
    assert versions[DESCRIBE_TRANSACTIONS] == (0, 0)
    assert versions[LIST_TRANSACTIONS] == (0, 1)


def test_txn_offset_commit_fencing_and_require_stable(cluster, client):
    topic, group, tid = unique("txo"), unique("g"), unique("tx")
    assert create_topic(client, topic, 2) == 0
    coord = client.coordinator_for(group, wait_s=10)

    joined = join_group(coord, group, topic=topic)
    assert joined.error_code == ErrorCode.none
    member, generation = joined.member_id, int(joined.generation_id)
    synced = sync_group(coord, group, generation, member, {member: b""})
    assert synced.error_code == ErrorCode.none
    assert offset_commit(coord, group, topic, 0, 50, generation=generation, member_id=member) == 0

    pid, epoch = begin_transaction(cluster, client, tid, group)
    tp0 = (topic, 0)
    # KIP-447.FENCE.002 / 003: stale generation, unknown member.
    assert txn_offset_commit(coord, tid, group, pid, epoch, {tp0: 100}, generation=generation - 1,
                             member=member) == {tp0: ErrorCode.illegal_generation}
    assert txn_offset_commit(coord, tid, group, pid, epoch, {tp0: 100}, generation=generation,
                             member="not-a-member") == {tp0: ErrorCode.unknown_member_id}
    # Unknown topics are answered before the coordinator is involved.
    assert txn_offset_commit(coord, tid, group, pid, epoch, {("no-such-topic", 0): 1}, generation=generation,
                             member=member) == {("no-such-topic", 0): ErrorCode.unknown_topic_or_partition}
    assert txn_offset_commit(coord, tid, group, pid, epoch, {tp0: 100}, generation=generation,
                             member=member) == {tp0: ErrorCode.none}

    # KIP-447.FETCH.001 (DIV-001: 88, never 85) / FETCH.002 / FETCH.003.
    assert offset_fetch(coord, group, topic, [0, 1], require_stable=True) == {
        0: (-1, "", ErrorCode.unstable_offset_commit), 1: (-1, "", 0)}
    assert offset_fetch(coord, group, topic, [0, 1]) == {0: (50, "", 0), 1: (-1, "", 0)}

    assert complete(cluster, group, pid, epoch, committed=True) == [tp0]
    assert offset_fetch(coord, group, topic, [0, 1], require_stable=True) == {0: (100, "", 0), 1: (-1, "", 0)}


def test_abort_restores_previous_offset(cluster, client):
    topic, group, tid = unique("txa"), unique("g"), unique("tx")
    assert create_topic(client, topic, 1) == 0
    coord = client.coordinator_for(group, wait_s=10)
    assert offset_commit(coord, group, topic, 0, 50) == 0
    pid, epoch = begin_transaction(cluster, client, tid, group)
    # KIP-447.FENCE.005: default group fields (simple group) are accepted.
    assert txn_offset_commit(coord, tid, group, pid, epoch, {(topic, 0): 100}) == {(topic, 0): 0}
    assert offset_fetch(coord, group, topic, [0], require_stable=True)[0][2] == ErrorCode.unstable_offset_commit
    assert complete(cluster, group, pid, epoch, committed=False) == []
    # KIP-447.FETCH.004
    assert offset_fetch(coord, group, topic, [0], require_stable=True) == {0: (50, "", 0)}


def test_not_coordinator(client3):
    client = client3
    topic, group = unique("txn"), unique("g")
    assert create_topic(client, topic, 1) == 0
    coord = client.coordinator_for(group, wait_s=10)
    other = next(client.node(n) for n in client.nodes if client.node(n) is not coord)
    assert txn_offset_commit(other, "tx", group, 1, 0, {(topic, 0): 1}) == {(topic, 0): ErrorCode.not_coordinator}


def test_describe_and_list_transactions_of_unknown_ids(client):
    tid = unique("tx-none")
    coord = client.coordinator_for(tid, key_type=1, wait_s=10)
    resp = Req(coord, DESCRIBE_TRANSACTIONS, 0).send(transactional_ids=(tid,))
    assert [(s.transactional_id, s.error_code) for s in resp.transaction_states] == [
        (tid, ErrorCode.transactional_id_not_found)]
    for node_id in client.nodes:
        listed = Req(client.node(node_id), LIST_TRANSACTIONS, 1).send(
            state_filters=("Ongoing", "NoSuchState"), producer_id_filters=(), duration_filter=-1)
        assert listed.error_code == ErrorCode.none
        assert tuple(listed.unknown_state_filters) == ("NoSuchState",)
        assert tid not in {s.transactional_id for s in listed.transaction_states}
