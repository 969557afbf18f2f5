"""Metadata and CreateTopics on the wire (raw protocol client)."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from clients import confluent, wire
from reference_impl.client.raw_client import RawClient


def _metadata(client: RawClient, topics, auto_create=False):
    r = wire.Req(client, wire.METADATA, 12, lowest=1)
    return r.send(
        topics=None if topics is None else tuple(r.part("MetadataRequestTopic", name=t, topic_id=None) for t in topics),
        allow_auto_topic_creation=auto_create,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )


def brokers_scenario(target, ids):
    with wire.cluster_client(target) as cc:
        md = _metadata(cc.bootstrap, [])
        reachable = {}
        for b in md.brokers:
            with cc.connect_to(b.host, int(b.port)) as c:
                reachable[int(b.node_id)] = bool(c.api_versions())
    return {
        "broker_count": len(md.brokers),
        "node_ids": sorted(int(b.node_id) for b in md.brokers),
        "controller_id": int(md.controller_id),
        "reachable": reachable,
        "topics_in_empty_request": len(md.topics),
    }


@pytest.mark.requirement("PROTO.META.001")
def test_brokers_listed_once_and_reachable(differential, target):
    res = differential.run(brokers_scenario)
    obs = res.target
    assert obs["broker_count"] == len(set(obs["node_ids"])) >= 1
    assert all(obs["reachable"].values()), f"unreachable advertised brokers: {obs['reachable']}"
    assert obs["controller_id"] in obs["node_ids"] + [-1]
    if target.kind in ("reference", "kafka-native", "librdkafka-mock"):
        assert obs["broker_count"] == len(target.node_ids)


def topic_layout_scenario(target, ids):
    topic = ids.topic()
    confluent.create_topic(target, topic, partitions=3)
    with wire.cluster_client(target) as cc:
        first = _metadata(cc.bootstrap, [topic])
        brokers = {int(b.node_id) for b in first.brokers}
        ids_seen = set()
        for node in sorted(cc.nodes):
            md = _metadata(cc.node(node), [topic])
            ids_seen.add(md.topics[0].topic_id)
        t = first.topics[0]
        parts = sorted(t.partitions, key=lambda p: p.partition_index)
        return {
            "error_code": int(t.error_code),
            "partition_indexes": [int(p.partition_index) for p in parts],
            "leaders_are_brokers": all(int(p.leader_id) in brokers for p in parts),
            "leader_in_replicas": all(int(p.leader_id) in p.replica_nodes for p in parts),
            "isr_subset": all(set(p.isr_nodes) <= set(p.replica_nodes) for p in parts),
            "topic_id_nonzero": t.topic_id not in (None, uuid.UUID(int=0)),
            "topic_id_stable": len(ids_seen) == 1 and t.topic_id in ids_seen,
            "all_topics_lists_it": topic in {x.name for x in _metadata(cc.bootstrap, None).topics},
        }


@pytest.mark.requirement("PROTO.META.002", "PROTO.META.003", "PROTO.META.005")
def test_topic_partitions_leaders_and_ids(differential):
    obs = differential.run(topic_layout_scenario, requirement="PROTO.META.002").target
    assert obs["error_code"] == 0
    assert obs["partition_indexes"] == [0, 1, 2]
    assert obs["leaders_are_brokers"] and obs["leader_in_replicas"] and obs["isr_subset"]
    assert obs["topic_id_nonzero"], "Metadata v10+ must carry a topic id"
    assert obs["topic_id_stable"], "topic id differs between requests or brokers"
    assert obs["all_topics_lists_it"], "Metadata with topics=null omitted an existing topic"


def unknown_topic_scenario(target, ids):
    topic = ids.topic()
    with wire.cluster_client(target) as cc:
        first = _metadata(cc.bootstrap, [topic]).topics[0]
        again = _metadata(cc.bootstrap, [topic]).topics[0]
    return {
        "error_code": int(first.error_code),
        "partitions": len(first.partitions),
        "still_unknown": int(again.error_code),
    }


@pytest.mark.requirement("PROTO.META.004")
def test_unknown_topic_without_auto_create(differential):
    obs = differential.run(unknown_topic_scenario).target
    assert obs["error_code"] == ErrorCode.unknown_topic_or_partition
    assert obs["partitions"] == 0
    assert obs["still_unknown"] == ErrorCode.unknown_topic_or_partition, "the request created the topic"


def create_twice_scenario(target, ids):
    topic = ids.topic()
    with wire.cluster_client(target) as cc:
        first = wire.create_topic(cc, topic, partitions=2)
        second = wire.create_topic(cc, topic, partitions=2)
    return {"first": first, "second": second}


@pytest.mark.requirement("PROTO.TOPIC.001")
def test_create_topic_twice(differential):
    obs = differential.run(create_twice_scenario).target
    assert obs["first"] == 0
    assert obs["second"] == ErrorCode.topic_already_exists
