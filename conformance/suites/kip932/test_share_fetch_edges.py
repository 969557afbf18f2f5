"""KIP-932 ShareFetch edges on the wire: topics addressed by id (an unknown id refused per
partition), MaxWaitMs honoured both ways, leader-only share-partitions (a follower answers
NOT_LEADER_OR_FOLLOWER naming the leader), an acknowledge-only partition forgotten in the
same request, and piggy-backed acknowledgements applied before the fetch across partitions.

Kafka: SharePartitionManager / KafkaApis.handleShareFetchRequest (acknowledge first, then
fetch; unknown topic ids answered UNKNOWN_TOPIC_ID), DelayedShareFetch (MaxWaitMs).
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from clients import share, wire
from clients.share import (
    ACCEPT, RELEASE, E, SharePartitionUnderTest, ShareSession, acquired, delivery_counts, partition_data,
    produce_values,
)
from conformance.suites import require_nodes

DEADLINE_S = 20.0


@pytest.fixture
def sp(target, unique):
    with wire.cluster_client(target) as cc:
        yield SharePartitionUnderTest(target, cc, unique.topic(), unique.group())


def counts_for(resp, tid: uuid.UUID, p: int = 0) -> dict[int, int]:
    pd = partition_data(resp, tid, p)
    if pd is None:
        return {}
    return {o: int(a.delivery_count) for a in pd.acquired_records
            for o in range(int(a.first_offset), int(a.last_offset) + 1)}


@pytest.mark.requirement("KIP-932.FETCH.010")
def test_unknown_topic_id_is_refused_per_partition(sp):
    """A ShareFetch naming the group's partition and a random topic id: the random one
    answers UNKNOWN_TOPIC_ID (or UNKNOWN_TOPIC_OR_PARTITION) in its own entry, the request
    as a whole succeeds and the real partition's records are delivered."""
    sp.open()
    a = sp.primed_member()
    ghost = (uuid.uuid4(), 0)
    base = sp.produce([b"v%d" % i for i in range(3)])
    got: dict[int, int] = {}
    ghost_codes: set[int] = set()
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < 3 and time.monotonic() < deadline:
        resp = a.fetch([sp.key(), ghost], max_wait_ms=300)
        assert resp.error_code == E.none, resp
        pd = partition_data(resp, ghost[0])
        assert pd is not None, f"no entry for the unknown topic id: {resp}"
        ghost_codes.add(int(pd.error_code))
        assert not pd.acquired_records
        got.update(counts_for(resp, sp.tid))
    assert got == {o: 1 for o in range(base, base + 3)}
    assert ghost_codes <= {E.unknown_topic_id, E.unknown_topic_or_partition} and ghost_codes, ghost_codes


@pytest.mark.requirement("KIP-932.FETCH.011")
def test_max_wait_bounds_an_empty_fetch_and_a_produce_ends_it(sp, target):
    """Nothing acquirable and MaxWaitMs 1500: the answer is empty and comes after about
    1.5 s (not at once). MaxWaitMs 15000 with a produce 0.5 s into the wait: the answer
    comes well before 15 s and holds the record."""
    sp.open()
    a = sp.primed_member()
    t0 = time.monotonic()
    resp = a.fetch([sp.key()], max_wait_ms=1500)
    waited = time.monotonic() - t0
    assert resp.error_code == E.none and acquired(resp) == []
    assert 1.2 <= waited < 1.5 + DEADLINE_S, f"an empty ShareFetch with MaxWaitMs 1500 answered after {waited:.2f} s"

    out: dict[str, object] = {}

    def fetch_long() -> None:
        started = time.monotonic()
        out["resp"] = a.fetch([sp.key()], max_wait_ms=15_000, timeout=40)
        out["waited"] = time.monotonic() - started

    thread = threading.Thread(target=fetch_long, daemon=True)
    thread.start()
    time.sleep(0.5)
    with wire.cluster_client(target) as other:  # its own connection: the session's is busy
        base = produce_values(other, sp.topic, [b"late"])
    thread.join(40)
    assert not thread.is_alive(), "the long ShareFetch never answered"
    assert out["resp"].error_code == E.none
    assert delivery_counts(out["resp"]) == {base: 1}
    assert out["waited"] < 10.0, f"a produce during MaxWaitMs 15000 was answered only after {out['waited']:.1f} s"


@pytest.mark.requirement("KIP-932.FETCH.009")
def test_share_fetch_to_a_follower_names_the_leader(target, unique):
    """Share-partitions live only on the partition leader: a ShareFetch for the partition
    sent to a follower answers NOT_LEADER_OR_FOLLOWER with CurrentLeader = the leader and
    the leader's endpoint in NodeEndpoints, and acquires nothing."""
    require_nodes(target, 2)
    with wire.cluster_client(target) as cc:
        sp = SharePartitionUnderTest(target, cc, unique.topic(), unique.group())
        code = wire.create_topic(cc, sp.topic, 1, replication=min(3, len(target.node_ids)))
        assert code == E.none, E(code)
        sp.tid = sp.wait_topic_id()
        pm = next(t for t in cc.refresh([sp.topic]).topics if t.name == sp.topic).partitions[0]
        leader = int(pm.leader_id)
        followers = [int(n) for n in pm.replica_nodes if int(n) != leader]
        assert followers, f"a replicated topic has no follower: {pm}"
        sp.produce([b"x%d" % i for i in range(3)])
        member = sp.member().member  # joined (coordinator looked up again while Kafka moves it)
        follower = ShareSession(cc.node(followers[0]), sp.group, member)
        got = follower.fetch([sp.key()], max_wait_ms=200)
        assert got.error_code == E.none, got
        pd = partition_data(got, sp.tid)
        assert pd is not None and int(pd.error_code) == E.not_leader_or_follower, pd
        assert not pd.acquired_records
        assert int(pd.current_leader.leader_id) == leader, pd.current_leader
        host, port = cc.nodes[leader]
        endpoints = {int(n.node_id): (n.host, int(n.port)) for n in got.node_endpoints}
        assert endpoints.get(leader) == (host, port), endpoints


@pytest.mark.requirement("KIP-932.FETCH.005", "KIP-932.FETCH.004")
def test_acknowledge_only_partition_forgotten_in_the_same_request(sp):
    """A holds 0..4. One ShareFetch carries ACCEPT 0..4 for the partition and lists the
    same partition as forgotten: the acknowledgement is applied (error 0; a second member
    never gets 0..4, only the 5 records produced next, with count 1) and A's later
    fetches without partitions no longer include it."""
    sp.open()
    a = sp.primed_member()
    base = sp.produce([b"v%d" % i for i in range(5)])
    assert a.fetch_until([sp.key()], 5) == {o: 1 for o in range(base, base + 5)}
    resp = a.fetch([sp.key()], acks={sp.key(): [(base, base + 4, [ACCEPT])]}, forgotten=[sp.key()])
    assert resp.error_code == E.none, resp
    pd = partition_data(resp, sp.tid)
    assert pd is not None and int(pd.acknowledge_error_code) == E.none, pd
    assert counts_for(resp, sp.tid) == {}
    later = sp.produce([b"w%d" % i for i in range(5)])
    assert counts_for(a.fetch([], max_wait_ms=500), sp.tid) == {}
    b = sp.member()
    assert b.fetch_until([sp.key()], 5) == {o: 1 for o in range(later, later + 5)}


@pytest.mark.requirement("KIP-932.FETCH.004", "KIP-932.STATE.006")
def test_piggybacked_release_on_two_partitions_is_reacquired_in_the_same_response(target, unique):
    """Issue 14's acknowledge-before-fetch order over two partitions of one leader: A holds
    3 records of each; one ShareFetch releasing all six must acquire released records again
    in its own response (count 2). Fetching before applying the releases would find nothing
    acquirable. Kafka may answer as soon as one partition has data (DelayedShareFetch returns
    what it could acquire), so a partition absent from that response must come back on the
    next fetches, still at count 2."""
    with wire.cluster_client(target) as cc:
        sp = SharePartitionUnderTest(target, cc, unique.topic(), unique.group(), partitions=6).open()
        parts = share.two_partitions_of_one_leader(sp)
        keys = [sp.key(p) for p in parts]
        a = sp.member(parts[0])
        assert acquired(a.fetch(keys, max_wait_ms=200)) == []
        bases = {p: sp.produce([b"p%d-%d" % (p, i) for i in range(3)], p) for p in parts}
        held: dict[int, dict[int, int]] = {p: {} for p in parts}
        deadline = time.monotonic() + DEADLINE_S
        while sum(map(len, held.values())) < 6 and time.monotonic() < deadline:
            resp = a.fetch(keys, max_wait_ms=300)
            for p in parts:
                held[p].update(counts_for(resp, sp.tid, p))
        assert held == {p: {o: 1 for o in range(bases[p], bases[p] + 3)} for p in parts}
        acks = {sp.key(p): [(bases[p], bases[p] + 2, [RELEASE])] for p in parts}
        resp = a.fetch(keys, acks=acks, max_wait_ms=3000)
        assert resp.error_code == E.none, resp
        for p in parts:
            assert int(partition_data(resp, sp.tid, p).acknowledge_error_code) == E.none
        again = {p: counts_for(resp, sp.tid, p) for p in parts}
        assert any(again.values()), f"the releasing ShareFetch re-acquired nothing: {again}"
        while not all(again.values()) and time.monotonic() < deadline:
            later = a.fetch(keys, max_wait_ms=300)
            for p in parts:
                again[p] = again[p] or counts_for(later, sp.tid, p)
        assert again == {p: {o: 2 for o in range(bases[p], bases[p] + 3)} for p in parts}, again
