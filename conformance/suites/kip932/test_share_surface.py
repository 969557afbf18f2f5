"""KIP-932's surface as a client sees it before any share group exists: the RPCs in
ApiVersions and the share.version feature that switches them on, the KIP's new error codes
as numbers on the wire, the broker settings and their defaults (DescribeConfigs BROKER),
and the internal `__share_group_state` topic (Metadata, DescribeConfigs TOPIC).

A setting a target describes with source DEFAULT must have the KIP's (or Kafka's, where
they differ and a divergence says so) default; one the target's test configuration
overrides (e.g. share.coordinator.state.topic.num.partitions=3 on small clusters) must lie
in the KIP's range. Kafka: ShareGroupConfig, ShareCoordinatorConfig, ShareVersion.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from clients import confluent, wire
from clients.share import (
    ACCEPT, E, SharePartitionUnderTest, ack_codes, alter_group_configs, join_share_group, new_member_id, share_fetch,
)
from conformance.suites.kip932.test_sessions import record_side, require_share_groups
from targets.reference_target import reference_target_config
from targets.target import NotSupportedByTarget
from reference_impl.client.raw_client import ClusterClient
from reference_impl.server.broker_server import ThreadedReferenceCluster
from reference_impl.protocol.api_keys import ApiKey

SHARE_RPCS = (ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_GROUP_DESCRIBE, ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE)
ADMIN_RPCS = (ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, ApiKey.ALTER_SHARE_GROUP_OFFSETS, ApiKey.DELETE_SHARE_GROUP_OFFSETS)
STATE_RPCS = (ApiKey.INITIALIZE_SHARE_GROUP_STATE, ApiKey.READ_SHARE_GROUP_STATE, ApiKey.WRITE_SHARE_GROUP_STATE,
              ApiKey.DELETE_SHARE_GROUP_STATE, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY)
# The KIP's table of new error codes (the oracle of KIP-932.ERR.001).
KIP_ERROR_CODES = {"INVALID_RECORD_STATE": 121, "SHARE_SESSION_NOT_FOUND": 122,
                   "INVALID_SHARE_SESSION_EPOCH": 123, "FENCED_STATE_EPOCH": 124}
STATE_TOPIC = "__share_group_state"
# name -> (KIP default, lowest allowed, highest allowed)
LOCK_BOUNDS = {
    "group.share.min.record.lock.duration.ms": (15_000, 1_000, 30_000),
    "group.share.max.record.lock.duration.ms": (60_000, 30_000, 3_600_000),
}
STATE_TOPIC_SETTINGS = {
    "share.coordinator.state.topic.num.partitions": (50, 1, None),
    "share.coordinator.state.topic.replication.factor": (3, 1, None),
    "share.coordinator.state.topic.min.isr": (2, 1, None),
    "share.coordinator.state.topic.segment.bytes": (104_857_600, 1, None),
}
COORDINATOR_TUNING = {  # KIP-932.CONFIG.009 (informational in the KIP: present, positive)
    "share.coordinator.load.buffer.size": 5_242_880,
    "share.coordinator.snapshot.update.records.per.snapshot": 500,
    "share.coordinator.threads": 1,
    "share.coordinator.write.timeout.ms": 5_000,
    "share.fetch.purgatory.purge.interval.requests": 1_000,
}


def broker_entries(target: Any) -> dict[str, Any]:
    """DescribeConfigs BROKER of the first broker (confluent admin): name -> ConfigEntry."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    admin = confluent.admin(target)
    broker = sorted(admin.list_topics(timeout=15).brokers)[0]
    res = ConfigResource(ResourceType.BROKER, str(broker))
    try:
        return admin.describe_configs([res], request_timeout=15)[res].result(15)
    except Exception as exc:  # noqa: BLE001 - e.g. librdkafka's mock
        raise NotSupportedByTarget(f"DescribeConfigs BROKER is not answered: {exc}") from exc


def check_setting(entries: dict[str, Any], name: str, default: int, low: int, high: int | None,
                  record_property) -> None:
    entry = entries[name]
    value = int(entry.value)
    record_property(name, [value, "default" if entry.is_default else "set"])
    if entry.is_default:
        assert value == default, (name, value, default)
    assert value >= low and (high is None or value <= high), (name, value, low, high)


@pytest.mark.requirement("KIP-932.ENABLE.001", "KIP-932.ENABLE.002")
def test_share_rpcs_are_advertised_together_with_the_share_feature(target, record_property):
    """The four share RPCs are advertised all together or not at all; where advertised, the
    offsets admin RPCs and the five share-state RPCs are too, each from v0 or v1 up (4.1
    dropped v0). Where the target reports finalized features, the RPCs are advertised
    exactly when share.version >= 1 is finalized (the feature that switches them on).
    KIP-932.ENABLE.002: whether the RPCs start at the KIP's v0 or Kafka 4.1's v1 is recorded."""
    caps = target.capabilities()
    advertised = [k for k in SHARE_RPCS if caps.supports_api(k)]
    record_property("share_rpcs", {ApiKey(k).name: caps.api_versions.get(k) for k in SHARE_RPCS + ADMIN_RPCS + STATE_RPCS})
    record_property("share.version", caps.feature("share.version"))
    assert len(advertised) in (0, len(SHARE_RPCS)), advertised
    if caps.finalized_features:
        assert bool(advertised) == (caps.feature("share.version") >= 1), (advertised, caps.finalized_features)
    if not advertised:
        raise NotSupportedByTarget("the target advertises none of the share RPCs: it has no share groups")
    for key in SHARE_RPCS:
        lo, hi = caps.api_versions[key]
        assert lo <= 1 <= hi, (ApiKey(key).name, lo, hi)
    # The KIP defines the RPCs at v0; Kafka 4.1 removed 4.0's early-access v0 (DIV-93227).
    lowest = {caps.api_versions[key][0] for key in SHARE_RPCS}
    record_property("follows:share_rpcs_from_v0", "kip" if lowest == {0} else "kafka" if lowest == {1} else "mixed")
    if "share.version" in caps.supported_features or caps.finalized_features:  # a broker, not a mock
        for key in ADMIN_RPCS + STATE_RPCS:
            assert caps.supports_api(key), f"{ApiKey(key).name} is not advertised next to the share RPCs"


@pytest.mark.requirement("KIP-932.ERR.001")
def test_the_kips_error_codes_have_their_numbers_on_the_wire(target, unique):
    """SHARE_SESSION_NOT_FOUND (an incremental ShareFetch without a session), INVALID_SHARE_
    SESSION_EPOCH (a skipped epoch) and INVALID_RECORD_STATE (acknowledging a record twice)
    arrive as 122, 123 and 121, the numbers in the KIP's table."""
    with wire.cluster_client(target) as cc:
        sp = SharePartitionUnderTest(target, cc, unique.topic(), unique.group()).open()
        a = sp.primed_member()
        leader = cc.leader_for(sp.topic, 0)
        no_session = share_fetch(leader, sp.group, new_member_id(), 1, [sp.key()])
        assert int(no_session.error_code) == KIP_ERROR_CODES["SHARE_SESSION_NOT_FOUND"], no_session
        skipped = share_fetch(leader, sp.group, a.member, a.epoch + 1, [sp.key()])
        assert int(skipped.error_code) == KIP_ERROR_CODES["INVALID_SHARE_SESSION_EPOCH"], skipped
        base = sp.produce([b"held", b"v"])  # base stays Acquired so the SPSO stays below base + 1
        assert a.fetch_until([sp.key()], 2) == {base: 1, base + 1: 1}
        assert ack_codes(a.ack({sp.key(): [(base + 1, base + 1, [ACCEPT])]})) == {0: 0}
        twice = ack_codes(a.ack({sp.key(): [(base + 1, base + 1, [ACCEPT])]}))
        assert twice == {0: KIP_ERROR_CODES["INVALID_RECORD_STATE"]}, twice
        # FENCED_STATE_EPOCH (124) on the wire: test_share_state_rpcs.py


@pytest.mark.requirement("KIP-932.CONFIG.003")
def test_lock_duration_bounds_are_described_and_enforced(target, unique, record_property):
    """group.share.min/max.record.lock.duration.ms are described by the broker, inside the
    KIP's ranges [1000, 30000] / [30000, 3600000] (the KIP defaults 15000 / 60000 are
    recorded: test clusters lower the minimum), and they bound the group config
    share.record.lock.duration.ms: min - 1 and max + 1 are INVALID_CONFIG, min and max are
    taken."""
    require_share_groups(target)
    entries = broker_entries(target)
    missing = [n for n in LOCK_BOUNDS if n not in entries]
    assert not missing, f"the broker does not describe {missing}"
    for name, (default, low, high) in LOCK_BOUNDS.items():
        value = int(entries[name].value)
        record_property(name, {"value": value, "kip_default": default, "is_default": entries[name].is_default})
        assert low <= value <= high, (name, value, low, high)
    lo = int(entries["group.share.min.record.lock.duration.ms"].value)
    hi = int(entries["group.share.max.record.lock.duration.ms"].value)
    assert lo <= hi
    with wire.cluster_client(target) as cc:
        group = unique.group()
        for value, refused in ((lo - 1, True), (hi + 1, True), (lo, False), (hi, False)):
            code, message = alter_group_configs(cc, group, {"share.record.lock.duration.ms": str(value)})
            assert code == (E.invalid_config if refused else E.none), (value, code, message)


# KIP-932.CONFIG.002's conflict: the KIP caps group.share.record.lock.duration.ms at 60000,
# its own group.share.max.record.lock.duration.ms allows up to 3600000 (DIV-93226).
KIP_LOCK_CAP_MS, RAISED_LOCK_MS, RAISED_MAX_LOCK_MS = 60_000, 90_000, 120_000
KAFKA_RAISED_LOCK_SPEC = (f"kafka-native:broker.group.share.record.lock.duration.ms={RAISED_LOCK_MS}"
                          f":broker.group.share.max.record.lock.duration.ms={RAISED_MAX_LOCK_MS}")


def raised_lock_cluster(target: Any) -> tuple[ThreadedReferenceCluster | None, int]:
    """A broker whose default lock is above the KIP's 60000 cap: for the reference, a
    private in-process one (a broker setting cannot change at run time); for Kafka, the
    target itself when it was started with one. (cluster to start or None, lock ms)."""
    if target.kind == "reference":
        config = reference_target_config()
        config.share_partition = dataclasses.replace(config.share_partition, record_lock_duration_ms=RAISED_LOCK_MS,
                                                     max_record_lock_duration_ms=RAISED_MAX_LOCK_MS)
        return ThreadedReferenceCluster(brokers=1, config=config), RAISED_LOCK_MS
    configured = target.spec.option("broker.group.share.record.lock.duration.ms")
    if configured is None or int(configured) <= KIP_LOCK_CAP_MS:
        raise NotSupportedByTarget("needs a broker started with group.share.record.lock.duration.ms above 60000; "
                                   f"run with --target {KAFKA_RAISED_LOCK_SPEC}")
    return None, int(configured)


@pytest.mark.requirement("KIP-932.CONFIG.002")
def test_a_default_lock_above_the_kips_cap_is_used(target, unique, request):
    """KIP-932.CONFIG.002: a broker started with group.share.record.lock.duration.ms=90000
    (max 120000) either runs with it (Kafka: the value only has to lie between the min and
    max settings) or holds to the KIP's 60000 cap; ShareFetch's AcquisitionLockTimeoutMs
    shows which, and is one of the two."""
    require_share_groups(target)
    cluster, configured = raised_lock_cluster(target)
    if cluster is not None:
        cluster.start()
    try:
        # The private reference cluster is plaintext; a Kafka target brings its own security.
        with (ClusterClient(cluster.bootstrap_servers) if cluster is not None else target.cluster_client()) as cc:
            topic, group = unique.topic(), unique.group()
            assert wire.create_topic(cc, topic, 1) == E.none
            tid = wire.topic_ids(cc, topic).topic_id
            member, _ = join_share_group(cc, group, [topic])
            resp = share_fetch(cc.leader_for(topic, 0), group, member, 0, [(tid, 0)])
            assert resp.error_code == E.none, resp
            lock = int(resp.acquisition_lock_timeout.total_seconds() * 1000)
            assert lock in (configured, KIP_LOCK_CAP_MS), f"lock {lock} ms; configured {configured} ms"
            record_side(request, "lock_above_60000", "kafka" if lock == configured else "kip")
            share_fetch(cc.leader_for(topic, 0), group, member, -1)
    finally:
        if cluster is not None:
            cluster.stop()


@pytest.mark.requirement("KIP-932.CONFIG.008", "KIP-932.CONFIG.009", "KIP-932.SCOORD.001")
def test_share_state_topic_and_coordinator_settings(target, unique, record_property):
    """Once a share group stored state: Metadata lists __share_group_state as internal with
    share.coordinator.state.topic.num.partitions partitions; its topic configs say
    cleanup.policy=delete and retention.ms=-1 (not compacted, kept for ever); the state-topic
    settings have the KIP's defaults (or a value in range where the cluster sets them); the
    share coordinator tuning settings are described, positive."""
    require_share_groups(target)
    entries = broker_entries(target)
    if not all(n in entries for n in STATE_TOPIC_SETTINGS):
        raise NotSupportedByTarget("the broker does not describe share.coordinator.state.topic.* "
                                   "(no __share_group_state topic of its own)")
    for name, (default, low, high) in STATE_TOPIC_SETTINGS.items():
        check_setting(entries, name, default, low, high, record_property)
    for name, kip_default in COORDINATOR_TUNING.items():
        assert name in entries, f"the broker does not describe {name}"
        value = int(entries[name].value)
        record_property(name, [value, kip_default])
        assert value > 0, (name, value)
    with wire.cluster_client(target) as cc:
        sp = SharePartitionUnderTest(target, cc, unique.topic(), unique.group()).open()
        a = sp.primed_member()
        base = sp.produce([b"v"])
        assert a.fetch_until([sp.key()], 1) == {base: 1}
        assert ack_codes(a.ack({sp.key(): [(base, base, [ACCEPT])]})) == {0: 0}
        md = next(t for t in cc.refresh([STATE_TOPIC]).topics if t.name == STATE_TOPIC)
        assert md.error_code == E.none and md.is_internal, md
        assert len(md.partitions) == int(entries["share.coordinator.state.topic.num.partitions"].value)
    from confluent_kafka.admin import ConfigResource, ResourceType

    admin = confluent.admin(target)
    res = ConfigResource(ResourceType.TOPIC, STATE_TOPIC)
    topic_cfg = admin.describe_configs([res], request_timeout=15)[res].result(15)
    record_property("state_topic_configs", {k: topic_cfg[k].value for k in ("cleanup.policy", "retention.ms")})
    assert topic_cfg["cleanup.policy"].value == "delete", topic_cfg["cleanup.policy"]
    assert topic_cfg["retention.ms"].value == "-1", topic_cfg["retention.ms"]
