"""Processes and client workloads shared by the capture-proxy benchmarks (proxy_bench, proxy_overhead).

A target and a proxy each run in their own process (`Background`), as in a real deployment;
the workloads are confluent-kafka clients timed from the first request to the last answer.
"""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from typing import Any, Callable

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from reference_impl.client.raw_client import RawClient
from reference_impl.protocol import framing, payloads, records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Background:
    """A child process whose first matching stdout line announces it is ready."""

    def __init__(self, argv: list[str], ready_prefix: str, timeout_s: float) -> None:
        self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.line = self._wait_line(ready_prefix, timeout_s)
        # keep draining stdout so the child never blocks on a full pipe
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()

    def _wait_line(self, prefix: str, timeout_s: float) -> str:
        result: list[str] = []

        def read() -> None:
            for line in self.proc.stdout:
                if prefix in line:
                    result.append(line.strip())
                    return

        t = threading.Thread(target=read, daemon=True)
        t.start()
        t.join(timeout_s)
        if not result:
            self.stop()
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise RuntimeError(f"{' '.join(self.proc.args[:4])} did not print {prefix!r} within {timeout_s:.0f}s: "
                               f"{err.strip()[-500:]}")
        return result[0]

    def stop(self, timeout_s: float = 60.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_target(spec: str) -> tuple[Background, str]:
    bg = Background([sys.executable, "-m", "targets.target_up", spec], "bootstrap=", 300)
    return bg, bg.line.split("=", 1)[1]




def create_topic(bootstrap: str, partitions: int = 1) -> str:
    name = f"bench-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def produce_run(bootstrap: str, topic: str, n: int, value: bytes) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "queue.buffering.max.messages": max(n, 100000), "queue.buffering.max.kbytes": 1 << 21})
    p.produce(topic, b"warm-up")  # connections and metadata outside the measurement
    p.flush(30)
    errors: list = []
    on_delivery = lambda e, m: errors.append(e) if e else None  # noqa: E731
    start = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    left = p.flush(300)
    elapsed = time.perf_counter() - start
    if left or errors:
        raise RuntimeError(f"produce: {left} undelivered, {len(errors)} errors ({errors[:1]})")
    return n / elapsed


def consume_run(bootstrap: str, topic: str, n: int) -> float:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{os.getpid()}-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    try:
        c.list_topics(topic, 30)  # bootstrap connection and metadata outside the measurement
        start = time.perf_counter()
        c.assign([TopicPartition(topic, 0, 0)])
        got, deadline = 0, time.monotonic() + 300
        while got < n + 1 and time.monotonic() < deadline:  # +1: the warm-up value
            got += sum(1 for m in c.consume(10000, 0.5) if m.error() is None)
        elapsed = time.perf_counter() - start
    finally:
        c.close()
    if got < n + 1:
        raise RuntimeError(f"consume: {got} of {n + 1} values within 300 s")
    return n / elapsed


def api_versions_run(bootstrap: str, m: int) -> list[float]:
    """Milliseconds per ApiVersions v3 round trip, one in flight, on one connection."""
    return _round_trips(bootstrap, m, RawClient.api_versions)


def _round_trips(bootstrap: str, m: int, send: Callable[[Any], Any], warm_up: int = 20) -> list[float]:
    """Milliseconds of `m` calls of send(raw), one in flight, on one RawClient connection
    to the first bootstrap broker, after `warm_up` untimed ones."""
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    out: list[float] = []
    with RawClient(host, int(port)) as raw:
        for _ in range(warm_up):
            send(raw)
        for _ in range(m):
            t0 = time.perf_counter()
            send(raw)
            out.append((time.perf_counter() - t0) * 1000)
    return out


def raw_produce_run(bootstrap: str, topic: str, m: int, value_bytes: int = 100) -> list[float]:
    """Milliseconds per Produce v9 round trip (acks=1, one record of `value_bytes` to
    partition 0), one in flight, on one connection to the first bootstrap broker, which
    leads the partition on a one-broker target. The Produce a relay forwards, without a
    client library's threads and metadata: its row through the bare relay and through the
    proxy say what the proxy adds to a Produce beyond the relay hop."""
    schema = framing.request_schema(0, 9)

    def part(class_name: str, /, **fields: object) -> object:
        return payloads.build(payloads.nested(schema, class_name), **fields)

    req = payloads.build(schema, transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=5), topic_data=(
        part("TopicProduceData", name=topic, partition_data=(
            part("PartitionProduceData", index=0, records=records.build_batch(
                [b"x" * value_bytes], timestamp_ms=int(time.time() * 1000))),)),))

    def send(raw: Any) -> None:
        code = raw.send(req).responses[0].partition_responses[0].error_code
        if code != ErrorCode.none:
            raise RuntimeError(f"raw Produce to {topic}-0 at {bootstrap}: {code!r}")

    return _round_trips(bootstrap, m, send)


def produce_ack_run(bootstrap: str, topic: str, m: int, acks: int | str = 1) -> list[float]:
    """Milliseconds from produce() to the delivery report, one value in flight. The
    application waits in poll() (librdkafka returns as soon as the report is served): a
    loop of 0.2 ms polls, used before 2026-11-29, kept most of a core busy on its own, and
    on two cores the proxy's hand-off then waited for CPU (docs/replay.md)."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0})
    for _ in range(5):
        p.produce(topic, b"w")
        p.flush(30)
    out: list[float] = []
    for _ in range(m):
        done: list[float] = []
        t0 = time.perf_counter()
        p.produce(topic, b"x" * 100, on_delivery=lambda e, msg: done.append(time.perf_counter()) if e is None else None)
        while not done:
            p.poll(1.0)
            if time.perf_counter() - t0 > 30:
                raise RuntimeError(f"produce acks={acks}: no delivery report within 30 s")
        out.append((done[0] - t0) * 1000)
    p.flush(10)
    return out


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q / 100 * len(s) + 0.5)) - 1))]


def cell(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def aligned(lines: list[tuple]) -> str:
    """A table: the first line is the header, a rule under it, columns padded to their widest cell."""
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(lines[0]))]
    out = [" | ".join(str(c).ljust(w) for c, w in zip(line, widths)) for line in lines]
    out.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(out)
