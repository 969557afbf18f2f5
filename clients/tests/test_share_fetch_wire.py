"""ShareFetch (78) / ShareAcknowledge (79) over the wire against the reference cluster.

The raw client drives share sessions (the epoch table and each of its errors),
acquisition with delivery counts, ACCEPT / RELEASE / REJECT, piggy-backed
acknowledgements, lock expiry, acknowledgements by a member that does not hold the
records, and the release of acquired records when a session or connection closes.

The helpers take a `ClusterClient` (plus the reference state for group configs, which
the reference cannot yet alter over the wire), so the same raw sequences run against a
real Kafka; they were checked against kafka-native 4.4.0, where every error code and
acquired range asserted here is the same. A member joins with ShareGroupHeartbeat when
the broker offers it; otherwise it just uses a fresh member id.
"""

from __future__ import annotations

import datetime
import time
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from clients import share
from clients.share import ack_codes, acquired, nested, new_member_id, partition_data
from reference_impl.client.raw_client import ClusterClient, RawClient
from reference_impl.handlers.share_fetch import share_manager
from reference_impl.protocol import records as r
from reference_impl.server.broker_server import ThreadedReferenceCluster

ACCEPT, RELEASE, REJECT, RENEW = 1, 2, 3, 4
E = ErrorCode


# -- helpers (target independent) -----------------------------------------------------------


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(client: ClusterClient, name: str, partitions: int = 1) -> uuid.UUID:
    resp = client.bootstrap.request(
        19, 7,
        topics=(nested(19, 7, "CreatableTopic", name=name, num_partitions=partitions, replication_factor=1,
                       assignments=(), configs=()),),
        timeout=datetime.timedelta(seconds=10), validate_only=False,
    )
    assert resp.topics[0].error_code == E.none, resp
    deadline = time.monotonic() + 15
    while True:
        md = client.refresh([name])
        t = next((t for t in md.topics if t.name == name), None)
        if t is not None and t.error_code == 0 and all(p.leader_id >= 0 for p in t.partitions) and t.partitions:
            return t.topic_id
        if time.monotonic() > deadline:
            raise AssertionError(f"topic {name} not ready: {md}")
        time.sleep(0.1)


produce = share.produce_values


def leader_node(client: ClusterClient, topic: str, partition: int = 0) -> RawClient:
    return client.leader_for(topic, partition)


def set_group_configs(client: ClusterClient, group: str, configs: dict[str, str], state: Any = None) -> None:
    """Group configs over the wire; with `state`, straight into the reference model, for
    values below the broker's minimum (a 300 ms lock) that the wire rightly refuses."""
    if state is None:
        share.set_group_configs(client, group, configs)
    else:
        share_manager(state).set_group_config(group, **{k.replace(".", "_"): v for k, v in configs.items()})


def join_share_group(client: ClusterClient, group: str, topics: list[str], wait_s: float = 30.0) -> str:
    """A member id for `group`: joined when the cluster offers ShareGroupHeartbeat, else a new id."""
    if client.bootstrap.negotiate(76, 1) is None:
        return new_member_id()
    return share.join_share_group(client, group, topics, wait_s)[0]


def share_fetch(node: RawClient, group: str, member: str, epoch: int, parts=(), *, version: int = 2, **kw):
    return share.share_fetch(node, group, member, epoch, parts, version=version, **kw)


def share_ack(node: RawClient, group: str, member: str, epoch: int, acks, *, version: int = 2):
    return share.share_ack(node, group, member, epoch, acks, version=version)


def fetch_until(node: RawClient, group: str, member: str, epoch: int, parts, want: int, wait_s: float = 10.0, **kw):
    return share.fetch_until(node, group, member, epoch, parts, want, wait_s, version=kw.pop("version", 2), **kw)


# -- fixtures (cluster and client: clients/tests/conftest.py) -------------------------------------


@pytest.fixture()
def setup(cluster, client):
    """A topic with 10 records, a group reading from the earliest offset, one member."""
    topic, group = unique("sf"), unique("sg")
    tid = create_topic(client, topic)
    set_group_configs(client, group, {"share.auto.offset.reset": "earliest"}, cluster.cluster.state)
    member = join_share_group(client, group, [topic])
    produce(client, topic, [f"v{i}".encode() for i in range(10)])
    return topic, tid, group, member


# -- the tests --------------------------------------------------------------------------------


def test_versions_advertised(client):
    versions = client.bootstrap.api_versions()
    assert versions[78] == (1, 2)
    assert versions[79] == (1, 2)


def test_fetch_accept_release_reject(cluster, client, setup):
    topic, tid, group, member = setup
    node = leader_node(client, topic)
    resp = share_fetch(node, group, member, 0, [(tid, 0)])
    assert resp.error_code == E.none
    assert acquired(resp) == [(0, 9, 1)]
    pd = partition_data(resp, tid)
    assert pd.error_code == E.none and pd.acknowledge_error_code == 0
    assert [rec.value for rec in r.iter_records(pd.records)] == [f"v{i}".encode() for i in range(10)]
    assert resp.acquisition_lock_timeout.total_seconds() * 1000 == 30_000

    ack = share_ack(node, group, member, 1, {(tid, 0): [(0, 2, [ACCEPT]), (3, 5, [RELEASE]), (6, 7, [REJECT]),
                                                        (8, 9, [ACCEPT, RELEASE])]})
    assert ack.error_code == E.none and ack_codes(ack) == {0: 0}

    resp = share_fetch(node, group, member, 2, [(tid, 0)])
    assert acquired(resp) == [(3, 5, 2), (9, 9, 2)]
    # Piggy-backed: accept the redelivered records in the next fetch.
    resp = share_fetch(node, group, member, 3, [], acks={(tid, 0): [(3, 5, [ACCEPT]), (9, 9, [ACCEPT])]})
    assert resp.error_code == E.none
    assert partition_data(resp, tid).acknowledge_error_code == 0
    assert acquired(resp) == []  # rejected 6-7 never come back
    sp = share_manager(cluster.cluster.state).get(group, tid, 0)
    assert sp.spso == 10
    persisted = share_manager(cluster.cluster.state).persisted(group, tid, 0)
    assert persisted is not None and persisted.start_offset == 10


def test_acknowledge_errors_are_per_partition_and_atomic(cluster, client, setup):
    topic, tid, group, member = setup
    node = leader_node(client, topic)
    assert acquired(share_fetch(node, group, member, 0, [(tid, 0)])) == [(0, 9, 1)]
    # 0-2 fine, 20-21 never acquired: INVALID_REQUEST and nothing of the request applied.
    ack = share_ack(node, group, member, 1, {(tid, 0): [(0, 2, [ACCEPT]), (20, 21, [ACCEPT])]})
    assert ack_codes(ack) == {0: E.invalid_request}
    # Not ascending: INVALID_REQUEST.
    ack = share_ack(node, group, member, 2, {(tid, 0): [(5, 6, [ACCEPT]), (0, 2, [ACCEPT])]})
    assert ack_codes(ack) == {0: E.invalid_request}
    # Unknown type.
    ack = share_ack(node, group, member, 3, {(tid, 0): [(0, 2, [7])]})
    assert ack_codes(ack) == {0: E.invalid_request}
    # RENEW is off by default (a 4.1-like broker).
    ack = share_ack(node, group, member, 4, {(tid, 0): [(0, 2, [RENEW])]})
    assert ack_codes(ack) == {0: E.invalid_request}
    # Everything is still acquired: accept all of it.
    ack = share_ack(node, group, member, 5, {(tid, 0): [(0, 9, [ACCEPT])]})
    assert ack_codes(ack) == {0: 0}
    # Accepting again: no longer acquired.
    ack = share_ack(node, group, member, 6, {(tid, 0): [(0, 9, [ACCEPT])]})
    assert ack_codes(ack) == {0: 0}  # below the SPSO now: ignored
    unknown = uuid.uuid4()
    ack = share_ack(node, group, member, 7, {(unknown, 0): [(0, 0, [ACCEPT])]})
    assert ack_codes(ack) == {0: E.unknown_topic_id}


def test_other_member_cannot_acknowledge(client, setup):
    topic, tid, group, member = setup
    other = join_share_group(client, group, [topic])
    node = leader_node(client, topic)
    assert acquired(share_fetch(node, group, member, 0, [(tid, 0)])) == [(0, 9, 1)]
    resp = share_fetch(node, group, other, 0, [(tid, 0)])
    assert acquired(resp) == []
    ack = share_ack(node, group, other, 1, {(tid, 0): [(0, 4, [ACCEPT])]})
    assert ack_codes(ack) == {0: E.invalid_record_state}
    ack = share_ack(node, group, member, 1, {(tid, 0): [(0, 4, [ACCEPT])]})
    assert ack_codes(ack) == {0: 0}


def test_lock_expiry_returns_records(cluster, client, setup):
    topic, tid, group, member = setup
    set_group_configs(client, group, {"share.record.lock.duration.ms": "300"}, cluster.cluster.state)
    node = leader_node(client, topic)
    resp = share_fetch(node, group, member, 0, [(tid, 0)])
    assert acquired(resp) == [(0, 9, 1)]
    assert resp.acquisition_lock_timeout.total_seconds() * 1000 == 300
    time.sleep(0.5)
    # Too late to acknowledge: the lock expired.
    ack = share_ack(node, group, member, 1, {(tid, 0): [(0, 9, [ACCEPT])]})
    assert ack_codes(ack) == {0: E.invalid_record_state}
    got, _ = fetch_until(node, group, member, 2, [(tid, 0)], want=10)
    assert got == [(0, 9, 2)]
    persisted = share_manager(cluster.cluster.state).persisted(group, tid, 0)
    assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in persisted.state_batches] \
        == [(0, 9, 0, 1)]


def test_max_wait_returns_when_records_arrive(cluster, client, setup):
    topic, tid, group, member = setup
    node = leader_node(client, topic)
    assert acquired(share_fetch(node, group, member, 0, [(tid, 0)])) == [(0, 9, 1)]
    t0 = time.monotonic()
    resp = share_fetch(node, group, member, 1, [(tid, 0)], max_wait_ms=400)
    assert acquired(resp) == [] and time.monotonic() - t0 >= 0.35
    results = {}

    def waiter():
        with RawClient(*client.nodes[int(leader_node_id(client, topic))]) as n2:
            results["resp"] = share_fetch(n2, group, member, 2, [(tid, 0)], max_wait_ms=5000)

    import threading

    th = threading.Thread(target=waiter)
    t0 = time.monotonic()
    th.start()
    time.sleep(0.3)
    produce(client, topic, [b"late"])
    th.join(10)
    assert acquired(results["resp"]) == [(10, 10, 1)]
    assert time.monotonic() - t0 < 4


def leader_node_id(client: ClusterClient, topic: str, partition: int = 0) -> int:
    md = client.refresh([topic])
    t = next(t for t in md.topics if t.name == topic)
    return int(next(p for p in t.partitions if p.partition_index == partition).leader_id)


def test_epoch_table(client, setup):
    topic, tid, group, member = setup
    node = leader_node(client, topic)
    parts = [(tid, 0)]
    # ShareFetch 1..MAX without a session.
    assert share_fetch(node, group, member, 1, parts).error_code == E.share_session_not_found
    # ShareFetch -1 without a session.
    assert share_fetch(node, group, member, -1).error_code == E.share_session_not_found
    # ShareAcknowledge 0: never allowed.
    assert share_ack(node, group, member, 0, {}).error_code == E.invalid_share_session_epoch
    # ShareAcknowledge 1..MAX / -1 without a session.
    assert share_ack(node, group, member, 1, {}).error_code == E.share_session_not_found
    assert share_ack(node, group, member, -1, {}).error_code == E.share_session_not_found
    # ShareFetch 0 with acknowledgements.
    resp = share_fetch(node, group, member, 0, parts, acks={(tid, 0): [(0, 0, [ACCEPT])]})
    assert resp.error_code == E.invalid_request
    # ShareFetch 0 opens (epoch 1 next).
    resp = share_fetch(node, group, member, 0, parts)
    assert resp.error_code == E.none and acquired(resp) == [(0, 9, 1)]
    # Wrong epochs.
    assert share_fetch(node, group, member, 5, parts).error_code == E.invalid_share_session_epoch
    assert share_ack(node, group, member, 2, {}).error_code == E.invalid_share_session_epoch
    # Right epochs: fetch 1, ack 2, fetch 3.
    assert share_fetch(node, group, member, 1, parts).error_code == E.none
    assert share_ack(node, group, member, 2, {(tid, 0): [(0, 0, [ACCEPT])]}).error_code == E.none
    assert share_fetch(node, group, member, 3, parts).error_code == E.none
    # ShareFetch -1 with acknowledgements closes the session and releases 1-9.
    resp = share_fetch(node, group, member, -1, acks={(tid, 0): [(1, 1, [ACCEPT])]})
    assert resp.error_code == E.none and partition_data(resp, tid).acknowledge_error_code == 0
    assert acquired(resp) == []
    assert share_fetch(node, group, member, 4, parts).error_code == E.share_session_not_found
    # Reopen: 2-9 are back; the release on close kept their delivery count (Kafka 4.4.0).
    resp = share_fetch(node, group, member, 0, parts)
    assert acquired(resp) == [(2, 9, 2)]
    # ShareAcknowledge -1 closes it too (no epoch check), releasing what is left.
    ack = share_ack(node, group, member, -1, {(tid, 0): [(2, 2, [ACCEPT])]})
    assert ack.error_code == E.none and ack_codes(ack) == {0: 0}
    assert share_ack(node, group, member, 1, {}).error_code == E.share_session_not_found
    resp = share_fetch(node, group, member, 0, parts)
    assert acquired(resp) == [(3, 9, 3)]
    # Reopening an open session (epoch 0 again) only replaces the session: the records stay
    # acquired by the member (Kafka), who can still acknowledge them.
    resp = share_fetch(node, group, member, 0, parts)
    assert resp.error_code == E.none and acquired(resp) == []
    assert ack_codes(share_ack(node, group, member, 1, {(tid, 0): [(3, 3, [ACCEPT])]})) == {0: 0}
    # ShareFetch -1 naming partitions to fetch or forget: accepted, nothing fetched, closed.
    resp = share_fetch(node, group, member, -1, parts, forgotten=parts)
    assert resp.error_code == E.none and acquired(resp) == []
    assert share_fetch(node, group, member, 3, parts).error_code == E.share_session_not_found
    resp = share_fetch(node, group, member, 0, parts)
    assert acquired(resp) == [(4, 9, 4)]
    # An empty member id.
    assert share_fetch(node, group, "", 0, parts).error_code == E.invalid_request


def test_membership_is_checked_only_when_configured(cluster, client, setup):
    topic, tid, group, member = setup
    node = leader_node(client, topic)
    stranger = new_member_id()
    # Kafka's share-partition leader does not check membership.
    resp = share_fetch(node, group, stranger, 0, [(tid, 0)])
    assert resp.error_code == E.none and acquired(resp) == [(0, 9, 1)]
    state = cluster.cluster.state
    if getattr(state, "share_groups", None) is None:
        return
    mgr = share_manager(state)
    mgr.require_group_membership = True
    try:
        assert share_fetch(node, group, new_member_id(), 0, [(tid, 0)]).error_code == E.unknown_member_id
        assert share_ack(node, group, stranger, 1, {}).error_code == E.unknown_member_id
        assert share_fetch(node, group, member, 0, [(tid, 0)]).error_code == E.none
    finally:
        mgr.require_group_membership = False


def test_disconnect_releases(client, setup):
    topic, tid, group, member = setup
    other = join_share_group(client, group, [topic])
    leader = leader_node_id(client, topic)
    conn = RawClient(*client.nodes[leader])
    assert acquired(share_fetch(conn, group, member, 0, [(tid, 0)])) == [(0, 9, 1)]
    node = client.node(leader)
    assert acquired(share_fetch(node, group, other, 0, [(tid, 0)])) == []
    conn.close()
    got, _ = fetch_until(node, group, other, 1, [(tid, 0)], want=10)
    assert got == [(0, 9, 2)]  # released records keep their delivery count (Kafka 4.4.0)


def test_unknown_topic_and_not_leader(cluster, client, setup):
    topic, tid, group, member = setup
    unknown = uuid.uuid4()
    node = leader_node(client, topic)
    resp = share_fetch(node, group, member, 0, [(unknown, 0), (tid, 0)])
    assert resp.error_code == E.none
    assert partition_data(resp, unknown).error_code == E.unknown_topic_id
    assert acquired(resp) == [(0, 9, 1)]
    if len(cluster.cluster.state.nodes) == 1:
        return
    leader = leader_node_id(client, topic)
    follower = next(n for n in client.nodes if n != leader)
    resp = share_fetch(client.node(follower), group, member, 0, [(tid, 0)])
    pd = partition_data(resp, tid)
    assert pd.error_code == E.not_leader_or_follower
    assert pd.current_leader.leader_id == leader
    assert [int(n.node_id) for n in resp.node_endpoints] == [leader]


def test_session_limit(cluster, client, setup):
    topic, tid, group, member = setup
    leader = leader_node_id(client, topic)
    node = client.node(leader)
    cache = share_manager(cluster.cluster.state).sessions(leader)
    before = cache.max_entries
    cache.max_entries = len(cache)
    try:
        assert share_fetch(node, group, member, 0, [(tid, 0)]).error_code == E.share_session_limit_reached
    finally:
        cache.max_entries = before
    assert share_fetch(node, group, member, 0, [(tid, 0)]).error_code == E.none


def test_renew_with_v2_when_enabled(cluster, client, setup):
    topic, tid, group, member = setup
    set_group_configs(client, group, {"share.renew.acknowledge.enable": "true",
                                      "share.record.lock.duration.ms": "400"}, cluster.cluster.state)
    node = leader_node(client, topic)
    assert acquired(share_fetch(node, group, member, 0, [(tid, 0)])) == [(0, 9, 1)]
    for epoch in (1, 2, 3):
        time.sleep(0.2)
        ack = share_ack(node, group, member, epoch, {(tid, 0): [(0, 9, [RENEW])]})
        assert ack_codes(ack) == {0: 0}
    # v1 cannot carry RENEW.
    assert ack_codes(share_ack(node, group, member, 4, {(tid, 0): [(0, 9, [RENEW])]}, version=1)) == {0: E.invalid_request}
    assert ack_codes(share_ack(node, group, member, 5, {(tid, 0): [(0, 9, [ACCEPT])]})) == {0: 0}


@pytest.fixture(scope="module")
def single_node():
    """Rotation is per session, i.e. per leader: both partitions need the same leader."""
    with ThreadedReferenceCluster(brokers=1) as c, ClusterClient(c.bootstrap_servers) as cc:
        yield c, cc


def test_fair_rotation_across_partitions(single_node):
    cluster, client = single_node
    topic, group = unique("rot"), unique("sg")
    tid = create_topic(client, topic, partitions=2)
    set_group_configs(client, group, {"share.auto.offset.reset": "earliest"}, cluster.cluster.state)
    member = join_share_group(client, group, [topic])
    assert leader_node_id(client, topic, 0) == leader_node_id(client, topic, 1)
    for p in (0, 1):
        for i in range(3):
            produce(client, topic, [f"p{p}-{i}".encode()], partition=p)
    node = leader_node(client, topic)
    parts = [(tid, 0), (tid, 1)]
    first_served = []
    for epoch in range(0, 4):
        resp = share_fetch(node, group, member, epoch, parts, max_records=1)
        got = [(p.partition_index, int(a.first_offset)) for t in resp.responses for p in t.partitions for a in p.acquired_records]
        assert len(got) == 1
        first_served.append(got[0][0])
    assert sorted(first_served) == [0, 0, 1, 1]
