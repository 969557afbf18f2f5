"""KIP-98 authorization with a real authorizer (issue 14 item 5): WRITE on the transactional
id for InitProducerId and transactional Produce, WRITE on each topic added to a transaction,
READ on the group of AddOffsetsToTxn, and CLUSTER_ACTION for WriteTxnMarkers (sent only by
transaction coordinators).

Each test sends the call as an unprivileged SASL user first (refused with the expected error
and nothing written: no producer id, no partition in the transaction, no record, no marker),
then grants the permission as the super user and sends the same call again (processed), so
a target that refuses everything fails as surely as one that checks nothing. Coordinators
and leaders are found as the super user (FindCoordinator needs DESCRIBE itself).

Only targets with an authorizer run these (kafka-native:authorizer=standard,
reference:authorizer=standard); elsewhere clients.acl.require_authorizer answers "not supported
by target" naming the setting. Kafka:
KafkaApis.handleInitProducerIdRequest, handleAddPartitionsToTxnRequest,
handleAddOffsetsToTxnRequest, handleProduceRequest, handleWriteTxnMarkersRequest.
"""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode as E

from clients.acl import (
    CLUSTER, KIP98_CLUSTER_USER, RESOURCE_USER, AclScene, Op, Res, require_authorizer, until_allowed,
)
from clients.errors import TXN_SETTLING
from clients.txn import (
    add_offsets_to_txn, add_partitions_settled, coordinator, init_producer_id, init_producer_id_settled, settle,
)
from clients.wire import produce
from conformance.suites import require_api
from conformance.suites.kip98 import (
    create_ready_topic, idem_batch, log_end, plain_batch, require_transactions, values,
)
from conformance.suites.kip98.test_txn_admin import describe
from conformance.suites.kip98.test_write_txn_markers import WRITE_TXN_MARKERS, write_markers
from reference_impl.client.raw_client import RawClient
from reference_impl.protocol.api_keys import ApiKey

DESCRIBE_TRANSACTIONS = ApiKey.DESCRIBE_TRANSACTIONS


class Scene(AclScene):
    """A ready topic, a transactional id and a group id; the super user's client and the user's."""

    def __init__(self, target: Any, unique: Any, role: int) -> None:
        super().__init__(target, role)
        self.topic, self.txn, self.group = unique.topic(), unique.transactional_id(), unique.group()
        create_ready_topic(target, self.su, self.topic)

    def described(self, wait_s: float = 15.0) -> dict[str, Any]:
        """DescribeTransactions(T) as the super user; the coordinator's settling answers are
        retried (a fresh __transaction_state partition answers NOT_COORDINATOR while it loads)."""
        return settle(lambda: describe(self.su_coordinator(), self.txn), lambda seen: seen["error"] in TXN_SETTLING,
                      wait_s=wait_s, every_s=0.2)

    def su_coordinator(self) -> RawClient:
        return coordinator(self.su, self.txn)

    def coordinator(self) -> RawClient:
        return self.as_user(self.su_coordinator())

    def leader(self) -> RawClient:
        return self.as_user(self.su.leader_for(self.topic, 0))

    def init(self) -> Any:
        """InitProducerId(T) as the user, to T's coordinator; the coordinator's settling
        answers are retried (the first transactional id creates __transaction_state)."""
        return settle(lambda: init_producer_id(self.coordinator(), self.txn)[1],
                      lambda resp: int(resp.error_code) in TXN_SETTLING, wait_s=30.0, every_s=0.2)

    def initialised(self) -> tuple[int, int]:
        """The user's producer id and epoch for T (the user must hold WRITE on T)."""
        resp = until_allowed(self.init, _txn_refused)
        assert int(resp.error_code) == E.none, resp
        return int(resp.producer_id), int(resp.producer_epoch)


def _txn_refused(resp: Any) -> bool:
    return int(resp.error_code) == E.transactional_id_authorization_failed


def _scene(target: Any, unique: Any, role: int) -> Scene:
    require_authorizer(target)
    caps = target.capabilities()
    require_transactions(caps)
    require_api(caps, DESCRIBE_TRANSACTIONS, what="DescribeTransactions")
    return Scene(target, unique, role)


@pytest.fixture
def scene(target, unique):
    s = _scene(target, unique, RESOURCE_USER)
    try:
        yield s
    finally:
        s.close()


@pytest.mark.requirement("KIP-98.AUTH.001")
def test_init_producer_id_needs_write_on_the_transactional_id(scene):
    """KIP-98.AUTH.001: Without WRITE on T, InitProducerId(T) answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    with no producer id, and the coordinator knows no T afterwards (DescribeTransactions:
    TRANSACTIONAL_ID_NOT_FOUND). With WRITE on T granted it hands out a producer id."""
    refused = scene.init()
    assert int(refused.error_code) == E.transactional_id_authorization_failed, refused
    assert int(refused.producer_id) == -1, f"a refused InitProducerId handed out producer id {refused.producer_id}"
    seen = scene.described()
    assert seen["error"] == E.transactional_id_not_found, f"a refused InitProducerId created {scene.txn}: {seen}"
    scene.grant((Res.TRANSACTIONAL_ID, scene.txn, Op.WRITE))
    pid, epoch = scene.initialised()
    assert pid >= 0 and epoch >= 0


@pytest.mark.requirement("KIP-98.AUTH.002")
def test_add_partitions_to_txn_needs_write_on_the_topic(scene):
    """KIP-98.AUTH.002: With WRITE on T but not on topic t, AddPartitionsToTxn(t-0) answers
    TOPIC_AUTHORIZATION_FAILED for t-0 and the transaction holds no partition
    (DescribeTransactions as the super user). With WRITE on t granted the add answers NONE
    and the transaction lists t-0."""
    scene.grant((Res.TRANSACTIONAL_ID, scene.txn, Op.WRITE))
    pid, epoch = scene.initialised()
    _, refused = add_partitions_settled(scene.coordinator(), scene.txn, pid, epoch, scene.topic, [0])
    assert refused == {0: E.topic_authorization_failed}, refused
    seen = scene.described()
    assert seen["topics"] == {}, f"a refused AddPartitionsToTxn added partitions: {seen}"
    scene.grant((Res.TOPIC, scene.topic, Op.WRITE))
    added = until_allowed(lambda: add_partitions_settled(scene.coordinator(), scene.txn, pid, epoch, scene.topic, [0])[1],
                          lambda got: got == {0: E.topic_authorization_failed})
    assert added == {0: E.none}, added
    assert scene.described()["topics"] == {scene.topic: [0]}


def _add_offsets(node: RawClient, txn: str, pid: int, epoch: int, group: str) -> int:
    return int(add_offsets_to_txn(node, txn, pid, epoch, group, highest=3)[1].error_code)


@pytest.mark.requirement("KIP-98.ADDOFF.002")
def test_add_offsets_to_txn_needs_read_on_the_group(scene):
    """KIP-98.ADDOFF.002: With WRITE on T but no permission on group G, AddOffsetsToTxn(G) answers
    GROUP_AUTHORIZATION_FAILED and no __consumer_offsets partition joins the transaction.
    With READ on G granted it answers NONE and the offsets partition is listed."""
    scene.grant((Res.TRANSACTIONAL_ID, scene.txn, Op.WRITE))
    pid, epoch = scene.initialised()
    refused = _add_offsets(scene.coordinator(), scene.txn, pid, epoch, scene.group)
    assert refused == E.group_authorization_failed, refused
    seen = scene.described()
    assert seen["topics"] == {}, f"a refused AddOffsetsToTxn added a partition: {seen}"
    scene.grant((Res.GROUP, scene.group, Op.READ))
    added = until_allowed(lambda: _add_offsets(scene.coordinator(), scene.txn, pid, epoch, scene.group),
                          lambda code: code == E.group_authorization_failed)
    assert added == E.none, added
    assert "__consumer_offsets" in scene.described()["topics"]


@pytest.mark.requirement("KIP-98.FORMAT.001")
def test_transactional_produce_needs_write_on_the_transactional_id(scene):
    """KIP-98.FORMAT.001: With WRITE on t but not on T, a transactional Produce carrying TransactionalId=T
    answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED and the log end does not move. With WRITE
    on T granted (and t-0 added to T's transaction) the same batch is appended."""
    scene.grant((Res.TOPIC, scene.topic, Op.WRITE))
    _, idem = init_producer_id_settled(scene.su, None)  # a producer id to stamp the refused batch with
    su_leader = scene.su.leader_for(scene.topic, 0)
    end = log_end(su_leader, scene.topic)
    batch = idem_batch(values("v", 3), int(idem.producer_id), int(idem.producer_epoch), 0, transactional=True)
    refused = until_allowed(lambda: produce(scene.leader(), scene.topic, 0, batch, transactional_id=scene.txn),
                            lambda part: int(part.error_code) == E.topic_authorization_failed)
    assert int(refused.error_code) == E.transactional_id_authorization_failed, refused
    assert log_end(su_leader, scene.topic) == end, "a refused transactional Produce was appended"
    scene.grant((Res.TRANSACTIONAL_ID, scene.txn, Op.WRITE))
    pid, epoch = scene.initialised()
    assert add_partitions_settled(scene.coordinator(), scene.txn, pid, epoch, scene.topic, [0])[1] == {0: E.none}
    ok = produce(scene.leader(), scene.topic, 0, idem_batch(values("v", 3), pid, epoch, 0, transactional=True),
                 transactional_id=scene.txn)
    assert int(ok.error_code) == E.none, ok
    assert log_end(su_leader, scene.topic) == end + 3


@pytest.mark.requirement("KIP-98.AUTH.003")
def test_write_txn_markers_needs_cluster_action(target, unique):
    """KIP-98.AUTH.003: WriteTxnMarkers is the coordinator's RPC. A user holding WRITE on t (in
    effect: its plain Produce to t-0 is appended) but not CLUSTER_ACTION, sending a COMMIT
    marker for an idempotent producer to t-0's leader, gets CLUSTER_AUTHORIZATION_FAILED for
    t-0 and the log end does not move: WRITE on every topic named is not enough, or any
    producer could end other producers' transactions. With CLUSTER_ACTION granted on the
    cluster the same marker answers NONE and is appended (log end + 1)."""
    s = _scene(target, unique, KIP98_CLUSTER_USER)
    try:
        require_api(target.capabilities(), WRITE_TXN_MARKERS, what="WriteTxnMarkers")
        _, idem = init_producer_id_settled(s.su, None)
        marker = [(int(idem.producer_id), int(idem.producer_epoch), True, 7, {s.topic: [0]})]
        su_leader = s.su.leader_for(s.topic, 0)
        s.grant((Res.TOPIC, s.topic, Op.WRITE))
        written = until_allowed(lambda: produce(s.leader(), s.topic, 0, plain_batch(["w"])),
                                lambda part: int(part.error_code) == E.topic_authorization_failed)
        assert int(written.error_code) == E.none, f"WRITE on {s.topic} never took effect: {written}"
        end = log_end(su_leader, s.topic)
        refused = write_markers(s.leader(), marker)
        assert refused == {int(idem.producer_id): {(s.topic, 0): E.cluster_authorization_failed}}, (
            f"KIP-98.AUTH.003: WriteTxnMarkers from a user with WRITE on the topic but no CLUSTER_ACTION: {refused}")
        assert log_end(su_leader, s.topic) == end, "KIP-98.AUTH.003: a refused WriteTxnMarkers appended a marker"
        s.grant((CLUSTER[0], CLUSTER[1], Op.CLUSTER_ACTION))
        accepted = until_allowed(lambda: write_markers(s.leader(), marker),
                                 lambda got: E.cluster_authorization_failed in got[int(idem.producer_id)].values())
        assert accepted == {int(idem.producer_id): {(s.topic, 0): E.none}}, accepted
        assert log_end(su_leader, s.topic) == end + 1
    finally:
        s.close()
