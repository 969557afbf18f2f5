"""KIP-932 acquisition locks on the wire: expiry and redelivery, acknowledging after expiry,
the delivery limit reached by expiries, the per-partition record-lock limit, RENEW.

Locks are set with the group config share.record.lock.duration.ms to the shortest the
target allows, at most 1000 ms (the reference and kafka-native allow 1000:
group.share.min.record.lock.duration.ms=1000; Kafka's default minimum is 15000, read from
the broker by `target_limits`), and every wait follows the lock in force. Targets that
cannot set group configs (librdkafka's mock) cannot shorten the 30 s default: those tests
are not supported there.
"""

from __future__ import annotations

import time

import pytest

from conformance import target_limits
from clients import wire
from clients.share import (
    ACCEPT, ARCHIVED, AVAILABLE, RENEW, E, SharePartitionUnderTest, ack_codes, acquired, delivery_counts,
    eventually, persisted_states, require_share_version, set_group_configs_if_known,
)
from targets.target import NotSupportedByTarget
from reference_impl.protocol.api_keys import ApiKey

WANTED_LOCK_MS = 1000


@pytest.fixture
def sp(target, unique):
    with wire.cluster_client(target) as cc:
        yield SharePartitionUnderTest(target, cc, unique.topic(), unique.group())


@pytest.fixture
def lock_ms(target) -> int:
    """The shortest record lock the target allows, at most WANTED_LOCK_MS."""
    return target_limits.lock_ms(target, WANTED_LOCK_MS)


def short_lock(lock_ms: int) -> dict[str, str]:
    return {"share.record.lock.duration.ms": str(lock_ms)}


@pytest.mark.requirement("KIP-932.LOCK.001", "KIP-932.STATE.004", "KIP-932.STATE.006")
def test_expired_lock_redelivers_to_another_member_or_the_same(sp, lock_ms, record_property):
    """A holds 0..9 and stays silent: B gets nothing until the lock ends, then 0..9 with
    count 2; B stays silent too and A gets them back with count 3."""
    sp.open(short_lock(lock_ms))
    a = sp.primed_member()
    b = sp.member()
    base = sp.produce([b"v%d" % i for i in range(10)])
    resp = a.fetch([sp.key()], max_wait_ms=2000)
    acquired_at = time.monotonic()
    assert delivery_counts(resp) == {o: 1 for o in range(base, base + 10)}
    assert resp.acquisition_lock_timeout.total_seconds() * 1000 == lock_ms
    assert delivery_counts(b.fetch([sp.key()])) == {}, "another member got records whose lock is held"
    assert b.fetch_until([sp.key()], 10, wait_s=lock_ms / 1000 + 7) == {o: 2 for o in range(base, base + 10)}
    record_property("redelivered_ranges", [(f - base, l - base, c) for f, l, c in b.last_ranges])
    assert time.monotonic() - acquired_at >= lock_ms / 1000 * 0.9, "redelivered before the lock duration"
    assert a.fetch_until([sp.key()], 10, wait_s=lock_ms / 1000 + 7) == {o: 3 for o in range(base, base + 10)}
    assert ack_codes(a.ack({sp.key(): [(base, base + 9, [ACCEPT])]})) == {0: 0}


@pytest.mark.requirement("KIP-932.LOCK.002")
def test_acknowledging_after_the_lock_expired_is_invalid_record_state(sp, lock_ms):
    """ACCEPT after the lock expired: INVALID_RECORD_STATE, and the records were not
    acknowledged (they come back, count 2, to the same member)."""
    sp.open(short_lock(lock_ms))
    a = sp.primed_member()
    base = sp.produce([b"v%d" % i for i in range(10)])
    assert a.fetch_until([sp.key()], 10) == {o: 1 for o in range(base, base + 10)}
    time.sleep(lock_ms / 1000 + 0.5)
    assert ack_codes(a.ack({sp.key(): [(base, base + 9, [ACCEPT])]})) == {0: E.invalid_record_state}
    assert a.fetch_until([sp.key()], 10, wait_s=lock_ms / 1000 + 4) == {o: 2 for o in range(base, base + 10)}
    assert ack_codes(a.ack({sp.key(): [(base, base + 9, [ACCEPT])]})) == {0: 0}


@pytest.mark.requirement("KIP-932.DELIVERY.001", "KIP-932.LOCK.001", "KIP-932.STATE.007")
def test_lock_expiries_up_to_the_delivery_limit_archive(sp, lock_ms, record_property):
    """Let the lock expire until the delivery limit: counts 1..limit, never one more, and
    the SPSO moves on (a later record is delivered). The group override
    share.delivery.count.limit=2 (Kafka 4.3+) keeps it short; without it the broker default 5."""
    sp.open(short_lock(lock_ms))
    limit = 2
    try:
        set_group_configs_if_known(sp.cc, sp.group, {"share.delivery.count.limit": str(limit)})
    except NotSupportedByTarget:
        limit = 5  # the broker default group.share.delivery.count.limit
    record_property("delivery_limit", limit)
    a = sp.primed_member()
    base = sp.produce([b"poison"])
    seen = []
    deadline = time.monotonic() + limit * (lock_ms / 1000 + 1) + 4
    while time.monotonic() < deadline and len(seen) <= limit:
        resp = a.fetch([sp.key()], max_wait_ms=300)
        seen += [c for o, c in sorted(delivery_counts(resp).items()) if o == base]
        if len(seen) == limit:  # the last delivery: wait once more past its lock
            time.sleep(lock_ms / 1000 + 0.3)
            nxt = sp.produce([b"next"])
            assert a.fetch_until([sp.key()], 1, wait_s=5) == {nxt: 1}, "the archived record came back or blocked the next"
            break
    assert seen == list(range(1, limit + 1))


@pytest.mark.requirement("KIP-932.LOCK.004")
def test_lock_expiries_are_written_to_the_share_coordinator(sp, lock_ms, record_property):
    """KIP-932.LOCK.004: a lock expiry is written like a release (Kafka: SharePartition's lock timeout
    task writes the new state): delivery limit 2, one record never acknowledged. After the
    first expiry the share coordinator holds it Available with count 1; after the second it
    is Archived (or below the stored start offset). Nothing else writes in between: no
    acknowledgement is ever sent."""
    require_state_reads(sp)
    sp.open(short_lock(lock_ms))
    set_group_configs_if_known(sp.cc, sp.group, {"share.delivery.count.limit": "2"})  # Kafka 4.3+
    a = sp.primed_member()
    base = sp.produce([b"poison"])
    assert a.fetch_until([sp.key()], 1) == {base: 1}

    def persisted() -> tuple[int, tuple[int, int] | None]:
        start, batches = sp.state()
        return start, persisted_states(batches).get(base)

    def expired_once() -> None:
        start, state = persisted()
        assert start <= base and state == (AVAILABLE, 1), f"after one expiry: start {start}, {base} -> {state}"

    time.sleep(lock_ms / 1000)
    eventually(expired_once, timeout_s=lock_ms / 1000 + 10)
    assert a.fetch_until([sp.key()], 1, wait_s=5) == {base: 2}
    time.sleep(lock_ms / 1000)

    def archived() -> None:
        start, state = persisted()
        assert start > base or state == (ARCHIVED, 2), f"after the last expiry: start {start}, {base} -> {state}"

    eventually(archived, timeout_s=lock_ms / 1000 + 10)
    record_property("persisted_after_archive", persisted())


def require_state_reads(sp: SharePartitionUnderTest) -> None:
    if not sp.target.capabilities().supports_api(ApiKey.READ_SHARE_GROUP_STATE):
        raise NotSupportedByTarget("ReadShareGroupState is not advertised: persisted state is not observable")


@pytest.mark.requirement("KIP-932.LOCK.003", "KIP-932.SPSO.008")
def test_record_lock_limit_applies_back_pressure(sp, record_property):
    """share.partition.max.record.locks=100 (the minimum; a Kafka 4.3+ group override), or
    the broker default group.share.partition.max.record.locks=2000 where the override does
    not exist: with more records available, at most the limit (plus one batch) is acquired;
    while the first batch stays Acquired at the SPSO, acknowledging everything else does
    not let the window grow; accepting it does."""
    sp.open()
    limit, batch = 100, 20
    try:
        set_group_configs_if_known(sp.cc, sp.group, {"share.partition.max.record.locks": str(limit)})
    except NotSupportedByTarget:
        limit, batch = 2000, 100  # the broker default (Kafka 4.1+)
    record_property("record_lock_limit", limit)
    a = sp.primed_member()
    base = sp.produce_batches(limit // batch + 5, batch)
    held: dict[int, int] = {}
    for _ in range(limit // 100 + 8):
        got = delivery_counts(a.fetch([sp.key()], max_wait_ms=300))
        held.update(got)
        if not got and held:
            break
    record_property("acquired_under_limit", len(held))
    assert limit <= len(held) <= limit + batch, f"{len(held)} records acquired with a limit of {limit}"
    assert delivery_counts(a.fetch([sp.key()], max_wait_ms=300)) == {}
    first = list(range(base, base + batch))
    rest = sorted(set(held) - set(first))
    assert set(first) <= set(held)
    assert ack_codes(a.ack({sp.key(): [(rest[0], rest[-1], [ACCEPT])]})) == {0: 0}
    assert delivery_counts(a.fetch([sp.key()], max_wait_ms=300)) == {}, "the window grew past the limit"
    assert ack_codes(a.ack({sp.key(): [(first[0], first[-1], [ACCEPT])]})) == {0: 0}
    more = a.fetch_until([sp.key()], 1, wait_s=5)
    assert more and min(more) == base + len(held), more


@pytest.mark.requirement("KIP-932.LOCK.001", "KIP-932.ACK.001")
def test_renew_extends_the_lock(sp, lock_ms):
    """RENEW (KIP-1222, ShareAcknowledge v2, Kafka 4.2+) restarts the lock: acknowledging
    after the original lock would have expired still succeeds and no other member got the
    records meanwhile. ACK.001: type 4 is accepted beyond the KIP's types 0-3 (DIV-025)."""
    sp.open({**short_lock(lock_ms), "share.renew.acknowledge.enable": "true"})
    a = sp.primed_member()
    require_share_version(a.node, 2, "RENEW")
    b = sp.member()
    base = sp.produce([b"v%d" % i for i in range(5)])
    assert a.fetch_until([sp.key()], 5) == {o: 1 for o in range(base, base + 5)}
    acquired_at = time.monotonic()
    # Renewals every 0.35 of the lock: a request delayed by up to 0.65 of it (a loaded CI
    # machine answered 121 with 0.6) still renews in time; five steps span 1.75 locks.
    for _ in range(4):
        time.sleep(lock_ms / 1000 * 0.35)
        assert ack_codes(a.ack({sp.key(): [(base, base + 4, [RENEW])]}, is_renew_ack=True)) == {0: 0}
    time.sleep(lock_ms / 1000 * 0.35)
    assert time.monotonic() - acquired_at > lock_ms / 1000 * 1.5
    assert acquired(b.fetch([sp.key()])) == [], "renewed records went to another member"
    assert ack_codes(a.ack({sp.key(): [(base, base + 4, [ACCEPT])]})) == {0: 0}
