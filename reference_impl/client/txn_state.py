"""Client-side transaction state machine of a transactional producer (KIP-98, KIP-890).

Pure data and functions: no sockets, no clock. The transition table is the one of Kafka's
Java producer (`TransactionManager.State.isTransitionValid`, clients module, 4.x), written
here as an explicit table from each target state to the states it may be entered from.

Error classification follows the Java producer's per-request handlers (InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn, FindCoordinator) and the
producer's produce path (`Sender.completeBatch` / `TransactionManager.maybeTransitionToErrorState`):
each `classify_*` function maps one error code to an `Outcome` the producer acts upon.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable

from kio.schema.errors import ErrorCode


class TxnState(enum.Enum):
    UNINITIALIZED = "Uninitialized"
    INITIALIZING = "Initializing"
    READY = "Ready"
    IN_TRANSACTION = "InTransaction"
    COMMITTING_TRANSACTION = "CommittingTransaction"
    ABORTING_TRANSACTION = "AbortingTransaction"
    ABORTABLE_ERROR = "AbortableError"
    FATAL_ERROR = "FatalError"

    def __str__(self) -> str:
        return self.value


S = TxnState

# target state -> the source states it may be entered from (Kafka 4.x TransactionManager).
# FatalError is reachable from every state, itself included; no transition leaves it.
VALID_SOURCES: dict[TxnState, frozenset[TxnState]] = {
    S.UNINITIALIZED: frozenset({S.READY, S.ABORTABLE_ERROR}),
    S.INITIALIZING: frozenset({S.UNINITIALIZED, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
    S.READY: frozenset({S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
    S.IN_TRANSACTION: frozenset({S.READY}),
    S.COMMITTING_TRANSACTION: frozenset({S.IN_TRANSACTION}),
    S.ABORTING_TRANSACTION: frozenset({S.IN_TRANSACTION, S.ABORTABLE_ERROR}),
    S.ABORTABLE_ERROR: frozenset(
        {S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR, S.INITIALIZING}
    ),
    S.FATAL_ERROR: frozenset(TxnState),
}

# The same table read the other way: source -> the targets it may move to.
VALID_TARGETS: dict[TxnState, frozenset[TxnState]] = {
    src: frozenset(t for t, sources in VALID_SOURCES.items() if src in sources) for src in TxnState
}


def is_transition_valid(source: TxnState, target: TxnState) -> bool:
    return source in VALID_SOURCES[target]


# --- errors raised to the application -------------------------------------------------


class TxnError(Exception):
    """Base of the errors a transactional producer raises; `error_code` is the Kafka code
    that caused it (None for client-side errors)."""

    def __init__(self, message: str, error_code: int | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code

    @property
    def error_name(self) -> str | None:
        if self.error_code is None:
            return None
        try:
            return ErrorCode(self.error_code).name.upper()
        except ValueError:
            return f"UNKNOWN_{self.error_code}"


class FatalTxnError(TxnError):
    """The producer is in FatalError: only close() is allowed from now on."""


class ProducerFencedError(FatalTxnError):
    """Another producer with the same transactional id has a newer epoch."""


class AbortableTxnError(TxnError):
    """The current transaction cannot commit; abort_transaction() recovers."""


class TxnTimeoutError(TxnError):
    """A transactional operation did not complete before its deadline. The state is kept
    and the same call may be retried (as Kafka's producer caches the pending result)."""


class IllegalTxnStateError(TxnError):
    """An API call (or internal transition) that the current state does not allow."""


class UnsupportedTxnVersionError(FatalTxnError):
    """The broker cannot speak the transaction protocol version that was asked for."""


# --- the state holder ------------------------------------------------------------------


@dataclass(frozen=True)
class Transition:
    source: TxnState
    target: TxnState
    error: BaseException | None = None


class TxnStateMachine:
    """Current state, last error, and the record of transitions.

    `transition_to` refuses invalid transitions with IllegalTxnStateError and leaves the
    state unchanged (the application-thread behaviour of Kafka's producer); entering
    AbortableError or FatalError records the error that caused it.
    """

    def __init__(self, on_transition: Callable[[Transition], None] | None = None) -> None:
        self.state = TxnState.UNINITIALIZED
        self.last_error: BaseException | None = None
        self.transitions: list[Transition] = []
        self._on_transition = on_transition

    def can_transition(self, target: TxnState) -> bool:
        return is_transition_valid(self.state, target)

    def transition_to(self, target: TxnState, error: BaseException | None = None) -> None:
        if not is_transition_valid(self.state, target):
            raise IllegalTxnStateError(f"invalid transition attempted from state {self.state} to state {target}")
        if target in (TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR):
            if error is None:
                raise ValueError(f"cannot transition to {target} without an error")
            self.last_error = error
        else:
            self.last_error = None
        t = Transition(self.state, target, error)
        self.state = target
        self.transitions.append(t)
        if self._on_transition is not None:
            self._on_transition(t)

    def to_abortable_error(self, error: BaseException) -> None:
        """Enter AbortableError, except while already aborting (Kafka skips it then)."""
        if self.state is TxnState.ABORTING_TRANSACTION:
            return
        if self.state is TxnState.FATAL_ERROR:
            return
        self.transition_to(TxnState.ABORTABLE_ERROR, error)

    def to_fatal_error(self, error: BaseException) -> None:
        self.transition_to(TxnState.FATAL_ERROR, error)

    @property
    def has_error(self) -> bool:
        return self.state in (TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR)

    @property
    def is_completing(self) -> bool:
        return self.state in (TxnState.COMMITTING_TRANSACTION, TxnState.ABORTING_TRANSACTION)

    def maybe_fail_with_error(self) -> None:
        """Raise the error state's exception: FatalError and AbortableError refuse calls."""
        if self.state is TxnState.FATAL_ERROR:
            cause = self.last_error
            if isinstance(cause, FatalTxnError):
                raise type(cause)(
                    f"producer is in FatalError: {cause}", cause.error_code
                ) from cause
            raise FatalTxnError(f"producer is in FatalError: {cause}") from cause
        if self.state is TxnState.ABORTABLE_ERROR:
            cause = self.last_error
            code = cause.error_code if isinstance(cause, TxnError) else None
            raise AbortableTxnError(
                f"cannot execute a transactional method in AbortableError ({cause}); abort the transaction", code
            ) from cause


# --- error classification ----------------------------------------------------------------


class Outcome(enum.Enum):
    OK = "ok"
    RETRY = "retry"  # retriable: same coordinator/leader, after backoff
    REDISCOVER = "rediscover"  # find the coordinator (or leader) again, then retry
    ABORTABLE = "abortable"
    ABORTABLE_IF_POSSIBLE = "abortable_if_possible"  # abortable when the epoch can be bumped, else fatal
    FATAL = "fatal"
    FENCED = "fenced"  # fatal, reported as ProducerFencedError
    DUPLICATE = "duplicate"  # produce: already written, treat as success


E = ErrorCode


def _retriable(code: int) -> bool:
    try:
        return bool(ErrorCode(code).retriable)
    except ValueError:
        return False


_COORDINATOR_MOVED = {int(E.not_coordinator), int(E.coordinator_not_available)}
_FENCED = {int(E.invalid_producer_epoch), int(E.producer_fenced)}


def _classifier(
    specific: dict[Outcome, tuple[ErrorCode, ...]],
    default: Outcome,
    rediscover: frozenset[int] = frozenset(_COORDINATOR_MOVED),
) -> Callable[[int], Outcome]:
    """A coordinator-request classifier in Kafka's order: success; the coordinator moved
    (find it again); retriable (same coordinator, after backoff); then the API's own
    table; anything else `default`."""
    table = {int(code): outcome for outcome, codes in specific.items() for code in codes}

    def classify(code: int) -> Outcome:
        if code == 0:
            return Outcome.OK
        if code in rediscover:
            return Outcome.REDISCOVER
        if _retriable(code):
            return Outcome.RETRY
        return table.get(code, default)

    return classify


_FENCED_CODES = (E.invalid_producer_epoch, E.producer_fenced)
_TXN_FATAL = (E.transactional_id_authorization_failed, E.invalid_txn_state, E.invalid_producer_id_mapping)

# Kafka 4.x: authorization errors of InitProducerId are abortable.
classify_init_producer_id = _classifier(
    {Outcome.ABORTABLE: (E.transactional_id_authorization_failed, E.cluster_authorization_failed,
                         E.transaction_abortable),
     Outcome.FENCED: _FENCED_CODES},
    Outcome.FATAL,
)
# CONCURRENT_TRANSACTIONS is retriable; TOPIC_AUTHORIZATION_FAILED, OPERATION_NOT_ATTEMPTED,
# TRANSACTION_ABORTABLE and anything unknown abort the transaction.
classify_add_partitions = _classifier(
    {Outcome.FENCED: _FENCED_CODES, Outcome.FATAL: _TXN_FATAL, Outcome.ABORTABLE_IF_POSSIBLE: (E.unknown_producer_id,)},
    Outcome.ABORTABLE,
)
classify_add_offsets = _classifier(
    {Outcome.ABORTABLE_IF_POSSIBLE: (E.unknown_producer_id,), Outcome.FENCED: _FENCED_CODES,
     Outcome.FATAL: _TXN_FATAL, Outcome.ABORTABLE: (E.group_authorization_failed, E.transaction_abortable)},
    Outcome.FATAL,
)
# REQUEST_TIMED_OUT from the group coordinator means: find it again.
classify_txn_offset_commit = _classifier(
    {Outcome.ABORTABLE: (E.group_authorization_failed, E.fenced_instance_id, E.transaction_abortable,
                         E.unknown_member_id, E.illegal_generation),
     Outcome.FENCED: _FENCED_CODES},
    Outcome.FATAL,
    rediscover=frozenset(_COORDINATOR_MOVED | {int(E.request_timed_out)}),
)
classify_end_txn = _classifier(
    {Outcome.FENCED: _FENCED_CODES, Outcome.FATAL: _TXN_FATAL,
     Outcome.ABORTABLE_IF_POSSIBLE: (E.unknown_producer_id,), Outcome.ABORTABLE: (E.transaction_abortable,)},
    Outcome.FATAL,
)
classify_find_coordinator = _classifier(
    {Outcome.FATAL: (E.transactional_id_authorization_failed,),
     Outcome.ABORTABLE: (E.group_authorization_failed, E.transaction_abortable)},
    Outcome.FATAL,
    rediscover=frozenset(),
)


_PRODUCE_FATAL = {
    int(E.cluster_authorization_failed),
    int(E.transactional_id_authorization_failed),
    int(E.producer_fenced),
    int(E.unsupported_version),
    int(E.invalid_producer_id_mapping),
}
_PRODUCE_LEADER_MOVED = {
    int(E.not_leader_or_follower),
    int(E.leader_not_available),
    int(E.unknown_topic_or_partition),
    int(E.fenced_leader_epoch),
    int(E.unknown_leader_epoch),
    int(E.unknown_topic_id),
}


def classify_produce(code: int) -> Outcome:
    """A partition's produce error for a transactional producer: retriable errors are retried
    until the delivery deadline (then abortable); PRODUCER_FENCED and authorization errors
    are fatal; everything else, INVALID_PRODUCER_EPOCH included (KIP-588), is abortable."""
    if code == 0:
        return Outcome.OK
    if code == int(E.duplicate_sequence_number):
        return Outcome.DUPLICATE
    if code in _PRODUCE_LEADER_MOVED:
        return Outcome.REDISCOVER  # refresh metadata, find the leader again
    if _retriable(code):
        return Outcome.RETRY
    if code == int(E.producer_fenced):
        return Outcome.FENCED
    if code in _PRODUCE_FATAL:
        return Outcome.FATAL
    return Outcome.ABORTABLE


CLASSIFIERS: dict[str, Callable[[int], Outcome]] = {
    "InitProducerId": classify_init_producer_id,
    "AddPartitionsToTxn": classify_add_partitions,
    "AddOffsetsToTxn": classify_add_offsets,
    "TxnOffsetCommit": classify_txn_offset_commit,
    "EndTxn": classify_end_txn,
    "FindCoordinator": classify_find_coordinator,
    "Produce": classify_produce,
}


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"UNKNOWN_{code}"


__all__ = [
    "AbortableTxnError",
    "CLASSIFIERS",
    "FatalTxnError",
    "IllegalTxnStateError",
    "Outcome",
    "ProducerFencedError",
    "Transition",
    "TxnError",
    "TxnState",
    "TxnStateMachine",
    "TxnTimeoutError",
    "UnsupportedTxnVersionError",
    "VALID_SOURCES",
    "VALID_TARGETS",
    "classify_add_offsets",
    "classify_add_partitions",
    "classify_end_txn",
    "classify_find_coordinator",
    "classify_init_producer_id",
    "classify_produce",
    "classify_txn_offset_commit",
    "error_name",
    "is_transition_valid",
]
