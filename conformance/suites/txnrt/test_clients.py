"""The draft's producer API with the reference TransactionalProducer:
begin_transaction(partitions) registers the output partitions when the transaction begins
(PREREG.*), follows the existing begin's rules (API.001), and meets the blocking add as one
round trip where today's client retries CONCURRENT_TRANSACTIONS. Transaction protocol v1:
under TV2 there is no client AddPartitionsToTxn to save (DIV-200205)."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode as E

from clients import wire
from conformance.suites.kip98.test_fencing import committed_values
from conformance.suites.kip1289 import wait_for
from reference_impl.client.transactional_producer import (
    IllegalTxnStateError, ProducerFencedError, TransactionalProducer,
)

MARKER_DELAY_MS = 1_500


def producer(rt, tid: str | None = None) -> TransactionalProducer:
    return TransactionalProducer(rt.target.bootstrap_servers, tid or rt.unique.transactional_id(),
                                 transaction_version=1, security=rt.target.raw_security())


def requests(p: TransactionalProducer, api: str, since: int = 0) -> list[dict]:
    return [e for e in p.history[since:] if e["type"] == "request" and e["api"] == api]


def named(event: dict) -> set[tuple[str, int]]:
    return {(t["name"], int(x)) for t in event["request"]["v3_and_below_topics"] for x in t["partitions"]}


def committed_offset(rt, group: str, topic: str) -> int | None:
    coord = rt.cc.coordinator_for(group, 0, wait_s=15)
    offset, _, code = wire.offset_fetch(coord, group, topic, [0], require_stable=True)[0]
    return offset if code == E.none else None


@pytest.mark.requirement("KIP-TXNRT.PREREG.001")
def test_begin_registers_the_output_partitions_in_one_request(rt):
    """begin_transaction({P0, P1}) sends one AddPartitionsToTxn naming both before returning;
    sending to P0 and P1 and committing sends no other, and both records commit."""
    out = rt.topic(2)
    with producer(rt) as p:
        p.init_transactions()
        p.begin_transaction([(out, 0), (out, 1)])
        at_begin = requests(p, "AddPartitionsToTxn")
        assert len(at_begin) == 1 and named(at_begin[0]) == {(out, 0), (out, 1)}, at_begin
        assert at_begin[0]["error_code"] == E.none and not requests(p, "Produce")
        p.send(out, 0, "a")
        p.send(out, 1, "b")
        p.commit_transaction()
        assert requests(p, "AddPartitionsToTxn") == at_begin
    wait_for(lambda: committed_values(rt.cc, out, 0) == ["a"] and committed_values(rt.cc, out, 1) == ["b"],
             "the committed records")


def read_process_write(rt, src: str, out: str, group: str, pre_register_first: bool) -> None:
    """One transaction of the draft's EOS loop over a fixed input of 6 values at input
    offsets 0-5: output partition = value length % 2, offsets committed to 6."""
    inputs = [f"v{'x' * i}" for i in range(6)]
    with producer(rt) as p:
        p.init_transactions()
        inferred = {(out, len(v) % 2) for v in inputs}
        if pre_register_first:
            p.begin_transaction(inferred)
        processed = [(len(v) % 2, v.upper()) for v in inputs]
        if not pre_register_first:
            p.begin_transaction({(out, part) for part, _ in processed})
        for part, value in processed:
            p.send(out, part, value)
        p.send_offsets_to_transaction({(src, 0): 6}, group)
        p.commit_transaction()


@pytest.mark.requirement("KIP-TXNRT.PREREG.002")
def test_pre_registering_before_or_after_processing_commits_the_same(rt):
    """The same input through the loop with begin_transaction(partitions) before processing
    and after it: the same read_committed output per partition and the same committed offset."""
    results, src = [], rt.topic(1)
    for first in (True, False):
        out, group = rt.topic(2), rt.unique.group()
        read_process_write(rt, src, out, group, first)
        results.append(wait_for(
            lambda: (lambda r: r if all(v is not None for v in r[2:]) and r[0] else None)(
                (committed_values(rt.cc, out, 0), committed_values(rt.cc, out, 1),
                 committed_offset(rt, group, src))),
            "the committed output and offsets"))
    assert results[0] == results[1], results
    assert results[0][2] == 6 and sorted(results[0][0] + results[0][1]) == sorted(f"V{'X' * i}" for i in range(6))


@pytest.mark.requirement("KIP-TXNRT.PREREG.003")
def test_offsets_and_unlisted_partitions_can_still_join(rt):
    """begin_transaction({P0}), send to P0 and to the unlisted P1, send offsets, commit: the
    group joins with AddOffsetsToTxn (NONE), P1 alone is added on the fly (DIV-200204), and
    output and offsets commit together."""
    src, out, group = rt.topic(1), rt.topic(2), rt.unique.group()
    with producer(rt) as p:
        p.init_transactions()
        p.begin_transaction([(out, 0)])
        p.send(out, 0, "listed")
        p.send(out, 1, "unlisted")
        p.send_offsets_to_transaction({(src, 0): 42}, group)
        p.commit_transaction()
        adds = requests(p, "AddPartitionsToTxn")
        assert [named(e) for e in adds] == [{(out, 0)}, {(out, 1)}], adds
        assert [e["error_code"] for e in requests(p, "AddOffsetsToTxn")] == [E.none]
    wait_for(lambda: committed_offset(rt, group, src) == 42, "the committed offset")
    assert committed_values(rt.cc, out, 0) == ["listed"] and committed_values(rt.cc, out, 1) == ["unlisted"]


@pytest.mark.requirement("KIP-TXNRT.PREREG.004")
def test_pre_registration_needs_no_blocking_support(rt):
    """With the blocking level lowered to 0 (a broker with only the pre-draft behaviour),
    begin_transaction(partitions) still sends one AddPartitionsToTxn naming every listed
    partition, answered NONE, and the transaction commits."""
    out = rt.topic(2)
    rt.level(0)
    try:
        with producer(rt) as p:
            p.init_transactions()
            p.begin_transaction([(out, 0), (out, 1)])
            adds = requests(p, "AddPartitionsToTxn")
            assert [(named(e), e["error_code"]) for e in adds] == [({(out, 0), (out, 1)}, E.none)], adds
            p.send(out, 1, "x")
            p.commit_transaction()
    finally:
        rt.level(1)
    wait_for(lambda: committed_values(rt.cc, out, 1) == ["x"], "the committed record")


def next_begin_adds(rt) -> list[dict]:
    """Commit one transaction while its markers are held back (conftest.MarkerWindow), then
    begin the next with pre-registration at once: the AddPartitionsToTxn requests that begin
    sent."""
    h = rt.held()
    with h.window, producer(rt, h.tid) as p:
        p.init_transactions()
        p.begin_transaction([(h.topic, h.partition)])
        p.send(h.topic, h.partition, "one")
        p.flush()
        h.window.open(MARKER_DELAY_MS)
        p.commit_transaction()
        since = len(p.history)
        p.begin_transaction([(h.topic, h.other)])
        adds = requests(p, "AddPartitionsToTxn", since)
        p.abort_transaction()
        return adds


@pytest.mark.requirement("KIP-TXNRT.BLOCK.001", "KIP-TXNRT.COMPAT.001")
def test_blocking_add_is_one_round_trip_where_today_retries(rt):
    """Right after a commit whose markers are held back: at level 1 the next begin sends
    exactly one AddPartitionsToTxn, answered NONE; at level 0 the same client meets
    CONCURRENT_TRANSACTIONS and retries until NONE (today's behaviour). The window is a held
    partition leader on 2+ brokers, the reference's marker delay on one node."""
    held = next_begin_adds(rt)
    assert [e["error_code"] for e in held] == [E.none], held
    rt.level(0)
    try:
        retried = next_begin_adds(rt)
    finally:
        rt.level(1)
    codes = [e["error_code"] for e in retried]
    assert len(codes) >= 2 and set(codes[:-1]) == {E.concurrent_transactions} and codes[-1] == E.none, codes


@pytest.mark.requirement("KIP-TXNRT.API.001")
def test_pre_registering_begin_keeps_the_begin_rules(rt):
    """Before init_transactions: IllegalTxnStateError and nothing sent. Fenced by a second
    instance with the same transactional id: ProducerFencedError from the begin itself."""
    out = rt.topic(1)
    tid = rt.unique.transactional_id()
    with producer(rt, tid) as a, producer(rt, tid) as b:
        with pytest.raises(IllegalTxnStateError):
            a.begin_transaction([(out, 0)])
        assert not [e for e in a.history if e["type"] == "request"]
        a.init_transactions()
        b.init_transactions()
        with pytest.raises(ProducerFencedError):
            a.begin_transaction([(out, 0)])
        assert [e["error_code"] for e in requests(a, "AddPartitionsToTxn")] == [E.producer_fenced]
