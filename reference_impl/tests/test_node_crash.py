"""A node kill on the reference is a crash (ReferenceState.on_node_crash): the caches the node
owned are lost and rebuilt from the persisted records; an isolation (on_node_down) keeps them.

Each test seeds a mismatch between a cache and its records (a value no record wrote, or
share acquisitions, which are never persisted): after a crash of the owner it is gone and
the cache equals a replay of the records; after an isolation, or on a node that did not
crash, the mismatch is still there.
"""

from __future__ import annotations

import dataclasses

from kio.schema.errors import ErrorCode

from reference_impl.model.broker_state import BrokerConfig, NodeEndpoint, ReferenceState
from reference_impl.model import seeded_bugs as bugs
from reference_impl.model.clock import ManualClock
from reference_impl.model.seeded_bugs import NO_BUGS, SeededBugs
from reference_impl.model.share_coordinator import ShareCoordinator
from reference_impl.model.share_group import ShareGroupCoordinator
from reference_impl.model.share_partition import RecordState
from reference_impl.model.share_partition_config import SharePartitionConfig
from reference_impl.model.share_state_records import SharePartitionKey
from reference_impl.model.topics import CreatableTopicSpec
from reference_impl.model.transaction_log import TransactionLog
from reference_impl.protocol import records as r
from reference_impl.protocol.records import NewRecord

TOPIC, NOW, ACCEPT, RELEASE = "t", 1_700_000_000_000, 1, 2
A, Q = RecordState.AVAILABLE, RecordState.ACQUIRED


def cluster(seeded_bugs: SeededBugs = NO_BUGS) -> ReferenceState:
    config = BrokerConfig(share_partition=SharePartitionConfig(auto_offset_reset="earliest", seeded_bugs=seeded_bugs))
    state = ReferenceState([NodeEndpoint(i, "127.0.0.1", 9000 + i) for i in (1, 2, 3)], ManualClock(NOW), config)
    state.topics.create(CreatableTopicSpec(TOPIC, num_partitions=1))
    part = state.topics.partition(TOPIC, 0)
    part.log.append_from_client(r.build_batch([NewRecord(value=b"v", timestamp=NOW) for _ in range(10)]), now_ms=NOW)
    return state


def topic_id(state: ReferenceState):
    return state.topics.get(TOPIC).topic_id


def acquire(state: ReferenceState, group: str, member: str) -> dict[int, int]:
    """offset -> delivery count of what `member` acquires on partition 0."""
    part = state.topics.partition(TOPIC, 0)
    fetched = state.share_partitions.acquire(group, member, topic_id(state), 0, part.log, leader_epoch=part.leader_epoch,
                                             max_records=100, max_bytes=1 << 20, now_ms=NOW)
    return {o: a.delivery_count for a in fetched.acquired for o in range(a.first_offset, a.last_offset + 1)}


def interleaved(state: ReferenceState, group: str = "g") -> None:
    """0..1 accepted (SPSO 2), 2..3 released and acquired again (count 2), 4..9 acquired."""
    assert acquire(state, group, "m") == {o: 1 for o in range(10)}
    ack = state.share_partitions.acknowledge(group, "m", topic_id(state), 0, [(0, 1, [ACCEPT]), (2, 3, [RELEASE])], NOW)
    assert ack.ok
    assert acquire(state, group, "m") == {2: 2, 3: 2}


def test_leader_crash_loses_acquisitions_and_reloads_the_persisted_state() -> None:
    state = cluster()
    interleaved(state)
    leader = state.topics.partition(TOPIC, 0).leader
    persisted = state.share_partitions.persisted("g", topic_id(state), 0)
    state.on_node_crash(leader)
    # What the next leader sees is the persisted state only: SPSO 2, 2..3 Available with the
    # count written at their release, 4..9 never acknowledged; nothing waits for a lock.
    assert state.share_partitions.get("g", topic_id(state), 0) is None
    assert acquire(state, "g", "other") == {2: 2, 3: 2, **{o: 1 for o in range(4, 10)}}
    sp = state.share_partitions.get("g", topic_id(state), 0)
    assert sp.spso == persisted.start_offset == 2
    assert state.share_partitions.persisted("g", topic_id(state), 0).start_offset == 2


def test_isolated_leader_keeps_its_acquisitions() -> None:
    state = cluster()
    interleaved(state)
    sp = state.share_partitions.get("g", topic_id(state), 0)
    state.on_node_down(state.topics.partition(TOPIC, 0).leader)
    assert state.share_partitions.get("g", topic_id(state), 0) is sp
    assert [sp.state_of(o) for o in range(2, 10)] == [Q] * 8
    assert acquire(state, "g", "other") == {}


def test_share_coordinator_crash_replays_its_keys_only() -> None:
    state = cluster()
    for group in ("g0", "g1", "g2", "g3", "g4", "g5"):
        interleaved(state, group)
    sc = state.share_coordinator
    keys = [SharePartitionKey(g, topic_id(state), 0) for g in ("g0", "g1", "g2", "g3", "g4", "g5")]
    owner = {k: state.coordinator_for(k.coordinator_key) for k in keys}
    crashed = owner[keys[0]]
    assert set(owner.values()) - {crashed}, "the keys all live on one node; pick other group ids"
    for k in keys:  # seed a value no record wrote
        sc._state[k] = dataclasses.replace(sc.state(k), start_offset=99)
    state.on_node_crash(crashed)
    replayed = ShareCoordinator.rebuild(sc)  # the whole log, from its start
    for k in keys:
        if owner[k] == crashed:
            assert sc.state(k) == replayed.state(k) and sc.state(k).start_offset == 2, k
        else:
            assert sc.state(k).start_offset == 99, f"{k}: a node that did not crash lost its memory"


def test_share_group_coordinator_crash_rebuilds_from_its_records() -> None:
    state = cluster()
    groups = [f"sg{i}" for i in range(8)]
    for g in groups:
        hb = state.share_groups.heartbeat(g, f"member-{g}", 0, subscribed_topic_names=[TOPIC], now_ms=NOW)
        assert hb.error == ErrorCode.none, hb
    crashed = state.coordinator_for(groups[0])
    for g in groups:
        state.share_groups.store.groups[g].group_epoch = 77  # seeded: no record says 77
    sgc = state.share_groups
    replayed = ShareGroupCoordinator.from_records(sgc.log, sgc.node_ids, sgc.clock, sgc.config, sgc.topics_view)
    owned = {g for g in groups if state.coordinator_for(g) == crashed}
    assert owned != set(groups), "every group on one node; pick other group ids"
    state.on_node_crash(crashed)
    for g in groups:
        got = sgc.store.groups[g]
        if g in owned:
            assert got.snapshot() == replayed.store.groups[g].snapshot() and got.group_epoch != 77, g
            assert set(got.members) and all(k in sgc._sessions for k in ((g, m) for m in got.members))
        else:
            assert got.group_epoch == 77, f"{g}: a node that did not crash lost its memory"


def test_transaction_coordinator_crash_replays_the_transaction_log() -> None:
    state = cluster()
    tc = state.transactions
    tids = [f"tid-{i}" for i in range(12)]
    for tid in tids:
        init = tc.init_producer_id(tid, 60_000)
        assert tc.add_partitions(tid, init.producer_id, init.producer_epoch, [(TOPIC, 0)]) == ErrorCode.none
    crashed = state.coordinator_for(tids[0])
    for tid in tids:
        tc._cache[tid] = dataclasses.replace(tc.metadata(tid), transaction_timeout_ms=1)  # seeded
    state.on_node_crash(crashed)
    persisted = TransactionLog(list(tc.log)).latest()
    for tid in tids:
        if state.preferred_coordinator(tid) == crashed:
            assert tc.metadata(tid) == persisted[tid], tid
        else:
            assert tc.metadata(tid).transaction_timeout_ms == 1, f"{tid}: a node that did not crash lost its memory"


def test_seeded_leader_move_bug_forgets_the_persisted_state_on_crash_and_on_isolation() -> None:
    """The seeded bug ``share-leader-move-forgets-state`` fires whichever way the leader goes
    down: the next leader starts from share.auto.offset.reset (everything again, count 1)."""
    for go_down in (ReferenceState.on_node_crash, ReferenceState.on_node_down):
        state = cluster(SeededBugs(frozenset({bugs.SHARE_LEADER_MOVE_FORGETS_STATE})))
        interleaved(state)
        go_down(state, state.topics.partition(TOPIC, 0).leader)
        assert acquire(state, "g", "other") == {o: 1 for o in range(10)}, go_down.__name__
