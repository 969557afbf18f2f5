"""KIP-932 acknowledgements on the wire: ACCEPT / RELEASE / REJECT / GAP transitions, the
delivery limit, who may acknowledge, per-partition atomicity, malformed batches,
piggy-backed acknowledgements, session close and per-partition rotation.

Every test produces after a first empty fetch (the default `latest` reset then delivers
everything produced later), so none needs a group config unless it says so.
"""

from __future__ import annotations

import time

import pytest

from clients import share, wire
from clients.share import (
    ACCEPT, ARCHIVED, GAP, READ_SHARE_GROUP_STATE, REJECT, RELEASE, RENEW, E, SharePartitionUnderTest, ShareSession,
    ack_codes, acquired, delivery_counts, effective_spso, partition_data, persisted_states,
)
from conformance.suites.kip932.test_sessions import record_side
from conformance.suites.kip932.test_share_fetch_edges import counts_for


@pytest.fixture
def sp(target, unique):
    with wire.cluster_client(target) as cc:
        yield SharePartitionUnderTest(target, cc, unique.topic(), unique.group())


def holding(sp: SharePartitionUnderTest, count: int = 10) -> tuple[ShareSession, ShareSession, int]:
    """Member A holding `count` fresh records (count 1) and an idle member B; returns base offset."""
    sp.open()
    a = sp.primed_member()
    b = sp.member()
    base = sp.produce([b"v%d" % i for i in range(count)])
    assert a.fetch_until([sp.key()], count) == {o: 1 for o in range(base, base + count)}
    return a, b, base


def nothing_for(s: ShareSession, sp: SharePartitionUnderTest) -> dict[int, int]:
    return delivery_counts(s.fetch([sp.key()], max_wait_ms=300))


@pytest.mark.requirement("KIP-932.ACK.001", "KIP-932.STATE.005", "KIP-932.STATE.006", "KIP-932.STATE.008", "KIP-932.FETCH.008")
def test_accept_release_reject_transitions(sp, target):
    """One request: 0..4 with per-offset types [1,1,3,1,1] and 5..9 RELEASE (one type for
    the range). 5..9 are available at once (count 2, no lock wait); 0,1,3,4 and the
    rejected 2 never come back."""
    a, b, base = holding(sp)
    t0 = time.monotonic()
    assert ack_codes(a.ack({sp.key(): [(base, base + 4, [ACCEPT, ACCEPT, REJECT, ACCEPT, ACCEPT]),
                                       (base + 5, base + 9, [RELEASE])]})) == {0: 0}
    assert b.fetch_until([sp.key()], 5, wait_s=5) == {o: 2 for o in range(base + 5, base + 10)}
    assert time.monotonic() - t0 < 5, "released records were not available at once"
    if target.capabilities().supports_api(READ_SHARE_GROUP_STATE):
        states = persisted_states(sp.state()[1])
        assert states.get(base + 2, (ARCHIVED,))[0] == ARCHIVED, states
    assert ack_codes(b.ack({sp.key(): [(base + 5, base + 9, [ACCEPT])]})) == {0: 0}
    assert nothing_for(a, sp) == {} and nothing_for(b, sp) == {}


@pytest.mark.requirement("KIP-932.ACK.001", "KIP-932.SPSO.010")
def test_gap_acknowledgement_finishes_offsets(sp, target):
    """GAP (0) marks offsets as having no record: they are finished like an archive and the
    SPSO moves past them with the accepted ones."""
    a, b, base = holding(sp, 6)
    assert ack_codes(a.ack({sp.key(): [(base, base + 5, [ACCEPT, GAP, GAP, ACCEPT, GAP, ACCEPT])]})) == {0: 0}
    assert nothing_for(b, sp) == {}
    if target.capabilities().supports_api(READ_SHARE_GROUP_STATE):
        assert effective_spso(*sp.state()) == base + 6
    nxt = sp.produce([b"next"])
    assert b.fetch_until([sp.key()], 1) == {nxt: 1}


def release_until_gone(s: ShareSession, sp: SharePartitionUnderTest, offset: int, most: int) -> list[int]:
    """Acquire and release `offset` until it stops coming back; its delivery counts."""
    seen: list[int] = []
    for _ in range(most + 1):
        got = s.fetch_until([sp.key()], 1, wait_s=6)
        if offset not in got:
            break
        seen.append(got[offset])
        assert ack_codes(s.ack({sp.key(): [(offset, offset, [RELEASE])]})) == {0: 0}
    return seen


@pytest.mark.requirement("KIP-932.DELIVERY.001", "KIP-932.STATE.007", "KIP-932.STATE.003")
def test_release_at_the_default_delivery_limit_archives(sp, target):
    """Broker default group.share.delivery.count.limit = 5: released five times, the record
    was delivered with counts 1..5 and is archived; a later record is delivered."""
    a, _, base = holding(sp, 1)
    assert ack_codes(a.ack({sp.key(): [(base, base, [RELEASE])]})) == {0: 0}
    assert [1] + release_until_gone(a, sp, base, 6) == [1, 2, 3, 4, 5]
    nxt = sp.produce([b"next"])
    assert a.fetch_until([sp.key()], 1) == {nxt: 1}
    if target.capabilities().supports_api(READ_SHARE_GROUP_STATE):
        assert effective_spso(*sp.state()) >= base + 1


@pytest.mark.requirement("KIP-932.STATE.007", "KIP-932.DELIVERY.001")
def test_group_delivery_limit_override(sp):
    """share.delivery.count.limit = 2 (group override, Kafka 4.3+ / KIP-1240): the second
    release archives."""
    sp.open({"share.delivery.count.limit": "2"})
    a = sp.primed_member()
    base = sp.produce([b"poison"])
    assert release_until_gone(a, sp, base, 4) == [1, 2]


@pytest.mark.requirement("KIP-932.ACK.002")
def test_acknowledging_twice_is_invalid_record_state(sp, record_property):
    """Offset 0 stays Acquired (so the SPSO cannot pass 1..9); ACCEPT 1..9 twice: the second
    is INVALID_RECORD_STATE. Once the SPSO passed them, a third ACCEPT is answered as
    recorded in `below_spso_ack` (Kafka ignores acknowledgements below the SPSO)."""
    a, _, base = holding(sp)
    assert ack_codes(a.ack({sp.key(): [(base + 1, base + 9, [ACCEPT])]})) == {0: 0}
    assert ack_codes(a.ack({sp.key(): [(base + 1, base + 9, [ACCEPT])]})) == {0: E.invalid_record_state}
    assert ack_codes(a.ack({sp.key(): [(base, base, [ACCEPT])]})) == {0: 0}
    below = ack_codes(a.ack({sp.key(): [(base, base + 9, [ACCEPT])]}))[0]
    record_property("below_spso_ack", {"code": below, "follows": "kafka" if below == 0 else "kip"})
    assert below in (0, E.invalid_record_state), below


@pytest.mark.requirement("KIP-932.ACK.003")
def test_acknowledgements_of_a_partition_are_atomic(sp):
    """5 is accepted alone; then ACCEPT 0..9 fails with INVALID_RECORD_STATE and changes
    nothing: 0..4 and 6..9 are still A's (B gets none) and A can still accept them."""
    a, b, base = holding(sp)
    assert ack_codes(a.ack({sp.key(): [(base + 5, base + 5, [ACCEPT])]})) == {0: 0}
    assert ack_codes(a.ack({sp.key(): [(base, base + 9, [ACCEPT])]})) == {0: E.invalid_record_state}
    assert ack_codes(a.ack({sp.key(): [(base, base + 4, [RELEASE]), (base + 5, base + 5, [ACCEPT])]})) == {0: E.invalid_record_state}
    assert nothing_for(b, sp) == {}, "a failed request released records"
    assert ack_codes(a.ack({sp.key(): [(base, base + 4, [ACCEPT]), (base + 6, base + 9, [ACCEPT])]})) == {0: 0}


@pytest.mark.requirement("KIP-932.ACK.005", "KIP-932.ACK.003")
def test_acknowledgement_errors_are_per_partition(target, unique, request):
    """KIP-932.ACK.005 (errors per partition) and ACK.003 (a failing partition's batches
    change nothing): one ShareAcknowledge for two partitions of one leader, ACCEPT of A's
    records on the first, a batch beyond anything acquired on the second. Kafka: the first
    answers 0 and its records never come back; the second answers INVALID_REQUEST and
    changes nothing (its records are still A's, and A can accept them afterwards). A
    top-level INVALID_REQUEST that applies nothing is the other reading (DIV-93225)."""
    with wire.cluster_client(target) as cc:
        sp = SharePartitionUnderTest(target, cc, unique.topic(), unique.group(), partitions=6).open()
        good, bad = share.two_partitions_of_one_leader(sp)
        keys = [sp.key(good), sp.key(bad)]
        a = sp.member(good)
        assert acquired(a.fetch(keys, max_wait_ms=200)) == []
        bases = {p: sp.produce([b"p%d-%d" % (p, i) for i in range(3)], p) for p in (good, bad)}
        held: dict[int, dict[int, int]] = {good: {}, bad: {}}
        deadline = time.monotonic() + 20
        while sum(map(len, held.values())) < 6 and time.monotonic() < deadline:
            resp = a.fetch(keys, max_wait_ms=300)
            for p in held:
                held[p].update(counts_for(resp, sp.tid, p))
        assert held == {p: {o: 1 for o in range(bases[p], bases[p] + 3)} for p in held}, held
        resp = a.ack({sp.key(good): [(bases[good], bases[good] + 2, [ACCEPT])],
                      sp.key(bad): [(bases[bad], bases[bad] + 2, [ACCEPT]), (bases[bad] + 20, bases[bad] + 21, [ACCEPT])]})
        # The KIP does not say at which level a bad batch is refused (DIV-93225): the whole
        # request (top-level INVALID_REQUEST, nothing applied) or its partition only (Kafka).
        whole = resp.error_code == E.invalid_request
        record_side(request, "bad_batch_refuses", "kip" if whole else "kafka")
        if whole:
            resend = {sp.key(good): [(bases[good], bases[good] + 2, [ACCEPT])]}
            assert ack_codes(a.ack(resend)) == {good: E.none}, "a refused request changed the first partition"
        else:
            assert resp.error_code == E.none and ack_codes(resp) == {good: E.none, bad: E.invalid_request}, resp
        assert ack_codes(a.ack({sp.key(bad): [(bases[bad], bases[bad] + 2, [ACCEPT])]})) == {bad: E.none}, \
            "the refused partition's records were not still held"
        again = a.fetch(keys, max_wait_ms=300)
        assert (counts_for(again, sp.tid, good), counts_for(again, sp.tid, bad)) == ({}, {}), "accepted records came back"


MALFORMED = {
    "descending": lambda b: [(b + 5, b + 9, [ACCEPT]), (b, b + 4, [ACCEPT])],
    "types_length": lambda b: [(b, b + 4, [ACCEPT, REJECT])],
    "unknown_type": lambda b: [(b, b + 2, [9])],
    "last_before_first": lambda b: [(b + 3, b + 2, [ACCEPT])],
    "beyond_acquired": lambda b: [(b, b + 2, [ACCEPT]), (b + 20, b + 21, [ACCEPT])],
}


def refusal(resp) -> int:
    """The error a request's acknowledgements for partition 0 got: the partition's
    (acknowledge) error code, or the top-level one when the whole request was refused
    (the oracle accepts either)."""
    if resp.error_code != E.none:
        return int(resp.error_code)
    return int(ack_codes(resp).get(0, -1))


@pytest.mark.requirement("KIP-932.FETCH.007", "KIP-932.FETCH.008", "KIP-932.ACK.001", "KIP-932.ACK.003")
def test_malformed_acknowledgements_are_invalid_request(sp, record_property):
    """Each malformed request (ShareAcknowledge and piggy-backed on ShareFetch) is
    INVALID_REQUEST for the partition and applies nothing: afterwards all ten records are
    still A's and accepting them succeeds."""
    a, b, base = holding(sp)
    codes = {}
    for name, batches in MALFORMED.items():
        codes[name] = refusal(a.ack({sp.key(): batches(base)}))
        codes[name + "_piggybacked"] = refusal(a.fetch([], acks={sp.key(): batches(base)}))
    if a.version < 2:
        codes["renew_before_v2"] = refusal(a.ack({sp.key(): [(base, base + 2, [RENEW])]}))
    # Overlapping batches: the KIP says INVALID_REQUEST; Kafka applies the batches in order
    # and the second finds offset 5 no longer Acquired (INVALID_RECORD_STATE); either way
    # the partition's acknowledgements are all-or-nothing.
    overlapping = [(base, base + 5, [ACCEPT]), (base + 5, base + 9, [ACCEPT])]
    overlap = {"ack": refusal(a.ack({sp.key(): overlapping})), "piggybacked": refusal(a.fetch([], acks={sp.key(): overlapping}))}
    record_property("codes", codes)
    record_property("overlapping", {**overlap, "follows": "kip" if overlap["ack"] == E.invalid_request else "kafka"})
    assert codes == {name: E.invalid_request for name in codes}
    assert set(overlap.values()) <= {E.invalid_request, E.invalid_record_state} and len(set(overlap.values())) == 1, overlap
    assert nothing_for(b, sp) == {}
    assert ack_codes(a.ack({sp.key(): [(base, base + 9, [ACCEPT])]})) == {0: 0}
    assert nothing_for(a, sp) == {}


@pytest.mark.requirement("KIP-932.FETCH.004")
def test_piggybacked_acknowledgement_then_new_records(sp):
    """A holds 0..9 and 10..19 were produced: one ShareFetch carrying ACCEPT 0..9 answers
    acknowledge error 0 and acquires from 10 on. A then closes its session, which releases
    what it still holds: B gets 10..19 and never 0..9 (an ACCEPT answered 0 but not
    applied would leave 0..9 Acquired by A, and the close would hand them to B)."""
    a, b, base = holding(sp)
    sp.produce([b"w%d" % i for i in range(10)])
    resp = a.fetch([sp.key()], acks={sp.key(): [(base, base + 9, [ACCEPT])]}, max_wait_ms=2000)
    assert resp.error_code == E.none and partition_data(resp, sp.tid).acknowledge_error_code == 0
    assert delivery_counts(resp) == {o: 1 for o in range(base + 10, base + 20)}
    assert a.close().error_code == E.none
    got = b.fetch_until([sp.key()], 10, wait_s=10)
    # 4.1.2 decrements the count of records released by a close (DIV-018): 1 or 2.
    assert set(got) == set(range(base + 10, base + 20)) and set(got.values()) <= {1, 2}, got
    back = sorted(o for o in nothing_for(b, sp) if o < base + 10)
    assert not back, f"accepted records came back after the session closed: {back}"


@pytest.mark.requirement("KIP-932.FETCH.004", "KIP-932.STATE.006")
def test_piggybacked_release_is_applied_before_the_fetch(sp):
    """Issue 14: the ordering must be observable. A holds 0..9 and nothing else is in the
    log; one ShareFetch releasing 0..9 must acquire them again in its own response (count
    2). Fetching first would find nothing acquirable and answer empty after MaxWaitMs."""
    a, _, base = holding(sp)
    resp = a.fetch([sp.key()], acks={sp.key(): [(base, base + 9, [RELEASE])]}, max_wait_ms=3000)
    assert resp.error_code == E.none and partition_data(resp, sp.tid).acknowledge_error_code == 0
    assert delivery_counts(resp) == {o: 2 for o in range(base, base + 10)}


@pytest.mark.requirement("KIP-932.FETCH.004", "KIP-932.STATE.008")
def test_piggybacked_reject_and_release_then_fetch(sp):
    """The same ordering with mixed types: one ShareFetch rejecting 0..4 and releasing 5..9
    acquires exactly 5..9 again (count 2) in its own response; the rejected ones never."""
    a, _, base = holding(sp)
    acks = {sp.key(): [(base, base + 4, [REJECT]), (base + 5, base + 9, [RELEASE])]}
    resp = a.fetch([sp.key()], acks=acks, max_wait_ms=3000)
    assert resp.error_code == E.none and partition_data(resp, sp.tid).acknowledge_error_code == 0
    assert delivery_counts(resp) == {o: 2 for o in range(base + 5, base + 10)}
    assert nothing_for(a, sp) == {}


@pytest.mark.requirement("KIP-932.STATE.003", "KIP-932.STATE.006")
def test_closing_the_session_releases_its_records(sp, record_property):
    """A's final ShareAcknowledge (epoch -1) closes its session and releases what it holds;
    B then gets the records at once, as a second delivery (count 2)."""
    a, b, base = holding(sp, 3)
    resp = a.close()
    assert resp.error_code == E.none, resp
    got = b.fetch_until([sp.key()], 3, wait_s=5)
    record_property("redelivery_counts", sorted(set(got.values())))
    assert got == {o: 2 for o in range(base, base + 3)}


@pytest.mark.requirement("KIP-932.FETCH.003")
def test_partitions_of_a_request_are_rotated(target, unique, record_property):
    """Two partitions of one leader with 200 records each and MaxRecords 10: over 20
    ShareFetches (each accepting what the previous one got) both get data while both still
    have records; with a fixed order the first partition would take all."""
    with wire.cluster_client(target) as cc:
        sp = SharePartitionUnderTest(target, cc, unique.topic(), unique.group(), partitions=6).open()
        parts = share.two_partitions_of_one_leader(sp)
        s = sp.member(parts[0])
        assert acquired(s.fetch([sp.key(p) for p in parts], max_wait_ms=200)) == []
        for p in parts:
            for _ in range(20):
                sp.produce([b"p%d" % p] * 10, p)
        served: dict[int, int] = {p: 0 for p in parts}
        remaining = {p: 200 for p in parts}
        acks = None
        for _ in range(20):
            contended = all(n > 0 for n in remaining.values())  # every partition still has data
            resp = s.fetch([sp.key(p) for p in parts], acks=acks, max_wait_ms=300, max_records=10)
            acks = {}
            for t in resp.responses:
                for pd in t.partitions:
                    if pd.acquired_records:
                        p = int(pd.partition_index)
                        served[p] += contended
                        remaining[p] -= sum(int(x.last_offset) - int(x.first_offset) + 1 for x in pd.acquired_records)
                        acks[sp.key(p)] = [(int(x.first_offset), int(x.last_offset), [ACCEPT]) for x in pd.acquired_records]
        record_property("responses_with_data_per_partition", served)
        assert all(n > 0 for n in served.values()), served
