"""KIP-447: TxnOffsetCommit (v3+) carries the consumer's generation id, member id and group
instance id so that a transactional offset commit is fenced exactly like an ordinary
OffsetCommit; and producer initialisation stays keyed by the transactional id alone
(InitProducerId has no group: the adopted text rejects the per-group producer ids of its
first draft), so two instances with one transactional id fence each other whatever groups
their consumers are in.
"""

from __future__ import annotations

from typing import Any

import pytest

from clients import confluent, wire
from clients.txn import add_partitions_to_txn, coordinator, init_ok
from conformance.suites.kip98.test_fencing import FENCING
from conformance.suites.kip447 import (
    ILLEGAL_GENERATION,
    UNKNOWN_MEMBER_ID,
    RawTxn,
    group_coordinator,
    join,
    require_txn_offset_commit_v3,
    sync,
)

TXN_PARTITION, PLAIN_PARTITION = 0, 1  # the two commits of one case never touch the same offset


def parity_scenario(target, ids) -> dict[str, Any]:
    """Member M joins (g1) and rejoins (g2); each case is committed both ways with the
    same (generation, member id): OffsetCommit on partition 1, TxnOffsetCommit on 0."""
    topic, group = ids.topic(), ids.group()
    confluent.create_topic(target, topic, partitions=2)
    with wire.cluster_client(target) as cc:
        coord = group_coordinator(cc, group, topic)
        j1 = join(coord, group, topic)
        g1, member = int(j1.generation_id), j1.member_id
        sync(coord, group, g1, member, assignments={member: b""})
        j2 = join(coord, group, topic, member_id=member)
        g2 = int(j2.generation_id)
        s2 = sync(coord, group, g2, member, assignments={member: b""})
        txn = RawTxn(cc, ids.transactional_id())
        txn.init()
        add = txn.add_offsets(group)
        cases = {"stale_generation": (g1, member), "unknown_member": (g2, member + "-x"), "current": (g2, member)}
        out = {}
        for n, (case, (generation, member_id)) in enumerate(cases.items()):
            plain = wire.offset_commit(coord, group, topic, PLAIN_PARTITION, 100 + n,
                                           generation=generation, member_id=member_id)
            _, txn_codes = txn.txn_offset_commit(group, topic, {TXN_PARTITION: 200 + n},
                                                 generation=generation, member_id=member_id)
            out[case] = {"offset_commit": plain, "txn_offset_commit": txn_codes[TXN_PARTITION]}
        end = txn.end(commit=True)
    return {"setup": [int(j1.error_code), int(j2.error_code), int(s2.error_code), add, int(g2 > g1)],
            "cases": out, "end": end}


@pytest.mark.requirement("KIP-447.FENCE.001")
def test_txn_offset_commit_is_fenced_like_offset_commit(differential):
    """KIP-447.FENCE.001: for each (generation, member id) both commits answer alike."""
    require_txn_offset_commit_v3(differential.target)
    obs = differential.run(parity_scenario).target
    assert obs["setup"] == [0, 0, 0, 0, 1], obs
    cases = obs["cases"]
    for case, codes in cases.items():
        assert codes["txn_offset_commit"] == codes["offset_commit"], (
            f"{case}: TxnOffsetCommit answered {codes['txn_offset_commit']}, OffsetCommit {codes['offset_commit']}")
    assert cases["stale_generation"]["txn_offset_commit"] == ILLEGAL_GENERATION, cases
    assert cases["unknown_member"]["txn_offset_commit"] == UNKNOWN_MEMBER_ID, cases
    assert cases["current"]["txn_offset_commit"] == 0 and obs["end"] == 0, obs


def init_per_transactional_id_scenario(target, ids) -> dict[str, Any]:
    """Instance 1 (consumer in group G1) and instance 2 (consumer in G2) share one
    transactional id: the second InitProducerId keeps the producer id, bumps the epoch
    and fences the first."""
    topic, tid = ids.topic(), ids.transactional_id()
    confluent.create_topic(target, topic)
    with wire.cluster_client(target) as cc1, wire.cluster_client(target) as cc2:
        joins = []
        for cc, group in ((cc1, ids.group()), (cc2, ids.group())):
            coord = group_coordinator(cc, group, topic)
            j = join(coord, group, topic)
            s = sync(coord, group, int(j.generation_id), j.member_id, assignments={j.member_id: b""})
            joins += [int(j.error_code), int(s.error_code)]
        _, first, _ = init_ok(cc1, tid)
        coord2, second, _ = init_ok(cc2, tid)
        _, fenced = add_partitions_to_txn(coordinator(cc1, tid), tid, int(first.producer_id), int(first.producer_epoch),
                                          topic, [0])
        _, current = add_partitions_to_txn(coord2, tid, int(second.producer_id), int(second.producer_epoch), topic, [0])
    return {"joins": joins, "same_producer_id": int(first.producer_id) == int(second.producer_id),
            "epoch_step": int(second.producer_epoch) - int(first.producer_epoch),
            "first_instance": fenced.get(0), "second_instance": current.get(0)}


@pytest.mark.requirement("KIP-447.INIT.001")
def test_init_is_keyed_by_transactional_id_not_by_group(differential):
    """KIP-447.INIT.001: same producer id, epoch + 1, the first instance fenced, whatever the groups."""
    obs = differential.run(init_per_transactional_id_scenario).target
    assert obs["joins"] == [0, 0, 0, 0], obs
    assert obs["same_producer_id"], "a second InitProducerId of the transactional id allocated a new producer id"
    assert obs["epoch_step"] == 1, f"the epoch must be bumped by one: {obs}"
    assert obs["first_instance"] in FENCING, f"the first instance was not fenced: {obs}"
    assert obs["second_instance"] == 0, obs
