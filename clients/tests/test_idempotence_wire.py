"""Idempotent produce over the wire: the reference broker with per-partition producer state.

The producer state is wired here through `TopicRegistry.producer_state_factory` (the
broker's default wiring is the lead's); producer ids are fixed numbers (InitProducerId is
another piece). Raw client only: a real client would hide retries and sequence numbers.
"""

from __future__ import annotations

import datetime
import uuid

import pytest
from kio.schema.errors import ErrorCode

from clients import wire
from reference_impl.client.raw_client import ClusterClient, RawClient
from reference_impl.model.producer_state import ProducerStateManager
from reference_impl.protocol import framing, payloads
from reference_impl.protocol import records as r
from reference_impl.protocol.records import NewRecord
from reference_impl.server.broker_server import ThreadedReferenceCluster
from reference_impl.protocol.api_keys import ApiKey

TS = 1_700_000_000_000
DESCRIBE_PRODUCERS = ApiKey.DESCRIBE_PRODUCERS


@pytest.fixture(scope="module")
def cluster():
    with ThreadedReferenceCluster(brokers=3) as c:
        c.cluster.state.topics.producer_state_factory = lambda topic, partition: ProducerStateManager()
        yield c


@pytest.fixture()
def cc(cluster):
    with ClusterClient(cluster.bootstrap_servers) as client:
        yield client


_pids = iter(range(1000, 2000))


@pytest.fixture()
def pid() -> int:
    return next(_pids)


@pytest.fixture()
def topic(cc: ClusterClient) -> str:
    name = f"idem-{uuid.uuid4().hex[:8]}"
    assert wire.create_topic(cc, name, partitions=1, replication=1) == 0
    return name


def batch(pid: int, seq: int, n: int = 1, epoch: int = 0, ts: int = TS) -> bytes:
    return r.build_batch(
        [NewRecord(value=f"{pid}-{epoch}-{seq + i}".encode(), timestamp=ts) for i in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def log_end(cc: ClusterClient, leader: RawClient, topic: str) -> int:
    return int(wire.list_offset(leader, topic, 0, -1).offset)


def fetched_values(cc: ClusterClient, leader: RawClient, topic: str) -> list[bytes]:
    part = wire.fetch(cc, leader, topic, 0, 0)
    assert part.error_code == ErrorCode.none
    return [rec.value for rec in r.iter_records(part.records)]


def describe_producers(client: RawClient, topic: str, partitions: tuple[int, ...] = (0,)) -> tuple:
    cls = framing.request_schema(DESCRIBE_PRODUCERS, 0)
    resp = client.send(
        payloads.build(
            cls,
            topics=(payloads.build(payloads.nested(cls, "TopicRequest"), name=topic, partition_indexes=partitions),),
        )
    )
    assert len(resp.topics) == 1 and resp.topics[0].name == topic
    return resp.topics[0].partitions


def test_retried_batch_is_deduplicated(cc: ClusterClient, topic: str, pid: int) -> None:
    leader = cc.leader_for(topic, 0)
    first = wire.produce(leader, topic, 0, batch(pid, 0, 3))
    assert (first.error_code, first.base_offset) == (ErrorCode.none, 0)
    again = wire.produce(leader, topic, 0, batch(pid, 0, 3))  # the retry of a lost response
    assert (again.error_code, again.base_offset) == (ErrorCode.none, 0)
    # Kafka answers a duplicate with the cached (max) timestamp of the original batch.
    assert again.log_append_time == datetime.datetime.fromtimestamp(TS / 1000, datetime.timezone.utc)
    assert log_end(cc, leader, topic) == 3
    nxt = wire.produce(leader, topic, 0, batch(pid, 3, 2))
    assert (nxt.error_code, nxt.base_offset) == (ErrorCode.none, 3)
    values = fetched_values(cc, leader, topic)
    assert values == [f"{pid}-0-{i}".encode() for i in range(5)]  # one copy each, in order


def test_only_the_last_five_batches_are_recognised(cc: ClusterClient, topic: str, pid: int) -> None:
    leader = cc.leader_for(topic, 0)
    for seq in range(6):
        assert wire.produce(leader, topic, 0, batch(pid, seq)).base_offset == seq
    assert wire.produce(leader, topic, 0, batch(pid, 1)).base_offset == 1  # 5th newest: duplicate
    old = wire.produce(leader, topic, 0, batch(pid, 0))  # 6th newest: out of the window
    assert old.error_code == ErrorCode.out_of_order_sequence_number
    assert log_end(cc, leader, topic) == 6


def test_sequence_gap_is_out_of_order(cc: ClusterClient, topic: str, pid: int) -> None:
    leader = cc.leader_for(topic, 0)
    assert wire.produce(leader, topic, 0, batch(pid, 0, 5)).error_code == ErrorCode.none
    gap = wire.produce(leader, topic, 0, batch(pid, 7))
    assert gap.error_code == ErrorCode.out_of_order_sequence_number == 45
    assert gap.base_offset == -1 and log_end(cc, leader, topic) == 5
    assert wire.produce(leader, topic, 0, batch(pid, 5)).base_offset == 5


def test_stale_epoch_is_rejected(cc: ClusterClient, topic: str, pid: int) -> None:
    leader = cc.leader_for(topic, 0)
    assert wire.produce(leader, topic, 0, batch(pid, 0, epoch=0)).error_code == ErrorCode.none
    assert wire.produce(leader, topic, 0, batch(pid, 0, epoch=1)).error_code == ErrorCode.none
    stale = wire.produce(leader, topic, 0, batch(pid, 1, epoch=0))
    assert stale.error_code == ErrorCode.invalid_producer_epoch == 47
    assert log_end(cc, leader, topic) == 2


def test_new_epoch_must_start_at_zero(cc: ClusterClient, topic: str, pid: int) -> None:
    leader = cc.leader_for(topic, 0)
    assert wire.produce(leader, topic, 0, batch(pid, 0, 2, epoch=0)).error_code == ErrorCode.none
    bumped = wire.produce(leader, topic, 0, batch(pid, 2, epoch=1))
    assert bumped.error_code == ErrorCode.out_of_order_sequence_number == 45
    assert wire.produce(leader, topic, 0, batch(pid, 0, epoch=1)).base_offset == 2


def test_describe_producers_lists_the_producer(cc: ClusterClient, topic: str, pid: int) -> None:
    leader = cc.leader_for(topic, 0)
    wire.produce(leader, topic, 0, batch(pid, 0, 3, epoch=2, ts=TS + 5))
    wire.produce(leader, topic, 0, batch(pid + 500, 0, 1, ts=TS + 6))
    (part,) = describe_producers(leader, topic)
    assert part.error_code == ErrorCode.none and part.partition_index == 0
    got = {int(p.producer_id): p for p in part.active_producers}
    assert set(got) == {pid, pid + 500}
    me = got[pid]
    assert (me.producer_epoch, me.last_sequence, me.last_timestamp) == (2, 2, TS + 5)
    assert (me.coordinator_epoch, me.current_txn_start_offset) == (-1, -1)
    assert got[pid + 500].last_sequence == 0

    missing = describe_producers(leader, topic, (5,))
    assert [(p.partition_index, p.error_code) for p in missing] == [(5, ErrorCode.unknown_topic_or_partition)]
    assert describe_producers(leader, f"nope-{pid}")[0].error_code == ErrorCode.unknown_topic_or_partition
    # With replication factor 1 on 3 brokers, the other two nodes are not replicas.
    md = cc.refresh([topic])
    leader_id = int(next(t for t in md.topics if t.name == topic).partitions[0].leader_id)
    other = next(n for n in cc.nodes if n != leader_id)
    (not_here,) = describe_producers(cc.node(other), topic)
    assert not_here.error_code == ErrorCode.not_leader_or_follower and not_here.active_producers == ()


def test_non_idempotent_batches_are_appended_twice(cc: ClusterClient, topic: str) -> None:
    leader = cc.leader_for(topic, 0)
    plain = r.build_batch([NewRecord(value=b"x", timestamp=TS)])
    assert wire.produce(leader, topic, 0, plain).base_offset == 0
    assert wire.produce(leader, topic, 0, plain).base_offset == 1
    (part,) = describe_producers(leader, topic)
    assert part.active_producers == ()
