"""rules.share is the one place the KIP-932 share-partition rules live:
the chaos share-group checker and the trace checker (replay.entity_replay) both follow
an edit made there, and requirement ids come from one table."""

from __future__ import annotations

from checkers import share_group
from rules import share
from checkers.share_history import ShareHistoryBuilder
from replay import check_rules
from replay.entity_replay import CheckConfig, replay_share_group


def test_predicates():
    assert share.ack_name(1) == "accept" and share.ack_name("REJECT") == "reject"
    assert share.settles(3) and share.settles("gap") and not share.settles("release")
    assert not share.settles(99) and share.renews(4)
    assert share.delivery_count_problem(6, 5) == "above-limit"
    assert share.delivery_count_problem(2, 5, previous=3) == "decrease"
    assert share.delivery_count_problem(3, 5, previous=3) == "stall"
    assert share.delivery_count_problem(4, 5, previous=3) is None
    assert share.lock_surely_held(0, 999, 1000) and not share.lock_surely_held(0, 1000, 1000)
    assert share.lock_surely_expired(0, 1001, 1000) and not share.lock_surely_expired(0, 1000, 1000)
    assert share.spso_regressed(5, 4) and not share.spso_regressed(None, 4)


def _trace_events():
    """m1 acquires offset 0 and rejects it; m2 acquires it again."""
    base = {"topic_id": "t", "partition": 0, "t_req": 0, "t_resp": 1, "ok": True, "types": [], "count": 1}
    return [{**base, "seq": 1, "kind": "acq", "member": "m1", "first": 0, "last": 0},
            {**base, "seq": 2, "kind": "ack", "member": "m1", "first": 0, "last": 0, "types": [3]},
            {**base, "seq": 3, "kind": "acq", "member": "m2", "first": 0, "last": 0, "count": 2}]


def _history():
    b = ShareHistoryBuilder()
    b.fetch("m1", {"t-0": [(0, "v", 1)]})
    b.ack("m1", "t-0", [(0, "reject")])
    b.fetch("m2", {"t-0": [(0, "v", 2)]})
    return b.build()


def test_one_edit_changes_both_checkers(monkeypatch):
    trace_rules = lambda: {v[0] for v in replay_share_group("g", _trace_events(), CheckConfig())}  # noqa: E731
    chaos_types = lambda: {t for t, n in share_group.check(_history()).counts.items() if n}  # noqa: E731
    assert "SHARE.REDELIVERED_FINAL" in trace_rules()
    assert "redelivery-after-ack" in chaos_types()
    # A (hypothetical) clarification "a rejected record may be delivered again": one edit.
    monkeypatch.setattr(share, "SETTLING", frozenset({"accept", "gap"}))
    assert "SHARE.REDELIVERED_FINAL" not in trace_rules()
    assert "redelivery-after-ack" not in chaos_types()


def test_requirement_ids_come_from_one_table():
    for rule in check_rules.RULES:
        if rule.id.startswith("SHARE.") and rule.id in share.RULE_REQUIREMENTS:
            assert rule.requirements == share.RULE_REQUIREMENTS[rule.id]
    assert set(share_group.ANOMALIES) <= set(share.REQUIREMENTS)
    assert set(share.TRACE_RULE.values()) <= set(check_rules.BY_ID)
