"""checkers.fencing: a zombie's transaction invoked after the new instance
initialised must not commit; one in flight across the fence may. The same rule judges
trace epochs (replay's TXN.FENCED_SUCCEEDED) and KIP-447 group generations."""

from checkers.fencing import check, fenced_ok_cases, stale_generation_cases
from rules.fencing import Grant, Use, epoch_supersedes, fenced_ok
from checkers.requirements import requirements_of
from checkers.history import HistoryBuilder, from_json, offsets, send, strip_results, to_json


def test_zombie_commit_after_the_fence_is_an_anomaly():
    b = HistoryBuilder()
    b.ok("copier-1", send("b-0", "x", offset=0))
    b.assign("copier-2", ["a-0"])          # copier-2 initialised: copier-1 is fenced
    b.ok("copier-1", send("b-0", "y", offset=1))   # ...and still committed
    h = b.build()
    errs = fenced_ok_cases(h, {"t": ["copier-1", "copier-2"]})
    assert [e["type"] for e in errs] == ["fenced-ok"] and errs[0]["process"] == "copier-1"
    assert check(h, {"t": ["copier-1", "copier-2"]}).valid is False


def test_a_commit_in_flight_across_the_fence_is_allowed():
    b = HistoryBuilder()
    inv = b.invoke("copier-1", send("b-0", "x"))
    b.assign("copier-2", ["a-0"])
    b.complete(inv, "ok", send("b-0", "x", offset=0))
    h = b.build()
    assert fenced_ok_cases(h, {"t": ["copier-1", "copier-2"]}) == []
    assert check(h, {"t": ["copier-1", "copier-2"]}).valid is True


def test_a_failed_zombie_txn_is_fine():
    b = HistoryBuilder()
    b.assign("copier-2", ["a-0"])
    b.fail("copier-1", send("b-0", "y"), error="PRODUCER_FENCED")
    assert fenced_ok_cases(b.build(), {"t": ["copier-1", "copier-2"]}) == []


def test_a_late_first_op_of_an_older_incarnation_does_not_unfence():
    b = HistoryBuilder()
    b.assign("copier-3", ["a-0"])                    # the newest instance is up: 1 and 2 fenced
    b.ok("copier-2", send("b-0", "z", offset=0))   # copier-2's first op, after the fence
    errs = fenced_ok_cases(b.build(), {"t": ["copier-1", "copier-2", "copier-3"]})
    assert [(e["process"], e["fenced-by"]) for e in errs] == [("copier-2", "copier-3")]


# --------------------------------------------------------------------------- the shared rule

def test_epoch_rule_matches_the_trace_semantics():
    steps = [Grant((7, 0), at=10), Use((7, 0), at=11, ok=True), Grant((7, 1), at=20),
             Use((7, 0), at=15, ok=True),   # sent before the bump was known: allowed
             Use((7, 0), at=21, ok=True),   # sent after: fenced
             Use((7, 0), at=22, ok=False),  # refused: fine
             Grant((8, 0), at=30), Use((7, 1), at=31, ok=True)]  # an earlier producer id
    got = [(u.holder, u.at, g.holder) for u, g in fenced_ok(steps, epoch_supersedes)]
    assert got == [((7, 0), 21, (7, 1)), ((7, 1), 31, (8, 0))]


# --------------------------------------------------------------------------- KIP-447

def _txn_with_offsets(b, process, generation, type_="ok"):
    mops = (send("b-0", f"v{generation}"), offsets("g", generation, f"m-{process}", {"a-0": generation}))
    return getattr(b, type_)(process, *mops)


def test_stale_generation_commit_that_succeeded_is_flagged():
    b = HistoryBuilder()
    _txn_with_offsets(b, "c1", 1)
    _txn_with_offsets(b, "c2", 2)          # c2 joined generation 2: c1 is a zombie now
    _txn_with_offsets(b, "c1", 1)          # ...whose TxnOffsetCommit still got an ok
    h = b.build()
    errs = stale_generation_cases(h)
    assert [(e["type"], e["generation"], e["current-generation"]) for e in errs] == [("stale-generation-ok", 1, 2)]
    r = check(h, {})
    assert r.valid is False
    assert requirements_of("stale-generation-ok") == ["KIP-447.FENCE.002", "KIP-447.FENCE.006"]


def test_stale_generation_commit_that_was_refused_or_in_flight_is_fine():
    b = HistoryBuilder()
    _txn_with_offsets(b, "c1", 1)
    inv = b.invoke("c1", send("b-0", "x"), offsets("g", 1, "m-c1", {"a-0": 5}))  # in flight across the rebalance
    _txn_with_offsets(b, "c2", 2)
    b.complete(inv, "ok", send("b-0", "x", offset=1), offsets("g", 1, "m-c1", {"a-0": 5}))
    b.fail("c1", send("b-0", "y"), offsets("g", 1, "m-c1", {"a-0": 6}), error="ILLEGAL_GENERATION")
    h = b.build()
    assert stale_generation_cases(h) == []
    assert check(h, {}).valid is True


def test_offsets_micro_op_round_trips_and_strips():
    b = HistoryBuilder()
    _txn_with_offsets(b, "c1", 3)
    h = from_json(to_json(b.build()))
    assert h[1].value[1] == ["offsets", "g", 3, "m-c1", {"a-0": 3}]
    assert strip_results(h[1].value)[1] == h[1].value[1]
