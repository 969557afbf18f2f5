"""KIP-447.FENCE.007: input partitions may move between transactional producers with
*different* transactional ids; exactly-once then rests on group fencing (TxnOffsetCommit
with the consumer's generation) and on the stable offset fetch (a new owner waits for
the previous owner's pending offsets), not on a transactional id tied to a partition.

Two consume-transform-produce workers (confluent-kafka, classic or consumer group protocol, read_committed,
`send_offsets_to_transaction(offsets, consumer_group_metadata())`) share one group: A runs
throughout; B is restarted three times, each time with a new transactional id, so every
join and leave moves partitions between A and a B incarnation. A feeder keeps writing the
input until the last B has left, so no worker can drain it early. The output, read at
read_committed, must hold every input record exactly once, per partition in input order.
"""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from clients import confluent
from conformance.suites import require_api
from conformance.suites.kip447 import CLASSIC, both_protocols, group_config, require_txn_offset_commit_v3
from reference_impl.protocol.api_keys import ApiKey

PARTITIONS = 3
FEED_INTERVAL_S = 0.05  # one record per partition per interval while the workers run
BATCH, TXN_PAUSE_S = 5, 0.05
B_ROUNDS, TXNS_PER_ROUND = 3, 2  # each B incarnation commits this many transactions, then leaves
IDLE_EXIT_S = 3.0
DEADLINE_S = 300.0
CALL_TIMEOUT_S = 30.0


class Worker(threading.Thread):
    """One consume-transform-produce loop; copies input partition p to output partition p."""

    def __init__(self, target, group: str, source: str, sink: str, tid: str, deadline: float,
                 protocol: str = CLASSIC) -> None:
        super().__init__(name=tid, daemon=True)
        self.target, self.group, self.source, self.sink, self.tid = target, group, source, sink, tid
        self.protocol = protocol
        self.deadline = deadline
        self.stop = threading.Event()  # finish the current transaction, then leave
        self.idle_exit = threading.Event()  # leave once the input is drained
        self.assignments: list[list[int]] = []
        self.assigned_at = 0.0  # monotonic time of the last partitions given (on_assign)
        self.committed_txns, self.aborted_txns, self.copied = 0, 0, 0
        self.ranges: list[tuple[int, int, int, float]] = []  # committed (partition, first, last offset, time)
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def _loop(self) -> None:
        consumer = Consumer(confluent.config(self.target, **{
            "group.id": self.group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "isolation.level": "read_committed", "max.poll.interval.ms": 20000,
            **group_config(self.protocol, **{"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}),
        }))
        producer = Producer(confluent.config(self.target, **{
            "transactional.id": self.tid, "transaction.timeout.ms": 20000, "linger.ms": 0}))
        try:
            producer.init_transactions(CALL_TIMEOUT_S)
            consumer.subscribe([self.source], on_assign=self._assigned)
            idle_since = time.monotonic()
            while not self.stop.is_set():
                if time.monotonic() > self.deadline:
                    raise TimeoutError(f"{self.tid} still running at the deadline")
                msgs = [m for m in consumer.consume(num_messages=BATCH, timeout=0.3) if not m.error()]
                if not msgs:
                    # Drained only once it owns every partition again: under the consumer
                    # protocol the last B's partitions come back on A's next heartbeat, up to
                    # group.consumer.heartbeat.interval.ms (5 s on Kafka) after B left, and a
                    # partition just given back is idle only IDLE_EXIT_S after it came.
                    quiet_since = max(idle_since, self.assigned_at)
                    if (self.idle_exit.is_set() and time.monotonic() - quiet_since > IDLE_EXIT_S
                            and len(consumer.assignment()) == PARTITIONS):
                        return
                    continue
                idle_since = time.monotonic()
                self._transaction(consumer, producer, msgs)
        finally:
            consumer.close()
            producer.flush(CALL_TIMEOUT_S)

    def _assigned(self, consumer: Consumer, partitions: list) -> None:
        self.assignments.append(sorted(p.partition for p in partitions))
        self.assigned_at = time.monotonic()

    def _transaction(self, consumer: Consumer, producer: Producer, msgs: list) -> None:
        producer.begin_transaction()
        try:
            for m in msgs:
                producer.produce(self.sink, value=m.value(), partition=m.partition())
            time.sleep(TXN_PAUSE_S)
            ends: dict[int, int] = {}
            for m in msgs:
                ends[m.partition()] = max(ends.get(m.partition(), 0), m.offset() + 1)
            offsets = [TopicPartition(self.source, p, o) for p, o in sorted(ends.items())]
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), CALL_TIMEOUT_S)
            producer.commit_transaction(CALL_TIMEOUT_S)
        except KafkaException as exc:
            if not exc.args[0].txn_requires_abort():
                raise
            producer.abort_transaction(CALL_TIMEOUT_S)
            self.aborted_txns += 1
            self._rewind(consumer)
            return
        self.committed_txns += 1
        self.copied += len(msgs)
        for p in sorted({m.partition() for m in msgs}):
            offs = [m.offset() for m in msgs if m.partition() == p]
            self.ranges.append((p, min(offs), max(offs), round(time.monotonic(), 2)))

    def _rewind(self, consumer: Consumer) -> None:
        """After an abort, resume each partition still held from its committed offset."""
        assigned = consumer.assignment()
        if not assigned:
            return
        for tp in consumer.committed(assigned, timeout=CALL_TIMEOUT_S):
            consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))


class Feeder(threading.Thread):
    """Writes `p:i` to every input partition p every FEED_INTERVAL_S until stopped."""

    def __init__(self, target, topic: str) -> None:
        super().__init__(name=f"feed-{topic}", daemon=True)
        self.target, self.topic = target, topic
        self.values: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            producer = Producer(confluent.config(self.target, **{"enable.idempotence": True, "linger.ms": 0}))
            i = 0
            while not self.stop.wait(FEED_INTERVAL_S):
                for p in range(PARTITIONS):
                    value = f"{p}:{i}".encode()
                    producer.produce(self.topic, value=value, partition=p)
                    self.values[p].append(value)
                producer.poll(0)
                i += 1
            if producer.flush(CALL_TIMEOUT_S) != 0:
                raise TimeoutError("the feeder's records were not all delivered")
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def _wait(what: str, done, deadline: float, *workers: Worker) -> None:
    while not done():
        for w in workers:
            assert w.error is None, f"{w.tid} failed: {w.error!r}"
        assert time.monotonic() < deadline, f"deadline passed waiting for {what}"
        time.sleep(0.1)


def _read_committed(target, topic: str, group: str) -> dict[int, list[bytes]]:
    """Every committed record of the output, per partition, read up to the high watermark."""
    consumer = Consumer(confluent.config(target, **{
        "group.id": group, "enable.auto.commit": False, "isolation.level": "read_committed"}))
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=CALL_TIMEOUT_S)[1]
                for p in range(PARTITIONS)}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + CALL_TIMEOUT_S
        while time.monotonic() < deadline:
            for m in consumer.consume(num_messages=500, timeout=0.5):
                if not m.error():
                    got[m.partition()].append(m.value())
            positions = consumer.position([TopicPartition(topic, p) for p in range(PARTITIONS)])
            if all(tp.offset >= ends[tp.partition] for tp in positions):
                break
        return got
    finally:
        consumer.close()


def _stop(worker: Worker, timeout_s: float) -> None:
    worker.stop.set()
    worker.join(timeout_s)
    assert not worker.is_alive(), f"{worker.tid} did not stop within {timeout_s}s"
    assert worker.error is None, f"{worker.tid} failed: {worker.error!r}"


@pytest.mark.slow(2)
@pytest.mark.requirement("KIP-447.FENCE.007")
@both_protocols()  # not KIP-848.TXN.001: the copier retries a refused commit, so it cannot see one
def test_partitions_move_between_producers_with_different_transactional_ids(target, unique, group_protocol):
    """KIP-447.FENCE.007: exactly once across rebalances between distinct transactional ids."""
    require_txn_offset_commit_v3(target)
    require_api(target.capabilities(), ApiKey.END_TXN, what="EndTxn")
    source, sink, group, tid = unique.topic(), unique.topic(), unique.group(), unique.transactional_id()
    confluent.create_topic(target, source, partitions=PARTITIONS)
    confluent.create_topic(target, sink, partitions=PARTITIONS)
    deadline = time.monotonic() + DEADLINE_S
    feeder = Feeder(target, source)
    a = Worker(target, group, source, sink, f"{tid}-a", deadline, group_protocol)
    b_workers: list[Worker] = []
    feeder.start()
    a.start()
    try:
        _wait("A's first transactions", lambda: a.committed_txns >= TXNS_PER_ROUND, deadline, a)
        for k in range(B_ROUNDS):
            b = Worker(target, group, source, sink, f"{tid}-b{k}", deadline, group_protocol)
            b_workers.append(b)
            b.start()
            _wait(f"B{k} to take partitions and commit", lambda: b.committed_txns >= TXNS_PER_ROUND, deadline, a, b)
            _stop(b, CALL_TIMEOUT_S * 2)
        feeder.stop.set()
        feeder.join(CALL_TIMEOUT_S * 2)
        assert feeder.error is None and not feeder.is_alive(), f"feeder failed: {feeder.error!r}"
        a.idle_exit.set()
        a.join(max(1.0, deadline - time.monotonic()))
        assert not a.is_alive(), "worker A did not drain the input before the deadline"
        assert a.error is None, f"worker A failed: {a.error!r}"
    finally:
        feeder.stop.set()
        for w in [a, *b_workers]:
            w.stop.set()
    got = _read_committed(target, sink, unique.group())

    def owners(p: int, offset: int) -> list[str]:
        return [f"{w.tid}@{t}" for w in (a, *b_workers) for q, lo, hi, t in w.ranges if q == p and lo <= offset <= hi]

    problems = []
    for p, expected in feeder.values.items():
        out = got[p]
        lost = len(set(expected) - set(out))
        dups = len(out) - len(set(out))
        if lost or dups or out != expected:
            twice = sorted({int(v.split(b":")[1]) for v in out if out.count(v) > 1})
            problems.append(f"partition {p}: {lost} lost, {dups} duplicated, in order: {out == expected}; "
                            f"copied twice: {[(o, owners(p, o)) for o in twice[:3]]}")
    assert not problems, (f"output is not exactly the input (A committed {a.committed_txns} aborted {a.aborted_txns}; "
                          f"B {[(b.committed_txns, b.aborted_txns) for b in b_workers]}): {problems}")
