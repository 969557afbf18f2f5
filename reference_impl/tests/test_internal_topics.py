"""The coordinators' internal topics in the model (model/topics.py): built as Kafka builds
them, created once, and matched by a KIP-848 regex like any topic, as Kafka 4.4 does
(franz-go's Test848RegexBrokerResolves on kafka-native 4.4.0)."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from reference_impl.model import seeded_bugs as bugs
from reference_impl.model.broker_config import BrokerConfig
from reference_impl.model.clock import ManualClock
from reference_impl.model.consumer_group import ConsumerGroupConfig, ConsumerGroups
from reference_impl.model.topics import INTERNAL_TOPICS, TopicRegistry, internal_topic_spec
from reference_impl.tests.test_consumer_group import join


def registry(nodes: int = 3) -> TopicRegistry:
    return TopicRegistry(list(range(1, nodes + 1)), ManualClock(), BrokerConfig())


@pytest.mark.parametrize("name", sorted(INTERNAL_TOPICS))
@pytest.mark.parametrize("nodes", [1, 3, 4])
def test_ensure_internal_builds_the_coordinator_topic_once(name: str, nodes: int) -> None:
    topics = registry(nodes)
    assert topics.ensure_internal(name) == ErrorCode.leader_not_available
    assert topics.ensure_internal(name) == ErrorCode.none
    topic = topics.get(name)
    spec = internal_topic_spec(name, topics.config, nodes)
    assert topic.is_internal and len(topic.partitions) == spec.num_partitions == 50
    assert topic.replication_factor == min(3, nodes)
    assert topic.configs["cleanup.policy"] == ("delete" if name == "__share_group_state" else "compact")


def test_metadata_auto_creation_of_an_internal_name_is_the_internal_topic() -> None:
    topics = registry()
    assert topics.auto_create("__consumer_offsets") == ErrorCode.leader_not_available
    assert len(topics.get("__consumer_offsets").partitions) == BrokerConfig().transaction.offsets_topic_num_partitions


def test_a_consumer_group_regex_matches_internal_topics() -> None:
    topics = registry()
    topics.ensure_internal("__consumer_offsets")
    topics.create("orders", num_partitions=1)
    groups = ConsumerGroups(ManualClock(), ConsumerGroupConfig(), bugs.NO_BUGS)
    r = join(groups, topics, "m1", names=(), regex="orders|__consumer_offsets")
    assert r.error == ErrorCode.none
    assert set(r.assignment) == {topics.get("orders").topic_id, topics.get("__consumer_offsets").topic_id}
