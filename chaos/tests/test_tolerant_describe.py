"""The generated tolerant DescribeTransactions class (reference_impl/protocol/schemas): it
reads the start time -1 Kafka sends for an id with no transaction started, which kio's own
class refuses; the hijack nemesis and the KIP-98 admin suite both decode with it."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from chaos.nemesis.hijack import _first_state
from reference_impl.protocol import framing
from reference_impl.protocol.api_keys import ApiKey
from reference_impl.protocol.framing import decode_tolerant_response
from reference_impl.protocol.schemas import tolerant_response

DESCRIBE = ApiKey.DESCRIBE_TRANSACTIONS


def _frame(start_ms: int) -> bytes:
    mod = tolerant_response(DESCRIBE, 0)
    states = __import__(mod.__module__, fromlist=["TransactionState"])
    state = states.TransactionState(
        error_code=ErrorCode.none, transactional_id="tid", transaction_state="Empty", transaction_timeout_ms=60_000,
        transaction_start_time_ms=start_ms, producer_id=4242, producer_epoch=7,
        topics=(states.TopicData(topic="t", partitions=(0, 2)),))
    body = mod(throttle_time=__import__("datetime").timedelta(0), transaction_states=(state,))
    return framing.encode_response(body, 9, DESCRIBE, 0)[4:]


def test_start_time_minus_one_decodes_with_the_tolerant_class_only():
    frame = _frame(-1)
    with pytest.raises(framing.PayloadDecodeError):
        framing.decode_response(frame, DESCRIBE, 0)  # kio's class: why the tolerant one exists
    correlation_id, body = decode_tolerant_response(frame, DESCRIBE, 0)
    state = body.transaction_states[0]
    assert correlation_id == 9 and int(state.transaction_start_time_ms) == -1
    assert [(t.topic, list(t.partitions)) for t in state.topics] == [("t", [0, 2])]


def test_hijack_reads_error_producer_and_epoch():
    assert _first_state(_frame(-1)) == (0, 4242, 7)
    assert _first_state(_frame(1_700_000_000_000)) == (0, 4242, 7)


def test_no_tolerant_class_for_other_apis():
    assert tolerant_response(DESCRIBE, 1) is None and tolerant_response(ApiKey.END_TXN, 0) is None
    with pytest.raises(LookupError):
        decode_tolerant_response(b"\0\0\0\1\0", ApiKey.END_TXN, 0)
