"""The outcome table: which client errors mean an operation did not happen.

Jepsen's rule: a completion is ``fail`` only when the operation *definitely* did not take
effect, ``info`` when it may have (timeouts, lost connections, coordinator moves), ``ok``
when it did. Getting one row wrong either hides anomalies (``fail`` for something that
happened makes its later read look like an aborted read) or invents them, so every row
carries its reason and the table is the one place to change it.

Keys are (operation, error name). Operations: ``produce`` (a send outside a transaction),
``commit`` (commit_transaction / EndTxn commit), ``abort``, ``send_offsets``
(TxnOffsetCommit), ``init`` (InitProducerId), ``poll`` (fetch / consume), ``share_fetch``
(a share member's poll: it acquires, so an unknown outcome is ``info``), ``share_ack``
(ShareAcknowledge / acknowledgements riding on ShareFetch, per partition). Error names are
kio's ``ErrorCode`` member names for broker errors and confluent-kafka's ``KafkaError``
attribute names for client-side errors (``_TIMED_OUT``); no integer is declared here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

OK, FAIL, INFO = "ok", "fail", "info"
OPERATIONS = ("produce", "commit", "abort", "send_offsets", "init", "poll", "share_fetch", "share_ack")
ANY = "*"


@dataclass(frozen=True)
class Outcome:
    type: str
    reason: str
    error: str | None = None


def _e(code: ErrorCode) -> str:
    return code.name.upper()


# (operation, error name) -> (type, reason). ANY rows apply to every operation.
TABLE: dict[tuple[str, str], tuple[str, str]] = {
    (ANY, _e(ErrorCode.none)): (OK, "the broker acknowledged it"),
    # --- produce (idempotent / plain sends)
    ("produce", _e(ErrorCode.not_leader_or_follower)):
        (INFO, "an earlier attempt may have reached the old leader and been replicated"),
    ("produce", _e(ErrorCode.request_timed_out)):
        (INFO, "the leader may have appended it and failed to answer in time"),
    ("produce", _e(ErrorCode.not_enough_replicas_after_append)):
        (INFO, "appended to the leader's log, replication unknown (KIP-98 IDEMP retries may follow)"),
    ("produce", _e(ErrorCode.not_enough_replicas)):
        (FAIL, "rejected before the append (min.insync.replicas not met)"),
    ("produce", _e(ErrorCode.out_of_order_sequence_number)):
        (INFO, "a gap in the sequence: earlier batches of the session may or may not be in the log"),
    ("produce", _e(ErrorCode.duplicate_sequence_number)):
        (OK, "the batch was already written (KIP-98.IDEMP.004)"),
    ("produce", _e(ErrorCode.message_too_large)): (FAIL, "rejected before the append"),
    ("produce", _e(ErrorCode.record_list_too_large)): (FAIL, "rejected before the append"),
    ("produce", _e(ErrorCode.invalid_record)): (FAIL, "rejected before the append"),
    ("produce", _e(ErrorCode.topic_authorization_failed)): (FAIL, "rejected before the append"),
    ("produce", _e(ErrorCode.unknown_topic_or_partition)):
        (INFO, "retriable: an earlier attempt may have been appended"),
    # --- fencing: the request of an old epoch is refused, its transaction cannot commit
    (ANY, _e(ErrorCode.producer_fenced)):
        (FAIL, "a newer instance fenced this one and aborts its open transaction (KIP-98.FENCE.004)"),
    (ANY, _e(ErrorCode.invalid_producer_epoch)):
        (FAIL, "the epoch is stale: the request was refused (KIP-98.FENCE.002)"),
    (ANY, _e(ErrorCode.transactional_id_authorization_failed)): (FAIL, "refused before any state change"),
    (ANY, _e(ErrorCode.invalid_txn_state)): (FAIL, "refused: the transaction was not in a state to do this"),
    (ANY, _e(ErrorCode.invalid_producer_id_mapping)): (FAIL, "refused: no such producer id mapping"),
    (ANY, "_FENCED"): (FAIL, "librdkafka's fatal fenced state: a newer instance owns the transactional id and "
                             "aborts this one's open transaction, so nothing it sends now can commit (KIP-98.FENCE.004)"),
    ("commit", _e(ErrorCode.transaction_abortable)):
        (FAIL, "the transaction must abort (KIP-890): it cannot commit"),
    # --- commit: the decision may be durable although the answer was lost
    ("commit", _e(ErrorCode.request_timed_out)): (INFO, "the commit decision may be durable already"),
    ("commit", _e(ErrorCode.coordinator_not_available)): (INFO, "the coordinator moved; the decision may be durable"),
    ("commit", _e(ErrorCode.not_coordinator)): (INFO, "the coordinator moved; the decision may be durable"),
    ("commit", _e(ErrorCode.coordinator_load_in_progress)): (INFO, "a new coordinator is loading the log"),
    ("commit", _e(ErrorCode.concurrent_transactions)): (INFO, "an earlier EndTxn attempt is still completing"),
    ("commit", "_TIMED_OUT"): (INFO, "commit_transaction timed out: the EndTxn may still land (KAFKA-17754)"),
    ("commit", "_MSG_TIMED_OUT"): (INFO, "a record's delivery timed out; the transaction's fate is unknown"),
    ("commit", "_FENCED"): (FAIL, "the producer was fenced by a newer instance (KIP-98.FENCE.004)"),
    ("commit", "_STATE"): (FAIL, "the client refused: no commit was sent"),
    # --- abort: an aborted transaction never commits, unless a commit was already in flight
    ("abort", _e(ErrorCode.request_timed_out)): (INFO, "the abort may not have been applied"),
    ("abort", "_TIMED_OUT"): (INFO, "the abort may not have been applied"),
    # --- TxnOffsetCommit (KIP-447): a refused commit makes the transaction abort
    ("send_offsets", _e(ErrorCode.illegal_generation)):
        (FAIL, "stale generation: the zombie is fenced (KIP-447.FENCE.002)"),
    ("send_offsets", _e(ErrorCode.unknown_member_id)): (FAIL, "unknown member (KIP-447.FENCE.003)"),
    ("send_offsets", _e(ErrorCode.fenced_instance_id)): (FAIL, "replaced static member (KIP-447.FENCE.004)"),
    ("send_offsets", "_TIMED_OUT"): (INFO, "the offsets may have been added to the transaction"),
    # --- init: InitProducerId changes no data
    ("init", "_TIMED_OUT"): (FAIL, "InitProducerId writes no data; the next init fences anyway"),
    # --- poll: a read changes no state, so a failed read is a read that observed nothing
    ("poll", "_TIMED_OUT"): (FAIL, "a read changes nothing: it observed nothing"),
    ("poll", _e(ErrorCode.offset_out_of_range)): (FAIL, "a read changes nothing"),
    # --- client-side transport errors: a request may have been sent
    (ANY, "_MSG_TIMED_OUT"): (INFO, "message.timeout.ms expired: the record may have been appended"),
    (ANY, "_TIMED_OUT"): (INFO, "the request may have been applied"),
    (ANY, "_TRANSPORT"): (INFO, "the connection broke after the request may have been sent"),
    (ANY, "_ALL_BROKERS_DOWN"): (INFO, "connections broke; requests may have been sent"),
    # --- share groups (KIP-932): a refused acknowledgement changed nothing
    ("share_ack", _e(ErrorCode.invalid_record_state)):
        (FAIL, "refused: the member no longer held the record (lock expired or released)"),
    ("share_ack", _e(ErrorCode.not_leader_or_follower)): (FAIL, "refused by a node that does not lead the partition"),
    ("share_ack", _e(ErrorCode.unknown_topic_or_partition)): (FAIL, "refused: no such share-partition here"),
    ("share_ack", _e(ErrorCode.share_session_not_found)): (FAIL, "refused before any acknowledgement was applied"),
    ("share_ack", _e(ErrorCode.invalid_share_session_epoch)): (FAIL, "refused before any acknowledgement was applied"),
    ("share_fetch", _e(ErrorCode.share_session_not_found)): (FAIL, "refused before anything was acquired"),
    ("share_fetch", _e(ErrorCode.invalid_share_session_epoch)): (FAIL, "refused before anything was acquired"),
    (ANY, "_DESTROY"): (INFO, "the client was closed with requests in flight"),
    (ANY, "_PURGE_INFLIGHT"): (INFO, "purged after sending"),
    (ANY, "_PURGE_QUEUE"): (FAIL, "purged before it was sent"),
    (ANY, "_STATE"): (FAIL, "the client refused the call before sending anything"),
    (ANY, "TimeoutError"): (INFO, "the call timed out; the request may have been applied"),
    (ANY, "ConnectionError"): (INFO, "the connection broke; the request may have been applied"),
    (ANY, "OSError"): (INFO, "a socket error; the request may have been applied"),
}


def _name_of(error: Any) -> tuple[str, bool | None]:
    """(table name, retriable?) of an error code, a confluent-kafka error or an exception."""
    if error is None:
        return _e(ErrorCode.none), False
    if isinstance(error, ErrorCode):
        return _e(error), error.retriable
    if isinstance(error, int) and not isinstance(error, bool):
        try:
            code = ErrorCode(error)
        except ValueError:
            return f"UNKNOWN_{error}", None
        return _e(code), code.retriable
    try:
        from confluent_kafka import KafkaError, KafkaException
    except ImportError:  # pragma: no cover - confluent-kafka is a dependency
        KafkaError = KafkaException = ()  # type: ignore[assignment]
    if KafkaException and isinstance(error, KafkaException) and error.args:
        error = error.args[0]
    if KafkaError and isinstance(error, KafkaError):
        if error.code() >= 0:  # a broker error relayed by librdkafka
            return _name_of(error.code())
        for name in dir(KafkaError):
            if name.startswith("_") and not name.startswith("__") and getattr(KafkaError, name) == error.code():
                return name, error.retriable()
        return f"LIBRDKAFKA_{error.code()}", error.retriable()
    code = getattr(error, "error_code", None)  # reference client TxnError
    if code is not None:
        return _name_of(code)
    for cls in (TimeoutError, ConnectionError, OSError):
        if isinstance(error, cls):
            return cls.__name__, True
    return type(error).__name__, None


def classify(operation: str, error: Any) -> Outcome:
    """The completion type of ``operation`` ending with ``error`` (None = success).

    Lookup: the (operation, name) row, then the ANY row; an error in no row is ``info``
    for an operation that changes state (it may have happened) and ``fail`` for a poll
    (a read changes nothing) — never ``fail`` on a guess.
    """
    if operation not in OPERATIONS:
        raise ValueError(f"unknown operation {operation!r}; expected one of {OPERATIONS}")
    name, retriable = _name_of(error)
    row = TABLE.get((operation, name)) or TABLE.get((ANY, name))
    if row is None:
        if operation == "poll":
            row = (FAIL, "a read changes nothing: it observed nothing")
        elif retriable:
            row = (INFO, "retriable error: an earlier attempt may have been applied")
        else:
            row = (INFO, "no row for this error: indeterminate rather than a guessed fail")
    return Outcome(row[0], row[1], None if error is None else name)


def rows() -> list[dict]:
    """The table as data (docs, reports)."""
    return [{"operation": op, "error": name, "outcome": t, "reason": why}
            for (op, name), (t, why) in sorted(TABLE.items())]
