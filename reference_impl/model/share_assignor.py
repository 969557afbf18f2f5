"""SimpleAssignor for share groups (KIP-932), pure and deterministic.

Two algorithms are available:

* ``ALGORITHM_KAFKA`` (the default) follows Kafka 4.1+'s simple assignor (the
  homogeneous and heterogeneous "simple assignment builders"): balance first, then
  stickiness. Every partition gets ``ceil(members / partitions)`` members (its
  *desired sharing*); each member gets a desired number of partitions that differs
  by at most one between members. Starting from the current target assignment it

  1. drops partitions of topics the member (or, homogeneous: the group) no longer
     subscribes to,
  2. revokes partitions from members holding more than their desired count,
  3. revokes members from partitions shared by more than the desired sharing,
  4. hands the partitions still short of members to the members still short of
     partitions, round-robin.

  Heterogeneous subscriptions are balanced topic by topic.

* ``ALGORITHM_KIP`` is the algorithm of the KIP-932 text: (1) each member is hashed
  onto one of its subscribed partitions; (2) partitions left without a hashed member
  and without a current member are given members round-robin; (3) on a partition that
  hashing covers, only the hashed members stay (round-robin members of the current
  assignment are removed), while on a partition hashing does not cover the current
  members stay. It reproduces the KIP's worked assignment table when member "hash n"
  denotes slot n-1 (see the unit tests).

Determinism: Kafka iterates Java hash maps and sets, so which member gets which
partition is not specified. Here members are taken in the order given (the group's
join order), topics in the order of ``partition_counts`` and partitions and member
indices ascending. The invariants (coverage, sharing, balance, stickiness) are Kafka's;
exact placements may differ from a real broker.

Topic identifiers are opaque hashables (the coordinator passes topic ids).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Hashable, Mapping

from reference_impl.model.java_hash import java_string_hash

ALGORITHM_KAFKA = "kafka"
ALGORITHM_KIP = "kip"
SIMPLE_ASSIGNOR_NAME = "simple"

TopicKey = Hashable
# member id -> topic -> partitions
GroupAssignment = dict[str, dict[TopicKey, frozenset[int]]]


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """One member as the assignor sees it: its subscribed topics and its current
    target assignment (topic -> partitions)."""

    subscribed_topics: frozenset = frozenset()
    assignment: Mapping[TopicKey, frozenset[int]] = field(default_factory=dict)


class PartitionAssignorError(Exception):
    """A member subscribes to a topic missing from the metadata (Kafka's
    PartitionAssignorException)."""


def java_hash_slot(member_id: str, size: int) -> int:
    """Math.abs(memberId.hashCode() % size) as Kafka's early SimpleAssignor computed it."""
    return abs(java_string_hash(member_id)) % size


class SimpleAssignor:
    name = SIMPLE_ASSIGNOR_NAME

    def __init__(
        self,
        algorithm: str = ALGORITHM_KAFKA,
        *,
        member_slot: Callable[[str, int], int] | None = None,
    ) -> None:
        if algorithm not in (ALGORITHM_KAFKA, ALGORITHM_KIP):
            raise ValueError(f"unknown simple assignor algorithm {algorithm!r}")
        self.algorithm = algorithm
        # KIP algorithm only: member id, number of candidate partitions -> slot index.
        self.member_slot = member_slot or java_hash_slot

    def assign(
        self,
        members: Mapping[str, MemberSpec],
        partition_counts: Mapping[TopicKey, int],
        assignable: Callable[[TopicKey, int], bool] | None = None,
    ) -> GroupAssignment:
        """The new target assignment of every member (members without partitions map to {}).

        `partition_counts` lists the topics that exist (topic -> number of partitions);
        `assignable(topic, partition)` restricts which partitions may be handed out (Kafka
        only assigns share-partitions whose state is initialised)."""
        if not members:
            return {}
        is_assignable = assignable or (lambda _t, _p: True)
        for spec in members.values():
            for topic in spec.subscribed_topics:
                if topic not in partition_counts:
                    raise PartitionAssignorError(
                        f"Members are subscribed to topic {topic} which doesn't exist in the topic metadata."
                    )
        if self.algorithm == ALGORITHM_KIP:
            result = _assign_kip(members, partition_counts, is_assignable, self.member_slot)
        elif _is_homogeneous(members):
            result = _HomogeneousBuilder(members, partition_counts, is_assignable).build()
        else:
            result = _HeterogeneousBuilder(members, partition_counts, is_assignable).build()
        return {m: _freeze(result.get(m, {})) for m in members}


# -- helpers ---------------------------------------------------------------------------


def _is_homogeneous(members: Mapping[str, MemberSpec]) -> bool:
    subs = {spec.subscribed_topics for spec in members.values()}
    return len(subs) == 1


def _freeze(assignment: Mapping[TopicKey, set[int] | frozenset[int]]) -> dict[TopicKey, frozenset[int]]:
    return {t: frozenset(ps) for t, ps in assignment.items() if ps}


def _copy(assignment: Mapping[TopicKey, frozenset[int] | set[int]]) -> dict[TopicKey, set[int]]:
    return {t: set(ps) for t, ps in assignment.items()}


def _topic_order(partition_counts: Mapping[TopicKey, int]) -> dict[TopicKey, int]:
    return {t: i for i, t in enumerate(partition_counts)}


def _desired_counts(desired_sharing: int, num_partitions: int, num_members: int) -> list[int]:
    """Per-member desired partition counts, in Kafka's double arithmetic."""
    if num_members == 0:
        return []
    precise = (desired_sharing * num_partitions) / float(num_members)
    return [math.ceil(precise * (i + 1)) - math.ceil(precise * i) for i in range(num_members)]


class _UnfilledIterator:
    """A restartable iterator over an ascending set that supports removing the current
    element (Java's HashSet<Integer>.iterator() with remove(), for small ints)."""

    def __init__(self, items: set[int]) -> None:
        self.items = sorted(items)
        self.pos = 0

    def has_next(self) -> bool:
        return self.pos < len(self.items)

    def next(self) -> int:
        value = self.items[self.pos]
        self.pos += 1
        return value

    def remove_current(self) -> None:
        self.pos -= 1
        del self.items[self.pos]

    def restart(self) -> None:
        self.pos = 0

    def __bool__(self) -> bool:
        return bool(self.items)


# -- Kafka 4.1+: homogeneous -------------------------------------------------------------


class _HomogeneousBuilder:
    def __init__(self, members, partition_counts, assignable) -> None:
        self.member_ids = list(members)
        first = members[self.member_ids[0]]
        self.topic_rank = _topic_order(partition_counts)
        self.subscribed = [t for t in partition_counts if t in first.subscribed_topics]
        self.target = [
            (t, p) for t in self.subscribed for p in range(partition_counts[t]) if assignable(t, p)
        ]
        n_members, n_parts = len(self.member_ids), len(self.target)
        self.desired_sharing = 0 if n_parts == 0 else (n_members + n_parts - 1) // n_parts
        self.desired = _desired_counts(self.desired_sharing, n_parts, n_members)
        self.old = {i: members[m].assignment for i, m in enumerate(self.member_ids)}
        self.new: dict[int, dict[TopicKey, set[int]]] = {}
        self.by_partition: dict[tuple, set[int]] = {}
        self.by_member: dict[int, set[tuple]] = {}
        self.unfilled: set[int] = set()
        self.overfilled: set[int] = set()

    def _key(self, tp):
        return (self.topic_rank.get(tp[0], len(self.topic_rank)), tp[1])

    def _ordered_partitions(self):
        return sorted(self.by_partition, key=self._key)

    def _new_for(self, i: int) -> dict[TopicKey, set[int]]:
        if i not in self.new:
            self.new[i] = _copy(self.old[i])
        return self.new[i]

    def build(self) -> GroupAssignment:
        if not self.subscribed:
            return {}
        self._revoke_unassignable()
        self._revoke_overfilled()
        self._revoke_overshared()
        for tp in self.target:
            self.by_partition.setdefault(tp, set())
        self._assign_remaining()
        return {
            m: (self.new[i] if i in self.new else _copy(self.old[i])) for i, m in enumerate(self.member_ids)
        }

    def _revoke_unassignable(self) -> None:
        subscribed = set(self.subscribed)
        for i in range(len(self.member_ids)):
            old = self.old[i]
            count = 0
            for topic in sorted(old, key=lambda t: self.topic_rank.get(t, len(self.topic_rank))):
                if topic in subscribed:
                    for p in sorted(old[topic]):
                        count += 1
                        self.by_partition.setdefault((topic, p), set()).add(i)
                        self.by_member.setdefault(i, set()).add((topic, p))
                        if count >= self.desired[i]:
                            self._new_for(i)
                else:
                    self._new_for(i).pop(topic, None)
            if count < self.desired[i]:
                self.unfilled.add(i)
            elif count > self.desired[i]:
                self.overfilled.add(i)

    def _revoke_overfilled(self) -> None:
        for i in sorted(self.overfilled):
            mine = self.by_member[i]
            if len(mine) <= self.desired[i]:
                continue
            for tp in sorted(mine, key=self._key):
                self.new[i][tp[0]].discard(tp[1])
                self.by_partition[tp].discard(i)
                mine.discard(tp)
                if len(mine) == self.desired[i]:
                    break

    def _revoke_overshared(self) -> None:
        for tp in self._ordered_partitions():
            assigned = self.by_partition[tp]
            count = len(assigned)
            if count <= self.desired_sharing:
                continue
            for i in sorted(assigned):
                partitions = self._new_for(i).get(tp[0])
                if partitions is not None and tp[1] in partitions:
                    partitions.discard(tp[1])
                    count -= 1
                    assigned.discard(i)
                    self.by_member[i].discard(tp)
                    self.unfilled.add(i)
                if count <= self.desired_sharing:
                    break

    def _assign_remaining(self) -> None:
        if not self.unfilled:
            return
        it = _UnfilledIterator(self.unfilled)
        assigned_this_round = False
        for tp in self._ordered_partitions():
            assigned = self.by_partition[tp]
            to_make = self.desired_sharing - len(assigned)
            while to_make > 0:
                if not it.has_next():
                    if not assigned_this_round:
                        break
                    it.restart()
                    assigned_this_round = False
                    if not it.has_next():
                        break
                i = it.next()
                if i not in assigned:
                    self._new_for(i).setdefault(tp[0], set()).add(tp[1])
                    self.by_member.setdefault(i, set()).add(tp)
                    to_make -= 1
                    assigned_this_round = True
                    if len(self.by_member[i]) >= self.desired[i]:
                        it.remove_current()
            if not it:
                break


# -- Kafka 4.1+: heterogeneous, topic by topic ---------------------------------------------


class _HeterogeneousBuilder:
    def __init__(self, members, partition_counts, assignable) -> None:
        self.member_ids = list(members)
        union = set().union(*(spec.subscribed_topics for spec in members.values()))
        self.topics = [t for t in partition_counts if t in union]
        self.partition_counts = partition_counts
        self.assignable = assignable
        self.subscribers = {
            t: [i for i, m in enumerate(self.member_ids) if t in members[m].subscribed_topics] for t in self.topics
        }
        self.old = {i: members[m].assignment for i, m in enumerate(self.member_ids)}
        self.new: dict[int, dict[TopicKey, set[int]]] = {}

    def _new_for(self, i: int) -> dict[TopicKey, set[int]]:
        if i not in self.new:
            self.new[i] = _copy(self.old[i])
        return self.new[i]

    def build(self) -> GroupAssignment:
        if not self.topics:
            return {}
        union = set(self.topics)
        for i, old in self.old.items():  # topics nobody subscribes to any more
            if any(t not in union for t in old):
                for t in [t for t in old if t not in union]:
                    self._new_for(i).pop(t, None)
        for topic in self.topics:
            self._build_topic(topic)
        return {m: (self.new[i] if i in self.new else _copy(self.old[i])) for i, m in enumerate(self.member_ids)}

    def _build_topic(self, topic) -> None:
        target = [p for p in range(self.partition_counts[topic]) if self.assignable(topic, p)]
        subscribers = self.subscribers[topic]
        n_parts, n_subs = len(target), len(subscribers)
        sharing = 0 if n_parts == 0 else (n_subs + n_parts - 1) // n_parts
        desired = [0] * len(self.member_ids)
        for k, c in enumerate(_desired_counts(sharing, n_parts, n_subs)):
            desired[subscribers[k]] = c
        by_partition: dict[int, set[int]] = {}
        by_member: dict[int, set[int]] = {}

        # 1. the current assignment of this topic
        for i in range(len(self.member_ids)):
            for p in sorted(self.old[i].get(topic, ())):
                by_partition.setdefault(p, set()).add(i)
                by_member.setdefault(i, set()).add(p)
        # 2. overfilled members (including members no longer subscribed: desired 0)
        for i in sorted(by_member):
            mine = by_member[i]
            for p in sorted(mine):
                if len(mine) <= desired[i]:
                    break
                by_partition[p].discard(i)
                mine.discard(p)
                self._new_for(i)[topic].discard(p)
        # 3. over-shared partitions
        for p in sorted(by_partition):
            assigned = by_partition[p]
            count = len(assigned)
            if count <= sharing:
                continue
            for i in sorted(assigned):
                partitions = self._new_for(i).get(topic)
                if partitions is not None and p in partitions:
                    partitions.discard(p)
                    count -= 1
                    assigned.discard(i)
                    by_member[i].discard(p)
                if count <= sharing:
                    break
        for p in target:
            by_partition.setdefault(p, set())
        # 4. hand out what is missing
        unfilled = {i for i in subscribers if len(by_member.get(i, ())) < desired[i]}
        it = _UnfilledIterator(unfilled)
        assigned_this_round = False
        for p in sorted(by_partition):
            assigned = by_partition[p]
            to_make = sharing - len(assigned)
            while to_make > 0:
                if not it.has_next():
                    if not assigned_this_round:
                        break
                    it.restart()
                    assigned_this_round = False
                    if not it.has_next():
                        break
                i = it.next()
                if i not in assigned:
                    self._new_for(i).setdefault(topic, set()).add(p)
                    by_member.setdefault(i, set()).add(p)
                    to_make -= 1
                    assigned_this_round = True
                    if len(by_member[i]) >= desired[i]:
                        it.remove_current()
            if not it:
                break


# -- the KIP-932 text ---------------------------------------------------------------------


def _assign_kip(members, partition_counts, assignable, member_slot) -> GroupAssignment:
    topics = list(partition_counts)
    parts = {t: [p for p in range(partition_counts[t]) if assignable(t, p)] for t in topics}
    # (1) hash every member onto one of the partitions it subscribes to
    hashed: dict[tuple, list[str]] = {}
    for m, spec in members.items():
        candidates = [(t, p) for t in topics if t in spec.subscribed_topics for p in parts[t]]
        if candidates:
            hashed.setdefault(candidates[member_slot(m, len(candidates))], []).append(m)
    # current members of each partition (still in the group and subscribed to its topic)
    current: dict[tuple, list[str]] = {}
    for m, spec in members.items():
        for t, ps in spec.assignment.items():
            if t in spec.subscribed_topics and t in parts:
                for p in sorted(ps):
                    if p in parts[t]:
                        current.setdefault((t, p), []).append(m)
    result: dict[str, dict[TopicKey, set[int]]] = {m: {} for m in members}
    for t in topics:
        subscribers = [m for m, spec in members.items() if t in spec.subscribed_topics]
        if not subscribers:
            continue
        rr = 0
        for p in parts[t]:
            tp = (t, p)
            if tp in hashed:  # (3) hashed members only
                owners = hashed[tp]
            elif tp in current:  # not covered by hashing: the current members stay
                owners = current[tp]
            else:  # (2) round-robin
                owners = [subscribers[rr % len(subscribers)]]
                rr += 1
            for m in owners:
                result[m].setdefault(t, set()).add(p)
    return result


def balance_report(assignment: Mapping[str, Mapping[TopicKey, frozenset[int]]]) -> dict[str, int]:
    """Helper for tests and reports: member -> number of assigned partitions."""
    return {m: sum(len(ps) for ps in a.values()) for m, a in assignment.items()}


__all__ = [
    "ALGORITHM_KAFKA",
    "ALGORITHM_KIP",
    "GroupAssignment",
    "MemberSpec",
    "PartitionAssignorError",
    "SIMPLE_ASSIGNOR_NAME",
    "SimpleAssignor",
    "balance_report",
    "java_hash_slot",
    "java_string_hash",
]

