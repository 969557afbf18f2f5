"""Operation histories for share-group (KIP-932) workloads (pure data, no I/O).

Same grammar as ``checkers.history`` (invoke, then one ``ok`` / ``fail`` / ``info``
completion of the same process; an invocation that never completes counts as ``info``),
with the operations of a share group. A *process* is one member incarnation: a member that
crashes and comes back is a new process.

``f`` and ``value`` (keys are topic-partitions, ``"topic-partition"`` strings)::

    produce  invoke {key: [value, ...]}           ok {key: [[offset, value], ...]}
    fetch    invoke None                          ok {key: [[offset, value, delivery_count], ...]}
    ack      invoke {key: [[offset, type], ...]}  completion repeats it; type is
             "accept" | "release" | "reject" (1, 2, 3 are accepted and normalised)
    spso     invoke None                          ok {key: spso}   (an observed start offset)
    join, leave, crash: no value. ``leave`` is a clean close (acquired records go back),
             ``crash`` an abrupt end (connection dropped, process killed): what it held
             comes back when the broker notices or the lock expires.

A ``fetch`` completion lists the records the member *acquired* (ShareFetch
AcquiredRecords, or what a client's poll returned). An ``ack`` completion is ``ok`` when
the broker accepted the acknowledgement, ``fail`` when it refused it (error
INVALID_RECORD_STATE ...), ``info`` when the outcome is unknown. Recorders write one ack
op per partition (a ShareAcknowledge answers per partition).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Mapping

from rules.share import ack_name
from checkers.history import COMPLETION_TYPES, INFO, INVOKE, NEMESIS_FS, OK, HistoryError, History, Key, Op, key_of
from checkers.history import Completed as BaseCompleted

__all__ = [
    "ACK_TYPES", "FS", "AckEntry", "Acquisition", "Completed", "ShareHistory", "ShareHistoryBuilder",
    "ShareOp", "ShareRecorder", "ack_entries_of", "ack_type", "acquisitions_of", "from_json", "to_json",
]

FS = ("produce", "fetch", "ack", "spso", "join", "leave", "crash") + NEMESIS_FS  # faults recorded alongside
ACK_TYPES = ("accept", "release", "reject")


def ack_type(t: Any) -> str:
    """Canonical acknowledgement type name (``1`` / ``"ACCEPT"`` -> ``"accept"``)."""
    if isinstance(t, (int, str)) and not isinstance(t, bool):
        try:
            name = ack_name(t)
        except (KeyError, ValueError):
            name = None
        if name in ACK_TYPES:
            return name
    raise HistoryError(f"acknowledgement type must be accept/release/reject (1/2/3), got {t!r}")


def _int(x: Any, what: str) -> int:
    if not isinstance(x, int) or isinstance(x, bool):
        raise HistoryError(f"{what} must be an int, got {x!r}")
    return x


def _by_key(value: Any, f: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise HistoryError(f"{f} value must be a {{key: ...}} map, got {value!r}")
    return value


def _canon_value(f: str, type_: str, value: Any) -> Any:
    if value is None:
        return None
    if f == "produce":
        out = {}
        for k, vs in _by_key(value, f).items():
            if type_ == OK:
                out[key_of(k)] = [[_int(p[0], "produce offset"), p[1]] for p in vs]
            else:
                out[key_of(k)] = [v[1] if isinstance(v, (list, tuple)) else v for v in vs]
        return out
    if f == "fetch":
        out = {}
        for k, recs in _by_key(value, f).items():
            canon = []
            for rec in recs:
                if not isinstance(rec, (list, tuple)) or len(rec) != 3:
                    raise HistoryError(f"fetch records are [offset, value, delivery_count]: {rec!r}")
                canon.append([_int(rec[0], "offset"), rec[1], _int(rec[2], "delivery count")])
            out[key_of(k)] = canon
        return out
    if f == "ack":
        out = {}
        for k, entries in _by_key(value, f).items():
            canon = []
            for e in entries:
                if not isinstance(e, (list, tuple)) or len(e) != 2:
                    raise HistoryError(f"ack entries are [offset, type]: {e!r}")
                canon.append([_int(e[0], "offset"), ack_type(e[1])])
            out[key_of(k)] = canon
        return out
    if f == "spso":
        return {key_of(k): _int(o, "spso") for k, o in _by_key(value, f).items()}
    return value


@dataclass(frozen=True, eq=True)
class ShareOp(Op):
    """A share-group history entry: the operations `FS`, values canonicalised per `f`."""

    FS: ClassVar[tuple[str, ...]] = FS
    __hash__ = None  # type: ignore[assignment]

    @staticmethod
    def canon_value(f: str, type_: str, value: Any) -> Any:
        return _canon_value(f, type_, value)


@dataclass(frozen=True)
class Completed(BaseCompleted):
    """An invocation and its completion (None: never completed, counts as info)."""

    @property
    def start(self) -> int:
        """History index of the invocation: the op cannot have taken effect before it."""
        return self.invoke.index

    @property
    def end(self) -> float:
        """History index of the completion (infinity if none): the op took effect before it."""
        return self.end_index


@dataclass(frozen=True)
class Acquisition:
    """One record acquired by one fetch."""

    key: Key
    offset: int
    value: Any
    delivery_count: int
    op: Completed


@dataclass(frozen=True)
class AckEntry:
    key: Key
    offset: int
    ack: str
    op: Completed


@dataclass(frozen=True)
class ShareHistory(History):
    ops: tuple[ShareOp, ...] = field(default_factory=tuple)

    op_class: ClassVar[type[Op]] = ShareOp
    completed_class: ClassVar[type[BaseCompleted]] = Completed


def acquisitions_of(op: Completed) -> list[Acquisition]:
    """Records an ok fetch acquired (a failed or unknown fetch proves nothing)."""
    if op.f != "fetch" or op.type != OK:
        return []
    return [Acquisition(k, o, v, c, op) for k, recs in op.value.items() for o, v, c in recs]


def ack_entries_of(op: Completed) -> list[AckEntry]:
    if op.f != "ack" or not op.value:
        return []
    return [AckEntry(k, o, t, op) for k, entries in op.value.items() for o, t in entries]


def to_json(history: ShareHistory, indent: int | None = None) -> str:
    return json.dumps(history.to_list(), indent=indent)


def from_json(text: str) -> ShareHistory:
    data = json.loads(text)
    if not isinstance(data, list):
        raise HistoryError("a share history is a JSON array of ops")
    return ShareHistory.from_list(data).validate()


class ShareHistoryBuilder:
    """Write histories op by op: ``invoke`` / ``complete`` for interleavings, and one-call
    helpers (``fetch``, ``ack``, ``produce``, ``spso``, ``join``, ``leave``, ``crash``)
    that append an invocation and its completion. ``time_ns`` comes from ``clock``
    (default: a counter advancing ``step_ns`` per op)."""

    def __init__(self, start_ns: int = 0, step_ns: int = 1_000_000, clock: Any = None) -> None:
        self._ops: list[ShareOp] = []
        self._t = start_ns
        self._step = step_ns
        self._clock = clock

    def _now(self) -> int:
        if self._clock is not None:
            return int(self._clock())
        t, self._t = self._t, self._t + self._step
        return t

    def _append(self, process: Any, type_: str, f: str, value: Any, error: Any = None) -> ShareOp:
        op = ShareOp(len(self._ops), self._now(), process, type_, f, value, error)
        self._ops.append(op)
        return op

    def invoke(self, process: Any, f: str, value: Any = None) -> ShareOp:
        return self._append(process, INVOKE, f, value)

    def complete(self, inv: ShareOp, type_: str, value: Any = None, error: Any = None) -> ShareOp:
        if type_ not in COMPLETION_TYPES:
            raise HistoryError(f"completion type must be one of {COMPLETION_TYPES}, got {type_!r}")
        if value is None and inv.f in ("ack", "join", "leave", "crash"):
            value = inv.value
        return self._append(inv.process, type_, inv.f, value, error)

    def produce(self, process: Any, key: Any, pairs: Iterable[tuple[int, Any]]) -> ShareOp:
        pairs = [[o, v] for o, v in pairs]
        inv = self.invoke(process, "produce", {key_of(key): [v for _, v in pairs]})
        return self.complete(inv, OK, {key_of(key): pairs})

    def fetch(self, process: Any, records: Mapping[Any, Iterable[tuple[int, Any, int]]]) -> ShareOp:
        inv = self.invoke(process, "fetch")
        return self.complete(inv, OK, {key_of(k): [list(r) for r in rs] for k, rs in records.items()})

    def ack(self, process: Any, key: Any, entries: Iterable[tuple[int, Any]], type_: str = OK,
            error: Any = None) -> ShareOp:
        inv = self.invoke(process, "ack", {key_of(key): [list(e) for e in entries]})
        return self.complete(inv, type_, error=error)

    def spso(self, process: Any, key: Any, offset: int) -> ShareOp:
        inv = self.invoke(process, "spso")
        return self.complete(inv, OK, {key_of(key): offset})

    def join(self, process: Any) -> ShareOp:
        return self.complete(self.invoke(process, "join"), OK)

    def leave(self, process: Any) -> ShareOp:
        return self.complete(self.invoke(process, "leave"), OK)

    def crash(self, process: Any) -> ShareOp:
        return self.complete(self.invoke(process, "crash"), INFO, error="crashed")

    def build(self) -> ShareHistory:
        return ShareHistory(tuple(self._ops)).validate()


class ShareRecorder(ShareHistoryBuilder):
    """A builder stamped with wall-clock nanoseconds, for recording live runs; safe to use
    from one thread at a time (the client tests drive members from one thread)."""

    def __init__(self) -> None:
        super().__init__(clock=time.time_ns)
