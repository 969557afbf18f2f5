"""Unit tests of the group coordinator's side of transactions (KIP-447), no I/O.

Pending transactional offsets, require_stable, the KIP-447 fencing of TxnOffsetCommit,
Kafka's ordering rule between a transactional and a later plain commit, expiration and
deletion with open transactions; plus the DescribeTransactions / ListTransactions
handlers against a fake transaction coordinator.
"""

from __future__ import annotations

import datetime
import itertools
import struct
from dataclasses import dataclass, field

import pytest

from reference_impl.model.java_hash import java_string_hash
from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription
from kio.schema.errors import ErrorCode

from reference_impl.handlers import describe_transactions, list_transactions, txn_offset_commit
from reference_impl.handlers.registry import RequestContext
from reference_impl.model.broker_state import BrokerConfig, NodeEndpoint, ReferenceState
from reference_impl.model.classic_group import GroupState, Protocol
from reference_impl.model.clock import ManualClock
from reference_impl.model.group_coordinator import (
    OFFSETS_TOPIC,
    GroupCoordinator,
    OffsetCommitEntry,
)
from reference_impl.model.transaction_coordinator import (
    ListedTransaction,
    ListTransactionsResult,
    TransactionDescription,
)
from reference_impl.model.transaction_state import TransactionState
from reference_impl.protocol import framing, payloads

G = "g1"
T = "t"
PID, EPOCH = 1000, 0
SESSION, REBALANCE = 10_000, 30_000


def subscription(*topics: str) -> bytes:
    return struct.pack(">h", 0) + framing.encode_entity(ConsumerProtocolSubscription(topics=tuple(topics), user_data=None))


RANGE = (Protocol("range", subscription(T)),)


def make(**config) -> tuple[GroupCoordinator, ManualClock]:
    clock = ManualClock()
    ids = itertools.count(1)
    return GroupCoordinator([1], clock, BrokerConfig(**config), id_factory=lambda: f"id{next(ids)}"), clock


def stable_member(coord: GroupCoordinator, group: str = G, instance: str | None = None) -> tuple[str, int]:
    """One member joined and synced: (member id, generation)."""
    first = coord.join_group(group, "", "consumer", RANGE, SESSION, REBALANCE, group_instance_id=instance,
                             client_id="c", client_host="/h", api_version=9)
    member_id = first.result.member_id
    if first.result.error == ErrorCode.member_id_required:
        second = coord.join_group(group, member_id, "consumer", RANGE, SESSION, REBALANCE, group_instance_id=instance,
                                  client_id="c", client_host="/h", api_version=9)
        result = second.result
    else:
        result = first.result
    assert result.error == ErrorCode.none, result
    sync = coord.sync_group(group, result.generation_id, result.member_id, group_instance_id=instance,
                            assignments=[(result.member_id, b"a")])
    assert sync.result.error == ErrorCode.none
    assert coord.group(group).state == GroupState.STABLE
    return result.member_id, result.generation_id


def entries(*pairs: tuple[int, int], topic: str = T, metadata: str | None = "") -> list[OffsetCommitEntry]:
    return [OffsetCommitEntry(topic, p, o, metadata=metadata) for p, o in pairs]


def txn_commit(coord, *pairs, group=G, pid=PID, epoch=EPOCH, generation=-1, member="", instance=None, **kw):
    return coord.txn_offset_commit(group, pid, epoch, generation, member, instance, entries(*pairs, **kw), 5)


def fetch(coord, partitions=(0,), *, group=G, stable=False, topic=T):
    r = coord.fetch_offsets(group, [(topic, list(partitions))], require_stable=stable)
    assert r.error == ErrorCode.none
    return {p.partition: (p.offset, p.error) for _t, parts in r.topics for p in parts}


NONE, UNSTABLE = ErrorCode.none, ErrorCode.unstable_offset_commit


# -- pending offsets, commit and abort --------------------------------------------------


def test_pending_offsets_are_invisible_until_commit():
    coord, _ = make()
    assert coord.commit_offsets(G, -1, "", entries((0, 50), (1, 7))) == [NONE, NONE]
    assert txn_commit(coord, (0, 100)) == [NONE]
    # KIP-447.FETCH.002: without require_stable, the last committed offset.
    assert fetch(coord, (0, 1)) == {0: (50, NONE), 1: (7, NONE)}
    # KIP-447.FETCH.001/003: 88 per partition with pending offsets, others unaffected.
    assert fetch(coord, (0, 1), stable=True) == {0: (-1, UNSTABLE), 1: (7, NONE)}
    assert coord.open_transactions(G) == {PID}
    assert coord.pending_transactional_offsets(G, PID) == {T: {0: 100}}
    assert coord.complete_transactional_offsets(G, PID, EPOCH, committed=True) == [(T, 0)]
    assert fetch(coord, (0, 1), stable=True) == {0: (100, NONE), 1: (7, NONE)}
    assert coord.open_transactions(G) == frozenset()


def test_abort_drops_pending_offsets():
    coord, _ = make()
    coord.commit_offsets(G, -1, "", entries((0, 50)))
    txn_commit(coord, (0, 100), (1, 3))
    assert coord.complete_transactional_offsets(G, PID, EPOCH, committed=False) == []
    assert fetch(coord, (0, 1), stable=True) == {0: (50, NONE), 1: (-1, NONE)}
    assert not coord.offsets.has_open_transaction(G)


def test_pending_only_partition_is_unstable_and_absent_from_fetch_all():
    coord, _ = make()
    txn_commit(coord, (2, 9))
    assert fetch(coord, (2,), stable=True) == {2: (-1, UNSTABLE)}
    assert fetch(coord, (2,)) == {2: (-1, NONE)}
    # Fetch-all lists committed partitions only (as Kafka's fetchAllOffsets).
    assert coord.fetch_offsets(G, None, require_stable=True).topics == ()


def test_fetch_all_with_require_stable_marks_pending_partitions():
    coord, _ = make()
    coord.commit_offsets(G, -1, "", entries((0, 1), (1, 2)))
    txn_commit(coord, (1, 5))
    rows = {p.partition: (p.offset, p.error) for _t, parts in coord.fetch_offsets(G, None, require_stable=True).topics
            for p in parts}
    assert rows == {0: (1, NONE), 1: (-1, UNSTABLE)}


def test_second_txn_commit_of_same_transaction_replaces_pending_offset():
    coord, _ = make()
    txn_commit(coord, (0, 10))
    txn_commit(coord, (0, 20))
    coord.complete_transactional_offsets(G, PID, EPOCH, True)
    assert fetch(coord) == {0: (20, NONE)}


def test_two_producers_are_independent():
    coord, _ = make()
    txn_commit(coord, (0, 10), pid=1)
    txn_commit(coord, (1, 20), pid=2)
    coord.complete_transactional_offsets(G, 1, 0, committed=False)
    assert fetch(coord, (0, 1), stable=True) == {0: (-1, NONE), 1: (-1, UNSTABLE)}
    coord.complete_transactional_offsets(G, 2, 0, committed=True)
    assert fetch(coord, (0, 1), stable=True) == {0: (-1, NONE), 1: (20, NONE)}


def test_plain_commit_after_txn_commit_wins_over_the_marker():
    """Kafka keeps the most recent committed offset: the transactional offset written
    before a plain commit is not materialised by the later commit marker."""
    coord, _ = make()
    txn_commit(coord, (0, 100), (1, 100))
    coord.commit_offsets(G, -1, "", entries((0, 60)))
    assert coord.complete_transactional_offsets(G, PID, EPOCH, True) == [(T, 1)]
    assert fetch(coord, (0, 1)) == {0: (60, NONE), 1: (100, NONE)}


def test_txn_commit_after_plain_commit_replaces_it():
    coord, _ = make()
    coord.commit_offsets(G, -1, "", entries((0, 60)))
    txn_commit(coord, (0, 100))
    coord.complete_transactional_offsets(G, PID, EPOCH, True)
    assert fetch(coord) == {0: (100, NONE)}


def test_completion_without_pending_offsets_is_a_no_op():
    coord, _ = make()
    assert coord.complete_transactional_offsets(G, PID, EPOCH, True) == []
    assert G not in coord.groups


def test_marker_on_offsets_partition_completes_every_group_there():
    coord, _ = make()
    partition = coord.offsets_partition_for(G)
    other = next(f"g{i}" for i in itertools.count(2) if coord.offsets_partition_for(f"g{i}") == partition)
    elsewhere = next(f"g{i}" for i in itertools.count(2) if coord.offsets_partition_for(f"g{i}") != partition)
    for group in (G, other, elsewhere):
        txn_commit(coord, (0, 5), group=group)
    done = coord.complete_partition_transaction(partition, PID, EPOCH, committed=True)
    assert sorted(done) == sorted([(G, T, 0), (other, T, 0)])
    assert fetch(coord, group=elsewhere, stable=True) == {0: (-1, UNSTABLE)}


def test_metadata_too_large_is_per_partition():
    coord, _ = make()
    coord.config.offset_metadata_max_bytes = 3
    errors = coord.txn_offset_commit(G, PID, EPOCH, -1, "", None, [
        OffsetCommitEntry(T, 0, 1, metadata="toolong"), OffsetCommitEntry(T, 1, 2, metadata="ok")], 5)
    assert errors == [ErrorCode.offset_metadata_too_large, NONE]
    assert coord.pending_transactional_offsets(G, PID) == {T: {1: 2}}


def test_leader_epoch_and_metadata_survive_materialisation():
    coord, _ = make()
    coord.txn_offset_commit(G, PID, EPOCH, -1, "", None, [OffsetCommitEntry(T, 0, 42, leader_epoch=7, metadata="m")], 5)
    coord.complete_transactional_offsets(G, PID, EPOCH, True)
    p = coord.fetch_offsets(G, [(T, [0])]).topics[0][1][0]
    assert (p.offset, p.leader_epoch, p.metadata) == (42, 7, "m")


# -- KIP-447 fencing ----------------------------------------------------------------------


def test_fencing_generation_member_instance():
    coord, _ = make()
    member, generation = stable_member(coord)
    # KIP-447.FENCE.002 / 003
    assert txn_commit(coord, (0, 1), (1, 1), generation=generation - 1, member=member) == [ErrorCode.illegal_generation] * 2
    assert txn_commit(coord, (0, 1), generation=generation, member="not-a-member") == [ErrorCode.unknown_member_id]
    assert coord.pending_transactional_offsets(G, PID) == {}
    # KIP-447.FENCE.005: defaults skip membership validation, even for an active group.
    assert txn_commit(coord, (0, 1)) == [NONE]
    assert txn_commit(coord, (0, 2), generation=generation, member=member) == [NONE]


def test_fencing_static_member_replaced():
    coord, _ = make()
    old_member, _generation = stable_member(coord, instance="i1")
    # The static member rejoins under a new member id.
    rejoin = coord.join_group(G, "", "consumer", RANGE, SESSION, REBALANCE, group_instance_id="i1",
                              client_id="c", client_host="/h", api_version=9)
    assert rejoin.result.error == ErrorCode.none and rejoin.result.member_id != old_member
    generation = coord.group(G).generation_id
    assert txn_commit(coord, (0, 1), generation=generation, member=old_member, instance="i1") == [
        ErrorCode.fenced_instance_id]
    assert txn_commit(coord, (0, 1), generation=generation, member=rejoin.result.member_id, instance="unknown") == [
        ErrorCode.unknown_member_id]


def test_unknown_group_with_generation_is_illegal_generation():
    coord, _ = make()
    assert txn_commit(coord, (0, 1), group="nope", generation=3, member="m") == [ErrorCode.illegal_generation]
    assert "nope" not in coord.groups
    # Generation -1 creates a simple group, as for OffsetCommit.
    assert txn_commit(coord, (0, 1), group="simple") == [NONE]
    assert coord.group("simple").is_in(GroupState.EMPTY)


def test_txn_commit_allowed_while_completing_rebalance():
    coord, _ = make()
    first = coord.join_group(G, "", "consumer", RANGE, SESSION, REBALANCE, client_id="c", client_host="/h", api_version=9)
    joined = coord.join_group(G, first.result.member_id, "consumer", RANGE, SESSION, REBALANCE, client_id="c",
                              client_host="/h", api_version=9).result
    assert coord.group(G).is_in(GroupState.COMPLETING_REBALANCE)
    assert coord.commit_offsets(G, joined.generation_id, joined.member_id, entries((0, 1))) == [
        ErrorCode.rebalance_in_progress]
    assert txn_commit(coord, (0, 1), generation=joined.generation_id, member=joined.member_id) == [NONE]


def test_older_producer_epoch_is_refused_after_marker():
    coord, _ = make()
    txn_commit(coord, (0, 1), epoch=3)
    coord.complete_transactional_offsets(G, PID, 4, committed=False)  # fenced: abort with a bumped epoch
    assert txn_commit(coord, (0, 2), epoch=3) == [ErrorCode.invalid_producer_epoch]
    assert txn_commit(coord, (0, 2), epoch=4) == [NONE]
    assert coord.has_ongoing_transaction(G, PID, 4)
    assert not coord.has_ongoing_transaction(G, PID, 3)


# -- expiration and deletion with open transactions -----------------------------------------


def test_expiry_waits_for_open_transaction():
    coord, clock = make(offsets_retention_minutes=1)
    coord.commit_offsets(G, -1, "", entries((0, 5), (1, 5)))
    txn_commit(coord, (0, 9))
    clock.advance(120_000)
    coord.cleanup_group_metadata(clock.now_ms())
    # Partition 1 expired; partition 0 has a pending transactional offset and stays, as
    # does the group (open transaction).
    assert fetch(coord, (0, 1)) == {0: (5, NONE), 1: (-1, NONE)}
    assert G in coord.groups
    coord.complete_transactional_offsets(G, PID, EPOCH, committed=False)
    coord.cleanup_group_metadata(clock.now_ms())
    assert G not in coord.groups


def test_group_with_only_pending_offsets_is_kept_while_committed_offsets_exist():
    coord, clock = make(offsets_retention_minutes=1)
    coord.commit_offsets(G, -1, "", entries((1, 5)))
    txn_commit(coord, (0, 9))
    clock.advance(120_000)
    coord.cleanup_group_metadata(clock.now_ms())
    # The committed offset expired, but the open transaction keeps the group alive.
    assert G in coord.groups
    coord.complete_transactional_offsets(G, PID, EPOCH, committed=True)
    assert fetch(coord, (0,), stable=True) == {0: (9, NONE)}


def test_expiration_ignores_open_transactions_of_a_group_without_committed_offsets():
    """Kafka's cleanup counts committed offsets only: an Empty group holding nothing but
    pending transactional offsets is removed; the commit marker still materialises them,
    and they become visible once the group exists again."""
    coord, clock = make(offsets_retention_minutes=1)
    txn_commit(coord, (0, 9))
    clock.advance(120_000)
    coord.cleanup_group_metadata(clock.now_ms())
    assert G not in coord.groups
    assert coord.complete_transactional_offsets(G, PID, EPOCH, committed=True) == [(T, 0)]
    assert fetch(coord, (0,)) == {0: (-1, NONE)}
    assert coord.commit_offsets(G, -1, "", entries((1, 1))) == [NONE]  # re-creates the simple group
    assert fetch(coord, (0, 1)) == {0: (9, NONE), 1: (1, NONE)}


def test_delete_group_drops_pending_offsets():
    coord, _ = make()
    coord.commit_offsets(G, -1, "", entries((0, 5)))
    txn_commit(coord, (0, 9), (1, 9))
    assert coord.delete_groups([G]) == [(G, NONE)]
    assert not coord.offsets.has_pending_transactional_offset(G, T, 0)
    # The producer's transaction is still open for the group; its commit marker does not
    # resurrect the deleted offsets.
    assert coord.open_transactions(G) == {PID}
    assert coord.complete_transactional_offsets(G, PID, EPOCH, committed=True) == []
    assert G not in coord.groups


def test_delete_groups_refuses_active_group_with_open_transaction():
    coord, _ = make()
    member, generation = stable_member(coord)
    txn_commit(coord, (0, 1), generation=generation, member=member)
    assert coord.delete_groups([G]) == [(G, ErrorCode.non_empty_group)]
    assert coord.offsets.has_pending_transactional_offset(G, T, 0)


def test_topic_deletion_drops_pending_offsets():
    coord, _ = make()
    txn_commit(coord, (0, 9))
    txn_commit(coord, (0, 9), topic="other")
    coord.on_topic_deleted(T)
    assert coord.pending_transactional_offsets(G, PID) == {"other": {0: 9}}


def test_offsets_partition_matches_java_hash():
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(1 << 31)  # Integer.MIN_VALUE: Utils.abs -> 0
    coord, _ = make()
    assert coord.offsets_partition_for("polygenelubricants") == 0
    assert coord.offsets_partition_for("hello") == 99162322 % 50


# -- handlers against a fake transaction coordinator ------------------------------------------


@dataclass
class FakeTxn:
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int = 0
    transaction_timeout_ms: int = 60_000
    transaction_start_time_ms: int = -1
    topic_partitions: set = field(default_factory=set)


class FakeTransactions(txn_offset_commit.OffsetsVerification):
    """A coordinator answering the declared shapes (TransactionDescription, ListTransactionsResult)
    and verifying offsets by partition only."""

    def __init__(self, *txns: FakeTxn, error: ErrorCode | None = None, verify: ErrorCode = ErrorCode.none):
        self.txns = {t.transactional_id: t for t in txns}
        self.error = error
        self.verify = verify
        self.verify_calls: list[tuple] = []

    def describe(self, tid):
        if self.error is not None:
            return TransactionDescription(tid, self.error)
        t = self.txns.get(tid)
        if t is None:
            return TransactionDescription(tid, ErrorCode.transactional_id_not_found)
        return TransactionDescription(
            tid, ErrorCode.none, t.state, t.producer_id, t.producer_epoch, t.transaction_timeout_ms,
            t.transaction_start_time_ms, topics=tuple((topic, (p,)) for topic, p in sorted(t.topic_partitions)))

    def list_transactions(self, state_filters, producer_id_filters, duration_filter):
        if self.error is not None:
            return ListTransactionsResult(self.error)
        listed = [t for t in self.txns.values()
                  if (not state_filters or t.state in state_filters)
                  and (not producer_id_filters or t.producer_id in producer_id_filters)]
        unknown = tuple(f for f in state_filters if TransactionState.from_name(f) is None)
        return ListTransactionsResult(
            ErrorCode.none, unknown, tuple(ListedTransaction(t.transactional_id, t.producer_id, t.state) for t in listed))

    def verify_or_add_partition(self, tid, pid, epoch, topic, partition, add):
        self.verify_calls.append((tid, pid, epoch, topic, partition, add))
        return self.verify


class FakeGroupTransactions(FakeTransactions):
    """A coordinator that records AddOffsetsToTxn by group id (verify_or_add_group)."""

    def verify_or_add_group(self, tid, pid, epoch, group_id, add):
        self.verify_calls.append((tid, pid, epoch, group_id, add))
        return self.verify


class FakeRuntime:
    def __init__(self, state):
        self.state = state
        self.clock = state.clock


def context(state, api_key: int, version: int, node_id: int = 1):
    return RequestContext(runtime=FakeRuntime(state), node_id=node_id, connection_id=1, client_host="127.0.0.1",
                          api_key=api_key, api_version=version, correlation_id=1, client_id="t")


def make_state(nodes: int = 1) -> ReferenceState:
    return ReferenceState([NodeEndpoint(i, "localhost", 9000 + i) for i in range(1, nodes + 1)], ManualClock())


def request(api_key: int, version: int, **fields):
    return payloads.build(framing.request_schema(api_key, version), **fields)


def test_describe_transactions_handler():
    state = make_state()
    state.transactions = FakeTransactions(
        FakeTxn("tx-a", "Ongoing", 7, 2, 30_000, 1_700_000_000_123, {("t", 1), ("t", 0), ("u", 3)}),
        FakeTxn("tx-dead", "Dead", 8),
    )
    resp = describe_transactions.handle_describe_transactions(
        context(state, 65, 0), request(65, 0, transactional_ids=("tx-a", "tx-none", "tx-dead")))
    a, none, dead = resp.transaction_states
    assert a.error_code == NONE and a.transaction_state == "Ongoing"
    assert (a.producer_id, a.producer_epoch) == (7, 2)
    assert a.transaction_timeout == datetime.timedelta(milliseconds=30_000)
    assert round(a.transaction_start_time.timestamp() * 1000) == 1_700_000_000_123
    assert [(t.topic, tuple(t.partitions)) for t in a.topics] == [("t", (0, 1)), ("u", (3,))]
    assert none.error_code == ErrorCode.transactional_id_not_found
    assert dead.error_code == ErrorCode.transactional_id_not_found
    framing.encode_entity(resp)  # encodable at the negotiated version


def test_describe_transactions_errors():
    state = make_state(3)
    state.transactions = FakeTransactions(FakeTxn("tx-a", "Empty", 7))
    owner = state.coordinator_for("tx-a")
    other = next(n for n in state.nodes if n != owner)
    resp = describe_transactions.handle_describe_transactions(
        context(state, 65, 0, node_id=other), request(65, 0, transactional_ids=("tx-a",)))
    assert resp.transaction_states[0].error_code == ErrorCode.not_coordinator
    state.transactions.error = ErrorCode.coordinator_load_in_progress
    resp = describe_transactions.handle_describe_transactions(
        context(state, 65, 0, node_id=owner), request(65, 0, transactional_ids=("tx-a",)))
    assert resp.transaction_states[0].error_code == ErrorCode.coordinator_load_in_progress
    framing.encode_entity(resp)


def test_state_name_spellings():
    import enum

    class S(enum.Enum):
        PREPARE_EPOCH_FENCE = 7

    assert describe_transactions.state_name(S.PREPARE_EPOCH_FENCE) == "PrepareEpochFence"
    assert describe_transactions.state_name("CompleteCommit") == "CompleteCommit"


@pytest.mark.parametrize("version", [0, 1])
def test_list_transactions_handler(version):
    state = make_state(3)
    txns = [FakeTxn(f"tx-{i}", "Ongoing" if i % 2 else "Empty", 100 + i) for i in range(12)] + [FakeTxn("tx-x", "Dead", 1)]
    state.transactions = FakeTransactions(*txns)
    listed = {}
    for node in state.nodes:
        resp = list_transactions.handle_list_transactions(
            context(state, 66, version, node_id=node),
            request(66, version, state_filters=(), producer_id_filters=(), duration_filter=-1))
        assert resp.error_code == NONE
        framing.encode_entity(resp)
        for t in resp.transaction_states:
            assert state.coordinator_for(t.transactional_id) == node  # each id listed by its coordinator only
            listed[t.transactional_id] = (t.producer_id, t.transaction_state)
    assert listed == {t.transactional_id: (t.producer_id, t.state) for t in txns if t.state != "Dead"}

    node = state.coordinator_for("tx-1")
    resp = list_transactions.handle_list_transactions(
        context(state, 66, version, node_id=node),
        request(66, version, state_filters=("Ongoing", "Bogus"), producer_id_filters=(101, 102), duration_filter=-1))
    assert tuple(resp.unknown_state_filters) == ("Bogus",)
    assert [t.transactional_id for t in resp.transaction_states] == ["tx-1"]


def test_list_transactions_load_in_progress_and_no_coordinator():
    state = make_state()
    req = request(66, 1, state_filters=("Bogus",), producer_id_filters=(), duration_filter=-1)
    resp = list_transactions.handle_list_transactions(context(state, 66, 1), req)
    assert resp.error_code == NONE and resp.transaction_states == () and tuple(resp.unknown_state_filters) == ("Bogus",)
    state.transactions = FakeTransactions(error=ErrorCode.coordinator_load_in_progress)
    resp = list_transactions.handle_list_transactions(context(state, 66, 1), req)
    assert resp.error_code == ErrorCode.coordinator_load_in_progress


def _txn_offset_commit_request(version: int, group: str = G, topic: str = T, generation: int = -1, member: str = ""):
    cls = framing.request_schema(28, version)
    part = payloads.build(payloads.nested(cls, "TxnOffsetCommitRequestPartition"), partition_index=0,
                          committed_offset=5, committed_leader_epoch=-1, committed_metadata="")
    topic_part = payloads.build(payloads.nested(cls, "TxnOffsetCommitRequestTopic"), name=topic, partitions=(part,))
    return payloads.build(cls, transactional_id="tx", group_id=group, producer_id=PID, producer_epoch=EPOCH,
                          generation_id=generation, member_id=member, group_instance_id=None, topics=(topic_part,))


def _errors(resp):
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


@pytest.mark.parametrize("version,add", [(3, False), (4, False), (5, True)])
def test_txn_offset_commit_handler_verifies_offsets_partition(version, add):
    state = make_state()
    state.topics.create(T, num_partitions=1)
    state.transactions = FakeTransactions()
    resp = txn_offset_commit.handle_txn_offset_commit(context(state, 28, version), _txn_offset_commit_request(version))
    assert _errors(resp) == {(T, 0): NONE}
    assert state.transactions.verify_calls == [("tx", PID, EPOCH, OFFSETS_TOPIC, state.groups.offsets_partition_for(G), add)]
    # A second commit of the same transaction is not verified again (ongoing on the partition).
    txn_offset_commit.handle_txn_offset_commit(context(state, 28, version), _txn_offset_commit_request(version))
    assert len(state.transactions.verify_calls) == 1
    framing.encode_entity(resp)


def test_txn_offset_commit_handler_prefers_group_verification():
    state = make_state()
    state.topics.create(T, num_partitions=1)
    state.transactions = FakeGroupTransactions()
    resp = txn_offset_commit.handle_txn_offset_commit(context(state, 28, 5), _txn_offset_commit_request(5))
    assert _errors(resp) == {(T, 0): NONE}
    assert state.transactions.verify_calls == [("tx", PID, EPOCH, G, True)]


@pytest.mark.parametrize("version,verify,expected", [
    (3, ErrorCode.transaction_abortable, ErrorCode.invalid_txn_state),
    (4, ErrorCode.transaction_abortable, ErrorCode.transaction_abortable),
    (4, ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch),
    (5, ErrorCode.invalid_txn_state, ErrorCode.invalid_txn_state),
])
def test_txn_offset_commit_handler_verification_errors(version, verify, expected):
    state = make_state()
    state.topics.create(T, num_partitions=1)
    state.transactions = FakeTransactions(verify=verify)
    resp = txn_offset_commit.handle_txn_offset_commit(context(state, 28, version), _txn_offset_commit_request(version))
    assert _errors(resp) == {(T, 0): expected}
    assert state.groups.pending_transactional_offsets(G, PID) == {}


def test_txn_offset_commit_handler_placement_and_unknown_topics():
    state = make_state(3)
    state.topics.create(T, num_partitions=1)
    owner = state.coordinator_for(G)
    other = next(n for n in state.nodes if n != owner)
    resp = txn_offset_commit.handle_txn_offset_commit(context(state, 28, 3, node_id=other), _txn_offset_commit_request(3))
    assert _errors(resp) == {(T, 0): ErrorCode.not_coordinator}
    resp = txn_offset_commit.handle_txn_offset_commit(
        context(state, 28, 3, node_id=other), _txn_offset_commit_request(3, topic="missing"))
    assert _errors(resp) == {("missing", 0): ErrorCode.unknown_topic_or_partition}
    resp = txn_offset_commit.handle_txn_offset_commit(context(state, 28, 3, node_id=owner), _txn_offset_commit_request(3))
    # The coordinator knows no such transactional id: verification fails as in Kafka 4.4.0.
    assert _errors(resp) == {(T, 0): ErrorCode.invalid_producer_id_mapping}
    assert not state.groups.pending_transactional_offsets(G, PID)


def test_with_transaction_coordinator_model():
    """End to end in the models: InitProducerId, AddOffsetsToTxn, TxnOffsetCommit (handler,
    TV1 verification), EndTxn(commit) and the coordinator's markers to the group side."""
    tc_module = pytest.importorskip("reference_impl.model.transaction_coordinator")
    state = make_state()
    state.topics.create(T, num_partitions=1)
    tc = tc_module.TransactionCoordinator(sorted(state.nodes), state.clock, state.config, state.topics, state.groups)
    state.transactions = tc
    init = tc.init_producer_id("tx", 60_000)
    assert init.error == NONE
    pid, epoch = init.producer_id, init.producer_epoch

    def commit(offset):
        req = _txn_offset_commit_request(3)
        part = req.topics[0].partitions[0]
        topic = type(req.topics[0])(name=T, partitions=(type(part)(partition_index=0, committed_offset=offset,
                                                                     committed_leader_epoch=-1, committed_metadata=""),))
        req = type(req)(transactional_id="tx", group_id=G, producer_id=pid, producer_epoch=epoch, generation_id=-1,
                        member_id="", group_instance_id=None, topics=(topic,))
        return _errors(txn_offset_commit.handle_txn_offset_commit(context(state, 28, 3), req))

    # Without AddOffsetsToTxn the verification fails (TRANSACTION_ABORTABLE read as INVALID_TXN_STATE at v3).
    assert commit(5) == {(T, 0): ErrorCode.invalid_txn_state}
    assert tc.add_offsets("tx", pid, epoch, G) == NONE
    assert commit(5) == {(T, 0): NONE}
    assert fetch(state.groups, stable=True) == {0: (-1, UNSTABLE)}
    assert tc.end_txn("tx", pid, epoch, True).error == NONE
    state.clock.advance(1)
    tc.tick()
    assert fetch(state.groups, stable=True) == {0: (5, NONE)}
