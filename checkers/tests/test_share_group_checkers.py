"""Share-group checker: for every anomaly a tiny history that triggers exactly the expected
error map and a near miss that must not; then history validation and the policy."""

import pytest

from checkers import UNKNOWN
from checkers import share_group as sg
from checkers.history import HistoryError
from checkers.share_history import ShareHistory, ShareHistoryBuilder, from_json, to_json

K = "t-0"


def B() -> ShareHistoryBuilder:
    return ShareHistoryBuilder()  # 1 ms per op


def _produced(b: ShareHistoryBuilder, n: int = 2) -> None:
    b.produce("p", K, [(o, f"v{o}") for o in range(n)])


# ----------------------------------------------------------------- concurrent acquisition


def test_concurrent_acquisition_triggers():
    b = B()
    _produced(b)
    b.fetch("a", {K: [(0, "v0", 1)]})
    b.fetch("b", {K: [(0, "v0", 2)]})
    assert sg.concurrent_acquisition_cases(b.build()) == [
        {"type": "concurrent-acquisition", "key": K, "offset": 0, "holder": "a", "holder-fetch": 3,
         "other": "b", "other-fetch": 5}]


def test_concurrent_acquisition_near_misses_release_expiry_overlap_crash():
    b = B()
    _produced(b, 4)
    b.fetch("a", {K: [(0, "v0", 1)]})
    b.ack("a", K, [(0, "release")])
    b.fetch("b", {K: [(0, "v0", 2)]})          # released first
    b.fetch("a", {K: [(1, "v1", 1)]})
    b.crash("a")
    b.fetch("b", {K: [(1, "v1", 2)]})          # holder crashed first
    fa = b.invoke("c", "fetch")
    fb = b.invoke("d", "fetch")
    b.complete(fa, "ok", {K: [[2, "v2", 1]]})
    b.complete(fb, "ok", {K: [[2, "v2", 2]]})  # overlapping fetches: order unknown
    h = b.build()
    assert sg.concurrent_acquisition_cases(h) == []
    # with a 1 ms lock, even back-to-back fetches of one record are fine
    b2 = B()
    _produced(b2)
    b2.fetch("a", {K: [(0, "v0", 1)]})
    b2.fetch("b", {K: [(0, "v0", 2)]})
    assert sg.concurrent_acquisition_cases(sg.analyze(b2.build(), lock_duration_ms=1)) == []
    assert sg.concurrent_acquisition_cases(sg.analyze(b2.build(), lock_duration_ms=60_000)) != []


# ----------------------------------------------------------------- redelivery after ack


@pytest.mark.parametrize("ack", ["accept", "reject"])
def test_redelivery_after_ack_triggers(ack):
    b = B()
    _produced(b)
    b.fetch("a", {K: [(0, "v0", 1)]})
    b.ack("a", K, [(0, ack)])
    b.fetch("b", {K: [(0, "v0", 2)]})
    assert sg.redelivery_after_ack_cases(b.build()) == [
        {"type": "redelivery-after-ack", "key": K, "offset": 0, "ack": ack, "ack-op": 5, "fetch": 7,
         "delivery-count": 2}]


def test_redelivery_after_ack_near_misses_release_and_failed_accept():
    b = B()
    _produced(b)
    b.fetch("a", {K: [(0, "v0", 1), (1, "v1", 1)]})
    b.ack("a", K, [(0, "release")])
    b.ack("a", K, [(1, "accept")], type_="fail", error="INVALID_RECORD_STATE")
    b.fetch("b", {K: [(0, "v0", 2), (1, "v1", 2)]})
    assert sg.redelivery_after_ack_cases(b.build()) == []


# ----------------------------------------------------------------- delivery counts


def test_delivery_count_above_limit_triggers_and_limit_itself_is_fine():
    b = B()
    _produced(b)
    b.fetch("a", {K: [(0, "v0", 6)]})
    b.fetch("b", {K: [(1, "v1", 5)]})
    assert sg.delivery_count_above_limit_cases(b.build()) == [
        {"type": "delivery-count-above-limit", "key": K, "offset": 0, "delivery-count": 6, "limit": 5, "fetch": 3}]
    assert sg.delivery_count_above_limit_cases(sg.analyze(b.build(), delivery_limit=6)) == []


def test_delivery_count_decrease_and_stall_trigger():
    b = B()
    _produced(b)
    b.fetch("a", {K: [(0, "v0", 2), (1, "v1", 1)]})
    b.crash("a")
    b.fetch("b", {K: [(0, "v0", 1), (1, "v1", 1)]})
    h = b.build()
    assert sg.delivery_count_decrease_cases(h) == [
        {"type": "delivery-count-decrease", "key": K, "offset": 0, "prev-count": 2, "count": 1,
         "prev-fetch": 3, "fetch": 7}]
    assert sg.delivery_count_stall_cases(h) == [
        {"type": "delivery-count-stall", "key": K, "offset": 1, "prev-count": 1, "count": 1,
         "prev-fetch": 3, "fetch": 7}]


def test_delivery_count_near_miss_increasing_and_overlapping():
    b = B()
    _produced(b)
    b.fetch("a", {K: [(0, "v0", 1)]})
    b.crash("a")
    b.fetch("b", {K: [(0, "v0", 2)]})
    fc = b.invoke("c", "fetch")
    fd = b.invoke("d", "fetch")
    b.complete(fc, "ok", {K: [[1, "v1", 2]]})
    b.complete(fd, "ok", {K: [[1, "v1", 1]]})  # concurrent: which came first is unknown
    h = b.build()
    assert sg.delivery_count_decrease_cases(h) == []
    assert sg.delivery_count_stall_cases(h) == []


# ----------------------------------------------------------------- SPSO


def test_spso_regression_triggers():
    b = B()
    b.spso("x", K, 10)
    b.spso("x", K, 7)
    assert sg.spso_regression_cases(b.build()) == [
        {"type": "spso-regression", "key": K, "prev-spso": 10, "spso": 7, "prev-op": 1, "op": 3}]


def test_spso_near_miss_growth_other_key_and_overlap():
    b = B()
    b.spso("x", K, 3)
    b.spso("x", K, 3)
    b.spso("x", "t-1", 0)
    i1 = b.invoke("y", "spso")
    i2 = b.invoke("z", "spso")
    b.complete(i1, "ok", {K: 9})
    b.complete(i2, "ok", {K: 5})  # concurrent observations
    assert sg.spso_regression_cases(b.build()) == []


def test_acquired_below_spso_triggers_and_near_miss():
    b = B()
    _produced(b, 3)
    b.spso("x", K, 2)
    b.fetch("a", {K: [(1, "v1", 1), (2, "v2", 1)]})
    assert sg.acquired_below_spso_cases(b.build()) == [
        {"type": "acquired-below-spso", "key": K, "offset": 1, "spso": 2, "spso-op": 3, "fetch": 5}]
    b = B()
    _produced(b, 3)
    b.fetch("a", {K: [(1, "v1", 1)]})  # fetched before the SPSO was seen there
    b.spso("x", K, 2)
    assert sg.acquired_below_spso_cases(b.build()) == []


# ----------------------------------------------------------------- loss


def test_lost_record_triggers():
    b = B()
    _produced(b, 2)
    b.fetch("a", {K: [(1, "v1", 1)]})
    b.ack("a", K, [(1, "accept")])
    b.spso("x", K, 2)
    assert sg.lost_record_cases(b.build()) == [
        {"type": "lost-record", "key": K, "offset": 0, "producer": 1, "spso": 2, "spso-op": 7, "deliveries": 0}]
    assert sg.unsettled_cases(b.build()) == []


def test_loss_near_misses_rejected_archived_and_unsettled():
    b = B()
    _produced(b, 4)
    b.fetch("a", {K: [(0, "v0", 1), (1, "v1", 5), (2, "v2", 1)]})
    b.ack("a", K, [(0, "reject")])  # archived by the member
    b.crash("a")                     # 1 was at the limit: archived when its lock ends
    b.spso("x", K, 2)
    h = b.build()
    assert sg.lost_record_cases(h) == []
    # 2 was released by the crash and 3 never delivered: not settled, nothing proves loss
    assert [(e["offset"], e["deliveries"]) for e in sg.unsettled_cases(h)] == [(2, 1), (3, 0)]


# ----------------------------------------------------------------- non-holder acknowledgement


def test_non_holder_ack_triggers_each_reason():
    b = B()
    _produced(b, 4)
    b.ack("a", K, [(0, "accept")])                        # never acquired
    b.fetch("a", {K: [(1, "v1", 1)]})
    b.fetch("b", {K: [(1, "v1", 2)]})
    b.ack("a", K, [(1, "accept")])                        # b took it over
    b.fetch("a", {K: [(2, "v2", 1)]})
    b.ack("a", K, [(2, "release")])
    b.ack("a", K, [(2, "accept")])                        # already released it
    b.fetch("c", {K: [(3, "v3", 1)]})
    b.leave("c")
    b.ack("c", K, [(3, "accept")])                        # left the group
    got = [(e["offset"], e["member"], e["reason"]) for e in sg.non_holder_ack_cases(b.build())]
    assert got == [(0, "a", "never-acquired"), (1, "a", "acquired-by-other"),
                   (2, "a", "already-acknowledged"), (3, "c", "member-left")]


def test_non_holder_ack_near_misses_holder_and_refused():
    b = B()
    _produced(b, 2)
    b.fetch("a", {K: [(0, "v0", 1), (1, "v1", 1)]})
    b.ack("a", K, [(0, "accept")])
    b.ack("b", K, [(1, "accept")], type_="fail", error="INVALID_RECORD_STATE")  # refused: right
    b.ack("a", K, [(1, "release")])
    b.fetch("a", {K: [(1, "v1", 2)]})
    b.ack("a", K, [(1, "accept")])  # re-acquired after its release
    assert sg.non_holder_ack_cases(b.build()) == []


# ----------------------------------------------------------------- policy and format


def test_check_clean_run_is_valid_with_stats():
    b = B()
    _produced(b, 3)
    b.join("a")
    b.fetch("a", {K: [(0, "v0", 1), (1, "v1", 1), (2, "v2", 1)]})
    b.ack("a", K, [(0, "accept"), (1, "release"), (2, "accept")])
    b.crash("a")
    b.fetch("b", {K: [(1, "v1", 2)]})
    b.ack("b", K, [(1, "accept")])
    b.spso("x", K, 3)
    r = sg.check(b.build(), lock_duration_ms=30_000)
    assert r.valid is True, r.to_dict()
    assert r.stats["produced"] == 3 and r.stats["acknowledged"] == 3 and r.stats["redeliveries"] == 1


def test_check_policy_unknown_false_and_allowed():
    b = B()
    _produced(b, 1)
    b.fetch("a", {K: [(0, "v0", 1)]})
    assert sg.check(b.build()).valid == UNKNOWN  # unsettled at the end
    assert sg.check(ShareHistory(())).valid == UNKNOWN  # nothing acquired: proves nothing
    b.leave("a")
    b.fetch("b", {K: [(0, "v0", 1)]})  # 4.1.2 after a session close
    b.ack("b", K, [(0, "accept")])
    r = sg.check(b.build())
    assert r.valid is False and r.bad_error_types == ("delivery-count-stall",)
    assert sg.check(b.build(), allowed=sg.allowed_error_types(close_decrements_count=True)).valid is True
    with pytest.raises(ValueError, match="unknown error types"):
        sg.check(b.build(), allowed=["nope"])


def test_history_round_trip_and_bad_input():
    b = B()
    _produced(b)
    b.fetch("a", {K: [(0, "v0", 1)]})
    b.ack("a", ("t", 0), [(0, 1)])  # numeric ack type, tuple key
    h = b.build()
    assert from_json(to_json(h)) == h
    assert h.ops[-1].value == {K: [[0, "accept"]]}
    with pytest.raises(HistoryError, match="accept/release/reject"):
        ShareHistoryBuilder().ack("a", K, [(0, 9)])
    with pytest.raises(HistoryError, match=r"\[offset, value, delivery_count\]"):
        ShareHistoryBuilder().fetch("a", {K: [(0, "v0")]})
    with pytest.raises(HistoryError, match="f must be one of"):
        ShareHistory.from_list([{"index": 0, "time_ns": 0, "process": 0, "type": "invoke", "f": "poll"}])
    with pytest.raises(HistoryError, match="completion without an invocation"):
        from_json('[{"index": 0, "time_ns": 0, "process": 0, "type": "ok", "f": "fetch", "value": {}}]')
