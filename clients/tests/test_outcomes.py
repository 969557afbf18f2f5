"""The outcome table (clients/outcomes.py): one assertion per row the brief names,
plus a guard that every row names a real kio / confluent-kafka error."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from kio.schema.errors import ErrorCode

from clients.outcomes import ANY, FAIL, INFO, OK, TABLE, classify, rows
from reference_impl.client.txn_state import ProducerFencedError, TxnTimeoutError


@pytest.mark.parametrize("operation,error,expected", [
    ("produce", ErrorCode.not_leader_or_follower, INFO),
    ("commit", ErrorCode.producer_fenced, FAIL),
    ("commit", KafkaError(KafkaError._TIMED_OUT), INFO),
    ("commit", KafkaException(KafkaError(KafkaError._TIMED_OUT)), INFO),
    ("produce", KafkaError(KafkaError._MSG_TIMED_OUT), INFO),
    ("commit", KafkaError(KafkaError._FENCED), FAIL),
    ("produce", KafkaError(KafkaError._FENCED), FAIL),
    ("send_offsets", KafkaException(KafkaError(KafkaError._FENCED)), FAIL),
    ("abort", KafkaError(KafkaError._FENCED), FAIL),
    ("send_offsets", ErrorCode.illegal_generation, FAIL),
    ("produce", ErrorCode.duplicate_sequence_number, OK),
    ("commit", None, OK),
    ("poll", RuntimeError("boom"), FAIL),
    ("commit", RuntimeError("boom"), INFO),
    ("commit", TimeoutError(), INFO),
    ("commit", ProducerFencedError("fenced", int(ErrorCode.producer_fenced)), FAIL),
    ("commit", TxnTimeoutError("slow"), INFO),
    ("commit", KafkaError(int(ErrorCode.not_coordinator)), INFO),
])
def test_row(operation, error, expected):
    out = classify(operation, error)
    assert out.type == expected, out
    assert out.reason


def test_every_row_names_a_real_error():
    broker = {c.name.upper() for c in ErrorCode}
    client = {n for n in dir(KafkaError) if n.startswith("_") and not n.startswith("__")}
    python = {"TimeoutError", "ConnectionError", "OSError"}
    bad = [name for (_, name) in TABLE if name not in broker | client | python]
    assert not bad


def test_an_unknown_error_is_never_a_guessed_fail():
    assert classify("commit", ValueError("?")).type == INFO
    assert classify("produce", 9999).type == INFO


def test_rows_are_data_and_unknown_operations_are_refused():
    assert all(r["reason"] for r in rows())
    assert any(op == ANY for op, _ in TABLE)
    with pytest.raises(ValueError):
        classify("launch", None)
