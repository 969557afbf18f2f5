"""Share-group administration over the wire against the reference cluster (1 and 3 brokers):
Describe/Alter/DeleteShareGroupOffsets, DescribeConfigs of the GROUP resource, and their
answers where share groups are off. The behaviour shared with Kafka 4.4.0 is checked on
every target by conformance/suites/kip932/test_admin.py; this module covers what only the
reference can show (its persister state, the not-modelled resources, share.version=0).
"""

from __future__ import annotations

import datetime
import uuid

import pytest
from kio.schema.errors import ErrorCode

from reference_impl.client.raw_client import ClusterClient
from reference_impl.model.broker_state import BrokerConfig
from reference_impl.model.share_state_records import SharePartitionKey
from reference_impl.protocol import framing, payloads
from reference_impl.server.broker_server import ThreadedReferenceCluster
from reference_impl.protocol.api_keys import ApiKey

DESCRIBE_CONFIGS, DESCRIBE_OFFSETS, ALTER_OFFSETS, DELETE_OFFSETS = ApiKey.DESCRIBE_CONFIGS, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, ApiKey.ALTER_SHARE_GROUP_OFFSETS, ApiKey.DELETE_SHARE_GROUP_OFFSETS


def nested(api_key: int, version: int, class_name: str, /, **fields):
    return payloads.build(payloads.nested(framing.request_schema(api_key, version), class_name), **fields)


@pytest.fixture(scope="module", params=[1, 3], ids=["reference-1", "reference-3"])
def cluster(request):
    with ThreadedReferenceCluster(brokers=request.param) as running:
        yield running


@pytest.fixture()
def client(cluster):
    with ClusterClient(cluster.bootstrap_servers) as cc:
        yield cc


def create_topic(cc: ClusterClient, partitions: int = 2) -> tuple[str, uuid.UUID]:
    name = f"adm-{uuid.uuid4().hex[:8]}"
    topic = nested(19, 7, "CreatableTopic", name=name, num_partitions=partitions, replication_factor=1,
                   assignments=(), configs=())
    resp = cc.bootstrap.request(19, 7, topics=(topic,), timeout=datetime.timedelta(seconds=5), validate_only=False)
    assert resp.topics[0].error_code == ErrorCode.none, resp
    return name, resp.topics[0].topic_id


def describe(node, group: str, topics=None, version: int = 1):
    ts = None if topics is None else tuple(
        nested(DESCRIBE_OFFSETS, version, "DescribeShareGroupOffsetsRequestTopic", topic_name=t, partitions=tuple(ps))
        for t, ps in topics)
    return node.request(DESCRIBE_OFFSETS, version, groups=(
        nested(DESCRIBE_OFFSETS, version, "DescribeShareGroupOffsetsRequestGroup", group_id=group, topics=ts),))


def alter(node, group: str, topic: str, starts: dict[int, int]):
    return node.request(ALTER_OFFSETS, 0, group_id=group, topics=(nested(
        ALTER_OFFSETS, 0, "AlterShareGroupOffsetsRequestTopic", topic_name=topic, partitions=tuple(
            nested(ALTER_OFFSETS, 0, "AlterShareGroupOffsetsRequestPartition", partition_index=p, start_offset=o)
            for p, o in starts.items())),))


def delete(node, group: str, topic: str):
    return node.request(DELETE_OFFSETS, 0, group_id=group, topics=(
        nested(DELETE_OFFSETS, 0, "DeleteShareGroupOffsetsRequestTopic", topic_name=topic),))


def test_alter_and_delete_offsets_go_through_the_share_coordinator(cluster, client):
    topic, tid = create_topic(client)
    group = f"g-{uuid.uuid4().hex[:8]}"
    node = client.coordinator_for(group)
    assert alter(node, group, topic, {0: 3}).error_code == ErrorCode.none
    state = cluster.cluster.state
    stored = state.share_coordinator.state(SharePartitionKey(group, tid, 0))
    assert (stored.start_offset, stored.state_batches) == (3, ())
    (p,) = describe(node, group, version=0).groups[0].topics[0].partitions
    assert (p.partition_index, p.start_offset, p.leader_epoch, p.error_code) == (0, 3, 0, ErrorCode.none)
    assert delete(node, group, topic).responses[0].error_code == ErrorCode.none
    assert state.share_coordinator.state(SharePartitionKey(group, tid, 0)) is None
    assert describe(node, group).groups[0].topics == ()


def test_describe_of_a_missing_partition_is_unknown_topic_or_partition(client):
    """Kafka 4.4.0 never answers this request (the client times out); the reference answers
    the partition UNKNOWN_TOPIC_OR_PARTITION."""
    topic, _ = create_topic(client, partitions=1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    resp = describe(client.coordinator_for(group), group, [(topic, [0, 4])])
    answers = [(p.partition_index, p.start_offset, p.lag, p.error_code) for p in resp.groups[0].topics[0].partitions]
    assert answers == [(0, -1, -1, ErrorCode.none), (4, -1, -1, ErrorCode.unknown_topic_or_partition)]


def test_offsets_rpcs_to_a_node_that_is_not_the_coordinator():
    with ThreadedReferenceCluster(brokers=3) as running, ClusterClient(running.bootstrap_servers) as cc:
        topic, _ = create_topic(cc)
        group = f"g-{uuid.uuid4().hex[:8]}"
        coord = cc.find_coordinator(group)[1]
        other = cc.node(next(n for n in sorted(cc.nodes) if n != coord))
        assert describe(other, group).groups[0].error_code == ErrorCode.not_coordinator
        assert alter(other, group, topic, {0: 1}).error_code == ErrorCode.not_coordinator
        assert delete(other, group, topic).error_code == ErrorCode.not_coordinator


def test_describe_configs_of_a_group_filters_names_and_refuses_other_resources(client):
    resources = (
        nested(DESCRIBE_CONFIGS, 4, "DescribeConfigsResource", resource_type=32, resource_name="any-group",
               configuration_keys=("share.isolation.level", "no.such.config")),
        nested(DESCRIBE_CONFIGS, 4, "DescribeConfigsResource", resource_type=2, resource_name="some-topic",
               configuration_keys=None),
    )
    group, topic = client.bootstrap.request(DESCRIBE_CONFIGS, 4, resources=resources, include_synonyms=False,
                                            include_documentation=False).results
    assert group.error_code == ErrorCode.none
    assert [(c.name, c.value, c.config_source, c.synonyms) for c in group.configs] == [
        ("share.isolation.level", "read_uncommitted", 5, ())]
    assert topic.error_code == ErrorCode.invalid_request and "models no configs" in topic.error_message


def test_offsets_rpcs_are_unsupported_without_share_groups():
    config = BrokerConfig(finalized_features={"transaction.version": 2, "share.version": 0})
    with ThreadedReferenceCluster(brokers=1, config=config) as running, ClusterClient(running.bootstrap_servers) as cc:
        topic, _ = create_topic(cc)
        node = cc.bootstrap
        assert describe(node, "g").groups[0].error_code == ErrorCode.unsupported_version
        assert alter(node, "g", topic, {0: 1}).error_code == ErrorCode.unsupported_version
        assert delete(node, "g", topic).error_code == ErrorCode.unsupported_version


def test_an_empty_group_id_is_invalid(client):
    """As Kafka 4.4.0 answers Alter/Delete; its Describe answers UNKNOWN_SERVER_ERROR."""
    topic, _ = create_topic(client)
    answers = [alter(client.bootstrap, "", topic, {0: 1}), delete(client.bootstrap, "", topic),
               describe(client.bootstrap, "", [(topic, [0])]).groups[0]]
    assert [(a.error_code, a.error_message) for a in answers] == [
        (ErrorCode.invalid_group_id, "The group id is invalid.")] * 3


def test_describe_configs_of_a_broker_gives_the_limits_tests_work_within(client):
    """BROKER resource (type 4): the bounds a test reads before it sets a lock, session or
    transaction timeout (conformance.target_limits); Kafka's defaults here, an unknown node
    id is INVALID_REQUEST."""
    keys = ("group.share.min.record.lock.duration.ms", "group.share.max.session.timeout.ms",
            "transaction.max.timeout.ms", "no.such.config")
    resources = (
        nested(DESCRIBE_CONFIGS, 4, "DescribeConfigsResource", resource_type=4, resource_name=str(min(client.nodes)),
               configuration_keys=keys),
        nested(DESCRIBE_CONFIGS, 4, "DescribeConfigsResource", resource_type=4, resource_name="99",
               configuration_keys=None),
    )
    broker, unknown = client.bootstrap.request(DESCRIBE_CONFIGS, 4, resources=resources, include_synonyms=False,
                                               include_documentation=False).results
    assert broker.error_code == ErrorCode.none
    assert {c.name: c.value for c in broker.configs} == {
        "group.share.min.record.lock.duration.ms": "15000", "group.share.max.session.timeout.ms": "60000",
        "transaction.max.timeout.ms": "900000"}
    assert unknown.error_code == ErrorCode.invalid_request
