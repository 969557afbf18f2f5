"""SimpleAssignor for share groups: the KIP-932 worked table, and Kafka 4.x's
balanced/sticky algorithm (the default). Backs KIP-932.ASSIGN.001-004."""

from __future__ import annotations

import itertools

import pytest

from reference_impl.model.share_assignor import (
    ALGORITHM_KAFKA,
    ALGORITHM_KIP,
    MemberSpec,
    PartitionAssignorError,
    SimpleAssignor,
    balance_report,
    java_hash_slot,
    java_string_hash,
)


def kip_slot(member_id: str, size: int) -> int:
    """The KIP table's "M<n> (hash n)": hash n lands on slot n-1 (T1:0 for M1 with 4 partitions)."""
    return (int(member_id[1:]) - 1) % size


def flat(assignment) -> dict[str, list[str]]:
    return {m: sorted(f"{t}:{p}" for t, ps in a.items() for p in ps) for m, a in assignment.items()}


class Table:
    """Replays the KIP's scenario, feeding each target assignment back as the current one."""

    def __init__(self, assignor: SimpleAssignor) -> None:
        self.assignor = assignor
        self.subs: dict[str, set[str]] = {}
        self.counts: dict[str, int] = {"T1": 1}
        self.current: dict = {}

    def step(self) -> dict[str, list[str]]:
        members = {m: MemberSpec(frozenset(s), self.current.get(m, {})) for m, s in self.subs.items()}
        self.current = self.assignor.assign(members, self.counts)
        return flat(self.current)

    def run(self) -> list[dict[str, list[str]]]:
        out = []
        self.subs["M1"] = {"T1"}
        out.append(self.step())
        self.subs["M2"] = {"T1"}
        out.append(self.step())
        self.counts["T1"] = 4
        out.append(self.step())
        self.subs["M3"] = {"T1"}
        out.append(self.step())
        self.subs["M4"] = {"T1"}
        out.append(self.step())
        for m in ("M5", "M6", "M7", "M8"):
            self.subs[m] = {"T1"}
        out.append(self.step())
        self.counts["T2"] = 2
        self.subs["M1"] = {"T1", "T2"}
        out.append(self.step())
        for m in [m for m in self.subs if m != "M2"]:
            del self.subs[m]
        out.append(self.step())
        return out


# The "Assignments" column of the KIP's table, row by row.
KIP_TABLE = [
    {"M1": ["T1:0"]},
    {"M1": ["T1:0"], "M2": ["T1:0"]},
    {"M1": ["T1:0", "T1:2"], "M2": ["T1:1", "T1:3"]},
    {"M1": ["T1:0"], "M2": ["T1:1", "T1:3"], "M3": ["T1:2"]},
    {"M1": ["T1:0"], "M2": ["T1:1"], "M3": ["T1:2"], "M4": ["T1:3"]},
    {"M1": ["T1:0"], "M2": ["T1:1"], "M3": ["T1:2"], "M4": ["T1:3"],
     "M5": ["T1:0"], "M6": ["T1:1"], "M7": ["T1:2"], "M8": ["T1:3"]},
    {"M1": ["T1:0", "T2:0", "T2:1"], "M2": ["T1:1"], "M3": ["T1:2"], "M4": ["T1:3"],
     "M5": ["T1:0"], "M6": ["T1:1"], "M7": ["T1:2"], "M8": ["T1:3"]},
    {"M2": ["T1:0", "T1:1", "T1:2", "T1:3"]},
]

# What Kafka 4.x's algorithm gives for the same scenario (this model's deterministic order:
# members in join order, partitions ascending). Same coverage and balance, different
# placements from row 3 on: balance first, then stickiness, no hashing.
KAFKA_TABLE = [
    {"M1": ["T1:0"]},
    {"M1": ["T1:0"], "M2": ["T1:0"]},
    {"M1": ["T1:1", "T1:3"], "M2": ["T1:0", "T1:2"]},
    {"M1": ["T1:1", "T1:3"], "M2": ["T1:2"], "M3": ["T1:0"]},
    {"M1": ["T1:3"], "M2": ["T1:2"], "M3": ["T1:0"], "M4": ["T1:1"]},
    {"M1": ["T1:3"], "M2": ["T1:2"], "M3": ["T1:0"], "M4": ["T1:1"],
     "M5": ["T1:0"], "M6": ["T1:1"], "M7": ["T1:2"], "M8": ["T1:3"]},
    {"M1": ["T1:3", "T2:0", "T2:1"], "M2": ["T1:2"], "M3": ["T1:0"], "M4": ["T1:1"],
     "M5": ["T1:0"], "M6": ["T1:1"], "M7": ["T1:2"], "M8": ["T1:3"]},
    {"M2": ["T1:0", "T1:1", "T1:2", "T1:3"]},
]


def test_kip_algorithm_reproduces_the_kip_table_row_by_row():
    rows = Table(SimpleAssignor(ALGORITHM_KIP, member_slot=kip_slot)).run()
    for i, (got, want) in enumerate(zip(rows, KIP_TABLE), start=1):
        assert got == want, f"row {i}"


def test_kafka_algorithm_on_the_kip_table():
    rows = Table(SimpleAssignor()).run()
    for i, (got, want) in enumerate(zip(rows, KAFKA_TABLE), start=1):
        assert got == want, f"row {i}"
    # Divergence: row 3 (4 partitions appear) and rows 4/5 place differently from the KIP.
    assert rows[2] != KIP_TABLE[2] and rows[3] != KIP_TABLE[3]
    # ...but the properties the KIP states hold in both.
    for kip_row, kafka_row in zip(KIP_TABLE, rows):
        assert set(kip_row) == set(kafka_row)
        assert sorted(balance_report({m: {"x": frozenset(v)} for m, v in kip_row.items()}).values()) == sorted(
            balance_report({m: {"x": frozenset(v)} for m, v in kafka_row.items()}).values()
        )


def test_kafka_algorithm_moves_no_more_than_the_kip_when_members_join():
    # Row 4 -> 5 (M4 joins): each algorithm revokes exactly one partition from one member.
    for algorithm, table in ((ALGORITHM_KIP, KIP_TABLE), (ALGORITHM_KAFKA, KAFKA_TABLE)):
        before, after = table[3], table[4]
        revoked = sum(len(set(before[m]) - set(after.get(m, []))) for m in before)
        assert revoked == 1, algorithm


def _assign(members: int, partitions: int, algorithm=ALGORITHM_KAFKA, current=None):
    specs = {f"m{i}": MemberSpec(frozenset({"t"}), (current or {}).get(f"m{i}", {})) for i in range(members)}
    return SimpleAssignor(algorithm).assign(specs, {"t": partitions})


@pytest.mark.parametrize("members,partitions", list(itertools.product([1, 2, 3, 4, 5, 7, 8, 9], [1, 2, 3, 4, 6, 8])))
def test_kafka_balance_and_coverage(members, partitions):
    a = _assign(members, partitions)
    by_partition = {p: [m for m in a if p in a[m].get("t", ())] for p in range(partitions)}
    # ASSIGN.001: every partition has a member; ASSIGN.002: nobody idle when members > partitions
    assert all(by_partition.values())
    assert all(a[m] for m in a)
    sharing = -(-members // partitions)
    assert all(len(v) <= sharing for v in by_partition.values())
    counts = balance_report(a).values()
    assert max(counts) - min(counts) <= 1  # ASSIGN.003 (Kafka's balance goal)


def test_eight_members_four_partitions_two_each():
    a = _assign(8, 4)
    assert all(len(a[m]["t"]) == 1 for m in a)
    assert all(sum(p in a[m]["t"] for m in a) == 2 for p in range(4))


def test_kafka_is_sticky_across_a_join():
    first = _assign(3, 6)
    second = _assign(4, 6, current=first)
    moved = sum(len(first[m]["t"] - second[m].get("t", frozenset())) for m in first)
    assert moved == 1  # 6 partitions over 4 members: only one partition changes hands
    counts = balance_report(second).values()
    assert max(counts) - min(counts) <= 1


def test_single_remaining_member_gets_everything_both_algorithms():
    # ASSIGN.004
    for algorithm in (ALGORITHM_KAFKA, ALGORITHM_KIP):
        before = _assign(4, 4, algorithm)
        survivor = {"m0": MemberSpec(frozenset({"t"}), before["m0"])}
        after = SimpleAssignor(algorithm).assign(survivor, {"t": 4})
        assert after["m0"]["t"] == frozenset(range(4)), algorithm


def test_unsubscribed_topic_is_revoked_homogeneous_and_heterogeneous():
    a = SimpleAssignor()
    cur = {"m0": {"t": frozenset({0, 1}), "u": frozenset({0})}}
    out = a.assign({"m0": MemberSpec(frozenset({"t"}), cur["m0"])}, {"t": 2, "u": 1})
    assert out["m0"] == {"t": frozenset({0, 1})}
    cur = {"m0": {"t": frozenset({0}), "u": frozenset({0})}, "m1": {"t": frozenset({1})}}
    out = a.assign(
        {"m0": MemberSpec(frozenset({"t"}), cur["m0"]), "m1": MemberSpec(frozenset({"t", "u"}), cur["m1"])},
        {"t": 2, "u": 1},
    )
    assert "u" not in out["m0"] and out["m1"]["u"] == frozenset({0})
    assert out["m0"]["t"] | out["m1"]["t"] == frozenset({0, 1})


def test_heterogeneous_balances_topic_by_topic():
    specs = {
        "a": MemberSpec(frozenset({"t1"})),
        "b": MemberSpec(frozenset({"t2"})),
        "c": MemberSpec(frozenset({"t1", "t2"})),
    }
    out = SimpleAssignor().assign(specs, {"t1": 4, "t2": 4})
    assert len(out["a"]["t1"]) == 2 and len(out["c"]["t1"]) == 2
    assert len(out["b"]["t2"]) == 2 and len(out["c"]["t2"]) == 2
    assert out["a"]["t1"] | out["c"]["t1"] == frozenset(range(4))


def test_only_assignable_partitions_are_handed_out():
    out = SimpleAssignor().assign({"m": MemberSpec(frozenset({"t"}))}, {"t": 4}, lambda t, p: p % 2 == 0)
    assert out["m"]["t"] == frozenset({0, 2})
    out = SimpleAssignor().assign({"m": MemberSpec(frozenset({"t"}))}, {"t": 4}, lambda t, p: False)
    assert out["m"] == {}


def test_members_without_subscription_and_empty_group():
    assert SimpleAssignor().assign({}, {"t": 1}) == {}
    assert SimpleAssignor().assign({"m": MemberSpec()}, {"t": 1}) == {"m": {}}


def test_subscription_to_missing_topic_is_an_assignor_error():
    with pytest.raises(PartitionAssignorError):
        SimpleAssignor().assign({"m": MemberSpec(frozenset({"nope"}))}, {"t": 1})


def test_java_hash_slot_matches_java_semantics():
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE
    assert java_hash_slot("polygenelubricants", 7) == 2  # Math.abs(MIN_VALUE % 7) == 2
    assert 0 <= java_hash_slot("member-x", 3) < 3


def test_unknown_algorithm_rejected():
    with pytest.raises(ValueError):
        SimpleAssignor("round-robin")
