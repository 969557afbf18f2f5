"""KIP-98 commit/abort visibility and the last stable offset.

Wire level (raw client, transaction protocol v1): an open transaction holds the LSO back,
read_committed Fetch and ListOffsets stop there, aborted transactions are listed, markers
are control batches. Client level: confluent-kafka (TV1) and the reference client (TV1,
and TV2 where the target finalizes transaction.version >= 2) write committed, aborted and
non-transactional data; confluent-kafka and reference consumers read it at both isolation
levels.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import KafkaException, Producer as CKProducer
from confluent_kafka import TopicPartition

from clients import confluent, wire
from clients.txn import (
    add_partitions_ok, add_partitions_settled, end_txn_ok, end_txn_settled, init_ok, init_producer_id_settled,
    produce_txn_ok,
)
from conformance.suites import require_feature
from conformance.suites.kip98 import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    batch_summary,
    create_ready_topic,
    fetch_all,
    idem_batch,
    log_end,
    plain_batch,
    require_transactions,
    values,
    wait_stable,
)
from conformance.suites.kip98.test_fencing import batch_summary as unverified_batches
from targets.target import NotSupportedByTarget
from reference_impl.client.consumer import Consumer as RefConsumer
from reference_impl.client.consumer import filter_batches
from reference_impl.client.transactional_producer import TransactionalProducer

_CACHE: dict[tuple[str, int], Any] = {}


def _run_once(differential, scenario, requirement: str, **kwargs: Any):
    """Run a scenario once per target and module; the tests checking different
    requirements of the same history share it (divergences go to the first test's row)."""
    key = (scenario.__name__, id(differential.target))
    if key not in _CACHE:
        try:
            _CACHE[key] = differential.run(scenario, requirement=requirement, **kwargs)
        except NotSupportedByTarget as exc:
            _CACHE[key] = exc
    got = _CACHE[key]
    if isinstance(got, NotSupportedByTarget):
        raise NotSupportedByTarget(str(got))
    return got


def _visible(data: bytes, level: int, aborted: list[tuple[int, int]]) -> list[list[Any]]:
    """[offset, value] a consumer returns from raw fetched data (Kafka's client filter)."""
    recs, _, _ = filter_batches(("t", 0), data, 0, level, aborted)
    return [[r.offset, r.value.decode()] for r in recs]


def _aborted_view(aborted: list[tuple[int, int]]) -> list[dict[str, int]]:
    return [{"producer_id": pid, "first_offset": first} for pid, first in aborted]


# ============================================================================== wire level


def wire_history_scenario(target, ids):
    """n0 n1 | T(open) t2 t3 t4 | n5 n6 | abort (marker 7) | T c8 c9 | n10 | commit (marker 11)."""
    require_transactions(target.capabilities())
    topic, tid = ids.topic(), ids.transactional_id()
    obs: dict[str, Any] = {}
    with wire.cluster_client(target) as cc:
        create_ready_topic(target, cc, topic)
        leader = cc.leader_for(topic, 0)
        coord, init = init_producer_id_settled(cc, tid)
        assert int(init.error_code) == 0, f"InitProducerId({tid}) failed: {int(init.error_code)}"
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        obs["produce"] = [int(wire.produce(leader, topic, 0, plain_batch(["n0", "n1"])).error_code)]
        _, obs["add1"] = add_partitions_settled(coord, tid, pid, epoch, topic, [0])
        t1 = wire.produce(leader, topic, 0, idem_batch(["t2", "t3", "t4"], pid, epoch, 0, transactional=True), transactional_id=tid)
        obs["produce"].append(int(t1.error_code))
        obs["produce"].append(int(wire.produce(leader, topic, 0, plain_batch(["n5", "n6"])).error_code))

        rc = fetch_all(cc, leader, topic, 0, READ_COMMITTED)
        ru = fetch_all(cc, leader, topic, 0, READ_UNCOMMITTED)
        obs["open"] = {
            "high_watermark": log_end(leader, topic),
            "list_offsets_rc": log_end(leader, topic, 0, READ_COMMITTED),
            "fetch_rc_lso": rc["last_stable_offset"],
            "fetch_rc_hw": rc["high_watermark"],
            "fetch_rc_offsets": [o for o, _ in _visible(rc["records"], READ_UNCOMMITTED, [])],
            "fetch_ru_offsets": [o for o, _ in _visible(ru["records"], READ_UNCOMMITTED, [])],
        }

        obs["abort"] = int(end_txn_settled(coord, tid, pid, epoch, False)[1].error_code)
        hw, lso = wait_stable(leader, topic, at_least=8)
        rc = fetch_all(cc, leader, topic, 0, READ_COMMITTED)
        ru = fetch_all(cc, leader, topic, 0, READ_UNCOMMITTED)
        obs["after_abort"] = {
            "high_watermark": hw,
            "list_offsets_rc": lso,
            "fetch_rc_lso": rc["last_stable_offset"],
            "aborted_rc": _aborted_view(rc["aborted"]),
            "aborted_ru": _aborted_view(ru["aborted"]),
            "visible_rc": _visible(rc["records"], READ_COMMITTED, rc["aborted"]),
            "visible_ru": _visible(ru["records"], READ_UNCOMMITTED, []),
        }

        # The next transaction of the same producer (TV1: same epoch, sequences continue).
        _, obs["add2"] = add_partitions_settled(coord, tid, pid, epoch, topic, [0])
        t2 = wire.produce(leader, topic, 0, idem_batch(["c8", "c9"], pid, epoch, 3, transactional=True), transactional_id=tid)
        obs["produce"].append(int(t2.error_code))
        obs["produce"].append(int(wire.produce(leader, topic, 0, plain_batch(["n10"])).error_code))
        obs["open2"] = {
            "high_watermark": log_end(leader, topic),
            "list_offsets_rc": log_end(leader, topic, 0, READ_COMMITTED),
            "visible_rc": _visible(fetch_all(cc, leader, topic, 0, READ_COMMITTED)["records"], READ_COMMITTED, rc["aborted"]),
        }
        obs["commit"] = int(end_txn_settled(coord, tid, pid, epoch, True)[1].error_code)
        hw, lso = wait_stable(leader, topic, at_least=12)
        rc = fetch_all(cc, leader, topic, 0, READ_COMMITTED)
        ru = fetch_all(cc, leader, topic, 0, READ_UNCOMMITTED)
        obs["final"] = {
            "high_watermark": hw,
            "list_offsets_rc": lso,
            "fetch_rc_lso": rc["last_stable_offset"],
            "aborted_rc": _aborted_view(rc["aborted"]),
            "aborted_ru": _aborted_view(ru["aborted"]),
            "visible_rc": _visible(rc["records"], READ_COMMITTED, rc["aborted"]),
            "visible_ru": _visible(ru["records"], READ_UNCOMMITTED, []),
            "batches": batch_summary(ru["records"]),
            "bad_crc_batches": ru["bad_crc_batches"],
            "producer_id": pid,
        }
    return obs


def _wire(differential, requirement):
    obs = _run_once(differential, wire_history_scenario, requirement).target
    assert obs["produce"] == [0, 0, 0, 0, 0], f"produce errors {obs['produce']}"
    assert obs["add1"] == {0: 0} and obs["add2"] == {0: 0}, f"AddPartitionsToTxn {obs['add1']} {obs['add2']}"
    assert obs["abort"] == 0 and obs["commit"] == 0, f"EndTxn abort {obs['abort']}, commit {obs['commit']}"
    return obs


@pytest.mark.requirement("KIP-98.LSO.001")
def test_open_transaction_holds_back_the_lso(differential):
    obs = _wire(differential, "KIP-98.LSO.001")
    o = obs["open"]
    assert o["high_watermark"] == 7
    assert o["fetch_rc_lso"] == 2, "Fetch LastStableOffset must be the open transaction's first offset"
    # released by abort, and by commit
    assert obs["after_abort"]["high_watermark"] == 8 and obs["after_abort"]["fetch_rc_lso"] == 8
    assert obs["final"]["high_watermark"] == 12 and obs["final"]["fetch_rc_lso"] == 12


@pytest.mark.requirement("KIP-98.LSO.004")
def test_list_offsets_latest_at_read_committed_answers_the_lso(differential):
    obs = _wire(differential, "KIP-98.LSO.004")
    assert obs["open"]["list_offsets_rc"] == 2, "ListOffsets latest at read_committed must answer the LSO"
    assert obs["open2"]["list_offsets_rc"] == 8 and obs["open2"]["high_watermark"] == 11
    assert obs["after_abort"]["list_offsets_rc"] == 8
    assert obs["final"]["list_offsets_rc"] == 12


@pytest.mark.requirement("KIP-98.LSO.002")
def test_read_committed_fetch_stops_at_the_lso(differential):
    obs = _wire(differential, "KIP-98.LSO.002")
    assert obs["open"]["fetch_rc_offsets"] == [0, 1], "read_committed Fetch returned records at/after the LSO"
    assert obs["open2"]["visible_rc"] == [[0, "n0"], [1, "n1"], [5, "n5"], [6, "n6"]], (
        "the later non-transactional record must stay invisible while the transaction is open"
    )


@pytest.mark.requirement("KIP-98.FETCH.001")
def test_isolation_level_selects_the_upper_bound(differential):
    obs = _wire(differential, "KIP-98.FETCH.001")
    assert obs["open"]["fetch_rc_offsets"] == [0, 1]
    assert obs["open"]["fetch_ru_offsets"] == list(range(7))
    assert obs["open"]["fetch_rc_hw"] == 7


@pytest.mark.requirement("KIP-98.FETCH.002")
def test_aborted_transactions_listed_at_read_committed(differential):
    obs = _wire(differential, "KIP-98.FETCH.002")
    pid = obs["final"]["producer_id"]
    for phase in ("after_abort", "final"):
        assert {"producer_id": pid, "first_offset": 2} in obs[phase]["aborted_rc"], (
            f"{phase}: AbortedTransactions at read_committed lack (pid, 2): {obs[phase]['aborted_rc']}"
        )
        assert all(a["first_offset"] == 2 for a in obs[phase]["aborted_rc"]), "the committed transaction is listed as aborted"
        assert obs[phase]["aborted_ru"] == [], "read_uncommitted Fetch listed aborted transactions"


# ---------------------------------------------------------------- read_committed from inside
# A reader seeked into the middle of an aborted transaction, or whose small fetch size puts a
# batch boundary inside it, never sees the transaction's first offset in its own answer: the
# broker must list every aborted transaction *overlapping* the answer (Kafka's
# LogSegment.collectAbortedTxns over [fetch offset, upper bound)), not only those starting
# in it. test_crash_durability reads the same log again after its leader crashed.

ABORTED_INSIDE_END = 13  # c0 c1 | four aborted batches 2..9 | ABORT marker 10 | c2 c3
INSIDE_STARTS = (0, 3, 5)  # before the transaction, inside its first batch, inside its second
INSIDE_MAX_BYTES = (1 << 20, 1)  # everything at once; 1 byte: one batch per answer (KIP-74)


def read_committed_from(cc, topic: str, partition: int, start: int, max_bytes: int) -> dict[str, Any]:
    """A read_committed reader seeked to `start` (the Java consumer's algorithm): data below
    the LSO minus the batches of the aborted transactions the answers list, whatever their
    first offset (a seek can land inside one)."""
    leader = cc.leader_for(topic, partition)
    kept: list[str] = []
    listed: set[tuple[int, int]] = set()  # not yet ended by their ABORT marker
    reported: set[tuple[int, int]] = set()  # every (first offset, producer id) an answer listed
    first_answer: list[tuple[int, int]] | None = None
    aborting: set[int] = set()
    offset, answers = start, 0
    for _ in range(200):
        p = wire.fetch(cc, leader, topic, partition, offset, isolation_level=READ_COMMITTED, max_bytes=max_bytes)
        assert int(p.error_code) == 0, f"Fetch {topic}-{partition}@{offset}: error {int(p.error_code)}"
        answers += 1
        answer = {(int(a.first_offset), int(a.producer_id)) for a in (p.aborted_transactions or ())}
        if first_answer is None:
            first_answer = sorted(answer)
        listed |= answer - reported
        reported |= answer
        batches = [b for b in unverified_batches(p.records) if b["last_offset"] >= offset]
        if not batches:
            break
        for b in batches:
            aborting |= {pid for first, pid in listed if first <= b["last_offset"]}
            if b["control"]:
                if b.get("marker") == "ABORT":
                    aborting.discard(b["producer_id"])
                    listed = {(f, pid) for f, pid in listed if pid != b["producer_id"] or f > b["last_offset"]}
                continue
            if not (b["transactional"] and b["producer_id"] in aborting):
                kept += b["values"]
        offset = batches[-1]["last_offset"] + 1
    return {"values": kept, "listed": sorted(reported), "first_answer": first_answer or [], "answers": answers}


def write_aborted_inside(target, cc, unique) -> tuple[str, int]:
    """c0 c1, an aborted transaction of four two-record batches (offsets 2..9, ABORT at 10),
    c2 c3; returns (topic, the transaction's producer id) once the LSO reached the end."""
    topic, tid = unique.topic(), unique.transactional_id()
    create_ready_topic(target, cc, topic)
    wire.produce(cc.leader_for(topic, 0), topic, 0, plain_batch(["c0", "c1"]))
    coord, init, _ = init_ok(cc, tid)
    pid, epoch = int(init.producer_id), int(init.producer_epoch)
    add_partitions_ok(coord, tid, pid, epoch, topic, [0])
    for b in range(4):
        produce_txn_ok(cc.leader_for(topic, 0), tid, topic, 0,
                       idem_batch(values(f"aborted-b{b}-", 2), pid, epoch, 2 * b, True))
    end_txn_ok(coord, tid, pid, epoch, False)
    wait_stable(cc.leader_for(topic, 0), topic, 0, at_least=11)
    wire.produce(cc.leader_for(topic, 0), topic, 0, plain_batch(["c2", "c3"]))
    wait_stable(cc.leader_for(topic, 0), topic, 0, at_least=ABORTED_INSIDE_END)
    return topic, pid


def read_from_inside(cc, topic: str, pid: int) -> dict[Any, Any]:
    obs: dict[Any, Any] = {(start, mb): read_committed_from(cc, topic, 0, start, mb)
                           for start in INSIDE_STARTS for mb in INSIDE_MAX_BYTES}
    obs["pid"] = pid
    return obs


def assert_aborted_inside_dropped(obs: dict[Any, Any]) -> None:
    """KIP-98.TXN.003: none of the aborted records, every committed one after the start;
    KIP-98.FETCH.002: an answer starting inside the transaction lists it."""
    pid = obs["pid"]
    for (start, max_bytes), got in ((k, v) for k, v in obs.items() if isinstance(k, tuple)):
        want = ["c0", "c1", "c2", "c3"] if start == 0 else ["c2", "c3"]
        assert got["values"] == want, f"KIP-98.TXN.003: seek to {start}, max_bytes {max_bytes}: {got}"
        assert any(p == pid and first <= max(start, 2) for first, p in got["listed"]), (
            f"KIP-98.FETCH.002: seek to {start}, max_bytes {max_bytes}: the aborted transaction "
            f"(pid {pid}) is not listed: {got}")
        if start > 2:
            assert (2, pid) in got["first_answer"], (
                f"KIP-98.FETCH.002: the answer to a fetch at {start}, inside the aborted transaction "
                f"starting at 2, does not list it: {got}")


@pytest.mark.requirement("KIP-98.FETCH.002", "KIP-98.TXN.003")
def test_read_committed_from_inside_an_aborted_transaction(target, capabilities, unique):
    """KIP-98.FETCH.002 / TXN.003 on any target: read_committed fetches starting inside an
    aborted four-batch transaction (a seek into its first and second batch; 1 MiB and 1-byte
    fetch sizes) return none of its records, and their answers list the transaction."""
    require_transactions(capabilities)
    with wire.cluster_client(target) as cc:
        topic, pid = write_aborted_inside(target, cc, unique)
        obs = read_from_inside(cc, topic, pid)
    assert_aborted_inside_dropped(obs)


@pytest.mark.requirement("KIP-98.TXN.003")
def test_commit_and_abort_visibility_wire(differential):
    obs = _wire(differential, "KIP-98.TXN.003")
    committed = [[0, "n0"], [1, "n1"], [5, "n5"], [6, "n6"]]
    assert obs["after_abort"]["visible_rc"] == committed, "aborted records visible at read_committed"
    assert obs["final"]["visible_rc"] == committed + [[8, "c8"], [9, "c9"], [10, "n10"]]
    every = [[0, "n0"], [1, "n1"], [2, "t2"], [3, "t3"], [4, "t4"], [5, "n5"], [6, "n6"], [8, "c8"], [9, "c9"], [10, "n10"]]
    assert obs["final"]["visible_ru"] == every


@pytest.mark.requirement("KIP-98.MARKER.005")
def test_markers_are_control_batches(differential):
    obs = _wire(differential, "KIP-98.MARKER.005")
    batches = obs["final"]["batches"]
    control = [b for b in batches if b["control"]]
    assert [(b["base_offset"], b["last_offset"], b["marker"]) for b in control] == [(7, 7, "ABORT"), (11, 11, "COMMIT")]
    assert all(b["transactional"] and b["marker_key_version"] == 0 for b in control)
    assert all(b["producer_id"] == obs["final"]["producer_id"] for b in control)


@pytest.mark.requirement("KIP-98.FORMAT.003")
def test_marker_batches_carry_a_valid_crc(differential):
    """Markers are written by the broker, not the client: their CRC32C must still be right
    (Kafka's Java consumer checks CRCs by default and would refuse the batch)."""
    obs = _wire(differential, "KIP-98.FORMAT.003")
    assert obs["final"]["bad_crc_batches"] == [], f"batches at offsets {obs['final']['bad_crc_batches']} fail the CRC32C check"


@pytest.mark.requirement("KIP-98.FORMAT.004")
def test_transactional_bit_marks_transactional_batches(differential):
    obs = _wire(differential, "KIP-98.FORMAT.004")
    data = [b for b in obs["final"]["batches"] if not b["control"]]
    flags = {tuple(b["values"]): b["transactional"] for b in data}
    assert flags == {("n0", "n1"): False, ("t2", "t3", "t4"): True, ("n5", "n6"): False, ("c8", "c9"): True, ("n10",): False}


# ============================================================================== client level

PRODUCERS = ["confluent-tv1", "reference-tv1", "reference-tv2"]


class _Txn:
    """One transactional producer behind a small common interface."""

    def __init__(self, target, kind: str, tid: str) -> None:
        self.kind = kind
        if kind == "confluent-tv1":
            self.p = CKProducer(confluent.config(target, **{"transactional.id": tid, "linger.ms": 5}))
            self.p.init_transactions(30)
        else:
            version = 2 if kind == "reference-tv2" else 1
            self.p = TransactionalProducer(target.bootstrap_servers, tid, transaction_version=version, max_block_ms=30000,
                                           security=target.raw_security())
            self.p.init_transactions()

    def begin(self) -> None:
        self.p.begin_transaction()

    def send(self, topic: str, partition: int, value: str) -> None:
        if self.kind == "confluent-tv1":
            self.p.produce(topic, value=value.encode(), partition=partition)
        else:
            self.p.send(topic, partition, value.encode())

    def flush(self) -> None:
        if self.kind == "confluent-tv1":
            assert self.p.flush(30) == 0, "transactional records not delivered"
        else:
            self.p.flush()

    def commit(self) -> None:
        if self.kind == "confluent-tv1":
            self.p.commit_transaction(30)
        else:
            self.p.commit_transaction()

    def abort(self) -> None:
        if self.kind == "confluent-tv1":
            self.p.abort_transaction(30)
        else:
            self.p.abort_transaction()

    def close(self) -> None:
        if self.kind == "confluent-tv1":
            self.p.flush(5)
        else:
            self.p.close()


def _open_producer(target, kind: str, tid: str) -> _Txn:
    require_transactions(target.capabilities())
    if kind == "reference-tv2":
        require_feature(target.capabilities(), "transaction.version", 2)
    return _Txn(target, kind, tid)


def _ck_read(target, topic: str, partitions: list[int], level: str, count: int, settle_s: float = 1.0) -> list[list[Any]]:
    """[partition, offset, value] read by confluent-kafka from the start; after `count`
    records it keeps polling `settle_s` so that extra (aborted, control) records show up."""
    cfg = confluent.config(target, **{"group.id": "kipcheck-unused", "enable.auto.commit": False})
    cfg["isolation.level"] = level
    cfg["enable.partition.eof"] = False
    c = CKConsumer(cfg)
    out: list[list[Any]] = []
    try:
        c.assign([TopicPartition(topic, p, 0) for p in partitions])
        deadline = time.monotonic() + 30
        settle_until = None
        while time.monotonic() < (settle_until or deadline):
            msg = c.poll(0.1)
            if msg is not None:
                if msg.error():
                    raise KafkaException(msg.error())
                out.append([msg.partition(), msg.offset(), None if msg.value() is None else msg.value().decode()])
            if len(out) >= count and settle_until is None:
                settle_until = time.monotonic() + settle_s
    finally:
        c.close()
    return sorted(out)


def _ref_read(target, topic: str, partitions: list[int], level: int) -> list[list[Any]]:
    with RefConsumer(target.bootstrap_servers, isolation_level=level, security=target.raw_security()) as c:
        c.assign([(topic, p) for p in partitions])
        recs = c.consume_to_end(timeout_s=20)
    return sorted([r.partition, r.offset, r.value.decode()] for r in recs)


def _plain(target, topic: str, partition: int, value: str) -> None:
    confluent.produce(target, topic, [{"value": value.encode(), "partition": partition}])


def visibility_scenario(kind: str):
    """Per partition p of 3: txn commit c{p}-0 c{p}-1 | txn abort a{p}-0 a{p}-1 |
    non-transactional n{p} | txn commit d{p}; one transaction spans all 3 partitions."""

    def scenario(target, ids):
        topic, tid = ids.topic(), ids.transactional_id()
        with wire.cluster_client(target) as cc:
            producer = _open_producer(target, kind, tid)
            create_ready_topic(target, cc, topic, partitions=3)
            parts = [0, 1, 2]
            try:
                producer.begin()
                for p in parts:
                    producer.send(topic, p, f"c{p}-0")
                    producer.send(topic, p, f"c{p}-1")
                producer.commit()
                for p in parts:
                    wait_stable(cc.leader_for(topic, p), topic, p, at_least=3)
                producer.begin()
                for p in parts:
                    producer.send(topic, p, f"a{p}-0")
                    producer.send(topic, p, f"a{p}-1")
                producer.flush()
                producer.abort()
                # Markers are written after EndTxn returns: let them land before n{p}.
                for p in parts:
                    wait_stable(cc.leader_for(topic, p), topic, p, at_least=6)
                for p in parts:
                    _plain(target, topic, p, f"n{p}")
                producer.begin()
                for p in parts:
                    producer.send(topic, p, f"d{p}")
                producer.commit()
            finally:
                producer.close()
            stable = [list(wait_stable(cc.leader_for(topic, p), topic, p, at_least=9)) for p in parts]
        return {
            "stable": stable,
            "ck_read_committed": _ck_read(target, topic, parts, "read_committed", 12),
            "ck_read_uncommitted": _ck_read(target, topic, parts, "read_uncommitted", 18),
            "ref_read_committed": _ref_read(target, topic, parts, READ_COMMITTED),
            "ref_read_uncommitted": _ref_read(target, topic, parts, READ_UNCOMMITTED),
        }

    scenario.__name__ = f"visibility_{kind.replace('-', '_')}"
    return scenario


def _expected(level: str) -> list[list[Any]]:
    out = []
    for p in range(3):
        rows = [[0, f"c{p}-0"], [1, f"c{p}-1"]]
        if level == "read_uncommitted":
            rows += [[3, f"a{p}-0"], [4, f"a{p}-1"]]
        rows += [[6, f"n{p}"], [7, f"d{p}"]]
        out += [[p, o, v] for o, v in rows]
    return out


@pytest.mark.parametrize("producer", PRODUCERS)
@pytest.mark.requirement("KIP-98.FETCH.003", "KIP-98.FETCH.004", "KIP-98.TXN.001", "KIP-98.MARKER.005")
def test_commit_abort_visibility_clients(differential, producer):
    obs = differential.run(visibility_scenario(producer), requirement="KIP-98.FETCH.003").target
    assert obs["stable"] == [[9, 9]] * 3, f"(HW, LSO) per partition after the last commit: {obs['stable']}"
    # FETCH.003 + TXN.001: committed and non-transactional data on all 3 partitions, in
    # offset order, no aborted record, no control record (markers at 2, 5, 8 skipped).
    assert obs["ck_read_committed"] == _expected("read_committed"), "confluent-kafka read_committed"
    assert obs["ref_read_committed"] == _expected("read_committed"), "reference consumer read_committed"
    # FETCH.004: every data record, no control records.
    assert obs["ck_read_uncommitted"] == _expected("read_uncommitted"), "confluent-kafka read_uncommitted"
    assert obs["ref_read_uncommitted"] == _expected("read_uncommitted"), "reference consumer read_uncommitted"


def lso_scenario(kind: str, outcome: str):
    """early(0) | txn o(1) open | late(2) non-transactional | commit/abort (marker 3)."""

    def scenario(target, ids):
        topic, tid = ids.topic(), ids.transactional_id()
        with wire.cluster_client(target) as cc:
            producer = _open_producer(target, kind, tid)
            create_ready_topic(target, cc, topic)
            leader = cc.leader_for(topic, 0)
            obs: dict[str, Any] = {}
            try:
                _plain(target, topic, 0, "early")
                producer.begin()
                producer.send(topic, 0, "o")
                producer.flush()
                _plain(target, topic, 0, "late")
                obs["open"] = {
                    "high_watermark": log_end(leader, topic),
                    "lso": log_end(leader, topic, 0, READ_COMMITTED),
                    "ck_read_committed": _ck_read(target, topic, [0], "read_committed", 1),
                    "ref_read_committed": _ref_read(target, topic, [0], READ_COMMITTED),
                    "ref_read_uncommitted": _ref_read(target, topic, [0], READ_UNCOMMITTED),
                }
                producer.commit() if outcome == "commit" else producer.abort()
            finally:
                producer.close()
            hw, lso = wait_stable(leader, topic, at_least=4)
            n = 3 if outcome == "commit" else 2
            obs["ended"] = {
                "high_watermark": hw,
                "lso": lso,
                "ck_read_committed": _ck_read(target, topic, [0], "read_committed", n),
                "ref_read_committed": _ref_read(target, topic, [0], READ_COMMITTED),
            }
        return obs

    scenario.__name__ = f"lso_{kind.replace('-', '_')}_{outcome}"
    return scenario


@pytest.mark.parametrize("outcome", ["commit", "abort"])
@pytest.mark.parametrize("producer", PRODUCERS)
@pytest.mark.requirement("KIP-98.LSO.001", "KIP-98.LSO.002", "KIP-98.TXN.003")
def test_open_transaction_blocks_later_records_until_it_ends(differential, producer, outcome):
    obs = differential.run(lso_scenario(producer, outcome), requirement="KIP-98.LSO.002").target
    o = obs["open"]
    assert (o["high_watermark"], o["lso"]) == (3, 1), "(HW, LSO at read_committed) with the transaction open"
    early = [[0, 0, "early"]]
    assert o["ck_read_committed"] == early, "confluent-kafka read_committed read past the LSO"
    assert o["ref_read_committed"] == early, "reference consumer read_committed read past the LSO"
    assert o["ref_read_uncommitted"] == [[0, 0, "early"], [0, 1, "o"], [0, 2, "late"]]
    e = obs["ended"]
    assert (e["high_watermark"], e["lso"]) == (4, 4), f"the {outcome} did not release the LSO"
    want = early + ([[0, 1, "o"]] if outcome == "commit" else []) + [[0, 2, "late"]]
    assert e["ck_read_committed"] == want
    assert e["ref_read_committed"] == want
