"""KIP-932 durability on the wire: a share-partition's acknowledged and archived records,
delivery counts and SPSO survive a crash (SIGKILL or stop) and restart of its leader and
of the share coordinator that holds its `__share_group_state` records.

Needs three brokers and node lifecycle. On `reference:nodes=3` the target itself is used;
for a single-node kafka-native target the module starts one `kafka-native[:VERSION]:nodes=3`
cluster of the same release (about 15 s, once per module) and stops it at the end. The
SPSO is read with ReadShareGroupStateSummary from the share coordinator (a broker-to-
broker RPC; the test cluster has no authorizer), which Kafka's DescribeShareGroupOffsets
also uses; targets without it (librdkafka's mock) are not supported.

Observations: offsets that were acknowledged or archived before the crash are never
delivered again (ACK.004); every other offset comes back without waiting for its lock
(Acquired is not persisted, STATE.012); no delivery count is lower than the last one
observed for the offset before the crash, and the SPSO never moves backwards.

The group coordinator is crashed too: the share group's members, assignments and epochs
are replayed from __consumer_offsets (GROUP.008, EPOCH.007; whether the new coordinator
bumps the group epoch as the KIP says or keeps it as Kafka does is recorded, DIV-93206),
and a deleted group's tombstones are replayed as well (GREC.001).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import pytest

from conformance import target_limits
from clients import share
from clients.errors import COORDINATOR_RETRIABLE
from clients.share import ACCEPT, E, REJECT, RELEASE, eventually, share_ack, share_fetch
from conformance.suites import require_api, require_nodes
from conformance.suites.kip932.test_membership import require_describe
from conformance.suites.kip932.test_admin import delete_groups
from conformance.suites.kip932.test_sessions import (
    ShareSetup, counts_of, drain, open_and_acquire, record, record_side, require_share_groups, share_setup,
)
from targets.target import NotSupportedByTarget, Target
from targets.factory import create_target
from reference_impl.client.raw_client import ClusterClient
from reference_impl.model.share_state_records import coordinator_key
from reference_impl.protocol.api_keys import ApiKey

READ_SHARE_GROUP_STATE_SUMMARY = ApiKey.READ_SHARE_GROUP_STATE_SUMMARY
FIND_COORDINATOR, SHARE_KEY_TYPE = ApiKey.FIND_COORDINATOR, 2
FAILOVER_WAIT_S = 120.0  # a restarted Kafka node answers within seconds; under CI load (2 cores, several
# JVMs) its share coordinator was seen answering COORDINATOR_NOT_AVAILABLE for over 60 s
_DEDICATED: dict[str, Target] = {}  # spec -> started kafka-native:nodes=3 cluster of this module


@pytest.fixture(scope="module", autouse=True)
def _stop_dedicated_clusters():
    yield
    while _DEDICATED:
        _DEDICATED.popitem()[1].stop()


def three_node_target(target: Target) -> Target:
    """The target when it has 3 brokers; for single-node kafka-native, a 3-node cluster of
    the same release and options, started once per module."""
    require_share_groups(target)
    if target.kind != "kafka-native" or len(target.node_ids) >= 3:
        require_nodes(target, 3)
        return target
    parts = ["kafka-native"] + ([target.spec.version] if target.spec.version else [])
    parts += [f"{k}={v}" for k, v in target.spec.options] + ["nodes=3"]
    spec = ":".join(parts)
    if spec not in _DEDICATED:
        dedicated = create_target(spec)
        dedicated.start()
        _DEDICATED[spec] = dedicated
    return _DEDICATED[spec]


# -- observations -------------------------------------------------------------------------------


def share_coordinator(cc: ClusterClient, s: ShareSetup, p: int = 0) -> int:
    """Node id of the share coordinator of (group, topic, p); every broker must name the
    same node (FindCoordinator v6, key type 2)."""
    key = coordinator_key(s.group, s.tid, p)
    answers = set()
    deadline = time.monotonic() + FAILOVER_WAIT_S
    for n in sorted(cc.nodes):
        while True:
            (c,) = cc.node(n).request(FIND_COORDINATOR, 6, key_type=SHARE_KEY_TYPE, coordinator_keys=(key,)).coordinators
            if c.error_code == E.none or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert c.error_code == E.none, c
        answers.add(int(c.node_id))
    assert len(answers) == 1, f"brokers disagree on the share coordinator of {key}: {answers}"
    return answers.pop()


def spso(cc: ClusterClient, s: ShareSetup, p: int = 0) -> int:
    """The durable SPSO (ReadShareGroupStateSummary StartOffset) of (group, topic, p),
    asked again while the coordinator is loading or moving."""
    start = time.monotonic()
    while True:
        coordinator = share_coordinator(cc, s, p)
        node = cc.node(coordinator)
        version = node.negotiate(READ_SHARE_GROUP_STATE_SUMMARY, 1)
        resp = node.request(READ_SHARE_GROUP_STATE_SUMMARY, version, group_id=s.group, topics=(
            share.nested(READ_SHARE_GROUP_STATE_SUMMARY, version, "ReadStateSummaryData", topic_id=s.tid, partitions=(
                share.nested(READ_SHARE_GROUP_STATE_SUMMARY, version, "PartitionData", partition=p, leader_epoch=0),)),))
        (part,) = resp.results[0].partitions
        if part.error_code == E.none:
            return int(part.start_offset)
        waited = time.monotonic() - start
        assert part.error_code in COORDINATOR_RETRIABLE and waited < FAILOVER_WAIT_S, (
            f"the share coordinator (node {coordinator}) still answered "
            f"{part.error_code!r} ({part.error_message}) after {waited:.0f} s")
        time.sleep(0.3)


def redeliveries(cc: ClusterClient, s: ShareSetup, member: str, want: set[int],
                 wait_s: float = FAILOVER_WAIT_S, answers_out: list[set[int]] | None = None,
                 ) -> tuple[dict[int, int], Any, int]:
    """offset -> delivery count of what `member` acquires from whichever broker leads the
    partition, until every offset of `want` came (or the deadline); also the leader and
    the session's next epoch there. Acquires everything it sees, so offsets outside `want`
    show up too. `answers_out` receives the offsets of each answer that acquired any."""
    got: dict[int, int] = {}
    answers: list[tuple[int, int]] = []  # (top-level, partition) error codes, for the message
    deadline = time.monotonic() + wait_s
    current, epoch = None, 0
    while not want <= set(got) and time.monotonic() < deadline:
        try:
            leader = cc.leader_for(s.topic, 0)
        except LookupError:
            time.sleep(0.3)
            continue
        if leader is not current:  # a new leader: a new session there
            current, epoch = leader, 0
        resp = share_fetch(leader, s.group, member, epoch, [s.part()], max_wait_ms=500)
        pd = share.partition_data(resp, s.tid)
        answers.append((int(resp.error_code), -1 if pd is None else int(pd.error_code)))
        if resp.error_code != E.none:  # a session lost with a moved leader: open a new one
            epoch = 0
            time.sleep(0.2)
            continue
        epoch += 1
        counts = share.delivery_counts(resp)
        if counts and answers_out is not None:
            answers_out.append(set(counts))
        for o, c in counts.items():
            assert o not in got, f"offset {o} delivered twice to one session without release: {got}"
            got[o] = c
        if pd is not None and pd.error_code != E.none:
            time.sleep(0.2)
    assert want <= set(got), f"wanted {sorted(want)}, got {got}; error codes (request, partition) seen: " \
                             f"{sorted(set(answers))}, last {answers[-3:]}"
    return got, current, epoch


def fresh(target: Target, s: ShareSetup) -> ShareSetup:
    return dataclasses.replace(s, cc=target.cluster_client())


def require_summary(target: Target) -> None:
    require_api(target.capabilities(), READ_SHARE_GROUP_STATE_SUMMARY, 0, "ReadShareGroupStateSummary")


# -- the tests ----------------------------------------------------------------------------------


@pytest.mark.deadline(900)  # a 3-broker cluster of its own on kafka-native: 300 s ran out in CI under load
@pytest.mark.requirement("KIP-932.ACK.004", "KIP-932.STATE.012", "KIP-932.DELIVERY.002")
def test_share_partition_leader_crash_keeps_acknowledged_state(target, unique, request):
    t = three_node_target(target)
    require_summary(t)
    with share_setup(t, unique) as s:
        node = s.leader()
        got, epoch = open_and_acquire(s, node, s.member, 20)
        seen = counts_of(got)
        ack = share_ack(node, s.group, s.member, epoch, {s.part(): [
            (0, 4, [ACCEPT]), (5, 6, [REJECT]), (7, 9, [RELEASE])]})
        assert ack.error_code == E.none and share.ack_codes(ack) == {0: E.none}, ack
        again, epoch = drain(node, s, s.member, epoch + 1, 3)
        assert again == {7: 2, 8: 2, 9: 2}, again
        seen.update(again)
        ack = share_ack(node, s.group, s.member, epoch, {s.part(): [(7, 7, [ACCEPT])]})
        assert share.ack_codes(ack) == {0: E.none}, ack
        # 0..7 are final: the SPSO is 8 in memory. The stored one may lag by one write
        # (Kafka writes the start offset it had before applying the acknowledgement).
        before = spso(s.cc, s)
        record(request, "stored_spso_before_crash", before)
        assert 0 <= before <= 8, before
        leader = s.leader_id()
        s.cc.close()
    t.kill_node(leader)  # SIGKILL on kafka-native: nothing flushed at shutdown
    t.restart_node(leader)
    after = fresh(t, s)
    try:
        restarted = spso(after.cc, after)
        assert restarted >= before, f"the stored SPSO went back from {before} to {restarted}"
        member = after.join()
        counts, node, epoch = redeliveries(after.cc, after, member, set(range(8, 20)))
        record(request, "delivery_counts_after_restart", counts)
        assert set(counts) == set(range(8, 20)), f"after the leader restart, delivered {sorted(counts)}; want 8..19"
        lower = {o: (seen[o], c) for o, c in counts.items() if c < seen[o]}
        assert not lower, f"delivery counts went back (before, after): {lower}"
        ack = share_ack(node, after.group, member, epoch, {after.part(): [(8, 19, [ACCEPT])]})
        assert share.ack_codes(ack) == {0: E.none}, ack
        final = spso(after.cc, after)
        record(request, "stored_spso_after_all_accepted", final)
        assert restarted <= final <= 20, (restarted, final)
    finally:
        after.cc.close()


@pytest.mark.requirement("KIP-932.SCOORD.002", "KIP-932.PERSIST.005", "KIP-932.DELIVERY.002")
def test_share_coordinator_crash_keeps_the_durable_state(target, unique, request):
    t = three_node_target(target)
    require_summary(t)
    with share_setup(t, unique) as s:
        node = s.leader()
        got, epoch = open_and_acquire(s, node, s.member, 10)
        seen = counts_of(got)
        ack = share_ack(node, s.group, s.member, epoch, {s.part(): [(0, 4, [ACCEPT]), (5, 6, [RELEASE])]})
        assert share.ack_codes(ack) == {0: E.none}, ack
        before = spso(s.cc, s)  # 5 in memory; the stored value may lag by one write
        record(request, "stored_spso_before_crash", before)
        assert 0 <= before <= 5, before
        coord, leader = share_coordinator(s.cc, s), s.leader_id()
        record(request, "share_coordinator_is_leader", coord == leader)
        s.cc.close()
    t.kill_node(coord)
    t.restart_node(coord)
    if leader != coord:  # reload the share-partition from the (moved) coordinator
        t.kill_node(leader)
        t.restart_node(leader)
    after = fresh(t, s)
    try:
        restarted = spso(after.cc, after)
        assert restarted >= before, f"the stored SPSO went back from {before} to {restarted}"
        member = after.join()
        counts, node, epoch = redeliveries(after.cc, after, member, set(range(5, 10)))
        record(request, "delivery_counts_after_restart", counts)
        assert set(counts) == set(range(5, 10)), f"after the restarts, delivered {sorted(counts)}; want 5..9"
        # 5..6 were released (count 1 stored): their next delivery counts at least 2.
        floor = {o: seen[o] + 1 if o in (5, 6) else seen[o] for o in counts}
        lower = {o: (floor[o], c) for o, c in counts.items() if c < floor[o]}
        assert not lower, f"delivery counts went back (at least, got): {lower}"
        ack = share_ack(node, after.group, member, epoch, {after.part(): [(5, 9, [ACCEPT])]})
        assert share.ack_codes(ack) == {0: E.none}, ack
        final = spso(after.cc, after)
        record(request, "stored_spso_after_all_accepted", final)
        assert restarted <= final <= 10, (restarted, final)
    finally:
        after.cc.close()


# -- group coordinator fail-over -----------------------------------------------------------------


LONG_LOCK_MS = 60_000  # group.share.max.record.lock.duration.ms: a kept lock would hold past the test's first fetch


@pytest.mark.deadline(900)
@pytest.mark.requirement("KIP-932.ACK.004", "KIP-932.STATE.012", "KIP-932.DELIVERY.002")
def test_leader_crash_with_interleaved_states_above_the_spso(target, unique, request):
    """Accepted, rejected, released and acquired records interleaved above the SPSO at the
    crash of the share-partition leader. After it: accepted/rejected never come back, every
    acquired one comes back at once (its lock died with the leader: the first answer that
    acquires anything holds all of them, though the locks were 60 s), each delivery count is
    the persisted one plus one (the acquisitions in flight died with the leader; observed
    on Kafka 4.4), and the stored SPSO is unchanged."""
    t = three_node_target(target)
    require_summary(t)
    with share_setup(t, unique, configs={"share.record.lock.duration.ms": str(LONG_LOCK_MS)}) as s:
        node = s.leader()
        got, epoch = open_and_acquire(s, node, s.member, 20)
        seen = counts_of(got)
        ack = share_ack(node, s.group, s.member, epoch, {s.part(): [
            (0, 1, [ACCEPT]), (2, 3, [RELEASE]), (4, 5, [ACCEPT]), (6, 6, [REJECT]), (8, 9, [RELEASE]), (10, 10, [ACCEPT])]})
        assert share.ack_codes(ack) == {0: E.none}, ack
        again, epoch = drain(node, s, s.member, epoch + 1, 4)
        assert again == {2: 2, 3: 2, 8: 2, 9: 2}, again
        seen.update(again)
        ack = share_ack(node, s.group, s.member, epoch, {s.part(): [(3, 3, [RELEASE])]})
        assert share.ack_codes(ack) == {0: E.none}, ack
        # At the crash: 0-1 accepted (SPSO 2), 2 acquired (count 2), 3 released (count 2),
        # 4-5 accepted, 6 archived, 7 acquired, 8-9 acquired (count 2), 10 accepted, 11-19 acquired.
        before = spso(s.cc, s)
        record(request, "stored_spso_before_crash", before)
        assert before == 2, f"stored SPSO {before}; 0-1 were accepted three writes ago"
        # The session's connection stays open through the kill: a live broker releases a
        # closed connection's records (a durable write) and would race the crash.
        leader = s.leader_id()
        t.kill_node(leader)  # SIGKILL on kafka-native
        t.restart_node(leader)
        s.cc.close()
    after = fresh(t, s)
    want = {2, 3, 7, 8, 9} | set(range(11, 20))
    try:
        assert spso(after.cc, after) == before, "the stored SPSO changed across the crash"
        answers: list[set[int]] = []
        counts, node, epoch = redeliveries(after.cc, after, after.join(), want, answers_out=answers)
        record(request, "delivery_counts_after_crash", counts)
        # KIP-932.ACK.004: accepted/rejected never again; KIP-932.STATE.012: Acquired not persisted.
        assert set(counts) == want, f"after the crash, delivered {sorted(counts)}; want {sorted(want)}"
        assert answers[0] == want, f"the first answer acquired {sorted(answers[0])}: locks outlived the leader's crash"
        # The persisted count (acquisition is not persisted) plus this delivery: released 3
        # (stored 2) -> 3; 2, 8, 9 (stored 1 at their release, acquired again) -> 2; never
        # stored -> 1. A leader that kept its memory would give one more to each acquired one.
        kept = {2: 2, 3: 3, 7: 1, 8: 2, 9: 2, **{o: 1 for o in range(11, 20)}}  # KIP-932.DELIVERY.002
        assert counts == kept, f"delivery counts after the crash {counts}; want the persisted ones + 1: {kept}"
        assert spso(after.cc, after) == before
    finally:
        after.cc.close()


def describe_group(cc: ClusterClient, group: str) -> Any:
    return share.describe_share_group(cc, group, FAILOVER_WAIT_S)


class Heartbeats(threading.Thread):
    """Members that keep heartbeating (every second, to whichever node coordinates the group)
    through a crash, as real members do; errors other than the coordinator's retriable ones
    are collected. Every refusal is noted with when it came, from which node and how long the
    member had gone without an answered heartbeat, against the group's session timeout: an
    UNKNOWN_MEMBER_ID after a longer gap is an expiry (the harness failed to reach the new
    coordinator in time), after a shorter one a member the new coordinator lost."""

    IO_TIMEOUT_S = 3.0  # a connection to the killed node must not hold the beats for 15 s

    def __init__(self, target: Target, group: str, epochs: dict[str, int]) -> None:
        super().__init__(daemon=True)
        self.target, self.group, self.epochs = target, group, dict(epochs)
        self.session_timeout_s = target_limits.limits(target)["group.share.session.timeout.ms"] / 1000
        self.errors: list[tuple[str, int]] = []
        self.trail: list[str] = []  # every refusal and lost connection, timed, for the failure message
        self.ok = {m: 0 for m in epochs}  # successful heartbeats per member
        self.started = time.monotonic()
        self.last_ok = {m: self.started for m in epochs}
        self.longest_gap_s = 0.0
        self.done = threading.Event()

    def run(self) -> None:
        cc = None
        while not self.done.wait(1.0):
            node = None
            try:
                cc = cc or self.target.cluster_client(timeout=self.IO_TIMEOUT_S)
                error, node = cc.find_coordinator(self.group, 0)
                if error != E.none:
                    self._note(f"FindCoordinator error {error}")
                    continue
                for m, e in self.epochs.items():
                    self._answered(m, node, share.heartbeat(cc.node(node), self.group, m, e))
            except (OSError, ConnectionError, EOFError, RuntimeError, LookupError) as exc:
                self._note(f"node {node}: {type(exc).__name__}")
                if cc is not None:
                    cc.close()
                cc = None  # the crashed node: reconnect through the others
        if cc is not None:
            cc.close()

    def _answered(self, member: str, node: int | None, resp: Any) -> None:
        now = time.monotonic()
        gap = now - self.last_ok[member]
        if resp.error_code == E.none:
            self.epochs[member] = int(resp.member_epoch)
            self.ok[member] += 1
            self.longest_gap_s = max(self.longest_gap_s, gap)
            self.last_ok[member] = now
            return
        self._note(f"node {node}: {member} error {int(resp.error_code)} after {gap:.1f}s without a heartbeat")
        if resp.error_code not in COORDINATOR_RETRIABLE:
            self.errors.append((member, int(resp.error_code)))

    def _note(self, what: str) -> None:
        self.trail.append(f"+{time.monotonic() - self.started:.1f}s {what}")

    def report(self) -> str:
        trail = self.trail if len(self.trail) <= 12 else self.trail[:6] + ["..."] + self.trail[-6:]
        return (f"longest gap between answered heartbeats {self.longest_gap_s:.1f}s (session timeout "
                f"{self.session_timeout_s:g}s); {'; '.join(trail)}")

    def wait_beats(self, n: int) -> None:
        """Until every member has `n` more successful heartbeats than now."""
        base = dict(self.ok)

        def counted() -> None:
            assert not self.errors, f"heartbeats refused: {self.report()}"
            assert all(self.ok[m] >= base[m] + n for m in base), (base, self.ok)

        eventually(counted, FAILOVER_WAIT_S)

    def stop(self) -> dict[str, int]:
        self.done.set()
        self.join(30)
        return self.epochs


def members_of(d: Any) -> dict[str, tuple[int, list[int]]]:
    return {m.member_id: (int(m.member_epoch), sorted(p for tp in m.assignment.topic_partitions for p in tp.partitions))
            for m in d.members}


def beat_until_stable(cc: ClusterClient, s: ShareSetup, epochs: dict[str, int]) -> dict[str, int]:
    """Heartbeat every member until both partitions are assigned and nothing changes."""
    deadline = time.monotonic() + FAILOVER_WAIT_S
    while True:
        coord = cc.coordinator_for(s.group, 0, wait_s=FAILOVER_WAIT_S)
        for m in epochs:
            resp = share.heartbeat(coord, s.group, m, epochs[m])
            assert resp.error_code in (E.none, *COORDINATOR_RETRIABLE), resp
            if resp.error_code == E.none:
                epochs[m] = int(resp.member_epoch)
        d = describe_group(cc, s.group)
        assigned = sorted(p for _, ps in members_of(d).values() for p in ps)
        if assigned == [0, 1] and all(e == d.group_epoch for e, _ in members_of(d).values()):
            return epochs
        assert time.monotonic() < deadline, (assigned, members_of(d), d.group_epoch)
        time.sleep(0.3)


def crash_coordinator(t: Target, cc: ClusterClient, group: str) -> None:
    """Kill the node coordinating `group` (SIGKILL on kafka-native; on the reference its
    memory is lost and the group is replayed from its records) and start it again."""
    node = cc.find_coordinator(group, 0)[1]
    cc.close()
    t.kill_node(node)
    t.restart_node(node)


def join_beat(cc: ClusterClient, group: str, topic: str) -> Any:
    """A new member's first heartbeat (epoch 0), answered without error; the coordinator may
    still be restarting or loading."""
    try:
        coord = cc.coordinator_for(group, 0, wait_s=FAILOVER_WAIT_S)
        resp = share.heartbeat(coord, group, share.new_member_id(), 0, [topic])
    except (OSError, ConnectionError, EOFError, RuntimeError, LookupError) as exc:
        raise AssertionError(f"join of {group}: {exc!r}") from exc
    assert resp.error_code == E.none, resp
    return resp


@pytest.mark.deadline(900)
@pytest.mark.requirement("KIP-932.GROUP.008", "KIP-932.EPOCH.007", "KIP-932.GREC.001")
def test_group_coordinator_crash_keeps_members_and_epochs(target, unique, request):
    """The group coordinator crashes while two members heartbeat: the new coordinator lists
    the same members with the same assignments, the group and assignment epochs and the
    member epochs do not go back (EPOCH.007), and the members keep heartbeating without
    rejoining (GROUP.008). KIP "Persistence and fail-over" says the new coordinator "will
    bump the group epoch as a result"; Kafka's GroupMetadataManager replays
    ShareGroupMetadata as it is and bumps nothing (DIV-93206): the side is recorded, both
    pass. Then the members leave, the group is deleted and its coordinator crashes again: a
    new member's first heartbeat answers the epoch a never-used group id starts at, so the
    replayed tombstones left no trace (GREC.001)."""
    t = three_node_target(target)
    require_describe(t)
    if t.kind == "librdkafka-mock":  # targets/librdkafka_mock.py: kill_node moves no coordinator
        raise NotSupportedByTarget("the mock does not move a group coordinator away from a down broker")
    with share_setup(t, unique, partitions=2, join=False) as s:
        epochs = beat_until_stable(s.cc, s, dict(share.join_share_group(s.cc, s.group, [s.topic]) for _ in range(2)))
        d = describe_group(s.cc, s.group)
        before = members_of(d)
        group_epoch, assignment_epoch = int(d.group_epoch), int(d.assignment_epoch)
        beats = Heartbeats(t, s.group, epochs)
        beats.start()
        try:
            crash_coordinator(t, s.cc, s.group)
            after = fresh(t, s)
            describe_group(after.cc, s.group)  # the coordinator answers again
            beats.wait_beats(2)
        finally:
            epochs = beats.stop()
    try:
        record(request, "heartbeats_through_crash", beats.report())
        assert not beats.errors, f"heartbeats through the crash were refused: {beats.report()}"
        d = describe_group(after.cc, s.group)
        record(request, "group_epoch_before_after", (group_epoch, int(d.group_epoch)))
        record_side(request, "failover-group-epoch", "kafka" if d.group_epoch == group_epoch else "kip")
        now = members_of(d)  # KIP-932.GROUP.008: same members and assignments, no rejoin
        assert {m: ps for m, (_, ps) in now.items()} == {m: ps for m, (_, ps) in before.items()}, \
            f"members/assignments changed across the crash: {before} -> {now}"
        assert all(now[m][0] >= e for m, (e, _) in before.items()), f"member epochs went back: {before} -> {now}"
        assert int(d.group_epoch) >= group_epoch and int(d.assignment_epoch) >= assignment_epoch, \
            f"KIP-932.EPOCH.007: an epoch went back across the crash ({group_epoch}, {assignment_epoch}): {d}"
        coord = after.cc.coordinator_for(s.group, 0, wait_s=FAILOVER_WAIT_S)
        for m, e in epochs.items():
            resp = share.heartbeat(coord, s.group, m, e)
            assert resp.error_code == E.none, f"member {m} (epoch {e}) after the crash: {resp}"
            assert int(resp.member_epoch) >= e, resp
        for m in epochs:
            assert share.heartbeat(coord, s.group, m, -1).error_code == E.none
        assert delete_groups(coord, s.group) == E.none
        crash_coordinator(t, after.cc, s.group)  # KIP-932.GREC.001: the new one replays the tombstones
    finally:
        after.cc.close()
    with t.cluster_client() as cc:
        first = eventually(lambda: join_beat(cc, s.group, s.topic), FAILOVER_WAIT_S)
        control = eventually(lambda: join_beat(cc, unique.group(), s.topic), FAILOVER_WAIT_S)
    record(request, "first_member_epoch_deleted_vs_new_group", (int(first.member_epoch), int(control.member_epoch)))
    # A group id never used starts at 1 on the reference and at 2 on Kafka 4.4 (its first
    # heartbeat answers 2); a replayed group would continue above its old epoch.
    assert first.member_epoch == control.member_epoch, \
        f"after DeleteGroups and a coordinator crash a new member joined at epoch {first.member_epoch}, a never-" \
        f"used group starts at {control.member_epoch} (the deleted one was at {group_epoch}): the deleted group left a trace"
