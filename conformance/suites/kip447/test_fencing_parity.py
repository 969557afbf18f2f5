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
    CLASSIC,
    CONSUMER,
    ILLEGAL_GENERATION,
    STALE_MEMBER_EPOCH,
    UNKNOWN_MEMBER_ID,
    aged_member_txn,
    both_protocols,
    group_coordinator,
    join,
    protocol_scenario,
    require_txn_offset_commit_v3,
    sync,
)

TXN_PARTITION, PLAIN_PARTITION = 0, 1  # the two commits of one case never touch the same offset


def parity_scenario(target, ids, protocol) -> dict[str, Any]:
    """Member M joins (g1) and ages (g2; under the consumer protocol it gives up partition 1);
    each case is committed both ways with the same (generation, member id): OffsetCommit and
    TxnOffsetCommit, each on a partition of its own (the consumer protocol's stale case on
    the partition M gave up, where a stale epoch is refused)."""
    with wire.cluster_client(target) as cc:
        start = aged_member_txn(target, cc, ids, protocol)
        g, m, g1, revoked, txn = start.g, start.member, start.first_epoch, start.revoked, start.txn
        coord = m.coordinator
        stale_pair = (TXN_PARTITION, PLAIN_PARTITION) if protocol == CLASSIC else (revoked, revoked)
        cases = {"stale_generation": (g1, m.member_id, stale_pair),
                 "unknown_member": (m.epoch, m.member_id + "-x", (TXN_PARTITION, PLAIN_PARTITION)),
                 "current": (m.epoch, m.member_id, (TXN_PARTITION, PLAIN_PARTITION))}
        out = {}
        for n, (case, (generation, member_id, (txn_p, plain_p))) in enumerate(cases.items()):
            plain = wire.offset_commit(coord, g.group, g.topic, plain_p, 100 + n,
                                       generation=generation, member_id=member_id)
            _, txn_codes = txn.txn_offset_commit(g.group, g.topic, {txn_p: 200 + n},
                                                 generation=generation, member_id=member_id)
            out[case] = {"offset_commit": plain, "txn_offset_commit": txn_codes[txn_p]}
        end = txn.end(commit=True)
    return {"setup": m.errors + [start.add, int(m.epoch > g1)], "cases": out, "end": end}


# Kafka 4.4.0 answers a stale member epoch with STALE_MEMBER_EPOCH to OffsetCommit v9 and
# with ILLEGAL_GENERATION to TxnOffsetCommit (older transactional clients know no other
# code): under the consumer protocol both refuse, with different codes (DIV-84801).
STALE_CODES = {CLASSIC: {ILLEGAL_GENERATION}, CONSUMER: {ILLEGAL_GENERATION, STALE_MEMBER_EPOCH}}


@pytest.mark.requirement("KIP-447.FENCE.001")
@both_protocols("KIP-848.FENCE.001", "KIP-848.FENCE.002")
def test_txn_offset_commit_is_fenced_like_offset_commit(differential, group_protocol):
    """KIP-848.FENCE.001, KIP-848.FENCE.002 (consumer protocol) and KIP-447.FENCE.001: for each (generation, member id) both commits are refused or
    accepted alike; classic groups answer the same code, a KIP-848 group may answer a stale
    epoch with STALE_MEMBER_EPOCH (OffsetCommit) and ILLEGAL_GENERATION (TxnOffsetCommit)."""
    require_txn_offset_commit_v3(differential.target)
    obs = differential.run(protocol_scenario(parity_scenario, group_protocol), requirement="KIP-447.FENCE.001").target
    assert obs["setup"] == [0, 1], obs
    cases = obs["cases"]
    stale = cases["stale_generation"]
    assert stale["txn_offset_commit"] in STALE_CODES[group_protocol], cases
    assert stale["offset_commit"] in STALE_CODES[group_protocol], cases
    if group_protocol == CLASSIC:
        assert stale["txn_offset_commit"] == stale["offset_commit"], cases
    for case in ("unknown_member", "current"):
        codes = cases[case]
        assert codes["txn_offset_commit"] == codes["offset_commit"], (
            f"{case}: TxnOffsetCommit answered {codes['txn_offset_commit']}, OffsetCommit {codes['offset_commit']}")
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
