"""clients/groups.py against the reference broker: a KIP-848 member joins and owns its
assignment, a rival's join takes a partition only after the owner acknowledges the
revocation, and a member that leaves is refused afterwards."""

from __future__ import annotations

import time
import uuid

from kio.schema.errors import ErrorCode as E

from clients import groups, wire


def _settled_pair(a: groups.Member, b: groups.Member, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (len(a.partitions()), len(b.partitions())) != (1, 1):
        assert time.monotonic() < deadline, (a.partitions(), b.partitions())
        a.beat()
        b.beat()
        time.sleep(0.05)


def test_join_revoke_and_leave(client):
    topic, group = f"gw-{uuid.uuid4().hex[:8]}", f"gwg-{uuid.uuid4().hex[:8]}"
    assert groups.consumer_protocol_missing(client.bootstrap) is None
    assert wire.create_topic(client, topic, partitions=2) == E.none
    a = groups.join_consumer(client, group, [topic], want=2, wait_s=10)
    assert a.errors == [] and a.partitions() == [0, 1] and a.epoch > 0
    b = groups.join_consumer(client, group, [topic], wait_s=10)
    kept = a.learn_revocation(wait_s=10)
    assert len(kept) == 1 and a.partitions() == [0, 1]  # heard of it, gave nothing up yet
    b.beat()
    assert b.partitions() == [], "a partition went to B before A acknowledged its revocation"
    _settled_pair(a, b)
    assert sorted(a.partitions() + b.partitions()) == [0, 1]
    assert b.leave() == E.none
    assert b.beat() in (E.unknown_member_id, E.fenced_member_epoch)
