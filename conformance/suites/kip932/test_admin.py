"""KIP-932 share-group administration on the wire: ListGroups by type and state,
Describe/Alter/DeleteShareGroupOffsets (reset only for an empty group, in-flight state
discarded), DeleteGroups, the group-id namespace shared with classic groups, and group
configs (IncrementalAlterConfigs / DescribeConfigs on the GROUP resource: defaults, ranges).

Where Kafka and the KIP text (or the catalog's oracle) disagree the test accepts either side,
asserts the rest, and records the side the target follows as the property
``follows:<topic>`` (kip | kafka). Admin RPCs need the target to advertise them: librdkafka's
mock has none (not supported), Kafka 3.9 has no share groups at all.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from clients import confluent, wire
from clients.share import (
    ACCEPT, E, SHARE_GROUP_DESCRIBE, ShareSession, alter_group_configs, join_share_group, leave_share_group,
    nested, produce_values, require_share_groups, set_group_configs,
)
from conformance.suites import require_api
from targets.target import NotSupportedByTarget
from reference_impl.client.raw_client import ClusterClient, RawClient
from reference_impl.protocol.api_keys import ApiKey

LIST_GROUPS, DELETE_GROUPS, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = ApiKey.LIST_GROUPS, ApiKey.DELETE_GROUPS, ApiKey.DESCRIBE_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS
DESCRIBE_OFFSETS, ALTER_OFFSETS, DELETE_OFFSETS = ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, ApiKey.ALTER_SHARE_GROUP_OFFSETS, ApiKey.DELETE_SHARE_GROUP_OFFSETS
GROUP_RESOURCE = 32
DEFAULT_CONFIG, GROUP_CONFIG = 5, 8
NOT_A_SHARE_GROUP = "is not a share group"
EARLIEST = {"share.auto.offset.reset": "earliest"}


# -- helpers ----------------------------------------------------------------------------------


def require_admin(target: Any, *api_keys: int) -> None:
    require_share_groups(target)
    caps = target.capabilities()
    names = {LIST_GROUPS: "ListGroups", DELETE_GROUPS: "DeleteGroups", DESCRIBE_CONFIGS: "DescribeConfigs",
             INCREMENTAL_ALTER_CONFIGS: "IncrementalAlterConfigs", DESCRIBE_OFFSETS: "DescribeShareGroupOffsets",
             ALTER_OFFSETS: "AlterShareGroupOffsets", DELETE_OFFSETS: "DeleteShareGroupOffsets"}
    for key in api_keys:
        require_api(caps, key, None, names.get(key, f"api {key}"))


def coordinator(cc: ClusterClient, group: str) -> RawClient:
    return cc.coordinator_for(group, 0, wait_s=30)


def _retry(send):
    """A fresh Kafka answers COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR for a while."""
    deadline = time.monotonic() + 15
    while True:
        resp = send()
        codes = _error_codes(resp)
        if not codes & {E.coordinator_load_in_progress, E.coordinator_not_available} or time.monotonic() > deadline:
            return resp
        time.sleep(0.2)


def _error_codes(resp: Any) -> set[int]:
    codes = {int(getattr(resp, "error_code", 0))}
    for g in getattr(resp, "groups", ()) or ():
        codes.add(int(g.error_code))
    return codes


def describe_offsets(node: RawClient, group: str, topics: list[tuple[str, list[int]]] | None = None) -> Any:
    """DescribeShareGroupOffsets (highest version): the group's entry."""
    v = node.negotiate(DESCRIBE_OFFSETS)
    ts = None if topics is None else tuple(
        nested(DESCRIBE_OFFSETS, v, "DescribeShareGroupOffsetsRequestTopic", topic_name=t, partitions=tuple(ps))
        for t, ps in topics)
    resp = _retry(lambda: node.request(DESCRIBE_OFFSETS, v, groups=(
        nested(DESCRIBE_OFFSETS, v, "DescribeShareGroupOffsetsRequestGroup", group_id=group, topics=ts),)))
    return resp.groups[0]


def start_offsets(group_entry: Any) -> dict[tuple[str, int], tuple[int, int, int]]:
    """(topic, partition) -> (start offset, error, lag or None before v1)."""
    return {(t.topic_name, int(p.partition_index)): (int(p.start_offset), int(p.error_code), getattr(p, "lag", None))
            for t in group_entry.topics for p in t.partitions}


def alter_offsets(node: RawClient, group: str, topics: list[tuple[str, list[tuple[int, int]]]]) -> Any:
    return _retry(lambda: node.request(ALTER_OFFSETS, 0, group_id=group, topics=tuple(
        nested(ALTER_OFFSETS, 0, "AlterShareGroupOffsetsRequestTopic", topic_name=t, partitions=tuple(
            nested(ALTER_OFFSETS, 0, "AlterShareGroupOffsetsRequestPartition", partition_index=p, start_offset=o)
            for p, o in ps))
        for t, ps in topics)))


def alter_results(resp: Any) -> dict[tuple[str, int], int]:
    return {(t.topic_name, int(p.partition_index)): int(p.error_code) for t in resp.responses for p in t.partitions}


def delete_offsets(node: RawClient, group: str, topics: list[str]) -> Any:
    return _retry(lambda: node.request(DELETE_OFFSETS, 0, group_id=group, topics=tuple(
        nested(DELETE_OFFSETS, 0, "DeleteShareGroupOffsetsRequestTopic", topic_name=t) for t in topics)))


def list_groups(node: RawClient, types: tuple[str, ...] = (), states: tuple[str, ...] = ()) -> dict[str, tuple[str, str]]:
    """ListGroups v5: group id -> (type, state)."""
    resp = node.request(LIST_GROUPS, 5, states_filter=states, types_filter=types)
    assert resp.error_code == E.none, resp
    return {g.group_id: (g.group_type, g.group_state) for g in resp.groups}


def delete_groups(node: RawClient, group: str) -> int:
    v = min(node.negotiate(DELETE_GROUPS), 2)
    return int(_retry(lambda: node.request(DELETE_GROUPS, v, groups_names=(group,))).results[0].error_code)


def describe_group_configs(cc: ClusterClient, group: str, synonyms: bool = True) -> dict[str, Any]:
    v = cc.bootstrap.negotiate(DESCRIBE_CONFIGS, 4)
    resp = cc.bootstrap.request(DESCRIBE_CONFIGS, v, resources=(
        nested(DESCRIBE_CONFIGS, v, "DescribeConfigsResource", resource_type=GROUP_RESOURCE, resource_name=group,
               configuration_keys=None),), include_synonyms=synonyms, include_documentation=False)
    result = resp.results[0]
    assert result.error_code == E.none, result
    return {c.name: c for c in result.configs}


def described_config(cc: ClusterClient, group: str, name: str, value: str, wait_s: float = 5.0) -> Any:
    """The group config `name` once the broker describes `value` (Kafka applies group configs
    through the metadata log, so a describe right after the alter may still show the old one)."""
    deadline = time.monotonic() + wait_s
    while True:
        config = describe_group_configs(cc, group)[name]
        if config.value == value or time.monotonic() > deadline:
            return config
        time.sleep(0.1)


def group_epoch(cc: ClusterClient, group: str) -> int | None:
    node = coordinator(cc, group)
    resp = node.request(SHARE_GROUP_DESCRIBE, 1, group_ids=(group,), include_authorized_operations=False)
    g = resp.groups[0]
    return int(g.group_epoch) if g.error_code == E.none else None


class Consumer:
    """One share member of `group` on `topic` partition 0, with its session on the leader."""

    def __init__(self, cc: ClusterClient, group: str, topic: str, tid: uuid.UUID) -> None:
        self.cc, self.group, self.topic, self.key = cc, group, topic, (tid, 0)
        self.member, _ = join_share_group(cc, group, [topic])
        self.session = ShareSession(cc.leader_for(topic, 0), group, self.member)

    def fetch_until(self, want: int, wait_s: float = 10.0) -> dict[int, int]:
        return self.session.fetch_until([self.key], want, wait_s=wait_s)

    def ack(self, first: int, last: int) -> None:
        resp = self.session.ack({self.key: [(first, last, [ACCEPT])]})
        assert resp.error_code == E.none and all(p.error_code == E.none for t in resp.responses for p in t.partitions), resp

    def leave(self) -> None:
        self.session.close()
        resp = leave_share_group(self.cc, self.group, self.member)
        assert resp.error_code == E.none, resp


def commit_classic(cc: ClusterClient, group: str, topic: str) -> None:
    """A classic group made by an offset commit (generation -1, no members)."""
    deadline = time.monotonic() + 15
    while (code := wire.offset_commit(coordinator(cc, group), group, topic, 0, 1)) != E.none:
        assert code in (E.coordinator_load_in_progress, E.not_coordinator) and time.monotonic() < deadline, E(code)
        time.sleep(0.2)


def _wait_leaders(cc: ClusterClient, topic: str, partitions: int, wait_s: float = 30.0) -> None:
    """Until the broker cc asks names a leader for every partition: with several brokers, one
    that did not answer CreateTopics learns of the topic from the controller a moment later
    (seen on testcontainers:nodes=3, Kafka 4.4.0: "no leader" 0.07 s after the create)."""
    deadline = time.monotonic() + wait_s
    for p in range(partitions):
        while True:
            try:
                cc.leader_for(topic, p)
                break
            except LookupError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def topic_with_records(target, cc: ClusterClient, topic: str, count: int, partitions: int = 1) -> uuid.UUID:
    confluent.create_topic(target, topic, partitions=partitions)
    _wait_leaders(cc, topic, partitions)
    produce_values(cc, topic, [b"r%d" % i for i in range(count)])
    return wire.topic_ids(cc, topic).topic_id


def wait_start_offset(node: RawClient, group: str, topic: str, want: int, wait_s: float = 10.0) -> tuple[int, int, Any]:
    """Poll DescribeShareGroupOffsets until partition 0's start offset is `want` (the
    share-partition leader writes its state asynchronously in Kafka)."""
    deadline = time.monotonic() + wait_s
    while True:
        got = start_offsets(describe_offsets(node, group, [(topic, [0])]))[(topic, 0)]
        if got[0] == want or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


# -- listing, types and the shared namespace --------------------------------------------------


@pytest.mark.requirement("KIP-932.ADMIN.001", "KIP-932.GROUP.001")
def test_list_groups_by_type_and_state(target, unique):
    """A Stable and an Empty share group and a classic group: TypesFilter ["share"] lists
    both share groups (type "share") and not the classic one; with StatesFilter ["Stable"]
    only the stable one; TypesFilter ["consumer"] lists neither share group."""
    require_admin(target, LIST_GROUPS)
    topic, stable, empty, classic = unique.topic(), unique.group(), unique.group(), unique.group()
    with wire.cluster_client(target) as cc:
        tid = topic_with_records(target, cc, topic, 1)
        Consumer(cc, stable, topic, tid)
        Consumer(cc, empty, topic, tid).leave()
        commit_classic(cc, classic, topic)
        nodes = [cc.node(n) for n in sorted(cc.nodes)]
        shares: dict[str, tuple[str, str]] = {}
        stable_only: dict[str, tuple[str, str]] = {}
        consumers: dict[str, tuple[str, str]] = {}
        for node in nodes:  # ListGroups answers for the groups the node coordinates
            shares.update(list_groups(node, ("share",)))
            stable_only.update(list_groups(node, ("share",), ("Stable",)))
            consumers.update(list_groups(node, ("consumer",)))
    assert shares.get(stable) == ("share", "Stable"), shares.get(stable)
    assert shares.get(empty) == ("share", "Empty"), shares.get(empty)
    assert classic not in shares
    assert stable in stable_only and empty not in stable_only
    assert all(state == "Stable" and kind == "share" for kind, state in stable_only.values()), stable_only
    assert stable not in consumers and empty not in consumers


@pytest.mark.requirement("KIP-932.GROUP.003", "KIP-932.ADMIN.009")
def test_offsets_admin_on_a_classic_group_id(target, unique, record_property):
    """Alter/DeleteShareGroupOffsets on a classic group id: GROUP_ID_NOT_FOUND ("... is not a
    share group"), nothing else answered. DescribeShareGroupOffsets: the catalog expects
    GROUP_ID_NOT_FOUND; Kafka 4.x describes it like any id without share state (start
    offset -1, no error). The side the target follows is recorded."""
    require_admin(target, DESCRIBE_OFFSETS, ALTER_OFFSETS, DELETE_OFFSETS)
    topic, classic = unique.topic(), unique.group()
    with wire.cluster_client(target) as cc:
        topic_with_records(target, cc, topic, 1)
        node = coordinator(cc, classic)
        commit_classic(cc, classic, topic)
        alter = alter_offsets(node, classic, [(topic, [(0, 0)])])
        delete = delete_offsets(node, classic, [topic])
        described = describe_offsets(node, classic, [(topic, [0])])
        described_all = describe_offsets(node, classic)
    for resp in (alter, delete):
        assert resp.error_code == E.group_id_not_found, resp
        assert NOT_A_SHARE_GROUP in (resp.error_message or ""), resp
        assert resp.responses == (), resp
    if described.error_code == E.group_id_not_found:
        record_property("follows:describe_offsets_classic_group", "kip")
    else:
        assert described.error_code == E.none, described
        assert start_offsets(described) == {(topic, 0): (-1, 0, start_offsets(described)[(topic, 0)][2])}, described
        assert described_all.error_code == E.none and described_all.topics == (), described_all
        record_property("follows:describe_offsets_classic_group", "kafka")


@pytest.mark.requirement("KIP-932.ADMIN.009")
def test_offsets_admin_on_an_unknown_group_and_a_non_coordinator(target, unique, record_property):
    """An unknown group id: the catalog expects GROUP_ID_NOT_FOUND from every offsets RPC.
    DeleteShareGroupOffsets and DeleteGroups answer it on both sides ("Group g not found.").
    Kafka 4.x describes an unknown group as one without state (start offset -1, no error)
    and AlterShareGroupOffsets creates an Empty share group with that start offset; the side
    each follows is recorded. With several brokers, a node that does not coordinate the
    group answers NOT_COORDINATOR to all three offsets RPCs."""
    require_admin(target, DESCRIBE_OFFSETS, ALTER_OFFSETS, DELETE_OFFSETS, DELETE_GROUPS)
    topic, g_desc, g_alter, g_del, g_dg = (unique.topic(), unique.group(), unique.group(), unique.group(), unique.group())
    with wire.cluster_client(target) as cc:
        topic_with_records(target, cc, topic, 3)
        described = describe_offsets(coordinator(cc, g_desc), g_desc, [(topic, [0])])
        described_all = describe_offsets(coordinator(cc, g_desc), g_desc)
        deleted = delete_offsets(coordinator(cc, g_del), g_del, [topic])
        altered = alter_offsets(coordinator(cc, g_alter), g_alter, [(topic, [(0, 2)])])
        after_alter = describe_offsets(coordinator(cc, g_alter), g_alter)
        listed = list_groups(coordinator(cc, g_alter), ("share",))
        deleted_group = delete_groups(coordinator(cc, g_dg), g_dg)
        coord_id = cc.find_coordinator(g_alter)[1]
        others = [n for n in sorted(cc.nodes) if n != coord_id]
        wrong = None
        if others:
            other = cc.node(others[0])
            wrong = [describe_offsets(other, g_alter).error_code,
                     alter_offsets(other, g_alter, [(topic, [(0, 1)])]).error_code,
                     delete_offsets(other, g_alter, [topic]).error_code]
    assert deleted_group == E.group_id_not_found
    assert (deleted.error_code, deleted.responses) == (E.group_id_not_found, ()), deleted
    assert wrong in (None, [E.not_coordinator] * 3), wrong
    if described.error_code == E.group_id_not_found:
        record_property("follows:describe_offsets_unknown_group", "kip")
    else:
        record_property("follows:describe_offsets_unknown_group", "kafka")
        assert start_offsets(described)[(topic, 0)][:2] == (-1, E.none), described
        # Kafka 4.4.0 answers the describe of all offsets of an unknown group with no topics,
        # or NOT_COORDINATOR on a __consumer_offsets partition nothing was written to yet.
        record_property("describe_all_unknown_group", f"{E(described_all.error_code).name} {len(described_all.topics)}")
        assert described_all.error_code in (E.none, E.not_coordinator) and described_all.topics == (), described_all
    if altered.error_code == E.group_id_not_found:
        record_property("follows:alter_offsets_unknown_group", "kip")
    else:
        record_property("follows:alter_offsets_unknown_group", "kafka")
        assert altered.error_code == E.none and alter_results(altered) == {(topic, 0): E.none}, altered
        assert start_offsets(after_alter)[(topic, 0)][:2] == (2, E.none), after_alter
        assert listed.get(g_alter) == ("share", "Empty"), listed.get(g_alter)


@pytest.mark.requirement("KIP-932.GROUP.002")
def test_share_group_id_refuses_classic_membership_and_deletion_is_by_type(target, unique):
    """A share group id taken: a classic OffsetCommit-created group cannot share the id
    with it (JoinGroup answers INCONSISTENT_GROUP_PROTOCOL); DeleteGroups of the share id
    with a member is NON_EMPTY_GROUP, the classic group next to it is unaffected."""
    require_admin(target, DELETE_GROUPS)
    topic, share, classic = unique.topic(), unique.group(), unique.group()
    with wire.cluster_client(target) as cc:
        tid = topic_with_records(target, cc, topic, 1)
        Consumer(cc, share, topic, tid)
        join = wire.join_group(coordinator(cc, share), share, topic=topic)
        assert join.error_code == E.inconsistent_group_protocol, join
        commit_classic(cc, classic, topic)
        assert delete_groups(coordinator(cc, share), share) == E.non_empty_group
        assert delete_groups(coordinator(cc, classic), classic) == E.none
        assert share in list_groups(coordinator(cc, share), ("share",))


# -- offsets ----------------------------------------------------------------------------------


@pytest.mark.requirement("KIP-932.ADMIN.004")
def test_describe_offsets_reports_the_start_offset_and_lag(target, unique, record_property):
    """Before any acknowledgement the start offset is -1 (state initialised, nothing
    written). After ACCEPT of 0..5 of 10 records the KIP expects start offset 6; Kafka 4.4.0
    keeps reporting the persisted start offset 0 (the accepted records are counted as
    delivered instead), so the lag (v1) is 4 either way. The side is recorded. The group's
    share-partitions are listed when no topics are named."""
    require_admin(target, DESCRIBE_OFFSETS)
    topic, group = unique.topic(), unique.group()
    with wire.cluster_client(target) as cc:
        tid = topic_with_records(target, cc, topic, 10)
        set_group_configs(cc, group, EARLIEST)
        c = Consumer(cc, group, topic, tid)
        node = coordinator(cc, group)
        before = start_offsets(describe_offsets(node, group, [(topic, [0])]))[(topic, 0)]
        assert c.fetch_until(10) == {o: 1 for o in range(10)}
        c.ack(0, 5)
        start, error, lag = wait_start_offset(node, group, topic, 6, wait_s=3)
        everything = start_offsets(describe_offsets(node, group))
    assert before[:2] == (-1, E.none), before
    assert error == E.none and start in (0, 6), (start, error)
    record_property("follows:describe_start_offset_after_ack", "kip" if start == 6 else "kafka")
    assert lag in (None, 4), lag
    assert everything.get((topic, 0), (None,))[0] == start, everything


@pytest.mark.requirement("KIP-932.ADMIN.005")
def test_alter_offsets_only_for_an_empty_group_and_discards_in_flight_state(target, unique, record_property):
    """With a member: NON_EMPTY_GROUP and nothing changes. After it leaves (its 10 records
    were delivered once, none acknowledged): altering p0 to 5 succeeds and describe shows 5.
    The in-flight state is discarded: a new member gets 5..9 with delivery count 1 (KIP).
    Kafka 4.4.0 discards it lazily: the share-partition leader still hands out its old
    in-memory state (0..9, count 2), the acknowledgement of those is refused with
    NOT_LEADER_OR_FOLLOWER (its state write is fenced by the new state epoch), and then 5..9
    come with count 1. The side is recorded."""
    require_admin(target, DESCRIBE_OFFSETS, ALTER_OFFSETS)
    topic, group = unique.topic(), unique.group()
    with wire.cluster_client(target) as cc:
        tid = topic_with_records(target, cc, topic, 10)
        set_group_configs(cc, group, EARLIEST)
        c = Consumer(cc, group, topic, tid)
        assert c.fetch_until(10) == {o: 1 for o in range(10)}
        node = coordinator(cc, group)
        busy = alter_offsets(node, group, [(topic, [(0, 5)])])
        assert busy.error_code == E.non_empty_group and busy.responses == (), busy
        epoch_before = group_epoch(cc, group)
        c.leave()
        done = alter_offsets(node, group, [(topic, [(0, 5)])])
        assert done.error_code == E.none and alter_results(done) == {(topic, 0): E.none}, done
        assert wait_start_offset(node, group, topic, 5)[:2] == (5, E.none)
        epoch_after = group_epoch(cc, group)
        again = Consumer(cc, group, topic, tid)
        got = again.fetch_until(5)
        stale = None
        if got != {o: 1 for o in range(5, 10)}:
            assert got == {o: 2 for o in range(10)}, got
            stale = again.session.ack({again.key: [(0, 9, [ACCEPT])]})
            got = again.fetch_until(5)
    record_property("group_epoch_before_after_alter", f"{epoch_before} -> {epoch_after}")
    record_property("follows:alter_offsets_discards_in_flight", "kip" if stale is None else "kafka")
    if stale is not None:
        codes = {int(p.error_code) for t in stale.responses for p in t.partitions}
        assert stale.error_code == E.none and codes == {E.not_leader_or_follower}, stale
    assert got == {o: 1 for o in range(5, 10)}, got


@pytest.mark.requirement("KIP-932.ADMIN.006")
def test_alter_offsets_answers_per_partition(target, unique):
    """One request for p0 (exists), p7 (does not) and a missing topic: p0 NONE and
    changed, the others UNKNOWN_TOPIC_OR_PARTITION; the missing topic has a null id."""
    require_admin(target, DESCRIBE_OFFSETS, ALTER_OFFSETS)
    topic, group, missing = unique.topic(), unique.group(), unique.topic()
    with wire.cluster_client(target) as cc:
        topic_with_records(target, cc, topic, 3)
        node = coordinator(cc, group)
        resp = alter_offsets(node, group, [(topic, [(0, 1), (7, 0)]), (missing, [(0, 0)])])
        described = start_offsets(describe_offsets(node, group, [(topic, [0])]))
    assert resp.error_code == E.none, resp
    assert alter_results(resp) == {(topic, 0): E.none, (topic, 7): E.unknown_topic_or_partition,
                                   (missing, 0): E.unknown_topic_or_partition}, resp
    assert {t.topic_name: t.topic_id for t in resp.responses}[missing] is None
    assert described[(topic, 0)][:2] == (1, E.none), described


@pytest.mark.requirement("KIP-932.ADMIN.007")
def test_delete_offsets_resets_to_the_reset_policy(target, unique):
    """With a member: NON_EMPTY_GROUP. Empty group with start offset 8: deleting the topic's
    offsets succeeds (a topic without state, or a missing one, is UNKNOWN_TOPIC_OR_PARTITION),
    the share-partition reads -1 again and a new member (earliest) gets 0..9 with count 1."""
    require_admin(target, DESCRIBE_OFFSETS, ALTER_OFFSETS, DELETE_OFFSETS)
    topic, other, group = unique.topic(), unique.topic(), unique.group()
    with wire.cluster_client(target) as cc:
        tid = topic_with_records(target, cc, topic, 10)
        confluent.create_topic(target, other)
        set_group_configs(cc, group, EARLIEST)
        c = Consumer(cc, group, topic, tid)
        node = coordinator(cc, group)
        busy = delete_offsets(node, group, [topic])
        assert busy.error_code == E.non_empty_group and busy.responses == (), busy
        c.leave()
        assert alter_offsets(node, group, [(topic, [(0, 8)])]).error_code == E.none
        resp = delete_offsets(node, group, [topic, other, unique.topic()])
        assert resp.error_code == E.none, resp
        errors = [(t.topic_name == topic, t.error_code) for t in resp.responses]
        assert sorted(errors) == [(False, E.unknown_topic_or_partition)] * 2 + [(True, E.none)], resp
        assert start_offsets(describe_offsets(node, group, [(topic, [0])]))[(topic, 0)][:2] == (-1, E.none)
        assert (topic, 0) not in start_offsets(describe_offsets(node, group))
        got = Consumer(cc, group, topic, tid).fetch_until(10)
    assert got == {o: 1 for o in range(10)}, got


@pytest.mark.requirement("KIP-932.ADMIN.008")
def test_delete_groups_needs_an_empty_group_and_deletes_its_state(target, unique, record_property):
    """DeleteGroups with a member: NON_EMPTY_GROUP. After it acknowledged 0..4 and left:
    success, the group is no longer listed and its durable share-partition state is gone
    (-1). A member of the re-created group (earliest) gets 0..9 again with count 1 (KIP:
    the group starts afresh); Kafka 4.4.0's share-partition leader still holds the deleted
    group's in-memory state and hands out 5..9 with count 2. The side is recorded."""
    require_admin(target, DESCRIBE_OFFSETS, DELETE_GROUPS, LIST_GROUPS)
    topic, group = unique.topic(), unique.group()
    with wire.cluster_client(target) as cc:
        tid = topic_with_records(target, cc, topic, 10)
        set_group_configs(cc, group, EARLIEST)
        c = Consumer(cc, group, topic, tid)
        node = coordinator(cc, group)
        assert c.fetch_until(10) == {o: 1 for o in range(10)}
        c.ack(0, 4)
        assert delete_groups(node, group) == E.non_empty_group
        c.leave()
        assert wait_start_offset(node, group, topic, 5)[0] == 5
        assert delete_groups(node, group) == E.none
        assert group not in list_groups(node, ("share",))
        assert start_offsets(describe_offsets(node, group, [(topic, [0])]))[(topic, 0)][:2] == (-1, E.none)
        kept = describe_group_configs(cc, group).get("share.auto.offset.reset") if target.capabilities().supports_api(DESCRIBE_CONFIGS) else None
        record_property("group_configs_after_delete", getattr(kept, "value", None))
        set_group_configs(cc, group, EARLIEST)
        got = Consumer(cc, group, topic, tid).fetch_until(10, wait_s=4)
    # Kafka's stale leader state: 5..9 released when the member left, so count 2 (4.4.0) or
    # 1 (4.1.2 takes back the delivery of records released by a closing session).
    fresh = {o: 1 for o in range(10)}
    assert got in (fresh, {o: 2 for o in range(5, 10)}, {o: 1 for o in range(5, 10)}), got
    record_property("follows:delete_group_drops_leader_state", "kip" if got == fresh else "kafka")


# -- group configs ----------------------------------------------------------------------------


def _millis(value: Any) -> int:
    return int(value.total_seconds() * 1000)


def _alter_code(cc: ClusterClient, group: str, name: str, value: str) -> tuple[int, str | None]:
    return alter_group_configs(cc, group, {name: value})


@pytest.mark.requirement("KIP-932.GCONFIG.001", "KIP-932.CONFIG.002")
def test_group_lock_duration_override_and_bounds(target, unique):
    """share.record.lock.duration.ms: default 30000 (from the broker's
    group.share.record.lock.duration.ms); 500 is below the broker minimum: INVALID_CONFIG;
    20000 is taken, described with source GROUP_CONFIG, and ShareFetch reports it as the
    acquisition lock timeout."""
    require_admin(target, INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CONFIGS)
    topic, group = unique.topic(), unique.group()
    with wire.cluster_client(target) as cc:
        tid = topic_with_records(target, cc, topic, 3)
        default = describe_group_configs(cc, group)["share.record.lock.duration.ms"]
        assert (default.value, default.config_source) == ("30000", DEFAULT_CONFIG), default
        # The synonym is the broker's group.share.record.lock.duration.ms on 4.4.0; 4.1.2 names
        # the group config itself.
        assert [(s.value, s.source) for s in default.synonyms] == [("30000", DEFAULT_CONFIG)], default
        code, _ = _alter_code(cc, group, "share.record.lock.duration.ms", "500")
        assert code == E.invalid_config
        set_group_configs(cc, group, {"share.record.lock.duration.ms": "20000", **EARLIEST})
        described = described_config(cc, group, "share.record.lock.duration.ms", "20000")
        assert (described.value, described.config_source) == ("20000", GROUP_CONFIG), described
        c = Consumer(cc, group, topic, tid)
        resp = c.session.fetch([c.key], max_wait_ms=2000)
    assert resp.error_code == E.none, resp
    assert resp.acquisition_lock_timeout.total_seconds() * 1000 == 20000, resp.acquisition_lock_timeout


@pytest.mark.requirement("KIP-932.GCONFIG.002", "KIP-932.CONFIG.005")
def test_group_heartbeat_and_session_overrides_and_bounds(target, unique):
    """Defaults 45000 / 5000 (and heartbeat responses carry 5000); share.heartbeat.interval.ms
    20000 (above the max 15000) and share.session.timeout.ms 30000 (below the min 45000) are
    INVALID_CONFIG; 8000 is taken and heartbeat responses carry it."""
    require_admin(target, INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CONFIGS)
    topic, group, plain = unique.topic(), unique.group(), unique.group()
    with wire.cluster_client(target) as cc:
        topic_with_records(target, cc, topic, 1)
        configs = describe_group_configs(cc, group)
        defaults = {n: configs[n].value for n in ("share.session.timeout.ms", "share.heartbeat.interval.ms")}
        assert defaults == {"share.session.timeout.ms": "45000", "share.heartbeat.interval.ms": "5000"}, defaults
        assert _alter_code(cc, group, "share.heartbeat.interval.ms", "20000")[0] == E.invalid_config
        assert _alter_code(cc, group, "share.session.timeout.ms", "30000")[0] == E.invalid_config
        assert _alter_code(cc, group, "share.session.timeout.ms", "60001")[0] == E.invalid_config
        set_group_configs(cc, group, {"share.heartbeat.interval.ms": "8000", "share.session.timeout.ms": "50000"})
        described_config(cc, group, "share.heartbeat.interval.ms", "8000")
        member, epoch = join_share_group(cc, group, [topic])
        beat = _retry(lambda: coordinator(cc, group).request(76, 1, group_id=group, member_id=member, member_epoch=epoch,
                                                             rack_id=None, subscribed_topic_names=None))
        plain_member, plain_epoch = join_share_group(cc, plain, [topic])
        plain_beat = coordinator(cc, plain).request(76, 1, group_id=plain, member_id=plain_member, member_epoch=plain_epoch,
                                                    rack_id=None, subscribed_topic_names=None)
    assert (beat.error_code, _millis(beat.heartbeat_interval)) == (E.none, 8000), beat
    assert (plain_beat.error_code, _millis(plain_beat.heartbeat_interval)) == (E.none, 5000), plain_beat


GROUP_CONFIG_RANGES = [
    # (name, default, refused values, accepted value); KIP-1240 (4.3+) for the last two.
    ("share.delivery.count.limit", "5", ("1", "11"), "3"),
    ("share.partition.max.record.locks", "2000", ("99", "not-a-number"), "500"),
]


@pytest.mark.requirement("KIP-932.CONFIG.001", "KIP-932.CONFIG.004")
@pytest.mark.parametrize("name,default,refused,accepted", GROUP_CONFIG_RANGES, ids=[r[0] for r in GROUP_CONFIG_RANGES])
def test_group_level_share_limits(target, unique, record_property, name, default, refused, accepted):
    """Group overrides of the delivery-count limit and the record-lock limit (Kafka 4.3+):
    described with the broker default (5; 2000 from Kafka 4.1 where the KIP says 200),
    out-of-range values INVALID_CONFIG, an in-range value taken."""
    require_admin(target, INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CONFIGS)
    group = unique.group()
    with wire.cluster_client(target) as cc:
        configs = describe_group_configs(cc, group)
        if name not in configs:
            raise NotSupportedByTarget(f"the target has no group config {name} (Kafka 4.3+, KIP-1240)")
        described = configs[name]
        codes = [_alter_code(cc, group, name, v)[0] for v in refused]
        set_group_configs(cc, group, {name: accepted})
        after = described_config(cc, group, name, accepted)
    record_property(f"default:{name}", described.value)
    assert (described.value, described.config_source) == (default, DEFAULT_CONFIG), described
    assert codes == [E.invalid_config] * len(refused), codes
    assert (after.value, after.config_source) == (accepted, GROUP_CONFIG), after


@pytest.mark.requirement("KIP-932.GCONFIG.001")
def test_unknown_group_config_names_and_the_kip_names_are_refused(target, unique, record_property):
    """The KIP text's group config names (group.share.*) are broker configs in Kafka: as
    group configs they are refused with INVALID_CONFIG, like an unknown name, and nothing of
    the request is stored; DescribeConfigs of an empty group name is INVALID_REQUEST."""
    require_admin(target, INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CONFIGS)
    group = unique.group()
    with wire.cluster_client(target) as cc:
        kip_name = alter_group_configs(cc, group, {"group.share.record.lock.duration.ms": "20000"})
        mixed = alter_group_configs(cc, group, {"share.record.lock.duration.ms": "20000", "no.such.config": "1"})
        after = describe_group_configs(cc, group)["share.record.lock.duration.ms"]
        v = cc.bootstrap.negotiate(DESCRIBE_CONFIGS, 4)
        empty = cc.bootstrap.request(DESCRIBE_CONFIGS, v, resources=(nested(
            DESCRIBE_CONFIGS, v, "DescribeConfigsResource", resource_type=GROUP_RESOURCE, resource_name="",
            configuration_keys=None),), include_synonyms=False, include_documentation=False).results[0]
    record_property("kip_name_answer", f"{kip_name[0]} {kip_name[1]}")
    assert kip_name[0] == E.invalid_config, kip_name
    assert mixed[0] == E.invalid_config, mixed
    assert after.config_source == DEFAULT_CONFIG, after
    assert empty.error_code == E.invalid_request, empty
