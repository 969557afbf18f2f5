"""One pair of hand-made histories per anomaly type of every checker (issue 23): one the
checker must flag, and a near twin it must not. Most twins differ by one operation whose
outcome is unknown (``info``): such an operation may explain an observation, it can never
demand one (Jepsen, Elle). The anomaly types are read from the checkers' own tables, so a
new type without a pair fails ``test_every_anomaly_type_has_a_pair``."""

from __future__ import annotations

from typing import Callable

import pytest

from checkers import fencing, share_group, txn_share_rules
from checkers import kafka_queue as kq
from checkers.history import HistoryBuilder, offsets, poll, send
from checkers.share_history import ShareHistoryBuilder
from checkers.txn_share_rules import TxnShareOp

Found = Callable[[], set[str]]
"""Builds one history, runs its checker, returns the error types found."""

K, J = "k", "j"


# --------------------------------------------------------------------------- queue histories


def _queue(build: Callable[[HistoryBuilder], None]) -> Found:
    def found() -> set[str]:
        b = HistoryBuilder()
        build(b)
        return set(kq.check(b.build()).counts)
    return found


def _info_with_offsets(b: HistoryBuilder, process, *sends: list, f: str = "txn") -> None:
    """An op whose sends were acknowledged but whose outcome is unknown (the commit timed
    out, "the EndTxn may still land"): what the queue workload records."""
    b.complete(b.invoke(process, *sends, f=f), "info", *sends, error="commit timed out")


def _abc(b: HistoryBuilder, middle: str) -> None:
    """a@0 and c@2 committed; b@1 from a txn that is ``ok``, ``info`` or ``info-proven``
    (info, but its other write d was read, so it committed)."""
    b.ok(0, send(K, "a", offset=0))
    if middle == "ok":
        b.ok(0, send(K, "b", offset=1))
    else:
        _info_with_offsets(b, 0, send(K, "b", offset=1), send(J, "d", offset=0))
    b.ok(0, send(K, "c", offset=2))
    if middle == "info-proven":
        b.ok(2, poll({J: [(0, "d")]}), f="poll")


def _lost(b: HistoryBuilder, outcome: str) -> None:
    if outcome == "ok":
        b.ok(0, send(K, "a", offset=0))
    else:
        _info_with_offsets(b, 0, send(K, "a", offset=0))
    b.ok(0, send(K, "b", offset=1))
    b.ok(1, poll({K: [(1, "b")]}), f="poll")


def _unseen(b: HistoryBuilder, outcome: str) -> None:
    (b.ok if outcome == "ok" else b.info)(0, send(K, "a"))
    b.ok(0, send(J, "b", offset=0))
    b.ok(1, poll({J: [(0, "b")]}), f="poll")


def _g1a(b: HistoryBuilder, outcome: str) -> None:
    (b.fail if outcome == "fail" else b.info)(0, send(K, "a"))
    b.ok(1, poll({K: [(0, "a")]}), f="poll")


def _future_read(b: HistoryBuilder, concurrent: bool) -> None:
    if concurrent:  # the writer was invoked first and never heard back: it may have committed
        w = b.invoke(0, send(K, "a"))
        b.ok(1, poll({K: [(0, "a")]}), f="poll")
        b.complete(w, "info")
    else:
        b.ok(1, poll({K: [(0, "a")]}), f="poll")
        b.ok(0, send(K, "a", offset=0))


def _send_order(b: HistoryBuilder, second_process: int) -> None:
    b.ok(0, send(K, "a", offset=5))
    b.ok(second_process, send(K, "b", offset=3))
    b.ok(2, poll({K: [(3, "b"), (5, "a")]}), f="poll")


def _int_send_order(b: HistoryBuilder, second_key: str) -> None:
    b.ok(0, send(K, "a", offset=5), send(second_key, "b", offset=3))
    b.ok(2, poll({K: [(5, "a")], second_key: [(3, "b")]}) if second_key != K
         else poll({K: [(3, "b"), (5, "a")]}), f="poll")


def _poll_back(b: HistoryBuilder, info_between: bool) -> None:
    b.ok(0, send(K, "a", offset=0), send(K, "b", offset=1))
    b.ok(1, poll({K: [(0, "a"), (1, "b")]}), f="poll")
    if info_between:  # the client timed out: it is rebuilt, its position unknown
        b.info(1, poll(), f="poll")
    b.ok(1, poll({K: [(0, "a")]}), f="poll")


def _int_poll_back(b: HistoryBuilder, ordered: bool) -> None:
    b.ok(0, send(K, "a", offset=0), send(K, "b", offset=1))
    b.ok(1, poll({K: [(0, "a"), (1, "b")] if ordered else [(1, "b"), (0, "a")]}), f="poll")


def _poll_skip(b: HistoryBuilder, middle: str) -> None:
    _abc(b, middle)
    b.ok(1, poll({K: [(0, "a")]}), f="poll")
    b.ok(1, poll({K: [(2, "c")]}), f="poll")


def _int_poll_skip(b: HistoryBuilder, middle: str) -> None:
    """The issue-23 case: the final read_committed read skips b, whose transaction's
    commit timed out and which was then aborted; nobody ever reads b."""
    _abc(b, middle)
    b.ok("final", poll({K: [(0, "a"), (2, "c")]}), f="poll")


# --------------------------------------------------------------------------- fencing histories


def _fenced(zombie_outcome: str) -> Found:
    def found() -> set[str]:
        b = HistoryBuilder()
        b.ok("copier-1", send("b-0", "x", offset=0))
        b.assign("copier-2", ["a-0"])  # copier-2 initialised its transactional id first
        (b.ok if zombie_outcome == "ok" else b.info)("copier-1", send("b-0", "y", offset=1))
        return set(fencing.check(b.build(), {"t": ["copier-1", "copier-2"]}).counts)
    return found


def _stale_generation(overlap: bool) -> Found:
    """Generation 2 is known once the op that carried it completed; an op of generation 1
    invoked before that (the rebalance may have happened inside the gen-2 op) may commit."""
    def found() -> set[str]:
        b = HistoryBuilder()
        new = b.invoke("c2", send("b-0", "x"), offsets("g", 2, "m2", {"a-0": 5}))
        if overlap:
            b.ok("c1", send("b-0", "y", offset=1), offsets("g", 1, "m1", {"a-0": 4}))
        b.complete(new, "ok", send("b-0", "x", offset=0), offsets("g", 2, "m2", {"a-0": 5}))
        if not overlap:
            b.ok("c1", send("b-0", "y", offset=1), offsets("g", 1, "m1", {"a-0": 4}))
        return set(fencing.check(b.build(), {}).counts)
    return found


# --------------------------------------------------------------------------- share-group histories

S = "t-0"


def _share(build: Callable[[ShareHistoryBuilder], None], **kw) -> Found:
    def found() -> set[str]:
        b = ShareHistoryBuilder()
        b.produce("p", S, [(0, "v0"), (1, "v1")])
        build(b)
        return set(share_group.check(b.build(), **kw).counts)
    return found


def _concurrent(b: ShareHistoryBuilder, ack_between: str | None) -> None:
    b.fetch("m1", {S: [(0, "v0", 1)]})
    if ack_between:  # m1's RELEASE timed out: it may have landed
        b.ack("m1", S, [(0, "release")], type_=ack_between, error="timeout")
    b.fetch("m2", {S: [(0, "v0", 2)]})


def _redelivered(b: ShareHistoryBuilder, ack_outcome: str) -> None:
    b.fetch("m1", {S: [(0, "v0", 1)]})
    b.ack("m1", S, [(0, "accept")], type_=ack_outcome)
    b.fetch("m2", {S: [(0, "v0", 2)]})


def _counts(b: ShareHistoryBuilder, first: int, second: int, overlap: bool = False) -> None:
    if overlap:
        f1, f2 = b.invoke("m1", "fetch"), b.invoke("m2", "fetch")
        b.complete(f1, "ok", {S: [[0, "v0", first]]})
        b.complete(f2, "ok", {S: [[0, "v0", second]]})
    else:
        b.fetch("m1", {S: [(0, "v0", first)]})
        b.ack("m1", S, [(0, "release")])
        b.fetch("m2", {S: [(0, "v0", second)]})


def _spsos(b: ShareHistoryBuilder, overlap: bool) -> None:
    if overlap:
        s1, s2 = b.invoke("m1", "spso"), b.invoke("m2", "spso")
        b.complete(s1, "ok", {S: 5})
        b.complete(s2, "ok", {S: 3})
    else:
        b.spso("m1", S, 5)
        b.spso("m2", S, 3)


def _below_spso(b: ShareHistoryBuilder, overlap: bool) -> None:
    if overlap:
        s, f = b.invoke("m1", "spso"), b.invoke("m2", "fetch")
        b.complete(s, "ok", {S: 1})
        b.complete(f, "ok", {S: [[0, "v0", 1]]})
    else:
        b.spso("m1", S, 1)
        b.fetch("m2", {S: [(0, "v0", 1)]})


def _lost_record(b: ShareHistoryBuilder, unknown_fetches: int) -> None:
    """Delivery limit 2: two fetches that timed out may each have acquired v0 unseen, and a
    lock expiry at the limit archives it, so the SPSO may rightly move past it."""
    b.ack("m0", S, [(1, "accept")])  # (never-acquired by m0: not this pair's concern)
    for n in range(unknown_fetches):
        b.complete(b.invoke(f"m{n + 1}", "fetch"), "info", error="timeout")
    b.spso("m9", S, 2)


def _unsettled(b: ShareHistoryBuilder, ack_outcome: str | None) -> None:
    b.fetch("m1", {S: [(0, "v0", 1), (1, "v1", 1)]})
    b.ack("m1", S, [(1, "accept")])
    if ack_outcome:
        b.ack("m1", S, [(0, "accept")], type_=ack_outcome, error="timeout")


def _non_holder(b: ShareHistoryBuilder, unknown_fetch_first: bool) -> None:
    if unknown_fetch_first:  # the fetch's answer was lost: it may have acquired v0
        b.complete(b.invoke("m1", "fetch"), "info", error="timeout")
    b.ack("m1", S, [(0, "accept")])


# --------------------------------------------------------------------------- KIP-1289 histories

R = ("sp-0", 5)


def _txn_share(ops: list[TxnShareOp], **kw) -> Found:
    return lambda: set(txn_share_rules.check(ops, **kw).counts)


def _stage(t, ack="accept", acquired_at=None):
    return TxnShareOp("stage", t, t + 1, (R,), txn="t#1", member="m1", ack=ack, acquired_at=acquired_at)


def _end(t, committed, ok=True):
    return TxnShareOp("end", t, t + 1, txn="t#1", committed=committed, ok=ok)


def _acquire(t):
    return TxnShareOp("acquire", t, t + 1, (R,), member="m2")


def _observe(t, state):
    return TxnShareOp("observe", t, t + 1, (R,), state=state)


def _failover(t):
    return TxnShareOp("failover", t, t + 1)


def _release(t, ok):
    return TxnShareOp("ack", t, t + 1, (R,), ok=ok, member="m1", ack="release")


# --------------------------------------------------------------------------- the table

PAIRS: dict[str, tuple[Found, Found]] = {
    # queue (checkers.kafka_queue)
    "inconsistent-offsets": (
        _queue(lambda b: (b.ok(0, send(K, "a", offset=0)), b.ok(1, poll({K: [(0, "b")]}), f="poll"))),
        _queue(lambda b: (b.complete(b.invoke(0, send(K, "a")), "fail", send(K, "a", offset=0)),
                          b.ok(0, send(K, "b", offset=0)), b.ok(1, poll({K: [(0, "b")]}), f="poll")))),
    "duplicate": (
        _queue(lambda b: (b.ok(0, send(K, "a", offset=0)), b.ok(1, poll({K: [(0, "a"), (1, "a")]}), f="poll"))),
        _queue(lambda b: (b.ok(0, send(K, "a", offset=0)), b.ok(1, poll({K: [(0, "a")]}), f="poll"),
                          b.assign(1, [K]), b.ok(1, poll({K: [(0, "a")]}), f="poll")))),
    "lost-write": (_queue(lambda b: _lost(b, "ok")), _queue(lambda b: _lost(b, "info"))),
    "unseen": (_queue(lambda b: _unseen(b, "ok")), _queue(lambda b: _unseen(b, "info"))),
    "G1a": (_queue(lambda b: _g1a(b, "fail")), _queue(lambda b: _g1a(b, "info"))),
    "precommitted-read": (_queue(lambda b: _future_read(b, False)), _queue(lambda b: _future_read(b, True))),
    "nonmonotonic-send": (_queue(lambda b: _send_order(b, 0)), _queue(lambda b: _send_order(b, 1))),
    "int-nonmonotonic-send": (_queue(lambda b: _int_send_order(b, K)), _queue(lambda b: _int_send_order(b, J))),
    "nonmonotonic-poll": (_queue(lambda b: _poll_back(b, False)), _queue(lambda b: _poll_back(b, True))),
    "int-nonmonotonic-poll": (_queue(lambda b: _int_poll_back(b, False)), _queue(lambda b: _int_poll_back(b, True))),
    "poll-skip": (_queue(lambda b: _poll_skip(b, "ok")), _queue(lambda b: _poll_skip(b, "info"))),
    "int-poll-skip": (_queue(lambda b: _int_poll_skip(b, "ok")), _queue(lambda b: _int_poll_skip(b, "info"))),
    # fencing (checkers.fencing)
    "fenced-ok": (_fenced("ok"), _fenced("info")),
    "stale-generation-ok": (_stale_generation(False), _stale_generation(True)),
    # share groups (checkers.share_group)
    "concurrent-acquisition": (_share(lambda b: _concurrent(b, None)), _share(lambda b: _concurrent(b, "info"))),
    "redelivery-after-ack": (_share(lambda b: _redelivered(b, "ok")), _share(lambda b: _redelivered(b, "info"))),
    "delivery-count-above-limit": (_share(lambda b: b.fetch("m1", {S: [(0, "v0", 6)]})),
                                   _share(lambda b: b.fetch("m1", {S: [(0, "v0", 5)]}))),
    "delivery-count-decrease": (_share(lambda b: _counts(b, 2, 1)), _share(lambda b: _counts(b, 2, 1, overlap=True))),
    "delivery-count-stall": (_share(lambda b: _counts(b, 1, 1)), _share(lambda b: _counts(b, 1, 1, overlap=True))),
    "spso-regression": (_share(lambda b: _spsos(b, False)), _share(lambda b: _spsos(b, True))),
    "acquired-below-spso": (_share(lambda b: _below_spso(b, False)), _share(lambda b: _below_spso(b, True))),
    "lost-record": (_share(lambda b: _lost_record(b, 1), delivery_limit=2),
                    _share(lambda b: _lost_record(b, 2), delivery_limit=2)),
    "unsettled": (_share(lambda b: _unsettled(b, None)), _share(lambda b: _unsettled(b, "info"))),
    "non-holder-ack": (_share(lambda b: _non_holder(b, False)), _share(lambda b: _non_holder(b, True))),
    # KIP-1289 (checkers.txn_share_rules)
    "aborted-ack-applied": (_txn_share([_stage(0), _end(10, False), _observe(20, "acknowledged")]),
                            _txn_share([_stage(0), _end(10, False), _observe(20, "archived")])),
    "pending-acquired": (_txn_share([_stage(0), _acquire(5), _end(10, True)]),
                         _txn_share([_stage(0), _end(2, None, ok=False), _acquire(5), _end(10, True)])),
    "pending-acquired-after-failover": (
        _txn_share([_stage(0), _failover(2), _acquire(5), _end(10, True)]),
        _txn_share([_stage(0), _failover(2), _release(3, ok=False), _acquire(5), _end(10, True)])),
    "committed-ack-lost": (_txn_share([_stage(0), _end(10, True), _acquire(20)]),
                           _txn_share([_stage(0), _end(10, True, ok=False), _acquire(20)])),
    "committed-ack-dropped-by-failover": (
        _txn_share([_stage(0), _failover(3), _end(10, True), _acquire(20)]),
        _txn_share([_stage(0), _failover(3), _end(10, True, ok=False), _acquire(20)])),
}


def _anomaly_types() -> set[str]:
    """Every type a checker can report, from the checkers' own tables."""
    return {*kq.ANOMALIES, *fencing.ANOMALIES, *share_group.ANOMALIES, *txn_share_rules.ANOMALIES}


def test_every_anomaly_type_has_a_pair():
    assert set(PAIRS) == _anomaly_types()


@pytest.mark.parametrize("kind", sorted(PAIRS))
def test_flagged_and_near_twin(kind):
    flagged, twin = PAIRS[kind]
    assert kind in flagged(), f"{kind}: the flagged history was not flagged"
    assert kind not in twin(), f"{kind}: the near twin was flagged"


# --------------------------------------------------------------------------- the issue-23 false alarm


def test_an_indeterminate_txn_is_demanded_once_proven_committed():
    """The skipped record's info transaction committed (its other write was read): now the
    skip is a real anomaly, and so is never seeing its write below a read offset."""
    b = HistoryBuilder()
    _int_poll_skip(b, "info-proven")
    assert "int-poll-skip" in kq.check(b.build()).counts
    b = HistoryBuilder()
    _info_with_offsets(b, 0, send(K, "a", offset=0), send(J, "d", offset=0))
    b.ok(0, send(K, "b", offset=1))
    b.ok(1, poll({K: [(1, "b")], J: [(0, "d")]}), f="poll")
    assert "lost-write" in kq.check(b.build()).counts


def test_the_issue_23_history_is_not_an_anomaly():
    """Three consumers and the final read skip an aborted record whose commit timed out: the
    verdict is not False (it may be unknown only if something else is undecided)."""
    b = HistoryBuilder()
    _abc(b, "info")
    for p in (1, 2):
        b.ok(p, poll({K: [(0, "a")]}), f="poll")
        b.ok(p, poll({K: [(2, "c")]}), f="poll")
    b.ok("final", poll({K: [(0, "a"), (2, "c")], J: []}), f="poll")
    result = kq.check(b.build())
    assert result.valid is True, result.to_dict()


def test_an_acknowledged_plain_send_of_an_info_op_is_committed():
    """A plain (non-transactional) send acknowledged with an offset is in the log whatever
    happened to the op's other sends: skipping it is an anomaly, unlike an info txn's."""
    b = HistoryBuilder()
    b.ok(0, send(K, "a", offset=0))
    _info_with_offsets(b, 0, send(K, "b", offset=1), send(J, "x"), f="send")
    b.ok(0, send(K, "c", offset=2))
    b.ok("final", poll({K: [(0, "a"), (2, "c")]}), f="poll")
    assert {"int-poll-skip", "lost-write"} <= set(kq.check(b.build()).counts)


def test_a_hijack_whose_init_is_indeterminate_fences_nobody():
    """A hijacker records its InitProducerId as its op: an info one may never have bumped
    the epoch, so the copier's later commit is no fenced-ok; an ok one fences it."""
    for outcome, expected in (("ok", {"fenced-ok"}), ("info", set())):
        b = HistoryBuilder()
        b.assign("copier-1", ["a-0"])
        b.complete(b.invoke("hijack-1", f="txn"), outcome, error=None if outcome == "ok" else "timeout")
        b.ok("copier-1", send("b-0", "y", offset=1))
        assert set(fencing.check(b.build(), {"t": ["copier-1", "hijack-1"]}).counts) == expected, outcome
