"""KIP-932 share-group state RPCs on the wire (the share coordinator's side of the persister):
ReadShareGroupStateSummary against ReadShareGroupState, state and leader epoch fencing of
WriteShareGroupState, what is persisted (never Acquired records), initialisation of every
subscribed partition (repeatable), deletion with the topic, and the per-partition errors.

The RPCs are inter-broker (CLUSTER_ACTION): targets without an authorizer answer them for
any client, which is how the suite reaches them; a target that refuses them, or does not
advertise them, is "not supported". Kafka: ShareCoordinatorShard (read/write/initialize,
epoch checks), SharePartition.writeShareGroupState (persisted batches).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import pytest

from clients import confluent, share, wire
from clients.errors import COORDINATOR_RETRIABLE
from clients.share import (
    ACCEPT, ACKNOWLEDGED, ARCHIVED, AVAILABLE, REJECT, RELEASE,
    SHARE_COORDINATOR_KEY_TYPE, E, SharePartitionUnderTest, ack_codes, effective_spso, kafka_uuid, leader_epoch,
    nested, persisted_states,
)
from conformance.suites.kip932.test_membership import Member, beat_until, coordinator
from conformance.suites.kip932.test_sessions import record_side
from conformance.suites.kip932.test_share_surface import KIP_ERROR_CODES
from targets.target import NotSupportedByTarget
from reference_impl.client.raw_client import ClusterClient
from reference_impl.protocol.api_keys import ApiKey

INIT, READ, WRITE, SUMMARY = (ApiKey.INITIALIZE_SHARE_GROUP_STATE, ApiKey.READ_SHARE_GROUP_STATE,
                              ApiKey.WRITE_SHARE_GROUP_STATE, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY)
DELETE = ApiKey.DELETE_SHARE_GROUP_STATE
# A write to a share-partition behind the KIP's deletion marker: its epoch "did not match",
# or the partition is gone. Kafka answers as for state never initialised (DIV-93228).
KIP_REFUSALS_AFTER_DELETE = (E.fenced_state_epoch, E.unknown_topic_or_partition)
WAIT_S = 20.0
# A read of a share-partition without state: the KIP's answers, and Kafka's (DIV-93203).
UNINITIALISED = (E.unknown_topic_or_partition, E.group_id_not_found, E.invalid_request)


@pytest.fixture
def sp(target, unique):
    with wire.cluster_client(target) as cc:
        yield SharePartitionUnderTest(target, cc, unique.topic(), unique.group())


def require_state_rpcs(target: Any, *keys: int) -> None:
    caps = target.capabilities()
    for key in keys:
        if not caps.supports_api(key):
            raise NotSupportedByTarget(f"the share-state RPC {ApiKey(key).name} is not advertised")


def state_rpc(cc: ClusterClient, api: int, group: str, tid: uuid.UUID, p: int, data: str, part: str,
              wait_s: float = WAIT_S, node: Any = None, **fields: Any) -> Any:
    """One share-state RPC for one share-partition, sent to its share coordinator (or
    `node`); the partition result. Retries the coordinator's not-ready answers."""
    deadline = time.monotonic() + wait_s
    while True:
        target = node or cc.coordinator_for(f"{group}:{kafka_uuid(tid)}:{p}", SHARE_COORDINATOR_KEY_TYPE, wait_s=wait_s)
        v = target.negotiate(api)
        resp = target.request(api, v, group_id=group, topics=(
            nested(api, v, data, topic_id=tid, partitions=(nested(api, v, part, partition=p, **fields),)),))
        result = resp.results[0].partitions[0]
        if result.error_code == E.cluster_authorization_failed:
            raise NotSupportedByTarget("the target refuses share-state RPCs to this client (CLUSTER_ACTION)")
        if result.error_code not in COORDINATOR_RETRIABLE or node is not None or time.monotonic() > deadline:
            return result
        time.sleep(0.2)


def read(cc: ClusterClient, group: str, tid: uuid.UUID, p: int = 0, leader: int | None = None) -> Any:
    """ReadShareGroupState at the partition's current leader epoch (or `leader`)."""
    return state_rpc(cc, READ, group, tid, p, "ReadStateData", "PartitionData",
                     leader_epoch=leader_epoch(cc, tid, p) if leader is None else leader)


def summary(cc: ClusterClient, group: str, tid: uuid.UUID, p: int = 0) -> Any:
    return state_rpc(cc, SUMMARY, group, tid, p, "ReadStateSummaryData", "PartitionData",
                     leader_epoch=leader_epoch(cc, tid, p))


def write(cc: ClusterClient, group: str, tid: uuid.UUID, state: Any, *, state_epoch: int, leader: int, p: int = 0) -> Any:
    """WriteShareGroupState repeating `state` (a read result) with the given epochs."""
    v = cc.coordinator_for(f"{group}:{kafka_uuid(tid)}:{p}", SHARE_COORDINATOR_KEY_TYPE, wait_s=WAIT_S).negotiate(WRITE)
    extra = {"delivery_complete_count": -1} if v >= 1 else {}
    batches = tuple(nested(WRITE, v, "StateBatch", first_offset=b.first_offset, last_offset=b.last_offset,
                           delivery_state=b.delivery_state, delivery_count=b.delivery_count) for b in state.state_batches)
    return state_rpc(cc, WRITE, group, tid, p, "WriteStateData", "PartitionData", state_epoch=state_epoch,
                     leader_epoch=leader, start_offset=state.start_offset, state_batches=batches, **extra)


def as_tuple(state: Any) -> tuple:
    return (int(state.state_epoch), int(state.start_offset),
            sorted((int(b.first_offset), int(b.last_offset), int(b.delivery_state), int(b.delivery_count))
                   for b in state.state_batches))


def eventually(check, wait_s: float = WAIT_S) -> Any:
    return share.eventually(check, wait_s)


def accepted_two(sp: SharePartitionUnderTest) -> None:
    """The share-partition used: 5 records delivered, 0..1 accepted, 2..4 released."""
    a = sp.primed_member()
    base = sp.produce([b"v%d" % i for i in range(5)])
    assert a.fetch_until([sp.key()], 5) == {o: 1 for o in range(base, base + 5)}
    assert ack_codes(a.ack({sp.key(): [(base, base + 1, [ACCEPT]), (base + 2, base + 4, [RELEASE])]})) == {0: 0}


# -- tests ---------------------------------------------------------------------------------------


@pytest.mark.requirement("KIP-932.PERSIST.009")
def test_state_summary_agrees_with_the_state(sp):
    """After 0..1 accepted and 2..4 released, ReadShareGroupStateSummary answers the state
    epoch and start offset ReadShareGroupState answers, and they imply SPSO 2."""
    require_state_rpcs(sp.target, READ, SUMMARY)
    sp.open()
    accepted_two(sp)

    def agree() -> tuple[Any, Any]:
        full, short = read(sp.cc, sp.group, sp.tid), summary(sp.cc, sp.group, sp.tid)
        assert full.error_code == E.none and short.error_code == E.none, (full, short)
        assert (short.state_epoch, short.start_offset) == (full.state_epoch, full.start_offset), (full, short)
        batches = [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in full.state_batches]
        assert effective_spso(int(full.start_offset), batches) == 2, full
        return full, short

    full, _ = eventually(agree)
    assert int(full.state_epoch) >= 0


@pytest.mark.requirement("KIP-932.PERSIST.001", "KIP-932.PERSIST.002", "KIP-932.ERR.001")
def test_stale_state_epoch_and_leader_epoch_are_fenced(sp, record_property):
    """A write carrying the state epoch below the current one is FENCED_STATE_EPOCH (124)
    and changes nothing. A read at a higher leader epoch stores that epoch (Kafka's
    readStateAndMaybeUpdateLeaderEpoch); a write at the old leader epoch is then
    FENCED_LEADER_EPOCH and changes nothing."""
    require_state_rpcs(sp.target, READ, WRITE)
    state, before, s_epoch, l_epoch = _stored_state(sp)
    stale = write(sp.cc, sp.group, sp.tid, state, state_epoch=s_epoch - 1, leader=l_epoch)
    assert int(stale.error_code) == KIP_ERROR_CODES["FENCED_STATE_EPOCH"] == E.fenced_state_epoch, stale
    assert as_tuple(read(sp.cc, sp.group, sp.tid)) == before
    newer = read(sp.cc, sp.group, sp.tid, leader=l_epoch + 5)
    assert newer.error_code == E.none and as_tuple(newer) == before, newer
    older = write(sp.cc, sp.group, sp.tid, state, state_epoch=s_epoch, leader=l_epoch)
    record_property("write_below_stored_leader_epoch", E(older.error_code).name)
    assert older.error_code == E.fenced_leader_epoch, older
    assert as_tuple(read(sp.cc, sp.group, sp.tid, leader=l_epoch + 5)) == before


@pytest.mark.requirement("KIP-932.PERSIST.001")
def test_newer_state_epoch_write_is_accepted_and_not_recorded(sp, record_property):
    """PERSIST.001: the KIP refuses writes carrying "another" state epoch (FENCED_STATE_EPOCH:
    the epoch "did not match"); Kafka's ShareCoordinatorShard fences only an older one
    (DIV-93218). A write repeating the state with state epoch + 1 is answered NONE, the
    stored state epoch stays, and a write at the stored epoch is still taken."""
    require_state_rpcs(sp.target, READ, WRITE)
    state, before, s_epoch, l_epoch = _stored_state(sp)
    newer = write(sp.cc, sp.group, sp.tid, state, state_epoch=s_epoch + 1, leader=l_epoch)
    record_property("write_at_state_epoch_plus_one", E(newer.error_code).name)
    assert newer.error_code == E.none, newer
    assert as_tuple(read(sp.cc, sp.group, sp.tid)) == before, "the newer state epoch was recorded"
    same = write(sp.cc, sp.group, sp.tid, state, state_epoch=s_epoch, leader=l_epoch)
    assert same.error_code == E.none, same
    assert as_tuple(read(sp.cc, sp.group, sp.tid)) == before


def _stored_state(sp: Any) -> tuple[Any, tuple, int, int]:
    """Two accepted records persisted: the stored state, its comparable form, its state epoch
    and partition 0's leader epoch (what a write must carry)."""
    sp.open()
    accepted_two(sp)
    state = eventually(lambda: _with_batches(read(sp.cc, sp.group, sp.tid)))
    return state, as_tuple(state), int(state.state_epoch), leader_epoch(sp.cc, sp.tid, 0)


def _with_batches(state: Any) -> Any:
    assert state.error_code == E.none and state.state_batches, state
    return state


@pytest.mark.requirement("KIP-932.PERSIST.006")
def test_persisted_state_holds_no_acquired_records(sp):
    """The seed's example on offsets 0..6: 0..1 accepted (SPSO 2), 2 and 4 held (Acquired)
    by A, 3 released twice (Available, count 2), 5 accepted, 6 rejected. The persisted state
    implies SPSO 2 and shows 3 Available with count 2, 5 Acknowledged, 6 Archived; any
    batch over 2 or 4 records them as Available (Acquired is never persisted)."""
    require_state_rpcs(sp.target, READ)
    sp.open()
    a = sp.primed_member()
    b = sp.member()
    base = sp.produce([b"v%d" % i for i in range(7)])
    assert base == 0
    assert a.fetch_until([sp.key()], 7) == {o: 1 for o in range(7)}
    acks = {sp.key(): [(0, 1, [ACCEPT]), (3, 3, [RELEASE]), (5, 5, [ACCEPT]), (6, 6, [REJECT])]}
    assert ack_codes(a.ack(acks)) == {0: 0}
    assert b.fetch_until([sp.key()], 1) == {3: 2}
    assert ack_codes(b.ack({sp.key(): [(3, 3, [RELEASE])]})) == {0: 0}

    def persisted() -> dict[int, tuple[int, int]]:
        state = read(sp.cc, sp.group, sp.tid)
        assert state.error_code == E.none, state
        batches = [(int(x.first_offset), int(x.last_offset), int(x.delivery_state), int(x.delivery_count))
                   for x in state.state_batches]
        states = persisted_states(batches)
        assert effective_spso(int(state.start_offset), batches) == 2, state
        assert states.get(3) == (AVAILABLE, 2) and states.get(5, (None,))[0] == ACKNOWLEDGED, states
        assert states.get(6, (None,))[0] == ARCHIVED, states
        return states

    states = eventually(persisted)
    assert all(st in (AVAILABLE, ACKNOWLEDGED, ARCHIVED) for st, _ in states.values()), states
    for held in (2, 4):
        assert states.get(held, (AVAILABLE, 1))[0] == AVAILABLE, states


@pytest.mark.requirement("KIP-932.PERSIST.007")
def test_every_subscribed_partition_is_initialised_and_repeating_it_is_harmless(target, unique):
    """A member subscribing to a 3-partition topic: once it is assigned all three, each
    share-partition has state at the share coordinator. Repeating InitializeShareGroupState
    with the state epoch and start offset it holds is not refused as fenced and changes
    nothing."""
    require_state_rpcs(target, READ, INIT)
    with wire.cluster_client(target) as cc:
        sp = SharePartitionUnderTest(target, cc, unique.topic(), unique.group(), partitions=3).open()
        m = Member(coordinator(cc, sp.group), sp.group, [sp.topic])
        m.beat()
        beat_until([m], lambda: m.partitions(sp.tid) == {0, 1, 2})
        states = {p: eventually(lambda p=p: _ok(read(cc, sp.group, sp.tid, p))) for p in range(3)}
        first = states[0]
        again = state_rpc(cc, INIT, sp.group, sp.tid, 0, "InitializeStateData", "PartitionData",
                          state_epoch=first.state_epoch, start_offset=first.start_offset)
        assert again.error_code in (E.none,), again
        assert as_tuple(read(cc, sp.group, sp.tid, 0)) == as_tuple(first)


def _ok(state: Any) -> Any:
    assert state.error_code == E.none, state
    return state


@pytest.mark.requirement("KIP-932.PERSIST.003", "KIP-932.PERSIST.010")
def test_state_of_unknown_share_partitions_and_groups(sp, record_property):
    """ReadShareGroupState for a partition the group never used (a random topic id), and for
    a group that does not exist: refused per partition, never an empty state. The KIP says
    UNKNOWN_TOPIC_OR_PARTITION (or GROUP_ID_NOT_FOUND); Kafka 4.4 and the reference answer
    INVALID_REQUEST "Read operation on uninitialized share partition not allowed" (DIV-93203). Sent to a broker that is not the share
    coordinator (several brokers): NOT_COORDINATOR."""
    require_state_rpcs(sp.target, READ)
    sp.open()
    accepted_two(sp)
    ghost = state_rpc(sp.cc, READ, sp.group, uuid.uuid4(), 0, "ReadStateData", "PartitionData", leader_epoch=0)
    assert ghost.error_code in UNINITIALISED, ghost
    assert not ghost.state_batches
    nobody = state_rpc(sp.cc, READ, sp.group + "-none", sp.tid, 0, "ReadStateData", "PartitionData", leader_epoch=0)
    assert nobody.error_code in UNINITIALISED, nobody
    record_property("follows:uninitialised-read", "kafka" if ghost.error_code == E.invalid_request else "kip")
    key = f"{sp.group}:{kafka_uuid(sp.tid)}:0"
    coord = sp.cc.coordinator_for(key, SHARE_COORDINATOR_KEY_TYPE, wait_s=WAIT_S)
    others = [n for n in sorted(sp.cc.nodes) if sp.cc.node(n) is not coord]
    if others:
        wrong = state_rpc(sp.cc, READ, sp.group, sp.tid, 0, "ReadStateData", "PartitionData",
                          node=sp.cc.node(others[0]), leader_epoch=leader_epoch(sp.cc, sp.tid, 0))
        assert wrong.error_code == E.not_coordinator, wrong


@pytest.mark.requirement("KIP-932.PERSIST.008")
def test_state_is_deleted_with_its_topic(sp, target):
    """Deleting a topic the group used deletes its share-partition state (ReadShareGroupState
    for the old topic id answers as for a share-partition never initialised, DIV-93203);
    a topic re-created under the same name starts fresh: with `earliest` a new member gets
    its records from offset 0 with count 1."""
    require_state_rpcs(sp.target, READ)
    sp.open({"share.auto.offset.reset": "earliest"})
    accepted_two(sp)
    old = sp.tid
    eventually(lambda: _ok(read(sp.cc, sp.group, old)))
    admin = confluent.admin(target)
    admin.delete_topics([sp.topic], operation_timeout=30)[sp.topic].result(30)

    def gone() -> None:
        state = state_rpc(sp.cc, READ, sp.group, old, 0, "ReadStateData", "PartitionData", leader_epoch=0)
        assert state.error_code in UNINITIALISED, state

    eventually(gone, 60)
    deadline = time.monotonic() + 60
    while True:
        try:
            confluent.create_topic(target, sp.topic, 1)
            break
        except Exception:  # noqa: BLE001 - Kafka refuses the name while the deletion completes
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    sp.tid = sp.wait_topic_id()
    assert sp.tid != old
    base = sp.produce([b"n%d" % i for i in range(3)])
    b = sp.member()
    assert b.fetch_until([sp.key()], 3, wait_s=30) == {o: 1 for o in range(base, base + 3)}


@pytest.mark.requirement("KIP-932.PERSIST.011")
def test_an_overlapping_write_combines_with_the_stored_batches(sp, request):
    """KIP-932.PERSIST.011: a write is a partial update of the stored state; how a batch that overlaps a stored
    one combines is not in the KIP (DIV-93224). Stored first: 100..104 Acknowledged count 2.
    Then a write of 102..103 Available count 1. "Newest wins" reads back 100..101 and 104
    Acknowledged and 102..103 Available; Kafka's PersisterStateBatchCombiner keeps, per
    offset, the batch with the higher (delivery count, state), so 100..104 stay
    Acknowledged. Either way an offset outside the new batch keeps its stored state."""
    require_state_rpcs(sp.target, READ, WRITE)
    state, _, s_epoch, l_epoch = _stored_state(sp)
    first = write(sp.cc, sp.group, sp.tid, _State(state.start_offset, [_Batch(100, 104, ACKNOWLEDGED, 2)]),
                  state_epoch=s_epoch, leader=l_epoch)
    assert first.error_code == E.none, first
    second = write(sp.cc, sp.group, sp.tid, _State(state.start_offset, [_Batch(102, 103, AVAILABLE, 1)]),
                   state_epoch=s_epoch, leader=l_epoch)
    assert second.error_code == E.none, second
    got = {o: sc for o, sc in persisted_states(as_tuple(read(sp.cc, sp.group, sp.tid))[2]).items() if o >= 100}
    newest = {100: (ACKNOWLEDGED, 2), 101: (ACKNOWLEDGED, 2), 102: (AVAILABLE, 1), 103: (AVAILABLE, 1),
              104: (ACKNOWLEDGED, 2)}
    highest = {o: (ACKNOWLEDGED, 2) for o in range(100, 105)}
    assert got in (newest, highest), f"offsets 100..104 read back as {got}"
    record_side(request, "overlapping_write", "kafka" if got == highest else "kip")


@dataclass
class _Batch:
    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass
class _State:
    """What `write` repeats: a start offset and state batches."""

    start_offset: int
    state_batches: list[_Batch]


@pytest.mark.requirement("KIP-932.PERSIST.008")
def test_a_write_after_delete_does_not_bring_the_state_back(sp, request):
    """KIP-932.PERSIST.008: DeleteShareGroupState leaves a deletion marker (KIP: a snapshot
    with snapshot epoch -1; Kafka: a tombstone, DIV-93228). A late write from the old
    share-partition leader, with the state and leader epochs it had, must not bring the
    deleted state back: it is refused (FENCED_STATE_EPOCH or UNKNOWN_TOPIC_OR_PARTITION by
    the KIP's error list, INVALID_REQUEST in Kafka), and a read still answers as for a
    share-partition never initialised (DIV-93203). The refusal's side is recorded."""
    require_state_rpcs(sp.target, READ, WRITE, DELETE)
    state, _, s_epoch, l_epoch = _stored_state(sp)
    deleted = state_rpc(sp.cc, DELETE, sp.group, sp.tid, 0, "DeleteStateData", "PartitionData")
    assert deleted.error_code == E.none, deleted
    eventually(lambda: _uninitialised(read(sp.cc, sp.group, sp.tid)))
    late = write(sp.cc, sp.group, sp.tid, state, state_epoch=s_epoch, leader=l_epoch)
    assert late.error_code in KIP_REFUSALS_AFTER_DELETE + (E.invalid_request,), late
    record_side(request, "write_after_delete", "kafka" if late.error_code == E.invalid_request else "kip")
    _uninitialised(read(sp.cc, sp.group, sp.tid))


def _uninitialised(state: Any) -> Any:
    assert state.error_code in UNINITIALISED, state
    return state
