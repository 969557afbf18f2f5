"""Server-side assignors of consumer groups (KIP-848): `uniform` (the default) and `range`.

Kafka 4.x's group.consumer.assignors lists both, the first is the default; a member may
name one in ConsumerGroupHeartbeat's ServerAssignor and the group uses the one most of its
members name (ConsumerGroup.preferredServerAssignor).

* `uniform` (Kafka's UniformAssignor): sticky and balanced. Every member keeps the target
  partitions it still subscribes to; free partitions go to the least loaded subscribed
  member; then partitions move from the most to the least loaded member (among those
  subscribed to them) until no move makes the spread smaller. The exact placement differs
  from Kafka's homogeneous/heterogeneous builders; what clients may rely on -- every
  subscribed partition has exactly one owner, counts differ by at most one where
  subscriptions allow, an unchanged group keeps its assignment -- holds.
* `range` (Kafka's RangeAssignor): per topic, its subscribers sorted by member id get
  contiguous ranges, the first `partitions % members` one partition more.

Pure functions over plain data; the result maps member id -> topic id -> partitions.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Callable, Mapping

TopicId = uuid.UUID
# topic id -> partitions
Assignment = Mapping[TopicId, frozenset[int]]

UNIFORM = "uniform"
RANGE = "range"


@dataclass(frozen=True, slots=True)
class AssignmentMember:
    """What an assignor knows of a member: the topics it subscribes to (resolved to ids)
    and its current target assignment (for stickiness)."""

    subscribed: frozenset[TopicId]
    current: Assignment


# member id -> member; topic id -> number of partitions
Assignor = Callable[[Mapping[str, AssignmentMember], Mapping[TopicId, int]], dict[str, dict[TopicId, frozenset[int]]]]


def _freeze(owned: dict[str, set[tuple[TopicId, int]]]) -> dict[str, dict[TopicId, frozenset[int]]]:
    out: dict[str, dict[TopicId, frozenset[int]]] = {}
    for member_id, partitions in owned.items():
        by_topic: dict[TopicId, set[int]] = {}
        for topic_id, partition in partitions:
            by_topic.setdefault(topic_id, set()).add(partition)
        out[member_id] = {t: frozenset(p) for t, p in by_topic.items()}
    return out


def uniform(members: Mapping[str, AssignmentMember], topics: Mapping[TopicId, int]) -> dict[str, dict[TopicId, frozenset[int]]]:
    """Sticky balanced assignment (see the module docstring)."""
    ids = sorted(members)
    owned: dict[str, set[tuple[TopicId, int]]] = {m: set() for m in ids}
    taken: set[tuple[TopicId, int]] = set()
    for member_id in ids:  # stickiness: keep what is still valid and subscribed
        member = members[member_id]
        for topic_id, partitions in member.current.items():
            if topic_id not in member.subscribed or topic_id not in topics:
                continue
            for p in partitions:
                tp = (topic_id, p)
                if p < topics[topic_id] and tp not in taken:
                    owned[member_id].add(tp)
                    taken.add(tp)

    def eligible(topic_id: TopicId) -> list[str]:
        return [m for m in ids if topic_id in members[m].subscribed]

    # Free partitions, topics with fewer subscribers first (they have fewer choices).
    free = sorted(
        ((t, p) for t, n in topics.items() for p in range(n) if (t, p) not in taken and eligible(t)),
        key=lambda tp: (len(eligible(tp[0])), str(tp[0]), tp[1]),
    )
    for tp in free:
        target = min(eligible(tp[0]), key=lambda m: (len(owned[m]), m))
        owned[target].add(tp)
    _balance(owned, eligible)
    return _freeze(owned)


def _balance(owned: dict[str, set[tuple[TopicId, int]]], eligible: Callable[[TopicId], list[str]]) -> None:
    """Move partitions from heavier to lighter members (sum of squared loads strictly drops,
    so this ends)."""
    moved = True
    while moved:
        moved = False
        for heavy in sorted(owned, key=lambda m: (-len(owned[m]), m)):
            for tp in sorted(owned[heavy], key=lambda tp: (str(tp[0]), tp[1]), reverse=True):
                lighter = [m for m in eligible(tp[0]) if len(owned[m]) + 1 < len(owned[heavy])]
                if lighter:
                    target = min(lighter, key=lambda m: (len(owned[m]), m))
                    owned[heavy].discard(tp)
                    owned[target].add(tp)
                    moved = True
                    break
            if moved:
                break


def range_(members: Mapping[str, AssignmentMember], topics: Mapping[TopicId, int]) -> dict[str, dict[TopicId, frozenset[int]]]:
    """Contiguous ranges per topic (see the module docstring)."""
    out: dict[str, dict[TopicId, frozenset[int]]] = {m: {} for m in members}
    for topic_id, count in topics.items():
        subscribers = sorted(m for m, spec in members.items() if topic_id in spec.subscribed)
        if not subscribers:
            continue
        quota, extra = divmod(count, len(subscribers))
        start = 0
        for i, member_id in enumerate(subscribers):
            size = quota + (1 if i < extra else 0)
            if size:
                out[member_id][topic_id] = frozenset(range(start, start + size))
            start += size
    return out


ASSIGNORS: dict[str, Assignor] = {UNIFORM: uniform, RANGE: range_}
DEFAULT_ASSIGNOR = UNIFORM
