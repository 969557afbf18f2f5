"""The plugin's order for long tests: spread over the first half of the run, never its tail."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from conformance.collection import spread_slow


@dataclass
class FakeItem:
    """Just enough of a pytest.Item for the ordering: a name and its `slow` marker."""

    name: str
    marks: dict[str, pytest.Mark] = field(default_factory=dict)

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return self.marks.get(name)


def _item(name: str, *slow_args: float, slow: bool = False) -> FakeItem:
    marks = {"slow": pytest.mark.slow(*slow_args).mark} if slow or slow_args else {}
    return FakeItem(name, marks)


def _names(items) -> list[str]:
    return [i.name for i in items]


def test_slow_tests_are_spread_over_the_first_half():
    fast = [_item(f"f{i}") for i in range(8)]
    items = fast[:3] + [_item("s1", slow=True)] + fast[3:] + [_item("s2", slow=True)]
    # 8 others, 2 slow: a gap of 8 // (2 * 2) = 2 others after each slow test
    assert _names(spread_slow(items)) == ["s1", "f0", "f1", "s2", "f2", "f3", "f4", "f5", "f6", "f7"]


def test_a_higher_rank_starts_first_and_equal_ranks_keep_collection_order():
    items = [_item("s1", slow=True), _item("a"), _item("s3", 3), _item("s2a", 2), _item("s2b", 2), _item("b")]
    assert _names(spread_slow(items)) == ["s3", "a", "s2a", "b", "s2b", "s1"]


def test_without_slow_tests_the_order_is_unchanged():
    items = [_item(n) for n in "abc"]
    assert spread_slow(items) is items


def test_every_item_is_kept_exactly_once():
    items = [_item(f"s{i}", slow=True) for i in range(5)] + [_item(f"f{i}") for i in range(23)]
    out = spread_slow(items)
    assert sorted(_names(out)) == sorted(_names(items))
    assert _names(out)[:6] == ["s0", "f0", "f1", "s1", "f2", "f3"]
    assert _names(out).index("s4") < len(items) // 2
