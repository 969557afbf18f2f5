"""confluent-kafka operations for client-level conformance scenarios.

Client-level checks use librdkafka the way applications do; these helpers only wrap
the waiting (delivery reports, assignment, polling until a count) with deadlines so a
scenario fails with a clear message instead of hanging.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from targets.target import NotSupportedByTarget, Target
from reference_impl.protocol.api_keys import ApiKey

DEFAULT_TIMEOUT_S = 30.0


def config(target: Target, **extra: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = dict(target.client_config())
    cfg.update({k.replace("_", "."): v for k, v in extra.items()})
    return cfg


def quiet_config(target: Target, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """librdkafka settings for ``target`` plus ``settings`` (verbatim), logging only
    critical client messages: connection-refused chatter under faults is expected
    (the chaos workloads' clients)."""
    cfg: dict[str, Any] = dict(target.client_config())
    cfg["log_level"] = 2
    cfg.update(settings or {})
    return cfg


def admin(target: Target) -> AdminClient:
    return AdminClient(config(target))


def create_topic(target: Target, topic: str, partitions: int = 1, timeout: float = DEFAULT_TIMEOUT_S,
                 replication: int = -1, **topic_config: str) -> None:
    """Create a topic (`replication` -1: the broker's default) and wait until every partition
    has a leader in metadata.

    Targets without CreateTopics (librdkafka's mock) create it by their own means."""
    client = admin(target)
    if target.capabilities().supports_api(ApiKey.CREATE_TOPICS):
        futures = client.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=replication, config=topic_config)],
            operation_timeout=timeout,
        )
        futures[topic].result(timeout)
    elif topic_config or replication != -1:
        raise NotSupportedByTarget(
            f"{target.kind} cannot create topics with configs {sorted(topic_config)} or replication {replication}")
    else:
        target.provision_topic(topic, partitions)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = client.list_topics(topic, timeout=5)
        t = md.topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == partitions and all(
            p.leader >= 0 for p in t.partitions.values()
        ):
            _await_on_every_broker(target, topic, partitions, deadline)
            return
        time.sleep(0.1)
    raise TimeoutError(f"topic {topic} has no leaders after {timeout}s")


def _await_on_every_broker(target: Target, topic: str, partitions: int, deadline: float) -> None:
    """As Kafka's TestUtils.waitForAllPartitionsMetadata: each broker replays the KRaft
    metadata log on its own, so a topic created through one broker reaches the others a
    little later; a test that then asks any broker must not see it missing."""
    if len(target.node_ids) < 2:
        return
    try:
        cc = target.cluster_client()
    except NotSupportedByTarget:
        return  # a security setting the raw client does not speak: the admin check above stands
    with cc:
        for node in sorted(cc.nodes):
            while not _known_with_leaders(cc.metadata_from(cc.node(node), [topic]), topic, partitions):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"broker {node} does not know topic {topic} with leaders")
                time.sleep(0.1)


def _known_with_leaders(md: Any, topic: str, partitions: int) -> bool:
    t = next((t for t in md.topics if t.name == topic), None)
    return (t is not None and int(t.error_code) == 0 and len(t.partitions) == partitions
            and all(int(p.leader_id) >= 0 for p in t.partitions))


def produce(target: Target, topic: str, messages: list[dict[str, Any]], flush_between: int = 0, **producer_config: Any) -> list[tuple[int, int]]:
    """Produce messages ({key, value, headers, timestamp, partition}); returns
    [(partition, offset)] from delivery reports in send order. flush_between=N
    flushes every N messages so the records span several batches."""
    producer = Producer(config(target, **producer_config))
    delivered: dict[int, tuple[int, int] | Exception] = {}

    def on_delivery(index: int):
        def cb(err, msg):
            delivered[index] = KafkaException(err) if err else (msg.partition(), msg.offset())

        return cb

    for i, m in enumerate(messages):
        kwargs = {k: m[k] for k in ("key", "value", "headers", "timestamp", "partition") if m.get(k) is not None}
        if "value" in m and m["value"] is None:
            kwargs["value"] = None
        producer.produce(topic, on_delivery=on_delivery(i), **kwargs)
        if flush_between and (i + 1) % flush_between == 0:
            producer.flush(DEFAULT_TIMEOUT_S)
    remaining = producer.flush(DEFAULT_TIMEOUT_S)
    if remaining:
        raise TimeoutError(f"{remaining} messages not delivered within {DEFAULT_TIMEOUT_S}s")
    failures = {i: r for i, r in delivered.items() if isinstance(r, Exception)}
    if failures:
        raise failures[min(failures)]
    return [delivered[i] for i in range(len(messages))]  # type: ignore[misc]


def consume_assigned(target: Target, topic: str, partitions: list[int], count: int, timeout: float = DEFAULT_TIMEOUT_S, **consumer_config: Any) -> list[Any]:
    """Read `count` records from the start of the given partitions (no group)."""
    cfg = config(target, **{"group.id": "kipcheck-unused", "enable.auto.commit": False, "enable.partition.eof": False})
    cfg.update(consumer_config)
    consumer = Consumer(cfg)
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        return _poll_count(consumer, count, timeout)
    finally:
        consumer.close()


def _poll_count(consumer: Consumer, count: int, timeout: float, buffered: list[Any] | None = None) -> list[Any]:
    out: list[Any] = []
    while buffered and len(out) < count:
        out.append(buffered.pop(0))
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error():
            raise KafkaException(msg.error())
        out.append(msg)
    if len(out) < count:
        raise TimeoutError(f"read {len(out)} of {count} records within {timeout}s")
    return out


class GroupMember:
    """A classic-protocol consumer group member; records polled while waiting for the
    assignment are kept, not dropped, so `poll_count` sees every record in order."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self._early: list[Any] = []

    def wait_for_assignment(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.consumer.assignment():
            if time.monotonic() > deadline:
                raise TimeoutError(f"no assignment within {timeout}s")
            msg = self.consumer.poll(0.2)
            if msg is not None:
                if msg.error():
                    raise KafkaException(msg.error())
                self._early.append(msg)

    def poll_count(self, count: int, timeout: float = DEFAULT_TIMEOUT_S) -> list[Any]:
        return _poll_count(self.consumer, count, timeout, self._early)

    def close(self) -> None:
        self.consumer.close()


def subscribed_consumer(target: Target, group: str, topic: str, timeout: float = DEFAULT_TIMEOUT_S, **consumer_config: Any) -> GroupMember:
    """A classic-protocol group member subscribed to topic, returned once it has an assignment."""
    cfg = config(
        target,
        **{"group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest", "group.protocol": "classic"},
    )
    cfg.update(consumer_config)
    member = GroupMember(Consumer(cfg))
    member.consumer.subscribe([topic])
    try:
        member.wait_for_assignment(timeout)
    except Exception:
        member.close()
        raise
    return member


REBALANCE_DRAIN_S = 10.0


def close_stalled_consumer(consumer: Consumer, timeout: float = REBALANCE_DRAIN_S) -> None:
    """Close a consumer that stopped polling (past max.poll.interval.ms, or dropped from its
    group): leave the group and serve the revoke it queued in poll() first, then close().

    librdkafka 2.16.0 (confluent-kafka 2.16.1) can deadlock when close() itself serves that
    revoke: Consumer_rebalance_cb calls rd_kafka_assign(), which waits forever for the
    consumer-group thread, while holding the GIL, so nothing else in the process runs
    (reproduced: test_zombie_send_offsets_fenced_client on kafka-native, 1 run of 8)."""
    with contextlib.suppress(KafkaException):  # a fenced member may refuse to leave: close it anyway
        consumer.unsubscribe()
        deadline = time.monotonic() + timeout
        while consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.1)
    consumer.close()


def record_view(msg: Any) -> dict[str, Any]:
    """The observable parts of a consumed record, JSON-able."""
    ts_type, ts = msg.timestamp()
    return {
        "partition": msg.partition(),
        "offset": msg.offset(),
        "key": _text(msg.key()),
        "value": _text(msg.value()),
        "headers": [[k, _text(v)] for k, v in (msg.headers() or [])],
        "timestamp": ts,
        "timestamp_type": ts_type,
    }


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.hex()
