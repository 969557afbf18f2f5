"""KIP-98 broker settings of the transaction coordinator and its log, `__transaction_state`.

A setting's KIP default is checked only where the target leaves it unset (DescribeConfigs
source DEFAULT_CONFIG): test clusters legitimately override them (kafka-native: one
replica, 3 partitions). What holds whatever the value is that the transaction log is
built from the settings the broker reports: after a transactional InitProducerId the
internal topic `__transaction_state` exists with transaction.state.log.num.partitions
partitions of transaction.state.log.replication.factor replicas, and its topic configs
min.insync.replicas / segment.bytes equal transaction.state.log.min.isr /
transaction.state.log.segment.bytes (Kafka's TransactionLog.enforcedConfigs).
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

from clients import confluent, wire
from clients.txn import init_ok
from conformance.suites import require_api
from conformance.suites.kip98 import require_transactions
from targets.target import NotSupportedByTarget
from reference_impl.protocol.api_keys import ApiKey

TXN_LOG = "__transaction_state"
DESCRIBE_TIMEOUT_S = 30.0
KIP_DEFAULTS = {
    "transactional.id.expiration.ms": "604800000",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.num.partitions": "50",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.segment.bytes": "104857600",
}


def describe(target, resource: ConfigResource, names: list[str]) -> dict[str, Any]:
    """{name: ConfigEntry} of the names the target describes for the resource."""
    require_api(target.capabilities(), ApiKey.DESCRIBE_CONFIGS, what="DescribeConfigs")
    admin = confluent.admin(target)
    entries = admin.describe_configs([resource], request_timeout=DESCRIBE_TIMEOUT_S)[resource].result(DESCRIBE_TIMEOUT_S)
    return {n: entries[n] for n in names if n in entries}


def broker_settings(target, names: list[str]) -> dict[str, Any]:
    admin = confluent.admin(target)
    broker = sorted(admin.list_topics(timeout=DESCRIBE_TIMEOUT_S).brokers)[0]
    got = describe(target, ConfigResource(ResourceType.BROKER, str(broker)), names)
    missing = [n for n in names if n not in got]
    if missing:
        raise NotSupportedByTarget(f"DescribeConfigs for the broker does not report {', '.join(missing)}")
    return got


def is_unset(entry: Any) -> bool:
    return entry.source == ConfigSource.DEFAULT_CONFIG.value


@pytest.mark.requirement("KIP-98.CONFIG.002")
def test_transactional_id_expiration_default_is_seven_days(target):
    """KIP-98.CONFIG.002: transactional.id.expiration.ms is 604800000 when unset."""
    entry = broker_settings(target, ["transactional.id.expiration.ms"])["transactional.id.expiration.ms"]
    if not is_unset(entry):
        raise NotSupportedByTarget(
            f"the target sets transactional.id.expiration.ms={entry.value}: its default is observable only when unset")
    assert entry.value == KIP_DEFAULTS["transactional.id.expiration.ms"], (
        f"transactional.id.expiration.ms defaults to {entry.value}, the KIP says 604800000 (7 days)")


def _txn_log_metadata(target, ids) -> Any:
    """Metadata of __transaction_state after one transactional InitProducerId (which
    creates the topic on Kafka)."""
    require_transactions(target.capabilities())
    with wire.cluster_client(target) as cc:
        init_ok(cc, ids.transactional_id())
        md = cc.refresh([TXN_LOG])
    topic = next((t for t in md.topics if t.name == TXN_LOG), None)
    if topic is None or int(topic.error_code) != 0:
        raise NotSupportedByTarget(f"the target does not show {TXN_LOG} in Metadata (its transaction log is not a topic)")
    return topic


def _check_default(entry: Any, name: str) -> None:
    if is_unset(entry):
        assert entry.value == KIP_DEFAULTS[name], f"{name} defaults to {entry.value}, the KIP says {KIP_DEFAULTS[name]}"


@pytest.mark.requirement("KIP-98.TXN.008", "KIP-98.CONFIG.003")
def test_transaction_log_is_an_internal_topic_built_from_its_settings(target, unique):
    """TXN.008: the coordinator's state lives in the internal topic __transaction_state.
    CONFIG.003: its partition count and replication factor are the broker's settings."""
    require_transactions(target.capabilities())  # no transactions, no transaction log (before any config read)
    names = ["transaction.state.log.num.partitions", "transaction.state.log.replication.factor"]
    settings = broker_settings(target, names)
    topic = _txn_log_metadata(target, unique)
    assert topic.is_internal, f"{TXN_LOG} must be an internal topic"
    partitions = len(topic.partitions)
    factors = sorted({len(p.replica_nodes) for p in topic.partitions})
    assert partitions == int(settings[names[0]].value), (
        f"{TXN_LOG} has {partitions} partitions, transaction.state.log.num.partitions is {settings[names[0]].value}")
    assert factors == [int(settings[names[1]].value)], (
        f"{TXN_LOG} replication factors {factors}, transaction.state.log.replication.factor is {settings[names[1]].value}")
    for name in names:
        _check_default(settings[name], name)


@pytest.mark.requirement("KIP-98.CONFIG.004")
def test_transaction_log_min_isr_and_segment_size_follow_the_settings(target, unique):
    """KIP-98.CONFIG.004: the topic's min.insync.replicas and segment.bytes are the broker's settings."""
    require_transactions(target.capabilities())  # as above
    names = ["transaction.state.log.min.isr", "transaction.state.log.segment.bytes"]
    settings = broker_settings(target, names)
    _txn_log_metadata(target, unique)
    topic_configs = describe(target, ConfigResource(ResourceType.TOPIC, TXN_LOG), ["min.insync.replicas", "segment.bytes"])
    assert topic_configs.get("min.insync.replicas") is not None and topic_configs.get("segment.bytes") is not None, (
        f"DescribeConfigs({TXN_LOG}) lacks min.insync.replicas / segment.bytes: {sorted(topic_configs)}")
    assert topic_configs["min.insync.replicas"].value == settings[names[0]].value, (
        f"{TXN_LOG} min.insync.replicas={topic_configs['min.insync.replicas'].value}, "
        f"transaction.state.log.min.isr={settings[names[0]].value}")
    assert topic_configs["segment.bytes"].value == settings[names[1]].value, (
        f"{TXN_LOG} segment.bytes={topic_configs['segment.bytes'].value}, "
        f"transaction.state.log.segment.bytes={settings[names[1]].value}")
    for name in names:
        _check_default(settings[name], name)
