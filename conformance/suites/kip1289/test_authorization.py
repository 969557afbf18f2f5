"""KIP-1289 access control: the top-level authorization errors the KIP lists for
TxnShareAcknowledge (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED,
TOPIC_AUTHORIZATION_FAILED), checked with a real authorizer (reference:authorizer=standard;
any KIP-1289 broker with ACL users). The super user sets up the share group member and the
producer; the unprivileged user sends the staging, is refused with one permission missing
after another (nothing staged each time), and stages once it holds all three, so a broker
that refuses everything fails as surely as one that checks nothing (DIV-128919 for the
operations and their order)."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode as E

from clients.acl import RESOURCE_USER, AclScene, Op, Res, require_authorizer, until_allowed
from clients.share import ACCEPT, ack_codes
from conformance.suites.kip1289 import scenario, stage, staged_ok, txn_pending_count, wait_for
from conformance.suites.kip1289.test_faults_wire import leader_id


@pytest.mark.requirement("KIP-1289.ACL.001")
def test_staging_needs_write_on_the_transactional_id_and_read_on_the_group_and_topic(kip):
    """ACL.001: refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, then (WRITE on the
    transactional id granted) GROUP_AUTHORIZATION_FAILED, then (READ on the group)
    TOPIC_AUTHORIZATION_FAILED, nothing staged each time; with READ on the topic it stages and
    the super user's commit acknowledges the records."""
    require_authorizer(kip.target)
    sp, m, epoch, base, txn = scenario(kip, 4)
    scene = AclScene(kip.target, RESOURCE_USER)
    try:
        scene.cc.refresh([sp.topic])
        node = scene.cc.node(leader_id(kip.cc, sp.topic))
        acks = {sp.key(): [(base, base + 1, [ACCEPT])]}

        def send():
            return stage(node, txn, sp.group, m.member, epoch, acks)

        previous = E.transactional_id_authorization_failed
        resp = send()
        assert int(resp.error_code) == previous and not resp.responses, resp
        for grant, expected in (((Res.TRANSACTIONAL_ID, txn.tid, Op.WRITE), E.group_authorization_failed),
                                ((Res.GROUP, sp.group, Op.READ), E.topic_authorization_failed),
                                ((Res.TOPIC, sp.topic, Op.READ), E.none)):
            assert txn_pending_count(kip.target) in (None, 0), f"a staging refused with {previous} staged records"
            scene.grant(grant)
            resp = until_allowed(send, lambda r, p=previous: int(r.error_code) == p)
            assert int(resp.error_code) == expected, (grant, resp)
            previous = expected
        assert staged_ok(resp), resp
    finally:
        scene.close()
    assert txn.end(committed=True).error_code == E.none
    wait_for(lambda: sp.state()[0] == base + 2, "the user's staging committed")
    assert ack_codes(m.ack({sp.key(): [(base + 2, base + 3, [ACCEPT])]})) == {0: 0}
