"""Each `kipcheck check` rule on tiny hand-written traces (pure checker): one trace that
must trigger it, one that must not. Rows are built with every trace column."""

from __future__ import annotations

import json

import pytest

from replay import trace_schema as ts
from replay.check_pure import check_rows
from replay.entity_replay import CheckConfig

ORD = "00000000-0000-0000-0000-0000000000aa"
JOBS = "00000000-0000-0000-0000-0000000000bb"


class Trace:
    """Rows in seq order; time advances 10 ms per row (or `at` ms when given)."""

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.t = 1_000_000

    def add(self, api: int, *, at: int | None = None, req: dict | None = None, resp: dict | None = None,
            conn: int = 1, **cols) -> int:
        self.t = at if at is not None else self.t + 10
        seq = len(self.rows) + 1
        r = {name: None for name in ts.COLUMN_NAMES}
        for name in ("error_codes", "partitions", "batches", "acquired_records", "acknowledgement_batches",
                     "aborted_transactions"):
            r[name] = []
        r.update(kind="exchange", seq=seq, api_key=api, api_name=f"api{api}", api_version=0, status="ok",
                 request_mono_ns=self.t * 1_000_000, response_mono_ns=(self.t + 1) * 1_000_000,
                 request_wall_ms=self.t, response_wall_ms=self.t + 1, connection_id=conn, upstream="b1:9092",
                 request_json=json.dumps(req or {}), response_json=json.dumps(resp or {}))
        r.update(cols)
        self.rows.append(r)
        return seq

    def found(self, cfg: CheckConfig | None = None) -> set[tuple[str, int]]:
        return {(v["rule_id"], v["seq"]) for v in check_rows(self.rows, cfg)}


def part(side, topic=None, tid=None, p=0, **kw):
    d = {"side": side, "topic": topic, "topic_id": tid, "partition": p, "error_code": kw.pop("error_code", None)}
    for n in ("fetch_offset", "base_offset", "committed_offset", "offset", "high_watermark", "last_stable_offset",
              "log_start_offset", "leader_epoch"):
        d[n] = kw.get(n)
    return d


def batch(side, base, last, pid=-1, txn=False, control=False, topic=None, tid=None, p=0):
    return {"side": side, "topic": topic, "topic_id": tid, "partition": p, "base_offset": base, "last_offset": last,
            "base_sequence": 0, "producer_id": pid, "producer_epoch": 0, "record_count": last - base + 1,
            "transactional": txn, "control": control, "compression": 0}


# ----------------------------------------------------------------------------- transactions


def init(t: Trace, pid: int, epoch: int, tx: str = "tx") -> int:
    return t.add(22, transactional_id=tx, producer_id=pid, producer_epoch=epoch, error_code=0,
                 req={"transactional_id": tx, "producer_id": -1, "producer_epoch": -1},
                 resp={"error_code": 0, "producer_id": pid, "producer_epoch": epoch})


def txn_call(t: Trace, api: int, pid: int, epoch: int, error: int = 0, tx: str = "tx", **kw) -> int:
    return t.add(api, transactional_id=tx, producer_id=pid, producer_epoch=epoch, error_code=error,
                 error_codes=[error] if error else [], **kw)


@pytest.mark.parametrize("second_epoch, flagged", [(1, False), (0, True)])
def test_epoch_must_grow_on_reinit(second_epoch, flagged):
    t = Trace()
    init(t, 7, 0)
    s = init(t, 7, second_epoch)
    assert (("TXN.EPOCH_REGRESSED", s) in t.found()) is flagged


def test_epoch_bump_by_end_txn_v5_counts_as_a_grant():
    t = Trace()
    init(t, 7, 3)
    t.add(26, transactional_id="tx", producer_id=7, producer_epoch=3, error_code=0,
          req={"committed": True}, resp={"error_code": 0, "producer_id": 7, "producer_epoch": 4})
    late = txn_call(t, 24, 7, 3)  # the old epoch after the bump succeeded
    assert t.found() == {("TXN.FENCED_SUCCEEDED", late)}


@pytest.mark.parametrize("error, flagged", [(90, False), (0, True)])
def test_fenced_producer_never_succeeds(error, flagged):
    t = Trace()
    init(t, 7, 0)
    txn_call(t, 24, 7, 0)
    init(t, 7, 1)
    zombie = txn_call(t, 25, 7, 0, error=error)
    txn_call(t, 26, 7, 1, req={"committed": True})
    assert t.found() == ({("TXN.FENCED_SUCCEEDED", zombie)} if flagged else set())


def test_request_sent_before_the_grant_answered_is_not_fenced():
    t = Trace()
    init(t, 7, 0)
    t.add(22, at=t.t + 10, transactional_id="tx", producer_id=7, producer_epoch=1, error_code=0,
          resp={"error_code": 0, "producer_id": 7, "producer_epoch": 1})
    # sent before the new epoch's response arrived (its response came later)
    t.add(25, at=t.t - 5, transactional_id="tx", producer_id=7, producer_epoch=0, error_code=0)
    assert t.found() == set()


# ----------------------------------------------------------------------------- fetch


def produce_txn(t: Trace, pid: int, base: int, n: int, tx: str = "tx", p: int = 0) -> int:
    return txn_call(t, 0, pid, 0, tx=tx, batches=[batch("request", 0, n - 1, pid, True, topic="orders", p=p)],
                    partitions=[part("request", "orders", p=p), part("response", "orders", p=p, error_code=0, base_offset=base)])


def rc_fetch(t: Trace, batches, lso: int, aborted=(), isolation: int = 1) -> int:
    return t.add(1, error_code=0, req={"isolation_level": isolation},
                 partitions=[part("response", None, ORD, 0, error_code=0, high_watermark=100, last_stable_offset=lso)],
                 batches=[dict(b, topic_id=ORD) for b in batches],
                 aborted_transactions=[{"topic": None, "topic_id": ORD, "partition": 0, "producer_id": pid,
                                        "first_offset": f} for pid, f in aborted])


def metadata(t: Trace) -> None:
    t.add(3, partitions=[part("response", "orders", ORD, 0)])


@pytest.mark.parametrize("last, isolation, flagged", [(9, 1, False), (10, 1, True), (10, 0, False)])
def test_read_committed_fetch_stops_before_the_lso(last, isolation, flagged):
    t = Trace()
    s = rc_fetch(t, [batch("response", 5, last)], lso=10, isolation=isolation)
    assert (("FETCH.BEYOND_LSO", s) in t.found()) is flagged


@pytest.mark.parametrize("listed, flagged", [(True, False), (False, True)])
def test_aborted_data_must_be_listed(listed, flagged):
    t = Trace()
    metadata(t)
    init(t, 7, 0)
    produce_txn(t, 7, 0, 3)
    txn_call(t, 26, 7, 0, req={"committed": False})
    s = rc_fetch(t, [batch("response", 0, 2, 7, True), batch("response", 3, 3, 7, True, True)], lso=4,
                 aborted=[(7, 0)] if listed else [])
    assert t.found() == ({("FETCH.ABORTED_UNLISTED", s)} if flagged else set())


def test_committed_data_needs_no_listing():
    t = Trace()
    metadata(t)
    init(t, 7, 0)
    produce_txn(t, 7, 0, 3)
    txn_call(t, 26, 7, 0, req={"committed": True})
    rc_fetch(t, [batch("response", 0, 2, 7, True)], lso=4)
    assert t.found() == set()


# ----------------------------------------------------------------------------- group offsets


def offset_fetch(t: Trace, value: int, group: str = "g") -> int:
    return t.add(9, group_id=group, partitions=[part("response", "in", p=0, error_code=0, committed_offset=value)])


@pytest.mark.parametrize("commit, shown, flagged", [(True, 10, False), (False, 10, True), (False, 5, False)])
def test_transactional_offsets_appear_after_the_commit_only(commit, shown, flagged):
    t = Trace()
    init(t, 7, 0)
    t.add(8, group_id="g", partitions=[part("request", "in", committed_offset=5)])
    txn_call(t, 28, 7, 0, group_id="g", partitions=[part("request", "in", committed_offset=10)])
    early = offset_fetch(t, 5)  # before EndTxn: the old value
    txn_call(t, 26, 7, 0, req={"committed": commit})
    after = offset_fetch(t, shown)
    assert early and t.found() == ({("TXN.OFFSETS_BEFORE_MARKER", after)} if flagged else set())


def test_pending_transactional_offset_before_end_txn_is_flagged():
    t = Trace()
    init(t, 7, 0)
    txn_call(t, 28, 7, 0, group_id="g", partitions=[part("request", "in", committed_offset=10)])
    early = offset_fetch(t, 10)
    txn_call(t, 26, 7, 0, req={"committed": True})
    offset_fetch(t, 10)
    assert t.found() == {("TXN.OFFSETS_BEFORE_MARKER", early)}


# ----------------------------------------------------------------------------- share groups


def share(t: Trace, api: int, member: str, epoch: int, acquired=(), acks=(), error: int = 0, at: int | None = None,
          conn: int | None = None) -> int:
    return t.add(api, at=at, conn=conn or (1 if member == "a" else 2), group_id="sg", member_id=member,
                 share_session_epoch=epoch, error_code=error, error_codes=[error] if error else [],
                 acquired_records=[{"topic_id": JOBS, "partition": 0, "first_offset": f, "last_offset": l,
                                    "delivery_count": c} for f, l, c in acquired],
                 acknowledgement_batches=[{"side": "request", "topic_id": JOBS, "partition": 0, "first_offset": f,
                                           "last_offset": l, "acknowledge_types": list(ty)} for f, l, ty in acks])


def test_clean_share_flow_has_no_violation():
    t = Trace()
    share(t, 78, "a", 0, acquired=[(0, 9, 1)])
    share(t, 78, "b", 0, acquired=[(10, 19, 1)])
    share(t, 78, "a", 1, acks=[(0, 9, [1] * 3 + [2] + [1] * 6)], acquired=[(20, 29, 1)])
    share(t, 78, "b", 1, acks=[(10, 19, [3])], acquired=[(3, 3, 2)])
    share(t, 79, "b", 2, acks=[(3, 3, [1])])
    share(t, 79, "a", 2, acks=[(20, 29, [1])])
    share(t, 79, "a", -1)
    share(t, 79, "b", -1)
    assert t.found() == set()


@pytest.mark.parametrize("gap_ms, flagged", [(1_000, True), (31_000, False)])
def test_no_double_acquisition_within_the_lock(gap_ms, flagged):
    t = Trace()
    share(t, 78, "a", 0, acquired=[(0, 4, 1)])
    s = share(t, 78, "b", 0, acquired=[(0, 4, 2)], at=t.t + gap_ms)
    assert t.found() == ({("SHARE.DOUBLE_ACQUIRE", s)} if flagged else set())


def test_released_by_session_close_may_go_to_another_member():
    t = Trace()
    share(t, 78, "a", 0, acquired=[(0, 4, 1)])
    share(t, 78, "a", -1)
    share(t, 78, "b", 0, acquired=[(0, 4, 2)])
    assert t.found() == set()


@pytest.mark.parametrize("count, flagged", [(2, False), (5, False), (6, True)])
def test_delivery_count_limit(count, flagged):
    t = Trace()
    share(t, 78, "a", 0, acquired=[(0, 0, 1)])
    share(t, 78, "a", 1, acks=[(0, 0, [2])])
    s = share(t, 78, "a", 2, acquired=[(0, 0, count)])
    assert t.found() == ({("SHARE.DELIVERY_COUNT", s)} if flagged else set())


def test_delivery_count_never_goes_backwards():
    t = Trace()
    share(t, 78, "a", 0, acquired=[(0, 0, 3)])
    share(t, 78, "a", 1, acks=[(0, 0, [2])])
    s = share(t, 78, "a", 2, acquired=[(0, 0, 2)])
    assert t.found() == {("SHARE.DELIVERY_COUNT", s)}


def test_delivery_limit_is_configurable():
    t = Trace()
    s = share(t, 78, "a", 0, acquired=[(0, 0, 4)])
    assert t.found(CheckConfig(delivery_count_limit=3)) == {("SHARE.DELIVERY_COUNT", s)}
    assert t.found() == set()


@pytest.mark.parametrize("ack_type, flagged", [(1, True), (3, True), (2, False)])
def test_accepted_or_rejected_records_are_never_delivered_again(ack_type, flagged):
    t = Trace()
    share(t, 78, "a", 0, acquired=[(0, 1, 1)])
    share(t, 78, "a", 1, acks=[(0, 0, [ack_type])])
    s = share(t, 78, "b", 0, acquired=[(0, 0, 2)], at=t.t + 40_000)
    assert t.found() == ({("SHARE.REDELIVERED_FINAL", s)} if flagged else set())


def test_ack_of_records_held_by_another_member_must_fail():
    t = Trace()
    share(t, 78, "a", 0, acquired=[(0, 4, 1)])
    ok = share(t, 79, "b", 1, acks=[(0, 0, [1])])
    refused = share(t, 79, "b", 2, acks=[(1, 1, [1])], error=0)
    found = t.found()
    assert ("SHARE.ACK_NOT_HELD", ok) in found and ("SHARE.ACK_NOT_HELD", refused) in found


def test_ack_after_the_lock_expired_must_fail():
    t = Trace()
    share(t, 78, "a", 0, acquired=[(0, 4, 1)])
    late = share(t, 79, "a", 1, acks=[(0, 4, [1])], at=t.t + 31_000)
    assert t.found() == {("SHARE.ACK_NOT_HELD", late)}
    assert Trace.found(t, CheckConfig(lock_duration_ms=60_000)) == set()


def test_failed_acks_change_nothing():
    t = Trace()
    share(t, 78, "a", 0, acquired=[(0, 4, 1)])
    share(t, 79, "b", 1, acks=[(0, 4, [1])], error=0)
    t.rows[-1]["error_codes"] = [121]  # INVALID_RECORD_STATE for the partition: nothing applied
    share(t, 79, "a", 1, acks=[(0, 4, [1])])
    assert t.found() == set()


def spso(t: Trace, value: int) -> int:
    doc = {"groups": [{"group_id": "sg", "topics": [{"topic_id": JOBS, "partitions": [
        {"partition_index": 0, "start_offset": value, "error_code": 0}]}]}]}
    return t.add(90, group_id="sg", resp=doc)


@pytest.mark.parametrize("second, flagged", [(12, False), (10, False), (8, True)])
def test_spso_never_moves_backwards(second, flagged):
    t = Trace()
    spso(t, 10)
    s = spso(t, second)
    assert t.found() == ({("SHARE.SPSO_REGRESSED", s)} if flagged else set())


@pytest.mark.parametrize("epochs, errors, flagged_at", [
    ([0, 1, 2, -1], [0, 0, 0, 0], None),
    ([0, 1, 3], [0, 0, 0], 2),  # skipped epoch accepted
    ([0, 1, 1], [0, 0, 123], None),  # repeated epoch refused: right
    ([0, 1, 2], [0, 0, 123], 2),  # right epoch refused
    ([0, 1, -1, 1], [0, 0, 0, 0], 3),  # incremental after close accepted
])
def test_share_session_epoch_table(epochs, errors, flagged_at):
    t = Trace()
    seqs = [share(t, 78, "a", e, error=err) for e, err in zip(epochs, errors)]
    want = {("SHARE.SESSION_EPOCH", seqs[flagged_at])} if flagged_at is not None else set()
    assert t.found() == want


def test_session_open_with_acks_or_by_share_acknowledge_is_refused():
    t = Trace()
    share(t, 78, "a", 0, acquired=[(0, 0, 1)])
    bad_open = share(t, 78, "a", 0, acks=[(0, 0, [1])])
    ack_open = share(t, 79, "b", 0)
    found = t.found()
    assert ("SHARE.SESSION_EPOCH", bad_open) in found and ("SHARE.SESSION_EPOCH", ack_open) in found


def test_session_started_before_the_trace_is_learnt_not_judged():
    t = Trace()
    share(t, 78, "a", 5)
    share(t, 79, "a", 6)
    share(t, 78, "a", -1)
    assert t.found() == set()


def test_session_not_found_on_a_new_connection_is_believed():
    t = Trace()
    share(t, 78, "a", 0, conn=1)
    share(t, 78, "a", 1, conn=1)
    share(t, 78, "a", 2, conn=9, error=122)  # the first connection closed: its session went with it
    share(t, 78, "a", 0, conn=9)
    assert t.found() == set()
