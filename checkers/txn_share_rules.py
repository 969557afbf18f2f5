"""Anomalies KIP-1289 forbids, as pure checks over a history of share acknowledgements made
inside producer transactions (issue 12).

Input: ``TxnShareOp`` records, one per completed operation, each with its real-time window
(``start`` <= ``end``, any one clock or history index). Only definite orders count (A
precedes B when ``A.end < B.start``), so concurrent operations never raise a false alarm,
as in ``checkers.share_group``. Kinds:

* ``stage``: TxnShareAcknowledge of ``records`` with ``ack`` in transaction ``txn`` (one
  transaction, e.g. ``"tid#3"``: a transactional id runs many);
  ``acquired_at`` is when the staging member's fetch was invoked (its lock cannot end before
  ``acquired_at + lock_duration_ms``).
* ``end``: EndTxn of ``txn`` (``committed``); ``ok`` means the coordinator answered NONE.
* ``acquire``: an ok ShareFetch that delivered ``records`` to ``member``.
* ``ack``: an ordinary (non-transactional) ShareAcknowledge of ``records`` with ``ack``.
* ``observe``: a read of ``records``' persisted state (``state``: acknowledged, archived,
  available, acquired), e.g. ReadShareGroupState.
* ``failover``: a leader or coordinator change (broker kill, leadership move).

Anomaly types (each names the catalog ids it breaks, ``REQUIREMENTS``):

* ``aborted-ack-applied``: a record whose only settling acknowledgements were staged in
  transactions that aborted is observed acknowledged (archived is no evidence: after the
  abort the record is acquired again, and a lock expiry at the delivery limit archives it).
* ``pending-acquired``: a staged record is delivered again before any EndTxn of its
  transaction was sent (one with an unknown outcome may have ended it) and before any
  ordinary acknowledgement of it (after an abort, a RELEASE makes it available), while the
  staging member's lock surely held, with no fail-over in between.
* ``pending-acquired-after-failover``: the same across a fail-over (in-memory TX_PENDING lost,
  corner cases 1 and 12): allowed when the run had fail-overs.
* ``committed-ack-lost``: a record staged with ACCEPT/REJECT in a committed transaction is
  delivered again or observed available after the commit, although the staging held its lock
  through the commit and either no fail-over came between staging and commit or the record was
  observed settled after the commit (then lost, e.g. after a fail-over).
* ``committed-ack-dropped-by-failover``: redelivered after the commit with a fail-over between
  staging and commit and no settled observation (corner cases 1 and 12): allowed with
  fail-overs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from checkers.result import CheckResult, decide

Record = tuple[Any, int]  # (share-partition key, offset)
SETTLING_ACKS = frozenset({"accept", "reject"})
SETTLED_STATES = frozenset({"acknowledged", "archived"})

REQUIREMENTS: dict[str, tuple[str, ...]] = {
    "aborted-ack-applied": ("KIP-1289.API.001", "KIP-1289.STATE.004", "KIP-1289.STATE.005"),
    "pending-acquired": ("KIP-1289.STATE.001", "KIP-1289.STATE.002"),
    "pending-acquired-after-failover": ("KIP-1289.CASE.001", "KIP-1289.CASE.012"),
    "committed-ack-lost": ("KIP-1289.STATE.003", "KIP-1289.STATE.005"),
    "committed-ack-dropped-by-failover": ("KIP-1289.CASE.001", "KIP-1289.CASE.012"),
}
"""Catalog requirements of each anomaly type."""


@dataclass(frozen=True)
class TxnShareOp:
    kind: str
    start: float
    end: float
    records: tuple[Record, ...] = ()
    ok: bool = True
    txn: str | None = None
    member: str | None = None
    ack: str | None = None
    committed: bool | None = None
    state: str | None = None
    acquired_at: float | None = None


def _before(a: TxnShareOp, b: TxnShareOp) -> bool:
    return a.end < b.start


class _Index:
    """Per-record views of a history, built once."""

    def __init__(self, ops: Iterable[TxnShareOp], lock_duration_ms: float | None) -> None:
        self.ops = sorted(ops, key=lambda o: (o.start, o.end))
        self.lock = lock_duration_ms
        self.ends = {o.txn: o for o in self.ops if o.kind == "end" and o.ok}
        self.failovers = [o for o in self.ops if o.kind == "failover"]
        self.stages = [o for o in self.ops if o.kind == "stage" and o.ok and o.ack in SETTLING_ACKS]

    def of(self, kind: str, rec: Record) -> list[TxnShareOp]:
        return [o for o in self.ops if o.kind == kind and rec in o.records]

    def lock_held_until(self, stage: TxnShareOp) -> float:
        if self.lock is None or stage.acquired_at is None:
            return float("inf")  # no lock data: judged as if locks never expire
        return stage.acquired_at + self.lock

    def failover_between(self, a: TxnShareOp, b: TxnShareOp) -> bool:
        """A fail-over that may have happened after a started and before b ended."""
        return any(f.end >= a.start and f.start <= b.end for f in self.failovers)


def _case(kind: str, rec: Record, **ops: TxnShareOp) -> dict:
    return {"type": kind, "record": list(rec), **{k: _brief(o) for k, o in ops.items()}}


def _brief(op: TxnShareOp) -> dict:
    return {"kind": op.kind, "start": op.start, "end": op.end, "txn": op.txn, "member": op.member}


def _settled_elsewhere(ix: _Index, rec: Record, aborted: str) -> bool:
    """Another path may have settled the record: a non-transactional settling ack (any
    outcome) or a stage in a transaction not known to have aborted."""
    if any(o.ack in SETTLING_ACKS for o in ix.of("ack", rec)):
        return True
    for s in ix.of("stage", rec):
        end = ix.ends.get(s.txn)
        if s.txn != aborted and (end is None or end.committed):
            return True
    return False


def aborted_ack_applied_cases(ix: _Index) -> list[dict]:
    out = []
    for stage in ix.stages:
        end = ix.ends.get(stage.txn)
        if end is None or end.committed:
            continue
        for rec in stage.records:
            seen = [o for o in ix.of("observe", rec) if o.state == "acknowledged" and _before(end, o)]
            if seen and not _settled_elsewhere(ix, rec, stage.txn):
                out.append(_case("aborted-ack-applied", rec, stage=stage, end=end, observed=seen[0]))
    return out


def _pending_acquisitions(ix: _Index) -> Iterable[tuple[TxnShareOp, Record, TxnShareOp]]:
    """(stage, record, acquisition) with the acquisition surely inside the pending window:
    after the staging, before every EndTxn of the transaction (any outcome) and every
    ordinary acknowledgement of the record (any outcome) could have taken effect."""
    for stage in ix.stages:
        ends = [o for o in ix.ops if o.kind == "end" and o.txn == stage.txn]
        for rec in stage.records:
            acks = [o for o in ix.of("ack", rec) if o.end >= stage.start]
            for acq in ix.of("acquire", rec):
                surely_pending = _before(stage, acq) and all(_before(acq, o) for o in ends + acks)
                if surely_pending and acq.end < ix.lock_held_until(stage):
                    yield stage, rec, acq


def pending_acquired_cases(ix: _Index, *, failover: bool = False) -> list[dict]:
    kind = "pending-acquired-after-failover" if failover else "pending-acquired"
    return [_case(kind, rec, stage=s, acquired=a) for s, rec, a in _pending_acquisitions(ix)
            if ix.failover_between(s, a) is failover]


def _lost_after_commit(ix: _Index) -> Iterable[tuple[TxnShareOp, Record, TxnShareOp, TxnShareOp, bool]]:
    """(stage, record, commit, loss, settled-seen): a committed staging whose record was then
    delivered again or observed available."""
    for stage in ix.stages:
        end = ix.ends.get(stage.txn)
        if end is None or not end.committed or end.start >= ix.lock_held_until(stage):
            continue  # not committed, or the lock may have expired first (corner case 6)
        for rec in stage.records:
            settled = [o for o in ix.of("observe", rec) if o.state in SETTLED_STATES and _before(end, o)]
            losses = [o for o in ix.of("acquire", rec) if _before(end, o)]
            losses += [o for o in ix.of("observe", rec) if o.state == "available" and _before(end, o)]
            for loss in losses:
                yield stage, rec, end, loss, any(_before(s, loss) for s in settled)


def committed_ack_lost_cases(ix: _Index, *, dropped_by_failover: bool = False) -> list[dict]:
    out = []
    for stage, rec, end, loss, settled_seen in _lost_after_commit(ix):
        excused = ix.failover_between(stage, end) and not settled_seen
        if excused is dropped_by_failover:
            kind = "committed-ack-dropped-by-failover" if excused else "committed-ack-lost"
            out.append(_case(kind, rec, stage=stage, commit=end, lost=loss))
    return out


ANOMALIES: dict[str, Callable[[_Index], list[dict]]] = {
    "aborted-ack-applied": aborted_ack_applied_cases,
    "pending-acquired": pending_acquired_cases,
    "pending-acquired-after-failover": lambda ix: pending_acquired_cases(ix, failover=True),
    "committed-ack-lost": committed_ack_lost_cases,
    "committed-ack-dropped-by-failover": lambda ix: committed_ack_lost_cases(ix, dropped_by_failover=True),
}


def allowed_error_types(*, failover: bool = False) -> frozenset[str]:
    """A run with fail-overs may lose in-memory TX_PENDING state (corner cases 1 and 12)."""
    if not failover:
        return frozenset()
    return frozenset({"pending-acquired-after-failover", "committed-ack-dropped-by-failover"})


def check(ops: Iterable[TxnShareOp], allowed: Iterable[str] = (), *, lock_duration_ms: float | None = None,
          max_examples: int = 3) -> CheckResult:
    """Every anomaly; False when a type outside ``allowed`` is found, "unknown" when the
    history staged nothing (no evidence), True otherwise."""
    unknown = set(allowed) - set(ANOMALIES)
    if unknown:
        raise ValueError(f"unknown error types in allowed: {sorted(unknown)}")
    ix = _Index(ops, lock_duration_ms)
    errors = {name: fn(ix) for name, fn in ANOMALIES.items()}
    stats = {"ops": len(ix.ops), "stages": len(ix.stages), "ended": len(ix.ends), "failovers": len(ix.failovers)}
    return decide(errors, allowed, evidence=bool(ix.stages), max_examples=max_examples, stats=stats)
