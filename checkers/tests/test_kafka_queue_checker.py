"""Kafka queue checker: for every anomaly a tiny history that triggers exactly the expected
error, and a near miss that must not; then the policy (``check``) on whole histories."""

import json

import pytest

from checkers import UNKNOWN, CheckResult, compose, merge_valid
from checkers import kafka_queue as kq
from checkers.history import HistoryBuilder, from_json, poll, send, to_json


def B() -> HistoryBuilder:
    return HistoryBuilder()


def _abc(b: HistoryBuilder, process: int = 0, key: str = "k") -> None:
    """One committed txn writing a@0, b@1, c@2 to ``key``."""
    b.ok(process, send(key, "a", offset=0), send(key, "b", offset=1), send(key, "c", offset=2))


# ----------------------------------------------------------------- inconsistent offsets


def test_inconsistent_offsets_triggers():
    b = B()
    b.ok(0, send("k", "a", offset=0))
    b.ok(1, send("k", "b", offset=0))
    assert kq.inconsistent_offsets_cases(b.build()) == [
        {"type": "inconsistent-offsets", "key": "k", "offset": 0, "values": ["a", "b"]}]


def test_inconsistent_offsets_near_miss_same_value_seen_many_times():
    b = B()
    b.ok(0, send("k", "a", offset=0))
    b.ok(1, poll({"k": [(0, "a")]}), f="poll")
    b.ok(2, poll({"k": [(0, "a")]}), f="poll")
    b.ok(3, send("j", "b", offset=0))  # same offset, other key
    assert kq.inconsistent_offsets_cases(b.build()) == []


# ----------------------------------------------------------------- duplicate


def test_duplicate_triggers():
    b = B()
    b.ok(0, send("k", "a", offset=0))
    b.ok(1, poll({"k": [(0, "a"), (1, "a")]}), f="poll")
    assert kq.duplicate_cases(b.build()) == [
        {"type": "duplicate", "key": "k", "value": "a", "offsets": [0, 1]}]


def test_duplicate_near_miss_rereads_and_other_keys():
    b = B()
    b.ok(0, send("k", "a", offset=0), send("j", "a", offset=0))
    b.ok(1, poll({"k": [(0, "a")], "j": [(0, "a")]}), f="poll")
    b.ok(2, poll({"k": [(0, "a")]}), f="poll")  # reading one offset twice is no duplicate
    assert kq.duplicate_cases(b.build()) == []


def test_duplicate_ignores_failed_sends_with_offsets():
    b = B()
    b.ok(0, send("k", "a", offset=0))
    inv = b.invoke(1, send("k", "a"))
    b.complete(inv, "fail", send("k", "a", offset=5))  # definitely did not happen
    assert kq.duplicate_cases(b.build()) == []


# ----------------------------------------------------------------- lost write / unseen


def test_lost_write_triggers():
    b = B()
    b.ok(0, send("k", "a", offset=0))
    b.ok(0, send("k", "b", offset=1))
    b.ok(1, poll({"k": [(1, "b")]}), f="poll")
    h = b.build()
    assert kq.lost_write_cases(h) == [
        {"type": "lost-write", "key": "k", "value": "a", "offset": 0, "index": 0,
         "max-read-index": 1, "max-read-offset": 1, "writer": 1, "committed": "ok"}]
    assert kq.unseen_cases(h) == []


def test_lost_write_not_hidden_by_a_failed_ops_read():
    b = B()
    b.ok(0, send("k", "a", offset=0))
    b.ok(0, send("k", "b", offset=1))
    inv = b.invoke(1, poll(), f="poll")
    b.complete(inv, "fail", poll({"k": [(0, "a")]}))  # failed: it observed nothing
    b.ok(2, poll({"k": [(1, "b")]}), f="poll")
    assert [e["value"] for e in kq.lost_write_cases(b.build())] == ["a"]


def test_lost_write_from_info_txn_proven_by_its_other_write():
    # The txn timed out, but its second send was read: it committed, so its first send
    # (appended before the second on the same key) must sit below a read offset.
    b = B()
    b.info(0, send("k", "a"), send("k", "b"))
    b.ok(1, poll({"k": [(4, "b")]}), f="poll")
    errs = kq.lost_write_cases(b.build())
    assert [(e["key"], e["value"], e["offset"], e["writer"]) for e in errs] == [("k", "a", None, 1)]
    assert errs[0]["committed"].startswith("info")


def test_lost_write_near_miss_info_send_never_seen():
    b = B()
    b.info(0, send("k", "a"))  # indeterminate: may never have happened
    b.ok(0, send("k", "b", offset=1))
    b.ok(1, poll({"k": [(1, "b")]}), f="poll")
    h = b.build()
    assert kq.lost_write_cases(h) == []
    assert kq.unseen_cases(h) == []


def test_lost_write_near_miss_failed_send_and_write_above_reads():
    b = B()
    b.fail(0, send("k", "x"))  # definitely not written: fine that nobody saw it
    b.ok(0, send("k", "a", offset=0))
    b.ok(0, send("k", "b", offset=1))  # acknowledged but above everything read
    b.ok(1, poll({"k": [(0, "a")]}), f="poll")
    h = b.build()
    assert kq.lost_write_cases(h) == []
    assert [(e["type"], e["value"], e["offset"]) for e in kq.unseen_cases(h)] == [
        ("unseen", "b", 1)]


def test_lost_write_near_miss_info_txn_other_write_seen_on_other_key():
    # Committed (its write to j was read), but nothing places "a" below a read of k.
    b = B()
    b.info(0, send("k", "a"), send("j", "b"))
    b.ok(1, poll({"j": [(0, "b")], "k": [(3, "z")]}), f="poll")
    h = b.build()
    assert kq.lost_write_cases(h) == []
    assert [(e["key"], e["value"]) for e in kq.unseen_cases(h)] == [("k", "a")]


# ----------------------------------------------------------------- G1a


def test_g1a_triggers():
    b = B()
    b.fail(0, send("k", "a"))
    b.ok(1, poll({"k": [(0, "a")]}), f="poll")
    assert kq.g1a_cases(b.build()) == [
        {"type": "G1a", "key": "k", "offset": 0, "value": "a", "writer": 1, "reader": 3}]


def test_g1a_near_miss_info_writer_and_failed_reader():
    b = B()
    b.info(0, send("k", "a"))  # may have committed: reading it is fine
    b.ok(1, poll({"k": [(0, "a")]}), f="poll")
    b.fail(2, send("k", "x"))
    inv = b.invoke(3, poll(), f="poll")
    b.complete(inv, "fail", poll({"k": [(1, "x")]}))  # a failed op observed nothing
    assert kq.g1a_cases(b.build()) == []


# ----------------------------------------------------------------- precommitted read


def test_precommitted_read_own_write_triggers():
    b = B()
    b.ok(0, send("k", "a", offset=0), poll({"k": [(0, "a")]}))
    assert kq.precommitted_read_cases(b.build()) == [
        {"type": "precommitted-read", "kind": "own-write", "key": "k", "offset": 0,
         "value": "a", "writer": 1, "reader": 1}]


def test_precommitted_read_future_read_triggers():
    b = B()
    b.ok(1, poll({"k": [(0, "a")]}), f="poll")  # completes at index 1
    b.ok(0, send("k", "a", offset=0))  # invoked at index 2
    assert kq.precommitted_read_cases(b.build()) == [
        {"type": "precommitted-read", "kind": "future-read", "key": "k", "offset": 0,
         "value": "a", "writer": 3, "reader": 1}]


def test_precommitted_read_near_miss_concurrent_and_later_txn():
    b = B()
    w = b.invoke(0, send("k", "a"))
    r = b.invoke(1, poll(), f="poll")
    b.complete(r, "ok", poll({"k": [(0, "a")]}))  # commit may precede the ack: fine
    b.complete(w, "ok", send("k", "a", offset=0))
    b.ok(0, send("k", "b", offset=1))
    b.ok(0, poll({"k": [(1, "b")]}), send("k", "c", offset=2))  # own earlier txn: committed
    assert kq.precommitted_read_cases(b.build()) == []


# ----------------------------------------------------------------- nonmonotonic send


def test_nonmonotonic_send_triggers():
    b = B()
    b.ok(0, send("k", "a", offset=5))
    b.ok(0, send("k", "b", offset=3))
    h = b.build()
    assert kq.nonmonotonic_send_cases(h) == [
        {"type": "nonmonotonic-send", "key": "k", "process": 0, "prev-op": 1, "op": 3,
         "prev-offset": 5, "offset": 3}]
    assert kq.int_nonmonotonic_send_cases(h) == []


def test_nonmonotonic_send_same_offset_twice_triggers():
    b = B()
    b.ok(0, send("k", "a", offset=5))
    b.ok(0, send("k", "b", offset=5))
    assert [(e["prev-offset"], e["offset"]) for e in
            kq.nonmonotonic_send_cases(b.build())] == [(5, 5)]


def test_nonmonotonic_send_near_miss_other_process_or_key():
    b = B()
    b.ok(0, send("k", "a", offset=5))
    b.ok(1, send("k", "b", offset=3))  # another producer: no order promised
    b.ok(0, send("j", "c", offset=0))  # another key
    b.ok(0, send("k", "d", offset=6))
    assert kq.nonmonotonic_send_cases(b.build()) == []


def test_int_nonmonotonic_send_triggers_and_near_miss():
    b = B()
    b.ok(0, send("k", "a", offset=5), send("k", "b", offset=3))
    assert [(e["type"], e["prev-offset"], e["offset"]) for e in
            kq.int_nonmonotonic_send_cases(b.build())] == [("int-nonmonotonic-send", 5, 3)]
    b = B()
    b.ok(0, send("k", "a", offset=5), send("j", "b", offset=3), send("k", "c", offset=9))
    assert kq.int_nonmonotonic_send_cases(b.build()) == []


# ----------------------------------------------------------------- nonmonotonic poll


def test_nonmonotonic_poll_triggers():
    b = B()
    _abc(b)
    b.ok(1, poll({"k": [(0, "a"), (1, "b")]}), f="poll")
    b.ok(1, poll({"k": [(1, "b")]}), f="poll")
    h = b.build()
    assert kq.nonmonotonic_poll_cases(h) == [
        {"type": "nonmonotonic-poll", "key": "k", "process": 1, "prev-op": 3, "op": 5,
         "prev-offset": 1, "offset": 1, "prev-index": 1, "index": 1}]
    assert kq.poll_skip_cases(h) == []


@pytest.mark.parametrize("between", ["assign", "seek", "crash", "aborted-txn", "info-poll"])
def test_nonmonotonic_poll_near_miss_position_change_between(between):
    b = B()
    _abc(b)
    b.ok(1, poll({"k": [(0, "a"), (1, "b")]}), f="poll")
    if between == "assign":
        b.assign(1, ["k"])
    elif between == "seek":
        b.seek(1, {"k": 0})
    elif between == "crash":
        b.crash(1)
    elif between == "aborted-txn":  # copier aborts and rewinds to its committed offset
        b.fail(1, poll(), send("out", "z"))
    else:
        b.info(1, poll(), f="poll")
    b.ok(1, poll({"k": [(0, "a")]}), f="poll")
    assert kq.nonmonotonic_poll_cases(b.build()) == []


def test_seek_of_another_key_does_not_excuse():
    b = B()
    _abc(b)
    b.ok(1, poll({"k": [(0, "a"), (1, "b")]}), f="poll")
    b.seek(1, {"j": 0})
    b.ok(1, poll({"k": [(0, "a")]}), f="poll")
    assert [e["type"] for e in kq.nonmonotonic_poll_cases(b.build())] == ["nonmonotonic-poll"]


def test_int_nonmonotonic_poll_triggers_and_near_miss():
    b = B()
    _abc(b)
    b.ok(1, poll({"k": [(0, "a"), (1, "b")]}), poll({"k": [(0, "a")]}))
    assert [(e["type"], e["prev-offset"], e["offset"]) for e in
            kq.int_nonmonotonic_poll_cases(b.build())] == [("int-nonmonotonic-poll", 1, 0)]
    b = B()
    _abc(b)
    b.ok(1, poll({"k": [(0, "a")]}), poll({"k": [(1, "b"), (2, "c")]}))
    h = b.build()
    assert kq.int_nonmonotonic_poll_cases(h) == []
    assert kq.int_poll_skip_cases(h) == []


# ----------------------------------------------------------------- poll skip


def test_poll_skip_triggers():
    b = B()
    _abc(b)
    b.ok(1, poll({"k": [(0, "a")]}), f="poll")
    b.ok(1, poll({"k": [(2, "c")]}), f="poll")
    h = b.build()
    assert kq.poll_skip_cases(h) == [
        {"type": "poll-skip", "key": "k", "process": 1, "prev-op": 3, "op": 5,
         "prev-offset": 0, "offset": 2, "prev-index": 0, "index": 2, "skipped": [1]}]
    assert kq.nonmonotonic_poll_cases(h) == []


def test_poll_skip_near_miss_across_reassignment():
    b = B()
    _abc(b)
    b.ok(1, poll({"k": [(0, "a")]}), f="poll")
    b.assign(1, ["k"])
    b.ok(1, poll({"k": [(2, "c")]}), f="poll")
    assert kq.poll_skip_cases(b.build()) == []


def test_poll_skip_near_miss_offset_gap_of_aborted_records():
    # offsets 1 and 2 hold an aborted batch and its abort marker: never observed by any
    # ok/info op, so 0 -> 3 is the next entry of the version order, not a skip.
    b = B()
    b.ok(0, send("k", "a", offset=0))
    b.fail(0, send("k", "x"))
    b.ok(0, send("k", "c", offset=3))
    b.ok(1, poll({"k": [(0, "a")]}), f="poll")
    b.ok(1, poll({"k": [(3, "c")]}), f="poll")
    h = b.build()
    assert kq.poll_skip_cases(h) == []
    assert kq.lost_write_cases(h) == []


def test_int_poll_skip_triggers_and_near_miss():
    b = B()
    _abc(b)
    b.ok(1, poll({"k": [(0, "a"), (2, "c")]}), f="poll")
    assert [(e["type"], e["skipped"]) for e in kq.int_poll_skip_cases(b.build())] == [
        ("int-poll-skip", [1])]
    b = B()
    b.ok(0, send("k", "a", offset=0), send("k", "c", offset=3))
    b.ok(1, poll({"k": [(0, "a"), (3, "c")]}), f="poll")
    assert kq.int_poll_skip_cases(b.build()) == []


# ----------------------------------------------------------------- every function is pure


def test_functions_accept_history_or_analysis_alike():
    b = B()
    b.fail(0, send("k", "a"))
    b.ok(1, poll({"k": [(0, "a")]}), f="poll")
    h = b.build()
    a = kq.analyze(h)
    for name, fn in kq.ANOMALIES.items():
        assert fn(h) == fn(a), name
        assert all(e["type"] == name for e in fn(a))


# ----------------------------------------------------------------- check / policy


def _eos_history():
    """Two transactional producers, one abort, a copier (consume-transform-produce) and a
    verifying consumer draining everything at the end; all consumers use assign."""
    b = B()
    b.assign(9, ["in-0"])
    b.assign(8, ["in-0", "out-0"])
    b.ok(0, send("in-0", 1, offset=0), send("in-0", 2, offset=1))
    b.fail(1, send("in-0", 99))  # aborted: records at 2, marker at 3
    b.ok(1, send("in-0", 3, offset=4))
    b.ok(9, poll({"in-0": [(0, 1), (1, 2)]}), send("out-0", 101, offset=0),
         send("out-0", 102, offset=1))
    b.ok(0, send("in-0", 4, offset=6))  # 5: the commit marker of the previous txn
    b.ok(9, poll({"in-0": [(4, 3), (6, 4)]}), send("out-0", 103, offset=2),
         send("out-0", 104, offset=3))
    b.ok(8, poll({"in-0": [(0, 1), (1, 2), (4, 3), (6, 4)],
                  "out-0": [(0, 101), (1, 102), (2, 103), (3, 104)]}), f="poll")
    return b.build()


def test_clean_exactly_once_history_is_valid():
    r = kq.check(_eos_history())
    assert r.valid is True, r.to_dict()
    assert r.counts == {} and r.bad_error_types == ()
    assert r.stats["fail"] == 1 and r.stats["values-written"] == 9


def test_clean_history_survives_json_round_trip_and_stays_valid():
    h = from_json(to_json(_eos_history()))
    assert kq.check(h).valid is True


def test_anomalous_history_is_invalid_with_counts_and_examples():
    b = B()
    b.fail(0, send("k", "a"))
    b.fail(0, send("k", "b"))
    b.ok(1, send("k", "c", offset=2))
    b.ok(2, poll({"k": [(0, "a"), (1, "b"), (2, "c")]}), f="poll")
    r = kq.check(b.build(), max_examples=1)
    assert r.valid is False
    assert r.counts == {"G1a": 2}
    assert r.bad_error_types == ("G1a",)
    assert r.examples["G1a"] == [
        {"type": "G1a", "key": "k", "offset": 0, "value": "a", "writer": 1, "reader": 7}]
    d = r.to_dict()
    assert json.loads(json.dumps(d)) == d


def _skipping_history():
    b = B()
    _abc(b)
    b.subscribe(1, ["k"])
    b.ok(1, poll({"k": [(0, "a")]}), f="poll")
    b.ok(1, poll({"k": [(2, "c")]}), f="poll")  # rebalance inside poll() moved us on
    b.ok(2, poll({"k": [(1, "b")]}), f="poll")
    return b.build()


def test_policy_subscribe_allows_poll_skip_default_does_not():
    h = _skipping_history()
    strict = kq.check(h)
    assert strict.valid is False and strict.bad_error_types == ("poll-skip",)
    relaxed = kq.check(h, allowed=kq.allowed_error_types(subscribe=True))
    assert relaxed.valid is True
    assert relaxed.counts == {"poll-skip": 1}  # still reported, just allowed


def test_policy_at_least_once_allows_duplicates():
    b = B()
    b.ok(0, send("k", "a", offset=0))
    b.ok(1, poll({"k": [(0, "a"), (1, "a")]}), f="poll")
    h = b.build()
    assert kq.check(h).valid is False
    assert kq.check(h, allowed=kq.allowed_error_types(idempotent=False)).valid is True
    assert kq.allowed_error_types() == kq.EXACTLY_ONCE == frozenset()


def test_unseen_only_is_unknown_not_false():
    b = B()
    b.ok(0, send("k", "a", offset=0))
    b.ok(0, send("k", "b", offset=1))
    b.ok(1, poll({"k": [(0, "a")]}), f="poll")
    r = kq.check(b.build())
    assert r.valid == UNKNOWN
    assert r.counts == {"unseen": 1}
    assert r.unknown_because == ("unseen found",)
    assert kq.check(b.build(), allowed={"unseen"}).valid is True


def test_no_reads_is_unknown():
    b = B()
    b.ok(0, send("k", "a", offset=0))
    b.info(0, send("k", "b"))
    r = kq.check(b.build(), allowed={"unseen"})
    assert r.valid == UNKNOWN
    assert r.unknown_because == ("the history observed no reads",)


def test_unknown_allowed_type_is_rejected():
    with pytest.raises(ValueError):
        kq.check(_eos_history(), allowed={"poll_skip"})


def test_compose_takes_the_worst():
    good = kq.check(_eos_history())
    bad = kq.check(_skipping_history())
    assert compose({"queue": good})["valid"] is True
    out = compose({"queue": good, "strict": bad, "other": {"valid": UNKNOWN}})
    assert out["valid"] is False
    assert out["results"]["strict"]["bad_error_types"] == ["poll-skip"]
    assert merge_valid([True, UNKNOWN]) == UNKNOWN
    assert merge_valid([]) is True
    with pytest.raises(ValueError):
        merge_valid(["maybe"])
    assert isinstance(good, CheckResult)
