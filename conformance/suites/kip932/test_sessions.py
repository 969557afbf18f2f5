"""KIP-932 share sessions on the wire: the epoch table of ShareFetch / ShareAcknowledge
(0 opens, 1..MAX increments, -1 closes, MAX wraps to 1) with each of its errors, what
opening, replacing and closing a session (final epoch, disconnect) does to the records it
acquired, and the per-broker session cap.

Where Kafka and the KIP text disagree (docs/share-groups-kip-vs-kafka.md, finding 23: a
final ShareFetch naming partitions, a second epoch-0 request) the test accepts either
reading and records the one the target follows as the property ``follows`` (kip | kafka).

The setup helpers here are shared by test_membership.py and test_durability.py.
"""

from __future__ import annotations

import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import pytest

from clients import confluent, share, wire
from clients.share import (
    ACCEPT, RELEASE, E, SHARE_ACKNOWLEDGE, SHARE_FETCH, SHARE_GROUP_HEARTBEAT, ack_codes, acquired, delivery_counts,
    offsets, partition_data, share_ack, share_fetch,
)
from conformance.suites import require_api, require_feature
from targets.target import NotSupportedByTarget, Target
from reference_impl.client.raw_client import ClusterClient, RawClient
from reference_impl.handlers.share_fetch import share_manager

MAX_EPOCH = 2**31 - 1
# group.share.max.share.sessions: Kafka's default (4.1+), also the KIP's cap
# (group.share.max.groups 10 x group.share.max.size 200).
DEFAULT_MAX_SHARE_SESSIONS = 2000
SESSIONS_OPTION = "broker.group.share.max.share.sessions"
RELEASE_ON_DISCONNECT_S = 5.0  # the default lock is 30 s; a disconnect must release well before
# Sessions other tests may hold on the same broker while the cap test fills it (4 workers,
# a few sessions each): the cap test's lower bound allows that many fewer.
OTHER_SESSIONS_SLACK = 64


# -- setup shared by the KIP-932 modules ----------------------------------------------------------


def require_share_groups(target: Target) -> None:
    """NotSupportedByTarget unless the target speaks the share-group RPCs (v1+) with share
    groups enabled (share.version >= 1 where the broker knows the feature)."""
    caps = target.capabilities()
    require_api(caps, SHARE_GROUP_HEARTBEAT, 1, "ShareGroupHeartbeat")
    require_api(caps, SHARE_FETCH, 1, "ShareFetch")
    require_api(caps, SHARE_ACKNOWLEDGE, 1, "ShareAcknowledge")
    if "share.version" in caps.supported_features:
        require_feature(caps, "share.version", 1)


produce_now = share.produce_values


@dataclass
class ShareSetup:
    """A topic, a share group reading it from the earliest offset (where group configs can
    be set) and one joined member."""

    target: Target
    cc: ClusterClient
    topic: str
    tid: uuid.UUID
    group: str
    member: str

    def part(self, p: int = 0) -> tuple[uuid.UUID, int]:
        return (self.tid, p)

    def leader(self, p: int = 0) -> RawClient:
        return self.cc.leader_for(self.topic, p)

    def leader_id(self, p: int = 0) -> int:
        t = wire.topic_ids(self.cc, self.topic)
        return int(next(x.leader_id for x in t.partitions if x.partition_index == p))

    def produce(self, n: int, p: int = 0, prefix: str = "v") -> int:
        return produce_now(self.cc, self.topic, [f"{prefix}{i}".encode() for i in range(n)], p)

    def join(self) -> str:
        """A new member, joined and holding an assignment."""
        return share.join_share_group(self.cc, self.group, [self.topic])[0]

    def join_once(self) -> str:
        """A new member after one ShareGroupHeartbeat: share-partition leaders do not ask
        whether a member is assigned the partition it fetches (and one partition need not
        be shared with every member)."""
        member = share.new_member_id()
        coord = self.cc.coordinator_for(self.group, 0, wait_s=30)
        resp = share.heartbeat(coord, self.group, member, 0, [self.topic])
        assert resp.error_code == E.none, resp
        return member


@contextmanager
def share_setup(target: Target, unique, partitions: int = 1, configs: dict[str, str] | None = None,
                join: bool = True) -> Iterator[ShareSetup]:
    """`configs` are group configs the test needs (NotSupportedByTarget without
    IncrementalAlterConfigs); share.auto.offset.reset=earliest is set where possible. Tests
    open their session before producing, so the default `latest` works as well."""
    require_share_groups(target)
    topic, group = unique.topic(), unique.group()
    confluent.create_topic(target, topic, partitions)
    with wire.cluster_client(target) as cc:
        if configs:
            share.set_group_configs(cc, group, {"share.auto.offset.reset": "earliest", **configs})
        else:
            try:
                share.set_group_configs(cc, group, {"share.auto.offset.reset": "earliest"})
            except NotSupportedByTarget:
                pass  # e.g. librdkafka's mock: sessions are opened before producing
        tid = wire.topic_ids(cc, topic).topic_id
        s = ShareSetup(target, cc, topic, tid, group, "")
        if join:
            s.member = s.join()
        yield s


def open_and_acquire(s: ShareSetup, node: RawClient, member: str, n: int = 10, p: int = 0) -> tuple[list, int]:
    """Open a session on [p] (epoch 0), produce n records, fetch until all n are acquired.
    Returns (acquired ranges, the session's next epoch)."""
    first = share_fetch(node, s.group, member, 0, [s.part(p)])
    assert first.error_code == E.none, first
    assert acquired(first) == [], f"nothing was produced yet, but the epoch-0 fetch acquired {acquired(first)}"
    s.produce(n, p)
    got, epoch = share.fetch_until(node, s.group, member, 1, [s.part(p)], n)
    assert sorted(o for f, l, _ in got for o in range(f, l + 1)) == list(range(n)), got
    return got, epoch


def counts_of(ranges: list[tuple[int, int, int]]) -> dict[int, int]:
    return {o: c for f, l, c in ranges for o in range(f, l + 1)}


def drain(node: RawClient, s: ShareSetup, member: str, epoch: int, want: int, wait_s: float = 10.0,
          p: int = 0) -> tuple[dict[int, int], int]:
    """Fetch on an open session until `want` offsets came; offset -> delivery count."""
    got, epoch = share.fetch_until(node, s.group, member, epoch, [s.part(p)], want, wait_s)
    return counts_of(got), epoch


def record(request, name: str, value) -> None:
    """An observation kept with the test's result (pytest user_properties), e.g. which
    reading of a KIP-vs-Kafka disagreement the target follows: ``follows:<topic>``."""
    request.node.user_properties.append((name, value))


def record_side(request, name: str, side: str) -> None:
    record(request, f"follows:{name}", side)


# -- the epoch table --------------------------------------------------------------------------------


@pytest.mark.requirement("KIP-932.SESSION.001", "KIP-932.FETCH.004")
def test_epoch_zero_opens_and_incremental_fetch_serves_the_session(target, unique):
    with share_setup(target, unique) as s:
        node = s.leader()
        got, epoch = open_and_acquire(s, node, s.member, 10)
        assert all(c == 1 for _, _, c in got), got
        s.produce(5)
        # No partitions listed: the session's partition is served; acknowledgements ride along.
        resp = share_fetch(node, s.group, s.member, epoch, [], acks={s.part(): [(0, 9, [ACCEPT])]}, max_wait_ms=2000)
        assert resp.error_code == E.none, resp
        assert partition_data(resp, s.tid).acknowledge_error_code == E.none
        more, epoch = list(acquired(resp)), epoch + 1
        if sum(l - f + 1 for f, l, _ in more) < 5:
            extra, epoch = share.fetch_until(node, s.group, s.member, epoch, [], 5 - sum(l - f + 1 for f, l, _ in more))
            more += extra
        assert sorted(counts_of(more)) == list(range(10, 15)), more


@pytest.mark.requirement("KIP-932.FETCH.004")
def test_incremental_fetch_releasing_everything_reacquires_it(target, unique):
    """Issue 14: acknowledgements before the fetch, on an incremental session request with no
    partitions listed. The session holds 0..9 and the log has nothing more: releasing 0..9
    in the next ShareFetch acquires them again in that very response (count 2)."""
    with share_setup(target, unique) as s:
        node = s.leader()
        _, epoch = open_and_acquire(s, node, s.member, 10)
        resp = share_fetch(node, s.group, s.member, epoch, [], acks={s.part(): [(0, 9, [RELEASE])]}, max_wait_ms=3000)
        assert resp.error_code == E.none, resp
        assert partition_data(resp, s.tid).acknowledge_error_code == E.none
        assert counts_of(list(acquired(resp))) == {o: 2 for o in range(10)}, acquired(resp)


@pytest.mark.requirement("KIP-932.SESSION.002")
def test_epoch_zero_with_acknowledgements_is_refused_and_opens_nothing(target, unique):
    with share_setup(target, unique) as s:
        node = s.leader()
        resp = share_fetch(node, s.group, s.member, 0, [s.part()], acks={s.part(): [(0, 0, [ACCEPT])]})
        assert resp.error_code == E.invalid_request, resp
        assert share_fetch(node, s.group, s.member, 1, [s.part()]).error_code == E.share_session_not_found


@pytest.mark.requirement("KIP-932.SESSION.004")
def test_incremental_epoch_without_a_session(target, unique):
    with share_setup(target, unique) as s:
        node = s.leader()
        for epoch in (1, 5, MAX_EPOCH):
            assert share_fetch(node, s.group, s.member, epoch, [s.part()]).error_code == E.share_session_not_found, epoch


@pytest.mark.requirement("KIP-932.SESSION.005", "KIP-932.SESSION.014")
def test_wrong_epoch_is_refused_and_does_not_advance_the_session(target, unique):
    with share_setup(target, unique) as s:
        node = s.leader()
        assert share_fetch(node, s.group, s.member, 0, [s.part()]).error_code == E.none
        for bad in (2, 7, MAX_EPOCH):
            assert share_fetch(node, s.group, s.member, bad, [s.part()]).error_code == E.invalid_share_session_epoch, bad
        assert share_fetch(node, s.group, s.member, 1, [s.part()]).error_code == E.none
        assert share_fetch(node, s.group, s.member, 1, [s.part()]).error_code == E.invalid_share_session_epoch
        assert share_fetch(node, s.group, s.member, 2, [s.part()]).error_code == E.none


@pytest.mark.requirement("KIP-932.SESSION.006")
def test_incremental_fetch_adds_and_forgets_partitions(target, unique):
    with share_setup(target, unique, partitions=4) as s:
        by_leader: dict[int, list[int]] = {}
        for p in range(4):
            by_leader.setdefault(s.leader_id(p), []).append(p)
        pa, pb = next(ps for ps in by_leader.values() if len(ps) >= 2)[:2]  # 4 partitions, <= 3 brokers
        node = s.leader(pa)
        assert share_fetch(node, s.group, s.member, 0, [s.part(pa)]).error_code == E.none
        assert share_fetch(node, s.group, s.member, 1, [s.part(pb)]).error_code == E.none
        assert share_fetch(node, s.group, s.member, 2, [], forgotten=[s.part(pa)]).error_code == E.none
        s.produce(3, pa)
        s.produce(3, pb)
        served: set[int] = set()
        got: list[int] = []
        deadline, epoch = time.monotonic() + 10, 3
        while len(got) < 3 and time.monotonic() < deadline:
            resp = share_fetch(node, s.group, s.member, epoch, [], max_wait_ms=500)
            assert resp.error_code == E.none, resp
            epoch += 1
            served |= {int(p.partition_index) for t in resp.responses for p in t.partitions if p.acquired_records}
            got += offsets(resp)
        assert served == {pb}, f"the session after forgetting {pa} served partitions {served}"
        assert sorted(got) == [0, 1, 2]


@pytest.mark.requirement("KIP-932.SESSION.009")
def test_final_epoch_without_a_session(target, unique):
    with share_setup(target, unique) as s:
        node = s.leader()
        assert share_fetch(node, s.group, s.member, -1).error_code == E.share_session_not_found
        assert share_ack(node, s.group, s.member, -1, {}).error_code == E.share_session_not_found
        stranger = share.new_member_id()
        assert share_fetch(node, s.group, stranger, -1).error_code == E.share_session_not_found
        assert share_ack(node, s.group, stranger, -1, {}).error_code == E.share_session_not_found


@pytest.mark.requirement("KIP-932.SESSION.010")
def test_share_acknowledge_cannot_open_a_session(target, unique):
    with share_setup(target, unique) as s:
        node = s.leader()
        assert share_ack(node, s.group, s.member, 0, {}).error_code == E.invalid_share_session_epoch
        assert share_ack(node, s.group, s.member, 0, {s.part(): [(0, 0, [ACCEPT])]}).error_code \
            == E.invalid_share_session_epoch
        assert share_fetch(node, s.group, s.member, 1, [s.part()]).error_code == E.share_session_not_found


@pytest.mark.requirement("KIP-932.SESSION.011")
def test_share_acknowledge_follows_the_session_epoch(target, unique):
    with share_setup(target, unique) as s:
        node = s.leader()
        assert share_ack(node, s.group, s.member, 7, {}).error_code == E.share_session_not_found
        got, epoch = open_and_acquire(s, node, s.member, 10)
        assert share_ack(node, s.group, s.member, epoch + 1, {s.part(): [(0, 9, [ACCEPT])]}).error_code \
            == E.invalid_share_session_epoch
        ack = share_ack(node, s.group, s.member, epoch, {s.part(): [(0, 9, [ACCEPT])]})
        assert ack.error_code == E.none and ack_codes(ack) == {0: E.none}, ack
        # The acknowledgement advanced the epoch: the same epoch again is refused, the next works.
        assert share_fetch(node, s.group, s.member, epoch, [s.part()]).error_code == E.invalid_share_session_epoch
        resp = share_fetch(node, s.group, s.member, epoch + 1, [s.part()])
        assert resp.error_code == E.none and acquired(resp) == [], resp  # 0..9 are acknowledged


# -- closing, replacing and dropping sessions -------------------------------------------------------


def _second_member_gets(s: ShareSetup, node: RawClient, want: set[int], wait_s: float = 10.0) -> dict[int, int]:
    other = s.join_once()
    counts, _ = drain(node, s, other, 0, len(want), wait_s)
    return counts


@pytest.mark.requirement("KIP-932.SESSION.008")
def test_final_share_fetch_acknowledges_releases_and_closes(target, unique):
    with share_setup(target, unique) as s:
        node = s.leader()
        _, epoch = open_and_acquire(s, node, s.member, 10)
        resp = share_fetch(node, s.group, s.member, -1, acks={s.part(): [(0, 4, [ACCEPT])]})
        assert resp.error_code == E.none, resp
        assert partition_data(resp, s.tid).acknowledge_error_code == E.none
        assert acquired(resp) == []
        assert share_fetch(node, s.group, s.member, epoch, [s.part()]).error_code == E.share_session_not_found
        counts = _second_member_gets(s, node, set(range(5, 10)))
        # 0..4 acknowledged, never again; 5..9 released at once (their second delivery).
        assert counts == {o: 2 for o in range(5, 10)}, counts


@pytest.mark.requirement("KIP-932.SESSION.012")
def test_final_share_acknowledge_acknowledges_releases_and_closes(target, unique):
    with share_setup(target, unique) as s:
        node = s.leader()
        _, epoch = open_and_acquire(s, node, s.member, 10)
        ack = share_ack(node, s.group, s.member, -1, {s.part(): [(0, 4, [ACCEPT])]})
        assert ack.error_code == E.none and ack_codes(ack) == {0: E.none}, ack
        assert share_fetch(node, s.group, s.member, epoch, [s.part()]).error_code == E.share_session_not_found
        counts = _second_member_gets(s, node, set(range(5, 10)))
        assert counts == {o: 2 for o in range(5, 10)}, counts


@pytest.mark.requirement("KIP-932.SESSION.013")
def test_disconnect_closes_the_session_and_releases_its_records(target, unique):
    with share_setup(target, unique) as s:
        host, port = s.cc.nodes[s.leader_id()]
        conn = s.cc.connect_to(host, port)
        try:
            open_and_acquire(s, conn, s.member, 10)
        finally:
            conn.close()
        closed = time.monotonic()
        counts = _second_member_gets(s, s.leader(), set(range(10)), wait_s=RELEASE_ON_DISCONNECT_S)
        assert sorted(counts) == list(range(10)), f"after the disconnect another member got only {counts}"
        assert time.monotonic() - closed < RELEASE_ON_DISCONNECT_S
        assert all(c >= 2 for c in counts.values()), counts


@pytest.mark.requirement("KIP-932.SESSION.007")
def test_final_share_fetch_naming_partitions(target, unique, request):
    """KIP: INVALID_REQUEST and the session stays. Kafka 4.4.0 (finding 23): accepted,
    nothing fetched, the session closed."""
    with share_setup(target, unique) as s:
        node = s.leader()
        sides = []
        for fetch_parts, forgotten in (([s.part()], []), ([], [s.part()])):
            assert share_fetch(node, s.group, s.member, 0, [s.part()]).error_code == E.none
            resp = share_fetch(node, s.group, s.member, -1, fetch_parts, forgotten=forgotten)
            after = share_fetch(node, s.group, s.member, 1, [s.part()]).error_code
            if resp.error_code == E.invalid_request:
                assert after == E.none, "the refused final fetch must leave the session open"
                sides.append("kip")
            else:
                assert resp.error_code == E.none and acquired(resp) == [], resp
                assert after == E.share_session_not_found, "an accepted final fetch closes the session"
                sides.append("kafka")
            share_fetch(node, s.group, s.member, -1)  # close whatever is left
        assert len(set(sides)) == 1, f"fetch and forget answered differently: {sides}"
        record_side(request, "final-fetch-with-partitions", sides[0])


@pytest.mark.requirement("KIP-932.SESSION.003")
def test_second_epoch_zero_replaces_the_session(target, unique, request):
    """KIP: the old session's acquired records are released (redelivered with count 2).
    Kafka 4.4.0 (finding 23): they stay acquired by the member until their locks expire."""
    with share_setup(target, unique) as s:
        node = s.leader()
        _, old_epoch = open_and_acquire(s, node, s.member, 10)
        resp = share_fetch(node, s.group, s.member, 0, [s.part()], max_wait_ms=500)
        assert resp.error_code == E.none, resp
        again = delivery_counts(resp)
        if again:
            assert again == {o: 2 for o in range(10)}, again
            record_side(request, "second-epoch-zero", "kip")
        else:
            # Still this member's: another member gets none of them, this one can accept them.
            other = s.join_once()
            probe = share_fetch(node, s.group, other, 0, [s.part()], max_wait_ms=500)
            assert probe.error_code == E.none and acquired(probe) == [], probe
            record_side(request, "second-epoch-zero", "kafka")
        # The replaced session's epochs are gone: the new session expects 1.
        assert share_fetch(node, s.group, s.member, old_epoch, [s.part()]).error_code == E.invalid_share_session_epoch
        ack = share_ack(node, s.group, s.member, 1, {s.part(): [(0, 9, [ACCEPT])]})
        assert ack.error_code == E.none and ack_codes(ack) == {0: E.none}, ack


@pytest.mark.requirement("KIP-932.SESSION.014")
def test_sessions_are_per_member_and_per_broker(target, unique):
    with share_setup(target, unique) as s:
        node = s.leader()
        other = s.join_once()
        assert share_fetch(node, s.group, s.member, 0, [s.part()]).error_code == E.none
        assert share_fetch(node, s.group, other, 0, [s.part()]).error_code == E.none
        for epoch in (1, 2, 3):
            assert share_fetch(node, s.group, s.member, epoch, [s.part()]).error_code == E.none
        assert share_fetch(node, s.group, other, 3, [s.part()]).error_code == E.invalid_share_session_epoch
        assert share_fetch(node, s.group, other, 1, [s.part()]).error_code == E.none
        # The same member on another broker: a session of its own, with its own epochs.
        others = [n for n in sorted(s.cc.nodes) if n != s.leader_id()]
        if others:
            far = s.cc.node(others[0])
            assert share_fetch(far, s.group, s.member, 4, []).error_code == E.share_session_not_found
            assert share_fetch(far, s.group, s.member, 0, []).error_code == E.none
            assert share_fetch(far, s.group, s.member, 1, []).error_code == E.none
            share_fetch(far, s.group, s.member, -1)
        assert share_fetch(node, s.group, s.member, 4, [s.part()]).error_code == E.none


def _reference_session(target: Target, node_id: int, group: str, member: str):
    """The reference broker's session object (only the reference lets a test reach 2^31-1)."""
    state = target.cluster.cluster.state  # type: ignore[attr-defined]
    return share_manager(state).sessions(node_id).get(group, member)


@pytest.mark.requirement("KIP-932.SESSION.014")
def test_epoch_wraps_to_one_after_max(target, unique):
    if target.kind != "reference":
        raise NotSupportedByTarget("reaching epoch 2147483647 takes 2^31 requests; only the reference lets a test seed a session's epoch")
    with share_setup(target, unique) as s:
        node = s.leader()
        assert share_fetch(node, s.group, s.member, 0, [s.part()]).error_code == E.none
        _reference_session(target, s.leader_id(), s.group, s.member).epoch = MAX_EPOCH
        assert share_fetch(node, s.group, s.member, MAX_EPOCH, [s.part()]).error_code == E.none
        assert share_fetch(node, s.group, s.member, MAX_EPOCH, [s.part()]).error_code == E.invalid_share_session_epoch
        assert share_fetch(node, s.group, s.member, 1, [s.part()]).error_code == E.none
        assert share_fetch(node, s.group, s.member, 2, [s.part()]).error_code == E.none


# -- the session cap --------------------------------------------------------------------------------


def session_cap(target: Target) -> int:
    value = target.spec.option(SESSIONS_OPTION)
    return int(value) if value is not None else DEFAULT_MAX_SHARE_SESSIONS


@pytest.mark.slow
@pytest.mark.requirement("KIP-932.SESSION.015")
def test_session_cap_refuses_new_sessions_and_keeps_existing_ones(target, unique, request):
    """Up to the cap sessions open (at most OTHER_SESSIONS_SLACK fewer, held by other tests
    on this broker); the next one is refused; existing sessions keep working; closing one
    makes room. The lower bound fails a broker that refuses well below its cap."""
    cap = session_cap(target)
    with share_setup(target, unique, join=False) as s:
        node = s.leader()
        opened: list[str] = []
        refusal = None
        try:
            for _ in range(cap + 1):
                member = share.new_member_id()
                resp = share_fetch(node, s.group, member, 0, [])
                if resp.error_code != E.none:
                    refusal = resp.error_code
                    break
                opened.append(member)
            record(request, "sessions_opened_before_refusal", len(opened))
            assert refusal is not None, f"{len(opened)} sessions opened on one broker; the cap is {cap}"
            assert refusal == E.share_session_limit_reached, refusal
            assert max(1, cap - OTHER_SESSIONS_SLACK) <= len(opened) <= cap, \
                f"refused after {len(opened)} sessions; the cap is {cap}"
            assert share_fetch(node, s.group, opened[0], 1, []).error_code == E.none
            assert share_fetch(node, s.group, opened[-1], -1).error_code == E.none
            newcomer = share.new_member_id()
            opened.append(newcomer)
            assert share_fetch(node, s.group, newcomer, 0, []).error_code == E.none
        finally:
            for member in opened:  # free the broker's cache for the tests that follow
                share_fetch(node, s.group, member, -1)
