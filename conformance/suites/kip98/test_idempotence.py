"""KIP-98 idempotent producer: producer ids, per-partition sequences, de-duplication of
retries, out-of-order sequences, stale epochs (wire level, raw client), and the
confluent-kafka idempotent producer end to end."""

from __future__ import annotations

import contextlib

import pytest
from clients import confluent, wire
from clients.txn import init_producer_id_settled
from conformance.suites import require_api
from conformance.suites.kip932.test_sessions import record_side
from conformance.suites.kip98 import (
    INIT_PRODUCER_ID,
    create_ready_topic,
    fetch_all,
    idem_batch,
    log_end,
    plain_batch,
    values,
)
from reference_impl.protocol import records


def _require_init_producer_id(target) -> None:
    require_api(target.capabilities(), INIT_PRODUCER_ID, what="InitProducerId")


def _new_pid(cc) -> tuple[int, int, int]:
    """(error, producer id, epoch) of a non-transactional InitProducerId."""
    _, resp = init_producer_id_settled(cc, None)
    return int(resp.error_code), int(resp.producer_id), int(resp.producer_epoch)


@contextlib.contextmanager
def _idempotent_session(target, ids):
    """(cluster client, new topic, its partition-0 leader, producer id, epoch) of a fresh
    idempotent producer id, for the single-partition scenarios below."""
    _require_init_producer_id(target)
    topic = ids.topic()
    with wire.cluster_client(target) as cc:
        create_ready_topic(target, cc, topic)
        err, pid, epoch = _new_pid(cc)
        assert err == 0
        yield cc, topic, cc.leader_for(topic, 0), pid, epoch


def _fetched_values(cc, leader, topic: str, partition: int = 0) -> list[str]:
    return [r.value.decode() for r in records.iter_records(fetch_all(cc, leader, topic, partition)["records"])]


# ------------------------------------------------------------------------------ producer ids


def init_pid_scenario(target, ids):
    _require_init_producer_id(target)
    with wire.cluster_client(target) as cc:
        a = _new_pid(cc)
    with wire.cluster_client(target) as cc:
        b = _new_pid(cc)
    return {
        "errors": [a[0], b[0]],
        "epochs": [a[2], b[2]],
        "pids_valid": [a[1] >= 0, b[1] >= 0],
        "pids_differ": a[1] != b[1],
    }


@pytest.mark.requirement("KIP-98.IDEMP.001")
def test_init_producer_id_gives_distinct_ids(differential):
    obs = differential.run(init_pid_scenario).target
    assert obs["errors"] == [0, 0]
    assert obs["pids_valid"] == [True, True], "InitProducerId answered a negative producer id"
    assert obs["epochs"] == [0, 0]
    assert obs["pids_differ"], "two idempotent producers got the same producer id"


# ------------------------------------------------------------------------------ sequences


def sequences_scenario(target, ids):
    _require_init_producer_id(target)
    topic = ids.topic()
    with wire.cluster_client(target) as cc:
        create_ready_topic(target, cc, topic, partitions=2)
        err, pid, epoch = _new_pid(cc)
        assert err == 0
        l0, l1 = cc.leader_for(topic, 0), cc.leader_for(topic, 1)
        first = wire.produce(l0, topic, 0, idem_batch(values("s", 3), pid, epoch, 0))
        second = wire.produce(l0, topic, 0, idem_batch(values("s", 2, 3), pid, epoch, 3))
        other = wire.produce(l1, topic, 1, idem_batch(values("p", 1), pid, epoch, 0))
        leo_before = log_end(l0, topic, 0)
        third = wire.produce(l0, topic, 0, idem_batch(values("s", 4, 5), pid, epoch, 5))
        leo_after = log_end(l0, topic, 0)
        part0 = fetch_all(cc, l0, topic, 0)["records"]
        headers = [records.parse_batch_header(b) for b in records.split_batches(part0)[0]]
        vals = _fetched_values(cc, l0, topic, 0)
    return {
        "errors": [int(x.error_code) for x in (first, second, other, third)],
        "bases": [int(x.base_offset) for x in (first, second, other, third)],
        "leo_before": leo_before,
        "leo_after": leo_after,
        "batches": [
            {"base_sequence": h.base_sequence, "magic": h.magic, "epoch": h.producer_epoch, "pid_is_ours": h.producer_id == pid}
            for h in headers
        ],
        "values": vals,
    }


@pytest.mark.requirement("KIP-98.IDEMP.002", "KIP-98.IDEMP.003", "KIP-98.FORMAT.002")
def test_sequences_start_at_zero_per_partition(differential):
    obs = differential.run(sequences_scenario, requirement="KIP-98.IDEMP.002").target
    assert obs["errors"] == [0, 0, 0, 0]
    assert obs["bases"] == [0, 3, 0, 5]
    # IDEMP.003: the batch continuing the sequence is appended; the log grows by its count.
    assert (obs["leo_before"], obs["leo_after"]) == (5, 9)
    # FORMAT.002: stored batches are magic 2 with the producer's id, epoch and sequences.
    assert [b["base_sequence"] for b in obs["batches"]] == [0, 3, 5]
    assert all(b["magic"] == 2 and b["pid_is_ours"] and b["epoch"] == 0 for b in obs["batches"])
    assert obs["values"] == values("s", 9)


# ------------------------------------------------------------------------------ duplicates


def duplicate_scenario(target, ids):
    with _idempotent_session(target, ids) as (cc, topic, leader, pid, epoch):
        wire.produce(leader, topic, 0, plain_batch(["n0"]))  # the producer's batches start at offset 1
        batch = idem_batch(values("d", 3), pid, epoch, 0)
        first = wire.produce(leader, topic, 0, batch)
        leo_first = log_end(leader, topic)
        retry = wire.produce(leader, topic, 0, batch)  # the retry of a lost response
        leo_retry = log_end(leader, topic)
        nxt = wire.produce(leader, topic, 0, idem_batch(values("d", 2, 3), pid, epoch, 3))
        retry_again = wire.produce(leader, topic, 0, batch)  # still within the last 5 batches
        vals = _fetched_values(cc, leader, topic)
    return {
        "first": [int(first.error_code), int(first.base_offset)],
        "retry": [int(retry.error_code), int(retry.base_offset)],
        "next": [int(nxt.error_code), int(nxt.base_offset)],
        "retry_again": [int(retry_again.error_code), int(retry_again.base_offset)],
        "leo": [leo_first, leo_retry],
        "values": vals,
    }


@pytest.mark.requirement("KIP-98.IDEMP.004")
def test_retried_batch_is_deduplicated(differential):
    obs = differential.run(duplicate_scenario).target
    assert obs["first"] == [0, 1]
    # IDEMP.004: NONE with the original base offset (Kafka >= 1.0), or DUPLICATE_SEQUENCE_NUMBER.
    assert obs["retry"] in ([0, 1], [46, obs["retry"][1]]), f"retry answered {obs['retry']}"
    assert obs["leo"] == [4, 4], "the retried batch grew the log"
    assert obs["next"] == [0, 4]
    assert obs["retry_again"] in ([0, 1], [46, obs["retry_again"][1]]), f"second retry answered {obs['retry_again']}"
    assert obs["values"] == ["n0", *values("d", 5)], "the log holds a duplicate or lost a record"


def old_duplicate_scenario(target, ids):
    with _idempotent_session(target, ids) as (cc, topic, leader, pid, epoch):
        sent = [wire.produce(leader, topic, 0, idem_batch([f"w{i}"], pid, epoch, i)) for i in range(6)]
        newest_5th = wire.produce(leader, topic, 0, idem_batch(["w1"], pid, epoch, 1))
        oldest = wire.produce(leader, topic, 0, idem_batch(["w0"], pid, epoch, 0))
        leo = log_end(leader, topic)
        vals = _fetched_values(cc, leader, topic)
    return {
        "sent": [[int(x.error_code), int(x.base_offset)] for x in sent],
        "newest_5th": [int(newest_5th.error_code), int(newest_5th.base_offset)],
        "oldest_error": int(oldest.error_code),
        "leo": leo,
        "values": vals,
    }


@pytest.mark.requirement("KIP-98.IDEMP.004")
def test_duplicate_outside_the_five_batch_window(differential, request):
    """KIP-98.IDEMP.004, DIV-002: the KIP answers a retried batch DUPLICATE_SEQUENCE_NUMBER;
    Kafka caches the producer's last 5 batches, answers a retry of one of them NONE with its
    original offset and an older one OUT_OF_ORDER_SEQUENCE_NUMBER. A broker on Kafka's side
    (NONE for the 5th newest) must bound its window there: DUPLICATE_SEQUENCE_NUMBER or NONE
    for the 6th newest means it has no 5-batch window. Neither retry appends."""
    obs = differential.run(old_duplicate_scenario).target
    assert obs["sent"] == [[0, i] for i in range(6)]
    assert obs["leo"] == 6 and obs["values"] == [f"w{i}" for i in range(6)], "a duplicate was appended"
    if obs["newest_5th"] == [0, 1]:
        record_side(request, "duplicate-retry-answer", "kafka")
        assert obs["oldest_error"] == 45, (
            f"KIP-98.IDEMP.004 (DIV-002): NONE for the 5th newest batch, but a retry older than the last 5 "
            f"answered {obs['oldest_error']}, want OUT_OF_ORDER_SEQUENCE_NUMBER (45): no 5-batch window")
    else:
        assert obs["newest_5th"][0] == 46, f"KIP-98.IDEMP.004: retry of the 5th newest batch: {obs['newest_5th']}"
        record_side(request, "duplicate-retry-answer", "kip")
        assert obs["oldest_error"] in (45, 46), f"KIP-98.IDEMP.004: retry of the 6th newest answered {obs['oldest_error']}"


def plain_duplicate_scenario(target, ids):
    topic = ids.topic()
    with wire.cluster_client(target) as cc:
        create_ready_topic(target, cc, topic)
        leader = cc.leader_for(topic, 0)
        batch = plain_batch(["x0", "x1"])
        a = wire.produce(leader, topic, 0, batch)
        b = wire.produce(leader, topic, 0, batch)
        vals = _fetched_values(cc, leader, topic)
    return {"results": [[int(a.error_code), int(a.base_offset)], [int(b.error_code), int(b.base_offset)]], "values": vals}


@pytest.mark.requirement("KIP-98.IDEMP.008")
def test_batches_without_producer_id_are_not_deduplicated(differential):
    obs = differential.run(plain_duplicate_scenario).target
    assert obs["results"] == [[0, 0], [0, 2]]
    assert obs["values"] == ["x0", "x1", "x0", "x1"]


def cross_session_scenario(target, ids):
    _require_init_producer_id(target)
    topic = ids.topic()
    with wire.cluster_client(target) as cc:
        create_ready_topic(target, cc, topic)
        _, pid_a, epoch_a = _new_pid(cc)
        _, pid_b, epoch_b = _new_pid(cc)
        leader = cc.leader_for(topic, 0)
        a = wire.produce(leader, topic, 0, idem_batch(["same"], pid_a, epoch_a, 0))
        b = wire.produce(leader, topic, 0, idem_batch(["same"], pid_b, epoch_b, 0))
        vals = _fetched_values(cc, leader, topic)
    return {"pids_differ": pid_a != pid_b, "results": [[int(a.error_code), int(a.base_offset)], [int(b.error_code), int(b.base_offset)]], "values": vals}


@pytest.mark.requirement("KIP-98.IDEMP.007")
def test_new_producer_session_is_not_deduplicated(differential):
    obs = differential.run(cross_session_scenario).target
    assert obs["pids_differ"]
    assert obs["results"] == [[0, 0], [0, 1]]
    assert obs["values"] == ["same", "same"]


# ------------------------------------------------------------------------------ out of order


def gap_scenario(target, ids):
    with _idempotent_session(target, ids) as (cc, topic, leader, pid, epoch):
        ok = wire.produce(leader, topic, 0, idem_batch(values("g", 5), pid, epoch, 0))
        gap = wire.produce(leader, topic, 0, idem_batch(["g7"], pid, epoch, 7))
        leo = log_end(leader, topic)
        fill = wire.produce(leader, topic, 0, idem_batch(["g5"], pid, epoch, 5))
        vals = _fetched_values(cc, leader, topic)
    return {
        "ok": [int(ok.error_code), int(ok.base_offset)],
        "gap_error": int(gap.error_code),
        "leo_after_gap": leo,
        "fill": [int(fill.error_code), int(fill.base_offset)],
        "values": vals,
    }


@pytest.mark.requirement("KIP-98.IDEMP.005")
def test_sequence_gap_is_out_of_order(differential):
    obs = differential.run(gap_scenario).target
    assert obs["ok"] == [0, 0]
    assert obs["gap_error"] == 45, "a sequence gap must be OUT_OF_ORDER_SEQUENCE_NUMBER (45)"
    assert obs["leo_after_gap"] == 5, "the out-of-order batch was appended"
    assert obs["fill"] == [0, 5]
    assert obs["values"] == values("g", 6)


# ------------------------------------------------------------------------------ epochs


def stale_epoch_scenario(target, ids):
    with _idempotent_session(target, ids) as (cc, topic, leader, pid, epoch):
        old = wire.produce(leader, topic, 0, idem_batch(["e0-0", "e0-1"], pid, epoch, 0))
        new = wire.produce(leader, topic, 0, idem_batch(["e1-0"], pid, epoch + 1, 0))
        stale = wire.produce(leader, topic, 0, idem_batch(["e0-2"], pid, epoch, 2))
        leo = log_end(leader, topic)
        vals = _fetched_values(cc, leader, topic)
    return {
        "old": [int(old.error_code), int(old.base_offset)],
        "new": [int(new.error_code), int(new.base_offset)],
        "stale_error": int(stale.error_code),
        "leo": leo,
        "values": vals,
    }


@pytest.mark.requirement("KIP-98.FENCE.003")
def test_older_epoch_rejected_after_newer_epoch(differential):
    obs = differential.run(stale_epoch_scenario).target
    assert obs["old"] == [0, 0]
    assert obs["new"] == [0, 2], "a newer epoch starting at sequence 0 must be accepted"
    assert obs["stale_error"] == 47, "a batch from an older epoch must be INVALID_PRODUCER_EPOCH (47)"
    assert obs["leo"] == 3 and obs["values"] == ["e0-0", "e0-1", "e1-0"]


# ------------------------------------------------------------------------------ client level


def confluent_idempotent_scenario(target, ids):
    _require_init_producer_id(target)
    topic = ids.topic()
    confluent.create_topic(target, topic, partitions=2)
    msgs = [{"value": f"m{i}".encode(), "partition": i % 2} for i in range(40)]
    delivered = confluent.produce(
        target, topic, msgs, flush_between=7, enable_idempotence=True, linger_ms=2, batch_num_messages=3
    )
    out: dict = {"delivered": [[p, o] for p, o in delivered], "partitions": {}}
    with wire.cluster_client(target) as cc:
        for p in (0, 1):
            leader = cc.leader_for(topic, p)
            data = fetch_all(cc, leader, topic, p)["records"]
            hs = [records.parse_batch_header(b) for b in records.split_batches(data)[0]]
            out["partitions"][str(p)] = {
                "values": [r.value.decode() for r in records.iter_records(data)],
                "offsets": [r.offset for r in records.iter_records(data)],
                "sequences": [[h.base_sequence, h.record_count] for h in hs],
                "pid": hs[0].producer_id if hs else None,
                "pid_count": len({h.producer_id for h in hs}),
                "magic": sorted({h.magic for h in hs}),
            }
    consumed = confluent.consume_assigned(target, topic, [0, 1], len(msgs))
    out["consumed"] = sorted(m.value().decode() for m in consumed)
    return out


@pytest.mark.requirement("KIP-98.IDEMP.002", "KIP-98.FORMAT.002")
def test_confluent_idempotent_producer_delivers_exactly_once_in_order(differential):
    # Batch boundaries depend on the client's timing: compare only stable observations.
    res = differential.run(confluent_idempotent_scenario, requirement="KIP-98.IDEMP.002", ignore_keys=["sequences"])
    obs = res.target
    for p in (0, 1):
        want = [f"m{i}" for i in range(p, 40, 2)]
        got = obs["partitions"][str(p)]
        assert got["values"] == want, f"partition {p}: values duplicated, lost or reordered"
        assert got["offsets"] == list(range(20))
        assert got["magic"] == [2]
        assert got["pid_count"] == 1 and got["pid"] >= 0, f"partition {p}: batches carry {got['pid_count']} producer ids"
        # IDEMP.002: sequences start at 0 per partition and grow by the record count.
        seq = 0
        for base, count in got["sequences"]:
            assert base == seq, f"partition {p}: batch sequence {base}, expected {seq}"
            seq += count
    assert [o for p, o in obs["delivered"] if p == 0] == list(range(20))
    assert obs["consumed"] == sorted(f"m{i}" for i in range(40))

