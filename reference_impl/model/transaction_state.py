"""Transaction states of the transaction coordinator and their legal transitions.

Follows Kafka 4.x's `org.apache.kafka.coordinator.transaction.TransactionState`
(transaction-coordinator module): the same ids (they are what the transaction log
stores), the same names (what DescribeTransactions/ListTransactions expose), the
same table of legal previous states, and the same "expiration allowed" flag.

Since transaction version 2 (KIP-890) PrepareAbort may also follow Empty,
CompleteCommit and CompleteAbort: a TV2 client that is unsure of the server state
sends EndTxn(abort) anyway.
"""

from __future__ import annotations

from enum import IntEnum


class TransactionState(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def state_name(self) -> str:
        """Kafka's name of the state (DescribeTransactions / ListTransactions)."""
        return _NAMES[self]

    @property
    def valid_previous_states(self) -> frozenset["TransactionState"]:
        return VALID_PREVIOUS_STATES[self]

    @property
    def expiration_allowed(self) -> bool:
        """True where an idle transactional id may expire (Empty, CompleteCommit, CompleteAbort)."""
        return self in _EXPIRATION_ALLOWED

    @property
    def is_prepare(self) -> bool:
        """A decision is durable and markers are (still) being written."""
        return self in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)

    @property
    def is_complete(self) -> bool:
        return self in (TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)

    @classmethod
    def from_name(cls, name: str) -> "TransactionState | None":
        return _BY_NAME.get(name)

    def can_follow(self, previous: "TransactionState") -> bool:
        """May the transaction move from `previous` to this state?"""
        return previous in VALID_PREVIOUS_STATES[self]


S = TransactionState

_NAMES: dict[TransactionState, str] = {
    S.EMPTY: "Empty",
    S.ONGOING: "Ongoing",
    S.PREPARE_COMMIT: "PrepareCommit",
    S.PREPARE_ABORT: "PrepareAbort",
    S.COMPLETE_COMMIT: "CompleteCommit",
    S.COMPLETE_ABORT: "CompleteAbort",
    S.DEAD: "Dead",
    S.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {name: state for state, name in _NAMES.items()}

# target state -> states it may be entered from (Kafka 4.x TransactionState's static table)
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}

_EXPIRATION_ALLOWED = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})

del S


class IllegalStateTransition(Exception):
    """A transition the state table forbids (a coordinator bug, as in Kafka)."""


def check_transition(previous: TransactionState, target: TransactionState) -> None:
    if not target.can_follow(previous):
        raise IllegalStateTransition(
            f"transaction state {target.state_name} cannot follow {previous.state_name}"
        )


__all__ = ["IllegalStateTransition", "TransactionState", "VALID_PREVIOUS_STATES", "check_transition"]
