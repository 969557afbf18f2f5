"""KIP-98 message format v2 and the producer options around it, on the wire:

* records in a v2 batch: offset = base offset + offset delta, null keys stay null, headers
  (KIP-82) round-trip, null header values included;
* the broker's size limit (`max.message.bytes`, the seed's max.message.size) applies to a
  whole batch, not to its records;
* a producer with idempotence disabled writes batches with no producer id and no
  sequence (ProducerId -1, BaseSequence -1), an idempotent one with both;
* de-duplication within one producer session: every batch of a stream arrives twice, some
  retries overtaking later batches (inside Kafka's window of 5), as after lost responses;
  the partition keeps each record once, in send order.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode

from clients import confluent, wire
from clients.txn import init_producer_id_settled
from conformance.suites.kip98 import (
    INIT_PRODUCER_ID,
    LATEST,
    TS,
    create_ready_topic,
    fetch_all,
    idem_batch,
)
from conformance.suites import require_api
from reference_impl.protocol import records

FLUSH_TIMEOUT_S = 30.0
BATCH_LIMIT = 4096  # max.message.bytes of the size-limit topic


def _ready(target, cc, topic: str, timeout_s: float = 20.0, **configs: str) -> None:
    """Create a one-partition topic with configs; wait until its leader answers ListOffsets."""
    confluent.create_topic(target, topic, **configs)
    deadline = time.monotonic() + timeout_s
    while int(wire.list_offset(wire.leader_eventually(cc, topic, wait_s=timeout_s), topic, 0, LATEST).error_code) != 0:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic} not ready after {timeout_s}s")
        time.sleep(0.1)


def _batches(cc, topic: str) -> list[records.DecodedBatch]:
    return records.decode_batches(fetch_all(cc, cc.leader_for(topic, 0), topic, 0)["records"])


# ------------------------------------------------------------------------- record layout


def record_layout_scenario(target, ids) -> dict[str, Any]:
    topic = ids.topic()
    with wire.cluster_client(target) as cc:
        create_ready_topic(target, cc, topic)
        leader = cc.leader_for(topic, 0)
        first = wire.produce(leader, topic, 0, records.build_batch(
            [records.NewRecord(value=b"a", timestamp=TS), records.NewRecord(value=b"b", timestamp=TS)]))
        second = wire.produce(leader, topic, 0, records.build_batch([
            records.NewRecord(key=b"k0", value=b"v0", timestamp=TS),
            records.NewRecord(key=None, value=b"v1", timestamp=TS + 5),
            records.NewRecord(key=b"k2", value=None, headers=(("h1", b"x" * 300), ("h2", None)), timestamp=TS + 9),
        ]))
        batches = _batches(cc, topic)
    last = batches[-1]
    return {
        "errors": [int(first.error_code), int(second.error_code)],
        "base_offset": int(second.base_offset),
        "batch_base": last.header.base_offset,
        "records": [[r.offset, r.key, r.value, [list(h) for h in r.headers], r.timestamp] for r in last.records],
    }


@pytest.mark.requirement("KIP-98.FORMAT.005")
def test_v2_records_offsets_null_keys_and_headers_round_trip(differential):
    """KIP-98.FORMAT.005: offset = base + delta; null key/value and headers round-trip."""
    obs = differential.run(record_layout_scenario).target
    assert obs["errors"] == [0, 0] and obs["base_offset"] == 2 == obs["batch_base"], obs
    assert obs["records"] == [
        [2, b"k0", b"v0", [], TS],
        [3, None, b"v1", [], TS + 5],
        [4, b"k2", None, [["h1", b"x" * 300], ["h2", None]], TS + 9],
    ], f"records did not round-trip (offset = base + delta, null key/value, headers): {obs['records']}"


# ------------------------------------------------------------------------- batch size limit


def batch_limit_scenario(target, ids) -> dict[str, Any]:
    """40 records of ~200 bytes: one batch (> limit) is refused; four batches of 10 pass."""
    topic = ids.topic()
    payloads = [f"{i:03d}".encode() + b"r" * 200 for i in range(40)]
    with wire.cluster_client(target) as cc:
        _ready(target, cc, topic, **{"max.message.bytes": str(BATCH_LIMIT)})
        leader = cc.leader_for(topic, 0)
        whole = records.build_batch([records.NewRecord(value=p, timestamp=TS) for p in payloads])
        parts = [records.build_batch([records.NewRecord(value=p, timestamp=TS) for p in payloads[i:i + 10]])
                 for i in range(0, 40, 10)]
        refused = wire.produce(leader, topic, 0, whole)
        split = [int(wire.produce(leader, topic, 0, b).error_code) for b in parts]
        stored = [r.value for b in _batches(cc, topic) for r in b.records]
    return {"whole_size_over_limit": len(whole) > BATCH_LIMIT, "parts_under_limit": all(len(b) < BATCH_LIMIT for b in parts),
            "whole": int(refused.error_code), "split": split, "stored_in_order": stored == payloads}


@pytest.mark.requirement("KIP-98.FORMAT.006")
def test_size_limit_applies_to_the_whole_batch(differential):
    """KIP-98.FORMAT.006: small records over the limit together are refused in one batch, taken in four."""
    obs = differential.run(batch_limit_scenario).target
    assert obs["whole_size_over_limit"] and obs["parts_under_limit"], obs
    assert obs["whole"] in (ErrorCode.message_too_large, ErrorCode.record_list_too_large), (
        f"a batch above max.message.bytes whose records are all small answered {obs['whole']}")
    assert obs["split"] == [0, 0, 0, 0] and obs["stored_in_order"], obs


# ------------------------------------------------------------------------- idempotence option


def _client_batches(target, topic: str, idempotent: bool) -> list[list[int]]:
    """[producer id, base sequence] of the batches a confluent-kafka producer wrote."""
    producer = Producer(confluent.config(target, **{"enable.idempotence": idempotent, "linger.ms": 0}))
    for i in range(3):
        producer.produce(topic, value=f"m{i}".encode())
        producer.flush(FLUSH_TIMEOUT_S)
    assert producer.flush(FLUSH_TIMEOUT_S) == 0, "records still queued after the flush deadline"
    with wire.cluster_client(target) as cc:
        return [[b.header.producer_id, b.header.base_sequence] for b in _batches(cc, topic)]


def idempotence_option_scenario(target, ids) -> dict[str, Any]:
    plain, idem = ids.topic(), ids.topic()
    for topic in (plain, idem):
        confluent.create_topic(target, topic)
    off = _client_batches(target, plain, idempotent=False)
    on = _client_batches(target, idem, idempotent=True)
    return {"off": off, "on_pid_set": all(pid >= 0 for pid, _ in on), "on_sequences": [s for _, s in on],
            "on_one_pid": len({pid for pid, _ in on}) == 1}


@pytest.mark.requirement("KIP-98.CONFIG.005")
def test_idempotence_disabled_writes_no_producer_id(differential):
    """KIP-98.CONFIG.005: ProducerId -1 and no sequence without idempotence; one id, sequences 0.. with it."""
    obs = differential.run(idempotence_option_scenario).target
    assert obs["off"] == [[-1, -1]] * 3, f"enable.idempotence=false must write ProducerId -1, no sequence: {obs['off']}"
    assert obs["on_pid_set"] and obs["on_one_pid"] and obs["on_sequences"] == [0, 1, 2], obs


# ------------------------------------------------------------------------- retries


RETRY_ORDER = [0, 0, 1, 2, 1, 3, 2, 4, 3, 5, 4, 5, 2]  # batch indexes as they reach the leader


def retried_stream_scenario(target, ids) -> dict[str, Any]:
    """Six 2-record batches, each sent twice; late retries overtake later batches."""
    require_api(target.capabilities(), INIT_PRODUCER_ID, what="InitProducerId")
    topic = ids.topic()
    with wire.cluster_client(target) as cc:
        create_ready_topic(target, cc, topic)
        _, resp = init_producer_id_settled(cc, None)
        pid, epoch = int(resp.producer_id), int(resp.producer_epoch)
        leader = cc.leader_for(topic, 0)
        batches = [idem_batch([f"v{2 * i}", f"v{2 * i + 1}"], pid, epoch, 2 * i) for i in range(6)]
        answers = []
        for i in RETRY_ORDER:
            p = wire.produce(leader, topic, 0, batches[i])
            answers.append([i, int(p.error_code), int(p.base_offset)])
        stored = [r.value.decode() for b in _batches(cc, topic) for r in b.records]
    firsts = {}
    for i, err, base in answers:
        firsts.setdefault(i, base)
    return {"errors": sorted({err for _, err, _ in answers}), "stored": stored,
            "retries_answer_first_offset": all(base == firsts[i] for i, err, base in answers if err == 0)}


@pytest.mark.requirement("KIP-98.IDEMP.006")
def test_retried_stream_stores_every_record_once_in_order(differential):
    """KIP-98.IDEMP.006: each record once, in send order; a duplicate answered NONE answers its
    first offset. The KIP's DUPLICATE_SEQUENCE_NUMBER (46) for a retry is allowed (DIV-002:
    Kafka answers NONE; Tansu 0.6.0 follows the KIP text)."""
    obs = differential.run(retried_stream_scenario).target
    assert set(obs["errors"]) <= {0, 46}, f"a retried batch was refused: {obs}"
    assert obs["stored"] == [f"v{i}" for i in range(12)], f"retries duplicated or reordered records: {obs['stored']}"
    assert obs["retries_answer_first_offset"], "a duplicate must be answered with its original offset"
