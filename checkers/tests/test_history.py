"""History data model: builders, canonical form, pairing, JSON round trip."""

import json

import pytest

from checkers.history import (
    History,
    HistoryBuilder,
    HistoryError,
    Op,
    from_json,
    key_of,
    poll,
    reads_of,
    send,
    sends_of,
    strip_results,
    to_json,
)


def test_key_normalisation():
    assert key_of("orders-0") == "orders-0"
    assert key_of(("orders", 3)) == "orders-3"
    assert key_of(7) == "7"
    with pytest.raises(HistoryError):
        key_of(1.5)


def test_micro_op_builders_and_accessors():
    assert send("k", 1) == ["send", "k", 1]
    assert send(("t", 0), 1, offset=4) == ["send", "t-0", [4, 1]]
    assert poll() == ["poll"]
    assert poll({("t", 0): [(0, "a"), (1, "b")]}) == ["poll", {"t-0": [[0, "a"], [1, "b"]]}]
    value = [send("k", 1, offset=4), poll({"k": [(4, 1)]}), send("j", 2)]
    assert [(s.key, s.value, s.offset, s.position) for s in sends_of(value)] == [
        ("k", 1, 4, 0), ("j", 2, None, 2)]
    assert [(r.key, r.offset, r.value, r.position) for r in reads_of(value)] == [("k", 4, 1, 1)]
    assert strip_results(value) == [["send", "k", 1], ["poll"], ["send", "j", 2]]


def test_builder_pairs_invocations_and_completions():
    b = HistoryBuilder()
    b.ok(0, send("k", 1, offset=0))
    b.fail(1, send("k", 2))
    b.info(2, send("k", 3))
    b.assign(3, ["k"])
    b.ok(3, poll({"k": [(0, 1)]}), f="poll")
    h = b.build()
    assert [op.index for op in h] == list(range(10))
    assert [(op.type, op.f) for op in h][:2] == [("invoke", "txn"), ("ok", "txn")]
    # invocation value has results stripped; ok completion carries them
    assert h[0].value == [["send", "k", 1]]
    assert h[1].value == [["send", "k", [0, 1]]]
    # fail / info completions report no results
    assert h[3].value == [["send", "k", 2]] and h[3].error == "aborted"
    assert h[5].type == "info" and h[5].error == "timeout"
    pairs = h.pairs()
    assert [(p.type, p.f, p.index) for p in pairs] == [
        ("ok", "txn", 1), ("fail", "txn", 3), ("info", "txn", 5), ("ok", "assign", 7),
        ("ok", "poll", 9)]
    assert pairs[2].reads() == [] and pairs[1].reads() == []
    assert [r.value for r in pairs[4].reads()] == [1]
    assert h[0].time_ns < h[1].time_ns


def test_interleaved_ops_and_open_invocation_counts_as_info():
    b = HistoryBuilder()
    w = b.invoke(0, send("k", 1))
    r = b.invoke(1, poll(), f="poll")
    b.complete(r, "ok", poll({"k": [(0, 1)]}))
    b.invoke(2, send("k", 9))  # never completes
    b.complete(w, "ok", send("k", 1, offset=0))
    pairs = b.build().pairs()
    assert [(p.process, p.type, p.index) for p in pairs] == [(0, "ok", 4), (1, "ok", 2),
                                                             (2, "info", 3)]
    assert pairs[2].end_index == float("inf")
    assert pairs[2].sends()[0].value == 9


def test_pairing_errors():
    with pytest.raises(HistoryError, match="without an invocation"):
        History([Op(0, 0, 0, "ok", "txn", [])]).validate()
    with pytest.raises(HistoryError, match="still open"):
        History([Op(0, 0, 0, "invoke", "txn", []), Op(1, 1, 0, "invoke", "txn", [])]).validate()
    with pytest.raises(HistoryError, match="completes f="):
        History([Op(0, 0, 0, "invoke", "txn", []), Op(1, 1, 0, "ok", "poll", [])]).validate()
    with pytest.raises(HistoryError, match="has index"):
        History([Op(3, 0, 0, "invoke", "txn", [])]).validate()


def test_op_shape_errors():
    with pytest.raises(HistoryError):
        Op(0, 0, 0, "done", "txn", [])
    with pytest.raises(HistoryError):
        Op(0, 0, 0, "ok", "produce", [])
    with pytest.raises(HistoryError):
        Op(0, 0, 0, "ok", "txn", [["send", "k"]])
    with pytest.raises(HistoryError):
        Op(0, 0, 0, "ok", "txn", [["poll", {"k": [[0]]}]])
    with pytest.raises(HistoryError):
        Op(0, 0, 0, "ok", "txn", [["commit"]])


def _sample() -> History:
    b = HistoryBuilder(start_ns=1_700_000_000_000_000_000)
    b.assign(9, [("t", 0), ("t", 1)])
    b.ok(0, send(("t", 0), "a", offset=0), send(("t", 1), "b", offset=0))
    b.fail(1, send(("t", 0), "x"))
    b.info(2, send(("t", 1), "y"), error={"exception": "TimeoutException"})
    b.seek(9, {("t", 0): 0})
    b.ok(9, poll({("t", 0): [(0, "a")], ("t", 1): [(0, "b")]}), send(("t", 2), "c", offset=7))
    b.crash(9)
    b.subscribe(9, ["t-0"])
    return b.build()


def test_json_round_trip():
    h = _sample()
    text = to_json(h)
    back = from_json(text)
    assert back == h
    assert to_json(back) == text
    # the stored form is the documented shape
    raw = json.loads(text)
    assert raw[3] == {"index": 3, "time_ns": raw[3]["time_ns"], "process": 0, "type": "ok",
                      "f": "txn", "value": [["send", "t-0", [0, "a"]], ["send", "t-1", [0, "b"]]]}
    assert raw[7]["error"] == {"exception": "TimeoutException"}
    assert "error" not in raw[0]


def test_json_round_trip_from_tuples_equals_from_lists():
    a = History([Op(0, 0, 0, "invoke", "txn", [("send", ("t", 0), 1)]),
                 Op(1, 1, 0, "ok", "txn", [("send", ("t", 0), (5, 1)), ("poll", {("t", 0): [(5, 1)]})])])
    b = from_json(to_json(a))
    assert b == a
    assert b[1].value == [["send", "t-0", [5, 1]], ["poll", {"t-0": [[5, 1]]}]]


def test_from_json_rejects_malformed():
    with pytest.raises(HistoryError):
        from_json('{"ops": []}')
    with pytest.raises(HistoryError, match="missing field"):
        from_json('[{"index": 0, "type": "invoke", "f": "txn"}]')
    with pytest.raises(HistoryError):
        from_json('[{"index": 0, "time_ns": 0, "process": 0, "type": "ok", "f": "txn", "value": []}]')
