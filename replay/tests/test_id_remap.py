"""IdRemap on small hand-made requests and responses (no I/O)."""

from __future__ import annotations

import datetime
import uuid

from kio.schema.errors import ErrorCode

from reference_impl.protocol import framing, payloads
from reference_impl.protocol import records as rec
from replay.id_remap import IdRemap, with_producer
from replay.replayer import coordinator_key, first_partition, plan_trace, retriable_error
from replay.replayer import merge_responses, split_request

T0 = datetime.timedelta(0)


def req(key: int, version: int, **fields):
    return payloads.build(framing.request_schema(key, version), **fields)


def resp(key: int, version: int, **fields):
    return payloads.build(framing.response_schema(key, version), **fields)


def nreq(key: int, version: int, cls_name: str, /, **fields):
    return payloads.build(payloads.nested(framing.request_schema(key, version), cls_name), **fields)


def nresp(key: int, version: int, cls_name: str, /, **fields):
    return payloads.build(payloads.nested(framing.response_schema(key, version), cls_name), **fields)


def init_pid(pid: int, epoch: int, error: int = 0):
    return resp(22, 4, throttle_time=T0, error_code=ErrorCode(error), producer_id=pid, producer_epoch=epoch)


def learned_producer(m: IdRemap, recorded=(7, 0), target=(1007, 3)) -> None:
    m.learn(22, req(22, 4, transactional_id="tx", transaction_timeout=datetime.timedelta(seconds=60),
                    producer_id=-1, producer_epoch=-1), init_pid(*recorded), init_pid(*target))


def test_producer_pair_learned_from_init_producer_id_and_rewritten_everywhere() -> None:
    m = IdRemap()
    learned_producer(m)
    end = req(26, 3, transactional_id="tx", producer_id=7, producer_epoch=0, committed=True)
    rw = m.rewrite(26, end)
    assert (rw.request.producer_id, rw.request.producer_epoch) == (1007, 3)
    assert rw.changes == ["producer 7/0->1007/3"] and rw.unmapped == []
    # v3-and-below field names of AddPartitionsToTxn
    add = req(24, 3, v3_and_below_transactional_id="tx", v3_and_below_producer_id=7, v3_and_below_producer_epoch=0,
              v3_and_below_topics=())
    out = m.rewrite(24, add).request
    assert (out.v3_and_below_producer_id, out.v3_and_below_producer_epoch) == (1007, 3)
    # the rewritten request still encodes
    framing.encode_request(out, 1)


def test_failed_init_producer_id_teaches_nothing() -> None:
    m = IdRemap()
    learned_producer(m, (7, 0), (-1, -1))
    m.learn(22, None, init_pid(8, 0), init_pid(9, 0, error=51))
    assert m.producers == {}
    rw = m.rewrite(26, req(26, 3, transactional_id="tx", producer_id=8, producer_epoch=0, committed=True))
    assert rw.request.producer_id == 8
    assert [u.kind for u in rw.unmapped] == ["producer"]


def test_epoch_bump_without_a_learned_pair_is_shifted() -> None:
    m = IdRemap()
    learned_producer(m, (7, 0), (1007, 3))
    assert m.producer(7, 2) == (1007, 5)
    # KIP-890: EndTxn v5 returns the bumped epoch, learned as an exact pair
    m.learn(26, None, resp(26, 5, throttle_time=T0, error_code=ErrorCode.none, producer_id=7, producer_epoch=1),
            resp(26, 5, throttle_time=T0, error_code=ErrorCode.none, producer_id=1007, producer_epoch=9))
    assert m.producer(7, 1) == (1007, 9)


def produce_request(batches: bytes, version: int = 9):
    pd = nreq(0, version, "PartitionProduceData", index=0, records=batches)
    td = nreq(0, version, "TopicProduceData", name="t", partition_data=(pd,))
    return req(0, version, transactional_id="tx", acks=-1, timeout=datetime.timedelta(seconds=30), topic_data=(td,))


def test_record_batches_get_the_target_producer_and_a_valid_crc() -> None:
    m = IdRemap()
    learned_producer(m)
    b1 = rec.build_batch([rec.NewRecord(value=b"a"), rec.NewRecord(value=b"b")], producer_id=7, producer_epoch=0,
                         base_sequence=4, transactional=True)
    b2 = rec.build_batch([rec.NewRecord(value=b"c")], producer_id=-1, producer_epoch=-1, base_sequence=-1)
    rw = m.rewrite(0, produce_request(b1 + b2))
    data = rw.request.topic_data[0].partition_data[0].records
    d1, d2 = rec.decode_batches(data)  # verify=True: the CRCs hold
    assert (d1.header.producer_id, d1.header.producer_epoch, d1.header.base_sequence) == (1007, 3, 4)
    assert d1.header.is_transactional and [r.value for r in d1.records] == [b"a", b"b"]
    assert d2.header.producer_id == -1 and bytes(data[len(b1):]) == b2
    frame = framing.encode_request(rw.request, 5)
    assert framing.decode_request(frame[4:]).body == rw.request


def test_unmapped_batch_producer_is_reported_and_left_alone() -> None:
    m = IdRemap()
    b = rec.build_batch([rec.NewRecord(value=b"a")], producer_id=42, producer_epoch=1, base_sequence=0)
    rw = m.rewrite(0, produce_request(b))
    assert rw.request.topic_data[0].partition_data[0].records == b
    assert {(u.kind, u.value) for u in rw.unmapped} == {("producer", "42/1")}
    assert not rw.changed


def test_with_producer_recomputes_crc() -> None:
    b = rec.build_batch([rec.NewRecord(value=b"x")], producer_id=1, producer_epoch=0, base_sequence=0)
    nb = with_producer(b, 99, 5)
    assert rec.check_crc(nb) and not rec.check_crc(nb[:17] + b[17:21] + nb[21:])
    h = rec.parse_batch_header(nb)
    assert (h.producer_id, h.producer_epoch) == (99, 5)


def join_response(member: str, generation: int, error: int = 0):
    return resp(11, 7, throttle_time=T0, error_code=ErrorCode(error), generation_id=generation, protocol_type="consumer",
                protocol_name="range", leader=member, member_id=member, members=())


def test_classic_group_member_and_generation() -> None:
    m = IdRemap()
    join = req(11, 7, group_id="g", session_timeout=datetime.timedelta(seconds=10),
               rebalance_timeout=datetime.timedelta(seconds=10), member_id="", group_instance_id=None,
               protocol_type="consumer", protocols=())
    # MEMBER_ID_REQUIRED answers carry the assigned id too
    m.learn(11, join, join_response("rdkafka-aaa", -1, 79), join_response("rdkafka-bbb", -1, 79))
    m.learn(11, join, join_response("rdkafka-aaa", 3), join_response("rdkafka-bbb", 1))
    assert m.members == {"rdkafka-aaa": "rdkafka-bbb"}
    hb = req(12, 4, group_id="g", generation_id=3, member_id="rdkafka-aaa", group_instance_id=None)
    out = m.rewrite(12, hb).request
    assert (out.generation_id, out.member_id) == (1, "rdkafka-bbb")
    commit = req(8, 9, group_id="g", generation_id_or_member_epoch=3, member_id="rdkafka-aaa",
                 group_instance_id=None, topics=())
    out = m.rewrite(8, commit).request
    assert (out.generation_id_or_member_epoch, out.member_id) == (1, "rdkafka-bbb")
    # another group's generation 3 is not this one's
    other = m.rewrite(12, req(12, 4, group_id="h", generation_id=3, member_id="x", group_instance_id=None)).request
    assert other.generation_id == 3
    # -1 (no generation) is never mapped
    assert m.rewrite(12, req(12, 4, group_id="g", generation_id=-1, member_id="", group_instance_id=None)).request.generation_id == -1


def share_heartbeat_response(member: str, epoch: int):
    return resp(76, 1, throttle_time=T0, error_code=ErrorCode.none, error_message=None, member_id=member,
                member_epoch=epoch, heartbeat_interval=datetime.timedelta(seconds=5), assignment=None)


def test_share_member_epochs_and_client_chosen_session_epochs() -> None:
    m = IdRemap()
    hb = req(76, 1, group_id="sg", member_id="m1", member_epoch=0, rack_id=None, subscribed_topic_names=("t",))
    m.learn(76, hb, share_heartbeat_response("m1", 5), share_heartbeat_response("m1", 2))
    out = m.rewrite(76, req(76, 1, group_id="sg", member_id="m1", member_epoch=5, rack_id=None,
                            subscribed_topic_names=None)).request
    assert out.member_epoch == 2
    assert m.rewrite(76, hb).request.member_epoch == 0  # joining epoch stays 0
    leave = m.rewrite(76, req(76, 1, group_id="sg", member_id="m1", member_epoch=-1, rack_id=None,
                              subscribed_topic_names=None)).request
    assert leave.member_epoch == -1
    sf = req(78, 1, group_id="sg", member_id="m1", share_session_epoch=3, max_wait=T0, min_bytes=1, max_bytes=1,
             max_records=1, batch_size=1, topics=(), forgotten_topics_data=())
    assert m.rewrite(78, sf).request.share_session_epoch == 3


def metadata_response(name: str, tid: uuid.UUID, leader_epoch: int = 0):
    part = nresp(3, 12, "MetadataResponsePartition", error_code=ErrorCode.none, partition_index=0, leader_id=1,
                 leader_epoch=leader_epoch, replica_nodes=(1,), isr_nodes=(1,), offline_replicas=())
    topic = nresp(3, 12, "MetadataResponseTopic", error_code=ErrorCode.none, name=name, topic_id=tid,
                  is_internal=False, partitions=(part,), topic_authorized_operations=-2147483648)
    return resp(3, 12, throttle_time=T0, brokers=(), cluster_id="c", controller_id=1, topics=(topic,))


def fetch_request(tid: uuid.UUID, leader_epoch: int = 0, session_id: int = 0):
    p = nreq(1, 13, "FetchPartition", partition=0, current_leader_epoch=leader_epoch, fetch_offset=5,
             last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1000)
    t = nreq(1, 13, "FetchTopic", topic_id=tid, partitions=(p,))
    return req(1, 13, replica_id=-1, max_wait=T0, min_bytes=1, max_bytes=1000, isolation_level=1,
               session_id=session_id, session_epoch=1 if session_id else -1, topics=(t,), forgotten_topics_data=(),
               rack_id="")


def test_topic_ids_and_leader_epochs_from_metadata() -> None:
    m = IdRemap()
    rid, tid = uuid.uuid4(), uuid.uuid4()
    m.learn(3, None, metadata_response("t", rid, 4), metadata_response("t", tid, 0))
    rw = m.rewrite(1, fetch_request(rid, leader_epoch=4))
    topic = rw.request.topics[0]
    assert topic.topic_id == tid
    assert topic.partitions[0].current_leader_epoch == 0  # shifted by target - recorded
    stale = m.rewrite(1, fetch_request(rid, leader_epoch=3)).request.topics[0].partitions[0]
    assert stale.current_leader_epoch == -1  # a stale epoch stays stale


def test_unknown_topic_id_is_reported_with_its_recorded_name() -> None:
    m = IdRemap()
    rid = uuid.uuid4()
    m.learn_recorded_topics(metadata_response("orders", rid))
    rw = m.rewrite(1, fetch_request(rid))
    assert [(u.kind, u.topic_name) for u in rw.unmapped] == [("topic_id", "orders")]
    new = uuid.uuid4()
    m.learn_target_topic("orders", new)
    assert m.rewrite(1, fetch_request(rid)).request.topics[0].topic_id == new


def test_fetch_session_ids() -> None:
    m = IdRemap()
    def fresp(sid):
        return resp(1, 13, throttle_time=T0, error_code=ErrorCode.none, session_id=sid, responses=())
    m.learn(1, None, fresp(77), fresp(12))
    assert m.rewrite(1, fetch_request(uuid.UUID(int=0), session_id=77)).request.session_id == 12


def test_unchanged_request_is_the_same_object() -> None:
    m = IdRemap()
    learned_producer(m)
    r = req(18, 3, client_software_name="x", client_software_version="1")
    rw = m.rewrite(18, r)
    assert rw.request is r and not rw.changed


# --- routing keys, retry decisions, planning (pure parts of the replayer) ------------------------


def test_routing_keys() -> None:
    assert coordinator_key(26, req(26, 3, transactional_id="tx", producer_id=1, producer_epoch=0,
                                   committed=True)) == (1, "tx")
    assert coordinator_key(22, req(22, 4, transactional_id=None, transaction_timeout=T0, producer_id=-1,
                                   producer_epoch=-1)) is None
    assert coordinator_key(12, req(12, 4, group_id="g", generation_id=1, member_id="m",
                                   group_instance_id=None)) == (0, "g")
    rid = uuid.uuid4()
    assert first_partition(fetch_request(rid)) == (None, rid, 0)
    b = rec.build_batch([rec.NewRecord(value=b"a")])
    assert first_partition(produce_request(b)) == ("t", None, 0)


def test_retry_only_whole_retriable_failures_the_recording_did_not_have() -> None:
    def end(code):
        return resp(26, 3, throttle_time=T0, error_code=ErrorCode(code))
    assert retriable_error(end(0), end(16)) == 16
    assert retriable_error(end(16), end(16)) is None  # the client saw it too (and retried itself)
    assert retriable_error(end(0), end(48)) is None
    def add(*codes):
        parts = tuple(nresp(24, 3, "AddPartitionsToTxnPartitionResult", partition_index=i,
                            partition_error_code=ErrorCode(c)) for i, c in enumerate(codes))
        topic = nresp(24, 3, "AddPartitionsToTxnTopicResult", name="t", results_by_partition=parts)
        return resp(24, 3, throttle_time=T0, results_by_topic_v3_and_below=(topic,))
    assert retriable_error(add(0, 0), add(51, 51)) == 51
    assert retriable_error(add(0, 0), add(0, 51)) is None  # partial success: never resent


def row(seq, conn, req_ns, resp_ns, status="ok"):
    return {"kind": "exchange", "seq": seq, "connection_id": conn, "api_key": 18, "api_version": 3,
            "correlation_id": seq, "status": status, "upstream": "u:1", "request_mono_ns": req_ns,
            "response_mono_ns": resp_ns, "request_bytes": None, "response_bytes": None, "decode_error": None,
            "payloads": "keep", "gap_count": None, "gap_reason": None}


def test_happens_before_dependencies() -> None:
    plan = plan_trace([
        row(1, 1, 10, 20), row(2, 2, 15, 40), row(3, 1, 25, 30), row(4, 2, 45, 50), row(5, 1, 35, 60),
        {**row(6, 3, 5, None, "no_response_expected")},
        {"kind": "gap", "gap_count": 2, "gap_reason": "x", **{k: None for k in ("seq", "connection_id")}},
    ])
    c1, c2, c3 = plan.connections[1], plan.connections[2], plan.connections[3]
    assert [x.seq for x in c1] == [1, 3, 5]
    deps = {x.seq: dict(x.deps) for x in c1 + c2 + c3}
    assert deps[1] == {3: 1}  # after the acks=0 request of conn 3 (sent at 5)
    assert deps[2] == {3: 1}  # conn 1's first response came at 20 > 15: not a dependency
    assert deps[4] == {1: 2, 3: 1}  # responses at 20 and 30 precede 45
    assert deps[3] == {3: 1} and deps[5] == {3: 1}  # conn 2's response at 40 is after 25 and 35
    assert plan.gaps == [(2, "x")] and plan.total == 6
    assert all(x.skip_reason for x in c1)  # no request bytes in this hand-made trace


def produce_response(*parts):
    """parts: (topic, partition, base_offset)."""
    topics: dict[str, list] = {}
    for t, p, off in parts:
        topics.setdefault(t, []).append(nresp(0, 9, "PartitionProduceResponse", index=p, error_code=ErrorCode.none,
                                              base_offset=off, log_append_time=None, log_start_offset=0,
                                              record_errors=(), error_message=None))
    return resp(0, 9, responses=tuple(nresp(0, 9, "TopicProduceResponse", name=t, partition_responses=tuple(ps))
                                      for t, ps in topics.items()), throttle_time=T0)


def test_split_by_leader_and_merge_in_request_order() -> None:
    b = rec.build_batch([rec.NewRecord(value=b"a")])
    def pd(i):
        return nreq(0, 9, "PartitionProduceData", index=i, records=b)
    body = req(0, 9, transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30), topic_data=(
        nreq(0, 9, "TopicProduceData", name="a", partition_data=(pd(0), pd(1), pd(2))),
        nreq(0, 9, "TopicProduceData", name="b", partition_data=(pd(0),))))
    leaders = {("a", 0): 1, ("a", 1): 2, ("a", 2): 1, ("b", 0): 2}
    parts = split_request(0, body, lambda t, p: leaders[(t.name, p)])
    assert set(parts) == {1, 2}
    assert [(t.name, [p.index for p in t.partition_data]) for t in parts[1].topic_data] == [("a", [0, 2])]
    assert [(t.name, [p.index for p in t.partition_data]) for t in parts[2].topic_data] == [("a", [1]), ("b", [0])]
    assert all(p.acks == -1 for p in parts.values())
    assert split_request(0, body, lambda t, p: None) is None  # a leader unknown: not split
    # the sub-responses, answered out of order, merge back in the request's order
    merged = merge_responses(0, [produce_response(("a", 2, 20), ("a", 0, 10)),
                                 produce_response(("b", 0, 5), ("a", 1, 11))], body)
    assert [(t.name, [(p.index, p.base_offset) for p in t.partition_responses]) for t in merged.responses] == \
        [("a", [(0, 10), (1, 11), (2, 20)]), ("b", [(0, 5)])]
    framing.encode_response(merged, 3)  # still a valid response
