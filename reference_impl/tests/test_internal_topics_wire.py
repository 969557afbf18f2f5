"""The coordinators' internal topics on the reference broker, as clients see them on Kafka:
the first FindCoordinator of a key type creates `__consumer_offsets` / `__transaction_state`
(handlers/find_coordinator.py), Metadata then lists it, internal, with the coordinator's
partition count and min(3, brokers) replicas; Metadata auto-creation of an internal name
builds the same topic, not a `num.partitions` one (model/topics.py internal_topic_spec).
franz-go's TestConsumeRegex waits for exactly this (an internal topic a regex must skip)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from reference_impl.client.raw_client import ClusterClient
from reference_impl.model.transaction_config import TransactionConfig
from reference_impl.tests.test_data_path_wire import nested, unique

GROUP, TRANSACTION = 0, 1


def listed(client: ClusterClient, name: str):
    """The topic's entry in an all-topics Metadata answer, or None."""
    return next((t for t in client.refresh(None).topics if t.name == name), None)


def test_find_coordinator_creates_the_internal_topic(cluster) -> None:
    defaults = TransactionConfig()
    with ClusterClient(cluster.bootstrap_servers) as client:
        for key_type, name, partitions in (
            (GROUP, "__consumer_offsets", defaults.offsets_topic_num_partitions),
            (TRANSACTION, "__transaction_state", defaults.transaction_state_log_num_partitions),
        ):
            assert client.find_coordinator(unique("key"), key_type)[0] == ErrorCode.none
            topic = listed(client, name)
            assert topic is not None, f"Metadata does not list {name} after FindCoordinator"
            assert topic.error_code == ErrorCode.none and topic.is_internal
            assert len(topic.partitions) == partitions
            assert {len(p.replica_nodes) for p in topic.partitions} == {min(3, len(client.nodes))}


def test_metadata_auto_creation_of_an_internal_name_builds_the_internal_topic(client3: ClusterClient) -> None:
    def md(name: str):
        return client3.bootstrap.request(
            3, 12, topics=(nested(3, 12, "MetadataRequestTopic", name=name, topic_id=None),),
            allow_auto_topic_creation=True, include_topic_authorized_operations=False,
        ).topics[0]

    if listed(client3, "__transaction_state") is None:
        assert md("__transaction_state").error_code == ErrorCode.leader_not_available
    topic = md("__transaction_state")
    assert topic.error_code == ErrorCode.none and topic.is_internal
    assert len(topic.partitions) == TransactionConfig().transaction_state_log_num_partitions
