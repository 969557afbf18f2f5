"""Measurements of the embedded reference broker with confluent-kafka and the raw client.

Every measurement is bounded twice: by a message/request count and by a time budget
(whichever ends first; a time-capped result says so). Everything runs on loopback in
this one process: the broker's event-loop thread (ThreadedReferenceCluster), librdkafka's
native threads and the measuring Python code share the process and its GIL, so the numbers
describe the embedded broker as kipcheck runs it, not a broker on its own machine.
"""

from __future__ import annotations

import random
import resource
import struct
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from reference_impl.client.raw_client import RawClient
from reference_impl.protocol import framing, payloads

MB = 1_000_000  # throughput in MB/s counts record value bytes, 10^6 bytes per MB


@dataclass
class Measurement:
    """One line of the benchmark table."""

    name: str  # produce | consume | end-to-end latency | ApiVersions round trip
    config: str  # e.g. "100 B, none"
    requested: int  # messages or requests asked for
    count: int = 0  # messages or requests completed (and verified)
    seconds: float = 0.0
    msgs_per_s: float | None = None
    mb_per_s: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    errors: int = 0
    capped: bool = False  # stopped by the time budget before `requested`
    peak_rss_mib: float | None = None  # process high-water mark right after this measurement
    note: str = ""
    settings: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------------------------
# helpers


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far (ru_maxrss: KiB on Linux, bytes on macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(rss / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)


def percentile(sorted_values: list[float], p: float) -> float | None:
    """Nearest-rank percentile of an ascending list (None when empty)."""
    if not sorted_values:
        return None
    rank = max(1, -(-len(sorted_values) * p // 100))  # ceil(n * p / 100)
    return sorted_values[int(min(rank, len(sorted_values))) - 1]


def _latency_stats(m: Measurement, latencies_ns: list[int]) -> None:
    lat = sorted(x / 1e6 for x in latencies_ns)
    m.p50_ms = _round(percentile(lat, 50), 3)
    m.p99_ms = _round(percentile(lat, 99), 3)


def _round(v: float | None, digits: int) -> float | None:
    return None if v is None else round(v, digits)


def value_pool(size: int, count: int = 1024, seed: int = 7) -> list[bytes]:
    """`count` distinct values of `size` bytes: words drawn from a fixed random vocabulary,
    so that batches compress moderately (like text or JSON payloads), not absurdly well
    (one repeated value) and not at all (random bytes)."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz0123456789"
    vocab = ["".join(rng.choice(letters) for _ in range(rng.randint(3, 10))) for _ in range(4096)]
    pool = []
    for i in range(count):
        out = bytearray(b"%08d " % i)
        while len(out) < size:
            out += rng.choice(vocab).encode() + b" "
        pool.append(bytes(out[:size]))
    return pool


def unique_topic(prefix: str) -> str:
    return f"bench-{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, topic: str, partitions: int, timeout: float = 15.0) -> None:
    # log_level 5: keep librdkafka's informational "purging unserved events" line quiet.
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 5})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(timeout)


def delete_topic(bootstrap: str, topic: str, timeout: float = 15.0) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 5})
    admin.delete_topics([topic])[topic].result(timeout)


class _Errors:
    """Counts delivery/consume errors and keeps the first one for the note."""

    def __init__(self) -> None:
        self.count = 0
        self.first: str | None = None

    def add(self, err: Any) -> None:
        self.count += 1
        if self.first is None:
            self.first = str(err)

    def note(self) -> str:
        return f"first error: {self.first}" if self.first else ""


# ---------------------------------------------------------------------------------
# confluent-kafka measurements


def produce_throughput(
    bootstrap: str,
    topic: str,
    *,
    messages: int,
    value_size: int,
    compression: str,
    budget_s: float,
    flush_timeout_s: float = 30.0,
) -> Measurement:
    """Produce `messages` values of `value_size` bytes (acks=all, linger.ms=5) and flush.

    Throughput counts messages acknowledged by the broker (sent minus failed or still
    queued after the flush timeout) over the time from the first produce() to flush().
    """
    settings = {"acks": "all", "linger.ms": 5, "compression.type": compression}
    m = Measurement("produce", f"{value_size} B, {compression}", messages, settings=settings)
    errors = _Errors()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            **settings,
            "delivery.report.only.error": True,
            "on_delivery": lambda err, _msg: errors.add(err) if err is not None else None,
        }
    )
    pool = value_pool(value_size)
    mask = len(pool) - 1
    # Connect and fetch metadata before the clock starts.
    producer.list_topics(topic, timeout=10)
    t0 = time.perf_counter()
    deadline = t0 + budget_s
    sent = 0
    while sent < messages:
        if (sent & 1023) == 0:
            producer.poll(0)
            if time.perf_counter() > deadline:
                m.capped = True
                break
        try:
            producer.produce(topic, pool[sent & mask])
        except BufferError:  # local queue full: let librdkafka drain it
            producer.poll(0.05)
            if time.perf_counter() > deadline:
                m.capped = True
                break
            continue
        sent += 1
    remaining = producer.flush(flush_timeout_s)
    m.seconds = time.perf_counter() - t0
    m.count = max(0, sent - remaining - errors.count)
    m.errors = errors.count + remaining
    m.msgs_per_s = m.count / m.seconds if m.seconds > 0 else None
    m.mb_per_s = m.count * value_size / MB / m.seconds if m.seconds > 0 else None
    notes = [errors.note()] if errors.first else []
    if remaining:
        notes.append(f"{remaining} message(s) still queued after a {flush_timeout_s:.0f} s flush")
    m.note = "; ".join(notes)
    return m


def consume_throughput(
    bootstrap: str,
    topic: str,
    *,
    partitions: int,
    expected: int,
    value_size: int,
    compression: str,
    budget_s: float,
) -> Measurement:
    """Read `expected` messages with assign() from offset 0 (no group membership, no
    commits). The clock starts at assign(), so it includes the first fetch round trip."""
    m = Measurement("consume", f"{value_size} B, {compression}", expected, settings={"assign": "offset 0"})
    errors = _Errors()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_topic("unused-group"),
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    try:
        consumer.list_topics(topic, timeout=10)
        t0 = time.perf_counter()
        deadline = t0 + budget_s
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got = nbytes = 0
        last = t0
        while got < expected:
            now = time.perf_counter()
            if now > deadline:
                m.capped = True
                break
            # consume() waits until it has num_messages or the timeout passes: never ask
            # for more than are still expected, or the last call would idle to its timeout.
            batch = consumer.consume(num_messages=min(1_000, expected - got), timeout=min(0.5, max(0.01, deadline - now)))
            for msg in batch:
                err = msg.error()
                if err is not None:
                    errors.add(err)
                    continue
                got += 1
                nbytes += len(msg.value() or b"")
            last = time.perf_counter() if got else last
        m.seconds = (last if got else time.perf_counter()) - t0
        m.count = got
        m.errors = errors.count
        if got and m.seconds > 0:
            m.msgs_per_s = got / m.seconds
            m.mb_per_s = nbytes / MB / m.seconds
        m.note = errors.note()
    finally:
        consumer.close()
    return m


def end_to_end_latency(
    bootstrap: str,
    topic: str,
    *,
    messages: int,
    value_size: int = 100,
    budget_s: float,
    wait_s: float = 10.0,
) -> Measurement:
    """One message at a time: produce (acks=all, linger.ms=0), then wait until the
    consumer (assigned to the topic's only partition) returns it; latency is produce()
    to poll() returning that message. Sequential, so no queueing between messages."""
    settings = {"acks": "all", "linger.ms": 0, "partitions": 1}
    m = Measurement("end-to-end latency", f"{value_size} B, none, 1 in flight", messages, settings=settings)
    errors = _Errors()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 0,
            "delivery.report.only.error": True,
            "on_delivery": lambda err, _msg: errors.add(err) if err is not None else None,
        }
    )
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_topic("unused-group"),
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    pad = b"x" * max(0, value_size - 8)
    latencies: list[int] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])

        def round_trip(seq: int, until: float) -> int | None:
            t = time.perf_counter_ns()
            producer.produce(topic, struct.pack(">q", seq) + pad, partition=0)
            producer.poll(0)
            while time.perf_counter() < until:
                msg = consumer.poll(0.1)
                if msg is None:
                    continue
                if msg.error() is not None:
                    errors.add(msg.error())
                    continue
                if struct.unpack(">q", msg.value()[:8])[0] == seq:
                    return time.perf_counter_ns() - t
            return None

        # Warm-up (connections, metadata, the first fetch session): not counted.
        for seq in range(-5, 0):
            if round_trip(seq, time.perf_counter() + wait_s * 3) is None:
                m.note = "warm-up message never arrived"
                return m
        t0 = time.perf_counter()
        deadline = t0 + budget_s
        for seq in range(messages):
            if time.perf_counter() > deadline:
                m.capped = True
                break
            lat = round_trip(seq, min(deadline + wait_s, time.perf_counter() + wait_s))
            if lat is None:
                m.note = f"message {seq} not consumed within {wait_s:.0f} s; stopped"
                break
            latencies.append(lat)
        m.seconds = time.perf_counter() - t0
    finally:
        consumer.close()
        producer.flush(5)
    m.count = len(latencies)
    m.errors = errors.count
    if errors.first:
        m.note = "; ".join(x for x in (m.note, errors.note()) if x)
    _latency_stats(m, latencies)
    return m


# ---------------------------------------------------------------------------------
# raw client


def api_versions_round_trip(bootstrap: str, *, requests: int, budget_s: float, pre_encoded: bool) -> Measurement:
    """ApiVersions v3 requests one at a time on one connection of the raw client.

    pre_encoded=False: the raw client's full path (kio encode, send, receive, kio decode).
    pre_encoded=True: one request frame encoded once and sent again and again; the
    response is read as bytes and not decoded, so this is the broker plus loopback.
    """
    config = "v3, pre-encoded frame" if pre_encoded else "v3, encode + decode"
    m = Measurement("ApiVersions round trip", config, requests, settings={"api_version": 3})
    latencies: list[int] = []
    with RawClient.connect(bootstrap, client_id="kipcheck-bench") as rc:
        if pre_encoded:
            fields = {"client_software_name": "kipcheck-bench", "client_software_version": "0"}
            frame = framing.encode_request(payloads.build(framing.request_schema(18, 3), **fields), 1, "kipcheck-bench")
            call: Callable[[], Any] = lambda: rc.send_frame(frame)  # noqa: E731
        else:
            call = lambda: rc.api_versions_response(3)  # noqa: E731
        for _ in range(20):  # warm-up
            call()
        t0 = time.perf_counter()
        deadline = t0 + budget_s
        for i in range(requests):
            if (i & 63) == 0 and time.perf_counter() > deadline:
                m.capped = True
                break
            t = time.perf_counter_ns()
            call()
            latencies.append(time.perf_counter_ns() - t)
        m.seconds = time.perf_counter() - t0
    m.count = len(latencies)
    if m.seconds > 0:
        m.msgs_per_s = m.count / m.seconds
    _latency_stats(m, latencies)
    return m
