"""The plugin's slow-first order: long tests start at once on separate xdist workers."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from conformance.plugin import slow_first


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


def test_slow_tests_lead_each_followed_by_one_other_test():
    items = [_item("a"), _item("b"), _item("s1", slow=True), _item("c"), _item("s2", slow=True), _item("d")]
    assert _names(slow_first(items)) == ["s1", "a", "s2", "b", "c", "d"]


def test_a_higher_rank_starts_first_and_equal_ranks_keep_collection_order():
    items = [_item("s1", slow=True), _item("a"), _item("s3", 3), _item("s2a", 2), _item("s2b", 2), _item("b")]
    assert _names(slow_first(items)) == ["s3", "a", "s2a", "b", "s2b", "s1"]


def test_without_slow_tests_the_order_is_unchanged():
    items = [_item(n) for n in "abc"]
    assert slow_first(items) is items


def test_every_item_is_kept_exactly_once():
    items = [_item(f"s{i}", slow=True) for i in range(5)] + [_item(f"f{i}") for i in range(2)]
    out = slow_first(items)
    assert sorted(_names(out)) == sorted(_names(items))
    assert _names(out)[:4] == ["s0", "f0", "s1", "f1"]
