"""target_limits reads a target's broker limits over the wire: Kafka's defaults from a
reference broker started with them (as `kipcheck broker` runs), the relaxed lock minimum
of the reference target, and a too-long wait becomes "not supported by target"."""

from __future__ import annotations

import pytest

from conformance import target_limits
from targets.target import NotSupportedByTarget
from targets.factory import create_target
from reference_impl.server.broker_server import ThreadedReferenceCluster


@pytest.fixture(scope="module")
def kafka_default_target():
    with ThreadedReferenceCluster(brokers=1) as cluster:
        target = create_target(f"external:{cluster.bootstrap_servers}")
        target.start()
        try:
            yield target
        finally:
            target.stop()


def test_a_broker_with_kafka_defaults_clamps_a_short_lock_to_15_s(kafka_default_target):
    limits = target_limits.limits(kafka_default_target)
    assert limits.described
    assert limits["group.share.min.record.lock.duration.ms"] == 15_000
    assert limits["group.share.min.session.timeout.ms"] == 45_000
    assert target_limits.lock_ms(kafka_default_target, 1000) == 15_000
    assert target_limits.lock_ms(kafka_default_target, 30_000) == 30_000
    assert target_limits.lock_ms(kafka_default_target, 600_000) == 60_000
    assert target_limits.limits(kafka_default_target) is limits  # cached per target


def test_the_reference_declares_the_migration_policy_it_follows(kafka_default_target):
    """It models no online migration (docs/consumer-groups.md): `disabled`, reported, not assumed."""
    limits = target_limits.limits(kafka_default_target)
    assert limits.policies == {"group.consumer.migration.policy": "disabled"}
    assert limits.policy("group.consumer.migration.policy") == "disabled"


def test_an_unreported_policy_is_kafkas_default():
    limits = target_limits.TargetLimits(dict(target_limits.KAFKA_DEFAULTS), described=False)
    assert limits.policy("group.consumer.migration.policy") == "bidirectional"
    assert "group.consumer.migration.policy" not in limits.policies


def test_the_reference_target_allows_a_1_s_lock():
    target = create_target("reference")
    target.start()
    try:
        assert target_limits.lock_ms(target, 1000) == 1000
    finally:
        target.stop()


def test_an_unreasonable_wait_names_the_setting():
    target_limits.require_wait(60, "x", "some.setting")
    with pytest.raises(NotSupportedByTarget, match="lower the broker setting group.share.min.record.lock"):
        target_limits.require_wait(121, "waiting for locks", "group.share.min.record.lock.duration.ms")
