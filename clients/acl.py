"""ACL set-up for the authorization suites (issue 14 item 5).

A target with an authorizer (``kafka-native:authorizer=standard``,
``reference:authorizer=standard``) names a super user, whose
clients (``target.client_config()``) create topics and grant ACLs, and unprivileged users
(``target.acl_principals().users``) that hold nothing until a test grants it. Grants go
through CreateAcls with confluent-kafka's AdminClient, whose ResourceType / AclOperation
enums carry Kafka's own codes (org.apache.kafka.common.resource.ResourceType,
org.apache.kafka.common.acl.AclOperation). Targets without an authorizer raise
NotSupportedByTarget naming the ``authorizer`` setting.

A grant is committed by the controller before CreateAcls answers, but a broker's
StandardAuthorizer applies it when it replays the metadata log: `until_allowed` retries a
call while it is still refused, for a bounded time, so a grant that never takes effect
fails the test.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka.admin import (
    AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType,
)

from clients import confluent, wire
from targets.target import AclPrincipals, Target
from reference_impl.client.raw_client import RawClient

Op = AclOperation
Res = ResourceType
CLUSTER = (ResourceType.BROKER, "kafka-cluster")  # Kafka's CLUSTER resource (code 4), one name
GRANT_WAIT_S = 20.0
# Which of AclPrincipals.users a test connects as. RESOURCE_USER gets grants on its own
# topics and groups only, so every file may share it; a file that grants CLUSTER_ACTION (a
# cluster-wide grant, which would turn another test's expected refusal into a success) has
# a user of its own.
RESOURCE_USER, KIP932_CLUSTER_USER, KIP98_CLUSTER_USER = range(3)


def require_authorizer(target: Target) -> AclPrincipals:
    """The target's ACL principals; NotSupportedByTarget (setting: authorizer) without one."""
    return target.acl_principals()


def grant(target: Target, user: str, *acls: tuple[ResourceType, str, AclOperation], timeout_s: float = 30.0) -> None:
    """ALLOW `user` each (resource type, literal name, operation), as the super user."""
    bindings = [
        AclBinding(rtype, name, ResourcePatternType.LITERAL, AclPrincipals.principal(user), "*", op,
                   AclPermissionType.ALLOW)
        for rtype, name, op in acls
    ]
    admin = confluent.admin(target)  # held until the futures resolve (a dropped handle cancels them)
    for future in admin.create_acls(bindings, request_timeout=timeout_s).values():
        future.result(timeout_s)


class AclScene:
    """The super user's client and the unprivileged user's (`role`, an index into the
    target's AclPrincipals.users); coordinators and leaders are found as the super user
    (FindCoordinator needs DESCRIBE itself) and reached as the user through `as_user`."""

    def __init__(self, target: Target, role: int) -> None:
        self.target, self.user = target, require_authorizer(target).users[role]
        self.su = wire.cluster_client(target)
        self.cc = target.cluster_client_as(self.user)

    def as_user(self, node: RawClient) -> RawClient:
        """The user's connection to the broker the super-user connection `node` points at."""
        for node_id in self.su.nodes:
            if self.su.node(node_id) is node:
                return self.cc.node(node_id)
        raise LookupError("not a node of the super user's client")

    def grant(self, *acls: tuple[ResourceType, str, AclOperation]) -> None:
        grant(self.target, self.user, *acls)

    def close(self) -> None:
        self.cc.close()
        self.su.close()


def until_allowed(call: Callable[[], Any], refused: Callable[[Any], bool], wait_s: float = GRANT_WAIT_S) -> Any:
    """`call()`'s answer once `refused(answer)` is false, or the last refusal after
    `wait_s` (the broker's authorizer applies a fresh grant a moment after CreateAcls)."""
    deadline = time.monotonic() + wait_s
    while True:
        answer = call()
        if not refused(answer) or time.monotonic() > deadline:
            return answer
        time.sleep(0.2)
