"""Pure tests of the reference share consumer: membership state machine, acknowledgement
batching, share sessions, acquired-record extraction, and the consumer's rules over a
scripted in-memory cluster (no sockets)."""

from __future__ import annotations

import base64
import datetime
import uuid
from types import SimpleNamespace as NS

import pytest

from reference_impl.client.share_consumer import (
    AckBatch,
    AcknowledgeType,
    FetchBuffer,
    IllegalShareStateError,
    ShareConsumer,
    ShareRecord,
    ShareSession,
    UnsupportedShareVersionError,
    acquired_share_records,
    coalesce_acks,
    expand_ack_batches,
    next_session_epoch,
)
from reference_impl.client.share_membership import (
    HeartbeatOutcome,
    MemberState,
    ShareGroupError,
    ShareMembership,
    new_member_id,
)
from reference_impl.protocol import records
from kio.schema.errors import ErrorCode

TID = uuid.UUID("11111111-2222-3333-4444-555555555555")


# -- membership ------------------------------------------------------------------------------


def test_member_id_is_kafka_base64_uuid():
    mid = new_member_id()
    assert len(mid) == 22 and "=" not in mid
    assert len(base64.urlsafe_b64decode(mid + "==")) == 16
    assert new_member_id() != mid


def test_join_heartbeat_then_stable_with_assignment():
    m = ShareMembership("g")
    assert not m.heartbeat_due(0)
    m.subscribe(["b", "a"])
    assert m.state is MemberState.JOINING and m.heartbeat_due(0)
    hb = m.build_heartbeat()
    assert hb["member_epoch"] == 0 and hb["subscribed_topic_names"] == ("a", "b") and hb["member_id"] == m.member_id
    m.on_heartbeat_sent(0)
    assert not m.heartbeat_due(0)  # in flight
    out = m.on_heartbeat_response(0, m.member_id, 1, 5000, {})
    assert out is HeartbeatOutcome.OK and m.state is MemberState.STABLE and m.member_epoch == 1
    assert m.assignment == {}
    assert not m.heartbeat_due(4999) and m.heartbeat_due(5000)
    assert m.ms_until_heartbeat(1000) == 4000
    # steady-state heartbeat: current epoch, names omitted (unchanged)
    hb = m.build_heartbeat()
    assert hb["member_epoch"] == 1 and hb["subscribed_topic_names"] is None
    m.on_heartbeat_sent(5000)
    m.on_heartbeat_response(0, None, 2, 5000, {TID: frozenset({0, 1})})
    assert m.assigned_partitions() == {(TID, 0), (TID, 1)} and m.member_epoch == 2
    # null assignment = unchanged
    m.on_heartbeat_sent(10000)
    m.on_heartbeat_response(0, None, 2, 5000, None)
    assert m.assigned_partitions() == {(TID, 0), (TID, 1)}


def test_subscription_change_resends_names():
    m = ShareMembership("g")
    m.subscribe(["a"])
    m.on_heartbeat_sent(0)
    m.on_heartbeat_response(0, None, 1, 5000, None)
    m.subscribe(["a", "c"])
    assert m.heartbeat_due(1)
    assert m.build_heartbeat()["subscribed_topic_names"] == ("a", "c")


def test_fenced_rejoins_with_same_member_id_and_epoch_zero():
    m = ShareMembership("g")
    m.subscribe(["a"])
    m.on_heartbeat_sent(0)
    m.on_heartbeat_response(0, None, 3, 5000, {TID: frozenset({0})})
    mid = m.member_id
    m.on_heartbeat_sent(5000)
    assert m.on_heartbeat_response(110, None, 0, 0, None) is HeartbeatOutcome.FENCED
    assert m.state is MemberState.FENCED and m.assignment == {}
    hb = m.build_heartbeat()
    assert hb["member_epoch"] == 0 and hb["member_id"] == mid and hb["subscribed_topic_names"] == ("a",)
    assert m.heartbeat_due(5001)


def test_coordinator_errors_ask_for_rediscovery_and_fatal_raises():
    m = ShareMembership("g")
    m.subscribe(["a"])
    m.on_heartbeat_sent(0)
    assert m.on_heartbeat_response(16, None, 0, 0, None) is HeartbeatOutcome.FIND_COORDINATOR
    assert m.state is MemberState.JOINING and m.heartbeat_due(1)
    m.on_heartbeat_sent(1)
    with pytest.raises(ShareGroupError) as e:
        m.on_heartbeat_response(42, None, 0, 0, None, "bad")
    assert e.value.error_code == ErrorCode.invalid_request and m.state is MemberState.FATAL


def test_leave_sends_epoch_minus_one():
    m = ShareMembership("g")
    m.subscribe(["a"])
    m.on_heartbeat_sent(0)
    m.on_heartbeat_response(0, None, 4, 5000, {TID: frozenset({0})})
    m.leave()
    assert m.state is MemberState.LEAVING and m.heartbeat_due(1)
    hb = m.build_heartbeat()
    assert hb["member_epoch"] == -1 and hb["subscribed_topic_names"] is None
    m.on_heartbeat_sent(1)
    m.on_heartbeat_response(0, None, -1, 0, None)
    assert m.state is MemberState.LEFT and m.assignment == {}
    assert [t.to_state for t in m.transitions] == [MemberState.JOINING, MemberState.STABLE, MemberState.LEAVING, MemberState.LEFT]


def test_leave_before_join_is_local():
    m = ShareMembership("g")
    m.leave()
    assert m.state is MemberState.LEFT and not m.heartbeat_due(0)


# -- acknowledgement batches, sessions, buffer --------------------------------------------------


def test_coalesce_acks():
    acks = {5: 1, 6: 1, 7: 1, 9: 2, 10: 3, 11: 0}
    batches = coalesce_acks(acks)
    assert batches == [AckBatch(5, 7, (1,)), AckBatch(9, 11, (2, 3, 0))]
    assert expand_ack_batches(batches) == acks
    assert coalesce_acks({}) == []


def test_session_epochs_and_incremental_lists():
    s = ShareSession(1)
    assigned = {(TID, 0), (TID, 1)}
    listed, forgotten = s.plan(assigned, {(TID, 0): {3: 1}})
    assert set(listed) == assigned and all(v == {} for v in listed.values()) and forgotten == set()  # no acks on epoch 0
    s.on_response(0)
    assert s.epoch == 1 and s.partitions == assigned
    listed, forgotten = s.plan({(TID, 1), (TID, 2)}, {(TID, 1): {3: 1}})
    assert listed == {(TID, 2): {}, (TID, 1): {3: 1}} and forgotten == {(TID, 0)}
    s.on_response(0)
    assert s.epoch == 2 and s.partitions == {(TID, 1), (TID, 2)}
    s.on_acknowledge_response(0)
    assert s.epoch == 3
    s.plan({(TID, 1)}, {})
    s.on_response(123)  # INVALID_SHARE_SESSION_EPOCH
    assert s.epoch == 0 and s.partitions == set()
    assert next_session_epoch(2**31 - 1) == 1 and next_session_epoch(-1) == -1


def rec(offset: int, topic: str = "t", partition: int = 0, count: int = 1) -> ShareRecord:
    return ShareRecord(topic, partition, offset, None, b"v", (), 0, count, TID, 1)


def test_fetch_buffer_rules():
    b = FetchBuffer()
    b.add([rec(0), rec(1)])
    assert not b.all_acknowledged()
    b.acknowledge("t", 0, 0, AcknowledgeType.RELEASE)
    assert [r.offset for r in b.unacknowledged()] == [1]
    with pytest.raises(IllegalShareStateError):
        b.acknowledge("t", 0, 7, AcknowledgeType.ACCEPT)
    b.acknowledge_all(AcknowledgeType.ACCEPT)
    taken = b.take_acknowledged()
    assert [(e.record.offset, e.ack) for e in taken] == [(0, AcknowledgeType.RELEASE), (1, AcknowledgeType.ACCEPT)]
    assert len(b) == 0


def test_acquired_records_only_and_gaps():
    batch = records.build_batch([records.NewRecord(value=b"a", key=b"k"), records.NewRecord(value=b"b"), records.NewRecord(value=b"c")],
                                base_offset=10, timestamp_ms=1234)
    marker = records.build_control_batch(records.ControlType.COMMIT, producer_id=1, producer_epoch=0, base_offset=13)
    recs, gaps = acquired_share_records("t", 0, batch + marker, [(11, 14, 3)], topic_id=TID, leader_id=2)
    assert [(r.offset, r.value, r.delivery_count) for r in recs] == [(11, b"b", 3), (12, b"c", 3)]
    assert recs[0].timestamp == 1234 and recs[0].leader_id == 2
    assert gaps == [13, 14]
    assert acquired_share_records("t", 0, None, []) == ([], [])


# -- the consumer over a scripted cluster ---------------------------------------------------------


class FakeClient:
    def __init__(self, cluster: "FakeCluster", node: int) -> None:
        self.cluster, self.node_id = cluster, node

    def negotiate(self, api_key: int, highest: int | None = None) -> int | None:
        hi = self.cluster.share_version
        return None if hi is None else (hi if highest is None else min(hi, highest))

    def send(self, payload):
        key = int(payload.__api_key__)
        self.cluster.sent.append((key, int(payload.__version__), payload))
        return self.cluster.answer(key, payload)

    def close(self) -> None:
        pass


class FakeCluster:
    """One broker (node 1) leading topic t (1 partition) and coordinating the group."""

    def __init__(self, share_version: int | None = 2) -> None:
        self.share_version = share_version
        self.nodes = {1: ("fake", 1)}
        self._clients: dict[int, FakeClient] = {}
        self.bootstrap = FakeClient(self, 1)
        self.sent: list = []
        self.fetch_queue: list[tuple[bytes, list[tuple[int, int, int]]]] = []
        self.member_epoch = 0

    def refresh(self, topics=None):
        return NS(brokers=[NS(node_id=1, host="fake", port=1)],
                  topics=[NS(name="t", error_code=0, topic_id=TID, partitions=[NS(partition_index=0, leader_id=1)])])

    def find_coordinator(self, key, key_type=0):
        return 0, 1

    def node(self, node_id):
        return self._clients.setdefault(node_id, FakeClient(self, node_id))

    def close(self):
        pass

    def answer(self, key, req):
        if key == 76:
            if req.member_epoch == -1:
                return NS(error_code=0, error_message=None, member_id=req.member_id, member_epoch=-1, heartbeat_interval=datetime.timedelta(seconds=5), assignment=None)
            self.member_epoch += 1
            return NS(error_code=0, error_message=None, member_id=req.member_id, member_epoch=self.member_epoch,
                      heartbeat_interval=datetime.timedelta(seconds=5),
                      assignment=NS(topic_partitions=[NS(topic_id=TID, partitions=(0,))]))
        if key == 78:
            parts = []
            acked = {(t.topic_id, p.partition_index) for t in req.topics for p in p_list(t) if p.acknowledgement_batches}
            data, acquired = self.fetch_queue.pop(0) if self.fetch_queue and not getattr(req, "is_renew_ack", False) else (None, [])
            if data is not None or acked:
                parts.append(NS(partition_index=0, error_code=0, error_message=None, acknowledge_error_code=0, acknowledge_error_message=None,
                                records=data, acquired_records=[NS(first_offset=a, last_offset=b, delivery_count=c) for a, b, c in acquired]))
            return NS(error_code=0, error_message=None, acquisition_lock_timeout=datetime.timedelta(seconds=30),
                      responses=[NS(topic_id=TID, partitions=parts)] if parts else [], node_endpoints=[])
        if key == 79:
            return NS(error_code=0, error_message=None, acquisition_lock_timeout=datetime.timedelta(seconds=30),
                      responses=[NS(topic_id=t.topic_id, partitions=[NS(partition_index=p.partition_index, error_code=0, error_message=None) for p in t.partitions]) for t in req.topics],
                      node_endpoints=[])
        raise AssertionError(f"unexpected api {key}")


def p_list(t):
    return t.partitions


def batch(base: int, n: int) -> bytes:
    return records.build_batch([records.NewRecord(value=f"v{base + i}".encode()) for i in range(n)], base_offset=base)


def consumer(mode: str, fc: FakeCluster, **kw) -> ShareConsumer:
    c = ShareConsumer("fake:1", "g", mode, cluster=fc, **kw)
    c.subscribe(["t"])
    return c


def sent(fc: FakeCluster, key: int):
    return [p for k, _, p in fc.sent if k == key]


def test_implicit_poll_piggybacks_accepts_and_session_epochs():
    fc = FakeCluster()
    fc.fetch_queue = [(batch(0, 3), [(0, 2, 1)]), (batch(3, 1), [(3, 3, 1)])]
    events: list = []
    c = consumer("implicit", fc, history_hook=events.append)
    recs = c.poll(1000)
    assert [r.offset for r in recs] == [0, 1, 2] and c.member_epoch == 1 and c.assignment == {("t", 0)}
    with pytest.raises(IllegalShareStateError, match="Implicit"):
        c.acknowledge(recs[0])
    recs2 = c.poll(1000)
    assert [r.offset for r in recs2] == [3]
    fetches = sent(fc, 78)
    assert [f.share_session_epoch for f in fetches] == [0, 1]
    assert fetches[0].topics[0].partitions[0].acknowledgement_batches == ()
    ab = fetches[1].topics[0].partitions[0].acknowledgement_batches
    assert [(b.first_offset, b.last_offset, tuple(b.acknowledge_types)) for b in ab] == [(0, 2, (1,))]
    assert c.commit_sync() == {("t", 0): None}
    acks = sent(fc, 79)
    assert acks[-1].share_session_epoch == 2
    assert c.session_epochs == {1: 3}
    c.close()
    assert sent(fc, 79)[-1].share_session_epoch == -1
    assert sent(fc, 76)[-1].member_epoch == -1
    assert c.closed and c.member_state is MemberState.LEFT
    assert {e["api"] for e in events if e["type"] == "request"} >= {"ShareGroupHeartbeat", "ShareFetch", "ShareAcknowledge"}
    assert any(e["type"] == "membership" and e["to"] == "STABLE" for e in events)
    with pytest.raises(IllegalShareStateError, match="closed"):
        c.poll(0)


def test_explicit_poll_refuses_unacknowledged_and_callback_sees_results():
    fc = FakeCluster()
    fc.fetch_queue = [(batch(0, 3), [(0, 2, 1)])]
    c = consumer("explicit", fc)
    results: list = []
    c.set_acknowledgement_commit_callback(lambda offsets, exc: results.append((offsets, exc)))
    recs = c.poll(1000)
    c.acknowledge(recs[0], AcknowledgeType.ACCEPT)
    with pytest.raises(IllegalShareStateError, match="must be acknowledged"):
        c.poll(0)
    c.acknowledge(recs[1], AcknowledgeType.RELEASE)
    c.acknowledge(recs[2], AcknowledgeType.REJECT)
    got_async: list = []
    c.commit_async(lambda o, e: got_async.append((o, e)))
    assert not results  # queued, not sent
    c.poll(0)
    ab = sent(fc, 78)[-1].topics[0].partitions[0].acknowledgement_batches
    assert [(b.first_offset, b.last_offset, tuple(b.acknowledge_types)) for b in ab] == [(0, 2, (1, 2, 3))]
    assert results == [({("t", 0): {0, 1, 2}}, None)] and got_async == results
    with pytest.raises(ValueError):
        c.acknowledge(recs[0], AcknowledgeType.GAP)
    with pytest.raises(IllegalShareStateError):
        c.acknowledge(recs[0], AcknowledgeType.ACCEPT)  # no longer in flight


def test_gap_offsets_are_acknowledged_as_gap():
    fc = FakeCluster()
    fc.fetch_queue = [(batch(0, 2), [(0, 3, 1)])]
    c = consumer("implicit", fc)
    assert [r.offset for r in c.poll(1000)] == [0, 1]
    c.poll(0)
    ab = sent(fc, 78)[-1].topics[0].partitions[0].acknowledgement_batches
    assert [(b.first_offset, b.last_offset, tuple(b.acknowledge_types)) for b in ab] == [(0, 3, (1, 1, 0, 0))]


def test_renew_is_v2_only_zeroes_fetch_limits_and_returns_record_again():
    fc = FakeCluster(share_version=2)
    fc.fetch_queue = [(batch(0, 1), [(0, 0, 1)])]
    c = consumer("explicit", fc)
    r = c.poll(1000)[0]
    c.acknowledge(r, AcknowledgeType.RENEW)
    again = c.poll(0)
    req = sent(fc, 78)[-1]
    assert req.is_renew_ack and req.max_records == 0 and req.max_bytes == 0 and req.min_bytes == 0
    assert [x.offset for x in again] == [0]
    c.acknowledge(again[0], AcknowledgeType.ACCEPT)

    fc1 = FakeCluster(share_version=1)
    fc1.fetch_queue = [(batch(0, 1), [(0, 0, 1)])]
    c1 = consumer("explicit", fc1)
    r1 = c1.poll(1000)[0]
    with pytest.raises(UnsupportedShareVersionError):
        c1.acknowledge(r1, AcknowledgeType.RENEW)
    assert sent(fc1, 78)[0].__version__ == 1


def test_poll_without_subscription_and_bad_mode():
    with pytest.raises(ValueError):
        ShareConsumer("fake:1", "g", "auto", cluster=FakeCluster())
    c = ShareConsumer("fake:1", "g", cluster=FakeCluster())
    with pytest.raises(IllegalShareStateError, match="not subscribed"):
        c.poll(0)
    c.close()  # never joined: no leave heartbeat
    assert c.closed
