"""KIP-932 at-least-once delivery end to end on the wire: three members consume one
partition with seeded random ACCEPT / RELEASE decisions and "crashes" (a member closes its
share session while holding records and comes back with a new one). Every produced record
must end accepted by some member or archived at the delivery limit; none may be lost.
"""

from __future__ import annotations

import random
import time

import pytest

from clients import wire
from clients.share import (
    ACCEPT, ACKNOWLEDGED, ARCHIVED, RELEASE, E, SharePartitionUnderTest, ShareSession, ack_codes, delivery_counts,
    eventually, persisted_states,
)
from reference_impl.protocol.api_keys import ApiKey

RECORDS = 100
DELIVERY_LIMIT = 5  # broker default group.share.delivery.count.limit


@pytest.fixture
def sp(target, unique):
    with wire.cluster_client(target) as cc:
        yield SharePartitionUnderTest(target, cc, unique.topic(), unique.group())


def reopened(s: ShareSession) -> ShareSession:
    """The member after a crash: its session is closed (what it held is released) and it
    starts a new one. A member that has not fetched since its last crash has no session on
    the broker, and closing one that does not exist is SHARE_SESSION_NOT_FOUND everywhere:
    which members crash twice in a row depends on how many records each fetch returned."""
    if s.epoch > 0:
        assert s.close().error_code == E.none
    return ShareSession(s.node, s.group, s.member, s.version)


@pytest.mark.requirement("KIP-932.STATE.011", "KIP-932.STATE.004", "KIP-932.DELIVERY.001", "KIP-932.ORDER.001")
def test_every_record_is_accepted_or_archived(sp, record_property):
    """Random ACCEPT / RELEASE / keep decisions and crashes over 100 records; every tenth
    record is always released, so it reaches the delivery limit. Every record ends accepted
    or released at the limit, none is delivered again after either, none beyond the limit,
    and the share coordinator holds the accepted ones Acknowledged and the others Archived."""
    sp.open()
    members = [sp.primed_member(), sp.member(), sp.member()]
    base = sp.produce_batches(RECORDS // 10, 10)
    wanted = set(range(base, base + RECORDS))
    poison = set(range(base + 7, base + RECORDS, 10))
    rng = random.Random(932)
    accepted: dict[int, int] = {}  # offset -> the member index that accepted it
    released_at_limit: set[int] = set()
    holders: dict[int, int] = {}  # offset -> member index holding it now
    deliveries = 0
    deadline = time.monotonic() + 30
    while wanted - set(accepted) - released_at_limit and time.monotonic() < deadline:
        i = rng.randrange(len(members))
        s = members[i]
        if rng.random() < 0.1:  # crash: everything it holds goes back
            members[i] = reopened(s)
            holders = {o: h for o, h in holders.items() if h != i}
            continue
        resp = s.fetch([sp.key()], max_wait_ms=200, max_records=20)
        assert resp.error_code == E.none, resp
        got = delivery_counts(resp)
        deliveries += len(got)
        for o in got:
            assert o not in holders, f"offset {o} acquired by member {i} while member {holders[o]} holds it"
            assert o not in accepted, f"accepted offset {o} delivered again"
            assert o not in released_at_limit and got[o] <= DELIVERY_LIMIT, f"offset {o} delivered after the limit"
        holders.update({o: i for o in got})
        acks = []
        for o, count in sorted(got.items()):
            if o in poison:  # always released at once, so it must reach the limit and be archived
                acks.append((o, o, [RELEASE]))
                if count >= DELIVERY_LIMIT:
                    released_at_limit.add(o)
            elif rng.random() < 0.6:
                acks.append((o, o, [ACCEPT]))
                accepted[o] = i
            elif rng.random() < 0.8:
                acks.append((o, o, [RELEASE]))
                if count >= DELIVERY_LIMIT:
                    released_at_limit.add(o)
            else:
                continue  # kept for a later crash or acknowledgement
            holders.pop(o)
        if acks:
            assert ack_codes(s.ack({sp.key(): acks})) == {0: 0}
        for o in [o for o, h in list(holders.items()) if h == i and rng.random() < 0.5]:
            assert ack_codes(s.ack({sp.key(): [(o, o, [ACCEPT])]})) == {0: 0}
            accepted[o] = holders.pop(o)
    record_property("outcome", {"deliveries": deliveries, "accepted": len(accepted), "archived_at_limit": len(released_at_limit)})
    lost = sorted(wanted - set(accepted) - released_at_limit)
    assert not lost, f"records neither accepted nor archived: {lost}"
    assert poison <= released_at_limit, f"poison records not released at the limit: {sorted(poison - released_at_limit)}"
    for s in members:
        assert delivery_counts(s.fetch([sp.key()], max_wait_ms=200)) == {}, "a record released at the limit came back"
    if sp.target.capabilities().supports_api(ApiKey.READ_SHARE_GROUP_STATE):
        assert_settled_as(sp, accepted.keys(), released_at_limit)


def assert_settled_as(sp: SharePartitionUnderTest, accepted, archived) -> None:
    """The share coordinator's view (KIP-932.STATE.011): accepted offsets Acknowledged,
    offsets released at the limit Archived, or either below the stored start offset."""
    def check() -> None:
        start, batches = sp.state()
        states = persisted_states(batches)
        wrong = {o: states.get(o) for o in archived if o >= start and states.get(o, (None,))[0] != ARCHIVED}
        wrong |= {o: states.get(o) for o in accepted if o >= start and states.get(o, (None,))[0] != ACKNOWLEDGED}
        assert not wrong, f"persisted (state, count) of offsets settled otherwise: {wrong}"
    eventually(check, timeout_s=10)
