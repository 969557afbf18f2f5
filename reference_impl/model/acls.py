"""ACLs and the authorizer decision (Kafka's StandardAuthorizer, KIP-801), pure model.

An ACL is a binding of a resource pattern (type, name, LITERAL or PREFIXED) to a principal,
host, operation and ALLOW/DENY. `AclStore.authorize` answers as StandardAuthorizerData
does: super users are allowed everything; a matching DENY wins over any ALLOW; an ALLOW
of ALL, of the operation itself, or of an operation that implies it (READ, WRITE, DELETE
and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS) allows; a DENY only
matches the operation itself or ALL (a DENY of READ does not deny DESCRIBE); and with no
matching ACL the answer is allow.everyone.if.no.acl.found (false here).

The codes are Kafka's own (org.apache.kafka.common.resource.ResourceType,
PatternType, org.apache.kafka.common.acl.AclOperation, AclPermissionType).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


def operations_bitfield(ops: Iterable[Operation]) -> int:
    """The int32 bit field of authorized operations (Kafka's Utils.to32BitField): bit op."""
    return sum(1 << op for op in set(ops))


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


WILDCARD = "*"  # a LITERAL name, principal or host matching every one
CLUSTER_NAME = "kafka-cluster"

# Operations an ALLOW of the key grants besides itself (StandardAuthorizerData's
# IMPLIES_DESCRIBE / IMPLIES_DESCRIBE_CONFIGS, read the other way round).
_ALLOW_IMPLIES: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset({Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.ALTER_CONFIGS}),
}


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def validation_error(self) -> str | None:
        """Why Kafka's CreateAcls refuses this binding (InvalidRequest), or None."""
        if self.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            return f"invalid resource type {int(self.resource_type)}"
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            return f"invalid pattern type {int(self.pattern_type)}"
        if self.operation in (Operation.UNKNOWN, Operation.ANY):
            return f"invalid operation {int(self.operation)}"
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            return f"invalid permission type {int(self.permission)}"
        if not self.resource_name or ":" not in self.principal:
            return "resource name must be non-empty and the principal <type>:<name>"
        if self.resource_type is ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            return f"the cluster resource is named {CLUSTER_NAME}"
        return None

    def names(self, resource_name: str) -> bool:
        """Whether this binding's pattern covers the resource `resource_name`."""
        if self.pattern_type is PatternType.PREFIXED:
            return resource_name.startswith(self.resource_name)
        return self.resource_name in (WILDCARD, resource_name)


@dataclass(frozen=True, slots=True)
class AclFilter:
    """DescribeAcls / DeleteAcls filter: None (or ANY) fields match everything; pattern
    MATCH selects the bindings that would apply to the literal resource name."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def matches(self, acl: AclBinding) -> bool:
        return (
            self.resource_type in (ResourceType.ANY, acl.resource_type)
            and self._pattern_matches(acl)
            and self.principal in (None, acl.principal)
            and self.host in (None, acl.host)
            and self.operation in (Operation.ANY, acl.operation)
            and self.permission in (Permission.ANY, acl.permission)
        )

    def _pattern_matches(self, acl: AclBinding) -> bool:
        if self.pattern_type is PatternType.MATCH:
            return self.resource_name is None or acl.names(self.resource_name)
        if self.pattern_type not in (PatternType.ANY, acl.pattern_type):
            return False
        return self.resource_name in (None, acl.resource_name)


@dataclass
class AuthorizerConfig:
    """authorizer.class.name set (enabled), super.users, and the SASL/PLAIN users the
    listener accepts (name -> password). allow.everyone.if.no.acl.found is false."""

    enabled: bool = False
    super_users: frozenset[str] = frozenset()
    users: dict[str, str] = field(default_factory=dict)


@dataclass
class AclStore:
    config: AuthorizerConfig = field(default_factory=AuthorizerConfig)
    acls: list[AclBinding] = field(default_factory=list)

    def create(self, acl: AclBinding) -> str | None:
        """Adds `acl` (idempotent, as Kafka's); the validation error instead, if any."""
        error = acl.validation_error()
        if error is None and acl not in self.acls:
            self.acls.append(acl)
        return error

    def describe(self, flt: AclFilter) -> list[AclBinding]:
        return [a for a in self.acls if flt.matches(a)]

    def delete(self, flt: AclFilter) -> list[AclBinding]:
        """Removes and returns the bindings `flt` matches."""
        gone = self.describe(flt)
        self.acls = [a for a in self.acls if a not in gone]
        return gone

    def authorize(self, principal: str, host: str, op: Operation, rtype: ResourceType, name: str) -> bool:
        if not self.config.enabled or principal in self.config.super_users:
            return True
        allowed = False
        for acl in self._applicable(principal, host, rtype, name):
            if acl.permission is Permission.DENY and acl.operation in (op, Operation.ALL):
                return False
            if acl.permission is Permission.ALLOW and _allow_covers(acl.operation, op):
                allowed = True
        return allowed

    def _applicable(self, principal: str, host: str, rtype: ResourceType, name: str) -> list[AclBinding]:
        return [a for a in self.acls
                if a.resource_type is rtype and a.names(name) and _principal_matches(a, principal, host)]


def _principal_matches(acl: AclBinding, principal: str, host: str) -> bool:
    return acl.principal in (principal, "User:" + WILDCARD) and acl.host in (WILDCARD, host)


def _allow_covers(granted: Operation, wanted: Operation) -> bool:
    return granted in (wanted, Operation.ALL) or granted in _ALLOW_IMPLIES.get(wanted, frozenset())
