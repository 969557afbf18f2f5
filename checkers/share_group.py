"""Anomaly checks for share-group (KIP-932) histories (see docs/checkers.md).

Input: a ``checkers.share_history.ShareHistory``. Each ``*_cases`` function returns the
error maps of one anomaly type (JSON-ready, with ``"type"``; ops named by history index),
empty when the history shows none. ``check`` runs them all and decides validity by a
policy of allowed error types (``checkers.result.decide``).

Ordering is real time as the history records it: op A *definitely precedes* op B when A's
completion comes before B's invocation (history indices). A fetch acquired its records
somewhere between its invocation and its completion; an acknowledgement took effect
somewhere inside its own window. Only definite orders count, so concurrent ops never
produce a false alarm. Lock expiry uses ``time_ns``: a lock taken by a fetch cannot expire
before ``invoke time + lock duration`` (the lock starts at acquisition, after the
invocation). No I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from rules import share as rules
from checkers.result import CheckResult, decide
from rules.share import DEFAULT_DELIVERY_LIMIT, REQUIREMENTS, SETTLING
from checkers.history import FAIL, INFO, OK, Key
from checkers.share_history import AckEntry, Acquisition, Completed, ShareHistory, ack_entries_of, acquisitions_of

Offset = tuple[Key, int]


@dataclass
class ShareAnalysis:
    """The shared index every anomaly function reads."""

    history: ShareHistory
    ops: list[Completed]
    acquisitions: dict[Offset, list[Acquisition]]
    """Per record, every acquisition by an ok fetch, in invocation order."""
    acks: dict[Offset, list[AckEntry]]
    """Per record, every acknowledgement entry (any outcome), in invocation order."""
    produced: dict[Offset, Completed]
    """Records an ok produce wrote, with the produce op."""
    spsos: dict[Key, list[tuple[int, Completed]]]
    """Observed share-partition start offsets per key, in invocation order."""
    exits: dict[Any, Completed]
    """First leave / crash of each process."""
    unknown_fetches: list[Completed]
    """Fetches whose outcome is unknown (info, or never completed): each may have acquired
    any record without the history saying which, so it may explain an observation."""
    delivery_limit: int
    lock_duration_ms: int | None


def analyze(history: ShareHistory, delivery_limit: int = DEFAULT_DELIVERY_LIMIT,
            lock_duration_ms: int | None = None) -> ShareAnalysis:
    ops = history.pairs()
    acquisitions: dict[Offset, list[Acquisition]] = {}
    acks: dict[Offset, list[AckEntry]] = {}
    produced: dict[Offset, Completed] = {}
    spsos: dict[Key, list[tuple[int, Completed]]] = {}
    exits: dict[Any, Completed] = {}
    for op in ops:
        for a in acquisitions_of(op):
            acquisitions.setdefault((a.key, a.offset), []).append(a)
        for e in ack_entries_of(op):
            acks.setdefault((e.key, e.offset), []).append(e)
        if op.f == "produce" and op.type == OK and op.complete is not None:
            for k, pairs in op.complete.value.items():
                for o, _ in pairs:
                    produced.setdefault((k, o), op)
        if op.f == "spso" and op.type == OK and op.complete is not None:
            for k, o in op.complete.value.items():
                spsos.setdefault(k, []).append((o, op))
        if op.f in ("leave", "crash"):
            exits.setdefault(op.process, op)
    unknown = [op for op in ops if op.f == "fetch" and op.type == INFO]
    return ShareAnalysis(history, ops, acquisitions, acks, produced, spsos, exits, unknown, delivery_limit,
                         lock_duration_ms)


def _analysis(h: ShareHistory | ShareAnalysis) -> ShareAnalysis:
    return h if isinstance(h, ShareAnalysis) else analyze(h)


def _precedes(a: Completed, b: Completed) -> bool:
    return a.end < b.start


def _ack_ok(e: AckEntry) -> bool:
    return e.op.type == OK


# --------------------------------------------------------------------------- acquisition


def _hold_ends(a: ShareAnalysis, acq: Acquisition) -> tuple[float, float]:
    """(history index, time_ns) before which ``acq``'s member surely still held the record:
    its next acknowledgement of it, its leave or crash, and the earliest lock expiry."""
    index = float("inf")
    for e in a.acks.get((acq.key, acq.offset), ()):
        if e.op.process == acq.op.process and e.op.start > acq.op.end:
            index = min(index, e.op.start)
    exit_ = a.exits.get(acq.op.process)
    if exit_ is not None and exit_.start > acq.op.end:
        index = min(index, exit_.start)
    expiry = float("inf")
    if a.lock_duration_ms is not None:
        expiry = acq.op.invoke.time_ns + a.lock_duration_ms * 1_000_000
    return index, expiry


def concurrent_acquisition_cases(h: ShareHistory | ShareAnalysis) -> list[dict]:
    """Two members hold one record at once: B's fetch acquired it after A's fetch had
    surely acquired it (A completed before B was invoked) and before A could have let go
    (no acknowledgement of it, leave or crash by A was invoked before B completed, and
    B completed before A's lock could expire)."""
    a = _analysis(h)
    out = []
    for (k, o), acqs in sorted(a.acquisitions.items()):
        for first in acqs:
            end_index, expiry = _hold_ends(a, first)
            for second in acqs:
                if second.op.process == first.op.process or not _precedes(first.op, second.op):
                    continue
                done = second.op.complete
                if second.op.end < end_index and done is not None and (
                        expiry == float("inf") or rules.lock_surely_held(first.op.invoke.time_ns, done.time_ns,
                                                                         a.lock_duration_ms * 1_000_000)):
                    out.append({"type": "concurrent-acquisition", "key": k, "offset": o,
                                "holder": first.op.process, "holder-fetch": first.op.index,
                                "other": second.op.process, "other-fetch": second.op.index})
    return out


def redelivery_after_ack_cases(h: ShareHistory | ShareAnalysis) -> list[dict]:
    """A record acquired again after an ACCEPT or REJECT of it was acknowledged ok."""
    a = _analysis(h)
    out = []
    for (k, o), entries in sorted(a.acks.items()):
        settles = [e for e in entries if _ack_ok(e) and rules.settles(e.ack)]
        for e in settles:
            for acq in a.acquisitions.get((k, o), ()):
                if _precedes(e.op, acq.op):
                    out.append({"type": "redelivery-after-ack", "key": k, "offset": o, "ack": e.ack,
                                "ack-op": e.op.index, "fetch": acq.op.index, "delivery-count": acq.delivery_count})
    return out


# --------------------------------------------------------------------------- delivery counts


def delivery_count_above_limit_cases(h: ShareHistory | ShareAnalysis) -> list[dict]:
    """A record delivered with a count above the delivery limit (or below 1)."""
    a = _analysis(h)
    return [{"type": "delivery-count-above-limit", "key": k, "offset": o, "delivery-count": acq.delivery_count,
             "limit": a.delivery_limit, "fetch": acq.op.index}
            for (k, o), acqs in sorted(a.acquisitions.items()) for acq in acqs
            if rules.delivery_count_problem(acq.delivery_count, a.delivery_limit) == "above-limit"]


def _count_steps(a: ShareAnalysis) -> Iterable[tuple[Key, int, Acquisition, Acquisition]]:
    """Consecutive, definitely ordered acquisitions of each record."""
    for (k, o), acqs in sorted(a.acquisitions.items()):
        for prev, cur in zip(acqs, acqs[1:]):
            if _precedes(prev.op, cur.op):
                yield k, o, prev, cur


def _count_map(kind: str, k: Key, o: int, prev: Acquisition, cur: Acquisition) -> dict:
    return {"type": kind, "key": k, "offset": o, "prev-count": prev.delivery_count,
            "count": cur.delivery_count, "prev-fetch": prev.op.index, "fetch": cur.op.index}


def delivery_count_decrease_cases(h: ShareHistory | ShareAnalysis) -> list[dict]:
    """A later delivery of a record carries a lower count than the one before it.
    (After a leader fail-over this is allowed: KIP-932 DELIVERY.002.)"""
    return [_count_map("delivery-count-decrease", k, o, p, c)
            for k, o, p, c in _count_steps(_analysis(h))
            if rules.delivery_count_problem(c.delivery_count, float("inf"), p.delivery_count) == "decrease"]


def delivery_count_stall_cases(h: ShareHistory | ShareAnalysis) -> list[dict]:
    """A later delivery of a record carries the same count as the one before it: the
    acquisition was not counted. Kafka 4.1.2 does this after a share session closes
    (it decrements the count of the records the close released)."""
    return [_count_map("delivery-count-stall", k, o, p, c)
            for k, o, p, c in _count_steps(_analysis(h))
            if rules.delivery_count_problem(c.delivery_count, float("inf"), p.delivery_count) == "stall"]


# --------------------------------------------------------------------------- SPSO


def spso_regression_cases(h: ShareHistory | ShareAnalysis) -> list[dict]:
    """An observed share-partition start offset lower than one observed before it."""
    a = _analysis(h)
    out = []
    for k, obs in sorted(a.spsos.items()):
        for i, (hi, first) in enumerate(obs):
            for lo, later in obs[i + 1:]:
                if rules.spso_regressed(hi, lo) and _precedes(first, later):
                    out.append({"type": "spso-regression", "key": k, "prev-spso": hi, "spso": lo,
                                "prev-op": first.index, "op": later.index})
    return out


def acquired_below_spso_cases(h: ShareHistory | ShareAnalysis) -> list[dict]:
    """A fetch invoked after the SPSO was observed at S acquired an offset below S
    (everything below the SPSO is acknowledged or archived: never delivered again)."""
    a = _analysis(h)
    out = []
    for (k, o), acqs in sorted(a.acquisitions.items()):
        for spso, sop in a.spsos.get(k, ()):
            for acq in acqs:
                if o < spso and _precedes(sop, acq.op):
                    out.append({"type": "acquired-below-spso", "key": k, "offset": o, "spso": spso,
                                "spso-op": sop.index, "fetch": acq.op.index})
    return out


# --------------------------------------------------------------------------- loss


def _settlement(a: ShareAnalysis, rec: Offset) -> str | None:
    """Why the record surely or possibly left the group: an acknowledged ACCEPT/REJECT, a
    delivery at the limit (it is archived once that delivery ends), an unknown-outcome
    ACCEPT/REJECT (possibly), unknown-outcome fetches enough to have taken it to the limit
    unseen (possibly). None when nothing in the history settles it."""
    entries = a.acks.get(rec, ())
    if any(_ack_ok(e) and rules.settles(e.ack) for e in entries):
        return "acknowledged"
    acqs = a.acquisitions.get(rec, ())
    top = max(acqs, key=lambda acq: acq.delivery_count, default=None)
    count = 0 if top is None else top.delivery_count
    if count >= a.delivery_limit:
        return "archived at the delivery limit"
    if any(e.op.type == INFO and rules.settles(e.ack) for e in entries):
        return "acknowledgement outcome unknown"
    since = a.produced[rec] if top is None else top.op
    unseen = sum(1 for f in a.unknown_fetches if f.end > since.start)  # one delivery per fetch at most
    if count + unseen >= a.delivery_limit:
        return "fetch outcomes unknown"
    return None


def _unsettled(a: ShareAnalysis) -> Iterable[tuple[Offset, Completed]]:
    for rec, op in sorted(a.produced.items()):
        if _settlement(a, rec) is None:
            yield rec, op


def lost_record_cases(h: ShareHistory | ShareAnalysis) -> list[dict]:
    """A produced record never acknowledged (ACCEPT/REJECT) nor archived, although an
    observed SPSO moved past it (the broker let it go without anyone settling it)."""
    a = _analysis(h)
    out = []
    for (k, o), op in _unsettled(a):
        past = [(s, sop) for s, sop in a.spsos.get(k, ()) if s > o]
        if past:
            s, sop = past[0]
            out.append({"type": "lost-record", "key": k, "offset": o, "producer": op.index,
                        "spso": s, "spso-op": sop.index,
                        "deliveries": len(a.acquisitions.get((k, o), ()))})
    return out


def unsettled_cases(h: ShareHistory | ShareAnalysis) -> list[dict]:
    """A produced record never acknowledged nor archived, and nothing proves it lost
    (indeterminate: the run ended before a member settled it; a drain phase fixes that)."""
    a = _analysis(h)
    lost = {(e["key"], e["offset"]) for e in lost_record_cases(a)}
    return [{"type": "unsettled", "key": k, "offset": o, "producer": op.index,
             "deliveries": len(a.acquisitions.get((k, o), ()))}
            for (k, o), op in _unsettled(a) if (k, o) not in lost]


# --------------------------------------------------------------------------- acknowledgements


def _maybe_acquired(a: ShareAnalysis, e: AckEntry, after: Completed | None) -> bool:
    """Whether an unknown-outcome fetch of the acknowledging member may have acquired the
    record after ``after`` ended (None: at any time) and before the acknowledgement."""
    return any(f.process == e.op.process and f.start < e.op.end and (after is None or f.end > after.start)
               for f in a.unknown_fetches)


def _why_not_holder(a: ShareAnalysis, e: AckEntry) -> tuple[str, dict] | None:
    """Why the member surely did not hold the record when the acknowledgement took effect;
    None when it may have (an unknown-outcome fetch of its own may have acquired it)."""
    me = e.op.process
    before = [acq for acq in a.acquisitions.get((e.key, e.offset), ()) if _precedes(acq.op, e.op)]
    mine = [acq for acq in before if acq.op.process == me]
    if not mine:
        return None if _maybe_acquired(a, e, None) else ("never-acquired", {})
    last = mine[-1]
    for acq in before:
        if acq.op.process != me and _precedes(last.op, acq.op) and not _maybe_acquired(a, e, acq.op):
            return "acquired-by-other", {"other": acq.op.process, "other-fetch": acq.op.index}
    for prior in a.acks.get((e.key, e.offset), ()):
        if (prior.op.process == me and _ack_ok(prior) and prior.op is not e.op
                and _precedes(last.op, prior.op) and _precedes(prior.op, e.op)
                and not _maybe_acquired(a, e, prior.op)):
            return "already-acknowledged", {"prior-ack": prior.ack, "prior-ack-op": prior.op.index}
    exit_ = a.exits.get(me)
    if (exit_ is not None and exit_.f == "leave" and exit_.type == OK and _precedes(last.op, exit_)
            and _precedes(exit_, e.op) and not _maybe_acquired(a, e, exit_)):
        return "member-left", {"exit-op": exit_.index}
    return None


def non_holder_ack_cases(h: ShareHistory | ShareAnalysis) -> list[dict]:
    """The broker accepted (ok) an acknowledgement from a member that did not hold the
    record: it never acquired it, another member surely acquired it since, the member
    already acknowledged it since its last acquisition, or the member had left (an ok
    leave). A fetch of the member's with an unknown outcome may have (re)acquired it."""
    a = _analysis(h)
    out = []
    for (k, o), entries in sorted(a.acks.items()):
        for e in entries:
            if not _ack_ok(e):
                continue
            why = _why_not_holder(a, e)
            if why is not None:
                reason, detail = why
                out.append({"type": "non-holder-ack", "key": k, "offset": o, "ack": e.ack,
                            "member": e.op.process, "ack-op": e.op.index, "reason": reason, **detail})
    return out


# --------------------------------------------------------------------------- policy


ANOMALIES: dict[str, Callable[[ShareHistory | ShareAnalysis], list[dict]]] = {
    "concurrent-acquisition": concurrent_acquisition_cases,
    "redelivery-after-ack": redelivery_after_ack_cases,
    "delivery-count-above-limit": delivery_count_above_limit_cases,
    "delivery-count-decrease": delivery_count_decrease_cases,
    "delivery-count-stall": delivery_count_stall_cases,
    "spso-regression": spso_regression_cases,
    "acquired-below-spso": acquired_below_spso_cases,
    "lost-record": lost_record_cases,
    "unsettled": unsettled_cases,
    "non-holder-ack": non_holder_ack_cases,
}
"""Error type -> function producing exactly the error maps of that type."""

INDETERMINATE: frozenset[str] = frozenset({"unsettled"})


def allowed_error_types(*, failover: bool = False, close_decrements_count: bool = False) -> frozenset[str]:
    """Error types that are normal for a run: ``failover`` (leader changes during the run:
    counts may go down, KIP-932 DELIVERY.002), ``close_decrements_count`` (Kafka 4.1.2:
    a closed session's released records keep their count, KAFKA-17541)."""
    allowed: set[str] = set()
    if failover:
        allowed |= {"delivery-count-decrease", "delivery-count-stall"}
    if close_decrements_count:
        allowed.add("delivery-count-stall")
    return frozenset(allowed)


def check(history: ShareHistory, allowed: Iterable[str] = (), indeterminate: Iterable[str] = INDETERMINATE, *,
          delivery_limit: int = DEFAULT_DELIVERY_LIMIT, lock_duration_ms: int | None = None,
          max_examples: int = 3) -> CheckResult:
    """Run every anomaly function; False if a type outside ``allowed`` and
    ``indeterminate`` was found, "unknown" if only indeterminate ones were (or nothing was
    ever acquired), True otherwise. ``lock_duration_ms`` None: locks never expire as far
    as the checker knows (no expiry-based conclusions)."""
    unknown = set(allowed) - set(ANOMALIES)
    if unknown:
        raise ValueError(f"unknown error types in allowed: {sorted(unknown)}")
    a = analyze(history, delivery_limit, lock_duration_ms)
    errors = {name: fn(a) for name, fn in ANOMALIES.items()}
    settled = {rec: _settlement(a, rec) for rec in a.produced}
    stats = {
        "ops": len(a.ops),
        "ok": sum(op.type == OK for op in a.ops),
        "fail": sum(op.type == FAIL for op in a.ops),
        "info": sum(op.type == INFO for op in a.ops),
        "produced": len(a.produced),
        "deliveries": sum(len(v) for v in a.acquisitions.values()),
        "redeliveries": sum(max(0, len(v) - 1) for v in a.acquisitions.values()),
        "acknowledged": sum(1 for why in settled.values() if why == "acknowledged"),
        "archived-at-limit": sum(1 for why in settled.values() if why == "archived at the delivery limit"),
        "ack-outcome-unknown": sum(1 for why in settled.values() if why == "acknowledgement outcome unknown"),
        "fetch-outcome-unknown": sum(1 for why in settled.values() if why == "fetch outcomes unknown"),
        "members": len({op.process for op in a.ops if op.f != "produce"}),
    }
    return decide(errors, allowed, indeterminate, evidence=bool(a.acquisitions),
                  max_examples=max_examples, stats=stats)


__all__ = ["ANOMALIES", "DEFAULT_DELIVERY_LIMIT", "INDETERMINATE", "REQUIREMENTS", "SETTLING", "ShareAnalysis", "allowed_error_types",
           "analyze", "check", *[fn.__name__ for fn in ANOMALIES.values()]]
