"""chaos.checkers.fencing: a zombie's transaction invoked after the new instance
initialised must not commit; one in flight across the fence may."""

from chaos.checkers.fencing import check, fenced_ok_cases
from chaos.history import HistoryBuilder, send


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
