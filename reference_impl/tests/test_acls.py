"""The ACL store (model/acls.py) and, over the wire, the SASL/PLAIN listener and the ACL RPCs
of a reference cluster with an authorizer (reference:authorizer=standard)."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from reference_impl.client.raw_client import ClusterClient, RawClient
from reference_impl.client.sasl import AuthenticationError
from reference_impl.client.security import ClientSecurity
from reference_impl.handlers.sasl_authenticate import plain_user
from reference_impl.model.acls import (
    AclBinding, AclFilter, AclStore, AuthorizerConfig, Operation as Op, PatternType as Pat, Permission as Perm,
    ResourceType as Res,
)
from reference_impl.model.broker_state import BrokerConfig
from reference_impl.protocol import framing, payloads
from reference_impl.protocol.api_keys import ApiKey
from reference_impl.server.broker_server import ThreadedReferenceCluster

ALICE, HOST = "User:alice", "127.0.0.1"


def store(*acls: AclBinding) -> AclStore:
    s = AclStore(AuthorizerConfig(enabled=True, super_users=frozenset({"User:admin"})))
    for acl in acls:
        assert s.create(acl) is None
    return s


def acl(rtype: Res, name: str, op: Op, perm: Perm = Perm.ALLOW, pattern: Pat = Pat.LITERAL,
        principal: str = ALICE, host: str = "*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def test_nothing_is_allowed_without_an_acl_but_a_super_user_may_do_anything():
    s = store()
    assert not s.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "t")
    assert s.authorize("User:admin", HOST, Op.CLUSTER_ACTION, Res.CLUSTER, "kafka-cluster")


def test_without_an_authorizer_everything_is_allowed():
    assert AclStore().authorize(ALICE, HOST, Op.WRITE, Res.TRANSACTIONAL_ID, "T")


def test_deny_wins_over_allow_and_a_deny_of_all_denies_every_operation():
    s = store(acl(Res.TOPIC, "t", Op.READ), acl(Res.TOPIC, "*", Op.READ, Perm.DENY))
    assert not s.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "t")
    s = store(acl(Res.GROUP, "g", Op.READ), acl(Res.GROUP, "g", Op.ALL, Perm.DENY))
    assert not s.authorize(ALICE, HOST, Op.READ, Res.GROUP, "g")


def test_prefixed_patterns_cover_names_with_the_prefix_only():
    s = store(acl(Res.TOPIC, "orders-", Op.WRITE, pattern=Pat.PREFIXED))
    assert s.authorize(ALICE, HOST, Op.WRITE, Res.TOPIC, "orders-eu")
    assert not s.authorize(ALICE, HOST, Op.WRITE, Res.TOPIC, "order")
    assert not s.authorize(ALICE, HOST, Op.WRITE, Res.GROUP, "orders-eu")  # another resource type


def test_implied_operations_apply_to_allow_only():
    """READ/WRITE/DELETE/ALTER imply DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS (StandardAuthorizerData),
    ALL allows everything; a DENY of READ does not deny DESCRIBE."""
    s = store(acl(Res.TOPIC, "t", Op.WRITE), acl(Res.TOPIC, "c", Op.ALTER_CONFIGS), acl(Res.GROUP, "g", Op.ALL))
    assert s.authorize(ALICE, HOST, Op.DESCRIBE, Res.TOPIC, "t")
    assert not s.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "t")
    assert s.authorize(ALICE, HOST, Op.DESCRIBE_CONFIGS, Res.TOPIC, "c")
    assert s.authorize(ALICE, HOST, Op.DELETE, Res.GROUP, "g")
    s = store(acl(Res.TOPIC, "t", Op.DESCRIBE), acl(Res.TOPIC, "t", Op.READ, Perm.DENY))
    assert s.authorize(ALICE, HOST, Op.DESCRIBE, Res.TOPIC, "t")
    assert not s.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "t")


def test_principal_and_host_match_exactly_or_by_wildcard():
    s = store(acl(Res.TOPIC, "t", Op.READ, principal="User:*"), acl(Res.TOPIC, "u", Op.READ, host="10.0.0.1"))
    assert s.authorize("User:bob", HOST, Op.READ, Res.TOPIC, "t")
    assert not s.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "u")
    assert s.authorize(ALICE, "10.0.0.1", Op.READ, Res.TOPIC, "u")


def test_create_is_idempotent_validates_and_filters_describe_and_delete():
    s = store(acl(Res.TOPIC, "t", Op.READ), acl(Res.TOPIC, "t-", Op.WRITE, pattern=Pat.PREFIXED))
    assert s.create(acl(Res.TOPIC, "t", Op.READ)) is None and len(s.acls) == 2
    assert s.create(acl(Res.ANY, "t", Op.READ)) is not None
    assert s.create(acl(Res.CLUSTER, "other", Op.ALTER)) is not None
    assert s.describe(AclFilter(Res.TOPIC, "t-1", Pat.MATCH)) == [acl(Res.TOPIC, "t-", Op.WRITE, pattern=Pat.PREFIXED)]
    assert s.describe(AclFilter(operation=Op.READ)) == [acl(Res.TOPIC, "t", Op.READ)]
    assert s.delete(AclFilter(Res.TOPIC, "t", Pat.LITERAL)) == [acl(Res.TOPIC, "t", Op.READ)]
    assert not s.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "t")


def test_plain_message_parsing():
    users = {"alice": "pw"}
    assert plain_user(b"\0alice\0pw", users) == "alice"
    assert plain_user(b"alice\0alice\0pw", users) == "alice"
    assert plain_user(b"bob\0alice\0pw", users) is None  # authorization id of someone else
    assert plain_user(b"\0alice\0wrong", users) is None
    assert plain_user(b"alice\0pw", users) is None


# -- over the wire --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def secured():
    config = BrokerConfig(authorizer=AuthorizerConfig(
        enabled=True, super_users=frozenset({"User:admin"}), users={"admin": "a-pw", "alice": "b-pw"}))
    with ThreadedReferenceCluster(brokers=1, config=config) as running:
        yield running


def _as(user: str, password: str) -> ClientSecurity:
    return ClientSecurity.from_properties({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                           "sasl.username": user, "sasl.password": password})


def test_an_unauthenticated_request_closes_the_connection(secured):
    raw = RawClient.connect(secured.bootstrap_servers)
    try:
        assert raw.request(ApiKey.API_VERSIONS, 3, client_software_name="t", client_software_version="1").error_code == 0
        with pytest.raises((ConnectionError, OSError, EOFError)):
            raw.request(ApiKey.METADATA, 12, topics=None, allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False)
    finally:
        raw.close()


def test_a_wrong_password_is_refused(secured):
    with pytest.raises(AuthenticationError):
        RawClient.connect(secured.bootstrap_servers, security=_as("alice", "nope"))


def _create_read_acl(node: RawClient, principal: str) -> int:
    resp = node.request(ApiKey.CREATE_ACLS, 3, creations=(
        _nested(ApiKey.CREATE_ACLS, "AclCreation", resource_type=int(Res.TOPIC), resource_name="t",
                resource_pattern_type=int(Pat.LITERAL), principal=principal, host="*", operation=int(Op.READ),
                permission_type=int(Perm.ALLOW)),))
    return int(resp.results[0].error_code)


def _nested(api_key: int, name: str, **fields):
    return payloads.build(payloads.nested(framing.request_schema(api_key, 3), name), **fields)


def test_acl_rpcs_need_cluster_permissions_and_edit_the_store(secured):
    with ClusterClient(secured.bootstrap_servers, security=_as("alice", "b-pw")) as alice, \
            ClusterClient(secured.bootstrap_servers, security=_as("admin", "a-pw")) as admin:
        assert _create_read_acl(alice.bootstrap, ALICE) == ErrorCode.cluster_authorization_failed
        assert _create_read_acl(admin.bootstrap, ALICE) == ErrorCode.none
        described = admin.bootstrap.request(
            ApiKey.DESCRIBE_ACLS, 3, resource_type_filter=int(Res.TOPIC), resource_name_filter="t",
            pattern_type_filter=int(Pat.ANY), principal_filter=None, host_filter=None, operation=int(Op.ANY),
            permission_type=int(Perm.ANY))
        assert [(r.resource_name, [a.principal for a in r.acls]) for r in described.resources] == [("t", [ALICE])]
        deleted = admin.bootstrap.request(ApiKey.DELETE_ACLS, 3, filters=(_nested(
            ApiKey.DELETE_ACLS, "DeleteAclsFilter", resource_type_filter=int(Res.ANY), resource_name_filter=None,
            pattern_type_filter=int(Pat.ANY), principal_filter=ALICE, host_filter=None, operation=int(Op.ANY),
            permission_type=int(Perm.ANY)),))
        assert [m.resource_name for m in deleted.filter_results[0].matching_acls] == ["t"]
        assert secured.cluster.state.acls.acls == []
