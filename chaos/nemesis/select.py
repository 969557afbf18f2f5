"""Which nodes a fault hits: a node count drawn with the run's seeded RNG, or a role
resolved against the live cluster at injection time (FindCoordinator / Metadata)."""

from __future__ import annotations

import random
import time

from kio.schema.errors import ErrorCode

from chaos.nemesis.base import FaultSpec
from fixtures.target import NotSupportedByTarget
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
    ``share_key`` (share-coordinator, ``group:topicId:partition``), ``topic`` and
    ``partition`` (leader)."""
    role = spec.role
    with ClusterClient(bootstrap, timeout=timeout_s) as cc:
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
