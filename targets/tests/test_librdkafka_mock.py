"""librdkafka-mock target: start, capabilities, produce/consume, raw client, lifecycle hooks."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition, libversion
from confluent_kafka.admin import AdminClient
from kio.static.primitive import i32Timedelta

from targets.librdkafka_mock import LibrdkafkaMockTarget, load_mock_api
from targets.target import NotSupportedByTarget, TargetError, parse_target_spec
from targets.factory import create_target
from reference_impl.client.raw_client import RawClient, parse_bootstrap
from reference_impl.protocol.api_keys import ApiKey
from targets.tests.netcheck import refused

# What the mock of the pinned confluent-kafka (2.16.1, librdkafka 2.16.0) advertises in
# ApiVersions. If a confluent-kafka bump changes it, update this table and the
# librdkafka-mock section of docs/targets.md together.
EXPECTED_API_VERSIONS = {
    0: (0, 10),  # Produce
    1: (0, 16),  # Fetch
    2: (0, 7),  # ListOffsets
    3: (0, 13),  # Metadata
    8: (0, 9),  # OffsetCommit
    9: (0, 6),  # OffsetFetch
    10: (0, 3),  # FindCoordinator
    11: (0, 6),  # JoinGroup
    12: (0, 5),  # Heartbeat
    13: (0, 4),  # LeaveGroup
    14: (0, 4),  # SyncGroup
    18: (0, 2),  # ApiVersions
    22: (0, 4),  # InitProducerId
    23: (2, 2),  # OffsetForLeaderEpoch
    24: (0, 1),  # AddPartitionsToTxn
    25: (0, 1),  # AddOffsetsToTxn
    26: (0, 1),  # EndTxn
    28: (0, 3),  # TxnOffsetCommit
    68: (1, 1),  # ConsumerGroupHeartbeat
    71: (0, 0),  # GetTelemetrySubscriptions
    72: (0, 0),  # PushTelemetry
    76: (1, 1),  # ShareGroupHeartbeat
    78: (1, 1),  # ShareFetch
    79: (1, 1),  # ShareAcknowledge
}


@pytest.fixture(scope="module")
def mock3() -> Iterator[LibrdkafkaMockTarget]:
    target = create_target("librdkafka-mock:nodes=3")
    assert isinstance(target, LibrdkafkaMockTarget)
    target.start()
    try:
        yield target
    finally:
        target.stop()


@pytest.fixture
def fresh_mock() -> Iterator[LibrdkafkaMockTarget]:
    target = LibrdkafkaMockTarget(parse_target_spec("librdkafka-mock:nodes=3"))
    target.start()
    try:
        yield target
    finally:
        target.stop()


def test_mock_api_binding_loads() -> None:
    api = load_mock_api()
    assert api.version == libversion()[0]
    assert "librdkafka" in api.path


def test_start_gives_one_loopback_listener_per_node(mock3: LibrdkafkaMockTarget) -> None:
    addresses = parse_bootstrap(mock3.bootstrap_servers)
    assert len(addresses) == 3 == len(mock3.node_ids)
    assert all(host == "127.0.0.1" for host, _ in addresses)
    assert mock3.active_mode == "api"
    d = mock3.describe()
    assert d["kind"] == "librdkafka-mock" and d["nodes"] == 3 and d["mode"] == "api"
    assert d["version"].startswith("librdkafka-2.")
    assert mock3.startup_seconds is not None and mock3.startup_seconds < 10


def test_capabilities_probe(mock3: LibrdkafkaMockTarget) -> None:
    caps = mock3.capabilities(refresh=True)
    assert caps.api_versions == EXPECTED_API_VERSIONS, "mock ApiVersions changed: update docs/targets.md"
    # The facts docs/targets.md states about the mock:
    assert caps.max_version(ApiKey.END_TXN) == 1  # EndTxn <= v1: no transaction version 2 (KIP-890)
    assert caps.max_version(ApiKey.INIT_PRODUCER_ID) == 4  # InitProducerId <= v4
    assert all(caps.supports_api(k) for k in (76, 78, 79))  # share group data path
    assert not caps.supports_api(ApiKey.SHARE_GROUP_DESCRIBE)  # ShareGroupDescribe
    assert not caps.supports_api(ApiKey.CREATE_TOPICS)  # CreateTopics
    assert not caps.supports_api(ApiKey.CONSUMER_GROUP_DESCRIBE)  # ConsumerGroupDescribe
    assert caps.finalized_features == {}  # ApiVersions <= v2 carries no feature levels


def test_every_broker_answers_raw_api_versions(mock3: LibrdkafkaMockTarget) -> None:
    for host, port in parse_bootstrap(mock3.bootstrap_servers):
        with RawClient(host, port, timeout=5) as client:
            versions = client.api_versions(2)
        assert versions[18] == (0, 2)
        assert versions[0] == EXPECTED_API_VERSIONS[0]


def test_raw_client_api_versions_default_negotiates_down(mock3: LibrdkafkaMockTarget) -> None:
    with RawClient.connect(mock3.bootstrap_servers, timeout=5) as client:
        assert client.api_versions()[18] == (0, 2)


def test_produce_and_consume_through_the_mock(mock3: LibrdkafkaMockTarget) -> None:
    topic = f"kipcheck-mock-{uuid.uuid4().hex[:8]}"
    producer = Producer({**mock3.client_config(), "acks": "all", "enable.idempotence": True})
    delivered = []
    producer.produce(topic, b"hello mock", key=b"k1", on_delivery=lambda err, msg: delivered.append((err, msg)))
    assert producer.flush(10) == 0
    assert delivered and delivered[0][0] is None
    offset = delivered[0][1].offset()

    consumer = Consumer({**mock3.client_config(), "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    try:
        # assign, not subscribe: skips the mock's 3 s initial group rebalance delay
        consumer.assign([TopicPartition(topic, delivered[0][1].partition(), OFFSET_BEGINNING)])
        got = None
        deadline = time.monotonic() + 20
        while got is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got = msg
        assert got is not None, "no message consumed from the mock within 20s"
        assert (got.key(), got.value(), got.offset()) == (b"k1", b"hello mock", offset)
    finally:
        consumer.close()


def test_transactional_commit_is_visible_read_committed(mock3: LibrdkafkaMockTarget) -> None:
    topic = f"kipcheck-mock-txn-{uuid.uuid4().hex[:8]}"
    producer = Producer({**mock3.client_config(), "transactional.id": f"tx-{topic}"})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce(topic, b"aborted", partition=0)
    producer.abort_transaction(10)
    producer.begin_transaction()
    producer.produce(topic, b"committed", partition=0)
    producer.commit_transaction(10)

    consumer = Consumer(
        {**mock3.client_config(), "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
         "isolation.level": "read_committed"}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        values = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and b"committed" not in values:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
        assert values == [b"committed"]
    finally:
        consumer.close()


def test_kill_and_restart_node(fresh_mock: LibrdkafkaMockTarget) -> None:
    host, port = parse_bootstrap(fresh_mock.bootstrap_servers)[1]
    fresh_mock.kill_node(2)
    assert refused(host, port)
    assert fresh_mock.describe()["nodes_down"] == [2]
    # The other brokers still answer.
    h1, p1 = parse_bootstrap(fresh_mock.bootstrap_servers)[0]
    with RawClient(h1, p1, timeout=5) as client:
        assert 18 in client.api_versions(2)
    fresh_mock.restart_node(2)
    with RawClient(host, port, timeout=5) as client:
        assert client.api_versions(2)[18] == (0, 2)
    # restart of a running node: down + up, still answering afterwards
    fresh_mock.restart_node(1)
    with RawClient(h1, p1, timeout=5) as client:
        assert 18 in client.api_versions(2)
    with pytest.raises(ValueError):
        fresh_mock.kill_node(4)


def test_pause_is_not_supported(mock3: LibrdkafkaMockTarget) -> None:
    with pytest.raises(NotSupportedByTarget) as info:
        mock3.pause_node(1)
    assert "set a broker down" in info.value.reason
    with pytest.raises(NotSupportedByTarget):
        mock3.resume_node(1)


def test_request_error_injection(fresh_mock: LibrdkafkaMockTarget) -> None:
    fresh_mock.push_request_errors(22, [15, 51])  # COORDINATOR_NOT_AVAILABLE, CONCURRENT_TRANSACTIONS
    timeout = i32Timedelta.parse(datetime.timedelta(seconds=60))
    with RawClient.connect(fresh_mock.bootstrap_servers, timeout=5) as client:
        codes = [
            int(client.request(22, 1, transactional_id=None, transaction_timeout=timeout).error_code)
            for _ in range(3)
        ]
    assert codes == [15, 51, 0]


def test_api_version_range_can_be_narrowed(fresh_mock: LibrdkafkaMockTarget) -> None:
    assert fresh_mock.capabilities().supports_api(ApiKey.SHARE_GROUP_HEARTBEAT)
    fresh_mock.set_api_version_range(76, -1, -1)
    fresh_mock.set_api_version_range(0, 3, 8)
    caps = fresh_mock.capabilities()
    assert not caps.supports_api(ApiKey.SHARE_GROUP_HEARTBEAT)
    assert caps.api_versions[0] == (3, 8)


def test_create_topic_directly(fresh_mock: LibrdkafkaMockTarget) -> None:
    fresh_mock.create_topic("kipcheck-made", partitions=5, replication_factor=3)
    md = AdminClient(fresh_mock.client_config()).list_topics("kipcheck-made", timeout=10)
    assert len(md.topics["kipcheck-made"].partitions) == 5
    with pytest.raises(ValueError):
        fresh_mock.create_topic("too-many-replicas", partitions=1, replication_factor=4)


def test_config_mode_works_but_has_no_lifecycle() -> None:
    target = create_target("librdkafka-mock:nodes=2:mode=config")
    target.start()
    try:
        assert target.active_mode == "config"
        assert len(parse_bootstrap(target.bootstrap_servers)) == 2
        assert target.capabilities().api_versions == EXPECTED_API_VERSIONS
        with pytest.raises(NotSupportedByTarget) as info:
            target.kill_node(1)
        assert "no binding" in info.value.reason
        with pytest.raises(NotSupportedByTarget):
            target.push_request_errors(0, [6])
    finally:
        target.stop()


def test_stop_closes_listeners_and_is_idempotent() -> None:
    target = create_target("librdkafka-mock:nodes=2")
    target.start()
    addresses = parse_bootstrap(target.bootstrap_servers)
    target.stop()
    target.stop()
    assert all(refused(h, p) for h, p in addresses)
    with pytest.raises(TargetError):
        _ = target.bootstrap_servers


def test_rtt_option_delays_responses() -> None:
    target = create_target("librdkafka-mock:rtt=200")
    target.start()
    try:
        with RawClient.connect(target.bootstrap_servers, timeout=5) as client:
            t0 = time.monotonic()
            client.api_versions(2)
            elapsed = time.monotonic() - t0
        assert elapsed >= 0.18
    finally:
        target.stop()
