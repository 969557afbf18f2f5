"""Which nodes a fault hits: a node count drawn with the run's seeded RNG, or a role
resolved against the live cluster at injection time (FindCoordinator / Metadata)."""

from __future__ import annotations

import base64
import random
import time
import uuid

from kio.schema.errors import ErrorCode

from chaos.nemesis.base import FaultSpec
from targets.target import NotSupportedByTarget
from reference_impl.client.raw_client import ClusterClient

COORDINATOR_KEY_TYPES = {"group-coordinator": 0, "txn-coordinator": 1, "share-coordinator": 2}
"""FindCoordinator key types (Kafka's FindCoordinatorRequest.CoordinatorType: GROUP,
TRANSACTION, SHARE; SHARE is KIP-932's, keyed ``group:topicId:partition``)."""


def pick_nodes(spec: FaultSpec, node_ids: list[int], rng: random.Random, admin_bootstrap: str) -> tuple[int, ...]:
    if spec.target == "role":
        return (resolve_role(spec, admin_bootstrap),)
    n = len(node_ids)
    count = {"one": 1, "minority": max(1, (n - 1) // 2), "majority": n // 2 + 1, "all": n}.get(spec.target)
    if count is None:
        raise ValueError(f"unknown fault target {spec.target!r}")
    return tuple(sorted(rng.sample(sorted(node_ids), min(count, n))))


def resolve_role(spec: FaultSpec, bootstrap: str, timeout_s: float = 10.0) -> int:
    """The node that holds ``spec.role`` now.

    params: ``transactional_id`` (txn-coordinator), ``group`` (group-coordinator),
    ``share_key`` (share-coordinator, ``group:topicId:partition``) or ``group``, ``topic``
    and ``partition`` (share-coordinator, key built from Metadata's topic id), ``topic``
    and ``partition`` (leader)."""
    role = spec.role
    with ClusterClient(bootstrap, timeout=timeout_s) as cc:
        if role == "share-coordinator" and not spec.param("share_key"):
            key = share_key(cc, spec.param("group"), spec.param("topic"), int(spec.param("partition", 0)))
            return _coordinator(cc, key, COORDINATOR_KEY_TYPES[role], timeout_s)
        if role in COORDINATOR_KEY_TYPES:
            key = spec.param({"txn-coordinator": "transactional_id", "group-coordinator": "group",
                              "share-coordinator": "share_key"}[role])
            if not key:
                raise ValueError(f"fault {spec.name} needs the coordinator key in its params")
            return _coordinator(cc, key, COORDINATOR_KEY_TYPES[role], timeout_s)
        if role == "leader":
            md = cc.refresh([spec.param("topic")])
            for t in md.topics:
                for p in t.partitions:
                    if p.partition_index == int(spec.param("partition", 0)) and p.leader_id >= 0:
                        return int(p.leader_id)
            raise LookupError(f"no leader for {spec.param('topic')}-{spec.param('partition', 0)}")
        if role == "controller":
            controller = int(cc.refresh().controller_id)
            if controller < 0:
                raise NotSupportedByTarget("the target does not report an active controller in Metadata")
            return controller
    raise ValueError(f"unknown role {role!r}")


def share_key(cc: ClusterClient, group: str, topic: str, partition: int) -> str:
    """KIP-932's share-partition key ``group:topicId:partition``, the topic id written as
    Kafka's Uuid.toString (URL-safe base64, no padding)."""
    if not group or not topic:
        raise ValueError("share-coordinator needs params share_key, or group and topic (and partition)")
    md = cc.refresh([topic])
    topic_id = next((t.topic_id for t in md.topics if t.name == topic), None)
    if topic_id is None:
        raise LookupError(f"no topic id for {topic!r} in Metadata")
    raw = base64.urlsafe_b64encode(uuid.UUID(str(topic_id)).bytes).decode().rstrip("=")
    return f"{group}:{raw}:{partition}"


def _coordinator(cc: ClusterClient, key: str, key_type: int, timeout_s: float) -> int:
    """FindCoordinator until it names a node (Kafka answers COORDINATOR_NOT_AVAILABLE
    while it creates the internal topic)."""
    deadline = time.monotonic() + timeout_s
    while True:
        error, node_id = cc.find_coordinator(key, key_type)
        if error == ErrorCode.none:
            return node_id
        if time.monotonic() >= deadline:
            raise LookupError(f"FindCoordinator({key!r}, key type {key_type}) kept failing: {ErrorCode(error).name}")
        time.sleep(0.2)
